"""Families of comparisons (experiments.results.families): p-values from a cell's own
interval, Holm's step-down, and the corrected verdict vocabulary.

Broken variants caught: the uncorrected verdict (a cell whose interval barely
excludes the null, out of eight, read as "faster" -- the old tables' reading of the
prompt-lookup speedup); a correction that ignores the family size; a win below its
MDE not flagged; p-values that disagree with the interval at 5%.
"""

import pytest

from experiments.results import families as fam
from experiments.results import tables
from experiments.results.markdown import gain_cell


def test_p_value_agrees_with_the_interval_at_five_percent():
  # the null exactly at the interval's edge: p = 0.05 (the 95% interval's reading)
  assert fam.p_from_interval(0.1, (0.0, 0.3), 0.0) == pytest.approx(0.05, rel=1e-9)
  assert fam.p_from_interval(0.1, (0.02, 0.3), 0.0) < 0.05 < fam.p_from_interval(
      0.1, (-0.02, 0.3), 0.0)
  assert fam.p_from_interval(1.0, (0.9, 1.1), 1.0) == 1.0
  assert fam.p_from_interval(0.5, (0.5, 0.5), 0.0) == 0.0  # no spread, off the null
  with pytest.raises(ValueError, match="outside its interval"):
    fam.p_from_interval(2.0, (0.0, 1.0), 0.0)


def test_holm_steps_down_and_stops():
  assert fam.holm([0.01, 0.04, 0.03]) == [True, False, False]  # 0.03 > 0.05 / 2
  assert fam.holm([0.01, 0.02, 0.03]) == [True, True, True]   # 0.0167, 0.025, 0.05
  assert fam.holm([0.04]) == [True]
  with pytest.raises(ValueError, match="alpha=1.5"):
    fam.holm([0.01], alpha=1.5)


def _eight(marginal_lo=1.01):
  """One speedup whose interval barely excludes 1 among seven that hold it."""
  tests = [fam.Test("lookup", 1.14, (marginal_lo, 1.28), 1.0, 0.21)]
  tests += [fam.Test(f"d{i}", 0.98, (0.9, 1.06), 1.0, 0.1) for i in range(7)]
  return fam.Family("speedup vs 1", "every drafter's speedup", tuple(tests),
                    up="faster", down="slower")


def test_a_marginal_win_in_a_family_of_eight_is_exploratory_and_below_its_mde():
  f = _eight()
  assert f.verdict("lookup") == "faster, exploratory; estimate below its MDE"
  assert f.verdict("d0") == "inconclusive"
  # the same cell alone is a finding (still flagged below its MDE)
  alone = fam.Family("one", "one", (f.tests[0],), up="faster")
  assert alone.verdict("lookup") == "faster; estimate below its MDE"
  # a strong win survives Holm over the eight
  strong = fam.Family("s", "s", (fam.Test("x", 1.5, (1.3, 1.7), 1.0, 0.2),) + f.tests[1:],
                      up="faster")
  assert strong.verdict("x") == "faster"
  note = fam.family_note(f)
  assert "*speedup vs 1*: every drafter's speedup (m = 8; 1 interval(s) exclude" in note
  assert "0 hold after Holm" in note
  with pytest.raises(KeyError, match="no cell 'nope'"):
    f.verdict("nope")
  with pytest.raises(ValueError, match="repeated cell keys"):
    fam.Family("d", "d", (f.tests[1], f.tests[1]))


def test_verdict_column_fills_placeholders_with_corrected_verdicts():
  col = fam.VerdictColumn("gains", "two cells")
  g_win = {"diff": 0.2, "ci95": (0.1, 0.3), "mde80": 0.1}
  g_null = {"diff": 0.0, "ci95": (-0.1, 0.1), "mde80": 0.1}
  rows = [["a", col.cell("a", g_win)], ["b", col.cell("b", g_null)], ["c", "-"]]
  filled = col.fill(rows)
  assert filled[0][1] == gain_cell(g_win, False) + ": better"
  assert filled[1][1].endswith(": inconclusive") and filled[2] == ["c", "-"]
  with pytest.raises(ValueError, match="recorded twice"):
    col.cell("a", g_win)
  assert fam.single_verdict({"diff": 0.024, "ci95": (0.005, 0.044), "mde80": 0.028}) == \
      "better; estimate below its MDE"


def test_committed_speed_record_reads_the_lookup_speedup_as_exploratory():
  text = tables.TABLES["speed_smollm2"]()
  row = next(line for line in text.splitlines()
             if line.startswith("| lookup_chain | lossless | 0 |"))
  assert "1.14 [1.02, 1.28], MDE 0.21: faster, exploratory; estimate below its MDE" in row
  assert "*speedup vs 1*: every speculative row's speedup" in text


def test_range_verdict_reads_the_whole_paper_range():
  """The broken variant: reading only the range's midpoint called an interval that
  holds 0 and +2.2% (the low end of +2.2% to +5.7%) "differ"."""
  rng = (0.022, 0.057)
  assert fam.range_verdict((-0.051, 0.033), rng) == "inconclusive"  # holds 0 and +2.2%
  assert fam.range_verdict((-0.05, 0.01), rng) == "differ"           # holds 0, misses it
  assert fam.range_verdict((0.01, 0.09), rng) == "agree"
  assert fam.range_verdict((-0.09, -0.01), rng) == "differ"
  with pytest.raises(ValueError, match="one sign"):
    fam.range_verdict((0.0, 0.1), (-0.1, 0.1))


def test_paper_family_marks_verdicts_bonferroni_does_not_keep():
  lo, hi = fam.widened(0.0, (-0.1, 0.1), 8)
  assert lo == pytest.approx(-0.1 * 2.7344 / 1.96, rel=1e-3) and hi == pytest.approx(-lo)
  read = lambda ci: fam.range_verdict(ci, (0.07, 0.10))
  f = fam.PaperFamily("block", "eight cells", tuple(
      [("near", 0.032, (-0.009, 0.066), read), ("far", -0.04, (-0.08, -0.02), read)]
      + [(i, 0.0, (-0.05, 0.08), read) for i in range(6)]))
  assert f.verdict("near") == "differ, exploratory"  # widened, it reaches +7%
  assert f.verdict("far") == "differ" and f.verdict(0) == "inconclusive"
  assert "m = 8" in f.note() and "2 verdict(s) other than inconclusive, 1 stand" in f.note()
  with pytest.raises(ValueError, match="m=0"):
    fam.widened(0.0, (-1, 1), 0)


def test_humaneval_claims_are_corrected_over_their_family():
  from experiments.humaneval import summary as hs
  row = lambda lo, hi: {"diff": {"diff": (lo + hi) / 2, "ci95": (lo, hi)}, "paper_effect": 0.0,
                        "margin": 0.01, "verdict": hs.verdict((lo, hi), 0.0, 0.01)}
  prows = [row(-0.079, -0.018)] + [row(-0.04, 0.04) for _ in range(11)]
  assert prows[0]["verdict"] == "differ"
  assert hs.correct_verdicts(prows)[0]["verdict"] == "differ, exploratory"
  assert hs.correct_verdicts(prows[:1])[0]["verdict"] == "differ"  # alone, it stands
  text = tables.TABLES["claims_humaneval"]()
  assert "Family *paper claims on HumanEval*: every row of this table (m = 12)" in text
