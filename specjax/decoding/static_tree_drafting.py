"""Drafting a static token tree level by level: the one expander behind every
drafter that fills a fixed tree of rank paths (the draft LM's
:class:`~specjax.decoding.drafters.LMTreeDrafter`, the EAGLE head's
:class:`~specjax.decoding.eagle_trees.EagleStaticTreeDrafter`).

A tree is given by rank paths (:func:`specjax.decoding.tree.static_tree`): node
``[r_1, .., r_d]`` is its parent's rank-``r_d`` child. Level d's tokens come from
the draft distributions of the level above -- the parent's rank-r token
(``children="topk"``, q one-hot) or its r-th draw without replacement
(``children="sampled"``, q the draw's law given the earlier siblings; recursive
rejection sampling, :mod:`specjax.decoding.sampled_tree`) -- and then the drafter's
own forward (``expand``) gives the new nodes' logits. What differs between
drafters is only that forward: which nodes it re-runs and what cache it keeps.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specjax.distributions import SamplingConfig
from specjax.decoding.sampled_tree import sample_level
from specjax.decoding.tree import static_tree


class StaticTreeDraft(NamedTuple):
  """A filled static tree.

  Attributes:
    tokens: [B, N] int32 node tokens (nodes sorted by depth, parents first).
    q: [B, N, V] float32 the law each node's token was drawn from (one-hot for
      top-k children).
    q_node: [B, N+1, V] float32 the draft distribution at the root (row 0) and
      after each node (row i + 1), 0 for nodes that were never expanded.
    carry: the drafter's forward state after the last expansion.
  """
  tokens: jax.Array
  q: jax.Array
  q_node: jax.Array
  carry: Any


# expand(carry, depth, level, tokens) -> (rows, logits [B, len(rows), V], carry): the
# drafter's forward once level ``depth`` (node indices ``level``, 0-based) has its
# tokens; ``tokens`` [B, N] holds every node drafted so far (deeper ones 0), ``rows``
# are the 1-based q_node rows the returned logits fill.
Expand = Callable[[Any, int, np.ndarray, jax.Array], tuple]


def draft_static_tree(paths: tuple, root_logits: jax.Array, sampling: SamplingConfig,
                      children: str, keys: jax.Array, expand: Expand, carry: Any, *,
                      expand_leaves: bool) -> StaticTreeDraft:
  """Fill the tree of ``paths`` from ``root_logits`` [B, V], level by level.

  ``expand_leaves``: also run ``expand`` after the deepest level (a drafter whose
  forward re-runs every node so far gets the leaves' distributions from it);
  otherwise the leaves' ``q_node`` rows stay 0.
  """
  from specjax.decoding.drafters import node_distribution
  parents, depths, ranks = static_tree(paths)
  n = len(parents)
  b, v = root_logits.shape
  node_logits = jnp.zeros((b, n + 1, v), jnp.float32).at[:, 0].set(root_logits)
  expanded = np.zeros(n + 1, bool)
  expanded[0] = True
  tokens = jnp.zeros((b, n), jnp.int32)
  top = int(ranks.max()) + 1
  sampled = children == "sampled"
  q = jnp.zeros((b, n, v), jnp.float32) if sampled else None
  max_depth = int(depths.max())
  for d in range(1, max_depth + 1):
    level = np.nonzero(depths == d)[0]  # node indices (0-based) at depth d
    if sampled:  # draws without replacement from the parents' node distributions
      uniq = np.unique(parents[level])
      q_par = node_distribution(node_logits[:, uniq], sampling)
      node_tok, node_q = sample_level(keys, q_par, uniq, parents[level], ranks[level])
      tokens = tokens.at[:, level].set(node_tok)
      q = q.at[:, level].set(node_q)
    else:
      parent_logits = node_logits[:, parents[level]]  # [B, n_d, V]
      cand = jax.lax.top_k(parent_logits, top)[1]  # [B, n_d, top]
      tokens = tokens.at[:, level].set(cand[:, np.arange(len(level)), ranks[level]])
    if d == max_depth and not expand_leaves:
      break
    rows, logits, carry = expand(carry, d, level, tokens)
    node_logits = node_logits.at[:, rows].set(logits)
    expanded[rows] = True
  if not sampled:
    q = jax.nn.one_hot(tokens, v, dtype=jnp.float32)
  if expanded.all():
    q_node = node_distribution(node_logits, sampling)  # [B, N+1, V]
  else:  # only the expanded rows (the leaves' logits were never computed)
    rows = np.nonzero(expanded)[0]
    q_node = jnp.zeros_like(node_logits).at[:, rows].set(
        node_distribution(node_logits[:, rows], sampling))
  return StaticTreeDraft(tokens, q, q_node, carry)
