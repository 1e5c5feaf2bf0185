"""The node-rule protocol.

A verification rule is four pure functions over ONE tree node (docs/spec.md §2):

    state = rule.init(z, p)                 # z raw target logits [V], p target dist [V]
    a     = rule.accept_prob(state, q, x)   # in [0, 1]; q [V] the draft dist, x the token
    state = rule.on_reject(state, q, x)     # before the next sibling is tried
    r     = rule.correction(state)          # [V] dist of the emitted token when every
                                            # candidate was rejected (or there were none)

``p`` is the target's distribution *after* temperature and the logits
processors (one-hot at argmax for temperature 0), ``z`` the raw logits (rules
such as MARS look at logit ratios, which temperature does not change).

Everything else -- chains, trees, greedy and sampled decoding, the exact
induced distribution in :mod:`specjax.analysis.induced` -- is built from these
four functions.  A node rule reaches the decoding loop through one adapter per
draft shape: :class:`~specjax.verifiers.path.NodePathRule` on a chain (the
chain's one driver is the path-rule protocol) and
:class:`~specjax.verifiers.tree_rule.NodeTreeRule` on a tree (the tree's one
driver is the tree-rule protocol).  The bonus token after a fully accepted chain (or at an
accepted tree leaf) is ``correction(init(z, p))``: "no candidate left".

Two optional hooks, both used identically by the adapters and the analysis:

* ``init_node(z, p, q_node)`` (rules with ``needs_node_dist = True``, e.g.
  CoS): the node state may depend on the drafter's *full* distribution
  ``q_node [V]`` at the node (docs/spec.md §3: CoS forms ``pi`` once per node), which
  for deterministic candidates (one-hot ``q``) is not the ``q`` passed to
  ``accept_prob``.  Nodes without candidates (the bonus) still use ``init``.
* ``relaxed_fallback(state, x) -> [] priority`` (rules with
  ``has_relaxed_fallback = True``, e.g. MARS): *strict before relaxed* on
  trees (docs/spec.md §3).  The children of a node are first tried in order with
  ``strict_accept_prob`` (and ``on_reject`` between them); only if every child
  is rejected, the child with the highest positive priority (first in order
  on ties) is accepted as a relaxed acceptance; with none, ``correction``.
  On a single child this must be the same law as ``accept_prob``:
  ``accept_prob = strict + (1 - strict) 1[relaxed_fallback > 0]``.

Writing a new rule (~20 lines)::

    import dataclasses, jax.numpy as jnp
    from specjax import verifiers
    from specjax.verifiers.lossless import Lossless

    @verifiers.register("half_lenient")
    @dataclasses.dataclass(frozen=True)
    class HalfLenient(Lossless):
        '''Accept with min(1, 2 p(x) / q(x)); residual as lossless.'''
        factor: float = 2.0

        def validate(self):
            verifiers.check_range("factor", self.factor, low=1.0)

        def accept_prob(self, state, q, x):
            return jnp.minimum(1.0, self.factor * state.p_cur[x] / q[x])

        def strict_accept_prob(self, state, q, x):   # for relaxed-acceptance stats
            return super().accept_prob(state, q, x)

Rules are frozen dataclasses *and pytrees* (:mod:`specjax.hyperparams`):
float hyperparameters (``factor`` above, MARS ``theta``, CoS ``lam``, ...) and
nested rules are traced leaves, so ``speculative_generate`` and the analysis
compile once for a whole sweep of them; strings, bools, ints and ``None``
(a gate, a margin type, a flag) are static and select the compiled program.
A float that must stay static -- it sets a shape or is read by a Python
``if`` -- is named in the class attribute ``static_fields``::

        static_fields = ("factor",)   # recompile per value; self.factor is a float

``validate`` runs once, at construction, on concrete values (JAX rebuilds
rules from leaves without calling it), so it may use ``float(...)`` and
Python comparisons; the four node functions must treat traced fields as
arrays (``jnp.where``, not ``if``).  Concrete rules stay hashable (they may
still be passed as a static argument).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from specjax.checks import check_range  # noqa: F401  (re-exported: verifiers.check_range)
from specjax.distributions import residual
from specjax.hyperparams import Hyperparams

NodeStateT = Any


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class NodeState:
  """Default per-node verifier state.

  Attributes:
    z: [V] raw target logits at the node.
    p: [V] target distribution after temperature/processors (never modified).
    p_cur: [V] current residual distribution (modified by ``on_reject``).
  """

  z: jax.Array
  p: jax.Array
  p_cur: jax.Array


def safe_ratio(num: jax.Array, den: jax.Array) -> jax.Array:
  """``min(1, num / den)``, with 1 where ``den == 0`` and ``num > 0`` and 0 where both are."""
  return jnp.where(den > 0, jnp.minimum(1.0, num / jnp.where(den > 0, den, 1.0)),
                   (num > 0).astype(num.dtype))


@dataclasses.dataclass(frozen=True)
class NodeRule(Hyperparams):
  """Base class of verification rules. Subclasses are frozen dataclasses.

  The default implementation is the lossless rule's bookkeeping (a state with
  ``p_cur``); subclasses override what they change.  ``validate`` runs at
  construction (concrete values only) and must raise ``ValueError`` naming bad
  hyperparameters.  Every subclass is a pytree: float fields and nested rules
  are traced, the rest static (``static_fields`` forces a float static); see
  the module docstring and :mod:`specjax.hyperparams`.
  """

  name = "base"
  # Static flags of the optional hooks (see the module docstring).
  needs_node_dist = False
  has_relaxed_fallback = False

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    pass

  # --- the four node functions ------------------------------------------------
  def init(self, z: jax.Array, p: jax.Array) -> NodeStateT:
    return NodeState(z=z, p=p, p_cur=p)

  def accept_prob(self, state: NodeStateT, q: jax.Array, x: jax.Array) -> jax.Array:
    raise NotImplementedError(f"{type(self).__name__} must define accept_prob")

  def on_reject(self, state: NodeStateT, q: jax.Array, x: jax.Array) -> NodeStateT:
    return dataclasses.replace(state, p_cur=residual(state.p_cur, q))

  def correction(self, state: NodeStateT) -> jax.Array:
    return state.p_cur

  # --- optional hooks -------------------------------------------------------------
  def init_node(self, z: jax.Array, p: jax.Array, q_node: jax.Array) -> NodeStateT:
    """State of a node whose candidates the drafter proposed from ``q_node [V]``.

    Default: ``init(z, p)`` (``q_node`` unused).  Rules whose node state
    depends on the drafter's full distribution set ``needs_node_dist = True``.
    """
    del q_node
    return self.init(z, p)

  def relaxed_fallback(self, state: NodeStateT, x: jax.Array) -> jax.Array:
    """[] priority (> 0: acceptable) of child ``x`` after every child was strictly rejected.

    Only called when ``has_relaxed_fallback``; the default never accepts.
    """
    del state, x
    return jnp.zeros((), jnp.float32)

  # --- statistics -----------------------------------------------------------------
  def strict_accept_prob(self, state: NodeStateT, q: jax.Array, x: jax.Array) -> jax.Array:
    """Acceptance probability of the strict rule this one relaxes.

    An acceptance is counted as *relaxed* when the shared uniform ``u``
    satisfies ``strict <= u < accept_prob``: accepted only because of the
    relaxation.  Lossless rules return ``accept_prob`` (never relaxed).
    """
    return self.accept_prob(state, q, x)

  @property
  def is_lossless(self) -> bool:
    """True when the rule provably reproduces the target distribution."""
    return False


def _node_states(rule: NodeRule, z, p, q_node):
  """``init_node`` for rules that need the drafter's node distribution, else ``init``.

  z, p: [..., V]; q_node: [..., V] or None.  Leading axes are vmapped.
  """
  fn = rule.init if not rule.needs_node_dist else rule.init_node
  args = (z, p) if not rule.needs_node_dist else (z, p, q_node)
  for _ in range(z.ndim - 1):
    fn = jax.vmap(fn)
  return fn(*args)


def _missing_node_dist(rule: NodeRule) -> ValueError:
  return ValueError(f"verifier {type(rule).__name__} ({rule.name!r}) forms its target from "
                    "the drafter's full distribution at each node (docs/spec.md §3), but no q_node "
                    "was given")


def relaxed_fallback_choice(rule: NodeRule, state, tokens: jax.Array, mask: jax.Array
                            ) -> tuple[jax.Array, jax.Array]:
  """Strict before relaxed (docs/spec.md §3), once every candidate of a node was
  strictly rejected: the candidate with the highest positive
  ``rule.relaxed_fallback(state, token)`` priority (the first on ties) is accepted.

  Args:
    rule: a rule with ``has_relaxed_fallback``.
    state: the node state after the strict tries.
    tokens: [C] candidate tokens.
    mask: [C] bool, which entries are candidates.

  Returns ``(i [] int, take [] bool)``: the chosen entry and whether any candidate is
  relaxable (``take`` False: the node ends with ``correction``; ``i`` is then
  meaningless).  The node rule's tree walk
  (:class:`~specjax.verifiers.tree_rule.NodeTreeRule`) and the exact analysis
  (:mod:`specjax.analysis.induced`) both choose with it.
  """
  prio = jax.vmap(lambda t: rule.relaxed_fallback(state, t))(tokens)  # [C]
  prio = jnp.where(mask, prio, -jnp.inf)
  best = jnp.argmax(prio)  # first maximum
  return best, prio[best] > 0
