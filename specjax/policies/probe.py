"""Run the speculative loop step by step with a probe policy and keep every step's
record: the data of an offline calibration (SV's companion signals,
:mod:`specjax.policies.sv_collect`; drafter confidences,
:mod:`specjax.policies.acceptance`).

The step is the loop's own (:func:`specjax.decoding.speculative.jit_step`): a
host loop calls it until every row is done (EOS, ``max_new_tokens`` or a full
cache).  The host round trip per step is fine for an offline run.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.autoregressive import RUNNING
from specjax.decoding.drafters import Drafter
from specjax.decoding.prompts import eos_tuple, prepare_prompts
from specjax.decoding.speculative import jit_init, jit_step, loop_target, make_loop
from specjax.distributions import SamplingConfig
from specjax.models.transformer import Model
from specjax.policies.base import VerifyPolicy
from specjax.verifiers.base import NodeRule


@dataclasses.dataclass(frozen=True)
class ProbeRun:
  """Attributes: steps: every step's record (host numpy, ``StepRecord``); stats: the
  loop's final ``SpecStats`` (host); tokens: ``[B, W]`` the generated tokens, in the
  order the steps emitted them (``num_emitted`` per step); num_tokens: ``[B]``."""

  steps: list
  stats: object
  tokens: np.ndarray
  num_tokens: np.ndarray

  @property
  def tokens_per_call(self) -> float:
    """Tokens per verify forward of active rows (prefill excluded)."""
    calls, acc = int(np.sum(self.stats.target_calls)), int(np.sum(self.stats.accepted))
    return (acc + calls) / max(calls, 1)


def run_probe(target: Model, target_params, drafter: Drafter, draft_params,
              policy: VerifyPolicy, policy_params, verifier: NodeRule, prompts, *,
              max_new_tokens: int, sampling: SamplingConfig, key=None,
              eos_token_id="config", cache_length: int | None = None,
              row_offset: int = 0) -> ProbeRun:
  """Decode ``prompts`` with ``policy`` (chains) and return every step's record.

  Args:
    prompts: token-id lists or ``(tokens [B, P], lengths [B])``.
    max_new_tokens: tokens per row (a row stops at EOS, this count or a full cache).
    cache_length: KV slots; default prompt width + max_new_tokens + 2 (K + 1).
    row_offset: global index of the first row (per-row random streams).
  """
  if drafter.tree:
    raise ValueError("a probe run drafts chains (drafter.tree=True given)")
  if policy.num_draft != drafter.num_draft:
    raise ValueError(f"policy K={policy.num_draft} != drafter K={drafter.num_draft}")
  if key is None:
    key = jax.random.key(0)
  target = loop_target(target, drafter)
  k = drafter.num_draft
  eos = eos_tuple(target.config.eos_token_id if eos_token_id == "config" else eos_token_id)
  tokens, lengths = prepare_prompts(prompts, target.config.vocab_size)
  if cache_length is None:
    cache_length = tokens.shape[1] + max_new_tokens + 2 * (k + 1)
  b = tokens.shape[0]
  row_ids = jnp.arange(b, dtype=jnp.int32) + row_offset
  loop = make_loop(target, drafter, policy, max_new_tokens, eos, cache_length)
  inputs, state = jit_init(loop, drafter, verifier, sampling, target_params, draft_params,
                           policy_params, jnp.asarray(tokens), jnp.asarray(lengths), key, row_ids)
  steps = []
  while np.any(np.asarray(state.finish_reason) == RUNNING):
    state, rec = jit_step(loop, inputs, state)
    steps.append(jax.device_get(rec))
  return ProbeRun(steps, jax.device_get(state.stats), np.asarray(state.tokens),
                  np.asarray(state.num_tokens))
