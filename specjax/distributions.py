"""The ground floor: distributions over a vocabulary, and what every layer does with them.

One definition per idea, shared by the models' users, the verifiers, the
decoding loop and the analysis (nothing here imports any of them):

* :class:`SamplingConfig` and the logits processors with Hugging Face
  semantics, in HF's order (``transformers``
  ``GenerationMixin._get_logits_processor``): temperature -> top-k -> top-p
  -> min-p -> eta.  Temperature 0 means greedy: the distribution is one-hot
  at the argmax of the raw logits.
* sampling: :func:`probs_from_logits`, :func:`sample_from_probs`,
  :func:`sample_logits`;
* sampling without replacement (sampled draft trees, docs/spec.md §4):
  :func:`sample_without_replacement` (Gumbel-top-k) and
  :func:`without_replacement_q`, the law of each draw given the earlier ones;
* :func:`entropy_nats`;
* :func:`safe_normalize` (``w / sum w``, a fallback where the mass is 0) and
  the speculative-sampling residual :func:`residual`, ``norm(max(0, p - q))``;
* allowed sets and truncated distributions (min-p / SpecCascade, eta /
  typical acceptance): :func:`allowed_set_min_p`, :func:`allowed_set_eta`,
  :func:`truncate`, the thresholds they use -- the same sets the min-p and
  eta processors keep.

Every function works on ``[..., V]`` (the vocabulary last).
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


# --- sampling configuration -------------------------------------------------------------


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


# Greedy decoding's configuration (temperature 0: argmax, no processors).
GREEDY = SamplingConfig(temperature=0.0)


# --- entropy, normalisation, residuals ----------------------------------------------------


def entropy_nats(probs: jax.Array) -> jax.Array:
  """Shannon entropy in nats over the last axis (0 log 0 = 0). ``[..., V] -> [...]``."""
  return -jnp.sum(jnp.where(probs > 0, probs * jnp.log(jnp.where(probs > 0, probs, 1.0)), 0.0),
                  axis=-1)


def kl_nats(p: jax.Array, q: jax.Array) -> jax.Array:
  """KL(p || q) = sum p log(p / q) in nats over the last axis. ``[..., V] -> [...]``.

  ``+inf`` where ``p > 0`` and ``q = 0``; terms with ``p = 0`` are 0.  Tiny
  negative values from float error are clipped to 0.
  """
  p = jnp.asarray(p)
  q = jnp.asarray(q)
  pos = p > 0
  terms = jnp.where(pos, p * (jnp.log(jnp.where(pos, p, 1.0)) - jnp.log(jnp.where(q > 0, q, 1.0))),
                    0.0)
  bad = jnp.any(pos & (q <= 0), axis=-1)
  return jnp.where(bad, jnp.inf, jnp.maximum(jnp.sum(terms, axis=-1), 0.0))


def total_variation(p: jax.Array, q: jax.Array) -> jax.Array:
  """``0.5 sum |p - q|`` over the last axis (``1 - sum min(p, q)`` for distributions)."""
  return 0.5 * jnp.sum(jnp.abs(jnp.asarray(p) - jnp.asarray(q)), axis=-1)


def safe_normalize(w: jax.Array, fallback: jax.Array) -> jax.Array:
  """``w / sum(w)`` over the last axis, ``fallback`` where that sum is 0.

  ``w [..., V]`` non-negative weights; ``fallback`` broadcasts against ``w``.
  No NaNs: the division only sees positive sums.
  """
  s = jnp.sum(w, axis=-1, keepdims=True)
  return jnp.where(s > 0, w / jnp.where(s > 0, s, 1.0), fallback)


def residual(p: jax.Array, q: jax.Array) -> jax.Array:
  """``norm(max(0, p - q))`` (Leviathan et al. 2023, Alg. 1); ``p`` if it is all zero."""
  return safe_normalize(jnp.maximum(p - q, 0.0), p)


# --- allowed sets and truncated distributions -------------------------------------------


def min_p_threshold(p: jax.Array, p_base) -> jax.Array:
  """``p_base * max_v p(v)``. ``p [..., V] -> [...]``."""
  return p_base * jnp.max(p, axis=-1)


def eta_threshold(p: jax.Array, eps, delta=None) -> jax.Array:
  """``min(eps, delta * exp(-H(p)))`` with H in nats; ``delta=None`` means ``sqrt(eps)``.

  The eta processor (:func:`eta_filter`) uses this threshold with
  ``delta = sqrt(eps)``, so its kept set is :func:`allowed_set_eta` bit for
  bit. ``p [..., V] -> [...]``.
  """
  d = jnp.sqrt(eps) if delta is None else delta
  return jnp.minimum(eps, d * jnp.exp(-entropy_nats(p)))


def allowed_set_min_p(p: jax.Array, p_base) -> jax.Array:
  """min-p allowed set ``A = {v : p(v) >= p_base * max p}``. ``p [..., V] -> bool [..., V]``.

  Never empty for ``p_base <= 1`` (the argmax is always in it); ``p_base = 0``
  allows every token.  The set HF ``MinPLogitsWarper`` / :func:`min_p_filter` keeps.
  """
  return p >= min_p_threshold(p, p_base)[..., None]


def allowed_set_eta(p: jax.Array, eps, delta=None) -> jax.Array:
  """eta allowed set ``A = {v : p(v) >= min(eps, delta exp(-H(p)))}`` plus the argmax.

  ``p [..., V] -> bool [..., V]``.  As in HF ``EtaLogitsWarper`` the most
  likely token(s) are always kept; this only matters when the threshold
  exceeds ``max p``, which is impossible for ``delta <= 1`` (because
  ``exp(-H(p)) <= max p``), so for the default ``delta = sqrt(eps)`` it is the
  paper's set exactly.
  """
  thr = eta_threshold(p, eps, delta)[..., None]
  top = p >= jnp.max(p, axis=-1, keepdims=True)
  return (p >= thr) | top


def truncate(p: jax.Array, mask: jax.Array) -> jax.Array:
  """``p_A = p * 1[A] / Z_A(p)``. ``p [..., V]``, ``mask`` bool ``[..., V]`` -> ``[..., V]``.

  **(choice)** If ``Z_A(p) = 0`` (the allowed set carries no mass) the
  distribution is returned unchanged rather than producing NaNs.
  """
  return safe_normalize(jnp.where(mask, p, 0.0), p)


# --- logits processors ----------------------------------------------------------------


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
  """Drop the tokens outside :func:`allowed_set_min_p`, ``p < min_p * max p``
  (HF ``MinPLogitsWarper``)."""
  probs = jax.nn.softmax(logits, axis=-1)
  return jnp.where(allowed_set_min_p(probs, min_p), logits, NEG_INF)


def eta_filter(logits: jax.Array, eta: float) -> jax.Array:
  """Eta sampling (HF ``EtaLogitsWarper``): drop ``p < min(eta, sqrt(eta) exp(-H))``
  (:func:`eta_threshold`), keeping at least the most likely token (by logit)."""
  probs = jax.nn.softmax(logits, axis=-1)
  thresh = eta_threshold(probs, eta)[..., None]
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


# --- sampling -----------------------------------------------------------------------------


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


# --- sampling without replacement (sampled draft trees) ---------------------------------


def sample_without_replacement(key: jax.Array, probs: jax.Array, k: int) -> jax.Array:
  """``k`` distinct tokens drawn one after another without replacement from ``probs [V]``.

  Gumbel-top-k (the drafting of Jeon et al. 2024, "Recursive Speculative
  Decoding", §3.2): the ``k`` largest of ``log probs + Gumbel noise``, in
  decreasing order.  Draw j then has the law ``without_replacement_q(probs,
  tokens)[j]``: ``probs`` with the earlier draws removed, renormalised.  When
  fewer than ``k`` tokens have ``probs > 0``, the draws after them are the
  lowest-index unused tokens, deterministically (``lax.top_k`` puts the lower
  index first among the tied ``-inf`` scores).  Returns int32 ``[k]`` in draw order.
  """
  logp = jnp.where(probs > 0, jnp.log(jnp.where(probs > 0, probs, 1.0)), NEG_INF)
  scores = jax.random.gumbel(key, logp.shape, logp.dtype) + logp
  return jax.lax.top_k(scores, k)[1].astype(jnp.int32)


def without_replacement_q(probs: jax.Array, tokens: jax.Array) -> jax.Array:
  """Law of each draw of a without-replacement sequence given the draws before it.

  ``probs [..., V]``, ``tokens [..., k]`` (distinct) -> ``[..., k, V]``; row j is
  ``norm(probs * 1[v not in tokens[:j]])`` -- the draft distribution of the
  j-th sibling in recursive rejection sampling (Jeon et al. 2024, §3.1) -- or,
  once no mass is left, one-hot at the lowest-index token not in
  ``tokens[:j]`` (what :func:`sample_without_replacement` draws then).
  """
  v = probs.shape[-1]
  onehot = jax.nn.one_hot(tokens, v, dtype=probs.dtype)  # [..., k, V]
  before = (jnp.cumsum(onehot, axis=-2) - onehot) > 0  # tokens[:j]
  rest = jnp.where(before, 0.0, probs[..., None, :])
  lowest_unused = jax.nn.one_hot(argmax(~before), v, dtype=probs.dtype)
  return safe_normalize(rest, lowest_unused)
