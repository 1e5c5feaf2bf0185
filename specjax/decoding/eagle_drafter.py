"""EAGLE drafters: chains and trees from an EAGLE-1 / EAGLE-3 head (drafters.py
protocol). This module holds what every shape shares (:class:`EagleHeadDrafter`) and
the chain (:class:`EagleDrafter`); the trees are :class:`~specjax.decoding.eagle_trees.EagleTreeDrafter`
(EAGLE-2 dynamic) and :class:`~specjax.decoding.eagle_trees.EagleStaticTreeDrafter`.

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
An adapting drafter (``adapt``: :mod:`specjax.decoding.adaptation`) keeps the head's
outputs over the pending entries -- the features its drafts are computed from, with
the row's whole history in the cache -- and the next ``commit`` adds them, labelled by
the target, to the row's window and updates the row's adapter there.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.checks import ArgumentTypeError, check_int
from specjax.decoding import adaptation
from specjax.decoding.drafters import Drafter, sample_chain
from specjax.decoding.strategies import CHAIN
from specjax.distributions import SamplingConfig
from specjax.decoding.proposal import Proposal
from specjax.models import kv_cache as kvc
from specjax.models.eagle import EagleHead, target_lm_head
from specjax.models.transformer import Model


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
class EagleHeadDrafter(Drafter):
  """What every EAGLE drafter shares, whatever the draft shape: the head, its cache
  and pending buffer, prefill, commit and online adaptation (module docstring).
  The shapes are :class:`EagleDrafter` (chains) and, in
  :mod:`specjax.decoding.eagle_trees`, ``EagleTreeDrafter`` (EAGLE-2 dynamic trees)
  and ``EagleStaticTreeDrafter`` (rank-path trees). Subclasses declare the fields
  ``head``, ``sampling`` and ``adapt`` and define ``tree_kind``, ``num_nodes``,
  ``max_accepted``, ``_extra_slots`` and ``propose``.

  Params: ``make_params(head_params, target, target_params, d2t)``; with ``adapt``,
  ``params["adapter"]`` (optional) is the adapter state to start from (a session's,
  carried over from an earlier call: ``SpecResult.adapter``).
  """

  supplies_node_dist = True
  follows_committed = True  # the pending buffer holds every committed token
  tree_kind = ""  # "chain" | "dynamic" | "static": names the shape in records

  def _check_head(self):
    if not isinstance(self.head, EagleHead):
      raise ArgumentTypeError(f"{type(self).__name__} needs head=EagleHead(...), got "
                              f"{type(self.head).__name__}")
    if not isinstance(self.sampling, SamplingConfig):
      raise ArgumentTypeError(f"sampling must be a SamplingConfig, got "
                              f"{type(self.sampling).__name__}")
    if self.adapt is not None and not isinstance(self.adapt, adaptation.OnlineAdaptation):
      raise ArgumentTypeError(f"adapt must be an OnlineAdaptation or None, got "
                              f"{type(self.adapt).__name__}")

  # ---- protocol attributes ---------------------------------------------------------------
  @property
  def num_nodes(self) -> int:
    """Draft tokens per round: K (chain) or N (tree)."""
    raise NotImplementedError

  @property
  def _extra_slots(self) -> int:
    """Head cache slots needed beyond the target's cache (tree regions)."""
    return self.num_nodes + self.pending_width

  @property
  def vocab_size(self) -> int:
    return self.head.config.vocab_size

  @property
  def target_hidden_layers(self) -> tuple:
    return tuple(self.head.config.target_layers)

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

  def _logits(self, params, hidden, adapter=None, depth=1):
    """Target-vocabulary logits of the head's output ``hidden [B, ..., H]``, the drafts
    at ``depth`` (1 = the first draft; a Python int, or a traced one inside a scan),
    through the row's online adapter when there is one, it adapts that depth
    (``OnlineAdaptation.depths``) and its gate is open (``OnlineAdaptation.gate``)."""
    delta = None
    if adapter is not None and (not isinstance(depth, int) or self.adapt.adapts_depth(depth)):
      delta = adaptation.logit_delta(adapter.params, hidden)
      if not isinstance(depth, int) and self.adapt.depths:
        delta = jnp.where(depth <= self.adapt.depths, delta, 0.0)
      if self.adapt.gate:
        open_ = adaptation.drafts_adapted(adapter)
        delta = jnp.where(open_.reshape((-1,) + (1,) * (delta.ndim - 1)), delta, 0.0)
    return self.head.logits(params["head"], hidden, self._lm(params), params.get("d2t"), delta)

  def _consume_pending(self, params, state: EagleState, last):
    """Run the pending entries (closed by ``last``); returns the root's output
    feature [B, H], its logits [B, V], the cache, now L entries long, and the adapter
    state, which keeps the pending entries' outputs (``adaptation.keep_drafted``:
    the next ``commit`` labels them)."""
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
    adapter = state.adapter
    if adapter is not None:
      adapter = adaptation.keep_drafted(adapter, out.hidden, cnt)
    return h, self._logits(params, h, adapter), cache, adapter

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
      adapter = adaptation.init_state(self.adapt, b, w, c.hidden_size, c.draft_vocab_size,
                                      params.get("adapter"), jnp.dtype(c.dtype))
    return EagleState(cache, jnp.zeros((b, w), jnp.int32), pend_hidden,
                      jnp.ones((b,), jnp.int32), adapter)

  def _adapt(self, params, a: adaptation.AdapterState) -> adaptation.AdapterState:
    """Every ``adapt.every`` committing rounds of a row, right after its commit: the
    row's adapter update on its window (``adaptation.update``), against the frozen
    head's draft logits of the window's kept outputs."""
    cfg = self.adapt
    c = self.head.config

    def run(a):
      hidden = a.window.hidden
      base = self.head.draft_logits(params["head"], hidden, self._lm(params))  # [B, W, Vd]
      to_draft = adaptation.target_to_draft(c.draft_vocab_size, c.vocab_size, params.get("d2t"))
      return adaptation.update(cfg, a, base, hidden, to_draft, self.sampling)

    return jax.lax.cond(jnp.any(adaptation.due_rows(cfg, a)), run, lambda a: a, a)

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
      adapter = adaptation.add_entries(self.adapt, adapter, num, target_logits)
      adapter = self._adapt(params, adapter)
    return EagleState(cache, toks, hid, num, adapter)

  # ---- trees (shared by the tree shapes) --------------------------------------------------
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



@dataclasses.dataclass(frozen=True)
class EagleDrafter(EagleHeadDrafter):
  """An EAGLE head drafting chains: K drafts, each feeding the head's own output
  feature back (module docstring).

  Attributes:
    num_draft: K, the chain length.
    sampling: the processors drafts are sampled under (q is that distribution).
    head: the :class:`~specjax.models.eagle.EagleHead`.
    adapt: None, or an :class:`~specjax.decoding.adaptation.OnlineAdaptation`: each
      row adapts its draft logits to the tokens the target commits, while it serves
      (exact under lossless rules: docs/spec.md §4, "Online adaptation").
  """

  num_draft: Optional[int] = None
  sampling: Optional[SamplingConfig] = None
  head: EagleHead = None
  adapt: Optional[adaptation.OnlineAdaptation] = None

  tree_kind = "chain"
  strategy = CHAIN
  gates_drafting = True

  def __post_init__(self):
    if self.sampling is None:
      raise ArgumentTypeError("an EagleDrafter chain needs sampling=SamplingConfig(...)")
    self._check_head()
    check_int("num_draft (K)", self.num_draft, low=1)

  @property
  def max_accepted(self) -> int:
    return self.num_draft

  @property
  def num_nodes(self) -> int:
    return self.num_draft

  def propose(self, params, state: EagleState, prev, last, keys, gate=None):
    return self._chain(params, state, last, keys, gate)

  def _chain(self, params, state: EagleState, last, keys, gate):
    """K drafts, each feeding the head's output feature back (module docstring)."""
    h, z, cache, adapter = self._consume_pending(params, state, last)
    # the scan's drafts are at depths 2..K: none of them adapted with depths = 1
    deeper = adapter if self.adapt is None or self.adapt.adapts_depth(2) else None

    def step(carry, tok):
      cache, h, depth = carry  # depth: that of the draft these logits are for
      out = self.head.apply(params["head"], self._embed(params, tok[:, None]), h[:, None],
                            cache.lengths[:, None], cache)
      h = out.hidden[:, 0]
      return ((kvc.commit(out.cache, jnp.ones_like(tok)), h, depth + 1),
              self._logits(params, h, deeper, depth))

    proposal, (cache, _, _) = sample_chain(self.sampling, keys, z, step,
                                           (cache, h, jnp.int32(2)), self.num_draft, gate=gate)
    return proposal, dataclasses.replace(state, cache=cache, adapter=adapter)
