"""Traversal verification (Weng et al., "Traversal Verification for Speculative
Tree Decoding", NeurIPS 2025, arXiv:2505.12398): a lossless tree rule that
decides leaf to root on sequence-level acceptance probabilities.

Definition, the condition on the draft tree and the choices made here:
docs/path_rules.md, "Traversal verification".  In short, with ``P_j`` the
target at node j (row j of ``p``: the distribution of j's children), ``q_c``
the distribution child c's token was drawn from and ``w_0 = 1`` at the root:

* entering node c (child of b): ``w_c = min(1, w_b P_b(x_c) / q_c(x_c))``
  with b's *current* ``w_b`` and ``P_b``;
* the nodes are decided in post-order (children in increasing index order,
  each subtree before its parent): node j is accepted with probability
  ``w_j`` (the root always); on acceptance the path root..j is accepted and
  the token is drawn from the current ``P_j``;
* on the rejection of node c (child of b), b is updated as a block-verification
  residual: ``r = max(0, w_b P_b - q_c)``, ``s = sum(r)``, ``P_b <- r / s``,
  ``w_b <- s / (s + 1 - w_b)`` (0 where ``s = 0``).

On a chain this is block verification (Sun et al., ICLR 2025, Algorithm 2):
``w`` are its weights, the updated ``w`` its ``h`` and the updated ``P`` its
``r / s``.  Because every decision probability and every residual depends
only on which nodes were rejected before -- and reaching node j's decision
means exactly that every node before it in post-order was rejected -- the
whole traversal with "everything rejected" is deterministic: one pass gives
each node's decision probability ``a_j`` and emitted distribution, the law of
the last accepted node is ``a_j prod_{i before j} (1 - a_i)``
(:func:`~specjax.verifiers.tree_rule.first_success_law`) and sampling is the
first ``u_j < a_j`` in post-order.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.distributions import safe_normalize
from specjax.verifiers.base import safe_ratio
from specjax.verifiers.registry import register
from specjax.verifiers.tree_rule import (TreeRule, _all_valid, _decision, check_tree_shapes,
                                         first_success, first_success_law)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TraversalTerms:
  """One row's traversal with every decision a rejection (0-based tree indices).

  Attributes:
    accept: [N+1] ``a_j``, node j's acceptance probability at its turn given
      that every node before it in post-order was rejected (1 at the root, 0
      at nodes not offered).
    emit: [N+1, V] the distribution the token is drawn from if node j is the
      last accepted node: ``P_j`` after the rejection of all j's children.
    rank: [N+1] int32 position of node j in the post-order (N+1 for nodes not
      offered).
  """

  accept: jax.Array
  emit: jax.Array
  rank: jax.Array


def traversal_terms(p: jax.Array, q: jax.Array, x: jax.Array, parents: jax.Array,
                    valid=None) -> TraversalTerms:
  """The deterministic pass of traversal verification (module docstring).

  Args:
    p: [N+1, V] target distribution at every node.
    q: [N+1, V] distribution each node's token was drawn from (row 0 unused).
    x: [N+1] int node tokens; parents: [N+1] int (``parents[j] < j``).
    valid: optional [N+1] bool nodes offered.

  A depth-first walk: each step either enters the next untried child of the
  current node (computing its weight) or, with none left, decides the current
  node and moves to its parent, applying the rejection update there.  2N + 1
  steps visit every offered node once on the way down and once on the way up;
  each costs O(V).  ``q_c(x_c) = 0`` follows ``safe_ratio`` as in block
  verification.
  """
  p, q, x, parents = (jnp.asarray(a) for a in (p, q, x, parents))
  n1, v = p.shape
  idx = jnp.arange(n1)
  valid = _all_valid(valid, n1)
  qx = jnp.take_along_axis(q, x[:, None], axis=1)[:, 0]  # [N+1] q_j(x_j)

  def body(_, carry):
    cur, last, w, big_p, rank, pos, done = carry
    kids = (parents == cur) & valid & (idx > last) & (idx > 0)
    has = jnp.any(kids) & ~done
    c = jnp.argmax(kids).astype(jnp.int32)
    decide = ~jnp.any(kids) & ~done
    # Entering child c: its sequence-level weight from cur's current state.
    w_c = safe_ratio(w[cur] * big_p[cur, x[c]], qx[c])
    w = w.at[c].set(jnp.where(has, w_c, w[c]))
    # Deciding cur (all its children rejected): record its turn; on rejection update b.
    rank = rank.at[cur].set(jnp.where(decide, pos, rank[cur]))
    pos = pos + decide.astype(jnp.int32)
    b = parents[cur]
    up = decide & (cur > 0)
    r = jnp.maximum(w[b] * big_p[b] - q[cur], 0.0)  # [V]
    s = jnp.sum(r)
    # s / (s + (1 - w)): 1 - w first, so w = 1 gives exactly 1 (as in block.py).
    w_b = jnp.where(s > 0, jnp.minimum(1.0, s / jnp.where(s > 0, s + (1.0 - w[b]), 1.0)), 0.0)
    p_b = safe_normalize(r, big_p[b])
    w = w.at[b].set(jnp.where(up, w_b, w[b]))
    big_p = big_p.at[b].set(jnp.where(up, p_b, big_p[b]))
    new_cur = jnp.where(has, c, jnp.where(up, b, cur))
    last = jnp.where(has, 0, jnp.where(up, cur, last))
    done = done | (decide & (cur == 0))
    return new_cur, last, w, big_p, rank, pos, done

  w0 = jnp.zeros((n1,), p.dtype).at[0].set(1.0)
  carry = (jnp.int32(0), jnp.int32(0), w0, p, jnp.full((n1,), n1, jnp.int32), jnp.int32(0),
           jnp.bool_(False))
  _, _, w, big_p, rank, _, _ = jax.lax.fori_loop(0, 2 * n1 - 1, body, carry)
  decided = rank < n1
  accept = jnp.where(idx == 0, 1.0, jnp.where(decided, w, 0.0))
  return TraversalTerms(accept=accept, emit=big_p, rank=rank)


@register("traversal", kind="tree")
@dataclasses.dataclass(frozen=True)
class Traversal(TreeRule):
  """Traversal verification (Weng et al., NeurIPS 2025); lossless when every
  node's token was drawn from its ``q`` given everything drafted before it
  (docs/path_rules.md, "Traversal verification").  No hyperparameters; reads
  ``p`` and ``q`` only (not ``z``, not ``q_node``)."""

  name = "traversal"

  def _terms(self, z, p, q, x, parents, valid):
    check_tree_shapes(z, p, q, x, parents)
    return traversal_terms(p, q, x, parents, valid)

  def end_node_law(self, z, p, q, x, parents, valid=None, q_node=None):
    del q_node
    t = self._terms(z, p, q, x, parents, valid)
    return first_success_law(t.rank, t.accept)

  def end_node_emit(self, z, p, q, x, parents, valid=None, q_node=None):
    del q_node
    return self._terms(z, p, q, x, parents, valid).emit

  def verify_tree_path(self, z, p, q, x, parents, u, valid=None, q_node=None):
    del q_node
    check_tree_shapes(z, p, q, x, parents, u)
    t = traversal_terms(p, q, x, parents, valid)
    end = first_success(t.rank, t.accept, u)
    return _decision(end, parents, t.emit[end])

  @property
  def is_lossless(self) -> bool:
    return True
