"""Exact law of one round of static-tree verification, children top-k or sampled.

docs/spec.md §6 ("Trees").  For one context, a static tree of rank paths
(:func:`specjax.decoding.tree.static_tree` layout; depth D) and a node rule,
every way the drafter can fill the tree is enumerated with its probability,
and the node rule's four functions integrate out the uniforms exactly as
:func:`specjax.verifiers.base.verify_tree` uses them.  No sampling anywhere.

How the tree is filled (``children``):

* ``"topk"``: each expanded node's children are the top-ranked tokens of its
  node distribution (``lax.top_k``, lower index first on ties), ``q = onehot``;
  one filling.
* ``"sampled"``: each expanded node draws ``m`` distinct tokens one after
  another without replacement from its node distribution (``m`` = its largest
  child rank + 1); a node of rank r is draw r, verified with
  ``sibling_q(q_node, draws)[r]`` -- by default
  :func:`specjax.distributions.without_replacement_q`, the draw's true law
  given the earlier draws, which makes the lossless rule recursive rejection
  sampling (Jeon et al. 2024, §3.1).  A filling's probability is the product
  over expanded nodes of ``prod_j without_replacement_q(q_node, draws)[j,
  draws_j]`` (the same function: the drafter's draw law).  Passing another
  ``sibling_q`` verifies the same drafts with the wrong ``q`` (e.g. ``q_node``
  for every sibling: with-replacement verification of without-replacement
  drafts) -- the tests use it to show that this is not lossless.

Per filling, with ``reach_0 = 1`` and the children ``c_1..c_m`` of node s
tried in order from the state ``init(z_s, p_s)`` (``init_node`` for rules
with ``needs_node_dist``)::

    reach_{c_j} = r_j a_j,  r_{j+1} = r_j (1 - a_j),  r_1 = reach_s,
    a_j = accept_prob(state_j, q_{c_j}, x_{c_j}),  state_{j+1} = on_reject(state_j, ..),
    P(stop at s, emit y) = r_{m+1} correction(state_{m+1})(y)

(rules with ``has_relaxed_fallback``: ``a_j`` is ``strict_accept_prob`` and
``r_{m+1}`` goes to the child of highest positive ``relaxed_fallback``
priority, as in ``verify_tree``); a leaf emits ``correction(init(z_s, p_s))``.
Summing over fillings gives the law of the emitted block ``(path tokens, y)``,
the law of ``tau`` (the accepted path's length), ``E[tau]`` and the law of the
first D+1 emitted tokens when the block is followed by sampling from the
target; the rule is lossless at the context iff that equals the target's
joint law (:class:`specjax.analysis.path_law.ChainLaw`, whose fields this
returns).  Tables: :class:`specjax.analysis.path_law.ChainTables` with K = D:
``p[d]`` the target after a depth-d prefix (d = 0..D), ``q[d]`` the drafter's
node distribution at a depth-d node (d = 0..D-1), ``z`` optional.

Cost: ``prod_s V!/(V-m_s)!`` fillings (sampled) times the tree's node
functions -- V <= ~6 and a handful of expanded nodes.

Relation to :mod:`specjax.analysis.tree_law` (tree rules such as traversal
verification, by enumeration of every token assignment): this module follows
the repo's static drafters step for step -- their rank paths, their fill rule
once a parent's support is used up (the lowest-index unused tokens, one-hot
``q``; ``tree_law`` leaves such siblings out instead), ``verify_tree``'s
strict-before-relaxed fallback -- and lets a test verify the drafts with another
``sibling_q`` than the one they were drawn with.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.analysis.path_law import ChainLaw, ChainTables, check_tables
from specjax.distributions import without_replacement_q
from specjax.tree_layout import static_tree
from specjax.verifiers.base import NodeRule

CHILDREN = ("topk", "sampled")
MAX_FILLINGS = 2_000_000


class _Shape:
  """Static structure of the tree (tree indices: 0 the root, node j is j + 1)."""

  def __init__(self, paths, vocab: int, children: str):
    parents, depths, ranks = static_tree(paths)
    self.n = len(parents)
    self.parent = np.concatenate([[0], parents])
    self.depth = np.concatenate([[0], depths])
    self.rank = np.concatenate([[0], ranks])
    self.kids = [[c for c in range(1, self.n + 1) if self.parent[c] == s]
                 for s in range(self.n + 1)]
    self.expanded = [s for s in range(self.n + 1) if self.kids[s]]
    self.width = {s: int(max(self.rank[c] for c in self.kids[s])) + 1 for s in self.expanded}
    self.path = [[]]  # tree indices from depth 1 down to the node
    for j in range(1, self.n + 1):
      self.path.append(self.path[self.parent[j]] + [j])
    too_wide = [(s, m) for s, m in self.width.items() if m > vocab]
    if too_wide:
      raise ValueError(f"a node needs {too_wide[0][1]} distinct children but V = {vocab}")
    if children == "sampled":
      self.perms = {s: np.array(list(itertools.permutations(range(vocab), m)), np.int32)
                    for s, m in self.width.items()}
      count = math.prod(len(v) for v in self.perms.values())
      if count > MAX_FILLINGS:
        raise ValueError(f"{count} fillings of this tree at V = {vocab} (limit "
                         f"{MAX_FILLINGS}): use a smaller vocabulary or tree")
      grids = np.meshgrid(*[np.arange(len(self.perms[s])) for s in self.expanded],
                          indexing="ij")
      self.choices = np.stack([g.reshape(-1) for g in grids], 1).astype(np.int32)
    else:
      self.perms = None
      self.choices = np.zeros((1, len(self.expanded)), np.int32)


def _at(table, tokens, path):
  """``table[x_path...]``: the row after the prefix ``tokens[path]``."""
  return table[tuple(tokens[i] for i in path)] if path else table


def _filling_law(rule: NodeRule, tables: ChainTables, shape: _Shape, children: str,
                 sibling_q: Callable, choice):
  """One filling: (probability [], tokens [N+1], stop law [N+1, V])."""
  v = tables.p[0].shape[-1]
  tokens = [jnp.int32(0)] * (shape.n + 1)
  q_of = [None] * (shape.n + 1)
  qn_of = {}
  prob = jnp.float32(1.0)
  for e, s in enumerate(shape.expanded):
    d, m = int(shape.depth[s]), shape.width[s]
    qn = _at(tables.q[d], tokens, shape.path[s])  # [V] the node distribution
    qn_of[s] = qn
    if children == "sampled":
      draws = jnp.asarray(shape.perms[s])[choice[e]]  # [m]
      law = without_replacement_q(qn, draws)  # [m, V] the drafter's draw law
      prob = prob * jnp.prod(law[jnp.arange(m), draws])
      sib = sibling_q(qn, draws)
    else:
      draws = jax.lax.top_k(qn, m)[1].astype(jnp.int32)
      sib = jax.nn.one_hot(draws, v, dtype=jnp.float32)
    for c in shape.kids[s]:
      tokens[c] = draws[shape.rank[c]]
      q_of[c] = sib[shape.rank[c]]
  fallback = rule.has_relaxed_fallback
  stage = rule.strict_accept_prob if fallback else rule.accept_prob
  reach = [jnp.float32(0.0)] * (shape.n + 1)
  reach[0] = jnp.float32(1.0)
  stop = []
  for s in range(shape.n + 1):
    d = int(shape.depth[s])
    p = _at(tables.p[d], tokens, shape.path[s])
    z = (jnp.where(p > 0, jnp.log(jnp.where(p > 0, p, 1.0)), -jnp.inf) if tables.z is None
         else _at(tables.z[d], tokens, shape.path[s]))
    if not shape.kids[s]:
      stop.append(reach[s] * rule.correction(rule.init(z, p)))
      continue
    state = rule.init_node(z, p, qn_of[s]) if rule.needs_node_dist else rule.init(z, p)
    r = reach[s]
    for c in shape.kids[s]:
      a = stage(state, q_of[c], tokens[c])
      reach[c] = r * a
      r = r * (1.0 - a)
      state = rule.on_reject(state, q_of[c], tokens[c])
    if fallback:  # every child strictly rejected: the first of highest positive priority
      prio = jnp.stack([rule.relaxed_fallback(state, tokens[c]) for c in shape.kids[s]])
      best = jnp.argmax(prio)
      ok = prio[best] > 0
      for i, c in enumerate(shape.kids[s]):
        reach[c] = reach[c] + jnp.where(ok & (best == i), r, 0.0)
      r = jnp.where(ok, 0.0, r)
    stop.append(r * rule.correction(state))
  return prob, jnp.stack(tokens), jnp.stack(stop)


def _expand(arr, ndim):
  return arr.reshape(arr.shape + (1,) * (ndim - arr.ndim))


def _tree_law_one(rule, tables, shape, children, sibling_q) -> ChainLaw:
  v, depth = tables.p[0].shape[-1], len(tables.q)
  fill = functools.partial(_filling_law, rule, tables, shape, children, sibling_q)
  prob, tokens, stop = jax.vmap(fill)(jnp.asarray(shape.choices))  # [M], [M, N+1], [M, N+1, V]
  w = prob[:, None, None] * stop  # P(filling, stop at s, emit y)
  mass = jnp.sum(w, axis=2)  # [M, N+1]
  accept_length = jnp.stack([jnp.sum(mass[:, shape.depth == t]) for t in range(depth + 1)])
  expected = jnp.sum(accept_length * jnp.arange(depth + 1, dtype=accept_length.dtype))
  block = [jnp.zeros((v,) * (t + 1), jnp.float32) for t in range(depth + 1)]
  for s in range(shape.n + 1):
    t = int(shape.depth[s])
    idx = tuple(tokens[:, j] for j in shape.path[s])
    block[t] = block[t].at[idx].add(w[:, s]) if idx else block[t] + jnp.sum(w[:, s], 0)
  n = depth + 1
  factors = [_expand(tables.p[j], n) for j in range(n)]
  target = functools.reduce(jnp.multiply, factors)
  first = jnp.zeros((v,) * n, target.dtype)
  for t in range(n):
    cont = functools.reduce(jnp.multiply, factors[t + 1:], jnp.ones((), target.dtype))
    first = first + _expand(block[t], n) * cont
  return ChainLaw(accept_length=accept_length, expected_accepted=expected, block=tuple(block),
                  first_tokens=first, target=jnp.broadcast_to(target, (v,) * n))


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _tree_law_jit(rule, tables, shape, children, sibling_q):
  lead = tables.batch_shape
  b = int(np.prod(lead)) if lead else 1
  flat = jax.tree.map(lambda a: a.reshape((b,) + a.shape[len(lead):]), tables)
  out = jax.vmap(lambda t: _tree_law_one(rule, t, shape, children, sibling_q))(flat)
  return jax.tree.map(lambda a: a.reshape(lead + a.shape[1:]), out)


def static_tree_law(rule: NodeRule, tables: ChainTables, paths: Sequence[Sequence[int]],
             children: str = "sampled", sibling_q: Optional[Callable] = None) -> ChainLaw:
  """Exact laws of one round of static-tree verification (module docstring).

  Args:
    rule: a node rule (``verifiers.get("lossless")``, MARS, ...).
    tables: :class:`ChainTables` with K = the tree's depth D (leading axes = contexts).
    paths: the tree's rank paths, e.g. ``((0,), (1,), (0, 0))``.
    children: "sampled" (without replacement) or "topk".
    sibling_q: sampled only: ``(q_node [V], draws [m]) -> [m, V]``, the ``q`` each
      child is verified with; default ``without_replacement_q`` (the true law).

  Returns:
    :class:`ChainLaw` (``lossless_gap``, ``accept_length``, ``expected_accepted``,
    ``block``, ``first_tokens``, ``target``) with the leading axes of ``tables``.
  """
  if not isinstance(rule, NodeRule):
    raise ValueError(f"rule={rule!r} must be a node rule (specjax.verifiers.base.NodeRule)")
  if children not in CHILDREN:
    raise ValueError(f"children={children!r}; choose one of {CHILDREN}")
  if sibling_q is not None and children != "sampled":
    raise ValueError("sibling_q is read only with children='sampled'")
  check_tables(tables)
  shape = _Shape(paths, tables.vocab, children)
  if int(shape.depth.max()) != tables.num_draft:
    raise ValueError(f"the tree's depth {int(shape.depth.max())} must equal the tables' "
                     f"K = {tables.num_draft} (p: K+1 tables, q: K tables)")
  return _tree_law_jit(rule, tables, _Hashed(shape), children,
                       sibling_q or without_replacement_q)


class _Hashed:
  """A :class:`_Shape` as a static jit argument (hashed by its tree and fillings)."""

  def __init__(self, shape: _Shape):
    self._shape = shape
    self._key = (tuple(shape.parent), tuple(shape.rank), shape.choices.shape,
                 None if shape.perms is None else tuple(len(p) for p in shape.perms.values()))

  def __getattr__(self, name):
    return getattr(self._shape, name)

  def __hash__(self):
    return hash(self._key)

  def __eq__(self, other):
    return isinstance(other, _Hashed) and self._key == other._key
