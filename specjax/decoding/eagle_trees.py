"""EAGLE drafters of trees: the EAGLE-2 dynamic tree (:class:`EagleTreeDrafter`) and a
static tree of rank paths (:class:`EagleStaticTreeDrafter`); the chain and what every
shape shares are in :mod:`specjax.decoding.eagle_drafter` (its module docstring
describes the head's cache and the tree region the nodes are written into).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.checks import check_int
from specjax.decoding import adaptation
from specjax.decoding.drafters import node_distribution
from specjax.decoding.eagle_drafter import EagleHeadDrafter, EagleState
from specjax.decoding.proposal import Proposal
from specjax.decoding.sampled_tree import check_children
from specjax.decoding.static_tree_drafting import draft_static_tree
from specjax.decoding.strategies import TREE
from specjax.decoding.tree import TreeDraft, static_ancestor_mask, static_tree
from specjax.distributions import GREEDY, SamplingConfig
from specjax.models.eagle import EagleHead


@dataclasses.dataclass(frozen=True)
class EagleTreeDrafter(EagleHeadDrafter):
  """An EAGLE head drafting EAGLE-2 dynamic trees (Li et al. 2024b, Alg. 1): expand
  the ``top_k`` children of every frontier node, score = cumulative draft log-prob,
  keep the global ``top_k`` as the next frontier, for ``depth`` levels; keep the best
  ``total_tokens`` candidates (ancestors always outrank descendants, ties go to the
  earlier candidate) in candidate order, so parents precede children.

  Attributes:
    head: the :class:`~specjax.models.eagle.EagleHead`.
    depth: levels expanded (the most drafts one round can accept).
    top_k: children per frontier node and frontier width.
    total_tokens: draft nodes N kept per tree. The defaults (8, 16) are sized for a
      CPU, where verifying a node costs about what its bytes cost (docs/speed.md);
      EAGLE-2 used 10 and 60 on GPUs.
    sampling: only shapes ``q_node`` (drafts are deterministic top-k choices;
      default greedy: the head's softmax at T = 1).
    adapt: online adaptation (:class:`~specjax.decoding.eagle_drafter.EagleDrafter`).
  """

  head: EagleHead = None
  depth: Optional[int] = None
  top_k: int = 8
  total_tokens: int = 16
  sampling: SamplingConfig = GREEDY
  adapt: Optional[adaptation.OnlineAdaptation] = None

  tree_kind = "dynamic"
  strategy = TREE

  def __post_init__(self):
    self._check_head()
    check_int("depth", self.depth, low=1)
    check_int("top_k", self.top_k, low=1)
    check_int("total_tokens", self.total_tokens, low=1)
    vd = self.head.config.draft_vocab_size
    if not 1 <= self.top_k <= vd:
      raise ValueError(f"top_k={self.top_k} must lie in [1, draft vocab {vd}]")
    cap = self.top_k + (self.depth - 1) * self.top_k ** 2
    if not 1 <= self.total_tokens <= cap:
      raise ValueError(f"total_tokens={self.total_tokens} must lie in [1, {cap}] "
                       f"(top_k + (depth - 1) * top_k**2 candidates)")

  @property
  def max_accepted(self) -> int:
    return self.depth

  @property
  def num_nodes(self) -> int:
    return self.total_tokens

  @property
  def _extra_slots(self) -> int:
    return (self.depth - 1) * self.top_k + self.pending_width

  def propose(self, params, state: EagleState, prev, last, keys, gate=None):
    del prev, keys, gate  # top-k drafts are deterministic; trees take no draft gate
    """Expand top_k children per frontier node, keep the global top_k (EAGLE-2, Alg. 1)."""
    k, depth, n = self.top_k, self.depth, self.total_tokens
    h_root, z, cache, adapter = self._consume_pending(params, state, last)
    base = cache.lengths
    b = last.shape[0]
    lp_root = jax.nn.log_softmax(z, axis=-1)
    f_score, f_tok = jax.lax.top_k(lp_root, k)  # [B, k]
    cand_tok, cand_score = [f_tok], [f_score]
    cand_parent = [jnp.full((b, k), -1, jnp.int32)]
    cand_depth = [np.full((k,), 1, np.int32)]
    f_idx = jnp.broadcast_to(jnp.arange(k, dtype=jnp.int32), (b, k))
    f_feat = jnp.broadcast_to(h_root[:, None, :], (b, k, h_root.shape[-1]))
    region = max((depth - 1) * k, 1)
    f_anc = jnp.zeros((b, k, region), bool)
    n_cand = k
    exp_idx, exp_dist = [], []  # expanded candidates [B, k] and their distributions [B, k, V]
    for i in range(1, depth):
      off = (i - 1) * k
      own = jax.nn.one_hot(off + jnp.arange(k), region, dtype=bool)  # [k, region]
      anc = f_anc | own[None]
      hid, cache = self._tree_forward(params, cache, base, off, region, f_tok, f_feat, i, anc)
      logits = self._logits(params, hid, adapter, i + 1)  # [B, k, V], depth i + 1
      exp_idx.append(f_idx)
      exp_dist.append(node_distribution(logits, self.sampling))
      lp = jax.nn.log_softmax(logits, axis=-1)  # [B, k, V]
      c_lp, c_tok = jax.lax.top_k(lp, k)  # [B, k, k]
      cu = (f_score[:, :, None] + c_lp).reshape(b, k * k)
      c_tok = c_tok.reshape(b, k * k)
      cand_tok.append(c_tok)
      cand_score.append(cu)
      cand_parent.append(jnp.repeat(f_idx, k, axis=1))
      cand_depth.append(np.full((k * k,), i + 1, np.int32))
      f_score, sel = jax.lax.top_k(cu, k)  # next frontier [B, k]
      src = sel // k  # which current frontier node is the parent
      f_tok = jnp.take_along_axis(c_tok, sel, 1)
      f_idx = n_cand + sel
      f_feat = jnp.take_along_axis(hid, src[:, :, None], 1)
      f_anc = jnp.take_along_axis(anc, src[:, :, None], 1)
      n_cand += k * k
    toks = jnp.concatenate(cand_tok, 1)
    scores = jnp.concatenate(cand_score, 1)
    parents = jnp.concatenate(cand_parent, 1)
    depths = jnp.asarray(np.concatenate(cand_depth))
    # Best N; lax.top_k prefers the lower index on ties and a child never outscores
    # its parent (log-probs <= 0), so the kept set is ancestor-closed.
    _, chosen = jax.lax.top_k(scores, n)
    chosen = jnp.sort(chosen, axis=1)  # candidate order: parents first
    tok = jnp.take_along_axis(toks, chosen, 1)
    par_c = jnp.take_along_axis(parents, chosen, 1)
    node_of = jnp.argmax(chosen[:, None, :] == par_c[:, :, None], axis=2) + 1  # [B, N]
    par = jnp.where(par_c < 0, 0, node_of).astype(jnp.int32)
    dep = depths[chosen].astype(jnp.int32)
    tree = TreeDraft(tok.astype(jnp.int32), par, dep)
    # Node distributions: the root's, and each kept node's if it was expanded.
    q_node = jnp.zeros((b, n + 1, z.shape[-1]), jnp.float32)
    q_node = q_node.at[:, 0].set(node_distribution(z, self.sampling))
    if exp_idx:
      e_idx = jnp.concatenate(exp_idx, 1)  # [B, E]
      e_dist = jnp.concatenate(exp_dist, 1)  # [B, E, V]
      hit = chosen[:, :, None] == e_idx[:, None, :]  # [B, N, E]
      src = jnp.argmax(hit, axis=2)  # [B, N]
      got = jnp.take_along_axis(e_dist, src[:, :, None], 1)  # [B, N, V]
      q_node = q_node.at[:, 1:].set(jnp.where(jnp.any(hit, 2)[:, :, None], got, 0.0))
    return (Proposal.from_tree(tree, self._one_hot(tok), q_node),
            dataclasses.replace(state, cache=cache, adapter=adapter))


@dataclasses.dataclass(frozen=True)
class EagleStaticTreeDrafter(EagleHeadDrafter):
  """An EAGLE head drafting a static tree of rank paths (EAGLE-1 / Medusa choice
  paths, :func:`specjax.decoding.tree.static_tree`), filled level by level by the
  shared expander (:mod:`specjax.decoding.static_tree_drafting`).

  Attributes:
    head: the :class:`~specjax.models.eagle.EagleHead`.
    tree_paths: tuple of rank paths, e.g. ((0,), (1,), (0, 0)).
    depth: the longest path (may be omitted; checked when given).
    children: "topk" (rank r = the parent's rank-r token, q one-hot) or "sampled"
      (rank r = the parent's r-th draw without replacement from its ``q_node``, q =
      that draw's law given the earlier ones; docs/spec.md §4).
    sampling: the node distributions ``q_node`` (and the law of sampled children).
    adapt: online adaptation (:class:`~specjax.decoding.eagle_drafter.EagleDrafter`).
  """

  head: EagleHead = None
  tree_paths: Optional[tuple] = None
  depth: Optional[int] = None
  children: str = "topk"
  sampling: SamplingConfig = GREEDY
  adapt: Optional[adaptation.OnlineAdaptation] = None

  tree_kind = "static"
  strategy = TREE

  def __post_init__(self):
    self._check_head()
    check_children(self.children)
    if not self.tree_paths:
      raise ValueError("a static tree needs tree_paths, e.g. ((0,), (1,), (0, 0))")
    _, depths, ranks = static_tree(self.tree_paths)
    if self.depth is None:
      object.__setattr__(self, "depth", int(depths.max()))
    check_int("depth", self.depth, low=1)
    if int(depths.max()) != self.depth:
      raise ValueError(f"depth={self.depth} must equal the static tree depth "
                       f"{int(depths.max())} (or be omitted)")
    vd = self.head.config.draft_vocab_size
    if int(ranks.max()) >= vd:
      raise ValueError(f"static tree rank {int(ranks.max())} >= draft vocab {vd}")

  @property
  def max_accepted(self) -> int:
    return self.depth

  @property
  def num_nodes(self) -> int:
    return len(self.tree_paths)

  def propose(self, params, state: EagleState, prev, last, keys, gate=None):
    """Fill the tree level by level (the shared expander); each level's forward writes
    its nodes into the head's tree region, fed their parents' output features."""
    del prev, gate
    parents, depths, _ = static_tree(self.tree_paths)
    n = len(parents)
    # [N, N]: node j sees node i (its ancestors and itself; the root is in the cache)
    anc_nodes = static_ancestor_mask(parents)[1:, 1:]
    h_root, z, cache, adapter = self._consume_pending(params, state, last)
    base = cache.lengths
    b = last.shape[0]
    feats = jnp.zeros((b, n + 1, h_root.shape[-1]), h_root.dtype).at[:, 0].set(h_root)

    def expand(carry, d, level, tokens):
      cache, feats = carry
      anc = jnp.broadcast_to(jnp.asarray(anc_nodes[level]), (b, len(level), n))
      hid, cache = self._tree_forward(params, cache, base, int(level[0]), n, tokens[:, level],
                                      feats[:, parents[level]], d, anc)
      logits = self._logits(params, hid, adapter, d + 1)  # [B, T, V], depth d + 1
      return level + 1, logits, (cache, feats.at[:, level + 1].set(hid))

    filled = draft_static_tree(self.tree_paths, z, self.sampling, self.children, keys, expand,
                               (cache, feats), expand_leaves=False)
    tree = TreeDraft(filled.tokens, jnp.broadcast_to(jnp.asarray(parents), (b, n)),
                     jnp.broadcast_to(jnp.asarray(depths), (b, n)))
    return (Proposal.from_tree(tree, filled.q, filled.q_node),
            dataclasses.replace(state, cache=filled.carry[0], adapter=adapter))
