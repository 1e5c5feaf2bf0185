"""Power and verdicts of the HumanEval summary (:func:`mde80`, :func:`verdict`,
:func:`power_rows`) and the papers' claims they read (offline, no JAX)."""

import numpy as np
import pytest

from experiments.results import paper_claims as pc
from experiments.humaneval.summary import (Z_ALPHA, Z_POWER, mde80, paired_difference,
                                           power_rows, verdict)


def _simulated_power(mde_fn, n: int = 80, sd: float = 0.15, sims: int = 4000) -> float:
  """Share of simulated paired designs (n differences ~ N(mde, sd)) whose two-sided
  z-test at alpha 0.05 rejects 0, with the effect set to ``mde_fn(sd, n)``."""
  rng = np.random.default_rng(0)
  d = rng.normal(mde_fn(sd, n), sd, size=(sims, n))
  z = d.mean(1) / (d.std(1, ddof=1) / np.sqrt(n))
  return float(np.mean(np.abs(z) > Z_ALPHA))


def test_mde_is_detected_with_80_percent_power():
  """At the MDE the design rejects 0 in ~80% of repetitions; two broken variants --
  z_0.975 alone (50% power) and no sqrt(n) (a far larger 'MDE', ~100%) -- miss it."""
  assert _simulated_power(mde80) == pytest.approx(0.80, abs=0.03)
  assert _simulated_power(lambda sd, n: Z_ALPHA * sd / np.sqrt(n)) == pytest.approx(0.5, abs=0.04)
  assert _simulated_power(lambda sd, n: (Z_ALPHA + Z_POWER) * sd) > 0.99
  assert mde80(0.2, 100) == pytest.approx(2.8016 * 0.02, rel=1e-4)
  with pytest.raises(ValueError):
    mde80(0.1, 0)


# (interval, paper's effect on our scale, margin, verdict)
CASES = [
    ((-0.038, 0.054), -0.0089, 0.0, "inconclusive"),  # holds 0 and the paper's effect
    ((-0.038, 0.054), -0.063, 0.0, "differ"),         # holds 0, excludes the paper's
    ((0.31, 0.38), 0.24, 0.0, "agree"),               # excludes 0 on the paper's side
    ((0.01, 0.05), -0.02, 0.0, "differ"),             # the other side of 0
    ((-0.079, -0.018), 0.0, 0.006, "differ"),         # no-loss claim, wholly outside the margin
    ((-0.008, 0.058), 0.0, 0.0025, "inconclusive"),   # no-loss claim, reaches past the margin
    ((-0.004, 0.005), 0.0, 0.006, "agree"),           # no-loss claim, inside the margin
    ((-0.01, 0.01), 0.0, 0.0, "inconclusive"),        # no margin: holds 0 and the claim
]


def _mismatches(fn) -> list:
  return [c for c in CASES if fn(c[0], c[1], c[2]) != c[3]]


def test_verdict_reads_the_interval_against_the_paper():
  assert _mismatches(verdict) == []


def test_a_verdict_that_reads_no_loss_into_zero_is_caught():
  """The earlier docs' reading -- 'agree' whenever the interval includes 0 -- turns the
  inconclusive cases into agreement."""
  broken = lambda ci, effect, margin: "agree" if ci[0] <= 0 <= ci[1] else "differ"
  bad = _mismatches(broken)
  assert CASES[0] in bad and CASES[5] in bad


def test_verdict_refuses_a_reversed_interval():
  with pytest.raises(ValueError):
    verdict((0.1, -0.1), 0.0)


def test_paired_difference_carries_sd_and_mde():
  a = {f"P{i}": float(i % 2) for i in range(40)}
  b = {f"P{i}": 0.0 for i in range(40)}
  d = paired_difference(a, b, num_resamples=200)
  sd = np.std([x for x in a.values()], ddof=1)
  assert d["sd"] == pytest.approx(sd) and d["mde80"] == pytest.approx(mde80(sd, 40))


def _rows(method, diff, lo, hi, ref=0.06, t=0.0, baseline=None):
  """Summary rows of a target (pass@1 ``ref``) and one method."""
  d = {"diff": diff, "ci95": [lo, hi], "problems": 164, "excludes_zero": lo > 0 or hi < 0,
       "sd": 0.2, "mde80": mde80(0.2, 164)}
  rows = [{"method": "target", "temperature": t, "pass@1": ref, "vs_target": None,
           "vs_baseline": None}]
  if baseline:
    rows.append({"method": baseline, "temperature": t, "pass@1": ref, "vs_target": None,
                 "vs_baseline": None})
  rows.append({"method": method, "temperature": t, "pass@1": ref + diff, "vs_target": d,
               "vs_baseline": {"baseline": baseline, **d} if baseline else None})
  return rows


def test_power_rows_read_each_method_against_its_claim():
  """MARS against the target with the no-loss margin; a truncation rule against its
  matched baseline with the paper's relative gap at our baseline's pass@1; a rule no
  paper claims anything about gets MDE but no verdict."""
  [mars] = power_rows(_rows("eagle3_chain:mars:theta=0.9", -0.049, -0.079, -0.018))
  assert mars["compared_with"] == "target" and mars["margin"] == pytest.approx(0.006)
  assert mars["verdict"] == "differ"
  b = "baseline:target:typical:eps=0.09"
  rows = _rows("eagle3_tree:typical:eps=0.09", 0.004, -0.038, 0.054, ref=0.092, t=0.7,
               baseline=b)
  [typ] = power_rows(rows)
  assert typ["compared_with"] == b and typ["verdict"] == "inconclusive"
  assert typ["paper_effect"] == pytest.approx(pc.GAP_CLAIMS[("typical", "eagle3")].relative * 0.092)
  [cos] = power_rows(_rows("eagle3_chain:cos:lam=0.4", -0.03, -0.05, -0.01))
  assert cos["verdict"] is None and cos["diff"]["mde80"] > 0


def test_paper_gaps_are_the_table_means():
  typ = pc.GAP_CLAIMS[("typical", "eagle3")]
  assert typ.gap_points == pytest.approx((-6.28 - 5.29 - 8.82 - 4.90) / 4)
  assert typ.relative == pytest.approx(typ.gap_points / ((76.12 + 62.17 + 36.73 + 86.30) / 4))
  assert pc.claim_for("draft_chain:typical:eps=0.09") is pc.GAP_CLAIMS[("typical", "sd")]
  assert pc.claim_for("eagle3_tree:lossless") is pc.NO_LOSS_CLAIMS["lossless"]
  assert pc.claim_for("baseline:target:typical:eps=0.09") is None
  lo, hi = pc.mars_tau_gain_range()
  assert lo < pc.mars_tau_gain_mean() < hi
