"""Speedup intervals over prompts (experiments.common.row_stats.speedup_interval,
paired_speed_gain) and the tables that read them (experiments.results.tables.
benchmark_table, experiments.results.sweep_tables); no model, no JAX."""

import json

import numpy as np
import pytest

from experiments.common.row_stats import (paired_speed_gain, paired_speedup_gain,
                                          round_cost_in_steps, speedup_interval)
from experiments.results import tables


def _pairs(tokens, seconds):
  return [[(int(n), float(s)) for n, s in zip(tokens, seconds)]]


def test_speedup_is_the_ratio_of_pooled_rates():
  """Two repeats of three prompts with unequal tokens and times: the point estimate is
  (sum spec tokens / sum spec s) / (sum target tokens / sum target s) over every
  (repeat, prompt), not the mean of per-prompt ratios (which differs here)."""
  spec = [[(200, 0.5), (20, 2.0), (100, 1.0)], [(200, 0.7), (30, 2.0), (100, 1.2)]]
  tgt = [[(200, 2.0), (20, 1.0), (100, 1.0)], [(200, 2.2), (30, 1.0), (100, 1.0)]]
  out = speedup_interval(spec, tgt)
  expect = (650 / 7.4) / (650 / 8.2)
  per_prompt_mean = np.mean([(400 / 1.2) / (400 / 4.2), (50 / 4.0) / (50 / 2.0),
                             (200 / 2.2) / (200 / 2.0)])
  assert out["speedup"] == pytest.approx(expect, rel=1e-12)
  assert abs(per_prompt_mean - expect) > 0.05  # the check can tell the two apart
  lo, hi = out["ci95"]
  assert lo <= out["speedup"] <= hi
  assert out["batches"] == 3 and out["mde80"] > 0


def test_identical_per_prompt_speedups_give_a_point_interval():
  """Every prompt exactly twice as fast: speedup 2 with the interval [2, 2] and MDE 0."""
  out = speedup_interval(_pairs([64] * 5, [0.5, 1.0, 0.7, 0.9, 0.6]),
                         _pairs([64] * 5, [1.0, 2.0, 1.4, 1.8, 1.2]))
  assert out["speedup"] == pytest.approx(2.0)
  assert out["ci95"] == pytest.approx([2.0, 2.0])
  assert out["mde80"] == pytest.approx(0.0, abs=1e-12)


def test_spread_across_prompts_widens_the_interval():
  """Half the prompts 1.6x, half 0.8x: the interval holds 1 (no verdict), while the
  same pooled speedup with no spread would not."""
  spec = _pairs([64] * 8, [1 / 1.6] * 4 + [1 / 0.8] * 4)
  tgt = _pairs([64] * 8, [1.0] * 8)
  lo, hi = speedup_interval(spec, tgt)["ci95"]
  assert lo < 1 < hi


@pytest.mark.parametrize("spec,tgt,match", [
    ([[(1, 1.0)]], [[(1, 1.0)]], ">= 2 batches"),
    ([[(1, 1.0), (1, 1.0)]], [[(1, 1.0), (1, 1.0), (1, 1.0)]], "same shape"),
])
def test_bad_timings_are_refused(spec, tgt, match):
  with pytest.raises(ValueError, match=match):
    speedup_interval(spec, tgt)


def test_paired_speedup_gain_reads_each_row_against_its_own_target_runs():
  """Row b ran on a machine 1.3x slower (target-only runs beside it too): its tokens/s
  are 1/1.3 of row a's but its speedup is the same, so the speedup gain is 0 while the
  tokens/s gain is +0.3; a row 1.25x faster than b at equal target speed gains +0.25."""
  secs, tgt = [0.8, 1.6, 1.2, 2.0], [1.0, 1.5, 1.1, 1.8]
  a = {"batch_timing": {"spec": _pairs([100] * 4, secs), "target": _pairs([100] * 4, tgt)}}
  b = {"batch_timing": {"spec": _pairs([100] * 4, [1.3 * t for t in secs]),
                        "target": _pairs([100] * 4, [1.3 * t for t in tgt])}}
  assert paired_speed_gain(a, b)["diff"] == pytest.approx(0.3)
  g = paired_speedup_gain(a, b)
  assert g["diff"] == pytest.approx(0.0) and g["ci95"] == pytest.approx([0.0, 0.0], abs=1e-12)
  c = {"batch_timing": {"spec": _pairs([100] * 4, [t / 1.25 for t in secs]),
                        "target": _pairs([100] * 4, tgt)}}
  assert paired_speedup_gain(c, a)["diff"] == pytest.approx(0.25)
  with pytest.raises(ValueError, match="both sides"):
    paired_speedup_gain(a, {"batch_timing": {"spec": _pairs([100] * 4, secs)}})


def test_paired_speed_gain_compares_two_rows_on_the_same_prompts():
  """Row a is 1.25x row b on every prompt (tokens equal): gain +0.25 with a point
  interval; against a row with other batches, or without timings, it refuses."""
  secs = [0.8, 1.6, 1.2, 2.0]
  a = {"batch_timing": {"spec": _pairs([100] * 4, secs)}}
  b = {"batch_timing": {"spec": _pairs([100] * 4, [1.25 * t for t in secs])}}
  g = paired_speed_gain(a, b)
  assert g["diff"] == pytest.approx(0.25) and g["ci95"] == pytest.approx([0.25, 0.25])
  assert g["excludes_zero"] and g["prompts"] == 4
  assert paired_speed_gain(b, a)["diff"] == pytest.approx(1 / 1.25 - 1)
  with pytest.raises(ValueError, match="different batches"):
    paired_speed_gain(a, {"batch_timing": {"spec": _pairs([100] * 3, secs[:3])}})
  with pytest.raises(ValueError, match="per-batch timings"):
    paired_speed_gain(a, {"speedup": 1.0})


def _record(kind, drafter, method, t, result):
  return {"config": {"kind": kind, "drafter": drafter, "method": method, "temperature": t},
          "result": result,
          "provenance": {"command": "python -m experiments.benchmark", "git_commit": "abc",
                         "cpus": 2, "load_average": [0.1, 0, 0],
                         "load_average_end": [0.2, 0, 0]}}


def test_benchmark_table_reads_intervals_and_verdicts(tmp_path):
  base = {"tokens_per_s": 50.0, "wall_s": 10.0, "agree_exact": 1.0}
  tgt = _pairs([64] * 3, [1.0, 1.0, 1.0])
  spec = dict(base, tau=2.0, tau_ci=[1.5, 2.5], speedup=1.3, speedup_per_repeat=[1.3],
              target_calls=96, batch_timing={"spec": _pairs([64] * 3, [1.0, 2.0, 1.5]),
                                             "target": tgt})
  faster = dict(spec, batch_timing={"spec": _pairs([64] * 3, [0.5, 1.0, 0.75]), "target": tgt})
  recs = [_record("target", "-", "target", 0, base),
          _record("spec", "lookup_chain", "lossless", 0,
                  dict(spec, speedup_pooled={"speedup": 1.31, "ci95": [1.12, 1.55],
                                             "batches": 16, "mde80": 0.2})),
          _record("spec", "lookup_chain", "mars(theta=0.9)", 0,
                  dict(faster, speedup_pooled={"speedup": 2.62, "ci95": [2.2, 3.1],
                                               "batches": 16, "mde80": 0.4})),
          _record("spec", "eagle_tree", "lossless", 0,
                  dict(spec, speedup_pooled={"speedup": 0.7, "ci95": [0.6, 0.8],
                                             "batches": 16, "mde80": 0.1})),
          _record("spec", "eagle_chain", "lossless", 0,
                  dict(spec, speedup_pooled={"speedup": 1.02, "ci95": [0.9, 1.1],
                                             "batches": 16, "mde80": 0.1}))]
  path = tmp_path / "benchmark.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in recs))
  out = tables.benchmark_table(str(path))
  assert "speedup [95% CI over prompts]" in out
  assert "1.31 [1.12, 1.55], MDE 0.20: faster" in out
  assert "0.70 [0.60, 0.80], MDE 0.10: slower" in out
  assert "1.02 [0.90, 1.10], MDE 0.10: inconclusive" in out
  # MARS twice as fast as lossless on every prompt: +1.000 with a point interval
  assert "| +1.000 [+1.000, +1.000], MDE 0.000: better |" in out
  assert out.count("tokens/s vs lossless") == 1
  # round cost: 4.5 s / 96 calls over 1/64 s per target token = 3.00 steps
  assert "| 3.00 |" in out and "break-even tau" in out
  # An old record without per-prompt timings keeps its one-repeat column.
  del recs[1]["result"]["speedup_pooled"]
  path.write_text("".join(json.dumps(r) + "\n" for r in recs))
  out = tables.benchmark_table(str(path))
  assert "speedup (one repeat)" in out and "| 1.30 |" in out


def test_round_cost_is_the_break_even_tau():
  """Target-only: 10 ms per token. Speculative: 100 rounds of 25 ms yielding tau = 2.5
  tokens each. Cost = 25 / 10 = 2.5 steps per round = the break-even tau, and the
  speedup tau / cost = 1 is what the pooled rates give. A cost computed per generated
  token instead of per round (the easy mistake) would read 1.0."""
  res = {"target_calls": 100,
         "batch_timing": {"spec": [[(125, 1.25), (125, 1.25)]],
                          "target": [[(250, 3.0), (250, 2.0)]]}}
  assert round_cost_in_steps(res) == pytest.approx(2.5)
  sp = speedup_interval(res["batch_timing"]["spec"], res["batch_timing"]["target"])
  assert sp["speedup"] == pytest.approx(2.5 / round_cost_in_steps(res))
  with pytest.raises(ValueError, match="per-batch timings"):
    round_cost_in_steps({"target_calls": 1})


# ---------------------------------------------------------------- sweep tables

from experiments.results import sweep_tables  # noqa: E402


def _sweep_row(rule, drafter, t, k, secs, acc, theta=None, tgt=(1.0, 1.0, 1.0, 1.0)):
  """A sweep record row: 4 prompts x 64 tokens, ``secs`` per prompt, ``acc`` accepted
  drafts per prompt over 32 target calls each; target-only took ``tgt`` per prompt."""
  calls = [32] * 4
  tau = (sum(acc) + sum(calls)) / sum(calls)
  res = {"tau": tau, "tau_ci": [tau - 0.1, tau + 0.1], "accepted_per_prompt": acc,
         "target_calls_per_prompt": calls, "speedup": sum(tgt) / sum(secs), "relaxed_rate": 0.1,
         "agree_exact": 1.0, "loglik": -1.0, "loglik_ci": [-1.1, -0.9],
         "batch_timing": {"spec": _pairs([64] * 4, secs), "target": _pairs([64] * 4, tgt)},
         "speedup_pooled": {"speedup": 1.0, "ci95": [0.9, 1.1], "batches": 4, "mde80": 0.1}}
  cfg = {"kind": "spec", "rule": rule, "hparams": {} if theta is None else {"theta": theta},
         "drafter": drafter, "temperature": t, "num_draft": k, "policy": "none",
         "method": rule if theta is None else f"{rule}(theta={theta:g})"}
  return {"config": cfg, "result": res}


def _write(tmp_path, name, recs):
  p = tmp_path / name
  p.write_text("".join(json.dumps(r) + "\n" for r in recs))
  return str(p)


def test_theta_sweep_table_pairs_mars_with_lossless(tmp_path, monkeypatch):
  secs = [1.0, 1.2, 0.8, 1.1]
  recs = [_sweep_row("mars", "eagle_chain", 0.0, 4, [s / 1.5 for s in secs], [40] * 4, 0.8),
          _sweep_row("lossless", "eagle_chain", 0.0, 4, secs, [20] * 4),
          _sweep_row("mars", "eagle_chain", 0.0, 4, secs, [20] * 4, 0.98),
          {"config": {"kind": "target", "drafter": "-", "temperature": 0.0}, "result": {}}]
  monkeypatch.setattr(sweep_tables, "THETA_SWEEP", _write(tmp_path, "theta.jsonl", recs))
  out = sweep_tables.theta_sweep_table()
  lines = [line for line in out.splitlines() if line.startswith("|")]
  assert [line.split(" | ")[2] for line in lines[2:]] == ["lossless", "0.8", "0.98"]
  assert "*tau vs lossless*: MARS at every theta" in out  # the family, defined under it
  # theta 0.8: tau (32+40)/(32+20) - 1 = +0.385 and 1.5x the tokens/s, on every prompt
  assert "| +0.385 [+0.385, +0.385], MDE 0.000: better | +0.500 [+0.500, +0.500]" in lines[3]
  assert "| +0.000 [+0.000, +0.000], MDE 0.000: inconclusive |" in lines[4]
  assert "agrees 1.00" in lines[2]


def test_k_sweep_table_finds_a_middle_peak_or_says_it_is_not_resolved(tmp_path, monkeypatch):
  base = [1.0, 1.2, 0.8, 1.1]
  scale = {1: 1.0, 2: 0.8, 4: 0.9}  # K = 2 fastest on every prompt
  recs = [_sweep_row("lossless", "eagle_chain", 1.0, k, [s * f for s in base], [20] * 4)
          for k, f in scale.items()]
  monkeypatch.setattr(sweep_tables, "K_SWEEP", _write(tmp_path, "k.jsonl", recs))
  out = sweep_tables.k_sweep_table()
  assert "fastest; vs K = 1: +0.250 [+0.250, +0.250], K = 4: +0.125 [+0.125, +0.125]: a peak |" \
      in out
  # The machine slowed down 1.3x while K = 4 ran (its target-only runs too): its
  # speedup, and so the comparison, is unchanged
  recs[2] = _sweep_row("lossless", "eagle_chain", 1.0, 4, [1.3 * 0.9 * s for s in base],
                       [20] * 4, tgt=[1.3] * 4)
  monkeypatch.setattr(sweep_tables, "K_SWEEP", _write(tmp_path, "k1.jsonl", recs))
  assert "K = 4: +0.125 [+0.125, +0.125]: a peak |" in sweep_tables.k_sweep_table()
  # A noisy neighbour: K = 4 as fast as K = 2 on average, faster on half the prompts
  recs[2] = _sweep_row("lossless", "eagle_chain", 1.0, 4, [0.6, 1.2, 0.48, 1.1], [20] * 4)
  monkeypatch.setattr(sweep_tables, "K_SWEEP", _write(tmp_path, "k2.jsonl", recs))
  out = sweep_tables.k_sweep_table()
  assert "peak not resolved" in out and out.count("fastest;") == 1
