"""EagleDrafter: chains and trees from an EAGLE-1 / EAGLE-3 head (drafters.py protocol).

Cache convention (docs/spec.md §4, "EAGLE cache convention"): the head's
entry i pairs the target feature f_i with the token x_{i+1} and sits at RoPE
position i, so when the target has committed L tokens the head can hold at
most L - 1 *complete* entries -- entry L-1 needs the token at position L (the
``last`` token of the protocol), which no cache holds yet.  The drafter state
therefore keeps a small *pending* buffer: the target features of the tokens
the target committed in its last step (and the tokens after them).  ``propose``
first runs the head over the pending entries (closing them with ``last``),
which leaves the head exactly L entries long, then drafts:

* chain (``num_draft`` = K): K single-entry steps, each feeding the head's
  own output feature back (EAGLE-1: as f; EAGLE-3: as the fused hidden); the token is sampled
  from the head's distribution under ``sampling`` and q is that distribution
  (one-hot when greedy).
* dynamic tree (EAGLE-2, Li et al. 2024b, Alg. 1): expand the top_k children
  of every frontier node, score = cumulative draft log-prob, keep the global
  top_k as the next frontier, for ``depth`` levels; finally keep the best
  ``total_tokens`` candidates (ancestors always outrank descendants, ties go to
  the earlier candidate) in candidate order, so parents precede children.
* static tree: EAGLE-1 / Medusa choice paths (``tree.static_tree``); with
  ``children="sampled"`` a node of rank r is instead the r-th draw without
  replacement from its parent's ``q_node`` (RSD, :mod:`specjax.decoding.sampled_tree`).

Top-k tree drafts are deterministic, so q = one-hot(token) (the
multi-draft lossless rule then reduces to p(x) acceptance); sampled children carry
their law given the earlier siblings (recursive rejection sampling); ``q_node`` holds
the head's full distribution (:func:`~specjax.decoding.drafters.node_distribution`)
at the root and at every node that was expanded (rows of unexpanded nodes,
which have no children, are 0).  Tree nodes are
written into the head's cache region after the L committed entries; each sees
the committed entries, its ancestors and itself (a full ``[B, T, S]`` mask, the
same visibility rule as the target's ``attn_mask``).  ``commit`` simply resets
the head to L_old = new target length - num_committed entries and stores the
committed tokens' target features as the next pending buffer, so rejected
drafts never leave a trace (per-row lengths: rows accept different amounts).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.checks import ArgumentTypeError, check_int
from specjax.decoding import adaptation
from specjax.decoding.drafters import Drafter, node_distribution, sample_chain
from specjax.decoding.strategies import CHAIN, TREE
from specjax.distributions import SamplingConfig
from specjax.decoding.proposal import Proposal
from specjax.decoding.sampled_tree import check_children, sample_level
from specjax.decoding.tree import TreeDraft, static_ancestor_mask, static_tree
from specjax.models import kv_cache as kvc
from specjax.models.eagle import EagleHead, target_lm_head
from specjax.models.transformer import Model

TREE_KINDS = ("chain", "dynamic", "static")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class EagleState:
  """Attributes:
    cache: the head's 1-layer KV cache; lengths[b] = complete entries of row b.
    pend_tokens: [B, W] int32 tokens after the pending features (slot count-1 is
      filled with ``last`` at the next draft).
    pend_hidden: [n_sel, B, W, Ht] target features of the pending positions.
    pend_count: [B] int32 pending entries per row.
    adapter: the online adapter (:mod:`specjax.decoding.adaptation`), or None.
  """

  cache: kvc.KVCache
  pend_tokens: jax.Array
  pend_hidden: jax.Array
  pend_count: jax.Array
  adapter: Optional[adaptation.AdapterState] = None


def _fit(x, width: int, axis: int):
  """Pad with zeros or slice ``x`` along ``axis`` to ``width`` (static shapes)."""
  n = x.shape[axis]
  if n >= width:
    return jax.lax.slice_in_dim(x, 0, width, axis=axis)
  pad = [(0, 0)] * x.ndim
  pad[axis] = (0, width - n)
  return jnp.pad(x, pad)


@dataclasses.dataclass(frozen=True)
class EagleDrafter(Drafter):
  """An EAGLE head as a drafter.

  Attributes:
    num_draft: K, the chain length (``tree_kind="chain"`` only).
    sampling: the processors chain drafts are sampled under (required for a
      chain); for trees, whose drafts are deterministic top-k choices, it only
      shapes ``q_node`` (default greedy: the head's softmax at T = 1).
    head: the :class:`~specjax.models.eagle.EagleHead`.
    tree_kind: "chain" | "dynamic" (EAGLE-2) | "static".
    top_k: children per frontier node and frontier width (dynamic trees).
    total_tokens: draft nodes N kept per dynamic tree.
    tree_paths: tuple of rank paths for a static tree, e.g. ((0,), (1,), (0, 0)).
    depth: the tree depth (trees only; a dynamic tree expands ``depth``
      levels; a static tree's depth is its longest path and may be omitted).
    children: static trees: "topk" (rank r = the parent's rank-r token, q one-hot)
      or "sampled" (rank r = the parent's r-th draw without replacement from its
      ``q_node``, q = that draw's law given the earlier ones; docs/spec.md §4).
    adapt: None, or an :class:`~specjax.decoding.adaptation.OnlineAdaptation`: each
      row adapts its draft logits to the tokens the target commits, while it serves
      (exact under lossless rules: docs/spec.md §4, "Online adaptation").

  Params: ``EagleDrafter.make_params(head_params, target, target_params, d2t)``; with
  ``adapt``, ``params["adapter"]`` (optional) is the adapter state to start from (a
  session's, carried over from an earlier call: ``SpecResult.adapter``).
  """

  num_draft: Optional[int] = None
  sampling: Optional[SamplingConfig] = None
  head: EagleHead = None
  tree_kind: str = "chain"
  top_k: int = 10
  total_tokens: int = 60
  tree_paths: Optional[tuple] = None
  depth: Optional[int] = None
  children: str = "topk"
  adapt: Optional[adaptation.OnlineAdaptation] = None

  supplies_node_dist = True
  gates_drafting = True  # chains (tree_kind "chain")

  def __post_init__(self):
    if not isinstance(self.head, EagleHead):
      raise ArgumentTypeError(f"EagleDrafter needs head=EagleHead(...), got {type(self.head).__name__}")
    if self.tree_kind not in TREE_KINDS:
      raise ValueError(f"tree_kind={self.tree_kind!r}; choose one of {TREE_KINDS}")
    if self.tree_kind == "chain":
      check_int("num_draft (K)", self.num_draft, low=1)
      if self.depth is not None:
        raise ValueError(f"depth={self.depth!r} is for trees; a chain's length is "
                         f"num_draft (K={self.num_draft})")
      if self.sampling is None:
        raise ArgumentTypeError("an EagleDrafter chain needs sampling=SamplingConfig(...)")
    else:
      if self.num_draft is not None:
        raise ValueError(f"num_draft={self.num_draft!r} is a chain's K; a {self.tree_kind} "
                         f"tree takes depth= (its longest path)")
      if self.sampling is None:  # only shapes q_node (trees draft top-k, deterministically)
        object.__setattr__(self, "sampling", SamplingConfig(temperature=0.0))
    if not isinstance(self.sampling, SamplingConfig):
      raise ArgumentTypeError(f"sampling must be a SamplingConfig, got {type(self.sampling).__name__}")
    check_int("top_k", self.top_k, low=1)
    check_int("total_tokens", self.total_tokens, low=1)
    check_children(self.children)
    if self.adapt is not None and not isinstance(self.adapt, adaptation.OnlineAdaptation):
      raise ArgumentTypeError(f"adapt must be an OnlineAdaptation or None, got "
                              f"{type(self.adapt).__name__}")
    if self.children == "sampled" and self.tree_kind != "static":
      raise ValueError(
          f"children='sampled' needs tree_kind='static' (got {self.tree_kind!r}): a chain "
          f"samples its drafts under `sampling`, and the EAGLE-2 dynamic tree keeps the "
          f"candidates of highest draft probability, so a kept sampled child would no longer "
          f"follow q (not lossless); use tree_paths=sampled_tree.constant_branching(...)")
    vd = self.head.config.draft_vocab_size
    if self.tree_kind == "dynamic":
      check_int("depth", self.depth, low=1)
      if not 1 <= self.top_k <= vd:
        raise ValueError(f"top_k={self.top_k} must lie in [1, draft vocab {vd}]")
      cap = self.top_k + (self.depth - 1) * self.top_k ** 2
      if not 1 <= self.total_tokens <= cap:
        raise ValueError(f"total_tokens={self.total_tokens} must lie in [1, {cap}] "
                         f"(top_k + (depth - 1) * top_k**2 candidates)")
    if self.tree_kind == "static":
      if not self.tree_paths:
        raise ValueError("a static tree needs tree_paths, e.g. ((0,), (1,), (0, 0))")
      _, depths, ranks = static_tree(self.tree_paths)
      if self.depth is None:
        object.__setattr__(self, "depth", int(depths.max()))
      check_int("depth", self.depth, low=1)
      if int(depths.max()) != self.depth:
        raise ValueError(f"depth={self.depth} must equal the static tree depth "
                         f"{int(depths.max())} (or be omitted)")
      if int(ranks.max()) >= vd:
        raise ValueError(f"static tree rank {int(ranks.max())} >= draft vocab {vd}")

  # ---- protocol attributes ---------------------------------------------------------------
  @property
  def strategy(self):
    return CHAIN if self.tree_kind == "chain" else TREE

  @property
  def max_accepted(self) -> int:
    return self.num_draft if self.tree_kind == "chain" else self.depth

  @property
  def vocab_size(self) -> int:
    return self.head.config.vocab_size

  @property
  def target_hidden_layers(self) -> tuple:
    return tuple(self.head.config.target_layers)

  @property
  def num_nodes(self) -> int:
    if self.tree_kind == "dynamic":
      return self.total_tokens
    if self.tree_kind == "static":
      return len(self.tree_paths)
    return self.num_draft

  @property
  def tokens_per_step(self) -> int:
    return self.num_nodes + 1

  @property
  def reads_target_logits(self) -> bool:
    """Whether ``commit`` needs the target's logits at the committed positions (an
    adapting drafter learns from them)."""
    return self.adapt is not None

  @property
  def pending_width(self) -> int:
    return self.max_accepted + 1

  @property
  def _extra_slots(self) -> int:
    """Head cache slots needed beyond the target's cache (tree regions)."""
    if self.tree_kind == "dynamic":
      return (self.depth - 1) * self.top_k + self.pending_width
    return self.num_nodes + self.pending_width

  @staticmethod
  def make_params(head_params, target: Model, target_params, d2t=None) -> dict:
    """The drafter's params: the head's own plus the target's (frozen) embedding and,
    for EAGLE-1, LM head kernel [H, V]; ``d2t`` for a reduced draft vocabulary."""
    out = {"head": head_params, "embed": target_params["embed_tokens"]["embedding"],
           "lm_head": target_lm_head(target.config, target_params)}
    if d2t is not None:
      out["d2t"] = jnp.asarray(d2t, jnp.int32)
    return out

  # ---- helpers -----------------------------------------------------------------------------
  def _embed(self, params, tokens):
    dt = jnp.dtype(self.head.config.dtype)
    return params["embed"][tokens].astype(dt)

  def _lm(self, params):
    return params.get("lm_head") if self.head.config.kind == "eagle1" else None

  def _logits(self, params, hidden, adapter=None):
    """Target-vocabulary logits of the head's output ``hidden [B, ..., H]``, through
    the row's online adapter when there is one."""
    delta = None if adapter is None else adaptation.logit_delta(adapter.params, hidden)
    return self.head.logits(params["head"], hidden, self._lm(params), params.get("d2t"), delta)

  def _consume_pending(self, params, state: EagleState, last):
    """Run the pending entries (closed by ``last``); returns the root's output
    feature [B, H], its logits [B, V] and the cache, now L entries long."""
    w = state.pend_tokens.shape[1]
    cnt = jnp.maximum(state.pend_count, 1)
    idx = jnp.arange(w)[None, :]
    toks = jnp.where(idx == (cnt - 1)[:, None], last[:, None], state.pend_tokens)
    feats = self.head.project(params["head"], state.pend_hidden)
    cache = state.cache
    pos = cache.lengths[:, None] + idx
    out = self.head.apply(params["head"], self._embed(params, toks), feats, pos, cache)
    cache = kvc.commit(out.cache, cnt)
    h = jnp.take_along_axis(out.hidden, (cnt - 1)[:, None, None], axis=1)[:, 0]  # [B, H]
    return h, self._logits(params, h, state.adapter), cache

  # ---- protocol ----------------------------------------------------------------------------
  def prefill(self, params, tokens, lengths, cache_length: int, target_hidden=None
              ) -> EagleState:
    if target_hidden is None:
      raise ValueError("EagleDrafter.prefill needs the target's hidden states for layers "
                       f"{self.target_hidden_layers}")
    b, p = tokens.shape
    cache = self.head.init_cache(b, cache_length + self._extra_slots)
    if p > 1:
      feats = self.head.project(params["head"], target_hidden[:, :, :p - 1])
      pos = jnp.broadcast_to(jnp.arange(p - 1, dtype=jnp.int32), (b, p - 1))
      out = self.head.apply(params["head"], self._embed(params, tokens[:, 1:]), feats, pos,
                            cache)
      cache = out.cache
    cache = dataclasses.replace(cache, lengths=(lengths - 1).astype(jnp.int32))
    w = self.pending_width
    last_feat = jnp.take_along_axis(target_hidden, (lengths - 1)[None, :, None, None], axis=2)
    pend_hidden = _fit(last_feat, w, 2)  # [n_sel, B, W, Ht]
    adapter = None
    if self.adapt is not None:
      c = self.head.config
      features = (target_hidden.shape[0], target_hidden.shape[-1])  # (n_sel, Ht)
      adapter = adaptation.init_state(self.adapt, b, features, c.hidden_size,
                                      c.draft_vocab_size, params.get("adapter"),
                                      target_hidden.dtype)
    return EagleState(cache, jnp.zeros((b, w), jnp.int32), pend_hidden,
                      jnp.ones((b,), jnp.int32), adapter)

  def _adapt(self, params, a: adaptation.AdapterState) -> adaptation.AdapterState:
    """Every ``adapt.every`` committing rounds of a row, right after its commit: the
    row's adapter update on its window (``adaptation.update``), the frozen head run
    over each window."""
    cfg = self.adapt
    c = self.head.config

    def run(a):
      win = a.window
      b, w = win.tokens.shape
      feats = self.head.project(params["head"], jnp.moveaxis(win.feats, 2, 0))  # [B, W, H]
      cache = self.head.init_cache(b, w)
      pos = jnp.broadcast_to(jnp.arange(w, dtype=jnp.int32), (b, w))
      out = self.head.apply(params["head"], self._embed(params, win.tokens), feats, pos, cache,
                            attn_mask=adaptation.window_attention(win.valid))
      hidden = jax.lax.stop_gradient(out.hidden)
      base = self.head.draft_logits(params["head"], hidden, self._lm(params))  # [B, W, Vd]
      to_draft = adaptation.target_to_draft(c.draft_vocab_size, c.vocab_size, params.get("d2t"))
      return adaptation.update(cfg, a, base, hidden, to_draft)

    return jax.lax.cond(jnp.any(adaptation.due_rows(cfg, a)), run, lambda a: a, a)

  def propose(self, params, state: EagleState, prev, last, keys, gate=None):
    if self.tree_kind == "dynamic":
      return self._dynamic_tree(params, state, last)
    if self.tree_kind == "static":
      return self._static_tree(params, state, last, keys)
    return self._chain(params, state, last, keys, gate)

  def _chain(self, params, state: EagleState, last, keys, gate):
    """K drafts, each feeding the head's output feature back (module docstring)."""
    h, z, cache = self._consume_pending(params, state, last)

    def step(carry, tok):
      cache, h = carry
      out = self.head.apply(params["head"], self._embed(params, tok[:, None]), h[:, None],
                            cache.lengths[:, None], cache)
      h = out.hidden[:, 0]
      return ((kvc.commit(out.cache, jnp.ones_like(tok)), h),
              self._logits(params, h, state.adapter))

    proposal, (cache, _) = sample_chain(self.sampling, keys, z, step, (cache, h),
                                        self.num_draft, gate=gate)
    return proposal, dataclasses.replace(state, cache=cache)

  def commit(self, state: EagleState, target_lengths, committed=None, num_committed=None,
             target_hidden=None, target_logits=None, params=None) -> EagleState:
    if committed is None or num_committed is None or target_hidden is None:
      raise ValueError("EagleDrafter.commit needs the committed tokens, their count and the "
                       "target's hidden states at those positions")
    w = self.pending_width
    num = num_committed.astype(jnp.int32)
    cache = dataclasses.replace(state.cache, lengths=(target_lengths - num).astype(jnp.int32))
    toks = _fit(committed[:, 1:].astype(jnp.int32), w, 1)
    hid = _fit(target_hidden.astype(state.pend_hidden.dtype), w, 2)
    adapter = state.adapter
    if self.adapt is not None:
      if target_logits is None or params is None:
        raise ValueError("an adapting EagleDrafter's commit needs the target's logits at the "
                         "committed positions and its params (reads_target_logits)")
      feats = jnp.moveaxis(target_hidden, 0, 2).astype(adapter.carry_feat.dtype)
      adapter = adaptation.add_entries(self.adapt, adapter, feats, committed.astype(jnp.int32),
                                       num, target_logits)
      adapter = self._adapt(params, adapter)
    return EagleState(cache, toks, hid, num, adapter)

  # ---- trees -------------------------------------------------------------------------------
  def _tree_forward(self, params, cache: kvc.KVCache, base, offset: int, region: int, tokens,
                    feats, depth: int, anc):
    """Forward T tree nodes written at slots ``base + offset + t``.

    anc: [B, T, region] bool -- which tree-region slots (``base + r``) each node sees
    (its ancestors and itself).  Returns (hidden [B, T, H], cache with lengths = base).
    """
    b, t = tokens.shape
    s = cache.max_length
    rel = jnp.arange(s)[None, :] - base[:, None]  # [B, S]
    in_region = (rel >= 0) & (rel < region)
    see = jnp.take_along_axis(anc, jnp.broadcast_to(jnp.clip(rel, 0, region - 1)[:, None, :],
                                                   (b, t, s)), axis=2)
    mask = (rel < 0)[:, None, :] | (in_region[:, None, :] & see)
    pos = jnp.broadcast_to((base + depth - 1)[:, None], (b, t))
    cur = dataclasses.replace(cache, lengths=(base + offset).astype(jnp.int32))
    out = self.head.apply(params["head"], self._embed(params, tokens), feats, pos, cur,
                          mask=mask)
    return out.hidden, dataclasses.replace(out.cache, lengths=base)

  def _one_hot(self, tokens):
    return jax.nn.one_hot(tokens, self.vocab_size, dtype=jnp.float32)

  def _dynamic_tree(self, params, state: EagleState, last):
    """EAGLE-2 dynamic tree (expand top_k per frontier node, keep global top_k)."""
    k, depth, n = self.top_k, self.depth, self.total_tokens
    h_root, z, cache = self._consume_pending(params, state, last)
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
      logits = self._logits(params, hid, state.adapter)  # [B, k, V]
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
            dataclasses.replace(state, cache=cache))

  def _static_tree(self, params, state: EagleState, last, keys):
    """A fixed tree of rank paths: node = the rank-r token of its parent's distribution
    (``children="sampled"``: its r-th draw without replacement)."""
    parents_np, depths_np, ranks_np = static_tree(self.tree_paths)
    n = len(parents_np)
    r = int(ranks_np.max()) + 1
    # [N, N]: node j sees node i (its ancestors and itself; the root is in the cache)
    anc_nodes = static_ancestor_mask(parents_np)[1:, 1:]
    h_root, z, cache = self._consume_pending(params, state, last)
    base = cache.lengths
    b = last.shape[0]
    top = jnp.zeros((b, n + 1, r), jnp.int32).at[:, 0].set(jax.lax.top_k(z, r)[1])
    q_node = jnp.zeros((b, n + 1, z.shape[-1]), jnp.float32)
    q_node = q_node.at[:, 0].set(node_distribution(z, self.sampling))
    feats = jnp.zeros((b, n + 1, h_root.shape[-1]), h_root.dtype).at[:, 0].set(h_root)
    tok = jnp.zeros((b, n), jnp.int32)
    sampled = self.children == "sampled"
    q = jnp.zeros((b, n, z.shape[-1]), jnp.float32) if sampled else None
    max_depth = int(depths_np.max())
    for d in range(1, max_depth + 1):
      ids = np.nonzero(depths_np == d)[0]  # contiguous: nodes are sorted by depth
      par = parents_np[ids]
      if sampled:  # draws without replacement from the parents' q_node rows
        uniq = np.unique(par)
        node_tok, node_q = sample_level(keys, q_node[:, uniq], uniq, par, ranks_np[ids])
        q = q.at[:, ids].set(node_q)
      else:
        node_tok = top[:, par, ranks_np[ids]]  # [B, T]
      tok = tok.at[:, ids].set(node_tok)
      if d == max_depth:
        break
      anc = jnp.broadcast_to(jnp.asarray(anc_nodes[ids]), (b, len(ids), n))
      hid, cache = self._tree_forward(params, cache, base, int(ids[0]), n, node_tok,
                                      feats[:, par], d, anc)
      feats = feats.at[:, ids + 1].set(hid)
      logits = self._logits(params, hid, state.adapter)  # [B, T, V]
      top = top.at[:, ids + 1].set(jax.lax.top_k(logits, r)[1])
      q_node = q_node.at[:, ids + 1].set(node_distribution(logits, self.sampling))
    tree = TreeDraft(tok, jnp.broadcast_to(jnp.asarray(parents_np), (b, n)),
                     jnp.broadcast_to(jnp.asarray(depths_np), (b, n)))
    return (Proposal.from_tree(tree, q if sampled else self._one_hot(tok), q_node),
            dataclasses.replace(state, cache=cache))
