"""Exact law of a tree's emitted path and token, for any tree rule or node rule.

docs/path_rules.md, "Exact analysis of trees".  One context, a tree of fixed
shape (N nodes, depth D) on a small vocabulary V.  The target and the drafter
are given by prefix, as for chains (:class:`~specjax.analysis.path_law.ChainTables`
with K = D: ``p[d]`` is ``P(. | x_1..x_d)``, ``q[d]`` the drafter's full
distribution after ``x_1..x_d``).  How the node tokens are drawn is one of:

* ``"iid"`` -- every child of a node is drawn independently from the
  drafter's distribution at that node (with replacement; SpecInfer-style
  multi-draft); node c's ``q`` is that distribution.
* ``"without_replacement"`` -- the children of a node are drawn in index
  order from the drafter's distribution with the earlier siblings' tokens
  removed and the rest renormalised; node c's ``q`` is that renormalised
  distribution.  When no mass is left (more siblings than tokens the drafter
  can produce) the remaining siblings and their subtrees are not drafted
  (``valid`` False for the rule).
* ``"top_k"`` -- deterministic: node c takes the rank-``ranks[c]`` token of
  its parent's distribution (the repo's static and EAGLE-2 trees); node c's
  ``q`` is one-hot at it.

Every token assignment ``x`` (``V^N`` of them, one for ``top_k``) is
enumerated with its probability ``P(x) = prod_c q_c(x_c)``; the rule's
``end_node_law`` and ``end_node_emit`` integrate out the uniforms.  With no
sampling anywhere:

* the joint law of the emitted block ``(s_1..s_t, y)`` (the accepted path's
  tokens, then the emitted token)::

    B_t(s, y) = sum_x P(x) sum_{nodes j at depth t with path tokens s} P(e = j | x) emit_j(y | x)

* the law of the number of accepted drafts (the depth of the last accepted
  node) and its expectation ``E[tau]`` per context;
* the law of the first D+1 emitted tokens when the block is followed by
  exact sampling from the target, against the target's own law: the lossless
  check of :mod:`specjax.analysis.path_law`, reused (:class:`ChainLaw`).

Node rules are analysed as token-level tree verification through
:class:`~specjax.verifiers.tree_rule.NodeTreeRule`.  Cost: ``V^N`` evaluations
of the rule per context -- meant for ``V^N`` up to a few thousand.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

from specjax.analysis.path_law import ChainLaw, ChainTables, _log, check_tables, continued_law
from specjax.distributions import safe_normalize
from specjax.verifiers.tree_rule import as_tree_rule

DRAFTING = ("iid", "without_replacement", "top_k")


def _shape(parents) -> tuple[np.ndarray, np.ndarray, list]:
  """``(tree_parents [N+1], depth [N+1], ancestors)`` from node parents ``[N]``
  (tree indices, ``parents[j] < j + 1``); ``ancestors[j]`` lists the tree
  indices on the path root..j, depth 1 first (``[]`` for the root)."""
  par = np.concatenate([[0], np.asarray(parents, np.int64)])
  n1 = par.shape[0]
  depth = np.zeros(n1, np.int64)
  anc = [[]]
  for j in range(1, n1):
    depth[j] = depth[par[j]] + 1
    anc.append(anc[par[j]] + [j])
  return par, depth, anc


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
  _, depth, _ = _shape(par)
  if int(depth.max()) != tables.num_draft:
    raise ValueError(f"the tree's depth {int(depth.max())} must equal the tables' K = "
                     f"{tables.num_draft} (build them with chain_tables(..., num_draft=depth))")
  if drafting == "top_k":
    rk = None if ranks is None else np.asarray(ranks)
    if rk is None or rk.shape != par.shape or np.any(rk < 0) or np.any(rk >= tables.vocab):
      raise ValueError(f"ranks={ranks!r} must give one rank in 0..V-1 = 0..{tables.vocab - 1} "
                       f"per node for drafting='top_k' (decoding.tree.static_tree returns them)")


def _rows(group, anc_list, x):
  """``group[len(a)][x[a]]`` for each ancestor list ``a`` -> [M, n, V] (x: [M, N+1])."""
  out = []
  for a in anc_list:
    arr = group[len(a)]
    out.append(arr[tuple(x[:, i] for i in a)] if a else
               jnp.broadcast_to(arr, (x.shape[0], arr.shape[-1])))
  return jnp.stack(out, axis=1)


def _tree_law_one(rule, tables: ChainTables, parents, drafting, ranks) -> ChainLaw:
  par, depth, anc = _shape(parents)
  n1, v, d = par.shape[0], tables.vocab, tables.num_draft
  if drafting == "top_k":
    x = jnp.zeros((1, n1), jnp.int32)
    for c in range(1, n1):  # parents before children: the parent's prefix is known
      qb = _rows(tables.q, [anc[par[c]]], x)[:, 0]  # [1, V]
      x = x.at[:, c].set(jax.lax.top_k(qb, int(ranks[c - 1]) + 1)[1][:, -1])
  else:
    x = jnp.asarray(np.array(list(itertools.product(range(v), repeat=n1 - 1)),
                             np.int32).reshape(-1, n1 - 1))
    x = jnp.concatenate([jnp.zeros((x.shape[0], 1), jnp.int32), x], axis=1)  # [M, N+1]
  m = x.shape[0]
  p = _rows(tables.p, anc, x)  # [M, N+1, V]
  z = _log(p) if tables.z is None else _rows(tables.z, anc, x)
  node_dist = tables.q if tables.q_node is None else tables.q_node
  q_node = jnp.stack([_rows(node_dist, [anc[j]], x)[:, 0] if depth[j] < d
                      else jnp.zeros((m, v), p.dtype) for j in range(n1)], axis=1)
  q_rows = [jnp.zeros((m, v), p.dtype)]
  valid = [jnp.ones((m,), bool)]  # without replacement: a sibling exists while mass is left
  factor = []  # P(x_c | everything drafted before c)
  for c in range(1, n1):
    qb = _rows(tables.q, [anc[par[c]]], x)[:, 0]  # the drafter at c's parent
    if drafting == "top_k":
      qc = jax.nn.one_hot(x[:, c], v, dtype=p.dtype)
    elif drafting == "iid":
      qc = qb
    else:
      earlier = [s for s in range(1, c) if par[s] == par[c]]
      keep = jnp.ones((m, v), bool)
      for s in earlier:
        keep = keep & (jnp.arange(v)[None, :] != x[:, s:s + 1])
      qc = safe_normalize(jnp.where(keep, qb, 0.0), 0.0)
    on = valid[par[c]] & (jnp.sum(qc, axis=-1) > 0)
    valid.append(on)
    q_rows.append(qc)
    # An absent node (the parent's candidates ran out) counts once, as token 0.
    factor.append(jnp.where(on, qc[jnp.arange(m), x[:, c]], (x[:, c] == 0).astype(p.dtype)))
  q = jnp.stack(q_rows, axis=1)  # [M, N+1, V]
  valid = jnp.stack(valid, axis=1)  # [M, N+1]
  prob = (jnp.ones((m,), p.dtype) if drafting == "top_k"
          else jnp.prod(jnp.stack(factor, axis=1), axis=1))
  tree_par = jnp.asarray(par, jnp.int32)
  law, emit = jax.vmap(lambda zz, pp, qq, xx, ok, qn: (
      rule.end_node_law(zz, pp, qq, xx, tree_par, ok, q_node=qn),
      rule.end_node_emit(zz, pp, qq, xx, tree_par, ok, q_node=qn)))(z, p, q, x, valid, q_node)
  live = prob > 0  # assignments the drafter never makes: their laws are dropped
  weight = jnp.where(live[:, None], prob[:, None] * law, 0.0)  # [M, N+1] P(x, e = j)
  emit = jnp.where(live[:, None, None], emit, 0.0)
  block = []
  for t in range(d + 1):
    nodes = [j for j in range(n1) if depth[j] == t]
    flat = jnp.zeros((m, len(nodes)), jnp.int32)
    for i, j in enumerate(nodes):
      for a in anc[j]:
        flat = flat.at[:, i].set(flat[:, i] * v + x[:, a])
    vals = weight[:, nodes, None] * emit[:, nodes]  # [M, n_t, V]
    bt = jnp.zeros((v ** t, v), p.dtype).at[flat.reshape(-1)].add(vals.reshape(-1, v))
    block.append(bt.reshape((v,) * (t + 1)))
  accept_length = jnp.stack([jnp.sum(b) for b in block])
  expected = jnp.sum(accept_length * jnp.arange(d + 1, dtype=accept_length.dtype))
  first, target = continued_law(block, tables.p)
  return ChainLaw(accept_length=accept_length, expected_accepted=expected, block=tuple(block),
                  first_tokens=first, target=target)


def _tree_law_batched(rule, tables, parents, drafting, ranks):
  lead = tables.batch_shape
  b = int(np.prod(lead)) if lead else 1
  nl = len(lead)
  flat = jax.tree.map(lambda a: a.reshape((b,) + a.shape[nl:]), tables)
  out = jax.vmap(lambda t: _tree_law_one(rule, t, parents, drafting, ranks))(flat)
  return jax.tree.map(lambda a: a.reshape(lead + a.shape[1:]), out)


_tree_law_jit = jax.jit(_tree_law_batched, static_argnums=(2, 3, 4))


def tree_law(rule, tables: ChainTables, parents, drafting: str = "iid",
             ranks=None) -> ChainLaw:
  """Exact laws of one round of tree verification by ``rule`` (module docstring).

  Args:
    rule: a tree rule (``verifiers.get("traversal")``) or a node rule (analysed
      as token-level tree verification through ``NodeTreeRule``).
    tables: :class:`ChainTables` with K = the tree's depth (leading axes =
      contexts); ``q`` is the drafter's full distribution after each prefix.
    parents: [N] ints, node j's parent tree index (0 = root; node j has tree
      index j + 1), e.g. ``decoding.tree.static_tree(paths)[0]``.
    drafting: ``"iid"``, ``"without_replacement"`` or ``"top_k"`` (module docstring).
    ranks: [N] ints, each node's rank among its parent's candidates (``top_k`` only).

  Returns:
    :class:`~specjax.analysis.path_law.ChainLaw` with the leading context axes:
    ``accept_length [D+1]`` (law of the accepted depth), ``expected_accepted``,
    ``block``, ``first_tokens``, ``target`` and ``lossless_gap``.
  """
  rule = as_tree_rule(rule)
  check_tree(parents, drafting, ranks, tables)
  par = tuple(int(a) for a in np.asarray(parents))
  rk = None if ranks is None else tuple(int(r) for r in np.asarray(ranks))
  return _tree_law_jit(rule, tables, par, drafting, rk)


def expected_accepted(rule, tables: ChainTables, parents, drafting: str = "iid",
                      ranks=None) -> jax.Array:
  """[...] exact expected number of accepted drafts per round on the tree."""
  return tree_law(rule, tables, parents, drafting, ranks).expected_accepted
