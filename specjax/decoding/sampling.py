"""Logits processors with Hugging Face semantics, and sampling helpers.

Order (as in ``transformers`` ``GenerationMixin._get_logits_processor``):
temperature -> top-k -> top-p -> min-p -> eta.  Temperature 0 means greedy:
the distribution is one-hot at the argmax of the raw logits.

Every function works on logits ``[..., V]``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from specjax.checks import check_int, check_range
from specjax.hyperparams import Hyperparams

NEG_INF = -jnp.inf


class _Switches(NamedTuple):
  """Static control flow of a :class:`SamplingConfig`, fixed at construction."""

  greedy: bool  # temperature == 0: argmax, no processors
  top_p: bool  # top_p < 1
  min_p: bool  # min_p > 0
  eta: bool  # eta > 0


@dataclasses.dataclass(frozen=True)
class SamplingConfig(Hyperparams):
  """Sampling hyperparameters: a pytree whose continuous values are traced.

  ``temperature``, ``top_p``, ``min_p`` and ``eta`` are pytree leaves (float32
  scalars under jit): ``generate`` / ``speculative_generate`` compile once for
  every temperature > 0, every top-p < 1, ...  Static (part of the
  compilation key): ``top_k`` (it sets a ``lax.top_k`` shape) and the
  switches derived at construction -- greedy (``temperature == 0``, a
  different code path) and whether each processor is on (``top_p < 1``,
  ``min_p > 0``, ``eta > 0``; an off processor costs nothing, so switching it
  on or off recompiles).  See :mod:`specjax.hyperparams`.

  Attributes:
    temperature: 0 for greedy, else > 0.
    top_k: keep the k most likely tokens; 0 disables.
    top_p: nucleus mass in (0, 1]; 1 disables.
    min_p: keep tokens with p >= min_p * max p; 0 disables (Nguyen et al. 2024).
    eta: eta-sampling epsilon in (0, 1); keep p >= min(eta, sqrt(eta) exp(-H(p)))
      (Hewitt et al. 2022); 0 disables.
  """

  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  min_p: float = 0.0
  eta: float = 0.0

  static_attrs = ("switches",)

  def __post_init__(self):
    check_range("temperature", self.temperature, low=0.0, high=math.inf, high_open=True)
    check_int("top_k", self.top_k, low=0)
    check_range("top_p", self.top_p, low=0.0, high=1.0, low_open=True)
    check_range("min_p", self.min_p, low=0.0, high=1.0)
    check_range("eta", self.eta, low=0.0, high=1.0, high_open=True)
    object.__setattr__(self, "switches", _Switches(
        greedy=float(self.temperature) == 0.0, top_p=float(self.top_p) < 1.0,
        min_p=float(self.min_p) > 0.0, eta=float(self.eta) > 0.0))

  @property
  def greedy(self) -> bool:
    """Temperature 0 (static: decided at construction, valid under jit)."""
    return self.switches.greedy


def top_k_filter(logits: jax.Array, k: int) -> jax.Array:
  """Keep logits >= the k-th largest (HF ``TopKLogitsWarper``)."""
  k = min(k, logits.shape[-1])
  kth = jax.lax.top_k(logits, k)[0][..., -1:]
  return jnp.where(logits < kth, NEG_INF, logits)


def top_p_filter(logits: jax.Array, top_p: float) -> jax.Array:
  """Nucleus filter (HF ``TopPLogitsWarper``): drop the ascending-sorted tokens
  whose cumulative probability is <= 1 - top_p, always keeping the top one."""
  order = jnp.argsort(logits, axis=-1)  # ascending
  sorted_logits = jnp.take_along_axis(logits, order, axis=-1)
  cum = jnp.cumsum(jax.nn.softmax(sorted_logits, axis=-1), axis=-1)
  remove_sorted = cum <= 1.0 - top_p
  remove_sorted = remove_sorted.at[..., -1].set(False)
  remove = jnp.zeros_like(remove_sorted)
  remove = jnp.put_along_axis(remove, order, remove_sorted, axis=-1, inplace=False)
  return jnp.where(remove, NEG_INF, logits)


def min_p_filter(logits: jax.Array, min_p: float) -> jax.Array:
  """Drop tokens with ``p < min_p * max p`` (HF ``MinPLogitsWarper``)."""
  probs = jax.nn.softmax(logits, axis=-1)
  top = jnp.max(probs, axis=-1, keepdims=True)
  return jnp.where(probs < min_p * top, NEG_INF, logits)


def entropy_nats(probs: jax.Array) -> jax.Array:
  """Shannon entropy in nats over the last axis (0 log 0 = 0)."""
  return -jnp.sum(jnp.where(probs > 0, probs * jnp.log(jnp.where(probs > 0, probs, 1.0)), 0.0),
                  axis=-1)


def eta_filter(logits: jax.Array, eta: float) -> jax.Array:
  """Eta sampling (HF ``EtaLogitsWarper``): drop ``p < min(eta, sqrt(eta) exp(-H))``,
  keeping at least the most likely token."""
  probs = jax.nn.softmax(logits, axis=-1)
  thresh = jnp.minimum(eta, jnp.sqrt(eta) * jnp.exp(-entropy_nats(probs)))[..., None]
  top = jnp.max(logits, axis=-1, keepdims=True)
  remove = (probs < thresh) & (logits < top)
  return jnp.where(remove, NEG_INF, logits)


def process_logits(logits: jax.Array, cfg: SamplingConfig) -> jax.Array:
  """Apply temperature and processors (T must be > 0). Returns logits ``[..., V]``.

  ``cfg``'s values may be traced; which processors run is static (``cfg.switches``).
  """
  x = logits.astype(jnp.float32) / cfg.temperature
  if cfg.top_k:
    x = top_k_filter(x, cfg.top_k)
  if cfg.switches.top_p:
    x = top_p_filter(x, cfg.top_p)
  if cfg.switches.min_p:
    x = min_p_filter(x, cfg.min_p)
  if cfg.switches.eta:
    x = eta_filter(x, cfg.eta)
  return x


def argmax(x: jax.Array) -> jax.Array:
  """``jnp.argmax(x, axis=-1)`` (the first maximum) as two plain reductions: the
  maximum, then the smallest index holding it.  The same index for NaN-free
  ``x`` (a NaN row gives V - 1); XLA:CPU runs ``jnp.argmax``'s variadic
  reduction about 7x slower over a 49k vocabulary.  int32 ``[...]``."""
  v = x.shape[-1]
  top = jnp.max(x, axis=-1, keepdims=True)
  first = jnp.min(jnp.where(x == top, jnp.arange(v, dtype=jnp.int32), v), axis=-1)
  return jnp.minimum(first, v - 1)


def probs_from_logits(logits: jax.Array, cfg: SamplingConfig) -> jax.Array:
  """The distribution tokens are drawn from: one-hot argmax at T = 0, else
  softmax of the processed logits. ``[..., V]`` float32."""
  if cfg.greedy:
    return jax.nn.one_hot(argmax(logits), logits.shape[-1], dtype=jnp.float32)
  return jax.nn.softmax(process_logits(logits, cfg), axis=-1)


def sample_from_probs(key: jax.Array, probs: jax.Array) -> jax.Array:
  """Draw one token per row from ``probs [..., V]`` (zeros never drawn). int32 ``[...]``.

  ``jax.random.categorical(key, log probs, axis=-1)`` (the Gumbel-max trick with
  the same Gumbel draws, so the same tokens), with :func:`argmax`."""
  logp = jnp.where(probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)), NEG_INF)
  return argmax(jax.random.gumbel(key, logp.shape, logp.dtype) + logp)


def sample_logits(key: jax.Array, logits: jax.Array, cfg: SamplingConfig):
  """Sample from raw ``logits [..., V]`` under ``cfg``. Returns (tokens [...], probs [..., V])."""
  probs = probs_from_logits(logits, cfg)
  if cfg.greedy:
    return argmax(logits), probs
  return sample_from_probs(key, probs), probs
