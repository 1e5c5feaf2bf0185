"""Information gain of SV's companion signals with an interval over prompts
(experiments/sv/information.py) and the companion table that reads the committed
calibration records (experiments/results/sv_companion_tables.py). No model, numpy only."""

import json

import numpy as np
import pytest

from experiments.results import sv_companion_tables as sct
from experiments.sv import information as inf
from experiments.sv.calibrate import _compact
from specjax.policies import calibration as cal


def _records(num_prompts=20, per_prompt=60, a_weight=1.0, seed=0, prompt_effect=0.0):
  """Synthetic records: P(accept) = 0.2 + 0.6 (a_weight a + (1 - a_weight) u) with u
  independent noise, plus a per-prompt shift of +-prompt_effect; S uniform noise."""
  rs = np.random.RandomState(seed)
  n = num_prompts * per_prompt
  row = np.repeat(np.arange(num_prompts), per_prompt)
  s, a, u = rs.rand(n), rs.rand(n), rs.rand(n)
  shift = np.where(rs.rand(num_prompts) < 0.5, -prompt_effect, prompt_effect)[row]
  p = np.clip(0.2 + 0.6 * (a_weight * a + (1 - a_weight) * u) + shift, 0.01, 0.99)
  x = (rs.rand(n) < p).astype(np.int64)
  return inf.CalibrationRecords(s=s, a=a, accepted=x, row=row, prompt_set=row % 2)


def test_counts_reproduce_the_calibration_report():
  """The per-prompt count tables summed give exactly the plug-in report of
  specjax.policies.calibration on the same bins (S alone and (S, A))."""
  rec = _records()
  e = cal.fixed_edges(5)
  ref = cal.information_report(rec.s, rec.a, rec.accepted, e, e)
  rows, counts = inf.prompt_counts(rec, e, e, "SA")
  assert counts.shape == (20, 25, 2) and counts.sum() == len(rec.s)
  np.testing.assert_array_equal(rows, np.arange(20))
  got = inf.information_of_counts(counts.sum(0))
  assert np.isclose(got["H_X"], ref["H_X"]) and np.isclose(got["H_X_given"], ref["H_X_given_SA"])
  assert np.isclose(got["ig_frac"], ref["ig_frac"])
  _, cs = inf.prompt_counts(rec, e, e, "S")
  assert cs.shape == (20, 5, 2)
  assert np.isclose(inf.information_of_counts(cs.sum(0))["ig_frac"], ref["ig_S_frac"])


def test_interval_resamples_prompts_not_records():
  """One prompt holding every record: resampling prompts cannot move the estimate, so the
  interval is the point. A record-level bootstrap (the broken variant) would give an
  interval of width > 0.01 here (checked below on the same records)."""
  rec = _records(num_prompts=1, per_prompt=2000)
  e = cal.fixed_edges(5)
  g = inf.gain_with_interval(rec, e, e, "SA", num_resamples=200)
  assert g["prompts"] == 1 and g["ig_frac_ci"][0] == g["ig_frac_ci"][1] == pytest.approx(
      g["ig_frac"]) == pytest.approx(g["ig_frac_corrected"])
  per_record = inf.CalibrationRecords(rec.s, rec.a, rec.accepted, np.arange(2000),
                                      rec.prompt_set)
  wide = inf.gain_with_interval(per_record, e, e, "SA", num_resamples=200)["ig_frac_ci"]
  assert wide[1] - wide[0] > 0.01


def test_interval_covers_and_separates():
  """20 prompts x 60 records, A informative (true IG/H around 0.16): the basic interval
  excludes 0 and holds the bias-corrected value; S alone carries only the plug-in bias,
  and its interval lies below the (S, A) estimate."""
  rec = _records()
  e = cal.fixed_edges(5)
  sa = inf.gain_with_interval(rec, e, e, "SA", num_resamples=500)
  s_only = inf.gain_with_interval(rec, e, e, "S", num_resamples=500)
  assert sa["ig_frac_ci"][0] < sa["ig_frac_corrected"] < sa["ig_frac_ci"][1]
  assert sa["ig_frac_ci"][0] > 0.05 and sa["ig_frac_corrected"] < sa["ig_frac"]
  bias = inf.plugin_bias_bits(s_only["n"], 5) / s_only["H_X"]
  assert s_only["ig_frac"] < 3 * bias + 0.01 < sa["ig_frac"]
  assert s_only["ig_frac_ci"][1] < sa["ig_frac"]


@pytest.mark.parametrize("seed", range(5))
def test_basic_interval_holds_a_zero_gain_the_percentile_one_misses(seed):
  """X independent of (S, A), 20 prompts x 60 records on 25 bins: the true gain is 0 but
  the plug-in one is positive, and resampled prompts inflate it further. The basic
  interval holds 0 on every seed; the percentile interval of the same draws (the broken
  variant) lies above 0 on every one of these seeds."""
  from experiments.common.bootstrap import bootstrap_sums
  rs = np.random.RandomState(seed)
  n = 1200
  row = np.repeat(np.arange(20), 60)
  rec = inf.CalibrationRecords(rs.rand(n), rs.rand(n), (rs.rand(n) < 0.5).astype(int), row,
                               row % 2)
  e = cal.fixed_edges(5)
  g = inf.gain_with_interval(rec, e, e, "SA", num_resamples=500)
  assert g["ig_frac"] > 0 and g["ig_frac_ci"][0] <= 0 <= g["ig_frac_ci"][1]
  _, counts = inf.prompt_counts(rec, e, e)
  draws = inf._ig_frac_of_sums(bootstrap_sums(counts, 500))
  assert np.quantile(draws, 0.025) > 0


def test_paired_difference_is_zero_for_identical_runs_and_resolves_a_real_one():
  """Two runs on the same prompts: identical records give 0 with a [0, 0] interval; a
  companion whose A is half noise has a lower gain, resolved by the paired interval. An
  unpaired variant (resampling the runs' prompts independently) would give a nonzero
  interval for identical runs."""
  e = cal.fixed_edges(5)
  good = _records(seed=3)
  same = inf.paired_gain_difference(good, good, e, e, num_resamples=300)
  assert same["difference"] == same["corrected"] == 0 and same["ci"] == (0.0, 0.0)
  assert same["prompts"] == 20
  noisy = _records(seed=3, a_weight=0.3)
  d = inf.paired_gain_difference(noisy, good, e, e, num_resamples=300)
  assert d["difference"] < 0 and d["corrected"] < 0 and d["ci"][1] < 0


def test_a_against_s_resolves_which_signal_carries_the_gain():
  """20 prompts x 60 records. A informative, S noise: what A adds exceeds what S carries
  alone, interval above 0. The same records with S and A swapped: S carries it, interval
  below 0. A variant that compared IG(S, A) with IG(S) (A's gain not net of S's) would read
  both cases as positive."""
  e = cal.fixed_edges(5)
  rec = _records(seed=4)
  d = inf.a_signal_against_s(rec, e, e, num_resamples=300)
  assert d["a_gain"] > 0.05 > d["s_gain"] and d["ci"][0] > 0 and d["prompts"] == 20
  assert d["difference"] == pytest.approx(d["a_gain"] - d["s_gain"])
  swapped = inf.CalibrationRecords(rec.a, rec.s, rec.accepted, rec.row, rec.prompt_set)
  d = inf.a_signal_against_s(swapped, e, e, num_resamples=300)
  assert d["s_gain"] > 0.05 and d["ci"][1] < 0


def test_records_round_trip_and_refusals(tmp_path):
  """calibrate's compact records.npz loads back (compressed, small dtypes, no pickles);
  a file without the needed arrays and an unknown signal set are refused by name."""
  rec = _records(num_prompts=4, per_prompt=10)
  cols = {"S": rec.s, "A": rec.a, "accepted": rec.accepted, "position": rec.row % 7,
          "row": rec.row, "step": rec.row, "prompt_set": rec.prompt_set}
  np.savez_compressed(tmp_path / "records.npz", **_compact(cols))
  back = inf.CalibrationRecords.load(str(tmp_path / "records.npz"))
  np.testing.assert_allclose(back.s, rec.s.astype(np.float32))
  np.testing.assert_array_equal(back.accepted, rec.accepted)
  np.savez(tmp_path / "bad.npz", S=rec.s)
  with pytest.raises(ValueError, match="lack.*'A'"):
    inf.CalibrationRecords.load(str(tmp_path / "bad.npz"))
  with pytest.raises(ValueError, match="signals='X'"):
    inf.prompt_counts(rec, cal.fixed_edges(2), cal.fixed_edges(2), "X")


def test_paper_verdict_vocabulary():
  assert sct.paper_verdict((0.02, 0.10), 0.34).startswith("differ")
  assert sct.paper_verdict((0.20, 0.40), 0.34).startswith("agree")
  assert sct.paper_verdict((-0.01, 0.40), 0.34).startswith("inconclusive")
  assert sct.paper_verdict((0.0, 0.1), None) == "-"


def test_companion_table_from_records(tmp_path):
  """The table reads each companion's report and records: one row per (companion, set),
  the paired difference from the first companion, the deeper (informative) companion
  resolved above the shallow (noise) one."""
  e = cal.fixed_edges(5).tolist()
  for n, weight in ((4, 0.0), (8, 1.0)):
    d = tmp_path / f"draft_ee{n}"
    d.mkdir()
    rec = _records(seed=5, a_weight=weight)
    cols = {"S": rec.s, "A": rec.a, "accepted": rec.accepted, "position": rec.row % 7,
            "row": rec.row, "step": rec.row, "prompt_set": rec.prompt_set}
    np.savez_compressed(d / "records.npz", **_compact(cols))
    (d / "report.json").write_text(json.dumps(
        {"prompt_sets": ["sharegpt", "humaneval"],
         "tables": {"fixed": {"s_edges": e, "a_edges": e}}}))
  out = sct.companions_table(str(tmp_path), companions=(("lm", "shallow", "draft_ee4"),
                                                         ("lm", "deep", "draft_ee8")),
                             num_resamples=200)
  lines = [line for line in out.splitlines() if line.startswith("|")]  # the family note follows
  assert len(lines) == 2 + 2 * 3  # header, rule, 3 sets (sharegpt, humaneval, all) x 2
  assert "Family *against the paper*" in out
  deep_all = next(line for line in lines if line.startswith("| lm | deep | all"))
  diff = deep_all.split(" | ")[9]
  assert diff.startswith("+") and float(diff.split("[")[1].split(",")[0]) > 0
  assert "paper 34%" in out and "paper 20%" in out
