"""Per-prompt sums of one comparison row and their bootstrap intervals over prompts.

A row runs every prompt ``repeats`` times (one PRNG key per repeat: at T > 0
each repeat is a new sample, a "seed").  Every reported mean over prompts gets
a 95% percentile-bootstrap interval over *prompts* (:mod:`experiments.common.bootstrap`),
the repeats of a prompt kept together:

* ``tau_ci`` -- ratio of sums ``(accepted + calls) / calls``;
* ``loglik_ci`` -- token-weighted mean target log-likelihood (ratio of sums), and
  ``loglik_per_prompt``, its (sum, tokens) per prompt for paired comparisons;
* ``agree_exact_ci`` (T = 0), ``parse_frac_ci`` (code prompts) -- means of
  per-prompt fractions;
* ``speedup_pooled`` (:func:`speedup_interval`) -- speculative over target-only
  tokens/s from per-batch (tokens, seconds), :func:`paired_speed_gain`, one row's
  tokens/s over another's, :func:`paired_speedup_gain`, one row's speedup over
  another's (each against its own target-only runs: drift between rows cancels), and :func:`round_cost_in_steps`, a round's wall time in
  target decode steps (the break-even tau) -- no JAX here: the results tables call
  them on records.

Outputs are lists in ``[repeat][prompt]`` order (flat, repeat-major).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from experiments.common.bootstrap import bootstrap_ci, paired_ratio_gain


def ratio_of_sums(x: np.ndarray) -> float:
  """``x [n, 2]`` -> ``sum(x[:, 0]) / sum(x[:, 1])`` (0 when the denominator is 0)."""
  d = x[:, 1].sum()
  return float(x[:, 0].sum() / d) if d else 0.0


def ci(values, statistic=np.mean) -> list | None:
  """``[low, high]`` over prompts (None for fewer than 2 prompts: no interval)."""
  v = np.asarray(values, np.float64)
  if len(v) < 2:
    return None
  return list(bootstrap_ci(v, statistic))


class SpecSums:
  """Per-prompt sums of the speculative stats over repeats.

  Attributes:
    accepted, calls, relaxed, verified: [n] per prompt.
    accept_pos, offered_pos: [D] per draft position, summed over prompts.
    gamma, source_rounds: rounds per verify length 0..G and per drafting source.
  """

  def __init__(self, num_prompts: int):
    n = num_prompts
    self.accepted, self.calls = np.zeros(n), np.zeros(n)
    self.relaxed, self.verified = np.zeros(n), np.zeros(n)
    self.accept_pos = self.offered_pos = None
    self.gamma = self.source_rounds = None

  def add(self, stats, first: int, rows: int) -> None:
    """Add one call's ``SpecStats`` (fields ``[B]`` / ``[B, D]``) of prompts
    ``first .. first + rows - 1`` (rows beyond ``rows`` are padding)."""
    sl = slice(first, first + rows)
    for name in ("accepted", "relaxed"):
      getattr(self, name)[sl] += np.asarray(getattr(stats, name))[:rows]
    self.calls[sl] += np.asarray(stats.target_calls)[:rows]
    self.verified[sl] += np.asarray(stats.verified_tokens)[:rows]
    a = np.asarray(stats.accept_counts)[:rows].sum(0)
    o = np.asarray(stats.offered_counts)[:rows].sum(0)
    self.accept_pos = a if self.accept_pos is None else self.accept_pos + a
    self.offered_pos = o if self.offered_pos is None else self.offered_pos + o
    g = np.asarray(stats.gamma_counts)[:rows].sum(0)
    r = np.asarray(stats.source_rounds)[:rows].sum(0)
    self.gamma = g if self.gamma is None else self.gamma + g
    self.source_rounds = r if self.source_rounds is None else self.source_rounds + r

  def result(self) -> dict:
    acc, calls = self.accepted.sum(), self.calls.sum()
    return {
        "tau": (acc + calls) / max(calls, 1),
        "tau_ci": ci(np.stack([self.accepted + self.calls, self.calls], 1), ratio_of_sums),
        "target_calls": int(calls), "accepted": int(acc), "relaxed": int(self.relaxed.sum()),
        "relaxed_rate": float(self.relaxed.sum() / max(acc, 1)),
        "verified_per_call": float(self.verified.sum() / max(calls, 1)),
        "accept_rate_per_position": (self.accept_pos / np.maximum(self.offered_pos, 1)).tolist(),
        # rounds per verify length (0 = a plain step) and per drafting source
        "gamma_share": (self.gamma / max(self.gamma.sum(), 1)).tolist(),
        "source_share": (self.source_rounds / max(self.source_rounds.sum(), 1)).tolist(),
        # per prompt (summed over repeats), for paired comparisons between rows that
        # ran the same prompts and keys
        "accepted_per_prompt": self.accepted.astype(int).tolist(),
        "target_calls_per_prompt": self.calls.astype(int).tolist(),
    }


def per_prompt(values: Sequence[float], num_prompts: int) -> np.ndarray:
  """``[repeat * n]`` repeat-major values -> ``[n, repeat]``."""
  return np.asarray(values, np.float64).reshape(-1, num_prompts).T


def loglik_ci(per_row_mean: Sequence[float], lengths: Sequence[int], num_prompts: int):
  """Interval of the token-weighted mean log-likelihood from per-row means and lengths."""
  return ci(np.asarray(loglik_per_prompt(per_row_mean, lengths, num_prompts)), ratio_of_sums)


def loglik_per_prompt(per_row_mean: Sequence[float], lengths: Sequence[int],
                      num_prompts: int) -> list:
  """``[n]`` (log-likelihood sum, tokens) per prompt, summed over repeats: the pairs a
  paired comparison of two rows' log-likelihood per token resamples
  (:func:`experiments.common.bootstrap.paired_ratio_difference`)."""
  lens = np.asarray(lengths, np.float64)
  sums = np.nan_to_num(np.asarray(per_row_mean, np.float64)) * lens
  return np.stack([per_prompt(sums, num_prompts).sum(1),
                   per_prompt(lens, num_prompts).sum(1)], 1).tolist()


def fraction_ci(per_row: Sequence[float], num_prompts: int):
  """Interval of the mean of per-prompt fractions (each prompt's mean over repeats)."""
  return ci(per_prompt(per_row, num_prompts).mean(1))


def _pooled(per_repeat: list):
  """``[repeat][batch]`` (tokens, seconds) pairs summed over the repeats: ``[batch, 2]``."""
  return np.asarray(per_repeat, np.float64).sum(axis=0)


def speedup_interval(batch_spec: list, batch_target: list) -> dict:
  """Speedup over target-only with a 95% interval over prompt batches: tokens/s of
  the speculative runs over tokens/s of their paired target-only runs, each a ratio
  of sums (tokens, seconds) over the batches pooled across repeats, resampling the
  batches (each one prompt at batch size 1) once for both sides
  (:func:`experiments.common.bootstrap.paired_ratio_gain`).

  ``batch_spec`` / ``batch_target``: ``[repeat][batch]`` (tokens, seconds) pairs.
  Returns ``{"speedup", "ci95", "batches", "mde80"}``: the interval holds timing noise
  and the spread of the speedup across the prompts; ``mde80`` is the smallest change
  of the speedup (relative) such a design detects with 80% power."""
  spec, tgt = _pooled(batch_spec), _pooled(batch_target)
  if spec.ndim != 2 or spec.shape != tgt.shape or spec.shape[1] != 2:
    raise ValueError(f"batch_spec / batch_target must be [repeat][batch] (tokens, seconds) "
                     f"pairs of the same shape; got {spec.shape} and {tgt.shape}")
  if len(spec) < 2:
    raise ValueError(f"a speedup interval needs >= 2 batches, got {len(spec)}")
  g = paired_ratio_gain(spec, tgt)
  return {"speedup": 1.0 + g["diff"], "ci95": [1.0 + g["ci95"][0], 1.0 + g["ci95"][1]],
          "batches": g["prompts"], "mde80": g["mde80"]}


def paired_speed_gain(a: dict, b: dict) -> dict:
  """Tokens/s of row ``a`` over row ``b`` minus 1, both speculative rows of one run on
  the same prompts, keys and batches (e.g. MARS against lossless on one drafter): a
  ratio of sums (tokens, seconds) over the prompt batches pooled across repeats,
  paired bootstrap over the batches with SD and MDE
  (:func:`experiments.common.bootstrap.paired_ratio_gain`). ``a`` / ``b``: the rows'
  results, each with ``batch_timing``."""
  try:
    x, y = (_pooled(r["batch_timing"]["spec"]) for r in (a, b))
  except KeyError as e:
    raise ValueError("both rows need per-batch timings (result['batch_timing']); records "
                     "written before they were kept have none") from e
  if x.shape != y.shape:
    raise ValueError(f"the rows ran different batches: {x.shape} vs {y.shape}")
  return paired_ratio_gain(x, y)


def paired_speedup_gain(a: dict, b: dict) -> dict:
  """Speedup of row ``a`` over the speedup of row ``b`` minus 1, each row's speed read
  against the target-only runs timed beside it, so a machine that drifts between
  rows (minutes apart) cancels out; both rows ran the same prompts, keys and batches.

  Per batch, the speculative seconds are converted into target decode steps with the
  target-only rate measured on that batch next to them: ``x = (spec tokens, spec
  seconds * target tokens / target seconds)``, so ``R(x)`` is the row's speedup with
  per-batch normalisation; then a paired bootstrap over the batches with SD and MDE
  (:func:`experiments.common.bootstrap.paired_ratio_gain`). ``a`` / ``b``: the rows'
  results, each with ``batch_timing`` for both sides."""
  def normalised(res: dict) -> np.ndarray:
    try:
      spec, tgt = (_pooled(res["batch_timing"][k]) for k in ("spec", "target"))
    except KeyError as e:
      raise ValueError("both rows need per-batch timings of both sides "
                       "(result['batch_timing']['spec' and 'target'])") from e
    return np.stack([spec[:, 0], spec[:, 1] * tgt[:, 0] / tgt[:, 1]], 1)

  x, y = normalised(a), normalised(b)
  if x.shape != y.shape:
    raise ValueError(f"the rows ran different batches: {x.shape} vs {y.shape}")
  return paired_ratio_gain(x, y)


def round_cost_in_steps(res: dict) -> float:
  """Wall time of one speculative round (draft + verify + bookkeeping, prefill
  amortised) in units of one target-only decode step, from a row's per-batch timings:
  ``(spec seconds / target calls) / (target-only seconds / target-only tokens)``.
  It is the break-even tau: the row's speedup is ``tau / cost`` (up to tokens cut at
  EOS), so it says how much of a shortfall is acceptance and how much is cost."""
  try:
    spec, tgt = (_pooled(res["batch_timing"][k]) for k in ("spec", "target"))
  except KeyError as e:
    raise ValueError("the row needs per-batch timings (result['batch_timing']); records "
                     "written before they were kept have none") from e
  step = tgt[:, 1].sum() / tgt[:, 0].sum()
  return float(spec[:, 1].sum() / max(res["target_calls"], 1) / step)
