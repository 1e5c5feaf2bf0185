"""Collaborative lossy verification (Revisiting Lossy Verification, Wang et al. 2026, §3).

These rules verify against a target that mixes the target model p with the
draft model q, or loosen the lossless ratio test:

* CoS weighted ensemble (Collaborative decoding via Speculation):
  ``pi = lam * p + (1 - lam) * q``, then the lossless rule with ``pi`` in place
  of p.  Induced one-node distribution: ``pi``.  ``lam = 1`` is lossless.
* CoS contrastive variant: ``pi ∝ p / q**mu`` (contrastive decoding,
  ``p_CD ∝ p(x) / q(x)^lambda``), then lossless with ``pi``.  ``mu = 0`` is lossless.
* Lenience: ``a = min(1, p(x) / (l * q(x)))``, on rejection
  ``p_cur <- norm(max(0, p_cur - q))`` with the *unscaled* q.  Induced
  distribution ``min(q, p/l) + (1 - sum min(q, p/l)) norm(max(0, p - q))``
  (the paper's decomposition into under-estimated / moderate / severe-overshoot
  regions).  ``l = 1`` is lossless.

The state is the default :class:`~specjax.verifiers.base.NodeState`: ``p_cur``
is the residual of the *target model*; each candidate builds
``pi_cur = combine(p_cur, q)`` with its own q.  For a chain (one candidate per
node) this is exactly lossless verification of ``pi``.  For a tree, every
later sibling re-combines the residual ``norm(max(0, pi_cur - q))`` with that
sibling's q **(choice)**; for CoS the residual of ``pi_cur`` against q equals
the residual of ``p_cur`` (``pi - q = lam (p - q)``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.verifiers.base import NodeRule, check_range, residual, safe_ratio
from specjax.verifiers.registry import register


@dataclasses.dataclass(frozen=True)
class _CombinedTarget(NodeRule):
  """Lossless verification of ``pi_cur = self.combine(p_cur, q)``.

  ``a = min(1, pi_cur(x) / q(x))``; ``on_reject: p_cur <- norm(max(0, pi_cur - q))``;
  ``correction = p_cur``.
  """

  def combine(self, p_cur: jax.Array, q: jax.Array) -> jax.Array:
    """``[V], [V] -> [V]`` the distribution verified against."""
    raise NotImplementedError

  def accept_prob(self, state, q, x):
    pi = self.combine(state.p_cur, q)
    return safe_ratio(pi[x], q[x])

  def on_reject(self, state, q, x):
    return dataclasses.replace(state, p_cur=residual(self.combine(state.p_cur, q), q))

  def strict_accept_prob(self, state, q, x):
    """The lossless rule's ``min(1, p_cur(x) / q(x))``."""
    return safe_ratio(state.p_cur[x], q[x])


@register("cos")
@dataclasses.dataclass(frozen=True)
class CoS(_CombinedTarget):
  """CoS weighted ensemble: lossless verification of ``pi = lam p + (1 - lam) q``.

  ``a = min(1, pi(x) / q(x)) = min(1, lam p(x)/q(x) + 1 - lam)``; residual
  ``norm(max(0, pi - q)) = norm(max(0, p - q))``; induced distribution ``pi``
  (Revisiting Lossy Verification, weighted ensemble ``p_WE``).

  Attributes:
    lam: weight of the target model, in [0, 1]; 1 is lossless, 0 accepts every draft.
  """

  name = "cos"
  lam: float = 0.5

  def validate(self):
    check_range("lam", self.lam, low=0.0, high=1.0)

  def combine(self, p_cur, q):
    return self.lam * p_cur + (1.0 - self.lam) * q

  @property
  def is_lossless(self) -> bool:
    return float(self.lam) == 1.0


@register("cos_contrastive")
@dataclasses.dataclass(frozen=True)
class CoSContrastive(_CombinedTarget):
  """CoS contrastive variant: lossless verification of ``pi ∝ p / q**mu``.

  (Revisiting Lossy Verification, contrastive decoding ``p_CD ∝ p / q^lambda``.)
  Induced one-node distribution: ``pi``.

  **(choice) q(v) = 0:** the draft is floored, ``pi ∝ p / max(q, q_floor)**mu``,
  computed in log space.  This keeps ``pi`` finite and normalisable (tokens the
  drafter never proposes are boosted by at most ``q_floor**-mu`` instead of
  infinitely), keeps ``supp(pi) = supp(p)``, and ``mu = 0`` gives ``pi = p``.

  Attributes:
    mu: contrast strength, in [0, inf); 0 is lossless.
    q_floor: floor for q in the contrast, in (0, 1].
  """

  name = "cos_contrastive"
  mu: float = 0.5
  q_floor: float = 1e-4

  def validate(self):
    check_range("mu", self.mu, low=0.0, high_open=True)
    check_range("q_floor", self.q_floor, low=0.0, high=1.0, low_open=True)

  def combine(self, p_cur, q):
    pos = p_cur > 0
    logw = jnp.where(pos, jnp.log(jnp.where(pos, p_cur, 1.0)), -jnp.inf)
    logw = logw - self.mu * jnp.log(jnp.maximum(q, self.q_floor))
    w = jnp.exp(logw - jnp.max(logw))
    return w / jnp.sum(w)

  @property
  def is_lossless(self) -> bool:
    return float(self.mu) == 0.0


@register("lenience")
@dataclasses.dataclass(frozen=True)
class Lenience(NodeRule):
  """Lenience-based relaxation: ``a = min(1, p_cur(x) / (l q(x)))``.

  On rejection ``p_cur <- norm(max(0, p_cur - q))`` with the unscaled q.
  Induced distribution ``min(q, p/l) + (1 - sum min(q, p/l)) norm(max(0, p - q))``
  (Revisiting Lossy Verification, lenience decomposition).

  Attributes:
    l: lenience, in (0, 1]; 1 is lossless.
  """

  name = "lenience"
  l: float = 0.5  # noqa: E741  (the paper's symbol)

  def validate(self):
    check_range("l", self.l, low=0.0, high=1.0, low_open=True)

  def accept_prob(self, state, q, x):
    return safe_ratio(state.p_cur[x], self.l * q[x])

  def strict_accept_prob(self, state, q, x):
    """The lossless rule's ``min(1, p_cur(x) / q(x))``."""
    return safe_ratio(state.p_cur[x], q[x])

  @property
  def is_lossless(self) -> bool:
    return float(self.l) == 1.0
