"""Log ``(S, A, accepted)`` records for SV calibration by running ordinary
speculative decoding (every row verifies all K drafts) on calibration prompts.

The step is the speculative loop's own
(:func:`specjax.decoding.speculative.speculative_step`, jitted): a host loop
calls it until every row is done (EOS, ``max_new_tokens`` or a full cache),
with a policy (:class:`CalibrationPolicy`) that offers all K drafts and
reports the companion's signals (:meth:`SpeculativeVerification.signals`) in
the step record.  The host round trip per step is fine for an offline
calibration run.

A record is kept for each position the verifier reached: positions
``i <= n`` of a step that accepted ``n`` drafts (``i < K``).  Later positions
were never tried (after a rejection the target's context changed), so
``P(accept | reached, S, A)`` is what the records estimate.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.autoregressive import RUNNING
from specjax.decoding.drafters import Drafter
from specjax.decoding.prompts import eos_tuple, prepare_prompts
from specjax.decoding.speculative import SpecLoop, jit_init, jit_step, loop_target
from specjax.distributions import SamplingConfig
from specjax.models.transformer import Model
from specjax.policies.base import VerifyPolicy
from specjax.policies.sv import SpeculativeVerification
from specjax.verifiers.base import NodeRule


@dataclasses.dataclass(frozen=True)
class CalibrationPolicy(VerifyPolicy):
  """Verify all K drafts (``FixedLength``) and report SV's companion signals.

  ``choose`` returns ``gamma = K`` for active rows and the signals ``{"S",
  "A", "p_hat"}`` ([B, K] each) of ``sv.signals``; the companion's cache
  follows the target like SV's own (``init`` / ``commit`` delegate to ``sv``).
  """

  sv: SpeculativeVerification = None

  def init(self, params, tokens, lengths, cache_length: int):
    return self.sv.init(params, tokens, lengths, cache_length)

  def choose(self, params, state, prev, last, x, q, active):
    s, a, p_hat, state = self.sv.signals(params, state, prev, last, x, q)
    gamma = jnp.where(active, self.num_draft, 0).astype(jnp.int32)
    return gamma, state, {"S": s, "A": a, "p_hat": p_hat}

  def commit(self, state, target_lengths):
    return self.sv.commit(state, target_lengths)


def collect_records(target: Model, target_params, drafter: Drafter, draft_params,
                    policy: SpeculativeVerification, policy_params, verifier: NodeRule, prompts,
                    *, max_new_tokens: int, sampling: SamplingConfig, key=None,
                    eos_token_id="config", cache_length: int | None = None,
                    row_offset: int = 0) -> dict:
  """Run fixed-K speculative decoding and return the calibration records.

  Args:
    policy: an SV policy (only its companion and ``signals`` are used; the
      table in ``policy_params`` only fills the ``p_hat`` column).
    prompts: token-id lists or ``(tokens [B, P], lengths [B])``.
    max_new_tokens: tokens per row (a row stops at EOS, this count or a full cache).
    cache_length: KV slots; default prompt width + max_new_tokens + 2 (K + 1).

  Returns a dict of numpy arrays, one entry per reached position:
  ``S, A, p_hat`` float32, ``accepted`` int8, ``position`` (0-based draft index),
  ``row`` (global row index), ``step``; plus ``tokens_per_call`` and ``calls``
  (verify forwards of active rows, prefill excluded).
  """
  if drafter.tree:
    raise ValueError("SV calibration drafts chains (drafter.tree=True given)")
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
  loop = SpecLoop(target, CalibrationPolicy(k, sv=policy), int(max_new_tokens), eos,
                  int(cache_length))
  inputs, state = jit_init(loop, drafter, verifier, sampling, target_params, draft_params,
                           policy_params, jnp.asarray(tokens), jnp.asarray(lengths), key, row_ids)
  out = {name: [] for name in ("S", "A", "p_hat", "accepted", "position", "row", "step")}
  while np.any(np.asarray(state.finish_reason) == RUNNING):
    state, rec = jit_step(loop, inputs, state)
    rec = jax.device_get(rec)
    ri, pi = np.nonzero(rec.offered)  # reached positions of active rows (gamma = K)
    out["S"].append(rec.signals["S"][ri, pi])
    out["A"].append(rec.signals["A"][ri, pi])
    out["p_hat"].append(rec.signals["p_hat"][ri, pi])
    out["accepted"].append(rec.accepted[ri, pi].astype(np.int8))
    out["position"].append(pi.astype(np.int32))
    out["row"].append((ri + row_offset).astype(np.int32))
    out["step"].append(np.full(ri.shape, rec.step, np.int32))
  stats = jax.device_get(state.stats)
  calls, accepted_total = int(np.sum(stats.target_calls)), int(np.sum(stats.accepted))
  res = {name: np.concatenate(v) if v else np.zeros((0,)) for name, v in out.items()}
  res["calls"] = calls
  res["tokens_per_call"] = (accepted_total + calls) / max(calls, 1)
  return res
