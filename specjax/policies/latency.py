"""Target verify-latency profile: seconds per target forward over ``gamma + 1``
tokens per row, for each (batch size, gamma), measured on the running machine
(docs/spec.md §5: ``goodput(gamma) = (E[N|gamma] + 1) / latency(gamma)``).

Measurement: a jitted ``target.apply`` over ``[B, gamma + 1]`` new tokens with
a cache of ``cache_length`` slots of which ``context_length`` are committed
(the attention reads the whole static cache, as the loop does), compiled
once, then ``repeats`` timed calls with ``block_until_ready``; the median is
stored.  Latency must be profiled under the conditions it will be used in
(docs/spec.md §5) -- measure on the machine, with the batch
sizes and cache length of the run.

A profile is JSON; :func:`load_profile` refuses one made for a different
model config, cache length or device (``ValueError`` naming the mismatch).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import time
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.policies.calibration import config_hash

PROFILE_FORMAT = "specjax.latency_profile/1"


@dataclasses.dataclass(frozen=True)
class LatencyProfile:
  """Attributes:
    config_hash: :func:`config_hash` of the target's ModelConfig.
    model_config: the config's fields (informative).
    cache_length: cache slots of the timed forward.
    context_length: committed tokens per row during timing.
    device: ``device_kind`` of the timing device; platform: "cpu" | "gpu" | "tpu".
    batch_sizes: sorted measured batch sizes.
    gammas: measured verify lengths (the forward ran over gamma + 1 tokens per row).
    latency_s: [len(batch_sizes)][len(gammas)] median seconds.
  """

  config_hash: str
  model_config: dict
  cache_length: int
  context_length: int
  device: str
  platform: str
  batch_sizes: tuple
  gammas: tuple
  latency_s: tuple
  repeats: int = 0

  def to_json(self) -> dict:
    d = dataclasses.asdict(self)
    d["format"] = PROFILE_FORMAT
    return d

  @classmethod
  def from_json(cls, d: dict) -> "LatencyProfile":
    if d.get("format") != PROFILE_FORMAT:
      raise ValueError(f"not a latency profile (format {d.get('format')!r}, "
                       f"expected {PROFILE_FORMAT!r})")
    fields = {f.name for f in dataclasses.fields(cls)}
    kw = {k: v for k, v in d.items() if k in fields}
    kw["batch_sizes"] = tuple(int(b) for b in kw["batch_sizes"])
    kw["gammas"] = tuple(int(g) for g in kw["gammas"])
    kw["latency_s"] = tuple(tuple(float(v) for v in row) for row in kw["latency_s"])
    return cls(**kw)

  def linear_fit(self) -> "LatencyProfile":
    """This profile with each batch size's latencies replaced by a non-decreasing
    least-squares line in gamma (slope clipped at 0, through the mean).  Single
    noisy points on a loaded CPU (e.g. gamma = 1 slower than gamma = 2) would
    otherwise stall SV's goodput search."""
    g = np.asarray(self.gammas, np.float64)
    rows = []
    for row in self.latency_s:
      slope = max(float(np.polyfit(g, np.asarray(row), 1)[0]), 0.0) if len(g) > 1 else 0.0
      icpt = float(np.mean(row) - slope * g.mean())
      rows.append(tuple(float(max(icpt + slope * v, 1e-6)) for v in g))
    return dataclasses.replace(self, latency_s=tuple(rows))

  def latency_vector(self, batch_size: int, k: int, monotone: bool = True) -> np.ndarray:
    """Latency (s) of verifying gamma = 0..K drafts at ``batch_size``: float64 [K+1].

    Linear interpolation over the measured gammas and batch sizes; ``ValueError``
    if ``batch_size`` or K lies outside the measured range.  ``monotone`` replaces
    each entry by the running maximum over gamma (more tokens never cost less;
    this removes timing noise that would stall the goodput hill-climb).
    """
    bs, gs = np.asarray(self.batch_sizes), np.asarray(self.gammas)
    if not bs.min() <= batch_size <= bs.max():
      raise ValueError(f"batch_size={batch_size} outside the profiled range "
                       f"[{bs.min()}, {bs.max()}] (batch sizes {list(self.batch_sizes)})")
    if not (gs.min() <= 0 and k <= gs.max()):
      raise ValueError(f"K={k} needs gammas 0..{k} profiled; the profile has "
                       f"{list(self.gammas)}")
    lat = np.asarray(self.latency_s, np.float64)  # [nB, nG]
    per_g = np.array([np.interp(batch_size, bs, lat[:, j]) for j in range(len(gs))])
    vec = np.interp(np.arange(k + 1), gs, per_g)
    return np.maximum.accumulate(vec) if monotone else vec

  def total_tokens_vector(self, batch_size: int, k: int) -> np.ndarray:
    """Latency (s) as a function of the *total* verified tokens T = 0..B(K+1): [B(K+1)+1].

    The cost model of a packed ragged forward: ``B (gamma + 1)`` tokens cost
    ``latency(B, gamma)``; linear in between, clamped below at ``latency(B, 0)``.
    """
    vec = self.latency_vector(batch_size, k)
    pts = batch_size * (np.arange(k + 1) + 1)
    return np.interp(np.arange(batch_size * (k + 1) + 1), pts, vec)


def _device_info():
  d = jax.devices()[0]
  return getattr(d, "device_kind", str(d)), d.platform


def measure_profile(model, params, *, batch_sizes: Sequence[int], gammas: Sequence[int],
                    cache_length: int, context_length: Optional[int] = None,
                    repeats: int = 5, warmup: int = 1) -> LatencyProfile:
  """Time the target's verify forward for every (batch size, gamma).

  Args:
    model, params: the target (``Model`` and its params).
    batch_sizes: batch sizes B to profile.
    gammas: verify lengths; the forward runs over ``gamma + 1`` tokens per row.
    cache_length: KV slots (the run's cache length).
    context_length: committed tokens per row; default ``cache_length - max(gammas) - 1``.
    repeats: timed calls per point (median kept); warmup: untimed calls after compiling.
  """
  batch_sizes = sorted({int(b) for b in batch_sizes})
  gammas = sorted({int(g) for g in gammas})
  if not batch_sizes or batch_sizes[0] < 1:
    raise ValueError(f"batch_sizes={batch_sizes} must be positive integers")
  if not gammas or gammas[0] < 0:
    raise ValueError(f"gammas={gammas} must be integers >= 0")
  if context_length is None:
    context_length = cache_length - gammas[-1] - 1
  if not 0 <= context_length <= cache_length - gammas[-1] - 1:
    raise ValueError(f"context_length={context_length} must be in [0, cache_length - "
                     f"max(gamma) - 1 = {cache_length - gammas[-1] - 1}]")
  if repeats < 1:
    raise ValueError(f"repeats={repeats} must be >= 1")

  @jax.jit
  def forward(params, tokens, positions, cache):
    return model.apply(params, tokens, positions, cache).logits

  table = []
  for b in batch_sizes:
    cache = model.init_cache(b, cache_length)
    cache = dataclasses.replace(cache, lengths=jnp.full((b,), context_length, jnp.int32))
    row = []
    for g in gammas:
      t = g + 1
      tokens = jnp.ones((b, t), jnp.int32)
      pos = jnp.broadcast_to(context_length + jnp.arange(t, dtype=jnp.int32), (b, t))
      forward(params, tokens, pos, cache).block_until_ready()  # compile
      for _ in range(warmup):
        forward(params, tokens, pos, cache).block_until_ready()
      times = []
      for _ in range(repeats):
        t0 = time.perf_counter()
        forward(params, tokens, pos, cache).block_until_ready()
        times.append(time.perf_counter() - t0)
      row.append(statistics.median(times))
    table.append(tuple(row))
  device, platform = _device_info()
  return LatencyProfile(config_hash(model.config), json.loads(json.dumps(
      dataclasses.asdict(model.config), default=str)), int(cache_length), int(context_length),
                        device, platform, tuple(batch_sizes), tuple(gammas), tuple(table),
                        int(repeats))


def save_profile(path: str, profile: LatencyProfile) -> str:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    json.dump(profile.to_json(), f, indent=2)
  return path


def load_profile(path: str, *, model_config=None, cache_length: Optional[int] = None,
                 device: Optional[str] = "current") -> LatencyProfile:
  """Load a profile, refusing one made for another setup.

  Args:
    model_config: the target's ModelConfig (checked by :func:`config_hash`; the
      differing fields are named).
    cache_length: checked if given.
    device: "current" (default) checks the running device kind; a string
      checks that kind; None skips the check.

  Raises ``ValueError`` naming every mismatch.
  """
  with open(path) as f:
    prof = LatencyProfile.from_json(json.load(f))
  bad = []
  if model_config is not None and config_hash(model_config) != prof.config_hash:
    want = json.loads(json.dumps(dataclasses.asdict(model_config), default=str))
    diff = sorted(k for k in set(want) | set(prof.model_config)
                  if want.get(k) != prof.model_config.get(k))
    bad.append("model config differs in " + ", ".join(
        f"{k} (profile {prof.model_config.get(k)!r}, model {want.get(k)!r})" for k in diff))
  if cache_length is not None and int(cache_length) != prof.cache_length:
    bad.append(f"cache_length: profile {prof.cache_length}, run {cache_length}")
  if device == "current":
    device = _device_info()[0]
  if device is not None and device != prof.device:
    bad.append(f"device: profile {prof.device!r}, running on {device!r}")
  if bad:
    raise ValueError(f"latency profile {path} does not match this setup: " + "; ".join(bad))
  return prof
