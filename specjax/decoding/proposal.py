"""What a drafter hands the loop each step: one :class:`Proposal` per batch.

Every drafter's ``propose`` returns ``(Proposal, state)``.  The class lives here, apart from the drafters and the
strategies (:mod:`specjax.decoding.strategies`), so both import it without a
cycle.  Tree layout (tree indices, parents before children): see
:mod:`specjax.decoding.tree`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from specjax.decoding.tree import TreeDraft


def draft_confidence(q: jax.Array) -> jax.Array:
  """A drafter's confidence at a position from its distribution there: ``max_v q[..., v]``
  (the score the acceptance tables are binned by where the drafter gives none of its
  own). ``[..., V] -> [...]``."""
  return jnp.max(q.astype(jnp.float32), axis=-1)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Proposal:
  """One step's drafts for every row (N = K for a chain, the node count for a tree).

  Two indexings, one rule: per-draft arrays (``tokens``, ``q``, ``parents``,
  ``depths``, ``confidence``) are indexed by the draft, j = 0..N-1; ``q_node`` is
  indexed by the *position a distribution is read at*: row 0 the root (the last
  committed token), row j + 1 after draft j. Draft j was drawn from its parent's
  row, ``q_node[parents[j]]`` (a chain's parent of draft j is position j, so there
  ``q_node[j]`` sits beside ``q[j]``); a chain drops the row after its last draft,
  which nothing reads, hence [B, K, V] against a tree's [B, N+1, V].

  Attributes:
    tokens: [B, N] int32 draft tokens (tree: node j has tree index j + 1).
    q: [B, N, V] distribution each draft was drawn from (one-hot for greedy /
      top-k drafts; a sampled tree child's law given its earlier siblings, its
      parent's ``q_node`` without them, renormalised: docs/spec.md §4).
    q_node: [B, N, V] (chain) or [B, N+1, V] (tree, row 0 the root) the
      drafter's full distribution at each position / node, or None when the
      drafter does not supply it (``supplies_node_dist = False``; the chain
      strategy then uses ``q``, right for sampled chains).
    parents: [B, N] int32 tree index of each node's parent (0 = root); None for chains.
    depths: [B, N] int32 depth of each node (root = 0, so >= 1); None for chains.
    num_valid: [B] int32 drafts the drafter offers per row (chains: a
      model-free drafter without a match offers 0); None: all N.
    confidence: [B, N] float32 in [0, 1], the drafter's own score of each
      position, computed before that position's draft (prompt lookup: the
      matched n-gram's length over its longest); None: a policy reads the
      drafter's distributions instead (:func:`specjax.policies.acceptance.proposal_confidence`).
    source: [B] int32, which of a choosing drafter's sources drafted each row
      (:class:`~specjax.decoding.source_choice.SourceChoiceDrafter`); None: one source.
  """

  tokens: jax.Array
  q: jax.Array
  q_node: Optional[jax.Array] = None
  parents: Optional[jax.Array] = None
  depths: Optional[jax.Array] = None
  num_valid: Optional[jax.Array] = None
  confidence: Optional[jax.Array] = None
  source: Optional[jax.Array] = None

  @classmethod
  def from_tree(cls, tree: TreeDraft, q: jax.Array,
                q_node: Optional[jax.Array] = None) -> "Proposal":
    """A tree proposal from a :class:`TreeDraft` ([B, N] tokens / parents / depths),
    ``q [B, N, V]`` and ``q_node [B, N+1, V]`` (or None)."""
    return cls(tree.tokens, q, q_node, tree.parents, tree.depths)

  @property
  def tree(self) -> Optional[TreeDraft]:
    """The :class:`TreeDraft` of a tree proposal; None for a chain."""
    if self.parents is None:
      return None
    return TreeDraft(self.tokens, self.parents, self.depths)
