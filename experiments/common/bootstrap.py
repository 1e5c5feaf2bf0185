"""Bootstrap confidence intervals over prompts (Efron's percentile method), and
the power of a paired comparison.

Every quality or tau number reported over a prompt set carries one: resample
the prompts with replacement, recompute the statistic, take the
``alpha / 2`` and ``1 - alpha / 2`` quantiles. A comparison of two methods run
on the same prompts resamples the prompts once for both (paired), and states
its minimum detectable effect at 80% power (:func:`mde80`).
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Callable, Sequence

import numpy as np

Z_ALPHA = NormalDist().inv_cdf(0.975)  # two-sided alpha 0.05
Z_POWER = NormalDist().inv_cdf(0.80)  # 80% power


def mde80(sd: float, n: int) -> float:
  """Minimum detectable effect at 80% power, two-sided alpha 0.05, of the mean of ``n``
  paired differences whose SD is ``sd``: ``(z_0.975 + z_0.8) * sd / sqrt(n)``
  (~2.80 sd / sqrt(n); normal approximation). A true difference this large is found
  (interval excludes 0) in ~80% of repetitions of the design; smaller ones mostly not."""
  if n < 1:
    raise ValueError(f"n={n!r} must be >= 1")
  return float((Z_ALPHA + Z_POWER) * sd / np.sqrt(n))


def bootstrap_ci(values: Sequence[float], statistic: Callable = np.mean,
                 num_resamples: int = 2000, alpha: float = 0.05, seed: int = 0
                 ) -> tuple[float, float]:
  """Percentile bootstrap ``(low, high)`` of ``statistic`` over ``values`` [n, ...]:
  one entry per prompt (e.g. each problem's pass fraction), resampled along axis 0.
  Ratios of sums need the pairs, e.g. tau over prompts from ``[n, 2]`` rows of
  (emitted, calls) with ``statistic=lambda a: a[:, 0].sum() / a[:, 1].sum()``."""
  if not 0 < alpha < 1:
    raise ValueError(f"alpha={alpha!r} must lie in (0, 1)")
  stats = bootstrap_distribution(values, statistic, num_resamples, seed)
  return float(np.quantile(stats, alpha / 2)), float(np.quantile(stats, 1 - alpha / 2))


def bootstrap_distribution(values: Sequence[float], statistic: Callable = np.mean,
                           num_resamples: int = 2000, seed: int = 0) -> np.ndarray:
  """``[num_resamples]`` values of ``statistic`` over resamples of ``values`` [n, ...] along
  axis 0 (the draws :func:`bootstrap_ci` takes its quantiles of; the same ``seed`` gives
  the same resamples), for intervals other than the percentile one and bias estimates."""
  x = np.asarray(values, dtype=np.float64)
  if x.ndim < 1 or len(x) == 0:
    raise ValueError(f"values must be a non-empty sequence, got shape {x.shape}")
  if num_resamples < 1:
    raise ValueError(f"num_resamples={num_resamples!r} must be >= 1")
  return np.array([statistic(x[i]) for i in _resamples(len(x), num_resamples, seed)])


def _resamples(n: int, num_resamples: int, seed: int) -> np.ndarray:
  """``[num_resamples, n]`` the indices each resample draws (one definition, so that
  :func:`bootstrap_distribution` and :func:`bootstrap_sums` draw the same resamples)."""
  return np.random.default_rng(seed).integers(0, n, size=(num_resamples, n))


def bootstrap_sums(values: Sequence, num_resamples: int = 2000, seed: int = 0) -> np.ndarray:
  """``[num_resamples, ...]`` the sums over axis 0 of the resamples of ``values`` [n, ...]
  that :func:`bootstrap_distribution` draws with the same ``seed``: for a statistic of
  sums (a ratio of sums, a count table) the whole bootstrap is one product of the
  resamples' multiplicities ``[num_resamples, n]`` with ``values``, instead of one
  Python call per resample."""
  x = np.asarray(values, dtype=np.float64)
  if x.ndim < 1 or len(x) == 0:
    raise ValueError(f"values must be a non-empty sequence, got shape {x.shape}")
  if num_resamples < 1:
    raise ValueError(f"num_resamples={num_resamples!r} must be >= 1")
  n = len(x)
  idx = _resamples(n, num_resamples, seed) + n * np.arange(num_resamples)[:, None]
  weights = np.bincount(idx.ravel(), minlength=num_resamples * n).reshape(num_resamples, n)
  return (weights.astype(np.float64) @ x.reshape(n, -1)).reshape((num_resamples,) + x.shape[1:])


def _ratio(pairs: np.ndarray) -> float:
  return float(pairs[:, 0].sum() / max(pairs[:, 1].sum(), 1e-300))


def paired_ratio_gain(x: Sequence, y: Sequence, num_resamples: int = 2000,
                      seed: int = 0) -> dict:
  """``R(x) / R(y) - 1`` for two methods run on the same ``n`` prompts, where ``R`` is a
  ratio of sums over prompts and ``x``, ``y`` are ``[n, 2]`` rows of (numerator,
  denominator) per prompt -- e.g. tau from (emitted tokens, target calls).

  Returns ``{"diff", "ci95", "prompts", "sd", "mde80", "excludes_zero"}``: the 95%
  percentile-bootstrap interval resamples the prompts once for both methods; ``sd`` is
  the SD of the per-prompt relative gains and ``mde80`` the gain this design detects
  with 80% power (:func:`mde80`).
  """
  return _paired(x, y, lambda a, b: a / b - 1.0, num_resamples, seed)


def pooled_paired_ratio_gain(groups: Sequence[Sequence[tuple]], num_resamples: int = 2000,
                             seed: int = 0) -> dict:
  """One gain over many paired cells: the geometric mean over cells of
  ``R(x) / R(y)``, minus 1 (``R`` a ratio of sums over prompts, as in
  :func:`paired_ratio_gain`), with a percentile-bootstrap interval.

  A decision between two drafters that reads eight cells (chain and tree, two
  temperatures, two prompt sets) one interval at a time either waits for one cell
  to resolve or, taking any cell that does, tests eight times at the 5% level.
  The pooled gain is one test. Cells that share prompts are not independent
  (the same 16 prompts serve T = 0 and T = 1, chain and tree), so each resample
  draws the prompts of a group once for every cell of that group.

  Args:
    groups: one entry per prompt set: a list of cells ``(x, y)``, each ``[n, 2]``
      rows of (numerator, denominator) per prompt for the two methods, every
      cell of a group over the same ``n`` prompts in the same order.
  Returns ``{"diff", "ci95", "cells", "prompts", "se", "mde80", "excludes_zero"}``:
  ``se`` is the SD of the bootstrap distribution and ``mde80 = (z_0.975 + z_0.8) se``,
  the pooled gain this design detects with 80% power (normal approximation, as
  :func:`mde80`).
  """
  cells = []
  for g, group in enumerate(groups):
    if not group:
      raise ValueError(f"groups[{g}] holds no cells")
    for x, y in group:
      x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
      if x.ndim != 2 or x.shape[1] != 2 or x.shape != y.shape or len(x) == 0:
        raise ValueError(f"groups[{g}]: cells must be pairs of [n, 2] rows of the same "
                         f"prompts; got {x.shape}, {y.shape}")
      if len(x) != len(np.asarray(group[0][0])):
        raise ValueError(f"groups[{g}]: every cell of a group runs the same prompts; got "
                         f"{len(x)} and {len(group[0][0])} rows")
      cells.append((g, x, y))
  if not cells:
    raise ValueError("groups holds no cells")
  sizes = [len(group[0][0]) for group in groups]

  def stat(index_of_group):
    logs = [np.log(_ratio(x[index_of_group[g]]) / max(_ratio(y[index_of_group[g]]), 1e-300))
            for g, x, y in cells]
    return float(np.exp(np.mean(logs)) - 1.0)

  rs = np.random.default_rng(seed)
  draws = np.array([stat([rs.integers(0, n, size=n) for n in sizes])
                    for _ in range(num_resamples)])
  lo, hi = (float(np.quantile(draws, q)) for q in (0.025, 0.975))
  se = float(np.std(draws, ddof=1)) if num_resamples > 1 else 0.0
  return {"diff": stat([np.arange(n) for n in sizes]), "ci95": [lo, hi], "cells": len(cells),
          "prompts": int(sum(sizes)), "se": se, "mde80": float((Z_ALPHA + Z_POWER) * se),
          "excludes_zero": bool(lo > 0 or hi < 0)}


def paired_ratio_difference(x: Sequence, y: Sequence, num_resamples: int = 2000,
                            seed: int = 0) -> dict:
  """``R(x) - R(y)`` for two methods run on the same ``n`` prompts, ``R`` a ratio of sums
  over prompts of ``[n, 2]`` rows (numerator, denominator) -- e.g. the token-weighted
  mean log-likelihood per token from (log-likelihood sum, tokens) per prompt, where a
  relative gain would flip sign with the (negative) scale.

  Returns ``{"diff", "ci95", "prompts", "sd", "mde80", "excludes_zero"}`` as
  :func:`paired_ratio_gain`, in the statistic's own units: the interval resamples the
  prompts once for both methods; ``sd`` is the SD of the per-prompt differences."""
  return _paired(x, y, lambda a, b: a - b, num_resamples, seed)


def _paired(x: Sequence, y: Sequence, contrast: Callable, num_resamples: int, seed: int
            ) -> dict:
  """``contrast(R(x), R(y))`` with its paired percentile-bootstrap interval, the SD of
  the per-prompt contrasts and the MDE at 80% power (the body of
  :func:`paired_ratio_gain` and :func:`paired_ratio_difference`)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.ndim != 2 or x.shape[1] != 2 or x.shape != y.shape or len(x) == 0:
    raise ValueError(f"x and y must be [n, 2] rows of the same prompts; got {x.shape}, {y.shape}")
  both = np.concatenate([x, y], 1)
  # the contrast of the two ratios of sums, for one [4] or many [R, 4] column sums
  of_sums = lambda t: contrast(t[..., 0] / np.maximum(t[..., 1], 1e-300),
                               t[..., 2] / np.maximum(t[..., 3], 1e-300))
  draws = of_sums(bootstrap_sums(both, num_resamples, seed))
  lo, hi = float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))
  per = contrast(x[:, 0] / np.maximum(x[:, 1], 1e-300), y[:, 0] / np.maximum(y[:, 1], 1e-300))
  sd = float(np.std(per, ddof=1)) if len(per) > 1 else 0.0
  return {"diff": float(of_sums(both.sum(0))), "ci95": [lo, hi], "prompts": len(x), "sd": sd,
          "mde80": mde80(sd, len(x)), "excludes_zero": bool(lo > 0 or hi < 0)}


def crossed_ratio_contrast(x: Sequence, y: Sequence, difference: bool = False,
                           num_resamples: int = 2000, seed: int = 0) -> dict:
  """``R(x) / R(y) - 1`` (or ``R(x) - R(y)`` with ``difference``) for a crossed design: a
  method run after each of ``S`` sessions on the same ``P`` prompts, ``x [S, P, 2]``
  (numerator, denominator) per session and prompt, against a method that does not
  depend on the session, ``y [P, 2]`` on the same prompts (e.g. an adapter carried from
  each of S conversations into P problems, against the frozen head).  ``R`` is a ratio
  of sums, ``R(x)`` over every session and prompt.

  The 95% percentile interval resamples sessions and prompts independently (both are
  samples: the sessions of adapters, the prompts of text), each resample of prompts
  shared by both methods.  Returns ``{"diff", "ci95", "sessions", "prompts", "se",
  "mde80", "excludes_zero"}`` with ``se`` the SD of the bootstrap distribution and
  ``mde80 = (z_0.975 + z_0.8) se`` (normal approximation)."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  if x.ndim != 3 or x.shape[2] != 2 or y.shape != x.shape[1:] or x.size == 0:
    raise ValueError(f"x must be [S, P, 2] and y [P, 2] of the same prompts; got {x.shape}, "
                     f"{y.shape}")
  contrast = (lambda a, b: a - b) if difference else (lambda a, b: a / b - 1.0)

  def stat(si, pi):
    cx = x[si][:, pi].sum(axis=(0, 1))
    cy = y[pi].sum(axis=0)
    return contrast(cx[0] / max(cx[1], 1e-300), cy[0] / max(cy[1], 1e-300))

  s, p = x.shape[:2]
  rs = np.random.default_rng(seed)
  draws = np.array([stat(rs.integers(0, s, size=s), rs.integers(0, p, size=p))
                    for _ in range(num_resamples)])
  lo, hi = (float(np.quantile(draws, q)) for q in (0.025, 0.975))
  se = float(np.std(draws, ddof=1)) if num_resamples > 1 else 0.0
  return {"diff": float(stat(np.arange(s), np.arange(p))), "ci95": [lo, hi], "sessions": s,
          "prompts": p, "se": se, "mde80": float((Z_ALPHA + Z_POWER) * se),
          "excludes_zero": bool(lo > 0 or hi < 0)}
