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
from specjax.decoding.drafters import Drafter
from specjax.decoding.prompts import (eos_tuple, is_eos, prepare_prompts,
                                      resolve_cache_length)
from specjax.decoding.sampling import SamplingConfig, probs_from_logits, sample_logits
from specjax.models import kv_cache as kvc
from specjax.models.transformer import Model
from specjax.verifiers.base import NodeRule, verify_chain


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SpecStats:
  """Per-row statistics (all ``[B]`` or ``[B, K]``; sum over rows for totals).

  Attributes:
    target_calls: [B] verify forwards while the row was active (prefill excluded).
    accepted: [B] accepted draft tokens.
    relaxed: [B] acceptances that only a lossy relaxation allowed.
    accept_counts: [B, K] times draft position i was accepted.
    offered_counts: [B, K] times draft position i was offered for verification.
  """

  target_calls: jax.Array
  accepted: jax.Array
  relaxed: jax.Array
  accept_counts: jax.Array
  offered_counts: jax.Array

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


@functools.partial(jax.jit, static_argnames=("target", "drafter", "verifier", "sampling",
                                             "max_new_tokens", "eos", "cache_length"))
def _speculative(target: Model, drafter: Drafter, verifier: NodeRule, target_params,
                 draft_params, tokens, lengths, key, row_ids, *, sampling: SamplingConfig,
                 max_new_tokens: int, eos: tuple, cache_length: int) -> SpecResult:
  return speculative_core(target, drafter, verifier, target_params, draft_params, tokens,
                          lengths, key, row_ids, sampling=sampling,
                          max_new_tokens=max_new_tokens, eos=eos, cache_length=cache_length)


def speculative_core(target: Model, drafter: Drafter, verifier: NodeRule, target_params,
                     draft_params, tokens, lengths, key, row_ids, *, sampling: SamplingConfig,
                     max_new_tokens: int, eos: tuple, cache_length: int) -> SpecResult:
  """Traceable body of :func:`speculative_generate` (no validation; see there)."""
  b = tokens.shape[0]
  k = drafter.num_draft
  width = max_new_tokens + k + 1
  # --- prefill: the target emits the first token; the drafter caches prompt[:-1].
  t_cache, logits = prefill(target, target_params, tokens, lengths, cache_length)
  first, _ = jax.vmap(lambda kk, l: sample_logits(kk, l, sampling))(
      row_key(key, row_ids, 0), logits)
  d_state = drafter.prefill(draft_params, tokens, lengths, cache_length)
  prev = jnp.take_along_axis(tokens, (lengths - 1)[:, None], 1)[:, 0]
  out = jnp.zeros((b, width), jnp.int32)
  reason = jnp.full((b,), RUNNING, jnp.int32)
  out, n, reason = _append(out, jnp.zeros((b,), jnp.int32), reason, first[:, None],
                           jnp.ones((b,), jnp.int32), eos, max_new_tokens)
  zeros = jnp.zeros((b,), jnp.int32)
  stats = SpecStats(zeros, zeros, zeros, jnp.zeros((b, k), jnp.int32),
                    jnp.zeros((b, k), jnp.int32))

  def cond(s):
    return jnp.any(s["reason"] == RUNNING)

  def body(s):
    t_cache, d_state, reason = s["t_cache"], s["d_state"], s["reason"]
    full = (reason == RUNNING) & (t_cache.lengths + k + 1 > cache_length)
    reason = jnp.where(full, CACHE_FULL, reason)
    active = reason == RUNNING
    keys = row_key(key, row_ids, s["step"])  # [B]
    split = jax.vmap(lambda kk: jax.random.split(kk, 3))(keys)  # [B, 3]
    # --- draft
    x, q, d_state = drafter.draft(draft_params, d_state, s["prev"], s["last"], split[:, 0])
    # --- one target forward over [last, x_1..x_K]
    t_in = jnp.concatenate([s["last"][:, None], x], axis=1)  # [B, K+1]
    pos = t_cache.lengths[:, None] + jnp.arange(k + 1)[None, :]
    o = target.apply(target_params, t_in, pos, t_cache)
    z = o.logits  # [B, K+1, V]
    p = probs_from_logits(z, sampling)
    u = jax.vmap(lambda kk: jax.random.uniform(kk, (k,)))(split[:, 1])
    res = jax.vmap(lambda zz, pp, qq, xx, uu, kk: verify_chain(verifier, zz, pp, qq, xx, uu, kk))(
        z, p, q, x, u, split[:, 2])
    nacc = res.num_accepted
    # --- commit
    t_cache = kvc.commit(o.cache, jnp.where(active, nacc + 1, 0))
    d_state = drafter.commit(d_state, t_cache.lengths)
    new = jnp.concatenate([x, jnp.zeros((b, 1), jnp.int32)], 1)
    new = jnp.where(jnp.arange(k + 1)[None, :] == nacc[:, None], res.token[:, None], new)
    out, n, reason2 = _append(s["out"], s["n"], reason, new, nacc + 1, eos, max_new_tokens)
    last_acc = jnp.take_along_axis(x, jnp.maximum(nacc - 1, 0)[:, None], 1)[:, 0]
    prev = jnp.where(active, jnp.where(nacc > 0, last_acc, s["last"]), s["prev"])
    last = jnp.where(active, res.token, s["last"])
    a = active.astype(jnp.int32)
    st = s["stats"]
    offered = (jnp.arange(k)[None, :] <= nacc[:, None]) & active[:, None]
    stats = SpecStats(
        st.target_calls + a, st.accepted + nacc * a,
        st.relaxed + jnp.sum(res.relaxed, 1).astype(jnp.int32) * a,
        st.accept_counts + (res.accepted & active[:, None]).astype(jnp.int32),
        st.offered_counts + offered.astype(jnp.int32))
    return dict(t_cache=t_cache, d_state=d_state, reason=reason2, out=out, n=n, prev=prev,
                last=last, step=s["step"] + 1, stats=stats)

  state = dict(t_cache=t_cache, d_state=d_state, reason=reason, out=out, n=n, prev=prev,
               last=first, step=jnp.int32(1), stats=stats)
  s = jax.lax.while_loop(cond, body, state)
  return SpecResult(s["out"][:, :max_new_tokens], s["n"], s["reason"], s["stats"])


def validate_pair(target: Model, drafter: Drafter, verifier: NodeRule) -> None:
  """Boundary checks shared by the speculative entry points."""
  if not isinstance(verifier, NodeRule):
    raise ValueError(f"verifier must be a NodeRule (e.g. specjax.verifiers.get('lossless')), "
                     f"got {type(verifier).__name__}")
  if not isinstance(drafter, Drafter):
    raise ValueError(f"drafter must be a specjax Drafter, got {type(drafter).__name__}")
  if drafter.vocab_size != target.config.vocab_size:
    raise ValueError(f"vocab mismatch: target vocab_size={target.config.vocab_size}, "
                     f"drafter vocab_size={drafter.vocab_size}; they must share a tokenizer")


def speculative_generate(target: Model, target_params, drafter: Drafter, draft_params,
                         verifier: NodeRule, prompts, *, max_new_tokens: int,
                         sampling: SamplingConfig = SamplingConfig(temperature=0.0), key=None,
                         eos_token_id="config", cache_length: int | None = None,
                         row_offset: int = 0, mesh=None) -> SpecResult:
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
    mesh: optional ``jax.sharding.Mesh`` with a ``data`` axis: rows are
      sharded over it (see ``specjax.decoding.parallel``).
  """
  validate_pair(target, drafter, verifier)
  if not (isinstance(max_new_tokens, (int, np.integer)) and max_new_tokens >= 1):
    raise ValueError(f"max_new_tokens={max_new_tokens!r} must be an integer >= 1")
  if key is None:
    if not (sampling.greedy and drafter.sampling.greedy):
      raise ValueError("a PRNG key is required when the target or drafter samples (T > 0)")
    key = jax.random.key(0)
  k = drafter.num_draft
  eos = eos_tuple(target.config.eos_token_id if eos_token_id == "config" else eos_token_id)
  tokens, lengths = prepare_prompts(prompts, target.config.vocab_size)
  cache_length, bucket = resolve_cache_length(lengths, tokens.shape[1], max_new_tokens + k + 1,
                                              cache_length)
  if k + 2 > cache_length:
    raise ValueError(f"num_draft K={k} is too large for cache_length={cache_length}: a step "
                     f"needs K + 1 free slots after the prompt")
  tokens = tokens[:, :bucket]
  statics = dict(sampling=sampling, max_new_tokens=int(max_new_tokens), eos=eos,
                 cache_length=cache_length)
  if mesh is not None:
    from specjax.decoding import parallel
    return parallel.run_sharded(speculative_core, (target, drafter, verifier), statics,
                                (target_params, draft_params), tokens, lengths, key,
                                row_offset, mesh)
  row_ids = jnp.arange(tokens.shape[0], dtype=jnp.int32) + row_offset
  return _speculative(target, drafter, verifier, target_params, draft_params,
                      jnp.asarray(tokens), jnp.asarray(lengths), key, row_ids, **statics)
