"""Families of comparisons: a table that gives a verdict per cell corrects for how
many cells it tests.

A table's cells that answer one question (every drafter's speedup against 1; every
theta's tau against lossless) form a **family** of ``m`` tests. A cell whose 95%
interval excludes the null is a win *uncorrected*; with ``m`` cells, about ``0.05 m``
such wins come by chance. The family-wise correction here is Holm's step-down
(:func:`holm`) at 5% over the family, on p-values read from each cell's own 95%
interval (:func:`p_from_interval`: the interval read as +-1.96 standard errors on
the side facing the null -- the reading the MDE columns use, so a cell's
uncorrected verdict and its p < 0.05 agree).

Verdict vocabulary (:meth:`Family.verdict`):

* ``<word>`` (e.g. faster, better) -- the interval excludes the null and Holm over
  the family keeps it;
* ``<word>, exploratory`` -- the interval excludes the null, Holm over the family
  does not keep it: a lead to retest, not a finding;
* ``inconclusive`` -- the interval holds the null;
* ``; estimate below its MDE`` appended to a win whose estimate is closer to the
  null than its own MDE at 80% power: the size of such a win is likely inflated.

:func:`family_note` is the line printed under the table, defining the family.
"""

from __future__ import annotations

import dataclasses
import math

Z95 = 1.959963984540054
ALPHA = 0.05


def _normal_sf(z: float) -> float:
  return 0.5 * math.erfc(z / math.sqrt(2.0))


def p_from_interval(estimate: float, ci95, null: float) -> float:
  """Two-sided p-value of ``estimate`` against ``null`` from its 95% interval, read as
  +-1.96 standard errors on the side that faces the null (1.0 at the null; 0.0 when
  that side has zero width and the estimate is off the null)."""
  lo, hi = ci95
  if not lo <= estimate <= hi:
    raise ValueError(f"estimate={estimate!r} lies outside its interval ci95={tuple(ci95)!r}")
  if estimate == null:
    return 1.0
  half = (estimate - lo) if estimate > null else (hi - estimate)
  if half <= 0:
    return 0.0
  return min(1.0, 2.0 * _normal_sf(abs(estimate - null) / (half / Z95)))


def holm(pvalues, alpha: float = ALPHA) -> list[bool]:
  """Holm's step-down: which hypotheses are rejected with family-wise error ``alpha``
  (the i-th smallest p-value against ``alpha / (m - i)``, stopping at the first that
  fails)."""
  if not 0 < alpha < 1:
    raise ValueError(f"alpha={alpha!r}: must be in (0, 1)")
  m = len(pvalues)
  order = sorted(range(m), key=lambda i: pvalues[i])
  keep = [False] * m
  for rank, i in enumerate(order):
    if pvalues[i] > alpha / (m - rank):
      break
    keep[i] = True
  return keep


@dataclasses.dataclass(frozen=True)
class Test:
  """One cell's comparison: ``estimate`` with its 95% interval against ``null``, and
  its MDE at 80% power (None when the table has none)."""

  key: object
  estimate: float
  ci95: tuple
  null: float
  mde: float | None = None

  @property
  def p(self) -> float:
    return p_from_interval(self.estimate, self.ci95, self.null)

  @property
  def uncorrected_win(self) -> bool:
    return not self.ci95[0] <= self.null <= self.ci95[1]


@dataclasses.dataclass(frozen=True)
class Family:
  """The cells of a table that answer one question; ``definition`` says which (it is
  printed under the table); ``up`` / ``down`` are the verdict words for an estimate
  above / below the null, ``none`` the word for an interval that holds the null."""

  name: str
  definition: str
  tests: tuple
  up: str = "better"
  down: str = "worse"
  none: str = "inconclusive"

  def __post_init__(self):
    keys = [t.key for t in self.tests]
    if len(set(keys)) != len(keys):
      raise ValueError(f"family {self.name!r}: repeated cell keys {keys}")

  @property
  def m(self) -> int:
    return len(self.tests)

  def kept(self) -> dict:
    """``{key: True}`` for the cells Holm keeps over the family."""
    return dict(zip([t.key for t in self.tests], holm([t.p for t in self.tests])))

  def verdict(self, key) -> str:
    """The corrected verdict of the cell ``key`` (vocabulary in the module docstring)."""
    test = next((t for t in self.tests if t.key == key), None)
    if test is None:
      raise KeyError(f"family {self.name!r} has no cell {key!r}")
    if not test.uncorrected_win:
      return self.none
    word = self.up if test.estimate > test.null else self.down
    out = word if self.kept()[key] else f"{word}, exploratory"
    if test.mde is not None and abs(test.estimate - test.null) < test.mde:
      out += "; estimate below its MDE"
    return out


def family_note(*families: Family) -> str:
  """The line under a table: each family's definition, size and how many of its
  uncorrected wins hold after Holm."""
  parts = []
  for f in families:
    wins = [t for t in f.tests if t.uncorrected_win]
    kept = f.kept()
    held = sum(kept[t.key] for t in wins)
    parts.append(f"*{f.name}*: {f.definition} (m = {f.m}; {len(wins)} interval(s) exclude "
                 f"the null, {held} hold after Holm)")
  return ("Families (Holm's step-down at 5% family-wise over each; p-values read from each "
          "cell's 95% interval; a win Holm does not keep is *exploratory*; *estimate below "
          "its MDE*: a win smaller than its own MDE at 80% power, likely inflated): "
          + "; ".join(parts) + ".")


class VerdictColumn:
  """A table column of paired gains whose verdicts are corrected over the column.

  While the rows are built, :meth:`cell` records each gain (a dict with ``diff``,
  ``ci95``, ``mde80``) and returns a placeholder; :meth:`fill` then writes every
  placeholder as ``+0.123 [lo, hi], MDE m: <verdict over the column's family>``."""

  def __init__(self, name: str, definition: str, up: str = "better", down: str = "worse"):
    self.name, self.definition, self.up, self.down = name, definition, up, down
    self.gains: dict = {}

  def cell(self, key, gain: dict) -> str:
    if key in self.gains:
      raise ValueError(f"column {self.name!r}: cell {key!r} recorded twice")
    self.gains[key] = gain
    return f"\x00{self.name}\x00{len(self.gains) - 1}\x00"

  def family(self) -> Family:
    return Family(self.name, self.definition, tuple(
        Test(k, g["diff"], tuple(g["ci95"]), 0.0, g["mde80"]) for k, g in self.gains.items()),
        up=self.up, down=self.down)

  def fill(self, rows: list) -> list:
    from experiments.results.markdown import gain_cell
    family = self.family()
    texts = {f"\x00{self.name}\x00{i}\x00": f"{gain_cell(g, False)}: {family.verdict(k)}"
             for i, (k, g) in enumerate(self.gains.items())}
    return [[texts.get(c, c) if isinstance(c, str) else c for c in row] for row in rows]


def single_verdict(gain: dict, up: str = "better", down: str = "worse") -> str:
  """The verdict of one test outside any family (a pooled test the table defines as
  its one decision): no correction, the MDE flag as in :meth:`Family.verdict`."""
  test = Test(0, gain["diff"], tuple(gain["ci95"]), 0.0, gain["mde80"])
  return Family("single", "one test", (test,), up=up, down=down).verdict(0)


# ---------------------------------------------------------------- verdicts against a paper's effect


def widened(estimate: float, ci95, m: int) -> tuple:
  """``ci95`` widened to the Bonferroni level ``1 - 0.05 / m``: each side's half-width
  (estimate to bound) scaled by ``z(1 - 0.025 / m) / z(0.975)``."""
  from statistics import NormalDist
  if m < 1:
    raise ValueError(f"m={m!r}: a family has at least one test")
  lo, hi = ci95
  scale = NormalDist().inv_cdf(1 - ALPHA / (2 * m)) / Z95
  return (estimate - (estimate - lo) * scale, estimate + (hi - estimate) * scale)


def _undecided(verdict: str) -> bool:
  """An inconclusive reading (possibly with a parenthesis after it) or no reading."""
  return verdict.startswith("inconclusive") or verdict in ("", "-")


@dataclasses.dataclass(frozen=True)
class PaperFamily:
  """Cells read against a paper's effect (agree / differ / inconclusive,
  :func:`experiments.humaneval.summary.verdict`), corrected by Bonferroni: a verdict
  stands when the interval widened to ``1 - 0.05 / m`` (:func:`widened`) gives the same
  verdict, else it is ``<verdict>, exploratory``. ``cells``: ``(key, estimate, ci95,
  read)`` with ``read(interval) -> verdict``."""

  name: str
  definition: str
  cells: tuple

  def verdict(self, key) -> str:
    cell = next((c for c in self.cells if c[0] == key), None)
    if cell is None:
      raise KeyError(f"family {self.name!r} has no cell {key!r}")
    _, est, ci95, read = cell
    raw = read(tuple(ci95))
    if _undecided(raw):
      return raw
    return raw if read(widened(est, ci95, len(self.cells))) == raw else f"{raw}, exploratory"

  def note(self) -> str:
    verdicts = [self.verdict(c[0]) for c in self.cells]
    decided = [v for v in verdicts if not _undecided(v)]
    kept = [v for v in decided if not v.endswith("exploratory")]
    return (f"Family *{self.name}*: {self.definition} (m = {len(self.cells)}; each verdict "
            f"re-read on its interval widened to the Bonferroni level 1 - 0.05/m; "
            f"{len(decided)} verdict(s) other than inconclusive, {len(kept)} stand after the "
            "correction, the others are marked *exploratory*).")


def range_verdict(ci95, effect_range) -> str:
  """agree / differ / inconclusive of an interval against a paper's effect given as a
  range (``(low, high)``, one sign): inconclusive when the interval holds 0 and
  reaches the range, agree when it excludes 0 on the range's side, differ otherwise
  (it holds 0 but misses the whole range, or lies on the other side of 0)."""
  lo, hi = ci95
  rlo, rhi = effect_range
  if lo > hi or rlo > rhi or (rlo < 0 < rhi) or rlo == rhi == 0:
    raise ValueError(f"ci95={tuple(ci95)!r} / effect_range={tuple(effect_range)!r}: need "
                     "low <= high and a range of one sign")
  if lo <= 0 <= hi:
    return "inconclusive" if lo <= rhi and hi >= rlo else "differ"
  return "agree" if (lo > 0) == (rlo > 0) else "differ"
