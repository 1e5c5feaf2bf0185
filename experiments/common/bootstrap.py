"""Bootstrap confidence intervals over prompts (Efron's percentile method).

Every quality or tau number reported over a prompt set carries one: resample
the prompts with replacement, recompute the statistic, take the
``alpha / 2`` and ``1 - alpha / 2`` quantiles.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def bootstrap_ci(values: Sequence[float], statistic: Callable = np.mean,
                 num_resamples: int = 2000, alpha: float = 0.05, seed: int = 0
                 ) -> tuple[float, float]:
  """Percentile bootstrap ``(low, high)`` of ``statistic`` over ``values`` [n, ...]:
  one entry per prompt (e.g. each problem's pass fraction), resampled along axis 0.
  Ratios of sums need the pairs, e.g. tau over prompts from ``[n, 2]`` rows of
  (emitted, calls) with ``statistic=lambda a: a[:, 0].sum() / a[:, 1].sum()``."""
  x = np.asarray(values, dtype=np.float64)
  if x.ndim < 1 or len(x) == 0:
    raise ValueError(f"values must be a non-empty sequence, got shape {x.shape}")
  if not 0 < alpha < 1:
    raise ValueError(f"alpha={alpha!r} must lie in (0, 1)")
  if num_resamples < 1:
    raise ValueError(f"num_resamples={num_resamples!r} must be >= 1")
  rs = np.random.default_rng(seed)
  idx = rs.integers(0, len(x), size=(num_resamples, len(x)))
  stats = np.array([statistic(x[i]) for i in idx])
  return float(np.quantile(stats, alpha / 2)), float(np.quantile(stats, 1 - alpha / 2))
