"""Typed loop states of the two decode loops (docs/design.md "Loop":
typed states, one step function).

Each loop is ``state = init(...)`` then ``state = step(state)`` until no row
is RUNNING; the ``lax.while_loop`` inside ``generate`` /
``speculative_generate`` and host loops (SV calibration, streaming) call the
same step.  The states are registered frozen dataclasses (pytrees); every
field carries its shape.  Loop-invariant *traced* inputs (params, keys,
hyperparameter pytrees) travel separately in ``*Inputs``; static
configuration (models, lengths, EOS ids, the verify strategy) lives in the
hashable loop objects (``autoregressive.GenLoop``, :class:`SpecLoop`).

Shapes: B rows, S cache slots, W = max_new_tokens + D + 1 output slots
(D = ``drafter.max_accepted``: K for a chain, the tree depth for a tree).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import kv_cache as kvc


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GenState:
  """Target-only decoding (``autoregressive.generate_step``)."""

  cache: kvc.KVCache         # k, v [L, B, S, KVH, D]; lengths [B] int32
  tokens: jax.Array          # [B, max_new_tokens] int32 generated (0 beyond num_tokens)
  num_tokens: jax.Array      # [B] int32 generated tokens per row
  finish_reason: jax.Array   # [B] int32 RUNNING until the row stops (FINISH_REASONS)
  last: jax.Array            # [B] int32 last generated token (not yet in the cache)
  step: jax.Array            # [] int32 next decode step (RNG stream; prefill is step 0)
  target_calls: jax.Array    # [B] int32 decode forwards while the row ran (prefill excluded)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class GenInputs:
  """Loop-invariant traced inputs of ``generate_step``."""

  params: Any                # the model's decode params (Model.decode_params)
  sampling: Any              # SamplingConfig pytree (temperature etc. traced)
  key: jax.Array             # [] PRNG key
  row_ids: jax.Array         # [B] int32 global row indices (per-row RNG)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SpecStats:
  """Per-row statistics (all ``[B]`` or ``[B, D]``; sum over rows for totals).

  Attributes:
    target_calls: [B] verify forwards while the row was active (prefill
      excluded, as ``GenerationResult.target_calls``).
    accepted: [B] accepted draft tokens.
    relaxed: [B] acceptances that only a lossy relaxation allowed.
    accept_counts: [B, D] times draft position i was accepted.
    offered_counts: [B, D] times draft position i was reached and offered (i <= accepted
      and i < gamma).
    verified_tokens: [B] draft tokens offered to the target (sum of gamma; K per
      chain step without a verify-length policy, N per tree step).
    processed_tokens: [B] tokens the target forward processed for the row
      (bucket + 1 per chain step, N + 1 per tree step).
    gamma_counts: [B, G+1] steps that offered gamma = 0..G drafts (G = K for a
      chain, N for a tree): the distribution of a verify-length policy's choices.
    source_rounds: [B, S] steps drafted by each of the drafter's S sources (S = 1
      but for a drafter choosing between sources, ``Proposal.source``).
    source_accepted: [B, S] drafts accepted in those steps.
  """

  target_calls: jax.Array
  accepted: jax.Array
  relaxed: jax.Array
  accept_counts: jax.Array
  offered_counts: jax.Array
  verified_tokens: jax.Array
  processed_tokens: jax.Array
  gamma_counts: jax.Array
  source_rounds: jax.Array
  source_accepted: jax.Array

  @staticmethod
  def plain(target_calls, max_accepted: int, num_lengths: int, num_sources: int
            ) -> "SpecStats":
    """The counters of a run whose every round was a plain decode step: target-only
    decoding standing in for the loop when no verify length can pay (docs/spec.md
    §5, "When speculation cannot pay").  ``target_calls [B]``; ``max_accepted`` D,
    ``num_lengths`` G + 1 and ``num_sources`` S size the other counters; every
    round counts as a length-0 round of no source."""
    calls = jnp.asarray(target_calls, jnp.int32)
    b = calls.shape[0]
    zeros, per_pos = jnp.zeros((b,), jnp.int32), jnp.zeros((b, max_accepted), jnp.int32)
    by_source = jnp.zeros((b, num_sources), jnp.int32)
    gamma = jnp.zeros((b, num_lengths), jnp.int32).at[:, 0].set(calls)
    return SpecStats(calls, zeros, zeros, per_pos, per_pos, zeros, calls, gamma, by_source,
                     by_source)

  def add_round(self, active, gamma, num_accepted, num_relaxed, accepted, offered,
                processed, source=None) -> "SpecStats":
    """The counters after one round: ``active`` [B] bool (idle rows count nothing),
    ``gamma`` [B] drafts offered, ``num_accepted`` / ``num_relaxed`` [B],
    ``accepted`` / ``offered`` [B, D] bool per position, ``processed`` [] tokens
    the target forward processed per row, ``source`` [B] the source that drafted
    (None: source 0)."""
    a = active.astype(jnp.int32)
    one_hot_gamma = jnp.arange(self.gamma_counts.shape[1])[None, :] == gamma[:, None]
    src = jnp.zeros_like(gamma) if source is None else source
    by_source = (jnp.arange(self.source_rounds.shape[1])[None, :] == src[:, None]) * a[:, None]
    return SpecStats(
        self.target_calls + a, self.accepted + num_accepted * a,
        self.relaxed + num_relaxed * a,
        self.accept_counts + accepted.astype(jnp.int32),
        self.offered_counts + offered.astype(jnp.int32),
        self.verified_tokens + jnp.where(active, gamma, 0),
        self.processed_tokens + processed * a,
        self.gamma_counts + one_hot_gamma * a[:, None],
        self.source_rounds + by_source, self.source_accepted + by_source * num_accepted[:, None])

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
            "gamma_counts": np.sum(self.gamma_counts, 0).tolist(),
            "source_rounds": np.sum(self.source_rounds, 0).tolist(),
            "source_accepted": np.sum(self.source_accepted, 0).tolist(),
            "accept_rate_per_position": (np.sum(self.accept_counts, 0) /
                                         np.maximum(np.sum(self.offered_counts, 0), 1)).tolist()}


@dataclasses.dataclass(frozen=True)
class SpecLoop:
  """Static configuration of the speculative loop (hashable: the one static jit
  argument of ``speculative.speculative_step``); built by
  ``speculative.make_loop`` from the target, the drafter and the policy.

  Attributes:
    target: the target ``Model`` (its config selecting the hidden layers the
      drafter reads: ``speculative.loop_target``).
    policy: optional verify-length policy (chains only), or None.
    max_new_tokens: tokens to generate per row.
    eos: tuple of EOS token ids (may be empty).
    cache_length: KV slots S of the target (and drafter) caches.
    strategy: how a round is verified, the drafter's ``strategy`` (chain or tree,
      ``specjax.decoding.strategies``).
    depth: D, the most drafts one round can accept (``drafter.max_accepted``).
    buckets: the sorted verify lengths a chain's target forward is compiled for
      (a policy's ``buckets``, else the drafter's ``verify_buckets``;
      ``specjax.decoding.buckets``), or None: always K.
    path_logits: whether verification hands the drafter's ``commit`` the target's
      logits at the committed positions (``drafter.reads_target_logits``).
  """

  target: Any
  policy: Optional[Any]
  max_new_tokens: int
  eos: tuple
  cache_length: int
  strategy: Any
  depth: int
  buckets: Optional[tuple] = None
  path_logits: bool = False


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SpecState:
  """Speculative decoding (``speculative.speculative_step``)."""

  target_cache: kvc.KVCache  # k, v [L, B, S, KVH, D]; lengths [B] int32 committed tokens
  drafter: Any               # the drafter's state pytree (its caches, pending buffers)
  policy: Any                # the verify-length policy's state (None without a policy)
  finish_reason: jax.Array   # [B] int32 RUNNING until the row stops (FINISH_REASONS)
  tokens: jax.Array          # [B, W] int32 generated (0 beyond num_tokens)
  num_tokens: jax.Array      # [B] int32 generated tokens per row
  prev: jax.Array            # [B] int32 last token in the target cache (position L-1)
  last: jax.Array            # [B] int32 last generated token (position L, in no cache yet)
  step: jax.Array            # [] int32 next step (RNG stream; prefill is step 0)
  stats: SpecStats           # per-row counters, [B] / [B, D]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SpecInputs:
  """Loop-invariant traced inputs of ``speculative_step``."""

  drafter: Any               # Drafter pytree (sampling values traced, shapes static)
  verifier: Any              # NodeRule or (chains) PathRule pytree (theta, lam, ... traced)
  sampling: Any              # the target's SamplingConfig pytree
  target_params: Any         # target decode params (Model.decode_params)
  draft_params: Any          # drafter decode params (Drafter.decode_params)
  policy_params: Any         # verify-length policy params (None without a policy)
  key: jax.Array             # [] PRNG key
  row_ids: jax.Array         # [B] int32 global row indices (per-row RNG)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class StepRecord:
  """What one speculative step did, per row (for SV calibration and streaming).

  Idle rows (not RUNNING when the step began) have ``active`` False and zero
  counts; their ``signals`` entries are whatever the policy computed.
  """

  step: jax.Array            # [] int32 the step's index (its RNG stream)
  active: jax.Array          # [B] bool row was RUNNING when the step began
  gamma: jax.Array           # [B] int32 drafts offered to the verifier
  num_accepted: jax.Array    # [B] int32 accepted drafts
  accepted: jax.Array        # [B, D] bool draft position i accepted
  offered: jax.Array         # [B, D] bool position i reached and offered (i <= n, i < gamma)
  num_emitted: jax.Array     # [B] int32 tokens appended to state.tokens this step
  signals: dict              # policy statistics, e.g. SV's S, A, p_hat [B, K]; {} without
