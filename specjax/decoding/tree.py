"""Draft trees: parent arrays, depths, ancestor attention masks, static trees.

Convention (shared by drafters, the loop and the tree rules): a tree of N
draft nodes plus the root.  Index 0 is the root -- the last committed token,
not yet in the target cache -- and draft node j (0-based in the drafter's
arrays) has tree index j + 1.  ``parents[j]`` is the *tree index* of node j's
parent (0 = root), always smaller than j + 1: parents come before children.
Node positions are ``prefix_length + depth`` with the root at depth 0.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.tree_layout import static_tree  # noqa: F401  (the one definition; public here)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TreeDraft:
  """A batch of draft trees.

  Attributes:
    tokens: [B, N] int32 node tokens.
    parents: [B, N] int32 tree index of each node's parent (0 = root).
    depths: [B, N] int32 depth of each node (root = 0, so >= 1).
  """

  tokens: jax.Array
  parents: jax.Array
  depths: jax.Array


def with_root(parents: jax.Array) -> jax.Array:
  """``[..., N]`` node parents -> ``[..., N+1]`` tree parents (root's parent = 0)."""
  zero = jnp.zeros(parents.shape[:-1] + (1,), parents.dtype)
  return jnp.concatenate([zero, parents], axis=-1)


def ancestor_mask(tree_parents: jax.Array) -> jax.Array:
  """Bool ``[N+1, N+1]``: ``m[i, j]`` iff j is i or an ancestor of i.

  Args:
    tree_parents: [N+1] parent tree index per node (entry 0, the root's, ignored).
  """
  n1 = tree_parents.shape[-1]
  idx = jnp.arange(n1)
  parents = tree_parents.at[0].set(0)

  def body(_, carry):
    m, cur = carry
    cur = parents[cur]
    return m.at[idx, cur].set(True), cur

  m0 = jnp.eye(n1, dtype=bool)
  m, _ = jax.lax.fori_loop(0, n1, body, (m0, idx))
  return m


def static_ancestor_mask(parents: np.ndarray) -> np.ndarray:
  """Numpy :func:`ancestor_mask` of a static tree (known at trace time, e.g. from
  :func:`static_tree`): bool ``[N+1, N+1]``, ``m[i, j]`` iff tree node j is i or an
  ancestor of i (row / column 0: the root).

  Args:
    parents: [N] node parents as tree indices (``parents[j] < j + 1``).
  """
  tree_par = np.concatenate([[0], np.asarray(parents)])
  m = np.eye(len(tree_par), dtype=bool)
  for j in range(1, len(tree_par)):  # parents precede children
    m[j] |= m[tree_par[j]]
  return m
