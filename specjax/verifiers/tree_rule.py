"""Tree rules: verification that decides over a whole drafted tree at once.

A node rule (:mod:`specjax.verifiers.base`) decides one node at a time, top
down.  A *tree
rule* sees the whole drafted tree of one row at once -- the node tokens, the
parents, the distribution each node's token was drawn from, the drafter's full
distribution at each node, the target's logits and distribution at every node
and one uniform per node -- and returns the accepted root-to-node path and the
distribution of the token emitted after it (docs/path_rules.md, "Tree rules").
Traversal verification (:mod:`specjax.verifiers.traversal`) is the first one;
a node rule on a tree is the special case, through :class:`NodeTreeRule`, the
one tree driver of a node rule: the decoding loop and the exact analysis both
reach a node rule on a tree through it.

Layout (one row)::

    z, p     [N+1, V]  target logits / distribution at every node: row j predicts
                       the children of node j (row 0: the root, the last committed token)
    q        [N+1, V]  q[j] = the distribution node j's token was drawn from, given
                       everything drafted before it (row 0 unused)
    x        [N+1] int node tokens (x[0] unused)
    parents  [N+1] int parent tree index, parents[j] < j (parents[0] ignored)
    u        [N+1]     uniforms in [0, 1), u[j] decides node j (u[0] unused)
    valid    [N+1] bool optional: nodes offered (an invalid node's subtree must be
                       invalid too); default all
    q_node   [N+1, V]  optional: the drafter's full distribution at each node (read
                       only by node rules with ``needs_node_dist``)

A tree rule is a frozen dataclass and a pytree (float fields traced) with
three pure methods over one row:

* ``verify_tree_path(z, p, q, x, parents, u, valid=None, q_node=None) ->
  TreeDecision`` -- the sampled decision: the accepted path (root first, ragged
  length) and ``emit_dist [V]``.
* ``end_node_law(z, p, q, x, parents, valid=None, q_node=None) -> [N+1]`` --
  the exact law of the last accepted node ``e`` (0: only the root, nothing
  accepted) given the tree, the uniforms integrated out.  ``verify_tree_path``
  draws ``e`` from exactly this law.
* ``end_node_emit(z, p, q, x, parents, valid=None, q_node=None) -> [N+1, V]``
  -- row j: the emitted token's distribution given ``e = j`` (zeros where
  ``e = j`` has probability 0 by construction, e.g. invalid nodes).

The number of accepted drafts is the depth of ``e``.  Every tree rule is also a
:class:`~specjax.verifiers.path.PathRule`: a chain of K drafts is the tree
whose node j (depth j) has parent j - 1, so block-style chain verification,
the chain analysis (:mod:`specjax.analysis.path_law`) and the loop's chain
strategy all take a tree rule unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from specjax.verifiers.base import NodeRule, _missing_node_dist, relaxed_fallback_choice
from specjax.verifiers.path import PathDecision, PathRule, _check_length, check_path_shapes


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TreeDecision:
  """What a tree rule decides for one row.

  Attributes:
    end: [] int32 the last accepted node (0: the root, no draft accepted).
    path: [N+1] int32 the accepted path, root first: ``path[0] = 0`` and
      ``path[1..num_accepted]`` the accepted nodes in depth order; 0 beyond.
    num_accepted: [] int32 the depth of ``end`` (drafts accepted).
    emit_dist: [V] the distribution of the token emitted after the path; the
      caller draws it.
    num_relaxed: [] int32 acceptances along the path that only a lossy
      relaxation allowed, or None: the rule does not count them (the loop then
      counts 0).
  """

  end: jax.Array
  path: jax.Array
  num_accepted: jax.Array
  emit_dist: jax.Array
  num_relaxed: Optional[jax.Array] = None


def check_tree_shapes(z, p, q, x, parents, u=None) -> tuple[int, int]:
  """``(N+1, V)`` from one row's arrays; ``ValueError`` naming the first bad shape."""
  if x.ndim != 1 or x.shape[0] < 1:
    raise ValueError(f"x must be [N+1] node tokens of one row (root first); got shape "
                     f"{x.shape} (use verify_tree_rule_batch for [B, N+1])")
  n1 = x.shape[0]
  if p.ndim != 2 or p.shape[0] != n1:
    raise ValueError(f"p must be [N+1, V] = [{n1}, V]; got shape {p.shape}")
  v = p.shape[1]
  for name, arr in (("z", z), ("q", q)):
    if arr.shape != (n1, v):
      raise ValueError(f"{name} must be [N+1, V] = {(n1, v)}; got shape {arr.shape}")
  if parents.shape != (n1,):
    raise ValueError(f"parents must be [N+1] = ({n1},); got shape {parents.shape}")
  if u is not None and u.shape != (n1,):
    raise ValueError(f"uniforms must be [N+1] = ({n1},); got shape {u.shape}")
  return n1, v


def path_to(end: jax.Array, parents: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(path [N+1], depth [])``: the root-to-``end`` path, root first, 0-padded.

  ``parents [N+1]`` with ``parents[j] < j``; walks up from ``end`` N times.
  """
  parents = jnp.asarray(parents)
  n1 = parents.shape[0]
  par = parents.at[0].set(0)

  def up(cur, _):
    return par[cur], cur

  _, ups = jax.lax.scan(up, end, None, length=n1)  # ups[i]: i steps above end (0 = root)
  depth = jnp.sum(ups > 0).astype(jnp.int32)
  k = jnp.arange(n1)
  # path[k] = ups[depth - k] for 1 <= k <= depth; ups[depth] is the root.
  path = jnp.where((k >= 1) & (k <= depth), ups[jnp.clip(depth - k, 0, n1 - 1)], 0)
  return path.astype(jnp.int32), depth


def first_success(order_rank: jax.Array, a: jax.Array, u: jax.Array) -> jax.Array:
  """[] int32 the node with the smallest ``order_rank`` among ``u < a`` (the root,
  node 0, always succeeds): a draw from :func:`first_success_law`."""
  idx = jnp.arange(a.shape[0])
  ok = (u < a) | (idx == 0)
  big = jnp.iinfo(jnp.int32).max
  return jnp.argmin(jnp.where(ok, order_rank, big)).astype(jnp.int32)


def first_success_law(order_rank: jax.Array, a: jax.Array) -> jax.Array:
  """[N+1] ``P(e = j) = a_j prod_{i before j} (1 - a_i)``, nodes decided in
  increasing ``order_rank`` (each with probability ``a`` given all earlier ones
  failed); ``a`` must be 0 at nodes never decided."""
  order = jnp.argsort(order_rank)
  a_sorted = a[order]
  before = jnp.concatenate([jnp.ones((1,), a.dtype), jnp.cumprod(1.0 - a_sorted)[:-1]])
  return jnp.zeros_like(a).at[order].set(a_sorted * before)


def _all_valid(valid, n1):
  idx = jnp.arange(n1)
  v = jnp.ones((n1,), bool) if valid is None else jnp.asarray(valid)
  return (v & (idx > 0)) | (idx == 0)


def _decision(end, parents, emit) -> TreeDecision:
  path, depth = path_to(end, parents)
  return TreeDecision(end, path, depth, emit)


@dataclasses.dataclass(frozen=True)
class TreeRule(PathRule):
  """Base class of tree rules (module docstring; docs/path_rules.md "Tree rules").

  Subclasses implement :meth:`end_node_law`, :meth:`end_node_emit` and
  :meth:`verify_tree_path`; the chain methods of :class:`PathRule` follow
  (a chain is a tree with one child per node).
  """

  name = "tree"

  def verify_tree_path(self, z, p, q, x, parents, u, valid=None, q_node=None) -> TreeDecision:
    """The sampled decision for one row (shapes in the module docstring)."""
    raise NotImplementedError(f"{type(self).__name__} must define verify_tree_path")

  def end_node_law(self, z, p, q, x, parents, valid=None, q_node=None) -> jax.Array:
    """[N+1] exact ``P(e = j | tree)``."""
    raise NotImplementedError(f"{type(self).__name__} must define end_node_law")

  def end_node_emit(self, z, p, q, x, parents, valid=None, q_node=None) -> jax.Array:
    """[N+1, V] row j: the emitted token's distribution given ``e = j``."""
    raise NotImplementedError(f"{type(self).__name__} must define end_node_emit")

  # --- a chain as a tree ------------------------------------------------------------
  @staticmethod
  def _chain_as_tree(z, p, q, x, u, length, q_node):
    k, _ = check_path_shapes(z, p, q, x, u)
    _check_length(length, k)
    pad = lambda a: jnp.concatenate([jnp.zeros_like(a[:1]), a])
    parents = jnp.maximum(jnp.arange(k + 1, dtype=jnp.int32) - 1, 0)
    valid = jnp.arange(k + 1) <= (k if length is None else length)
    tree_q_node = None if q_node is None else jnp.concatenate([q_node, q_node[-1:]])
    return (z, p, pad(q), pad(x), parents, None if u is None else pad(u), valid, tree_q_node)

  def accept_length_law(self, z, p, q, x, length=None, q_node=None):
    z, p, q, x, par, _, valid, qn = self._chain_as_tree(z, p, q, x, None, length, q_node)
    return self.end_node_law(z, p, q, x, par, valid, qn)

  def emit_dists(self, z, p, q, x, length=None, q_node=None):
    z, p, q, x, par, _, valid, qn = self._chain_as_tree(z, p, q, x, None, length, q_node)
    return jnp.where(valid[:, None], self.end_node_emit(z, p, q, x, par, valid, qn), 0.0)

  def verify_path(self, z, p, q, x, u, length=None, q_node=None):
    z, p, q, x, par, u, valid, qn = self._chain_as_tree(z, p, q, x, u, length, q_node)
    dec = self.verify_tree_path(z, p, q, x, par, u, valid, qn)
    return PathDecision(dec.num_accepted, dec.emit_dist, dec.num_relaxed)


def _try_child(rule: NodeRule, state, q, x, u, kids, last_tried, done) -> tuple:
  """One step of the walk at the current node: try its first untried child
  (``kids [N+1]``: the node's valid children; those above ``last_tried`` are untried)
  with ``u``, or -- strict before relaxed, every child rejected -- take the best
  relaxable one (:func:`~specjax.verifiers.base.relaxed_fallback_choice`).

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


def _walk_tree(rule: NodeRule, z, p, q, x, parent, u, valid, q_node) -> tuple:
  """The sampled walk of :class:`NodeTreeRule` over one row (layout in the module
  docstring; ``valid`` may be None).  Returns ``(path [max(N, 1)] accepted nodes in
  depth order, 0-padded; depth [] int32; emit [V] correction of the last state;
  num_relaxed [] int32)``.

  Each iteration tries one child, takes a fallback child or finishes: N tries, at
  most N fallback descents (strict-before-relaxed rules) and 1 final check."""
  n1 = x.shape[0]
  idx = jnp.arange(n1)
  valid = (jnp.ones((n1,), bool) if valid is None else valid) & (idx > 0)
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

  carry = (jnp.int32(0), node_state(0), jnp.int32(0), jnp.bool_(False),
           jnp.zeros((max(n1 - 1, 1),), jnp.int32), jnp.int32(0), jnp.int32(0))
  n_iter = 2 * n1 if rule.has_relaxed_fallback else n1
  _, state, _, _, path, depth, nrel = jax.lax.fori_loop(0, n_iter, body, carry)
  return path, depth, rule.correction(state), nrel


@dataclasses.dataclass(frozen=True)
class NodeTreeRule(TreeRule):
  """A node rule on a tree, as a tree rule: token-level tree verification
  (docs/spec.md §2).

  :meth:`verify_tree_path` walks the tree: from the root, the children of the
  current node are tried in increasing index order with the node rule's
  ``accept_prob`` (``on_reject`` between them); the first accepted child
  becomes the current node, a rejected child's subtree is pruned; with no
  untried child left the token comes from ``correction``.  Rules with
  ``needs_node_dist`` (CoS) build the state of a node that has children with
  ``init_node(z[j], p[j], q_node[j])``.  Its exact law: the state at a node after its first children
  were rejected does not depend on the uniforms, so with ``a_c`` the
  acceptance probability of child c at its turn, ``P(pass c) = P(pass parent)
  prod_{earlier siblings s} (1 - a_s) a_c`` and ``P(e = j) = P(pass j)
  prod_{children c of j} (1 - a_c)``, emitting ``correction`` of j's state
  after all its children were rejected.

  Rules with a strict-before-relaxed fallback (MARS, docs/spec.md §3): ``a_c``
  is ``strict_accept_prob`` and, as in the walk, the mass
  ``P(pass j) prod_c (1 - a_c)`` of "every child of j strictly rejected" goes
  to the child with the highest positive ``relaxed_fallback`` priority in j's
  final state (the first on ties) when there is one -- that child passes --
  and to ``correction`` otherwise.

  Attributes:
    node: the node rule (a nested pytree: its float hyperparameters are traced).
  """

  node: NodeRule = None

  name = "node_tree"

  def validate(self):
    if not isinstance(self.node, NodeRule):
      raise ValueError(f"node={self.node!r} must be a NodeRule (specjax.verifiers.base)")

  def _walk(self, z, p, q, x, parents, valid, q_node):
    """(law [N+1], emit [N+1, V]): one pass over the children in index order gives
    each child's pass probability given its parent passed (``cond``) and each node's
    final state; a second pass multiplies ``cond`` down the tree."""
    n1, _ = check_tree_shapes(z, p, q, x, parents)
    z, p, q, x, parents = (jnp.asarray(a) for a in (z, p, q, x, parents))
    rule = self.node
    if rule.needs_node_dist and q_node is None:
      raise _missing_node_dist(rule)
    valid = _all_valid(valid, n1)
    idx = jnp.arange(n1)
    kid = valid & (idx > 0)
    n_kids = jnp.zeros((n1,), jnp.int32).at[parents].add(kid.astype(jnp.int32))
    states = jax.vmap(rule.init)(z, p)
    if rule.needs_node_dist:
      with_q = jax.vmap(rule.init_node)(z, p, q_node)
      states = jax.tree.map(
          lambda a, b: jnp.where((n_kids > 0).reshape((-1,) + (1,) * (a.ndim - 1)), a, b),
          with_q, states)
    stage = rule.strict_accept_prob if rule.has_relaxed_fallback else rule.accept_prob

    def body(j, carry):
      states, cond, rej = carry
      par = parents[j]
      st = jax.tree.map(lambda leaf: leaf[par], states)
      a = stage(st, q[j], x[j])
      on = kid[j]
      cond = cond.at[j].set(jnp.where(on, rej[par] * a, 0.0))
      rej = rej.at[par].set(jnp.where(on, rej[par] * (1.0 - a), rej[par]))
      new = rule.on_reject(st, q[j], x[j])
      states = jax.tree.map(lambda leaf, nl: leaf.at[par].set(jnp.where(on, nl, leaf[par])),
                            states, new)
      return states, cond, rej

    zeros = jnp.zeros((n1,), p.dtype)
    states, cond, rej = jax.lax.fori_loop(1, n1, body, (states, zeros, jnp.ones((n1,), p.dtype)))
    if rule.has_relaxed_fallback:
      cond, rej = self._fallback(states, x, parents, kid, cond, rej)
    reach = jax.lax.fori_loop(1, n1, lambda j, r: r.at[j].set(r[parents[j]] * cond[j]),
                              zeros.at[0].set(1.0))
    law = jnp.where(valid, reach * rej, 0.0)
    emit = jax.vmap(rule.correction)(states)
    return law, emit

  def _fallback(self, states, x, parents, kid, cond, rej):
    """Strict before relaxed: node s's "all strictly rejected" mass ``rej[s]`` moves
    to its child of highest positive priority (first on ties), as
    :func:`~specjax.verifiers.base.relaxed_fallback_choice` picks it."""
    n1 = x.shape[0]
    idx = jnp.arange(n1)
    prio = jax.vmap(lambda j: self.node.relaxed_fallback(
        jax.tree.map(lambda leaf: leaf[parents[j]], states), x[j]))(idx)
    prio = jnp.where(kid, prio, -jnp.inf)
    sib = kid[:, None] & kid[None, :] & (parents[:, None] == parents[None, :])  # [c, c']
    beats = jnp.where(idx[None, :] < idx[:, None], prio[:, None] > prio[None, :],
                      prio[:, None] >= prio[None, :])
    best = kid & (prio > 0) & jnp.all(~sib | beats, axis=1)  # [N+1] the chosen children
    cond = cond + jnp.where(best, rej[parents], 0.0)
    taken = jnp.zeros((n1,), bool).at[parents].max(best)
    return cond, jnp.where(taken, 0.0, rej)

  def end_node_law(self, z, p, q, x, parents, valid=None, q_node=None):
    return self._walk(z, p, q, x, parents, valid, q_node)[0]

  def end_node_emit(self, z, p, q, x, parents, valid=None, q_node=None):
    return self._walk(z, p, q, x, parents, valid, q_node)[1]

  def verify_tree_path(self, z, p, q, x, parents, u, valid=None, q_node=None):
    n1, _ = check_tree_shapes(z, p, q, x, parents, u)
    if self.node.needs_node_dist and q_node is None:
      raise _missing_node_dist(self.node)
    walked, depth, emit, nrel = _walk_tree(self.node, z, p, q, x, parents, u, valid, q_node)
    path = jnp.concatenate([jnp.zeros((1,), jnp.int32), walked[:n1 - 1]])
    path = jnp.where(jnp.arange(n1) <= depth, path, 0)
    return TreeDecision(path[depth], path, depth, emit, nrel)

  @property
  def is_lossless(self) -> bool:
    return self.node.is_lossless


def as_tree_rule(rule) -> TreeRule:
  """``rule`` itself if it is a tree rule, :class:`NodeTreeRule` around a node rule."""
  if isinstance(rule, TreeRule):
    return rule
  if isinstance(rule, NodeRule):
    return NodeTreeRule(rule)
  raise ValueError(f"rule={rule!r} is neither a tree rule (TreeRule) nor a node rule "
                   f"(NodeRule); a chain-only path rule such as 'block' has no tree form")


def verify_tree_rule_batch(rule: TreeRule, z, p, q, x, parents, u, valid=None,
                           q_node=None) -> TreeDecision:
  """:meth:`TreeRule.verify_tree_path` over a batch of rows.

  Args:
    rule: a tree rule.
    z, p, q: [B, N+1, V]; x, parents, u: [B, N+1]; valid: optional [B, N+1] bool;
      q_node: optional [B, N+1, V].

  Returns:
    :class:`TreeDecision` with leading axis B.
  """
  if not isinstance(rule, TreeRule):
    raise ValueError(f"rule={rule!r} must be a TreeRule (e.g. verifiers.get('traversal'))")
  args = [z, p, q, x, parents, u]
  opt = {"valid": valid, "q_node": q_node}
  names = [k for k, a in opt.items() if a is not None]
  extra = [opt[k] for k in names]

  def one(*a):
    kw = dict(zip(names, a[6:]))
    return rule.verify_tree_path(*a[:6], **kw)

  return jax.vmap(one)(*args, *extra)
