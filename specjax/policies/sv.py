"""Speculative Verification (SV): a companion LM scores the K drafts, a
calibrated table turns its signals into per-position acceptance estimates, and
a goodput search picks how many drafts each row verifies (docs/spec.md
§5).

Per step and row, with ``P_d = q`` (the drafter's distributions) and ``P_c``
the companion's (after ``companion_sampling``):

* ``S_i = sum_v min(P_d,i(v), P_c,i(v))``   (1 - total variation),
* ``A_i = min(1, P_c,i(x_i) / P_d,i(x_i))``,
* ``P_hat_i = table(S_i, A_i)``  (:mod:`specjax.policies.calibration`),
* ``E[N|gamma] = sum_{n=1..gamma} prod_{i<=n} P_hat_i``,
* ``goodput(gamma) = (E[N|gamma] + 1) / latency(gamma)``.

Row mode (docs/spec.md §5): search gamma = 1, 2, ... and stop at the
first decrease of goodput (``gamma_search="from1_decrease"``, the default:
every active row verifies at least one draft, ties continue).  The earlier
form, ``gamma_search="from0_nonincrease"``, climbs from gamma = 0 while goodput
strictly rises (so gamma = 0 when goodput(1) <= goodput(0)), kept as an
option.  ``latency(gamma)`` is the profile's latency for the running batch
size with every row verifying gamma.

Batch mode (docs/spec.md §5), the batch goodput is
``sum_b (E[N_b|gamma_b] + 1) / latency(batch)`` over active rows, and the cost
model is a static choice (``batch_cost``):

* ``"max"`` (default; what the bucketed loop really costs): the target runs
  over ``bucket(max_b gamma_b) + 1`` tokens for every row, so the latency is
  ``latency(B, bucket)``.  Inside the current bucket every extra token is free
  and raises expected tokens, so greedy token-by-token allocation first fills
  every row up to the bucket; the only cost-changing move is to open the next
  bucket.  The greedy step is therefore one bucket level (the smallest
  increment that changes the cost), and greedy stops at the first level whose
  batch goodput falls.  All active rows get ``gamma = level``.
* ``"total"``: a packed ragged forward whose latency depends on the total
  verified tokens ``T = sum_b (gamma_b + 1)`` (``LatencyProfile.
  total_tokens_vector``).  Every candidate token costs the same, so greedy adds
  the largest marginal ``prod_{i<=gamma_b+1} P_hat_i`` across rows while the
  batch goodput strictly rises; a row may verify 0 drafts (it still gets the
  target's one token).  Use it with a loop that packs tokens; with the
  bucketed loop its savings are only those of ``bucket(max gamma)``.

Row groups (``group_size``; batch mode and ``fill_bucket``, the two choices
that couple rows).  Rows interact only inside fixed groups of ``group_size``
consecutive *global* rows (rows ``0..G-1``, ``G..2G-1``, ...): the greedy
allocation above runs independently per group, with the group as "the batch",
and ``fill_bucket`` raises a row to the bucket of its group's largest gamma.
Groups never straddle devices (:meth:`SpeculativeVerification.check_rows`
requires the batch and the per-device row count to be multiples of G), so a
row's gamma -- and with the per-row RNG, its tokens -- are the same however
the rows are split over devices.  The cost model stays the device's: under
``"total"`` a group's ``T_g`` verified tokens are priced as the device batch
with every group alike, ``latency_total(B_dev, T_g * B_dev / G)``
(:meth:`~SpeculativeVerification.make_params` builds that [G(K+1)+1] vector);
under ``"max"`` the per-level latency ratios are the device's.  Pass the same
params to every run for split-independent results.  Only the ``processed_tokens``
statistic still depends on the split: the loop's forward runs the bucket of
the largest gamma on each device, which is the real cost.  ``group_size=None``
(default) makes the whole batch one group, as in the paper; a run that couples
rows then refuses a mesh with more than one ``data`` device.

Exactness (``table_signals``).  ``P_hat_i`` from ``(S_i, A_i)`` (``"SA"``, the
paper's table, the default) reads ``A_i``, which looks at the drafted token
``x_i`` itself: the drafts that get verified are then no longer distributed as
``q`` and lossless verification under SV is biased towards tokens the
companion likes (exact TV 0.074 in the setup of
``tests/verifiers/test_statistical_power.py``, which the sampled verifications reproduce).
``P_hat_i`` from ``S_i`` alone (``"S"``) depends only on the drafts before
position ``i``, so every lossless rule stays exact (tested).  ``"S"`` needs a
table with a single ``A`` bin (``a_edges == [0, 1]``; ``experiments/
calibrate_sv.py`` fits one next to each ``(S, A)`` table).

Companion cache protocol (like :class:`~specjax.decoding.drafters.LMDrafter`):
it holds the committed context minus the target's last cached token; ``choose``
runs ONE forward over ``[prev, last, x_1..x_K]`` at positions ``L-1 .. L+K``
(written, not committed) and ``commit`` sets its length to
``target_length - 1`` -- the accepted drafts' entries are already in place.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.drafters import lm_commit, lm_prefill
from specjax.distributions import SamplingConfig, probs_from_logits
from specjax.models import kv_cache as kvc
from specjax.models.transformer import Model
from specjax.decoding.buckets import round_up
from specjax.policies.base import BucketedPolicy, check_group_size, check_row_groups
from specjax.policies.calibration import CalibrationTable
from specjax.verifiers.base import safe_ratio

MODES = ("row", "batch")
BATCH_COSTS = ("max", "total")
GAMMA_SEARCHES = ("from1_decrease", "from0_nonincrease")
TABLE_SIGNALS = ("SA", "S")


def _per_group(fn, group_size: int, *rows):
  """``fn`` applied to consecutive groups of ``group_size`` rows of ``rows`` (each
  ``[B, ...]``, B a multiple of ``group_size``) -> the ``[B]`` results concatenated."""
  b = rows[0].shape[0]
  grouped = [r.reshape((b // group_size, group_size) + r.shape[1:]) for r in rows]
  return jax.vmap(fn)(*grouped).reshape(b)


# --- pure pieces (also used by tests and analysis) ------------------------------------------


def companion_signals(p_d: jax.Array, p_c: jax.Array, x: jax.Array):
  """``S``, ``A`` ``[..]`` from the draft and companion distributions ``[.., V]``, tokens ``x``."""
  s = jnp.sum(jnp.minimum(p_d, p_c), axis=-1)
  pdx = jnp.take_along_axis(p_d, x[..., None], axis=-1)[..., 0]
  pcx = jnp.take_along_axis(p_c, x[..., None], axis=-1)[..., 0]
  return s, safe_ratio(pcx, pdx)


def expected_accepted(p_hat: jax.Array) -> jax.Array:
  """``E[N|gamma]`` for gamma = 0..K from ``p_hat [..., K]`` -> ``[..., K+1]`` (E[N|0] = 0)."""
  c = jnp.cumsum(jnp.cumprod(p_hat, axis=-1), axis=-1)
  return jnp.concatenate([jnp.zeros_like(c[..., :1]), c], axis=-1)


def goodput(p_hat: jax.Array, latency: jax.Array) -> jax.Array:
  """``(E[N|gamma] + 1) / latency(gamma)``, gamma = 0..K (``p_hat [..., K]``, ``latency [K+1]``)."""
  return (expected_accepted(p_hat) + 1.0) / latency


def hill_climb(values: jax.Array) -> jax.Array:
  """Index reached by climbing ``values[..., 0], values[..., 1], ...`` while they strictly
  rise: the number of leading rises (stops at the first non-increase). int32 ``[...]``."""
  rises = values[..., 1:] > values[..., :-1]
  return jnp.sum(jnp.cumprod(rises.astype(jnp.int32), axis=-1), axis=-1).astype(jnp.int32)


def climb_until_decrease(values: jax.Array) -> jax.Array:
  """Index reached by climbing ``values[..., 0], values[..., 1], ...`` until the first
  decrease (ties continue): the number of leading non-decreases. int32 ``[...]``."""
  steps = values[..., 1:] >= values[..., :-1]
  return jnp.sum(jnp.cumprod(steps.astype(jnp.int32), axis=-1), axis=-1).astype(jnp.int32)


def choose_row(p_hat: jax.Array, latency: jax.Array, active: jax.Array,
               search: str = "from1_decrease") -> jax.Array:
  """Row mode gamma per row. ``p_hat [B, K]``, ``latency [K+1]`` -> ``[B]`` (0 if inactive).

  ``search="from1_decrease"`` (docs/spec.md §5, default): gamma = 1, 2, ... until goodput
  first decreases; ``"from0_nonincrease"``: from gamma = 0 while it strictly rises.
  """
  if search not in GAMMA_SEARCHES:
    raise ValueError(f"search={search!r}; choose one of {GAMMA_SEARCHES}")
  g = goodput(p_hat, latency)  # [B, K+1], gamma = 0..K
  if search == "from1_decrease":
    gamma = 1 + climb_until_decrease(g[..., 1:])
  else:
    gamma = hill_climb(g)
  return jnp.where(active, gamma, 0).astype(jnp.int32)


def choose_batch_max(p_hat: jax.Array, latency: jax.Array, active: jax.Array,
                     buckets: tuple) -> jax.Array:
  """Batch mode, bucketed-max cost: greedy over bucket levels (module docstring). ``[B]``."""
  en = expected_accepted(p_hat)  # [B, K+1]
  levels = jnp.asarray(buckets, jnp.int32)
  tokens = jnp.sum(jnp.where(active[:, None], en[:, levels] + 1.0, 0.0), axis=0)  # [nb]
  g = tokens / latency[levels]
  level = levels[hill_climb(g)]
  return jnp.where(active, level, 0).astype(jnp.int32)


def choose_batch_total(p_hat: jax.Array, latency_total: jax.Array,
                       active: jax.Array) -> jax.Array:
  """Batch mode, total-token cost: greedy across rows by marginal gain (module docstring).

  ``latency_total [B(K+1)+1]`` is indexed by the total verified tokens. ``[B]``.
  """
  b, k = p_hat.shape
  marg = jnp.where(active[:, None], jnp.cumprod(p_hat, axis=-1), -1.0)  # [B, K] gains
  # Position-major order: ties go to the earlier draft position, then the lower row
  # (round robin over rows); a row's marginals never increase, so every row's
  # selection is a prefix.
  flat = marg.T.reshape(-1)
  order = jnp.argsort(-flat, stable=True)
  gains = jnp.concatenate([jnp.zeros((1,), flat.dtype), jnp.cumsum(flat[order])])  # [BK+1]
  n_act = jnp.sum(active).astype(jnp.int32)
  total = n_act + jnp.arange(b * k + 1)
  g = (n_act + gains) / latency_total[jnp.minimum(total, latency_total.shape[0] - 1)]
  t_star = hill_climb(g)
  rank = jnp.zeros((b * k,), jnp.int32).at[order].set(jnp.arange(b * k, dtype=jnp.int32))
  take = (rank < t_star).reshape(k, b).T
  return jnp.where(active, jnp.sum(take, axis=1), 0).astype(jnp.int32)


# --- the policy -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SpeculativeVerification(BucketedPolicy):
  """SV verify-length policy (see the module docstring).

  Attributes:
    num_draft: K.
    companion: the companion ``Model`` (same vocabulary as the drafter).
    mode: "row" (per-row goodput search) or "batch" (greedy across rows).
    gamma_search: row mode's search, "from1_decrease" (docs/spec.md §5, default) or
      "from0_nonincrease" (the earlier form; may verify 0 drafts).
    batch_cost: "max" (bucketed forward) or "total" (packed tokens); batch mode only.
    companion_sampling: processors turning companion logits into ``P_c``
      (default T = 1; with greedy drafts, q is one-hot and S = A = P_c(x)).
    verify_buckets: static verify lengths; default ``(0, 1, 2, 4, ..., K)``.
    fill_bucket: raise every active row's gamma to the bucket of its group's
      largest gamma (free under the bucketed forward; default False keeps the
      paper's per-row choice).
    group_size: G, rows coupled by batch mode and ``fill_bucket`` (see "Row
      groups" in the module docstring); None (default): the whole batch, on
      one device only.
    table_signals: "SA" (the paper: ``P_hat(S, A)``; not exact under lossless
      verification, see "Exactness") or "S" (``P_hat(S)``, a one-A-bin table;
      keeps lossless rules exact).

  Params (:meth:`make_params`): ``{"companion": companion params, "table":
  CalibrationTable, "latency": [K+1] s for gamma = 0..K at the run's batch
  size, "latency_total": [G(K+1)+1] s by a group's total tokens}``.
  """

  companion: Optional[Model] = None
  mode: str = "row"
  batch_cost: str = "max"
  gamma_search: str = "from1_decrease"
  companion_sampling: SamplingConfig = SamplingConfig(temperature=1.0)
  fill_bucket: bool = False
  group_size: Optional[int] = None
  table_signals: str = "SA"

  def __post_init__(self):
    super().__post_init__()
    if not isinstance(self.companion, Model):
      raise ValueError("SpeculativeVerification needs companion=Model(...)")
    if self.mode not in MODES:
      raise ValueError(f"mode={self.mode!r}; choose one of {MODES}")
    if self.batch_cost not in BATCH_COSTS:
      raise ValueError(f"batch_cost={self.batch_cost!r}; choose one of {BATCH_COSTS}")
    if self.gamma_search not in GAMMA_SEARCHES:
      raise ValueError(f"gamma_search={self.gamma_search!r}; choose one of {GAMMA_SEARCHES}")
    if self.table_signals not in TABLE_SIGNALS:
      raise ValueError(f"table_signals={self.table_signals!r}; choose one of {TABLE_SIGNALS}")
    if not isinstance(self.companion_sampling, SamplingConfig):
      raise ValueError("companion_sampling must be a SamplingConfig")
    check_group_size(self.group_size)

  @property
  def couples_rows(self) -> bool:
    """Whether one row's gamma depends on other rows (batch mode or ``fill_bucket``)."""
    return self.mode == "batch" or self.fill_bucket

  def check_rows(self, num_rows: int, rows_per_device: int, num_devices: int) -> None:
    """Refuse a split over devices that would change a row's gamma (module docstring)."""
    if self.couples_rows:
      check_row_groups(
          f"SpeculativeVerification(mode={self.mode!r}, fill_bucket={self.fill_bucket})",
          self.group_size, num_rows, rows_per_device, num_devices)

  def make_params(self, companion_params, table: CalibrationTable, profile,
                  batch_size: int) -> dict:
    """Policy params for a run with ``batch_size`` rows (per device when sharded).

    ``profile`` is a :class:`~specjax.policies.latency.LatencyProfile` or an
    array of K+1 latencies (gamma = 0..K) for that batch size.  With
    ``group_size`` G, ``latency_total`` has G(K+1)+1 entries: entry ``t`` is the
    device latency at ``t * batch_size / G`` total tokens (``batch_size`` must
    be a multiple of G).
    """
    k = self.num_draft
    g = batch_size if self.group_size is None else self.group_size
    if batch_size % g:
      raise ValueError(f"batch_size={batch_size} must be a multiple of group_size={g}")
    if hasattr(profile, "latency_vector"):
      lat = profile.latency_vector(batch_size, k)
      lat_tot = profile.total_tokens_vector(batch_size, k)
    else:
      lat = np.asarray(profile, np.float64)
      if lat.shape != (k + 1,):
        raise ValueError(f"latency must have K+1 = {k + 1} entries, got shape {lat.shape}")
      pts = batch_size * (np.arange(k + 1) + 1)
      lat_tot = np.interp(np.arange(batch_size * (k + 1) + 1), pts, lat)
    if np.any(lat <= 0):
      raise ValueError(f"latencies must be > 0, got {lat}")
    n_a = int(np.shape(table.a_edges)[0]) - 1
    if self.table_signals == "S" and n_a != 1:
      raise ValueError(
          f"table_signals='S' needs a table fitted on S only (one A bin, a_edges [0, 1]); "
          f"this table has {n_a} A bins -- use the *_S table that calibrate_sv writes, or "
          "table_signals='SA'")
    lat_tot = np.asarray(lat_tot)[np.arange(g * (k + 1) + 1) * (batch_size // g)]
    return {"companion": companion_params, "table": table,
            "latency": jnp.asarray(lat, jnp.float32),
            "latency_total": jnp.asarray(lat_tot, jnp.float32)}

  # --- protocol -------------------------------------------------------------------------------

  def init(self, params, tokens, lengths, cache_length: int) -> kvc.KVCache:
    """Companion prefill: its cache holds ``prompt[:-1]`` (as ``LMDrafter.prefill``)."""
    return lm_prefill(self.companion, params["companion"], tokens, lengths, cache_length)

  def signals(self, params, state: kvc.KVCache, prev, last, x, q):
    """One companion forward -> ``(S [B,K], A [B,K], P_hat [B,K], cache)`` (cache uncommitted)."""
    b, k = x.shape
    if k != self.num_draft:
      raise ValueError(f"got {k} drafts per row; the policy was built for K={self.num_draft}")
    if q.shape[-1] != self.companion.config.vocab_size:
      raise ValueError(f"draft vocab {q.shape[-1]} != companion vocab_size "
                       f"{self.companion.config.vocab_size}")
    toks = jnp.concatenate([prev[:, None], last[:, None], x], axis=1)  # [B, K+2]
    pos = state.lengths[:, None] + jnp.arange(k + 2, dtype=jnp.int32)[None, :]
    idx = jnp.broadcast_to(jnp.arange(1, k + 1, dtype=jnp.int32), (b, k))
    out = self.companion.apply(params["companion"], toks, pos, state, logits_index=idx)
    p_c = probs_from_logits(out.logits, self.companion_sampling)  # [B, K, V]
    s, a = companion_signals(q, p_c, x)
    # "S": the one A bin, so P_hat_i never reads x_i (module docstring, "Exactness").
    p_hat = params["table"].lookup(s, a if self.table_signals == "SA" else jnp.zeros_like(a))
    return s, a, p_hat, out.cache

  def choose(self, params, state, prev, last, proposal, active):
    s, a, p_hat, cache = self.signals(params, state, prev, last, proposal.tokens, proposal.q)
    b = proposal.tokens.shape[0]
    g = b if self.group_size is None else self.group_size
    if b % g:
      raise ValueError(f"choose got {b} rows, not a multiple of group_size={g}")
    if self.mode == "row":
      gamma = choose_row(p_hat, params["latency"], active, self.gamma_search)
    elif self.batch_cost == "max":
      gamma = _per_group(lambda p, a: choose_batch_max(p, params["latency"], a, self.buckets),
                         g, p_hat, active)
    else:
      gamma = _per_group(lambda p, a: choose_batch_total(p, params["latency_total"], a),
                         g, p_hat, active)
    if self.fill_bucket:
      def fill(gm, a):
        gmax = jnp.max(jnp.where(a, gm, 0))
        return jnp.where(a, round_up(self.buckets, gmax[None])[0], 0)
      gamma = _per_group(fill, g, gamma, active)
    en = jnp.take_along_axis(expected_accepted(p_hat), gamma[:, None], axis=1)[:, 0]
    return gamma.astype(jnp.int32), cache, {"S": s, "A": a, "p_hat": p_hat,
                                            "expected_accepted": en}

  def commit(self, state: kvc.KVCache, target_lengths):
    """Keep the target's committed context minus its last token (re-read next step)."""
    return lm_commit(state, target_lengths)


def uninformative_table(p: float = 0.5) -> CalibrationTable:
  """A 1x1 table predicting ``p`` everywhere (for smoke tests before calibration)."""
  edges = jnp.asarray([0.0, 1.0], jnp.float32)
  return CalibrationTable(edges, edges, jnp.full((1, 1), p, jnp.float32))


def load_sv_params(policy: SpeculativeVerification, companion_params, table_path: str,
                   profile_path: str, batch_size: int, *, models: dict, verifier=None,
                   target_config=None, cache_length=None, device="current", **expected) -> dict:
  """Policy params from a saved calibration table and latency profile, with the
  identity checks of :func:`~specjax.policies.calibration.load_table` (``models``:
  ``triple_id(...)``; ``verifier``: ``repr(rule)`` as the calibration binary stores
  it) and :func:`~specjax.policies.latency.load_profile` (``target_config``,
  ``cache_length``, ``device``)."""
  from specjax.policies.calibration import load_table
  from specjax.policies.latency import load_profile
  fitted, _ = load_table(table_path, models=models,
                         verifier=None if verifier is None else str(verifier), **expected)
  profile = load_profile(profile_path, model_config=target_config, cache_length=cache_length,
                         device=device)
  return policy.make_params(companion_params, fitted.table(), profile, batch_size)
