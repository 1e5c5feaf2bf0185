"""The node-rule protocol and the generic chain / tree drivers.

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
four functions.  The bonus token after a fully accepted chain (or at an
accepted tree leaf) is ``correction(init(z, p))``: "no candidate left".

Two optional hooks, both used identically by the drivers and the analysis:

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
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from specjax.checks import check_range  # noqa: F401  (re-exported: verifiers.check_range)
from specjax.distributions import residual, sample_from_probs
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


class ChainResult(NamedTuple):
  """Outcome of verifying one row's chain.

  Attributes:
    num_accepted: [] int32, number n of leading drafts accepted (0..K).
    token: [] int32, the token emitted after them (correction or bonus).
    accepted: [K] bool, accepted[i] for i < n.
    relaxed: [K] bool, acceptances that only the relaxation allowed.
    emit_probs: [V] the distribution ``token`` was drawn from.
  """

  num_accepted: jax.Array
  token: jax.Array
  accepted: jax.Array
  relaxed: jax.Array
  emit_probs: jax.Array


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


def verify_chain(rule: NodeRule, z: jax.Array, p: jax.Array, q: jax.Array, x: jax.Array,
                 u: jax.Array, key: jax.Array, num_valid: jax.Array | int | None = None,
                 q_node: jax.Array | None = None) -> ChainResult:
  """Generic chain driver (docs/spec.md §2) for one row.

  Node i (0..K-1) has the single child x[i]; it is accepted iff
  ``u[i] < accept_prob``.  At the first rejection n the token is drawn from
  ``correction(on_reject(init(z[n], p[n]), q[n], x[n]))``; if all
  ``num_valid`` drafts are accepted the bonus is drawn from
  ``correction(init(z[num_valid], p[num_valid]))``.  (With a single child the
  strict-then-fallback form of ``relaxed_fallback`` rules is ``accept_prob``.)

  Args:
    rule: the node rule.
    z: [K+1, V] raw target logits; z[i] is the target's view before draft i.
    p: [K+1, V] target distributions (after temperature and processors).
    q: [K, V] distributions the drafts were drawn from.
    x: [K] int draft tokens.
    u: [K] uniforms in [0, 1).
    key: PRNG key for the emitted token.
    num_valid: drafts actually offered (<= K, may be traced); default K.
    q_node: [K, V] the drafter's full distribution at each draft position
      (``init_node``; only read by rules with ``needs_node_dist``); default
      ``q`` -- right for sampled drafts, not for greedy (one-hot) ones.
  """
  k = x.shape[0]
  states = _node_states(rule, z[:k], p[:k], q if q_node is None else q_node)
  a = jax.vmap(rule.accept_prob)(states, q, x)
  a_strict = jax.vmap(rule.strict_accept_prob)(states, q, x)
  valid = jnp.arange(k) < (k if num_valid is None else num_valid)
  ok = (u < a) & valid
  accepted = jnp.cumprod(ok.astype(jnp.int32)).astype(bool)
  n = jnp.sum(accepted).astype(jnp.int32)
  relaxed = accepted & (u >= a_strict)
  # Only the node where the chain stops needs a full-vocabulary distribution:
  # the correction after rejecting x[n] there, or the bonus at node n (all
  # offered drafts accepted). Two [V] computations, not 2K + 1.
  n_valid = k if num_valid is None else num_valid
  all_accepted = n >= n_valid
  i_rej = jnp.minimum(n, k - 1)
  state_n = jax.tree.map(lambda leaf: leaf[i_rej], states)
  reject_dist = rule.correction(rule.on_reject(state_n, q[i_rej], x[i_rej]))  # [V]
  i_bonus = jnp.minimum(n, k)
  bonus_dist = rule.correction(rule.init(z[i_bonus], p[i_bonus]))  # [V]
  emit = jnp.where(all_accepted, bonus_dist, reject_dist)
  token = sample_from_probs(key, emit)
  return ChainResult(n, token, accepted, relaxed, emit)


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
  meaningless).  The tree driver (:func:`verify_tree`) and the exact analysis
  (:mod:`specjax.analysis.induced`) both choose with it.
  """
  prio = jax.vmap(lambda t: rule.relaxed_fallback(state, t))(tokens)  # [C]
  prio = jnp.where(mask, prio, -jnp.inf)
  best = jnp.argmax(prio)  # first maximum
  return best, prio[best] > 0


class TreeResult(NamedTuple):
  """Outcome of verifying one row's tree.

  Attributes:
    path: [N] int32 node indices of the accepted path (root excluded), padded with 0.
    num_accepted: [] int32, length of the accepted path.
    token: [] int32, the emitted token.
    num_relaxed: [] int32, relaxed acceptances along the path.
    emit_probs: [V] the distribution ``token`` was drawn from.
  """

  path: jax.Array
  num_accepted: jax.Array
  token: jax.Array
  num_relaxed: jax.Array
  emit_probs: jax.Array


def _try_child(rule: NodeRule, state, q, x, u, kids, last_tried, done) -> tuple:
  """One step of :func:`verify_tree` at the current node: try its first untried child
  (``kids [N+1]``: the node's valid children; those above ``last_tried`` are untried)
  with ``u``, or -- strict before relaxed, every child rejected -- take the best
  relaxable one (:func:`relaxed_fallback_choice`).

  Returns ``(j, take, rej, relaxed, has_child)``: the child, whether it is taken, whether
  it was rejected, whether the acceptance was relaxed, whether an untried child was left.
  """
  fallback = rule.has_relaxed_fallback
  stage_prob = rule.strict_accept_prob if fallback else rule.accept_prob
  is_child = kids & (jnp.arange(x.shape[0]) > last_tried)
  has_child = jnp.any(is_child)
  j = jnp.argmax(is_child)  # first untried child
  a = stage_prob(state, q[j], x[j])
  a_strict = rule.strict_accept_prob(state, q[j], x[j])
  acc = u[j] < a
  step = has_child & ~done
  take = step & acc
  rej = step & ~acc
  relaxed = take & (u[j] >= a_strict)
  if fallback:  # every child rejected: the best relaxable one, if any
    jf, relaxable = relaxed_fallback_choice(rule, state, x, kids)
    fb = ~has_child & ~done & relaxable
    j = jnp.where(fb, jf, j)
    take = take | fb
    relaxed = relaxed | fb
  return j, take, rej, relaxed, has_child


def verify_tree(rule: NodeRule, z: jax.Array, p: jax.Array, q: jax.Array, x: jax.Array,
                parent: jax.Array, u: jax.Array, key: jax.Array,
                valid: jax.Array | None = None, q_node: jax.Array | None = None
                ) -> TreeResult:
  """Generic tree driver (docs/spec.md §2) for one row.

  Node 0 is the root (the last committed token); nodes 1..N are draft nodes
  with ``parent[j] < j``.  Starting at the root, the children of the current
  node are tried in increasing index order; the first accepted child becomes
  the current node, a rejected child's subtree is pruned.  When a node has no
  untried child left, the token is drawn from ``correction`` of its state.

  Rules with ``has_relaxed_fallback`` (MARS) are *strict before relaxed*
  (docs/spec.md §3): the children are tried with ``strict_accept_prob`` and, once all
  are rejected, the child with the highest positive ``relaxed_fallback``
  priority is accepted (a relaxed acceptance) before falling back to
  ``correction``.  Rules with ``needs_node_dist`` (CoS) build the state of a
  node that has children with ``init_node(z[j], p[j], q_node[j])``.

  Args:
    z: [N+1, V] raw target logits at every node (z[j] predicts j's children).
    p: [N+1, V] target distributions at every node.
    q: [N+1, V] distribution node j's token was drawn from (row 0 unused).
    x: [N+1] node tokens (x[0] unused).
    parent: [N+1] parent index (parent[0] ignored).
    u: [N+1] uniforms (u[j] decides node j).
    key: PRNG key for the emitted token.
    valid: optional [N+1] bool; invalid nodes are never tried.
    q_node: optional [N+1, V]; row j is the drafter's full distribution at
      node j, from which j's children were proposed (required by rules with
      ``needs_node_dist``; rows of nodes without children are not read).
  """
  n1 = x.shape[0]
  idx = jnp.arange(n1)
  if valid is None:
    valid = jnp.ones((n1,), bool)
  valid = valid & (idx > 0)
  if rule.needs_node_dist and q_node is None:
    raise _missing_node_dist(rule)
  fallback = rule.has_relaxed_fallback
  # [N+1] valid children per node (parent[0] is ignored: node 0 is never valid).
  n_kids = jnp.zeros((n1,), jnp.int32).at[parent].add(valid.astype(jnp.int32))

  def node_state(j):
    state = rule.init(z[j], p[j])
    if rule.needs_node_dist:
      with_q = rule.init_node(z[j], p[j], q_node[j])
      state = jax.tree.map(lambda a, b: jnp.where(n_kids[j] > 0, a, b), with_q, state)
    return state

  def body(i, carry):
    cur, state, last_tried, done, path, depth, nrel = carry
    j, take, rej, relaxed, has_child = _try_child(rule, state, q, x, u, (parent == cur) & valid,
                                                  last_tried, done)
    new_state_acc = node_state(j)
    new_state_rej = rule.on_reject(state, q[j], x[j])
    state = jax.tree.map(lambda sa, sr, s: jnp.where(take, sa, jnp.where(rej, sr, s)),
                         new_state_acc, new_state_rej, state)
    path = jnp.where(take, path.at[depth].set(j), path)
    nrel = nrel + relaxed.astype(jnp.int32)
    depth = depth + take.astype(jnp.int32)
    cur = jnp.where(take, j, cur)
    last_tried = jnp.where(take, 0, jnp.where(rej, j, last_tried))
    done = done | (~has_child & ~take)
    return cur, state, last_tried, done, path, depth, nrel

  state0 = node_state(0)
  carry = (jnp.int32(0), state0, jnp.int32(0), jnp.bool_(False),
           jnp.zeros((max(n1 - 1, 1),), jnp.int32), jnp.int32(0), jnp.int32(0))
  # Each iteration tries one node, takes a fallback child or finishes: N tries,
  # at most N fallback descents and 1 final check.
  n_iter = 2 * n1 if fallback else n1
  _, state, _, _, path, depth, nrel = jax.lax.fori_loop(0, n_iter, body, carry)
  emit = rule.correction(state)
  token = sample_from_probs(key, emit)
  return TreeResult(path, depth, token, nrel, emit)
