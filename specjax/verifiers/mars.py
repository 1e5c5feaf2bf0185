"""MARS: margin-aware verification (Song et al., ACL Findings 2026, arXiv 2601.15498).

Let ``top1, top2`` be the two largest raw target logits ``z1 >= z2`` at the
node.  The target is *indecisive* -- relaxation is active -- iff

* ``margin="ratio"`` (the paper, Eq. 5): ``r = z2 / z1 > theta`` and, with
  ``guard=True``, ``z1 > 0``.  **(choice, docs/spec.md §3)**: the paper gives no rule
  for ``z1 <= 0`` (there ``r >= 1`` and every node would relax; at ``z1 = 0`` the
  ratio is undefined); ``guard=False`` reproduces the bare ratio test, with
  ``r = 1`` for ``z1 = z2 = 0`` and ``r = -inf`` for ``z1 = 0 > z2``.
  Equivalently ``z1 - z2 < (1 - theta) z1``: a margin relative to ``z1``.
* ``margin="difference"``: ``z1 - z2 < delta`` (a fixed logit margin; the
  guard does not apply since the difference is well defined for any sign).

Ratio and difference are computed from raw logits, so they do not depend on
the temperature.  Only top-2 is ever relaxed, never top-3.

Greedy form (paper Algorithm 1, used when ``p`` is one-hot, i.e. T = 0):
accept iff ``x = top1``, or ``x = top2`` and relaxation is active; on
rejection emit ``top1`` (the driver truncates the rest of the draft).

Sampled form (T > 0, ``sampled_mode="relax"``, the default; docs/spec.md §3): MARS
only ever *relaxes* the base rule.  ``a = 1`` if relaxation is active and
``x in {top1, top2}``, otherwise the base rule's ``a`` (lossless
``min(1, p_cur(x)/q(x))`` by default); ``on_reject`` and ``correction`` are
always the base rule's.  So every draft the base rule accepts is accepted.

Closed form (one node, sampled draft ``x ~ q``, lossless base, relaxation
active, ``T = {top1, top2}``, ``(.)^+ = max(0, .)``,
``r = norm((p - q)^+)``)::

    P(y) = p(y) + 1[y in T] (q(y) - p(y))^+  -  (sum_{t in T} (q(t) - p(t))^+) r(y)

Derivation: the lossless law is ``min(p, q) + D r`` with
``D = sum (q - p)^+ = sum (p - q)^+``, i.e. ``p``.  Relaxation moves, for each
``t in T``, the mass ``q(t) - min(p(t), q(t)) = (q(t) - p(t))^+`` that lossless
would have rejected (and redistributed by ``r``, whose residual does not
depend on the rejected ``x``) onto ``t`` itself.  Inactive nodes give ``p``.
Sums to 1; ``P >= p`` on T, and ``P = p`` when ``q <= p`` on T.  :func:`relaxed_law`
computes it; MARS over block verification (:mod:`specjax.verifiers.mars_block`) runs
block verification against it.

``sampled_mode="strict_ablation"`` keeps the earlier, *wrong* reading
**(ablation only, never the default)**: while relaxation is active, accept iff
``x in {top1, top2}`` (drafts outside the top-2 are rejected with probability
1, which is stricter than lossless) and emit from the unmodified base state.

Trees (docs/spec.md §3): strict before relaxed, via the ``relaxed_fallback`` hook of
:mod:`specjax.verifiers.base`.  The children are first tried with
``strict_accept_prob`` -- the base rule (greedy: ``x = top1``; ablation at an
active node: ``x = top1``, state untouched) with its residual updates; only if
all are rejected and relaxation is active, the ``top1`` child (else the
``top2`` child) is accepted by relaxation.  At T = 0 this takes the argmax
child if one was drafted, else the top-2 child.  On a single child this is
exactly ``accept_prob`` above, so chains and the analysis agree.

**(choice) greedy vs sampled detection**: from the state, ``greedy = (p has
exactly one non-zero entry)``, evaluated per node with ``jnp.where`` (no
Python control flow, no extra field).  With the default lossless base the two
forms coincide on a one-hot ``p`` anyway (lossless on ``onehot(top1)`` is
argmax matching and its correction is ``onehot(top1)``), so the detection
matters only for bases that are not argmax matching on a one-hot target
(e.g. ``base="cos"``).

**Adaptive threshold hook**: ``adaptive`` names a hook registered with
:func:`register_threshold_hook` (a string keeps the rule hashable / static
under jit).  A hook maps ``(threshold, margin, z [V], p [V]) -> [] threshold``
per node, where ``threshold`` is ``theta`` (ratio) or ``delta`` (difference).
Built in: ``"entropy"`` (see :func:`entropy_threshold`).

Relaxed-acceptance statistics: ``strict_accept_prob`` is the strict rule's
probability -- ``1[x = top1]`` in greedy form (and for the ablation at active
nodes), the base rule's ``accept_prob`` otherwise (lossless
``min(1, p_cur(x)/q(x))`` by default) -- so the drivers count
``strict <= u < a`` as relaxed: accepted only because of MARS (docs/spec.md §3).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from specjax.distributions import argmax, entropy_nats, safe_normalize
from specjax.verifiers.base import NodeRule, check_range
from specjax.verifiers.registry import (available, default_rule, register,
                                        register_threshold_hook, threshold_hook, threshold_hooks)

MARGINS = ("ratio", "difference")
SAMPLED_MODES = ("relax", "strict_ablation")


def activation(z1: jax.Array, z2: jax.Array, threshold, *, margin: str = "ratio",
               guard: bool = True) -> tuple[jax.Array, jax.Array]:
  """THE MARS activation test on the two largest raw logits ``z1 >= z2`` (any shape ``[...]``).

  Returns ``(stat, active)``:

  * ``margin="ratio"`` (the paper, Eq. 5): ``stat = z2 / z1``, with
    ``stat = 1`` for ``z1 = z2 = 0`` and ``-inf`` for ``z1 = 0 != z2``;
    ``active = stat > threshold`` (and ``z1 > 0`` with ``guard``).
  * ``margin="difference"``: ``stat = z1 - z2``, ``active = stat < threshold``.

  Used by :class:`Mars` for every node and by :mod:`specjax.analysis.margins`
  for its statistics, so both draw the same relaxation region.
  """
  if margin == "ratio":
    nz = z1 != 0
    stat = jnp.where(nz, z2 / jnp.where(nz, z1, 1.0), jnp.where(z2 == 0, 1.0, -jnp.inf))
    active = stat > threshold
    if guard:
      active = active & (z1 > 0)
    return stat, active
  if margin == "difference":
    stat = z1 - z2
    return stat, stat < threshold
  raise ValueError(f"margin={margin!r} is not allowed; allowed values: {MARGINS}")


def node_activation(z: jax.Array, p: jax.Array, *, theta, delta, margin: str = "ratio",
                    guard: bool = True, adaptive: str | None = None
                    ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """MARS's view of one node: ``(top1, top2, stat, active)`` from raw logits ``z [V]``.

  ``top1`` / ``top2`` (int32) index the two largest logits (first index wins ties;
  ``top2 = top1`` when V = 1); ``stat`` and ``active`` are :func:`activation` at the
  threshold ``theta`` (ratio) or ``delta`` (difference), passed through the
  ``adaptive`` hook when one is named (it reads ``p``).  V = 1 never relaxes.  The
  node rule (:meth:`Mars.init`) and MARS over block verification
  (:mod:`specjax.verifiers.mars_block`) both call this.
  """
  v = z.shape[-1]
  if v >= 2:
    # Two argmaxes instead of lax.top_k(z, 2): same result (first index wins
    # ties) and ~20x faster on CPU inside the vmapped verify step.
    top1 = argmax(z).astype(jnp.int32)
    top2 = argmax(z.at[top1].set(-jnp.inf)).astype(jnp.int32)
    z1, z2 = z[top1], z[top2]
  else:
    z1 = z2 = z[0]
    top1 = top2 = jnp.int32(0)
  thr = theta if margin == "ratio" else delta
  if adaptive is not None:
    thr = threshold_hook(adaptive)(thr, margin, z, p)
  stat, active = activation(z1, z2, thr, margin=margin, guard=guard)
  if v < 2:
    active = jnp.zeros((), bool)
  return top1, top2, stat, active


def relaxed_law(p: jax.Array, q: jax.Array, top1: jax.Array, top2: jax.Array,
                active: jax.Array) -> jax.Array:
  """``[..., V]`` the law of the token MARS emits at one node (relax mode, lossless base)
  when the draft is sampled, ``x ~ q``: the closed form of the module docstring,

      P(y) = p(y) + 1[y in T] (q(y) - p(y))^+ - (sum_{t in T} (q(t) - p(t))^+) r(y),

  ``T = {top1, top2}``, ``r = norm((p - q)^+)``, where ``active``; ``p`` elsewhere.
  With a one-hot ``p`` and ``q = onehot(x)`` (greedy decoding) it is the greedy form's
  deterministic outcome (``x`` if ``x = top1``, or ``x = top2`` while active, else
  ``top1``).  ``top1``, ``top2``, ``active``: ``[...]``.  Block verification run
  against this law is MARS over block verification (:mod:`specjax.verifiers.mars_block`).
  """
  ids = jnp.arange(p.shape[-1])
  in_t = (ids == top1[..., None]) | (ids == top2[..., None])
  moved = jnp.where(in_t, jnp.maximum(q - p, 0.0), 0.0)  # [..., V]
  resid = safe_normalize(jnp.maximum(p - q, 0.0), p)
  law = jnp.maximum(p + moved - jnp.sum(moved, -1, keepdims=True) * resid, 0.0)
  return jnp.where(active[..., None], law, p)


@register_threshold_hook("entropy")
def entropy_threshold(threshold, margin, z, p):
  """Scale the relaxation by the normalised entropy ``h = H(softmax(z)) / log V`` in [0, 1].

  ratio: ``theta_eff = 1 - (1 - theta) h``; difference: ``delta_eff = delta h``.
  A flat raw distribution (h = 1) keeps the configured threshold, a confident
  one (h -> 0) switches relaxation off.  Uses the raw logits (T = 1), so it
  does not depend on the sampling temperature and still works at T = 0.
  """
  del p
  v = z.shape[-1]
  h = entropy_nats(jax.nn.softmax(z.astype(jnp.float32))) / jnp.log(jnp.float32(max(v, 2)))
  h = jnp.clip(h, 0.0, 1.0)
  if margin == "ratio":
    return 1.0 - (1.0 - threshold) * h
  return threshold * h


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class MarsState:
  """Node state of :class:`Mars`.

  Attributes:
    base: the base rule's node state (untouched while relaxation is active).
    top1: [] int32, argmax of z.
    top2: [] int32, second largest logit's index (= top1 if V = 1).
    margin: [] the node's margin statistic (r = z2/z1, or z1 - z2).
    active: [] bool, relaxation active at this node.
    greedy: [] bool, p is one-hot (T = 0): the paper's Algorithm 1 form.
  """

  base: Any
  top1: jax.Array
  top2: jax.Array
  margin: jax.Array
  active: jax.Array
  greedy: jax.Array

  # Convenience views of the base state (NodeState-like bases).
  @property
  def z(self):
    return self.base.z

  @property
  def p(self):
    return self.base.p

  @property
  def p_cur(self):
    return self.base.p_cur


def _where_tree(c, a, b):
  return jax.tree.map(lambda u, v: jnp.where(c, u, v), a, b)


@register("mars")
@dataclasses.dataclass(frozen=True)
class Mars(NodeRule):
  """Margin-aware verification (MARS, Song et al. 2026, Algorithm 1 and Eq. 5).

  Relaxation active iff ``z2 / z1 > theta`` (and ``z1 > 0`` if ``guard``), or
  ``z1 - z2 < delta`` for ``margin="difference"``.  Greedy (p one-hot):
  ``a = 1[x = top1] + 1[x = top2 and active]``, correction ``onehot(top1)``.
  Sampled (relax-only, docs/spec.md §3): ``a = 1`` if active and ``x in {top1, top2}``,
  else the base rule's ``a``; ``on_reject`` / ``correction`` the base's.
  Trees: strict before relaxed (``relaxed_fallback``, module docstring).

  Attributes:
    theta: ratio threshold, in (0, inf); default 0.9 (paper).  With the guard
      on, ``theta >= 1`` never relaxes (equals greedy / the base rule).
    guard: require ``z1 > 0`` for the ratio test (default True).
    margin: "ratio" (the paper) or "difference".
    delta: logit-difference threshold for ``margin="difference"``, in [0, inf).
    adaptive: name of a registered threshold hook, or None (fixed threshold).
    base: the rule MARS relaxes in sampled mode: a registered name (default
      "lossless", built with default hyperparameters; static) or a NodeRule
      instance (nested: its float hyperparameters are traced too).

  Traced under jit (one compilation for a sweep): ``theta``, ``delta`` and
  the base rule's floats.  Static: ``guard``, ``margin``, ``adaptive``,
  ``sampled_mode`` and the base rule's kind.
    sampled_mode: "relax" (default, docs/spec.md §3) or "strict_ablation" (the earlier
      form that rejects non-top-2 drafts outright while relaxation is active;
      an ablation, never the default).
  """

  name = "mars"
  theta: float = 0.9
  guard: bool = True
  margin: str = "ratio"
  delta: float = 1.0
  adaptive: str | None = None
  base: Any = "lossless"
  sampled_mode: str = "relax"

  has_relaxed_fallback = True

  def validate(self):
    check_range("theta", self.theta, low=0.0, low_open=True, high_open=True)
    check_range("delta", self.delta, low=0.0, high_open=True)
    if self.margin not in MARGINS:
      raise ValueError(f"margin={self.margin!r} is not allowed; allowed values: {MARGINS}")
    if self.sampled_mode not in SAMPLED_MODES:
      raise ValueError(f"sampled_mode={self.sampled_mode!r} is not allowed; allowed values: "
                       f"{SAMPLED_MODES}")
    if not isinstance(self.guard, (bool, jnp.bool_)):
      raise ValueError(f"guard={self.guard!r} must be a bool")
    if self.adaptive is not None and self.adaptive not in threshold_hooks():
      raise ValueError(f"adaptive={self.adaptive!r} is not a registered threshold hook; "
                       f"allowed: None or one of {threshold_hooks()}")
    if isinstance(self.base, str):
      if self.base.lower() not in available():
        raise ValueError(f"base={self.base!r} is not a registered rule; "
                         f"allowed: {available()}")
    elif not isinstance(self.base, NodeRule):
      raise ValueError(f"base={self.base!r} must be a registered rule name or a NodeRule")
    if isinstance(self.base_rule, Mars):
      raise ValueError(f"base={self.base!r}: the base rule of MARS cannot itself be MARS")

  @property
  def base_rule(self) -> NodeRule:
    """The instantiated base rule: ``base`` itself, or the named rule with its defaults."""
    if isinstance(self.base, NodeRule):
      return self.base
    return default_rule(self.base.lower())

  @property
  def needs_node_dist(self) -> bool:
    return self.base_rule.needs_node_dist

  # --- the four node functions ------------------------------------------------------
  def init(self, z, p):
    top1, top2, stat, active = node_activation(
        z, p, theta=self.theta, delta=self.delta, margin=self.margin, guard=self.guard,
        adaptive=self.adaptive)
    greedy = jnp.sum(p > 0) == 1
    return MarsState(base=self.base_rule.init(z, p), top1=top1, top2=top2,
                     margin=stat.astype(jnp.float32), active=active, greedy=greedy)

  def init_node(self, z, p, q_node):
    """``init`` with the base rule's ``init_node`` (for bases such as CoS)."""
    state = self.init(z, p)
    return dataclasses.replace(state, base=self.base_rule.init_node(z, p, q_node))

  def _ablation_active(self, state):
    """[] bool: the strict ablation's outright top-2 test applies at this node."""
    if self.sampled_mode == "strict_ablation":
      return state.active & ~state.greedy
    return jnp.zeros((), bool)

  def accept_prob(self, state, q, x):
    dtype = state.base.p.dtype
    in_top2 = (x == state.top1) | (x == state.top2)
    strict = self.strict_accept_prob(state, q, x)
    return jnp.where(state.active & in_top2, jnp.ones((), dtype), strict)

  def on_reject(self, state, q, x):
    keep = state.greedy | self._ablation_active(state)
    rejected = self.base_rule.on_reject(state.base, q, x)
    return dataclasses.replace(state, base=_where_tree(keep, state.base, rejected))

  def correction(self, state):
    p = state.base.p
    onehot = jax.nn.one_hot(state.top1, p.shape[-1], dtype=p.dtype)
    return jnp.where(state.greedy, onehot, self.base_rule.correction(state.base))

  def relaxed_fallback(self, state, x):
    """Tree fallback priority: 2 for ``top1``, 1 for ``top2`` while relaxation is active."""
    prio = jnp.where(x == state.top1, 2.0, jnp.where(x == state.top2, 1.0, 0.0))
    return jnp.where(state.active, prio, 0.0).astype(jnp.float32)

  # --- statistics -------------------------------------------------------------------
  def strict_accept_prob(self, state, q, x):
    """The rule MARS relaxes: ``1[x = top1]`` in greedy form (and for the strict
    ablation at active nodes), the base rule's ``accept_prob`` otherwise."""
    dtype = state.base.p.dtype
    argmax_match = state.greedy | self._ablation_active(state)
    return jnp.where(argmax_match, (x == state.top1).astype(dtype),
                     self.base_rule.accept_prob(state.base, q, x))

  @property
  def never_relaxes(self) -> bool:
    """True when no logits can activate the relaxation (concrete rules only)."""
    if self.adaptive is not None:
      return False
    if self.margin == "ratio":
      return bool(self.guard) and float(self.theta) >= 1.0
    return float(self.delta) == 0.0

  @property
  def is_lossless(self) -> bool:
    return self.never_relaxes and self.base_rule.is_lossless
