"""What every results table shares: where the records are and how a table is written
(no model, no JAX)."""

from __future__ import annotations

import os

from experiments.humaneval import summary as hs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = "benchmarks/results"


def path(rel: str) -> str:
  """A record's path relative to the repository root -> absolute."""
  return os.path.join(ROOT, rel)


def width_mde80(ci95) -> float:
  """MDE at 80% power from a 95% interval's width, reading the interval as +-z SE:
  (z_0.975 + z_0.8) * (high - low) / (2 z_0.975)."""
  return (hs.Z_ALPHA + hs.Z_POWER) * (ci95[1] - ci95[0]) / (2 * hs.Z_ALPHA)


def ci(lo_hi, fmt: str = "+.3f") -> str:
  """``[lo, hi]`` formatted."""
  return f"[{format(lo_hi[0], fmt)}, {format(lo_hi[1], fmt)}]"


def table(head: list[str], rows: list[list[str]]) -> str:
  """A markdown table."""
  lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
  return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def gain_cell(g: dict, verdict: bool = True) -> str:
  """A paired relative gain (:func:`experiments.common.bootstrap.paired_ratio_gain`'s
  dict) as ``+0.123 [lo, hi], MDE m: verdict``, the verdict better / worse when the
  interval excludes 0, else inconclusive (``verdict=False``: no verdict)."""
  out = f"{g['diff']:+.3f} {ci(g['ci95'])}, MDE {g['mde80']:.3f}"
  if not verdict:
    return out
  word = "better" if g["ci95"][0] > 0 else "worse" if g["ci95"][1] < 0 else "inconclusive"
  return f"{out}: {word}"


def speedup_cell(res: dict, verdict: bool = True) -> str:
  """A row's speedup: with its 95% interval over prompts and a verdict against 1 where
  the record has per-prompt timings (``speedup_pooled``,
  :func:`experiments.common.row_stats.speedup_interval`), else the median over
  repeats alone (``verdict=False``: the interval and MDE, no verdict)."""
  sp = res.get("speedup_pooled")
  if sp is None:
    return f"{res['speedup']:.2f}"
  lo, hi = sp["ci95"]
  out = f"{sp['speedup']:.2f} {ci(sp['ci95'], '.2f')}, MDE {sp['mde80']:.2f}"
  if not verdict:
    return out
  word = "faster" if lo > 1 else "slower" if hi < 1 else "inconclusive"
  return f"{out}: {word}"


def span(values, fmt: str = ".2f") -> str:
  """The range of ``values`` as ``lo-hi`` (``fmt`` each end), one value when both ends
  format alike."""
  lo, hi = min(values), max(values)
  return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else \
      f"{format(lo, fmt)}-{format(hi, fmt)}"
