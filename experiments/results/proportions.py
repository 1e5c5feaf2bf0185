"""Intervals of proportions for the results tables (no model, no JAX)."""

from __future__ import annotations

import math

from experiments.humaneval import summary as hs


def wilson(k: int, n: int, z: float = hs.Z_ALPHA) -> tuple[float, float]:
  """Wilson score 95% interval of a proportion k / n."""
  p = k / n
  mid = (p + z * z / (2 * n)) / (1 + z * z / n)
  half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
  return max(0.0, mid - half), min(1.0, mid + half)


def two_proportions(k1: int, n1: int, k2: int, n2: int) -> dict:
  """p1 - p2 with its Wald 95% interval and MDE at 80% power (the same SE)."""
  p1, p2 = k1 / n1, k2 / n2
  se = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
  d = p1 - p2
  return {"diff": d, "ci95": (d - hs.Z_ALPHA * se, d + hs.Z_ALPHA * se),
          "mde80": (hs.Z_ALPHA + hs.Z_POWER) * se}
