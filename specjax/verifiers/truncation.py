"""Truncation-based lossy verification (Revisiting Lossy Verification, Wang et al. 2026).

Both rules replace the lossless acceptance test by membership of an *allowed
set* ``A(p)`` (the paper's Definition 1, ``h(x) = 1[x in A_Theta]``):

* SpecCascade / min-p (Nguyen et al. 2024):
  ``A = {v : p(v) >= p_base * max_v p(v)}``.
* Typical acceptance (Medusa, Cai et al. 2024) / eta sampling (Hewitt et al.
  2022): ``A = {v : p(v) >= min(eps, delta * exp(-H(p)))}``, H in nats,
  default ``delta = sqrt(eps)`` (the eta-sampling convention; Medusa's defaults
  ``posterior_threshold = 0.09, posterior_alpha = 0.3`` are exactly this).

The truncated target is ``p_A = p * 1[A] / Z_A(p)``, ``Z_A(p) = sum_{v in A} p(v)``.
With a sampled draft and the hard gate the one-node induced distribution is
``q(y) 1[y in A] + (1 - q(A)) p_A(y)`` (it follows the drafter, paper §3);
the matched baseline (min-p / eta as a processor + lossless verification,
see :mod:`specjax.verifiers.baselines`) produces ``p_A`` exactly.

The allowed sets and truncated distributions are defined once, in
:mod:`specjax.distributions` (the min-p / eta processors keep the same sets),
and re-exported here.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from specjax.distributions import (allowed_set_eta, allowed_set_min_p, eta_threshold,
                                   min_p_threshold, safe_normalize, truncate)
from specjax.verifiers.base import NodeRule, check_range, safe_ratio
from specjax.verifiers.registry import register

__all__ = ["SpecCascade", "Typical", "TruncationState", "allowed_set_eta", "allowed_set_min_p",
           "eta_threshold", "min_p_threshold", "truncate"]

_GATES = ("hard", "soft")


# --- the node rules ---------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TruncationState:
  """Node state of the truncation rules.

  Attributes:
    z: [V] raw target logits.
    p: [V] target distribution (after temperature / processors), never modified.
    p_cur: [V] p with the rejected candidates zeroed, renormalised.
    allowed: [V] bool, the allowed set A(p) (fixed at init, from p).
    threshold: [] the probability threshold defining A (used by the soft gate).
  """

  z: jax.Array
  p: jax.Array
  p_cur: jax.Array
  allowed: jax.Array
  threshold: jax.Array


@dataclasses.dataclass(frozen=True)
class _TruncationRule(NodeRule):
  """Shared mechanics; subclasses define ``threshold(p)`` and ``allowed_set(p)``.

  * hard gate: ``a = 1[x in A]`` (Definition 1);
  * soft gate: ``a = min(1, p(x) / threshold)`` (the EAGLE-tree form of the
    paper's code), and ``a = 1`` for every ``x in A`` (identical except for the
    kept-argmax corner case of :func:`allowed_set_eta`).
  Either way a candidate in A is always accepted, so every rejected candidate
  lies outside A.

  ``on_reject`` zeroes x in ``p_cur`` and renormalises; ``correction`` is
  ``p_cur`` restricted to A and renormalised **(choice, docs/spec.md §3: the truncated
  target, so that with q -> p the chain output tends to p_A)**.  Since rejected
  tokens are outside A this equals ``p_A`` at every node.  **(choice)** Should
  the restriction ever carry no mass (every token of A rejected -- impossible
  with these gates, possible in a subclass or when a caller forces a rejection)
  the correction falls back to ``p_A`` itself: the output stays inside A, at
  the price of possibly re-emitting a rejected token.
  """

  def threshold(self, p: jax.Array) -> jax.Array:
    raise NotImplementedError

  def allowed_set(self, p: jax.Array) -> jax.Array:
    raise NotImplementedError

  def _check_gate(self):
    if self.gate not in _GATES:
      raise ValueError(f"gate={self.gate!r} is not allowed; allowed values: {_GATES}")

  def init(self, z, p):
    return TruncationState(z=z, p=p, p_cur=p, allowed=self.allowed_set(p),
                           threshold=self.threshold(p))

  def accept_prob(self, state, q, x):
    inside = state.allowed[x]
    if self.gate == "hard":
      return inside.astype(state.p.dtype)
    thr = state.threshold
    soft = jnp.minimum(1.0, state.p[x] / jnp.where(thr > 0, thr, 1.0))
    return jnp.where(inside, 1.0, soft).astype(state.p.dtype)

  def on_reject(self, state, q, x):
    return dataclasses.replace(state, p_cur=safe_normalize(state.p_cur.at[x].set(0.0),
                                                           state.p_cur))

  def correction(self, state):
    return safe_normalize(jnp.where(state.allowed, state.p_cur, 0.0),
                          truncate(state.p, state.allowed))

  def strict_accept_prob(self, state, q, x):
    """The lossless rule's ``min(1, p_cur(x) / q(x))``."""
    return safe_ratio(state.p_cur[x], q[x])


@register("spec_cascade")
@dataclasses.dataclass(frozen=True)
class SpecCascade(_TruncationRule):
  """SpecCascade as min-p truncation (Revisiting Lossy Verification, Def. 1 with A_min-p).

  ``A = {v : p(v) >= p_base * max p}``; ``a = 1[x in A]`` (``gate="hard"``) or
  ``min(1, p(x) / (p_base max p))`` (``gate="soft"``); correction ``p_A``.
  ``p_base = 1`` is greedy verification (for untied p), ``p_base = 0`` accepts
  every draft.

  Attributes:
    p_base: in [0, 1].
    gate: "hard" or "soft".
  """

  name = "spec_cascade"
  p_base: float = 0.1
  gate: str = "hard"

  def validate(self):
    check_range("p_base", self.p_base, low=0.0, high=1.0)
    self._check_gate()

  def threshold(self, p):
    return min_p_threshold(p, self.p_base)

  def allowed_set(self, p):
    return allowed_set_min_p(p, self.p_base)


@register("typical")
@dataclasses.dataclass(frozen=True)
class Typical(_TruncationRule):
  """Typical acceptance (Medusa) as eta truncation (Revisiting Lossy Verification, A_eta).

  ``A = {v : p(v) >= min(eps, delta * exp(-H(p)))}`` (plus the argmax, see
  :func:`allowed_set_eta`); ``a = 1[x in A]`` (``gate="hard"``, Medusa) or
  ``min(1, p(x) / min(eps, delta e^{-H}))`` (``gate="soft"``); correction ``p_A``.

  Attributes:
    eps: in (0, 1) (Medusa's ``posterior_threshold``, eta sampling's epsilon).
    delta: in (0, inf); ``None`` means ``sqrt(eps)`` (Medusa's
      ``posterior_alpha``; only ``sqrt(eps)`` has an exact eta-processor baseline).
    gate: "hard" or "soft".
  """

  name = "typical"
  eps: float = 0.09
  delta: float | None = None
  gate: str = "hard"

  def validate(self):
    check_range("eps", self.eps, low=0.0, high=1.0, low_open=True, high_open=True)
    if self.delta is not None:
      check_range("delta", self.delta, low=0.0, low_open=True, high_open=True)
    self._check_gate()

  @property
  def delta_eff(self) -> float:
    """The delta actually used: ``sqrt(eps)`` when ``delta is None`` (concrete rules)."""
    return math.sqrt(self.eps) if self.delta is None else float(self.delta)

  def threshold(self, p):
    return eta_threshold(p, self.eps, self.delta)

  def allowed_set(self, p):
    return allowed_set_eta(p, self.eps, self.delta)
