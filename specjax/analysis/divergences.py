"""Divergences, acceptance rate, block efficiency and matched truncation baselines.

docs/spec.md §6 utilities.  Every function works over the last axis (the
vocabulary) and broadcasts over leading axes (contexts).  Conventions:
``0 log 0 = 0``; ``KL(P || Q) = +inf`` when P puts mass where Q has none.

The allowed sets and truncated distributions of docs/spec.md §3 (min-p / SpecCascade,
eta / typical acceptance) and the entropy are defined once, in
:mod:`specjax.distributions`, and re-exported here; the matched
baselines of "Revisiting Lossy Verification" (the truncation applied to the
target as a logits processor, then lossless verification) are exactly the
truncated targets ``p_A``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from specjax.distributions import (allowed_set_eta, allowed_set_min_p, entropy_nats, kl_nats,
                                   total_variation, truncate)

__all__ = ["kl", "kl_both", "tv", "entropy", "entropy_nats", "acceptance_rate",
           "block_efficiency", "allowed_set_min_p", "allowed_set_eta", "truncate",
           "allowed_mass", "min_p_baseline", "eta_baseline", "matched_allowed_set",
           "matched_baseline_probs", "joint"]


kl = kl_nats  # KL(p || q) in nats (one definition: specjax.distributions)


def kl_both(p: jax.Array, q: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(KL(p || q), KL(q || p)), each [...]."""
  return kl(p, q), kl(q, p)


tv = total_variation  # 0.5 sum |p - q| (one definition: specjax.distributions)
entropy = entropy_nats  # Shannon entropy in nats (one definition: specjax.distributions)


def acceptance_rate(p: jax.Array, q: jax.Array) -> jax.Array:
  """Lossless acceptance rate ``alpha = sum_v min(p(v), q(v))`` (Leviathan et al.). [...]"""
  return jnp.sum(jnp.minimum(jnp.asarray(p), jnp.asarray(q)), axis=-1)


def block_efficiency(alpha: jax.Array, gamma: int | jax.Array) -> jax.Array:
  """Expected tokens per target call for draft length gamma (Leviathan et al., Eq. 1).

  ``(1 - alpha**(gamma + 1)) / (1 - alpha)`` = ``sum_{i=0..gamma} alpha**i``;
  ``gamma + 1`` at ``alpha = 1``.  With a Python-int ``gamma`` the geometric
  sum is evaluated directly (Horner), which is exact near ``alpha = 1``.
  """
  alpha = jnp.asarray(alpha, jnp.float32)
  if isinstance(gamma, int):
    if gamma < 0:
      raise ValueError(f"gamma={gamma!r} must be an integer >= 0")
    out = jnp.ones_like(alpha)
    for _ in range(gamma):
      out = 1.0 + alpha * out
    return out
  gamma = jnp.asarray(gamma, jnp.float32)
  one = jnp.abs(1.0 - alpha) < 1e-6
  safe = jnp.where(one, 0.5, alpha)
  closed = (1.0 - safe ** (gamma + 1.0)) / (1.0 - safe)
  # Near alpha = 1: (gamma + 1) - gamma (gamma + 1) / 2 * (1 - alpha) to first order.
  near = (gamma + 1.0) - 0.5 * gamma * (gamma + 1.0) * (1.0 - alpha)
  return jnp.where(one, near, closed)


def allowed_mass(p: jax.Array, mask: jax.Array) -> jax.Array:
  """``Z_A(p) = sum_{v in A} p(v)``. [..., V], bool [..., V] -> [...]."""
  return jnp.sum(jnp.where(mask, p, 0.0), axis=-1)


def min_p_baseline(p: jax.Array, p_base: float) -> jax.Array:
  """Matched baseline of SpecCascade: min-p sampling on the target, ``p_A`` [..., V]."""
  return truncate(p, allowed_set_min_p(p, p_base))


def eta_baseline(p: jax.Array, eps: float, delta: float | None = None) -> jax.Array:
  """Matched baseline of typical acceptance: eta sampling on the target, ``p_A`` [..., V].

  ``delta`` defaults to ``sqrt(eps)`` (the eta-sampling convention, docs/spec.md §3).
  """
  return truncate(p, allowed_set_eta(p, eps, delta))


def _unwrap(rule):
  """MARS and other wrappers are compared against their base rule's baseline."""
  while hasattr(rule, "base_rule"):
    rule = rule.base_rule
  return rule


def matched_allowed_set(rule, p: jax.Array) -> jax.Array:
  """bool [..., V] allowed set ``A(p)`` of a truncation rule (its matched baseline's).

  Uses the rule's own ``allowed_set(p)`` (``specjax.verifiers.truncation``:
  the rule's definition is the single source of truth); a wrapper such as
  MARS uses its ``base_rule``'s.  Raises ``ValueError`` for rules without an
  allowed set.
  """
  p = jnp.asarray(p, jnp.float32)
  base = _unwrap(rule)
  if not hasattr(base, "allowed_set"):
    raise ValueError(f"rule {type(rule).__name__} has no allowed set (not a truncation rule)")
  fn = base.allowed_set
  for _ in range(p.ndim - 1):
    fn = jax.vmap(fn)
  return fn(p)


def matched_baseline_probs(rule, p: jax.Array) -> jax.Array:
  """[..., V] output distribution of ``rule``'s matched baseline.

  The distribution produced by :func:`specjax.verifiers.baselines.matched_baseline`
  (the rule's truncation as a logits processor + lossless verification):
  ``p_A`` for truncation rules (SpecCascade: min-p, typical: eta), the base
  rule's for MARS, and ``p`` itself for every other rule.
  """
  p = jnp.asarray(p, jnp.float32)
  if hasattr(_unwrap(rule), "allowed_set"):
    return truncate(p, matched_allowed_set(rule, p))
  return p


def joint(p1: jax.Array, p2_given: jax.Array) -> jax.Array:
  """Joint law of two tokens from ``p1 [V]`` and ``p2_given [V, V]`` (row y1). [V, V]."""
  return jnp.asarray(p1)[:, None] * jnp.asarray(p2_given)
