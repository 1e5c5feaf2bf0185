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

CoS (both variants) forms ``pi`` ONCE per node from the drafter's *full*
distribution ``q_node`` at that node (docs/spec.md §3), through the ``init_node``
hook of :mod:`specjax.verifiers.base` (``needs_node_dist = True``), and then
verifies the node's candidates losslessly against ``pi``: ``a = min(1,
pi_cur(x) / q(x))``, ``pi_cur <- norm(max(0, pi_cur - q))``, correction
``pi_cur``, with ``q`` the distribution each candidate was drawn from.  So a
node emits exactly ``pi`` for sampled drafts (``q = q_node``) and for
deterministic candidates alike (EAGLE top-k trees, greedy drafts: ``q =
onehot(x)``), never ``lam p + (1 - lam) onehot(x)`` (which is not CoS).  A
position without draft candidates (the bonus token, ``init(z, p)``) has no
drafter distribution: there ``pi = p``.  The state also carries the target's
own residual ``p_cur`` so that ``strict_accept_prob`` is the lossless
``min(1, p_cur(x) / q(x))`` (relaxed-acceptance statistics).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.distributions import residual
from specjax.verifiers.base import NodeRule, check_range, safe_ratio
from specjax.verifiers.registry import register


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CombinedState:
  """Node state of the CoS rules.

  Attributes:
    z: [V] raw target logits.
    p: [V] target distribution (never modified).
    p_cur: [V] the target's lossless residual (for ``strict_accept_prob``).
    pi_cur: [V] residual of the combined target ``pi`` (formed once, at ``init_node``).
  """

  z: jax.Array
  p: jax.Array
  p_cur: jax.Array
  pi_cur: jax.Array


@dataclasses.dataclass(frozen=True)
class _CombinedTarget(NodeRule):
  """Lossless verification of ``pi = self.combine(p, q_node)``, formed once per node.

  ``a = min(1, pi_cur(x) / q(x))``; ``on_reject: pi_cur <- norm(max(0, pi_cur - q))``;
  ``correction = pi_cur``.
  """

  needs_node_dist = True

  def combine(self, p: jax.Array, q_node: jax.Array) -> jax.Array:
    """``[V], [V] -> [V]`` the distribution verified against."""
    raise NotImplementedError

  def init(self, z, p):
    """A position without a drafter distribution (the bonus token): ``pi = p``."""
    return CombinedState(z=z, p=p, p_cur=p, pi_cur=p)

  def init_node(self, z, p, q_node):
    return CombinedState(z=z, p=p, p_cur=p, pi_cur=self.combine(p, q_node))

  def accept_prob(self, state, q, x):
    return safe_ratio(state.pi_cur[x], q[x])

  def on_reject(self, state, q, x):
    return dataclasses.replace(state, p_cur=residual(state.p_cur, q),
                               pi_cur=residual(state.pi_cur, q))

  def correction(self, state):
    return state.pi_cur

  def strict_accept_prob(self, state, q, x):
    """The lossless rule's ``min(1, p_cur(x) / q(x))``."""
    return safe_ratio(state.p_cur[x], q[x])


@register("cos")
@dataclasses.dataclass(frozen=True)
class CoS(_CombinedTarget):
  """CoS weighted ensemble: lossless verification of ``pi = lam p + (1 - lam) q_node``.

  ``q_node`` is the drafter's full distribution at the node (docs/spec.md §3).  For a
  sampled draft (``q = q_node``): ``a = min(1, lam p(x)/q(x) + 1 - lam)``,
  residual ``norm(max(0, p - q))``; induced distribution ``pi`` for sampled
  and deterministic candidates alike (Revisiting Lossy Verification, weighted
  ensemble ``p_WE``).

  Attributes:
    lam: weight of the target model, in [0, 1]; 1 is lossless, 0 accepts every draft.
  """

  name = "cos"
  lam: float = 0.5

  def validate(self):
    check_range("lam", self.lam, low=0.0, high=1.0)

  def combine(self, p, q_node):
    return self.lam * p + (1.0 - self.lam) * q_node

  @property
  def is_lossless(self) -> bool:
    return float(self.lam) == 1.0


@register("cos_contrastive")
@dataclasses.dataclass(frozen=True)
class CoSContrastive(_CombinedTarget):
  """CoS contrastive variant: lossless verification of ``pi ∝ p / q_node**mu``.

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

  def combine(self, p, q_node):
    pos = p > 0
    logw = jnp.where(pos, jnp.log(jnp.where(pos, p, 1.0)), -jnp.inf)
    logw = logw - self.mu * jnp.log(jnp.maximum(q_node, self.q_floor))
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
