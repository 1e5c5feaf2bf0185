"""Sampled draft trees: children drawn WITHOUT replacement from the drafter's q.

docs/spec.md §4 ("Sampled trees").  A static tree drafter (``LMTreeDrafter``,
``EagleStaticTreeDrafter``) fills its nodes in one of two ways,
its ``children`` option (:data:`CHILDREN`):

* ``"topk"`` (the default, EAGLE / SpecInfer): node ``[r_1..r_d]`` is the
  rank-``r_d`` token of its parent's distribution; deterministic, so
  ``q = onehot(x)``.
* ``"sampled"`` (Jeon et al. 2024, "Recursive Speculative Decoding", RSD):
  each parent draws one sequence of distinct tokens from its node
  distribution ``q_node`` by Gumbel-top-k
  (:func:`specjax.distributions.sample_without_replacement`), and node
  ``[r_1..r_d]`` is draw number ``r_d``.  Its ``q`` is the law of that draw
  given the earlier draws of the same parent
  (:func:`specjax.distributions.without_replacement_q`): ``q_node`` with the
  earlier siblings removed and renormalised.

With that ``q``, the lossless node rule *is* recursive rejection sampling
(RSD §3.1): sibling j is accepted with ``min(1, p_cur(x_j) / q_j(x_j))`` and a
rejection leaves ``norm(max(0, p_cur - q_j))``.  Nothing in the verifier
changes; every node rule gets the sibling's true law, as docs/spec.md §1
requires of any drafter.

:func:`constant_branching` builds RSD-C's tree shape (every node at depth
d - 1 has ``b_d`` children).  Rank paths need not be contiguous: a tree may
keep draws 0 and 2 of a parent and skip draw 1; draw 2's ``q`` is still its law
given draws 0 and 1, and the skipped draw is randomness the verifier never
sees (independent of the target), so the rule stays lossless (tested exactly).
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.distributions import sample_without_replacement, without_replacement_q

CHILDREN = ("topk", "sampled")


def check_children(children: str) -> None:
  """``ValueError`` naming ``children`` unless it is one of :data:`CHILDREN`."""
  if children not in CHILDREN:
    raise ValueError(f"children={children!r}; choose one of {CHILDREN} ('topk': the parent's "
                     f"top-ranked tokens, q one-hot; 'sampled': drawn without replacement "
                     f"from q_node, verified by recursive rejection sampling)")


def constant_branching(branching: Sequence[int]) -> tuple:
  """RSD-C's tree as rank paths: ``b_1`` root children, each with ``b_2`` children, ...

  ``(2, 2)`` -> ``((0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1))``: every path
  ``(r_1..r_d)`` with ``r_i < b_i``, ``d = 1..len(branching)``
  (``b_1 + b_1 b_2 + ...`` nodes).  Raises ``ValueError`` for an empty tuple
  or a factor below 1.
  """
  try:
    bs = tuple(int(b) for b in branching)
  except (TypeError, ValueError):
    bs = ()
  if not bs or min(bs) < 1 or any(float(b) != int(b) for b in branching):
    raise ValueError(f"branching={branching!r} must be a non-empty sequence of integers >= 1 "
                     f"(children per node at depth 1, 2, ...)")
  paths, level = [], [()]
  for b in bs:
    level = [p + (r,) for p in level for r in range(b)]
    paths.extend(level)
  return tuple(paths)


def sample_level(keys: jax.Array, q_parents: jax.Array, parent_ids: np.ndarray,
                 parents: np.ndarray, ranks: np.ndarray) -> tuple[jax.Array, jax.Array]:
  """One tree level of sampled children (every row, jittable).

  Args:
    keys: [B] PRNG keys of the step (one per row); parent ``i`` draws with
      ``fold_in(key, i)``, so each parent has its own sequence.
    q_parents: [B, P, V] node distributions of the level's parents.
    parent_ids: [P] static int tree indices of those parents (distinct).
    parents: [T] static tree index of each node of the level (in ``parent_ids``).
    ranks: [T] static draw number of each node among its parent's draws.

  Returns:
    ``tokens [B, T]`` int32 (node t = draw ``ranks[t]`` of its parent) and
    ``q [B, T, V]`` (its law given the parent's earlier draws).
  """
  parent_ids = np.asarray(parent_ids)
  slot = {int(p): i for i, p in enumerate(parent_ids)}
  pidx = np.array([slot[int(p)] for p in parents], np.int32)
  ranks = np.asarray(ranks, np.int32)
  k = int(ranks.max()) + 1
  ids = jnp.asarray(parent_ids, jnp.int32)
  pkeys = jax.vmap(lambda kk: jax.vmap(lambda i: jax.random.fold_in(kk, i))(ids))(keys)
  draws = jax.vmap(jax.vmap(lambda kk, qq: sample_without_replacement(kk, qq, k)))(
      pkeys, q_parents)  # [B, P, k]
  sib_q = without_replacement_q(q_parents, draws)  # [B, P, k, V]
  return draws[:, pidx, ranks], sib_q[:, pidx, ranks]
