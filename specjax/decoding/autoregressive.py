"""Target-only generation: the baseline every speedup divides.

Prefill and the whole decode run inside one jitted function (one
``lax.while_loop`` around :func:`generate_step`, ``GenState -> GenState``);
prompts are right-padded to a power-of-two bucket, so prompts of different
lengths within a bucket reuse one compilation.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax.checks import ArgumentTypeError, check_int, check_key
from specjax.decoding.arguments import check_model_params, check_position_range
from specjax.decoding.loop_state import GenInputs, GenState
from specjax.decoding.prompts import (eos_tuple, is_eos, prepare_prompts,
                                      resolve_cache_length)
from specjax.distributions import SamplingConfig, sample_logits
from specjax.models import kv_cache as kvc
from specjax.models.transformer import Model

# finish_reason codes
RUNNING, MAX_TOKENS, EOS, CACHE_FULL = 0, 1, 2, 3
FINISH_REASONS = {RUNNING: "running", MAX_TOKENS: "max_new_tokens", EOS: "eos",
                  CACHE_FULL: "cache_full"}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GenerationResult:
  """Attributes:
    tokens: [B, max_new_tokens] int32 generated tokens (0 beyond ``lengths``).
    lengths: [B] int32 number of generated tokens (EOS included).
    finish_reason: [B] int32: 1 max_new_tokens, 2 eos, 3 cache_full (see FINISH_REASONS).
    target_calls: [B] int32 decode forwards while the row was running, prefill
      excluded (the meaning of ``SpecStats.target_calls``): ``lengths - 1``.
  """

  tokens: jax.Array
  lengths: jax.Array
  finish_reason: jax.Array
  target_calls: jax.Array

  def to_lists(self) -> list[list[int]]:
    toks, lens = np.asarray(self.tokens), np.asarray(self.lengths)
    return [toks[i, :lens[i]].tolist() for i in range(toks.shape[0])]


def row_key(key: jax.Array, row_ids: jax.Array, step) -> jax.Array:
  """Per-row keys ``[B]`` from the global row index and step (never the device index)."""
  return jax.vmap(lambda r: jax.random.fold_in(jax.random.fold_in(key, r), step))(row_ids)


def prefill(model: Model, params, tokens, lengths, cache_length: int):
  """Run the padded prompts ``[B, P]`` through the model; commit each row's length.

  Returns ``(cache, last_logits [B, V], hidden)`` where ``last_logits`` predict
  the token after each prompt and ``hidden`` are the configured hidden states
  ``[n_sel, B, P, H]`` (None when the config selects none).
  """
  b, p = tokens.shape
  cache = model.init_cache(b, cache_length)
  positions = jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32), (b, p))
  out = model.apply(params, tokens, positions, cache, logits_index=(lengths - 1)[:, None])
  return kvc.commit(out.cache, lengths), out.logits[:, 0], out.hidden_states


@dataclasses.dataclass(frozen=True)
class GenLoop:
  """Static configuration of the target-only loop (hashable: a static jit argument)."""

  model: Model
  max_new_tokens: int
  eos: tuple
  cache_length: int


def generate_step(loop: GenLoop, inputs: GenInputs, state: GenState) -> GenState:
  """One decode forward for every row; rows that are not RUNNING idle."""
  model, max_new_tokens = loop.model, loop.max_new_tokens
  b = state.last.shape[0]
  active = state.finish_reason == RUNNING
  cache, n = state.cache, state.num_tokens
  o = model.apply(inputs.params, state.last[:, None], cache.lengths[:, None], cache)
  cache = kvc.commit(o.cache, active.astype(jnp.int32))
  tok, _ = jax.vmap(lambda k, l: sample_logits(k, l, inputs.sampling))(
      row_key(inputs.key, inputs.row_ids, state.step), o.logits[:, 0])
  write = jnp.where(active, n, max_new_tokens)  # out of range -> dropped
  out = state.tokens.at[jnp.arange(b), write].set(tok, mode="drop")
  n = n + active.astype(jnp.int32)
  # A row whose cache is now full cannot feed ``tok`` back: stop it here rather
  # than spend one more forward pass discovering it at the next iteration.
  reason = jnp.where(active & is_eos(tok, loop.eos), EOS,
                     jnp.where(active & (n >= max_new_tokens), MAX_TOKENS,
                               jnp.where(active & (cache.lengths >= loop.cache_length),
                                         CACHE_FULL, state.finish_reason)))
  last = jnp.where(active, tok, state.last)
  return GenState(cache, out, n, reason, last, state.step + 1,
                  state.target_calls + active.astype(jnp.int32))


@functools.partial(jax.jit, static_argnums=0)
def _generate(loop: GenLoop, params, sampling: SamplingConfig, tokens, lengths, key, row_ids
              ) -> GenerationResult:
  """Jitted body of :func:`generate`: prefill, then :func:`generate_step` in a
  ``lax.while_loop``.  ``loop`` is the one static argument; ``sampling`` is a
  traced pytree: one compilation serves every temperature > 0 (see
  ``SamplingConfig``)."""
  model, max_new_tokens, eos, cache_length = (loop.model, loop.max_new_tokens, loop.eos,
                                              loop.cache_length)
  b = tokens.shape[0]
  cache, logits, _ = prefill(model, params, tokens, lengths, cache_length)
  first, _ = jax.vmap(lambda k, l: sample_logits(k, l, sampling))(row_key(key, row_ids, 0), logits)
  out = jnp.zeros((b, max_new_tokens), jnp.int32).at[:, 0].set(first)
  n = jnp.ones((b,), jnp.int32)
  reason = jnp.where(is_eos(first, eos), EOS, jnp.where(n >= max_new_tokens, MAX_TOKENS, RUNNING))
  # Decode params once, not per step (Model.decode_params).
  inputs = GenInputs(model.decode_params(params), sampling, key, row_ids)
  state = GenState(cache, out, n, reason, first, jnp.int32(1), jnp.zeros((b,), jnp.int32))
  state = jax.lax.while_loop(lambda s: jnp.any(s.finish_reason == RUNNING),
                             lambda s: generate_step(loop, inputs, s), state)
  return GenerationResult(state.tokens, state.num_tokens, state.finish_reason,
                          state.target_calls)


def generate(model: Model, params, prompts, *, max_new_tokens: int,
             sampling: SamplingConfig = SamplingConfig(temperature=0.0), key=None,
             eos_token_id="config", cache_length: int | None = None,
             row_offset: int = 0, mesh=None, prompt_bucket: int | None = None,
             on_long_prompt: str = "warn") -> GenerationResult:
  """Target-only generation for a batch of ragged prompts.

  Args:
    model, params: the target.
    prompts: list of token-id lists, or ``(tokens [B, P], lengths [B])``.
    max_new_tokens: tokens to generate per row (the first comes from prefill).
    sampling: temperature and processors; default greedy.
    key: PRNG key (required when sampling with temperature > 0).
    eos_token_id: int, list, None, or "config" (the model config's).
    cache_length: KV-cache slots; default prompt bucket + max_new_tokens. A row
      whose cache fills stops with finish_reason CACHE_FULL.
    row_offset: global index of the first row (per-row RNG streams).
    prompt_bucket: pad prompts to at least this length's power-of-two bucket, so
      batches of different prompt lengths share one compiled program.
    mesh: optional ``jax.sharding.Mesh`` with a ``data`` axis (rows sharded over it).
    on_long_prompt: "warn" (default), "error" or "ignore" when prompt + generation
      reach past ``max_position_embeddings``.

  Raises ``TypeError`` / ``ValueError`` (before tracing) naming a bad argument:
  params that do not fit ``model``, a flat list or text for ``prompts``, a
  non-key ``key``, a bad ``max_new_tokens``.
  """
  check_model_params("model", model, params)
  check_int("max_new_tokens", max_new_tokens, low=1)
  check_int("row_offset", row_offset, low=0)
  if not isinstance(sampling, SamplingConfig):
    raise ArgumentTypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
  if key is None:
    if not sampling.greedy:
      raise ValueError("a PRNG key is required when temperature > 0")
    key = jax.random.key(0)
  check_key("key", key)
  eos = eos_tuple(model.config.eos_token_id if eos_token_id == "config" else eos_token_id)
  tokens, lengths = prepare_prompts(prompts, model.config.vocab_size, min_bucket=prompt_bucket)
  check_position_range("model", model, int(lengths.max()), max_new_tokens, on_long_prompt)
  cache_length, bucket = resolve_cache_length(lengths, tokens.shape[1], max_new_tokens,
                                              cache_length)
  tokens = tokens[:, :bucket]
  loop = GenLoop(model, int(max_new_tokens), eos, cache_length)
  if mesh is not None:
    from specjax.decoding import parallel
    return parallel.run_sharded(_generate.__wrapped__, loop, (params, sampling), tokens,
                                lengths, key, row_offset, mesh)
  row_ids = jnp.arange(tokens.shape[0], dtype=jnp.int32) + row_offset
  return _generate(loop, params, sampling, jnp.asarray(tokens), jnp.asarray(lengths), key,
                   row_ids)
