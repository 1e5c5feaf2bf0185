"""Exact law of one round of tree verification, for any node rule or tree rule.

docs/path_rules.md, "Exact analysis of trees".  One context, a tree of fixed
shape (N nodes, depth D) on a small vocabulary V.  The target and the drafter
are given by prefix, as for chains (:class:`~specjax.analysis.path_law.ChainTables`
with K = D: ``p[d]`` is ``P(. | x_1..x_d)``, ``q[d]`` the drafter's full
distribution after ``x_1..x_d``, ``q_node`` optionally what node rules with
``needs_node_dist`` read instead).  How each expanded node s fills its
children (``drafting``) -- one convention, the decoding loop's:

* ``"top_k"`` -- deterministic: child c is the rank-``ranks[c]`` token of
  ``q`` at s (``lax.top_k``, lower index first on ties), its ``q`` one-hot
  (the repo's static and EAGLE-2 trees, ``children="topk"``); one filling.
* ``"without_replacement"`` -- s draws ``m_s`` distinct tokens one after
  another without replacement from ``q`` at s (``m_s`` = its largest child
  rank + 1; ranks default to the children's order) and child c is draw
  ``ranks[c]``, verified with ``sibling_q(q_s, draws)[ranks[c]]`` -- by
  default :func:`specjax.distributions.without_replacement_q`, the draw's
  law given the earlier draws, which makes the lossless rule recursive
  rejection sampling (Jeon et al. 2024, §3.1).  Once no mass is left the
  draw is the lowest-index unused token with one-hot ``q`` -- exactly what
  :func:`~specjax.distributions.sample_without_replacement` and
  :func:`~specjax.decoding.sampled_tree.sample_level` do in the loop
  (``children="sampled"``); every node is always drafted.  A filling's
  probability is ``prod_s prod_j without_replacement_q(q_s, draws)[j, draws_j]``.
  Another ``sibling_q`` verifies the same drafts with the wrong ``q`` (the
  tests use it as a broken variant).
* ``"iid"`` -- every child of s is drawn independently from ``q`` at s
  (with replacement; SpecInfer-style multi-draft), its ``q`` that
  distribution.  The loop's drafters do not draft this way; it is kept for
  the theory (a one-path tree is a sampled chain).

Every filling (``prod_s V^k_s`` for iid, ``prod_s V!/(V-m_s)!`` without
replacement, one for top-k) is enumerated with its probability ``P(x)``; the
rule's ``end_node_law`` and ``end_node_emit`` integrate out the uniforms
(node rules through :class:`~specjax.verifiers.tree_rule.NodeTreeRule`, the
decoding loop's tree walk, incl. MARS's strict-before-relaxed fallback).  With no sampling anywhere:

* the joint law of the emitted block ``(s_1..s_t, y)`` (the accepted path's
  tokens, then the emitted token)::

    B_t(s, y) = sum_x P(x) sum_{nodes j at depth t with path tokens s} P(e = j | x) emit_j(y | x)

* the law of the number of accepted drafts (the depth of the last accepted
  node ``e``) and its expectation ``E[tau]`` per context;
* the law of the first D+1 emitted tokens when the block is followed by
  exact sampling from the target, against the target's own law: the lossless
  check of :mod:`specjax.analysis.path_law`, reused (:class:`ChainLaw`).

Entry points: :func:`tree_law` (tree given by ``parents`` and ``ranks``,
``drafting`` names) and :func:`static_tree_law` (tree given by rank paths,
the drafters' ``children`` names).  Cost: the number of fillings times one
evaluation of the rule on the tree -- meant for a few thousand fillings
(V <= ~6, a handful of expanded nodes).  This module never loads a model.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.analysis.path_law import ChainLaw, ChainTables, _log, check_tables, continued_law
from specjax.distributions import without_replacement_q
from specjax.tree_layout import static_tree
from specjax.verifiers.tree_rule import as_tree_rule

DRAFTING = ("iid", "without_replacement", "top_k")
# The drafters' ``children`` option (decoding.sampled_tree.CHILDREN) -> drafting.
CHILDREN = {"topk": "top_k", "sampled": "without_replacement"}
MAX_FILLINGS = 2_000_000


class _Shape:
  """Static structure of the tree and its fillings (tree indices: 0 the root, node j
  is j + 1), hashable so that it can be a static jit argument."""

  def __init__(self, parents, ranks, drafting: str, vocab: int):
    self.parent = np.concatenate([[0], np.asarray(parents, np.int64)])
    self.n = self.parent.shape[0] - 1
    n1 = self.n + 1
    self.depth = np.zeros(n1, np.int64)
    self.path = [[]]  # tree indices from depth 1 down to the node
    for j in range(1, n1):
      self.depth[j] = self.depth[self.parent[j]] + 1
      self.path.append(self.path[self.parent[j]] + [j])
    self.kids = [[c for c in range(1, n1) if self.parent[c] == s] for s in range(n1)]
    self.expanded = [s for s in range(n1) if self.kids[s]]
    self.drafting = drafting
    self.slot = np.zeros(n1, np.int64)  # which of its parent's draws a node takes
    for s in self.expanded:
      for i, c in enumerate(self.kids[s]):
        self.slot[c] = i if drafting == "iid" or ranks is None else int(ranks[c - 1])
    self.width = {s: (len(self.kids[s]) if drafting == "iid" else
                      int(max(self.slot[c] for c in self.kids[s])) + 1) for s in self.expanded}
    self.seqs = self._draw_sequences(vocab)
    grids = np.meshgrid(*[np.arange(len(self.seqs[s])) for s in self.expanded], indexing="ij")
    self.choices = np.stack([g.reshape(-1) for g in grids], 1).astype(np.int32)
    self._key = (tuple(self.parent), tuple(self.slot), drafting, vocab)

  def _draw_sequences(self, vocab: int) -> dict:
    """Per expanded node: [n_s, m_s] every sequence of draws it can make (top-k: none)."""
    if self.drafting == "top_k":
      return {s: np.zeros((1, self.width[s]), np.int32) for s in self.expanded}
    for s in self.expanded:
      sib = [int(self.slot[c]) for c in self.kids[s]]
      if self.drafting != "iid" and len(set(sib)) != len(sib):
        raise ValueError(f"ranks give two children of tree node {s} the same draw {sib}; "
                         f"siblings drawn without replacement need distinct ranks")
    make = (functools.partial(itertools.product, range(vocab)) if self.drafting == "iid"
            else functools.partial(itertools.permutations, range(vocab)))
    kw = "repeat" if self.drafting == "iid" else "r"
    count = math.prod(math.perm(vocab, m) if self.drafting != "iid" else vocab ** m
                      for m in self.width.values())
    if count > MAX_FILLINGS:
      raise ValueError(f"{count} fillings of this tree at V = {vocab} (limit {MAX_FILLINGS}): "
                       f"use a smaller vocabulary or tree")
    return {s: np.array(list(make(**{kw: m})), np.int32).reshape(-1, m)
            for s, m in self.width.items()}

  def __hash__(self):
    return hash(self._key)

  def __eq__(self, other):
    return isinstance(other, _Shape) and self._key == other._key


def _at(table, tokens, path):
  """``table[x_path...]``: the row after the prefix ``tokens[path]``."""
  return table[tuple(tokens[i] for i in path)] if path else table


def _filling(tables: ChainTables, shape: _Shape, sibling_q: Callable, choice):
  """One filling: ``(P(x) [], x [N+1], q [N+1, V], q_node [N+1, V])``."""
  v, n1 = tables.vocab, shape.n + 1
  x = [jnp.int32(0)] * n1
  q = [jnp.zeros((v,), tables.p[0].dtype)] * n1
  prob = jnp.ones((), tables.p[0].dtype)
  for e, s in enumerate(shape.expanded):
    qs = _at(tables.q[int(shape.depth[s])], x, shape.path[s])  # [V] the drafter at s
    m = shape.width[s]
    if shape.drafting == "top_k":
      draws = jax.lax.top_k(qs, m)[1].astype(jnp.int32)
      sib = jax.nn.one_hot(draws, v, dtype=qs.dtype)
    else:
      draws = jnp.asarray(shape.seqs[s])[choice[e]]  # [m]
      if shape.drafting == "iid":
        sib = jnp.broadcast_to(qs, (m, v))
        prob = prob * jnp.prod(qs[draws])
      else:
        prob = prob * jnp.prod(without_replacement_q(qs, draws)[jnp.arange(m), draws])
        sib = sibling_q(qs, draws)
    for c in shape.kids[s]:
      x[c], q[c] = draws[shape.slot[c]], sib[shape.slot[c]]
  node = tables.q if tables.q_node is None else tables.q_node
  q_node = [_at(node[int(shape.depth[j])], x, shape.path[j]) if shape.kids[j]
            else jnp.zeros((v,), prob.dtype) for j in range(n1)]
  return prob, jnp.stack(x), jnp.stack(q), jnp.stack(q_node)


def _node_rows(group, x, shape: _Shape):
  """[M, N+1, V]: row j is ``group[depth_j][x along j's path]`` per filling (x: [M, N+1])."""
  m = x.shape[0]
  rows = [_at(group[int(shape.depth[j])], x.T, shape.path[j]) for j in range(shape.n + 1)]
  return jnp.stack([jnp.broadcast_to(r, (m, r.shape[-1])) for r in rows], axis=1)


def _tree_law_one(rule, tables: ChainTables, shape: _Shape, sibling_q) -> ChainLaw:
  v, d, n1 = tables.vocab, tables.num_draft, shape.n + 1
  fill = functools.partial(_filling, tables, shape, sibling_q)
  prob, x, q, q_node = jax.vmap(fill)(jnp.asarray(shape.choices))  # [M], [M, N+1], ..
  p = _node_rows(tables.p, x, shape)  # [M, N+1, V]
  z = _log(p) if tables.z is None else _node_rows(tables.z, x, shape)
  par = jnp.asarray(shape.parent, jnp.int32)
  law, emit = jax.vmap(lambda zz, pp, qq, xx, qn: (
      rule.end_node_law(zz, pp, qq, xx, par, q_node=qn),
      rule.end_node_emit(zz, pp, qq, xx, par, q_node=qn)))(z, p, q, x, q_node)
  live = prob > 0  # fillings the drafter never makes: their (maybe undefined) laws dropped
  w = jnp.where(live[:, None, None], prob[:, None, None] * law[:, :, None] * emit, 0.0)
  accept_length = jnp.stack([jnp.sum(w[:, shape.depth == t]) for t in range(d + 1)])
  expected = jnp.sum(accept_length * jnp.arange(d + 1, dtype=accept_length.dtype))
  block = [jnp.zeros((v,) * (t + 1), w.dtype) for t in range(d + 1)]
  for j in range(n1):
    t = int(shape.depth[j])
    idx = tuple(x[:, a] for a in shape.path[j])
    block[t] = block[t].at[idx].add(w[:, j]) if idx else block[t] + jnp.sum(w[:, j], 0)
  first, target = continued_law(block, tables.p)
  return ChainLaw(accept_length=accept_length, expected_accepted=expected, block=tuple(block),
                  first_tokens=first, target=target)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _tree_law_jit(rule, tables, shape, sibling_q):
  lead = tables.batch_shape
  b = int(np.prod(lead)) if lead else 1
  flat = jax.tree.map(lambda a: a.reshape((b,) + a.shape[len(lead):]), tables)
  out = jax.vmap(lambda t: _tree_law_one(rule, t, shape, sibling_q))(flat)
  return jax.tree.map(lambda a: a.reshape(lead + a.shape[1:]), out)


def check_tree(parents, drafting: str, ranks, tables: ChainTables) -> None:
  """``ValueError`` naming the first bad argument of :func:`tree_law`."""
  par = np.asarray(parents)
  if par.ndim != 1 or par.shape[0] < 1 or par.dtype.kind not in "iu":
    raise ValueError(f"parents={parents!r} must be a non-empty 1-d integer sequence (node j's "
                     f"parent tree index, 0 = root)")
  if np.any(par < 0) or np.any(par > np.arange(par.shape[0])):
    raise ValueError(f"parents={par.tolist()} must satisfy 0 <= parents[j] <= j (parents "
                     f"before children; node j has tree index j + 1)")
  if drafting not in DRAFTING:
    raise ValueError(f"drafting={drafting!r}; allowed: {DRAFTING}")
  check_tables(tables)
  depth = np.zeros(par.shape[0] + 1, np.int64)
  for j, b in enumerate(par):
    depth[j + 1] = depth[b] + 1
  if int(depth.max()) != tables.num_draft:
    raise ValueError(f"the tree's depth {int(depth.max())} must equal the tables' K = "
                     f"{tables.num_draft} (build them with chain_tables(..., num_draft=depth))")
  rk = None if ranks is None else np.asarray(ranks)
  if (drafting == "top_k" and rk is None) or (rk is not None and drafting != "iid" and (
      rk.shape != par.shape or rk.dtype.kind not in "iu" or np.any(rk < 0))):
    raise ValueError(f"ranks={ranks!r} must give one rank in 0..V-1 = 0..{tables.vocab - 1} "
                     f"per node for drafting={drafting!r} (decoding.tree.static_tree returns "
                     f"them)")
  if drafting != "iid":  # distinct children: a node cannot have more than V
    need = (np.bincount(par, minlength=par.shape[0] + 1) if rk is None else
            np.zeros(par.shape[0] + 1, np.int64))
    if rk is not None:
      np.maximum.at(need, par, rk + 1)
    if need.max() > tables.vocab:
      raise ValueError(f"a node needs {int(need.max())} distinct children but V = "
                       f"{tables.vocab} (drafting={drafting!r})")


def tree_law(rule, tables: ChainTables, parents, drafting: str = "iid", ranks=None,
             sibling_q: Optional[Callable] = None) -> ChainLaw:
  """Exact laws of one round of tree verification by ``rule`` (module docstring).

  Args:
    rule: a tree rule (``verifiers.get("traversal")``) or a node rule (analysed
      as token-level tree verification through ``NodeTreeRule``).
    tables: :class:`ChainTables` with K = the tree's depth (leading axes =
      contexts); ``q`` is the drafter's full distribution after each prefix.
    parents: [N] ints, node j's parent tree index (0 = root; node j has tree
      index j + 1), e.g. ``decoding.tree.static_tree(paths)[0]``.
    drafting: ``"iid"``, ``"without_replacement"`` or ``"top_k"`` (module docstring).
    ranks: [N] ints, each node's rank among its parent's candidates or draws
      (required for ``top_k``; default for ``without_replacement``: the
      children's order; not read for ``iid``).
    sibling_q: ``without_replacement`` only: ``(q_s [V], draws [m]) -> [m, V]``,
      the ``q`` each child is verified with; default ``without_replacement_q``.

  Returns:
    :class:`~specjax.analysis.path_law.ChainLaw` with the leading context axes:
    ``accept_length [D+1]`` (law of the accepted depth), ``expected_accepted``,
    ``block``, ``first_tokens``, ``target`` and ``lossless_gap``.
  """
  rule = as_tree_rule(rule)
  check_tree(parents, drafting, ranks, tables)
  if sibling_q is not None and drafting != "without_replacement":
    raise ValueError(f"sibling_q is read only with drafting='without_replacement' (got "
                     f"drafting={drafting!r})")
  shape = _Shape(parents, ranks, drafting, tables.vocab)
  return _tree_law_jit(rule, tables, shape, sibling_q or without_replacement_q)


def static_tree_law(rule, tables: ChainTables, paths: Sequence[Sequence[int]],
                    children: str = "sampled", sibling_q: Optional[Callable] = None) -> ChainLaw:
  """:func:`tree_law` for a static tree given by rank paths, filled as the drafters'
  ``children`` option fills it: ``"topk"`` (``drafting="top_k"``) or ``"sampled"``
  (``drafting="without_replacement"``, node ``[r_1..r_d]`` = draw ``r_d``).

  Args:
    rule: a node rule (``verifiers.get("lossless")``, MARS, ...) or a tree rule.
    tables: :class:`ChainTables` with K = the tree's depth D (leading axes = contexts).
    paths: the tree's rank paths, e.g. ``((0,), (1,), (0, 0))``.
    children: "sampled" (without replacement) or "topk".
    sibling_q: sampled only (see :func:`tree_law`).
  """
  if children not in CHILDREN:
    raise ValueError(f"children={children!r}; choose one of {tuple(CHILDREN)}")
  if sibling_q is not None and children != "sampled":
    raise ValueError("sibling_q is read only with children='sampled'")
  parents, _, ranks = static_tree(paths)
  return tree_law(rule, tables, parents, CHILDREN[children], ranks, sibling_q)


def expected_accepted(rule, tables: ChainTables, parents, drafting: str = "iid",
                      ranks=None) -> jax.Array:
  """[...] exact expected number of accepted drafts per round on the tree."""
  return tree_law(rule, tables, parents, drafting, ranks).expected_accepted
