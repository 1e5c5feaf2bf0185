"""speculative_generate(): the whole speculative generation in ONE jitted
``lax.while_loop`` (docs/design.md "Loop") around ONE step function.

:func:`speculative_step` ``(loop, inputs, state) -> (state, record)`` is the
step, for every row: the drafter proposes drafts (``drafter.propose`` ->
:class:`~specjax.decoding.proposal.Proposal`) -> an optional verify-length
policy picks gamma (a drafter's ``num_valid`` caps it) -> the loop's strategy
(chain or tree, :mod:`specjax.decoding.strategies`) runs one target forward and
the rule (a :class:`~specjax.decoding.strategies.Round` in, a
:class:`~specjax.decoding.strategies.Verdict` out) -> the drafter and policy
commit what the target kept -> the tokens are appended, EOS / length / cache
limits applied and the counters updated (``SpecStats.add_round``).  Rows advance by
different amounts; finished rows idle (static shapes).  Per-row randomness
comes from ``fold_in(fold_in(key, global_row), step)``, so results do not
depend on how rows are split over devices.

The same step serves three callers: the ``lax.while_loop`` of
:func:`speculative_core` (no host round trip), SV calibration
(``policies/sv_collect.py``) and any streaming host loop::

    loop = make_loop(target, drafter, policy, max_new_tokens, eos, cache_length)
    inputs, state = jit_init(loop, drafter, verifier, sampling, target_params,
                             draft_params, policy_params, tokens, lengths, key, row_ids)
    while np.any(np.asarray(state.finish_reason) == RUNNING):
      state, record = jit_step(loop, inputs, state)   # state buffers donated

``loop`` (:class:`SpecLoop`) holds only static configuration (the target, the
policy, lengths, EOS ids, the verify strategy and its buckets); the state
(:class:`~specjax.decoding.loop_state.SpecState`) and the loop-invariant
traced inputs (:class:`~specjax.decoding.loop_state.SpecInputs`) are typed
pytrees.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.autoregressive import (CACHE_FULL, EOS, MAX_TOKENS, RUNNING, prefill,
                                             row_key)
from specjax.checks import ArgumentTypeError, check_int, check_key
from specjax.decoding.arguments import (check_model_params, check_position_range,
                                        check_tokenizers)
from specjax.decoding.drafters import Drafter
from specjax.decoding.loop_state import SpecInputs, SpecLoop, SpecState, SpecStats, StepRecord
from specjax.decoding.strategies import Round, check_rule_for_strategy
from specjax.decoding.prompts import (eos_tuple, is_eos, prepare_prompts,
                                      resolve_cache_length)
from specjax.distributions import SamplingConfig, sample_logits
from specjax.models.transformer import Model
from specjax.verifiers.base import NodeRule
from specjax.verifiers.path import PathRule

__all__ = ["SpecLoop", "SpecResult", "SpecStats", "SpecState", "SpecInputs", "StepRecord",
           "make_loop", "speculative_init", "speculative_step", "jit_init", "jit_step", "speculative_core",
           "speculative_generate", "validate_pair", "node_dist_missing", "loop_target"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SpecResult:
  """Attributes:
    tokens: [B, max_new_tokens] generated tokens (0 beyond ``lengths``).
    lengths: [B] generated tokens per row (EOS included).
    finish_reason: [B] 1 max_new_tokens, 2 eos, 3 cache_full.
    stats: SpecStats.
    adapter: an adapting drafter's state after the run
      (:class:`~specjax.decoding.adaptation.AdapterState`: the per-row adapters,
      Adam's moments, the window): pass it as ``draft_params["adapter"]`` to the
      next call of a session to carry on from it; None for every other drafter.
  """

  tokens: jax.Array
  lengths: jax.Array
  finish_reason: jax.Array
  stats: SpecStats
  adapter: Optional[Any] = None

  def to_lists(self) -> list[list[int]]:
    toks, lens = np.asarray(self.tokens), np.asarray(self.lengths)
    return [toks[i, :lens[i]].tolist() for i in range(toks.shape[0])]


def _append(out, n, reason, new, num_new, eos, max_new_tokens):
  """Append ``new[b, :num_new[b]]`` to the output rows; apply EOS / max length.

  out: [B, W] buffer (W >= max_new + D + 1); n: [B] tokens so far;
  new: [B, D+1] candidate tokens; num_new: [B] how many of them the row emits.
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


def loop_target(target: Model, drafter: Drafter) -> Model:
  """``target`` with ``hidden_layers`` = the drafter's ``target_hidden_layers``: the
  drafter decides which target features the loop carries."""
  if drafter.target_hidden_layers != target.config.hidden_layers:
    return dataclasses.replace(
        target, config=target.config.replace(hidden_layers=tuple(drafter.target_hidden_layers)))
  return target


def make_loop(target: Model, drafter: Drafter, policy, max_new_tokens: int, eos: tuple,
              cache_length: int) -> SpecLoop:
  """The static :class:`SpecLoop` for ``drafter`` (and optional ``policy``): the target
  carries the drafter's hidden layers (:func:`loop_target`), the strategy and depth
  are the drafter's, and the verify buckets the policy's (else the drafter's; a
  single bucket is no bucket: always K)."""
  buckets = drafter.verify_buckets if policy is None else policy.buckets
  buckets = None if buckets is None else tuple(sorted(set(int(v) for v in buckets)))
  if buckets is not None and len(buckets) == 1:
    buckets = None
  return SpecLoop(loop_target(target, drafter), policy, int(max_new_tokens), tuple(eos),
                  int(cache_length), drafter.strategy, int(drafter.max_accepted), buckets,
                  bool(drafter.reads_target_logits))


def speculative_init(loop: SpecLoop, drafter: Drafter, verifier: NodeRule,
                     sampling: SamplingConfig, target_params, draft_params, policy_params,
                     tokens, lengths, key, row_ids) -> tuple[SpecInputs, SpecState]:
  """Prefill: the target emits the first token; the drafter caches ``prompt[:-1]``.

  Args:
    tokens: [B, P] int32 right-padded prompts; lengths: [B] int32.
    key: [] PRNG key; row_ids: [B] int32 global row indices.

  Returns ``(inputs, state)``: the loop-invariant inputs (params prepared once
  for the loop's forwards, ``Model.decode_params``) and the state at step 1.
  A row that cannot fit one step in ``cache_length`` starts CACHE_FULL
  (``speculative_generate`` refuses such prompts before tracing).
  """
  target, policy = loop.target, loop.policy
  b = tokens.shape[0]
  width = loop.max_new_tokens + drafter.max_accepted + 1
  t_cache, logits, t_hidden = prefill(target, target_params, tokens, lengths,
                                      loop.cache_length)
  first, _ = jax.vmap(lambda kk, l: sample_logits(kk, l, sampling))(
      row_key(key, row_ids, 0), logits)
  d_state = drafter.prefill(draft_params, tokens, lengths, loop.cache_length, t_hidden)
  p_state = (None if policy is None
             else policy.init(policy_params, tokens, lengths, loop.cache_length))
  inputs = SpecInputs(drafter, verifier, sampling, target.decode_params(target_params),
                      drafter.decode_params(draft_params), policy_params, key, row_ids)
  prev = jnp.take_along_axis(tokens, (lengths - 1)[:, None], 1)[:, 0]
  out = jnp.zeros((b, width), jnp.int32)
  reason = jnp.full((b,), RUNNING, jnp.int32)
  out, n, reason = _append(out, jnp.zeros((b,), jnp.int32), reason, first[:, None],
                           jnp.ones((b,), jnp.int32), loop.eos, loop.max_new_tokens)
  reason = _stop_if_full(reason, t_cache.lengths, drafter.tokens_per_step, loop.cache_length)
  zeros = jnp.zeros((b,), jnp.int32)
  d = drafter.max_accepted
  by_source = jnp.zeros((b, drafter.num_sources), jnp.int32)
  stats = SpecStats(zeros, zeros, zeros, jnp.zeros((b, d), jnp.int32),
                    jnp.zeros((b, d), jnp.int32), zeros, zeros,
                    jnp.zeros((b, drafter.tokens_per_step), jnp.int32), by_source, by_source)
  state = SpecState(t_cache, d_state, p_state, reason, out, n, prev, first, jnp.int32(1),
                    stats)
  return inputs, state


def _stop_if_full(reason, lengths, per_step: int, cache_length: int):
  """Running rows whose cache cannot take another step stop (CACHE_FULL)."""
  full = (reason == RUNNING) & (lengths + per_step > cache_length)
  return jnp.where(full, CACHE_FULL, reason)


def _choose_gamma(loop: SpecLoop, inputs: SpecInputs, state: SpecState, proposal, active):
  """``(gamma [B], policy state, signals)``: the drafts each row verifies -- all of them
  without a policy, else the policy's choice among the rows that offer drafts -- capped
  by what the drafter offers (``proposal.num_valid``)."""
  b = active.shape[0]
  if loop.policy is None:
    gamma = jnp.full((b,), proposal.tokens.shape[1], jnp.int32)  # K, or N tree nodes
    p_state, signals = state.policy, {}
  else:
    gamma, p_state, signals = loop.policy.choose_running(
        inputs.policy_params, state.policy, state.prev, state.last, proposal, active)
  if proposal.num_valid is not None:  # the drafter offers fewer (prompt lookup: 0 without a match)
    gamma = jnp.where(active, jnp.minimum(gamma, proposal.num_valid), 0).astype(jnp.int32)
  return gamma, p_state, signals


def speculative_step(loop: SpecLoop, inputs: SpecInputs, state: SpecState
                     ) -> tuple[SpecState, StepRecord]:
  """One speculative step for every row (module docstring); traceable, no host sync.

  Rows that are not RUNNING idle: their caches, tokens and counters are unchanged.
  Returns the next state and a :class:`StepRecord` of the step ([B] / [B, D]).
  """
  drafter, policy, depth = inputs.drafter, loop.policy, loop.depth
  last, prev = state.last, state.prev
  b = last.shape[0]
  active = state.finish_reason == RUNNING
  keys = row_key(inputs.key, inputs.row_ids, state.step)  # [B]
  split = jax.vmap(lambda kk: jax.random.split(kk, 3))(keys)  # [B, 3]
  gate = None if policy is None else policy.draft_gate(inputs.policy_params, state.policy,
                                                       active)
  proposal, d_state = drafter.propose(inputs.draft_params, state.drafter, prev, last,
                                      split[:, 0], gate=gate if drafter.gates_drafting else None)
  gamma, p_state, signals = _choose_gamma(loop, inputs, state, proposal, active)
  v = loop.strategy.verify(loop, inputs, state.target_cache,
                           Round(last, proposal, gamma, active, split[:, 1], split[:, 2]))
  nacc, t_cache = v.num_accepted, v.cache
  # --- commit: drafter / policy learn what the target kept.
  committed = jnp.concatenate([last[:, None], v.path_drafts], 1)  # [B, D+1]
  learns = {} if v.target_logits is None else dict(target_logits=v.target_logits,
                                                    params=inputs.draft_params)
  d_state = drafter.commit(d_state, t_cache.lengths, committed, jnp.where(active, nacc + 1, 0),
                           v.hidden, **learns)
  if policy is not None:
    p_state = policy.commit(p_state, t_cache.lengths)
  new = jnp.concatenate([v.path_drafts, jnp.zeros((b, 1), jnp.int32)], 1)
  new = jnp.where(jnp.arange(depth + 1)[None, :] == nacc[:, None], v.token[:, None], new)
  out, n, reason = _append(state.tokens, state.num_tokens, state.finish_reason, new, nacc + 1,
                           loop.eos, loop.max_new_tokens)
  # A row that cannot fit another step stops now (entry validation guarantees
  # the first step fits), so no iteration is spent on rows that are all full.
  reason = _stop_if_full(reason, t_cache.lengths, drafter.tokens_per_step, loop.cache_length)
  last_acc = jnp.take_along_axis(v.path_drafts, jnp.maximum(nacc - 1, 0)[:, None], 1)[:, 0]
  new_prev = jnp.where(active, jnp.where(nacc > 0, last_acc, last), prev)
  new_last = jnp.where(active, v.token, last)
  pos = jnp.arange(depth)[None, :]
  accepted = v.accepted & active[:, None]
  offered = (pos <= nacc[:, None]) & (pos < gamma[:, None]) & active[:, None]
  stats = state.stats.add_round(active, gamma, nacc, v.num_relaxed, accepted, offered,
                                v.processed, proposal.source)
  new_state = SpecState(t_cache, d_state, p_state, reason, out, n, new_prev, new_last,
                        state.step + 1, stats)
  a = active.astype(jnp.int32)
  record = StepRecord(state.step, active, jnp.where(active, gamma, 0), nacc * a, accepted,
                      offered, n - state.num_tokens, signals)
  return new_state, record


# Host-side callers (SV calibration, streaming): the same functions, jitted.  The
# step donates the state's buffers (caches update in place across host steps).
jit_init = jax.jit(speculative_init, static_argnums=0)
jit_step = jax.jit(speculative_step, static_argnums=0, donate_argnums=2)


def speculative_core(loop: SpecLoop, drafter: Drafter, verifier: NodeRule,
                     sampling: SamplingConfig, target_params, draft_params, policy_params,
                     tokens, lengths, key, row_ids) -> SpecResult:
  """Traceable body of :func:`speculative_generate` (no validation; see there):
  :func:`speculative_init`, then :func:`speculative_step` in a ``lax.while_loop``
  until no row is RUNNING.  ``loop`` is the one static argument; ``drafter``,
  ``verifier`` and ``sampling`` are traced pytrees (:mod:`specjax.hyperparams`):
  their continuous hyperparameters (theta, lam, temperature, ...) change
  without recompiling, their static parts (rule kind, gate, K, greedy, ...)
  select the program."""
  inputs, state = speculative_init(loop, drafter, verifier, sampling, target_params,
                                   draft_params, policy_params, tokens, lengths, key, row_ids)
  state = jax.lax.while_loop(lambda s: jnp.any(s.finish_reason == RUNNING),
                             lambda s: speculative_step(loop, inputs, s)[0], state)
  adapter = getattr(state.drafter, "adapter", None)
  return SpecResult(state.tokens[:, :loop.max_new_tokens], state.num_tokens,
                    state.finish_reason, state.stats, adapter)


_speculative = jax.jit(speculative_core, static_argnums=0)


def validate_pair(target: Model, drafter: Drafter, verifier: NodeRule,
                  allow_tokenizer_mismatch: bool = False) -> None:
  """Boundary checks shared by the speculative entry points."""
  if not isinstance(verifier, (NodeRule, PathRule)):
    raise ArgumentTypeError(f"verifier must be a NodeRule or a PathRule (e.g. "
                            f"specjax.verifiers.get('lossless') or get('block')), "
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
  check_rule_for_strategy(verifier, drafter.tree)
  reason = node_dist_missing(drafter, verifier)
  if reason:
    raise ValueError(reason)


def node_dist_missing(drafter: Drafter, verifier: NodeRule) -> str:
  """Why ``verifier`` is undefined with ``drafter`` ("" when it is defined): a rule
  that needs the drafter's full distribution at each node (CoS, docs/spec.md §3) with a
  drafter that does not supply it and drafts deterministically (one-hot q).  A
  sampled chain's q is its node distribution, so it always works."""
  if (getattr(verifier, "needs_node_dist", False) and not drafter.supplies_node_dist
      and not drafter.q_is_node_dist):
    return (f"verifier {type(verifier).__name__} ({verifier.name!r}) needs the drafter's full "
            f"distribution at each node (docs/spec.md §3), but drafter "
            f"{type(drafter).__name__} does not supply it (supplies_node_dist=False) and its "
            f"drafts are deterministic (one-hot q)")
  return ""


def _checked_arguments(target, target_params, drafter, draft_params, verifier, sampling, key,
                       max_new_tokens, row_offset, policy, allow_tokenizer_mismatch):
  """:func:`speculative_generate`'s argument checks, before anything is traced; returns
  the PRNG key (``jax.random.key(0)`` when none is given and nothing samples)."""
  validate_pair(target, drafter, verifier, allow_tokenizer_mismatch)
  check_model_params("target", target, target_params)
  if isinstance(getattr(drafter, "model", None), Model):
    check_model_params("draft", drafter.model, draft_params)
  check_int("max_new_tokens", max_new_tokens, low=1)
  check_int("row_offset", row_offset, low=0)
  if not isinstance(sampling, SamplingConfig):
    raise ArgumentTypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
  if key is None:
    # Tree drafts are deterministic top-k choices: only a sampled chain draws.
    if not (sampling.greedy and (drafter.tree or drafter.sampling.greedy)):
      raise ValueError("a PRNG key is required when the target or drafter samples (T > 0)")
    key = jax.random.key(0)
  check_key("key", key)
  if policy is not None and drafter.tree:
    raise ValueError("a verify-length policy applies to chain drafters only (drafter.tree=True)")
  return key


def _check_carried_adapter(drafter, draft_params, batch: int, mesh) -> None:
  """A session's carried adapters (``draft_params["adapter"]``) must belong to an
  adapting drafter and fit its head and the batch; the loop runs them without a mesh
  (their rows are per-row state, not replicated params)."""
  carried = draft_params.get("adapter") if isinstance(draft_params, dict) else None
  if carried is None:
    return
  cfg = getattr(drafter, "adapt", None)
  if cfg is None:
    raise ValueError("draft_params['adapter'] was given, but the drafter does not adapt "
                     "(EagleDrafter(adapt=OnlineAdaptation(...)))")
  if mesh is not None:
    raise ValueError("carried adapters (draft_params['adapter']) run without a mesh "
                     "(mesh=None): they are per-row state")
  from specjax.decoding import adaptation
  c = drafter.head.config
  adaptation.check_carried(carried, cfg, batch, c.hidden_size, c.draft_vocab_size)


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
    drafter, draft_params: e.g. ``LMDrafter(num_draft=K, sampling=..., model=draft_model)``
      (a chain of K drafts) or ``LMTreeDrafter(model=draft_model, paths=...)`` (a tree).
    verifier: a node rule (``specjax.verifiers.get(name, **hparams)``) or, for chain
      drafters, a path rule (``specjax.verifiers.get("block")``).
    prompts: list of token-id lists or ``(tokens [B, P], lengths [B])``.
    max_new_tokens: tokens to generate per row.
    sampling: the target's temperature / processors (T = 0: greedy).
    key: PRNG key (required for T > 0 or sampled drafts).
    eos_token_id: int, list, None or "config".
    cache_length: KV slots; default prompt bucket + max_new_tokens +
      ``drafter.tokens_per_step`` (K + 1 for a chain, N + 1 for a tree of N nodes).
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
  key = _checked_arguments(target, target_params, drafter, draft_params, verifier, sampling,
                           key, max_new_tokens, row_offset, policy, allow_tokenizer_mismatch)
  eos = eos_tuple(target.config.eos_token_id if eos_token_id == "config" else eos_token_id)
  tokens, lengths = prepare_prompts(prompts, target.config.vocab_size,
                                    min_bucket=prompt_bucket)
  per_step = drafter.tokens_per_step
  check_position_range("target", target, int(lengths.max()), max_new_tokens, on_long_prompt)
  cache_length, bucket = resolve_cache_length(lengths, tokens.shape[1],
                                              max_new_tokens + per_step, cache_length)
  if int(lengths.max()) + per_step > cache_length:
    what = (f"a tree of {per_step - 1} nodes" if drafter.tree
            else f"num_draft K={drafter.num_draft}")
    raise ValueError(f"{what} is too large for cache_length={cache_length}: a step "
                     f"needs {per_step} free slots after the longest prompt "
                     f"({int(lengths.max())} tokens)")
  tokens = tokens[:, :bucket]
  _check_carried_adapter(drafter, draft_params, tokens.shape[0], mesh)
  if policy is not None:
    n_dev = 1 if mesh is None else int(mesh.shape.get("data", 1))
    policy.check_rows(tokens.shape[0], -(-tokens.shape[0] // n_dev), n_dev)
  loop = make_loop(target, drafter, policy, max_new_tokens, eos, cache_length)
  traced = (drafter, verifier, sampling, target_params, draft_params, policy_params)
  if mesh is not None:
    from specjax.decoding import parallel
    return parallel.run_sharded(speculative_core, loop, traced, tokens, lengths, key,
                                row_offset, mesh)
  row_ids = jnp.arange(tokens.shape[0], dtype=jnp.int32) + row_offset
  return _speculative(loop, *traced, jnp.asarray(tokens), jnp.asarray(lengths), key, row_ids)
