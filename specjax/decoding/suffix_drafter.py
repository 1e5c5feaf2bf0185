"""SuffixTreeDrafter: a model-free tree drafter in the spirit of SuffixDecoding
(Oliaro et al. 2024), scoring candidate continuations by how often they
followed the current suffix in the row's prompt and earlier output.

SuffixDecoding keeps a suffix tree over the prompt and previous outputs,
matches the longest suffix of the current text, and grows a speculation tree
greedily from the continuations seen after that suffix, ranked by their
empirical frequency.  We keep the idea and replace the pointer-based suffix
tree by fixed-shape scans, so the drafter runs inside the jitted loop with
per-row state (:mod:`specjax.decoding.token_history`):

1. **Occurrences.**  Every earlier end position j with a common suffix of
   length ``m_j >= min_match`` (capped at ``max_match``) is an occurrence; the
   ``max_occurrences`` (R) best are kept, ranked by longer match first, then
   more recent.
2. **Continuations.**  The ``depth + 1`` tokens after each occurrence
   (overlapping copy: a span repeating with period P continues to repeat).
3. **Candidates.**  Every distinct prefix (length 1..depth) of the R
   continuations is a candidate node: a trie of the continuations, built with
   an ``[R, R]`` prefix-equality test per depth.  A node's *supporters* are
   the occurrences whose continuation starts with it.
4. **Scores.**  Lexicographic: the longest match among the supporters, then
   how many supporters have that match length, then how many supporters in
   all (the empirical frequency of the path, SuffixDecoding's score), then
   the shallower node.  A child's supporters are a subset of its parent's, so
   a parent always outranks its children: the best ``total_tokens`` (N)
   candidates form a tree.
5. **Tree.**  The N best, parents before children (sorted by depth); when fewer
   than N candidates exist the remaining nodes are filler children of the
   root (static shapes: the target verifies N + 1 tokens whatever the tree).

Cost per row and step: ``max_match * C`` comparisons for the matches (C = the
loop's cache length), a top-R selection over C, ``depth * R**2`` for the trie
and ``N**2`` to link parents -- integers only, no model.

Drafts are deterministic candidates, so ``q = onehot(token)`` (as for EAGLE's
top-k trees): lossless at any temperature, and every verifier applies.  The
drafter's node distribution ``q_node`` (what CoS mixes with the target) is the
empirical next-token frequency over each node's supporters (uniform where a
node has none), so CoS works too.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.checks import check_int
from specjax.decoding import token_history as th
from specjax.decoding.drafters import Drafter
from specjax.decoding.strategies import TREE
from specjax.decoding.proposal import Proposal
from specjax.decoding.tree import TreeDraft
from specjax.distributions import GREEDY


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SuffixCandidates:
  """One step's tree and its statistics, per row (N nodes, V vocabulary).

  Attributes:
    tree: the draft tree (``tokens``, ``parents``, ``depths``: [B, N]).
    real: [B, N] bool node is a candidate (False: filler).
    support: [B, N] int32 occurrences whose continuation starts with the node's path.
    q_node: [B, N+1, V] float32 empirical next-token frequencies at the root and
      at each node over its supporters (uniform without supporters).
  """

  tree: TreeDraft
  real: jax.Array
  support: jax.Array
  q_node: jax.Array


@dataclasses.dataclass(frozen=True)
class SuffixTreeDrafter(Drafter):
  """SuffixDecoding-style frequency tree as a tree drafter (module docstring).

  Attributes:
    vocab: V, the target's vocabulary size.
    depth: the longest path (the most drafts one step can accept), >= 1.
    total_tokens: N, the nodes verified per step, >= 1.
    max_match: the longest suffix matched, >= 1.
    min_match: the shortest suffix that makes an occurrence, in ``[1, max_match]``.
    max_occurrences: R, occurrences whose continuations build the tree, >= 1.

  Params: none (pass ``None`` as ``draft_params``).
  """

  vocab: int
  depth: int = 4
  total_tokens: int = 16
  max_match: int = 8
  min_match: int = 1
  max_occurrences: int = 32

  strategy = TREE
  supplies_node_dist = True
  follows_committed = True  # commit takes in every committed token
  # Deterministic candidates: greedy is the only "sampling" there is (no PRNG key needed).
  sampling = GREEDY

  def __post_init__(self):
    check_int("vocab", self.vocab, low=1)
    check_int("depth", self.depth, low=1)
    check_int("total_tokens", self.total_tokens, low=1)
    check_int("max_match", self.max_match, low=1)
    check_int("min_match", self.min_match, low=1)
    check_int("max_occurrences", self.max_occurrences, low=1)
    if self.min_match > self.max_match:
      raise ValueError(f"min_match={self.min_match} must lie in [1, max_match={self.max_match}]")

  @property
  def max_accepted(self) -> int:
    return self.depth

  @property
  def vocab_size(self) -> int:
    return self.vocab

  @property
  def tokens_per_step(self) -> int:
    return self.total_tokens + 1

  def prefill(self, params, tokens, lengths, cache_length: int, target_hidden=None
              ) -> th.TokenHistory:
    return th.prefill(tokens, lengths, cache_length)

  def candidates(self, hist: th.TokenHistory, last: jax.Array) -> SuffixCandidates:
    """The tree for the current text (history + ``last [B]``): steps 1-5 of the module
    docstring, for every row at once."""
    h, n = th.with_last(hist, last)
    b, c = h.shape
    r_occ, d, n_nodes = min(self.max_occurrences, c), self.depth, self.total_tokens
    m = th.match_lengths(h, n, self.max_match)  # [B, C]
    rank = jnp.where(m >= self.min_match, m * c + jnp.arange(c)[None, :], -1)
    rank, ends = jax.lax.top_k(rank, r_occ)  # [B, R]: longest match first, then most recent
    valid = rank >= 0
    occ_m = jnp.where(valid, rank // c, 0)
    cont = th.continuation(h, n, ends, d + 1)  # [B, R, depth + 1]
    # same[b, t, r, s]: continuations r and s agree on their first t + 1 tokens.
    eq = cont[:, None, :, :d] == cont[:, :, None, :d]  # [B, R, R, depth]
    same = jnp.cumprod(eq, axis=3).astype(bool) & valid[:, :, None, None] & valid[:, None, :, None]
    same = jnp.moveaxis(same, 3, 1)  # [B, depth, R, R]
    rep = jnp.argmax(same, axis=3)  # [B, depth, R] first (best-ranked) supporter
    is_rep = (rep == jnp.arange(r_occ)[None, None, :]) & valid[:, None, :]
    m_best = jnp.take_along_axis(jnp.broadcast_to(occ_m[:, None, :], rep.shape), rep, 2)
    support = jnp.sum(same, axis=3).astype(jnp.int32)  # [B, depth, R]
    support_best = jnp.sum(same & (occ_m[:, None, None, :] == m_best[..., None]), 3)
    width = r_occ + 1
    shallow = (d - 1 - jnp.arange(d))[None, :, None]
    score = ((m_best * width + support_best) * width + support) * d + shallow
    score = jnp.where(is_rep, score, -1).reshape(b, d * r_occ)  # flat index = t * R + r
    k = min(n_nodes, d * r_occ)
    top, flat = jax.lax.top_k(score, k)  # a parent scores strictly above its children
    real = top >= 0
    order = jnp.argsort(jnp.where(real, flat, d * r_occ + jnp.arange(k)[None, :]), axis=1)
    flat = jnp.take_along_axis(flat, order, 1)
    real = jnp.take_along_axis(real, order, 1)
    t, r = flat // r_occ, flat % r_occ  # node depth - 1, representative occurrence
    tokens = jnp.take_along_axis(cont.reshape(b, -1), r * (d + 1) + t, 1)
    rep_flat = rep.reshape(b, d * r_occ)
    parent_flat = (t - 1) * r_occ + jnp.take_along_axis(
        rep_flat, jnp.maximum(t - 1, 0) * r_occ + r, 1)  # the parent prefix's representative
    hit = (flat[:, None, :] == parent_flat[:, :, None]) & real[:, None, :]  # [B, k, k]
    parents = jnp.where((t > 0) & real, jnp.argmax(hit, 2) + 1, 0).astype(jnp.int32)
    depths = jnp.where(real, t + 1, 1).astype(jnp.int32)
    tokens = jnp.where(real, tokens, last[:, None]).astype(jnp.int32)
    node_support = jnp.where(real, jnp.take_along_axis(support.reshape(b, -1), flat, 1), 0)
    # Supporters of the root (every kept occurrence) and of each node; their next tokens.
    members = jnp.take_along_axis(same.reshape(b, d * r_occ, r_occ), flat[:, :, None], 1)
    members = jnp.concatenate([valid[:, None, :], members & real[:, :, None]], 1)  # [B, k+1, R]
    nxt = jnp.take_along_axis(cont, jnp.concatenate(
        [jnp.zeros((b, 1), jnp.int32), jnp.where(real, t + 1, 0)], 1)[:, None, :], 2)
    nxt = jnp.swapaxes(nxt, 1, 2)  # [B, k+1, R]: token after each node, per occurrence
    counts = jnp.zeros((b, k + 1, self.vocab), jnp.float32)
    bi = jnp.arange(b)[:, None, None]
    ni = jnp.arange(k + 1)[None, :, None]
    counts = counts.at[bi, ni, nxt].add(members.astype(jnp.float32))
    total = jnp.sum(counts, -1, keepdims=True)
    q_node = jnp.where(total > 0, counts / jnp.maximum(total, 1.0), 1.0 / self.vocab)
    if k < n_nodes:  # fewer possible candidates than nodes: filler children of the root
      pad = n_nodes - k
      tokens = jnp.concatenate([tokens, jnp.broadcast_to(last[:, None], (b, pad))], 1)
      parents = jnp.concatenate([parents, jnp.zeros((b, pad), jnp.int32)], 1)
      depths = jnp.concatenate([depths, jnp.ones((b, pad), jnp.int32)], 1)
      real = jnp.concatenate([real, jnp.zeros((b, pad), bool)], 1)
      node_support = jnp.concatenate([node_support, jnp.zeros((b, pad), jnp.int32)], 1)
      q_node = jnp.concatenate(
          [q_node, jnp.full((b, pad, self.vocab), 1.0 / self.vocab, jnp.float32)], 1)
    return SuffixCandidates(TreeDraft(tokens.astype(jnp.int32), parents, depths), real,
                            node_support.astype(jnp.int32), q_node)

  def propose(self, params, state: th.TokenHistory, prev, last, keys, gate=None):
    del params, prev, keys, gate  # no model; deterministic
    cand = self.candidates(state, last)
    q = jax.nn.one_hot(cand.tree.tokens, self.vocab, dtype=jnp.float32)  # [B, N, V]
    return Proposal.from_tree(cand.tree, q, cand.q_node), state

  def commit(self, state: th.TokenHistory, target_lengths, committed=None, num_committed=None,
             target_hidden=None, target_logits=None,
             params=None) -> th.TokenHistory:
    """Append what the target kept (``last`` and the accepted path)."""
    if committed is None or num_committed is None:
      raise ValueError("SuffixTreeDrafter.commit needs the committed tokens and their count")
    return th.commit(state, committed, num_committed)
