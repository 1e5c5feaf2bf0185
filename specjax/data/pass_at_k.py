"""The unbiased pass@k estimator (Chen et al. 2021, "Evaluating Large Language
Models Trained on Code", eq. 1): with ``n`` samples of which ``c`` pass,

    pass@k = 1 - C(n - c, k) / C(n, k),

computed as ``1 - prod_{i = n-c+1}^{n} (1 - k / i)`` (numerically stable, as in
the paper's reference code). Averaged over problems for the benchmark score.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
  """Probability that at least one of ``k`` of the ``n`` samples (``c`` correct) passes."""
  for name, v in (("n", n), ("c", c), ("k", k)):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
      raise TypeError(f"{name}={v!r} must be an int")
  if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
    raise ValueError(f"need n >= 1, 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
  if n - c < k:
    return 1.0
  return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def mean_pass_at_k(num_samples: Sequence[int], num_correct: Sequence[int], k: int) -> float:
  """Mean of :func:`pass_at_k` over problems (``num_samples[i]``, ``num_correct[i]``)."""
  if len(num_samples) != len(num_correct) or not len(num_samples):
    raise ValueError(f"num_samples (len {len(num_samples)}) and num_correct "
                     f"(len {len(num_correct)}) must be non-empty and of equal length")
  return float(np.mean([pass_at_k(int(n), int(c), k) for n, c in zip(num_samples, num_correct)]))
