"""Fuzzy speculative decoding (Holsman, Huang, Dhingra, "Fuzzy Speculative Decoding for
a Tunable Accuracy-Runtime Tradeoff", Findings of ACL 2025, arXiv:2502.20704): a lossy
node rule that accepts a draft outright where the target and draft distributions at
its position are close.

Definition and the choices made here: docs/lossy_path_rules.md, "Fuzzy speculative
decoding".  At a draft position with target distribution ``p`` (after temperature and
processors), the drafter's full distribution ``q_node`` there and a divergence ``D``
(Jensen-Shannon by default)::

    D(p, q_node) < T   ->  accept the draft (probability 1)
    otherwise          ->  fallback="target": reject; the token is drawn from p
                           fallback="sd":     lossless speculative sampling
                                              (accept with min(1, p(x)/q(x)),
                                              residual norm(max(0, p - q)))

``T`` (``threshold``) is traced: a sweep over it compiles once.  ``T = 0`` accepts
nothing outright, so both fallbacks are lossless there; a ``T`` above the divergence's
range accepts every draft.  The divergence is computed once per node (``init_node``:
``needs_node_dist``), so on a tree every candidate child of a close node is accepted
(the first one tried) and every child of a far node goes to the fallback.

Divergences (natural logarithm): ``"js"`` ``0.5 KL(p || m) + 0.5 KL(q || m)`` with
``m = (p + q) / 2`` (in [0, ln 2]); ``"kl"`` ``KL(q || p)`` (the draft measured
against the target; ``+inf`` where q has mass p has not); ``"tv"``
``0.5 sum |p - q|`` (in [0, 1]).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.distributions import kl_nats, residual, total_variation
from specjax.verifiers.base import NodeRule, check_range, safe_ratio
from specjax.verifiers.registry import register

DIVERGENCES = ("js", "kl", "tv")
FALLBACKS = ("target", "sd")


def divergence(kind: str, p: jax.Array, q: jax.Array) -> jax.Array:
  """The divergence ``kind`` (:data:`DIVERGENCES`) between target ``p`` and draft ``q``.

  ``p, q: [..., V] -> [...]``.  ``"js"``: Jensen-Shannon, ``"kl"``: ``KL(q || p)``,
  ``"tv"``: total variation.
  """
  if kind == "js":
    m = 0.5 * (p + q)
    return 0.5 * kl_nats(p, m) + 0.5 * kl_nats(q, m)
  if kind == "kl":
    return kl_nats(q, p)
  if kind == "tv":
    return total_variation(p, q)
  raise ValueError(f"divergence={kind!r}; allowed: {DIVERGENCES}")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FuzzyState:
  """Node state of :class:`Fuzzy`.

  Attributes:
    z: [V] raw target logits.
    p: [V] target distribution (never modified).
    p_cur: [V] current residual (the ``"sd"`` fallback updates it; ``"target"`` keeps p).
    close: [] bool, ``D(p, q_node) < threshold`` at this node (False where the node
      has no drafter distribution: the bonus position).
  """

  z: jax.Array
  p: jax.Array
  p_cur: jax.Array
  close: jax.Array


@register("fuzzy")
@dataclasses.dataclass(frozen=True)
class Fuzzy(NodeRule):
  """Fuzzy speculative decoding (module docstring; docs/lossy_path_rules.md).

  Attributes:
    threshold: the paper's T, in [0, inf]; traced.  0 is lossless.
    divergence: ``"js"`` (default, the authors' code's default), ``"kl"`` or ``"tv"``; static.
    fallback: ``"target"`` (the authors' rule: a far position rejects and draws from p)
      or ``"sd"`` (lossless speculative sampling there); static.
  """

  name = "fuzzy"
  needs_node_dist = True
  threshold: float = 0.4
  divergence: str = "js"
  fallback: str = "target"

  def validate(self):
    check_range("threshold", self.threshold, low=0.0)
    if self.divergence not in DIVERGENCES:
      raise ValueError(f"divergence={self.divergence!r}; allowed: {DIVERGENCES}")
    if self.fallback not in FALLBACKS:
      raise ValueError(f"fallback={self.fallback!r}; allowed: {FALLBACKS}")

  def init(self, z, p):
    """A position without a drafter distribution (the bonus token): never close."""
    return FuzzyState(z=z, p=p, p_cur=p, close=jnp.zeros((), bool))

  def init_node(self, z, p, q_node):
    close = divergence(self.divergence, p, q_node) < self.threshold
    return FuzzyState(z=z, p=p, p_cur=p, close=close)

  def accept_prob(self, state, q, x):
    far = safe_ratio(state.p_cur[x], q[x]) if self.fallback == "sd" else jnp.zeros(())
    return jnp.where(state.close, 1.0, far)

  def on_reject(self, state, q, x):
    if self.fallback == "target":
      return state  # a far node rejects every candidate and emits from p
    return dataclasses.replace(state, p_cur=residual(state.p_cur, q))

  def strict_accept_prob(self, state, q, x):
    """The lossless rule's ``min(1, p_cur(x) / q(x))`` (relaxed-acceptance statistics)."""
    return safe_ratio(state.p_cur[x], q[x])

  @property
  def is_lossless(self) -> bool:
    return float(self.threshold) == 0.0
