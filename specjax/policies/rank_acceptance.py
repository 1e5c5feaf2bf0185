"""Positional acceptance of a drafter's ranked tokens, measured on chains at T = 0:

    P[d, r] = P(the target's greedy token at depth d is the drafter's rank-r token
                | the verifier reached depth d),

the acceptance model of Sequoia's trees (:mod:`specjax.policies.tree_budget`): a
tree node's rank-r child is accepted exactly when the target's token is that child.

Measured by ordinary greedy speculative decoding with a chain drafter that verifies
all K drafts (:class:`RankProbe`, through the loop's own step,
:func:`specjax.policies.probe.run_probe`): at every position the verifier reached,
the drafter's top-R tokens there (read from its distribution, before the target ran)
are compared with the token the target emitted there -- the accepted draft, or at
the first mismatch the target's own token.  Greedy only: at T > 0 which child a
tree verifier accepts depends on the rule's multi-candidate law, not on a rank alone.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.checks import check_int
from specjax.policies.base import VerifyPolicy, node_distributions
from specjax.policies.probe import ProbeRun, run_probe


@dataclasses.dataclass(frozen=True)
class RankProbe(VerifyPolicy):
  """Verify all K drafts and report the drafter's top ``ranks`` tokens at each
  position (signal ``top [B, K, R]`` int32, best first)."""

  ranks: int = 8

  def choose(self, params, state, prev, last, proposal, active):
    gamma = jnp.where(active, self.num_draft, 0).astype(jnp.int32)
    _, top = jax.lax.top_k(node_distributions(proposal), self.ranks)
    return gamma, state, {"top": top.astype(jnp.int32)}


def rank_counts(run: ProbeRun, ranks: int) -> np.ndarray:
  """``[K, R + 1]`` int64: at each depth, how often the target's token was the
  drafter's rank-r token (the last column: not among its top R), over every position
  the verifier reached in a :class:`RankProbe` run (the steps' tokens follow those
  the prefill emitted)."""
  k = np.asarray(run.steps[0].accepted).shape[1] if run.steps else 0
  counts = np.zeros((k, ranks + 1), np.int64)
  # Each row's tokens emitted so far: the loop's prefill emitted the first ones.
  emitted = np.asarray(run.num_tokens, np.int64) - sum(
      np.where(np.asarray(rec.active), np.asarray(rec.num_emitted), 0) for rec in run.steps)
  for rec in run.steps:
    top = np.asarray(rec.signals["top"])
    for b in np.nonzero(np.asarray(rec.active))[0]:
      n, e, g = int(rec.num_accepted[b]), int(rec.num_emitted[b]), int(rec.gamma[b])
      for i in range(min(n + 1, g, e)):  # accepted drafts, then the first mismatch
        hit = np.nonzero(top[b, i] == run.tokens[b, emitted[b] + i])[0]
        counts[i, hit[0] if len(hit) else ranks] += 1
      emitted[b] += e
  return counts


def positional_acceptance(counts, min_reached: int = 100) -> np.ndarray:
  """``P [K, R]`` from :func:`rank_counts`: each depth's counts over the positions
  reached there.  **Our choice:** a depth reached fewer than ``min_reached`` times
  (deep positions are rare: each needs every draft before it accepted) takes the
  counts pooled over itself, every deeper depth and the deepest depth reached at least
  that often -- a handful of positions would otherwise set a depth's whole row -- and
  where no depth is reached that often, all depths are pooled (Sequoia's one vector).
  Rows of depths never reached are 0 only when nothing was reached at all."""
  c = np.asarray(counts, np.float64)
  check_int("min_reached", min_reached, low=0)
  reached = c.sum(1)
  well = np.nonzero(reached >= max(min_reached, 1))[0]
  start = int(well[-1]) if len(well) else 0
  rows = c.copy()
  sparse = np.arange(len(c)) > start if len(well) else np.ones(len(c), bool)
  rows[sparse] = c[start:].sum(0)
  total = rows.sum(1, keepdims=True)
  return np.divide(rows[:, :-1], total, out=np.zeros_like(rows[:, :-1]), where=total > 0)


def collect_ranks(target, target_params, drafter, draft_params, verifier, prompts, *,
                  max_new_tokens: int, sampling, ranks: int = 8, key=None,
                  eos_token_id="config", cache_length=None, row_offset: int = 0) -> np.ndarray:
  """:func:`rank_counts` of greedy speculative decoding with the chain ``drafter`` on
  ``prompts`` (token-id lists or ``(tokens, lengths)``); ``sampling`` must be greedy
  (module docstring)."""
  check_int("ranks", ranks, low=1)
  if float(sampling.temperature) != 0.0:
    raise ValueError(f"sampling.temperature={sampling.temperature}: rank acceptance is "
                     f"measured at T = 0 only (module docstring)")
  run = run_probe(target, target_params, drafter, draft_params,
                  RankProbe(drafter.num_draft, ranks), None, verifier, prompts,
                  max_new_tokens=max_new_tokens, sampling=sampling, key=key,
                  eos_token_id=eos_token_id, cache_length=cache_length, row_offset=row_offset)
  return rank_counts(run, ranks)
