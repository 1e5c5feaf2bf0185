"""MARS over block verification: a lossy path rule for chains (our composition; no
paper defines it).

Definition and the choices made here: docs/lossy_path_rules.md, "MARS over block
verification".  Token-level MARS (:mod:`specjax.verifiers.mars`, relax mode over the
lossless rule) emits, at every drafted position i whose draft was sampled from ``Q_i``,
a token with the law (the MARS closed form, :func:`specjax.verifiers.mars.relaxed_law`)::

    P~_i(y) = P_i(y) + 1[y in T_i] (Q_i(y) - P_i(y))^+ - (sum_{t in T_i} (Q_i(t) - P_i(t))^+) r_i(y)

where relaxation is active at i (``T_i`` = the two largest raw logits there,
``r_i = norm((P_i - Q_i)^+)``), and ``P~_i = P_i`` elsewhere; the bonus token after a
fully accepted chain comes from ``P_{L+1}``.  MARS over block verification is block
verification (:func:`specjax.verifiers.block.block_terms`, Sun et al. ICLR 2025,
Algorithm 2) run against the targets ``P~_1..P~_L, P_{L+1}`` instead of
``P_1..P_L, P_{L+1}``, with ``L`` = ``length`` the drafts offered.

What that buys (docs/lossy_path_rules.md): block verification is valid for whatever
targets it is given, so every emitted token at a drafted position has the law ``P~_i``
-- the same per-token law as token-level MARS -- and its expected number of accepted
drafts is at least token-level MARS's (block verification's optimality among valid
verifiers for fixed targets).  With relaxation never active (``theta >= 1`` with the
guard) it is block verification, lossless.  ``z`` is read for the activation test only.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.verifiers.block import Block
from specjax.verifiers.mars import Mars, node_activation, relaxed_law
from specjax.verifiers.path import PathRule, _check_length, check_path_shapes, position_mask
from specjax.verifiers.registry import register


@register("mars_block", kind="path")
@dataclasses.dataclass(frozen=True)
class MarsBlock(PathRule):
  """MARS relaxation with block verification (module docstring); chains only.

  Attributes (the same meaning, defaults and checks as :class:`~specjax.verifiers.Mars`;
  the base rule is lossless and the sampled form "relax"):
    theta: ratio threshold in (0, inf); traced.  Default 0.9.
    guard: require ``z1 > 0`` for the ratio test; static.
    margin: "ratio" or "difference"; static.
    delta: logit-difference threshold for ``margin="difference"``, in [0, inf); traced.
    adaptive: a registered threshold hook name, or None; static.
  """

  name = "mars_block"
  theta: float = 0.9
  guard: bool = True
  margin: str = "ratio"
  delta: float = 1.0
  adaptive: str | None = None

  def validate(self):
    self.node_rule  # noqa: B018  (Mars checks the same fields and names a bad one)

  @property
  def node_rule(self) -> Mars:
    """Token-level MARS with these hyperparameters (concrete instances only)."""
    return Mars(theta=self.theta, guard=self.guard, margin=self.margin, delta=self.delta,
                adaptive=self.adaptive)

  def targets(self, z: jax.Array, p: jax.Array, q: jax.Array, length=None) -> jax.Array:
    """[K+1, V] the targets block verification is run against: ``P~_i`` (MARS's one-node
    law for a sampled draft) at offered positions ``i < length``, ``P`` at the others
    (the bonus position ``length`` included).  Shapes as :mod:`specjax.verifiers.path`."""
    k = q.shape[0]
    top1, top2, _, active = jax.vmap(lambda zz, pp: node_activation(
        zz, pp, theta=self.theta, delta=self.delta, margin=self.margin, guard=self.guard,
        adaptive=self.adaptive))(z[:k], p[:k])
    active = active & position_mask(k, length)
    relaxed = relaxed_law(p[:k], q, top1, top2, active)  # [K, V]
    return jnp.concatenate([relaxed, p[k:]], axis=0)

  def _checked_targets(self, z, p, q, x, length):
    k, _ = check_path_shapes(z, p, q, x)
    _check_length(length, k)
    return self.targets(z, p, q, length)

  def accept_length_law(self, z, p, q, x, length=None, q_node=None):
    return Block().accept_length_law(z, self._checked_targets(z, p, q, x, length), q, x, length)

  def emit_dists(self, z, p, q, x, length=None, q_node=None):
    return Block().emit_dists(z, self._checked_targets(z, p, q, x, length), q, x, length)

  def verify_path(self, z, p, q, x, u, length=None, q_node=None):
    return Block().verify_path(z, self._checked_targets(z, p, q, x, length), q, x, u, length)

  @property
  def is_lossless(self) -> bool:
    return self.node_rule.never_relaxes
