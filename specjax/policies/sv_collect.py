"""Log ``(S, A, accepted)`` records for SV calibration by running ordinary
speculative decoding (every row verifies all K drafts) on calibration prompts.

The loop runs step by step (:func:`specjax.policies.probe.run_probe`) with a
policy (:class:`CalibrationPolicy`) that offers all K drafts and reports the
companion's signals (:meth:`SpeculativeVerification.signals`) in the step
record.

A record is kept for each position the verifier reached: positions
``i <= n`` of a step that accepted ``n`` drafts (``i < K``).  Later positions
were never tried (after a rejection the target's context changed), so
``P(accept | reached, S, A)`` is what the records estimate.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from specjax.decoding.drafters import Drafter
from specjax.distributions import SamplingConfig
from specjax.models.transformer import Model
from specjax.policies.base import VerifyPolicy
from specjax.policies.probe import run_probe
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

  def choose(self, params, state, prev, last, proposal, active):
    s, a, p_hat, state = self.sv.signals(params, state, prev, last, proposal.tokens, proposal.q)
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
  if policy.num_draft != drafter.num_draft:
    raise ValueError(f"policy K={policy.num_draft} != drafter K={drafter.num_draft}")
  run = run_probe(target, target_params, drafter, draft_params,
                  CalibrationPolicy(drafter.num_draft, sv=policy), policy_params, verifier,
                  prompts, max_new_tokens=max_new_tokens, sampling=sampling, key=key,
                  eos_token_id=eos_token_id, cache_length=cache_length, row_offset=row_offset)
  out = {name: [] for name in ("S", "A", "p_hat", "accepted", "position", "row", "step")}
  for rec in run.steps:
    ri, pi = np.nonzero(rec.offered)  # reached positions of active rows (gamma = K)
    out["S"].append(rec.signals["S"][ri, pi])
    out["A"].append(rec.signals["A"][ri, pi])
    out["p_hat"].append(rec.signals["p_hat"][ri, pi])
    out["accepted"].append(rec.accepted[ri, pi].astype(np.int8))
    out["position"].append(pi.astype(np.int32))
    out["row"].append((ri + row_offset).astype(np.int32))
    out["step"].append(np.full(ri.shape, rec.step, np.int32))
  res = {name: np.concatenate(v) if v else np.zeros((0,)) for name, v in out.items()}
  res["calls"] = int(np.sum(run.stats.target_calls))
  res["tokens_per_call"] = run.tokens_per_call
  return res
