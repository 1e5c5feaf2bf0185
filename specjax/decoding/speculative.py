"""speculative_generate(): the whole speculative generation in ONE jitted
``lax.while_loop`` (DESIGN.md "Loop").

Per step, for every row:  draft K tokens (drafter) -> one target forward over
``[last, x_1..x_K]`` -> verify with the node rule's chain driver -> commit
``n + 1`` tokens to the target cache (per-row cursor) -> roll the drafter back.
Rows advance by different amounts; finished rows idle (static shapes).
Per-row randomness comes from ``fold_in(fold_in(key, global_row), step)``, so
results do not depend on how rows are split over devices.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.autoregressive import (CACHE_FULL, EOS, MAX_TOKENS, RUNNING, prefill,
                                             row_key)
from specjax.checks import ArgumentTypeError, check_int, check_key
from specjax.decoding.arguments import (check_model_params, check_position_range,
                                        check_tokenizers)
from specjax.decoding.drafters import Drafter
from specjax.decoding.prompts import (eos_tuple, is_eos, prepare_prompts,
                                      resolve_cache_length)
from specjax.distributions import SamplingConfig, probs_from_logits, sample_logits
from specjax.models import kv_cache as kvc
from specjax.models.transformer import Model
from specjax.decoding.tree import ancestor_mask, with_root
from specjax.verifiers.base import NodeRule, verify_chain, verify_tree


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SpecStats:
  """Per-row statistics (all ``[B]`` or ``[B, K]``; sum over rows for totals).

  Attributes:
    target_calls: [B] verify forwards while the row was active (prefill excluded).
    accepted: [B] accepted draft tokens.
    relaxed: [B] acceptances that only a lossy relaxation allowed.
    accept_counts: [B, K] times draft position i was accepted.
    offered_counts: [B, K] times draft position i was reached and offered (i <= accepted
      and i < gamma).
    verified_tokens: [B] draft tokens offered to the target (sum of gamma; K per
      step without a verify-length policy).
    processed_tokens: [B] tokens the target forward processed for the row
      (bucket + 1 per chain step, N + 1 per tree step).
  """

  target_calls: jax.Array
  accepted: jax.Array
  relaxed: jax.Array
  accept_counts: jax.Array
  offered_counts: jax.Array
  verified_tokens: jax.Array
  processed_tokens: jax.Array

  @property
  def tau(self) -> np.ndarray:
    """Tokens per target verify call, per row: (accepted + calls) / calls."""
    calls = np.maximum(np.asarray(self.target_calls), 1)
    return (np.asarray(self.accepted) + np.asarray(self.target_calls)) / calls

  def summary(self) -> dict:
    calls = int(np.sum(self.target_calls))
    acc = int(np.sum(self.accepted))
    return {"target_calls": calls, "accepted": acc, "relaxed": int(np.sum(self.relaxed)),
            "tau": (acc + calls) / max(calls, 1),
            "relaxed_rate": int(np.sum(self.relaxed)) / max(acc, 1),
            "verified_per_call": int(np.sum(self.verified_tokens)) / max(calls, 1),
            "processed_per_emitted": int(np.sum(self.processed_tokens)) / max(acc + calls, 1),
            "accept_rate_per_position": (np.sum(self.accept_counts, 0) /
                                         np.maximum(np.sum(self.offered_counts, 0), 1)).tolist()}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SpecResult:
  """Attributes:
    tokens: [B, max_new_tokens] generated tokens (0 beyond ``lengths``).
    lengths: [B] generated tokens per row (EOS included).
    finish_reason: [B] 1 max_new_tokens, 2 eos, 3 cache_full.
    stats: SpecStats.
  """

  tokens: jax.Array
  lengths: jax.Array
  finish_reason: jax.Array
  stats: SpecStats

  def to_lists(self) -> list[list[int]]:
    toks, lens = np.asarray(self.tokens), np.asarray(self.lengths)
    return [toks[i, :lens[i]].tolist() for i in range(toks.shape[0])]


def _append(out, n, reason, new, num_new, eos, max_new_tokens):
  """Append ``new[b, :num_new[b]]`` to the output rows; apply EOS / max length.

  out: [B, W] buffer (W >= max_new + K + 1); n: [B] tokens so far.
  Returns (out, n, reason).
  """
  b, w = new.shape
  active = reason == RUNNING
  idx = jnp.arange(w)[None, :]
  valid = (idx < num_new[:, None]) & active[:, None]
  hit = valid & is_eos(new, eos)
  first_eos = jnp.where(jnp.any(hit, 1), jnp.argmax(hit, 1), w)
  keep = jnp.minimum(jnp.where(active, num_new, 0), first_eos + 1)
  keep = jnp.minimum(keep, max_new_tokens - n)
  out = jax.vmap(lambda o, t, s: jax.lax.dynamic_update_slice(o, t, (s,)))(out, new, n)
  n2 = n + keep
  reason = jnp.where(active & (first_eos < keep), EOS,
                     jnp.where(active & (n2 >= max_new_tokens), MAX_TOKENS, reason))
  return out, n2, reason


@functools.partial(jax.jit, static_argnames=("target", "policy", "max_new_tokens", "eos",
                                             "cache_length"))
def _speculative(target: Model, drafter: Drafter, verifier: NodeRule, policy, target_params,
                 draft_params, policy_params, tokens, lengths, key, row_ids, sampling, *,
                 max_new_tokens: int, eos: tuple, cache_length: int) -> SpecResult:
  """Jitted :func:`speculative_core`.  ``drafter``, ``verifier`` and ``sampling``
  are traced pytree arguments (:mod:`specjax.hyperparams`): their continuous
  hyperparameters (theta, lam, temperature, ...) change without recompiling;
  their static parts (rule kind, gate, K, greedy, ...) select the program."""
  return speculative_core(target, drafter, verifier, policy, target_params, draft_params,
                          policy_params, tokens, lengths, key, row_ids, sampling=sampling,
                          max_new_tokens=max_new_tokens, eos=eos, cache_length=cache_length)


def _sharded_core(target: Model, policy, drafter: Drafter, verifier: NodeRule,
                  sampling: SamplingConfig, target_params, draft_params, policy_params, tokens,
                  lengths, key, row_ids, **statics) -> SpecResult:
  """:func:`speculative_core` with the static arguments first, for
  ``parallel.run_sharded`` (drafter, verifier and sampling travel traced)."""
  return speculative_core(target, drafter, verifier, policy, target_params, draft_params,
                          policy_params, tokens, lengths, key, row_ids, sampling=sampling,
                          **statics)


def _pad_axis(x, size: int, axis: int):
  pad = [(0, 0)] * x.ndim
  pad[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, pad)


def _verify_forward_chain(target, target_params, t_cache, last, x, gamma, policy):
  """Target forward over ``[last, x_1..x_b]``; ``b`` = the smallest policy bucket
  covering every row's ``gamma`` (``lax.switch``: the target really processes
  fewer tokens).  Outputs are padded to K + 1 positions.

  Returns ``(logits [B, K+1, V], hidden or None, cache, tokens processed per row)``."""
  k = x.shape[1]
  t_in = jnp.concatenate([last[:, None], x], axis=1)  # [B, K+1]
  pos = t_cache.lengths[:, None] + jnp.arange(k + 1)[None, :]

  def forward(b):
    def run(_):
      o = target.apply(target_params, t_in[:, :b + 1], pos[:, :b + 1], t_cache)
      hidden = None if o.hidden_states is None else _pad_axis(o.hidden_states, k + 1, 2)
      return _pad_axis(o.logits, k + 1, 1), hidden, o.cache, jnp.int32(b + 1)
    return run

  if policy is None:
    return forward(k)(None)
  buckets = tuple(sorted(set(int(b) for b in policy.buckets)))
  need = jnp.max(gamma)
  idx = jnp.sum(jnp.asarray(buckets)[None, :] < need).astype(jnp.int32)
  idx = jnp.minimum(idx, len(buckets) - 1)
  return jax.lax.switch(idx, [forward(b) for b in buckets], None)


def speculative_core(target: Model, drafter: Drafter, verifier: NodeRule, policy, target_params,
                     draft_params, policy_params, tokens, lengths, key, row_ids, *,
                     sampling: SamplingConfig, max_new_tokens: int, eos: tuple,
                     cache_length: int) -> SpecResult:
  """Traceable body of :func:`speculative_generate` (no validation; see there)."""
  b = tokens.shape[0]
  k = drafter.num_draft  # chain length, or tree depth
  per_step = drafter.tokens_per_step
  width = max_new_tokens + k + 1
  # --- prefill: the target emits the first token; the drafter caches prompt[:-1].
  t_cache, logits, t_hidden = prefill(target, target_params, tokens, lengths, cache_length)
  first, _ = jax.vmap(lambda kk, l: sample_logits(kk, l, sampling))(
      row_key(key, row_ids, 0), logits)
  d_state = drafter.prefill(draft_params, tokens, lengths, cache_length, t_hidden)
  # The loop's forwards read params prepared once (Model.decode_params).
  target_params = target.decode_params(target_params)
  draft_params = drafter.decode_params(draft_params)
  p_state = None if policy is None else policy.init(policy_params, tokens, lengths, cache_length)
  prev = jnp.take_along_axis(tokens, (lengths - 1)[:, None], 1)[:, 0]
  out = jnp.zeros((b, width), jnp.int32)
  reason = jnp.full((b,), RUNNING, jnp.int32)
  out, n, reason = _append(out, jnp.zeros((b,), jnp.int32), reason, first[:, None],
                           jnp.ones((b,), jnp.int32), eos, max_new_tokens)
  zeros = jnp.zeros((b,), jnp.int32)
  stats = SpecStats(zeros, zeros, zeros, jnp.zeros((b, k), jnp.int32),
                    jnp.zeros((b, k), jnp.int32), zeros, zeros)

  def cond(s):
    return jnp.any(s["reason"] == RUNNING)

  def body(s):
    t_cache, d_state, p_state, reason = s["t_cache"], s["d_state"], s["p_state"], s["reason"]
    active = reason == RUNNING
    keys = row_key(key, row_ids, s["step"])  # [B]
    split = jax.vmap(lambda kk: jax.random.split(kk, 3))(keys)  # [B, 3]
    last = s["last"]
    if drafter.tree:
      tree, q, q_node, d_state = drafter.draft_tree(draft_params, d_state, s["prev"], last,
                                                    split[:, 0])
      n_nodes = tree.tokens.shape[1]
      x_full = jnp.concatenate([last[:, None], tree.tokens], 1)  # [B, N+1]
      parents = with_root(tree.parents)  # [B, N+1]
      depths = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), tree.depths], 1)
      mask = jax.vmap(ancestor_mask)(parents)  # [B, N+1, N+1]
      o = target.apply(target_params, x_full, t_cache.lengths[:, None] + depths, t_cache,
                       attn_mask=mask)
      z = o.logits  # [B, N+1, V]
      p = probs_from_logits(z, sampling)
      q_full = jnp.concatenate([jnp.zeros_like(q[:, :1]), q], 1)
      u = jax.vmap(lambda kk: jax.random.uniform(kk, (n_nodes + 1,)))(split[:, 1])
      if q_node is None:  # validate_pair: the verifier does not need it
        res = jax.vmap(lambda *a: verify_tree(verifier, *a))(z, p, q_full, x_full, parents, u,
                                                              split[:, 2])
      else:
        res = jax.vmap(lambda *a, qn: verify_tree(verifier, *a, q_node=qn))(
            z, p, q_full, x_full, parents, u, split[:, 2], qn=q_node)
      nacc = jnp.minimum(res.num_accepted, k)
      path = res.path[:, :k]  # [B, k] tree indices of accepted nodes
      gathered = kvc.gather_path(o.cache, path, jnp.where(active, nacc, 0))
      t_cache = dataclasses.replace(
          gathered, lengths=jnp.where(active, gathered.lengths, t_cache.lengths))
      node_ids = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), path], 1)  # [B, k+1]
      path_tokens = jnp.take_along_axis(x_full, path, 1)  # [B, k]
      num_relaxed = res.num_relaxed
      accepted_pos = jnp.arange(k)[None, :] < nacc[:, None]
      gamma = jnp.full((b,), n_nodes, jnp.int32)
      processed = jnp.int32(n_nodes + 1)
    else:
      x, q, q_node, d_state = drafter.draft(draft_params, d_state, s["prev"], last, split[:, 0])
      q_node = q if q_node is None else q_node  # validate_pair: q is the node dist. then
      if policy is None:
        gamma = jnp.full((b,), k, jnp.int32)
      else:
        gamma, p_state, _ = policy.choose(policy_params, p_state, s["prev"], last, x, q, active)
      z, hidden, o_cache, processed = _verify_forward_chain(target, target_params, t_cache,
                                                            last, x, gamma, policy)
      p = probs_from_logits(z, sampling)
      u = jax.vmap(lambda kk: jax.random.uniform(kk, (k,)))(split[:, 1])
      res = jax.vmap(lambda zz, pp, qq, xx, uu, kk, g, qn: verify_chain(
          verifier, zz, pp, qq, xx, uu, kk, num_valid=g, q_node=qn))(
              z, p, q, x, u, split[:, 2], gamma, q_node)
      nacc = res.num_accepted
      t_cache = kvc.commit(o_cache, jnp.where(active, nacc + 1, 0))
      node_ids = jnp.broadcast_to(jnp.arange(k + 1)[None, :], (b, k + 1))
      path_tokens = x
      num_relaxed = jnp.sum(res.relaxed, 1).astype(jnp.int32)
      accepted_pos = res.accepted
      o = None
    # --- commit: drafter / policy learn what the target kept.
    committed = jnp.concatenate([last[:, None], path_tokens], 1)  # [B, k+1]
    if drafter.target_hidden_layers:
      hid = o.hidden_states if o is not None else hidden  # [n_sel, B, *, H]
      hid = jnp.take_along_axis(hid, node_ids[None, :, :, None], axis=2)  # [n_sel, B, k+1, H]
    else:
      hid = None
    d_state = drafter.commit(d_state, t_cache.lengths, committed, jnp.where(active, nacc + 1, 0),
                             hid)
    if policy is not None:
      p_state = policy.commit(p_state, t_cache.lengths)
    new = jnp.concatenate([path_tokens, jnp.zeros((b, 1), jnp.int32)], 1)
    new = jnp.where(jnp.arange(k + 1)[None, :] == nacc[:, None], res.token[:, None], new)
    out, n, reason2 = _append(s["out"], s["n"], reason, new, nacc + 1, eos, max_new_tokens)
    # A row that cannot fit another step stops now (entry validation guarantees
    # the first step fits), so no iteration is spent on rows that are all full.
    full = (reason2 == RUNNING) & (t_cache.lengths + per_step > cache_length)
    reason2 = jnp.where(full, CACHE_FULL, reason2)
    last_acc = jnp.take_along_axis(path_tokens, jnp.maximum(nacc - 1, 0)[:, None], 1)[:, 0]
    prev = jnp.where(active, jnp.where(nacc > 0, last_acc, last), s["prev"])
    new_last = jnp.where(active, res.token, last)
    a = active.astype(jnp.int32)
    st = s["stats"]
    offered = (jnp.arange(k)[None, :] <= nacc[:, None]) & (jnp.arange(k)[None, :] < gamma[:, None])
    stats = SpecStats(
        st.target_calls + a, st.accepted + nacc * a, st.relaxed + num_relaxed * a,
        st.accept_counts + (accepted_pos & active[:, None]).astype(jnp.int32),
        st.offered_counts + (offered & active[:, None]).astype(jnp.int32),
        st.verified_tokens + jnp.where(active, gamma, 0),
        st.processed_tokens + processed * a)
    return dict(t_cache=t_cache, d_state=d_state, p_state=p_state, reason=reason2, out=out,
                n=n, prev=prev, last=new_last, step=s["step"] + 1, stats=stats)

  state = dict(t_cache=t_cache, d_state=d_state, p_state=p_state, reason=reason, out=out, n=n,
               prev=prev, last=first, step=jnp.int32(1), stats=stats)
  s = jax.lax.while_loop(cond, body, state)
  return SpecResult(s["out"][:, :max_new_tokens], s["n"], s["reason"], s["stats"])


def validate_pair(target: Model, drafter: Drafter, verifier: NodeRule,
                  allow_tokenizer_mismatch: bool = False) -> None:
  """Boundary checks shared by the speculative entry points."""
  if not isinstance(verifier, NodeRule):
    raise ArgumentTypeError(f"verifier must be a NodeRule (e.g. specjax.verifiers.get('lossless')), "
                    f"got {type(verifier).__name__}")
  if not isinstance(drafter, Drafter):
    raise ArgumentTypeError(f"drafter must be a specjax Drafter, got {type(drafter).__name__}")
  if not isinstance(target, Model):
    raise ArgumentTypeError(f"target must be a specjax Model, got {type(target).__name__}")
  if drafter.vocab_size != target.config.vocab_size:
    raise ValueError(f"vocab mismatch: target vocab_size={target.config.vocab_size}, "
                     f"drafter vocab_size={drafter.vocab_size}; they must share a tokenizer")
  draft_model = getattr(drafter, "model", None)
  if isinstance(draft_model, Model):
    check_tokenizers(target, draft_model.config, allow_tokenizer_mismatch)
  # A sampled chain's q is its node distribution; trees and greedy drafts need q_node.
  if (verifier.needs_node_dist and not drafter.supplies_node_dist
      and (drafter.tree or drafter.sampling.greedy)):
    raise ValueError(f"verifier {type(verifier).__name__} ({verifier.name!r}) needs the "
                     f"drafter's full distribution at each node (SPEC §3), but drafter "
                     f"{type(drafter).__name__} does not supply it (supplies_node_dist=False) "
                     f"and its drafts are deterministic (one-hot q)")


def speculative_generate(target: Model, target_params, drafter: Drafter, draft_params,
                         verifier: NodeRule, prompts, *, max_new_tokens: int,
                         sampling: SamplingConfig = SamplingConfig(temperature=0.0), key=None,
                         eos_token_id="config", cache_length: int | None = None,
                         row_offset: int = 0, mesh=None, policy=None,
                         policy_params=None, prompt_bucket: int | None = None,
                         on_long_prompt: str = "warn",
                         allow_tokenizer_mismatch: bool = False) -> SpecResult:
  """Speculative generation for a batch of ragged prompts.

  Args:
    target, target_params: the target model.
    drafter, draft_params: e.g. ``LMDrafter(num_draft=K, sampling=..., model=draft_model)``.
    verifier: a node rule (``specjax.verifiers.get(name, **hparams)``).
    prompts: list of token-id lists or ``(tokens [B, P], lengths [B])``.
    max_new_tokens: tokens to generate per row.
    sampling: the target's temperature / processors (T = 0: greedy).
    key: PRNG key (required for T > 0 or sampled drafts).
    eos_token_id: int, list, None or "config".
    cache_length: KV slots; default prompt bucket + max_new_tokens + K + 1.
      A row that cannot fit one more step stops with finish_reason CACHE_FULL.
    row_offset: global index of the first row (per-row RNG).
    prompt_bucket: pad prompts to at least this length's power-of-two bucket, so
      batches of different prompt lengths share one compiled program.
    mesh: optional ``jax.sharding.Mesh`` with a ``data`` axis: rows are
      sharded over it (see ``specjax.decoding.parallel``).
    policy, policy_params: optional verify-length policy (chains only), e.g.
      Speculative Verification (``specjax.policies.sv``); it picks per row how
      many of the K drafts the target verifies, and the target forward runs
      over the smallest of ``policy.buckets`` that covers them.  A policy that
      couples rows (SV batch mode) checks here that the batch splits over the
      mesh without changing results (``policy.check_rows``).
    on_long_prompt: "warn" (default), "error" or "ignore" when prompt + generation
      reach past the target's ``max_position_embeddings``.
    allow_tokenizer_mismatch: run a target / draft pair whose tokenizer
      fingerprints differ (refused by default).

  Raises ``TypeError`` / ``ValueError`` (before tracing) naming a bad argument:
  params that do not fit their model (e.g. target and draft params swapped), a
  flat list or text for ``prompts``, a non-key ``key``, a tokenizer mismatch.
  """
  validate_pair(target, drafter, verifier, allow_tokenizer_mismatch)
  check_model_params("target", target, target_params)
  if isinstance(getattr(drafter, "model", None), Model):
    check_model_params("draft", drafter.model, draft_params)
  check_int("max_new_tokens", max_new_tokens, low=1)
  check_int("row_offset", row_offset, low=0)
  if not isinstance(sampling, SamplingConfig):
    raise ArgumentTypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
  if key is None:
    if not (sampling.greedy and drafter.sampling.greedy):
      raise ValueError("a PRNG key is required when the target or drafter samples (T > 0)")
    key = jax.random.key(0)
  check_key("key", key)
  if policy is not None and drafter.tree:
    raise ValueError("a verify-length policy applies to chain drafters only (drafter.tree=True)")
  if drafter.target_hidden_layers != target.config.hidden_layers:
    # The drafter decides which target features the loop carries.
    target = Model(target.config.replace(hidden_layers=tuple(drafter.target_hidden_layers)))
  k = drafter.num_draft
  eos = eos_tuple(target.config.eos_token_id if eos_token_id == "config" else eos_token_id)
  tokens, lengths = prepare_prompts(prompts, target.config.vocab_size,
                                    min_bucket=prompt_bucket)
  per_step = drafter.tokens_per_step
  check_position_range("target", target, int(lengths.max()), max_new_tokens, on_long_prompt)
  cache_length, bucket = resolve_cache_length(lengths, tokens.shape[1],
                                              max_new_tokens + per_step, cache_length)
  if int(lengths.max()) + per_step > cache_length:
    raise ValueError(f"num_draft K={k} is too large for cache_length={cache_length}: a step "
                     f"needs {per_step} free slots after the longest prompt "
                     f"({int(lengths.max())} tokens)")
  tokens = tokens[:, :bucket]
  if policy is not None:
    n_dev = 1 if mesh is None else int(mesh.shape.get("data", 1))
    policy.check_rows(tokens.shape[0], -(-tokens.shape[0] // n_dev), n_dev)
  statics = dict(max_new_tokens=int(max_new_tokens), eos=eos, cache_length=cache_length)
  if mesh is not None:
    from specjax.decoding import parallel
    return parallel.run_sharded(_sharded_core, (target, policy), statics,
                                (drafter, verifier, sampling, target_params, draft_params,
                                 policy_params), tokens, lengths, key, row_offset, mesh)
  row_ids = jnp.arange(tokens.shape[0], dtype=jnp.int32) + row_offset
  return _speculative(target, drafter, verifier, policy, target_params, draft_params,
                      policy_params, jnp.asarray(tokens), jnp.asarray(lengths), key, row_ids,
                      sampling, **statics)
