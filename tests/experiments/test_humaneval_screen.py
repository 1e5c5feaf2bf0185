"""Screen-then-sample HumanEval (experiments/humaneval/screen.py, the design of
experiments/humaneval_screen.py): the stages' configurations and keys, the screening
selection, the paired statistic and its predicted power -- offline (tiny random models,
synthetic records; no sandbox)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from experiments.humaneval import screen as hs
from experiments.humaneval.methods import parse_methods

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTINGS = dict(temperature=1.0, screen_samples=10, paired_samples=20, batch_size=8,
                settings="s")


def test_stages_pair_every_method_block_with_a_target_block():
  ms = parse_methods(["draft_chain:typical:eps=0.09", "eagle3_chain:mars:theta=0.9"], [1.0])
  screen = hs.stage_configs("screen", [0, 1, 2], ms, **SETTINGS)
  assert {c["method"] for c in screen} == {"target"}  # the screening is target-only
  assert [(c["problem"], c["start"], c["stop"]) for c in screen[:3]] == [
      (0, 0, 8), (0, 8, 10), (1, 0, 8)]
  paired = hs.stage_configs("paired", [2, 5], ms, **SETTINGS)
  assert paired[0]["method"] == "target" and len({c["method"] for c in paired}) == len(ms)
  blocks = lambda m: {(c["problem"], c["start"], c["stop"]) for c in paired
                      if c["method"] == m}
  assert blocks("target") == {(p, a, b) for p in (2, 5) for a, b in ((10, 18), (18, 26),
                                                                      (26, 30))}
  for m in ms:  # same problem and samples as the target: the same keys
    assert blocks(m.spec) == blocks("target")
  # fresh samples: no paired block reaches into the screening samples
  assert min(c["start"] for c in paired) == SETTINGS["screen_samples"]
  keys = [c["key"] for c in screen + paired]
  assert len(set(keys)) == len(keys)
  with pytest.raises(ValueError, match="stage='pilot'"):
    hs.stage_configs("pilot", [0], ms, **SETTINGS)
  with pytest.raises(ValueError, match="temperature=0"):
    hs.stage_configs("screen", [0], ms, **{**SETTINGS, "temperature": 0})
  with pytest.raises(ValueError, match="batch_size=0"):
    hs.sample_blocks(0, 10, 0)


def _screen_records(passes: dict, n: int = 10, missing: tuple = ()) -> list:
  """Screening records: problem ``t`` passes its first ``passes[t]`` of ``n`` samples;
  ``missing`` problems lack their last sample (an unfinished screening)."""
  out = []
  for t, c in passes.items():
    m = n - 1 if t in missing else n
    out.append({"config": {"stage": "screen", "method": "target", "temperature": 1.0,
                           "sample": 0},
                "result": {"problems": [{"task_id": t, "sample": s, "passed": s < c}
                                        for s in range(m)]}})
  return out


def test_selection_keeps_problems_strictly_between_zero_and_all():
  recs = _screen_records({"HumanEval/0": 0, "HumanEval/1": 3, "HumanEval/2": 10,
                          "HumanEval/10": 1, "HumanEval/3": 9, "HumanEval/4": 4},
                         missing=("HumanEval/4",))
  counts = hs.screen_counts(recs, 10)
  assert "HumanEval/4" not in counts  # incomplete screening is not selected from
  assert hs.screen_counts(recs)["HumanEval/4"] == (4, 9)
  assert hs.select_problems(counts) == ["HumanEval/1", "HumanEval/3", "HumanEval/10"]
  rep = hs.screen_report(counts, (20,))
  assert (rep["screened"], rep["never"], rep["always"], rep["selected"]) == (5, 1, 1, 3)
  assert rep["pass@1"] == pytest.approx((0 + 3 + 10 + 1 + 9) / 50)
  assert rep["selected_pass@1"] == pytest.approx((3 + 1 + 9) / 30)
  # predicted SD: sqrt(mean of 2 c (n - c) / (n (n - 1)) / S) over the selected problems
  want = np.sqrt(np.mean([2 * c * (10 - c) / 90 / 20 for c in (3, 1, 9)]))
  assert rep["predicted"][0]["sd"] == pytest.approx(want)
  assert rep["predicted"][0]["mde80"] == pytest.approx(2.8016 * want / np.sqrt(3), rel=1e-3)
  assert hs.predicted_mde({"HumanEval/0": (0, 10)}, 20) is None
  with pytest.raises(ValueError, match="run --stage=screen"):
    hs.screen_report({})


# ------------------------------------------------------------------ the statistic


def _simulate(rng, rates_target, rates_method, screen_n=10, paired_n=20,
              reuse_screening=False):
  """Records of a whole design on simulated problems whose true pass rates are given:
  screening from the target's rates, selection, then fresh paired samples (or, the
  broken variant, the target's paired samples replaced by its screening samples plus
  fresh ones, i.e. the selection's own samples reused)."""
  tasks = [f"HumanEval/{i}" for i in range(len(rates_target))]
  screen = {t: rng.random(screen_n) < p for t, p in zip(tasks, rates_target)}
  recs = [{"config": {"stage": "screen", "method": "target", "temperature": 1.0, "sample": 0},
           "result": {"problems": [{"task_id": t, "sample": s, "passed": bool(x)}
                                   for t, xs in screen.items() for s, x in enumerate(xs)]}}]
  sel = hs.select_problems(hs.screen_counts(recs, screen_n))
  for name, rates in (("target", rates_target), ("m", rates_method)):
    probs = []
    for t, p in zip(tasks, rates):
      if t not in sel:
        continue
      xs = rng.random(paired_n) < p
      if reuse_screening and name == "target":
        xs = np.concatenate([screen[t], xs[:paired_n - screen_n]])
      probs += [{"task_id": t, "sample": screen_n + s, "passed": bool(x), "answer": "",
                 "status": "pass" if x else "fail", "tokens": 1} for s, x in enumerate(xs)]
    cfg = {"stage": "paired", "method": name, "temperature": 1.0, "sample": screen_n}
    recs.append({"config": cfg, "result": {"problems": probs}})
  return recs, sel


def _rates(rng, n):
  """A weak target: most problems never solved, some always, the rest spread out."""
  kind = rng.choice(3, size=n, p=[0.55, 0.1, 0.35])
  return np.where(kind == 0, 0.0, np.where(kind == 1, 1.0, rng.beta(0.5, 5.0, size=n)))


def test_paired_statistic_finds_an_effect_and_not_a_null():
  """900 simulated problems (~130 selected), 20 fresh samples each: a method that
  halves the pass rate of every problem the target sometimes solves is found (the 95%
  interval excludes 0; the estimate is within 3 SE of the true mean loss over the
  selected problems); a method equal to the target is not (interval holds 0), and its
  realized SD of per-problem differences is the screening's prediction within 25%
  (the prediction estimates p(1 - p) from 10 samples per problem; over ~130 problems
  its error is ~10%)."""
  rng = np.random.default_rng(0)
  p = _rates(rng, 900)
  recs, sel = _simulate(rng, p, p / 2)
  rows, power = hs.paired_summary(recs, sel)
  d = next(r for r in rows if r["method"] == "m")["vs_target"]
  true = -0.5 * np.mean([p[int(t.split("/")[1])] for t in sel])
  assert len(sel) > 90 and d["problems"] == len(sel)
  assert d["ci95"][1] < 0 and abs(d["diff"] - true) < 3 * d["sd"] / np.sqrt(len(sel))
  assert power[0]["diff"]["mde80"] == pytest.approx(2.8016 * d["sd"] / np.sqrt(len(sel)),
                                                    rel=1e-3)
  recs, sel = _simulate(rng, p, p)
  rows, _ = hs.paired_summary(recs, sel)
  d = next(r for r in rows if r["method"] == "m")["vs_target"]
  assert d["ci95"][0] <= 0 <= d["ci95"][1]
  pred = hs.predicted_mde(hs.screen_counts(recs, 10), 20)
  assert pred["problems"] == len(sel)
  assert d["sd"] == pytest.approx(pred["sd"], rel=0.25)


def test_reusing_the_screening_samples_biases_the_difference():
  """The broken variant: the target's paired samples include the 10 screening samples
  the selection conditioned on. With the method EQUAL to the target, the selected
  problems' screening pass rates are inflated for rarely solved problems (0 < c is
  required; most in-between rates are small here, as for our target), so the
  difference comes out negative with an interval excluding 0, while the fresh-sample
  design on the same problems covers 0. 3000 problems (~450 selected): the bias is
  ~-0.02 (half the screening's inflation, E[c/n | 0 < c < n] - p ~ 0.04 at these
  rates), ~4 SE of the difference."""
  p = _rates(np.random.default_rng(1), 3000)
  broken, sel = _simulate(np.random.default_rng(2), p, p, reuse_screening=True)
  fresh, sel2 = _simulate(np.random.default_rng(2), p, p)
  assert sel == sel2
  bad = next(r for r in hs.paired_summary(broken, sel)[0] if r["method"] == "m")["vs_target"]
  good = next(r for r in hs.paired_summary(fresh, sel)[0] if r["method"] == "m")["vs_target"]
  assert bad["ci95"][1] < 0
  assert good["ci95"][0] <= 0 <= good["ci95"][1]


def test_paired_summary_uses_selected_paired_records_only():
  recs, sel = _simulate(np.random.default_rng(3), np.full(40, 0.5), np.full(40, 0.5))
  rows, _ = hs.paired_summary(recs, sel[:5])
  assert {r["problems"] for r in rows} == {5}
  assert {r["samples_per_problem"] for r in rows} == {20.0}  # screening samples not mixed in
  assert hs.paired_summary(recs[:1], sel) == ([], [])
  text = hs.report_markdown("t", hs.screen_report(hs.screen_counts(recs, 10)), rows, [])
  assert "| 40 |" in text and "Paired stage" in text


def test_pilot_chooses_the_more_capable_style_with_a_paired_difference():
  """Greedy records of both styles on 30 problems: completion passes 9, chat 3 of
  them (all 3 also passed by completion) -> completion chosen, paired difference
  +0.20 with an interval above 0; a tie keeps chat; a bad --greedy entry is named."""
  from experiments import humaneval_pilot as hp
  tasks = [f"HumanEval/{i}" for i in range(30)]

  def recs(passes):
    return [{"config": {"temperature": 0.0, "sample": 0}, "result": {"problems": [
        {"task_id": t, "passed": t in passes, "status": "pass" if t in passes else "error",
         "tokens": 40, "answer": ""} for t in tasks]}}]

  cells = {"chat": hp.style_cell(recs(set(tasks[:3]))),
           "completion": hp.style_cell(recs(set(tasks[:9])))}
  out = hp.compare(cells, {"chat": 512, "completion": 512})
  assert out["choice"] == "completion"
  assert out["rows"]["chat"]["pass@1"] == pytest.approx(0.1)
  assert out["rows"]["completion"]["outcomes"]["error"] == 21
  d = out["completion_minus"]["chat"]
  assert d["diff"] == pytest.approx(0.2) and d["ci95"][0] > 0 and d["problems"] == 30
  tie = hp.compare({"chat": cells["chat"], "completion": cells["chat"]}, {})
  assert tie["choice"] == "chat"
  # a partial chat run: compared over its 10 problems only (completion passes 9 of
  # them, chat 3), not by pass@1 over different problem sets
  part = {"chat@512": {t: v for t, v in cells["chat"].items() if t in tasks[:10]},
          "completion": cells["completion"]}
  out2 = hp.compare(part, {})
  assert out2["completion_minus"]["chat@512"]["problems"] == 10
  assert out2["completion_minus"]["chat@512"]["diff"] == pytest.approx(0.6)
  assert out2["choice"] == "completion" and out2["choice_against"] == "chat@512"
  assert "**completion**" in hp.markdown(out, None)
  with pytest.raises(ValueError, match="'fim:x'"):
    hp.parse_dirs(["fim:x"], "greedy")


# ------------------------------------------------------------------ keys on a tiny model
# Every model test below uses prompts of <= 16 tokens, batches of 4 and a cap of 4, so
# the single-call programs compile once for the file.


@pytest.fixture(scope="module")
def tiny():
  from tests.helpers import tiny_pair
  return tiny_pair(vocab=48, eos=None)


def test_keys_follow_the_problem_and_sample_not_the_selection(tiny):
  """Tiny random target at T = 1: sample s of problem i is drawn from the key of
  (seed, i, s) whatever the selection -- problem 2 run alone or after others gives the
  same tokens -- and two problems with the same prompt get different samples (the
  problem index is in the key); the rows of one call differ (one stream per sample)."""
  target, tp, _, _ = tiny
  prompts = [[5, 6, 7], [8, 9, 10], [5, 6, 7]]
  ms = parse_methods([], [1.0])
  ev = hs.make_evaluate(target, tp, None, prompts, ms, seed=3, max_new_tokens=4)
  shape = {**SETTINGS, "paired_samples": 4, "batch_size": 4}

  def run(selection):
    cfgs = hs.stage_configs("paired", selection, ms, **shape)
    return {c["problem"]: [p["ids"] for p in ev(c)["problems"]] for c in cfgs}

  alone, mixed = run([2]), run([0, 1, 2])
  assert alone[2] == mixed[2]
  assert mixed[0] != mixed[2]  # same prompt, other problem: other keys
  assert len({tuple(r) for r in mixed[0]}) > 1
  # the broken variant: keys by position in the selection would give problem 2, run
  # alone, the samples of problem 0 -- which differ from its own
  c = hs.stage_configs("paired", [2], ms, **shape)[0]
  assert [p["ids"] for p in ev({**c, "problem": 0})["problems"]] == mixed[0] != alone[2]


@pytest.mark.slow
def test_a_speculative_method_records_its_acceptance(tiny):
  from specjax.decoding.drafter_factory import DraftSources
  target, tp, draft, dp = tiny
  ms = parse_methods(["draft_chain:lossless"], [1.0], k=2)
  ev = hs.make_evaluate(target, tp, DraftSources(48, draft, dp), [[5, 6, 7]], ms, seed=0,
                        max_new_tokens=5)
  c = next(c for c in hs.stage_configs("paired", [0], ms, **{**SETTINGS, "paired_samples": 3})
           if c["method"] != "target")
  out = ev(c)["problems"]
  assert [p["sample"] for p in out] == [10, 11, 12]
  assert all(p["tokens"] == 5 and p["calls"] >= 1 and p["accepted"] >= 0 for p in out)


def test_paired_stage_without_methods_fails_before_loading(tmp_path):
  out = subprocess.run([sys.executable, "-m", "experiments.humaneval_screen", "--stage=paired",
                        f"--output_dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
  assert out.returncode != 0 and "--stage=paired needs --methods" in out.stderr


@pytest.mark.slow  # --round_tokens is an opt-in speed-up; one compile per round length (12 s)
def test_rounds_drop_finished_rows_and_keep_greedy_rows(tiny):
  """run_method in rounds (tiny random target, greedy, 2-token rounds, cap 4): with no
  stop rule every row equals the single call's (re-prefilling the tokens so far gives
  the same argmax on this peaked model); with a stop rule a row ends at the first round
  boundary where it holds, as a prefix of its single-call row; a row that emits the
  model's EOS is not continued."""
  from experiments.humaneval.methods import Method, run_method
  from tests.helpers import tiny_pair
  target, tp, _, _ = tiny
  prompts = [[5, 6, 7], [8, 9, 10], [11, 12, 13], [14, 15, 16]]
  common = dict(temperature=0.0, key=None, row_offset=0, max_new_tokens=4)
  one, stats = run_method(Method("target"), target, tp, None, prompts, **common)
  assert stats is None and all(len(r) == 4 for r in one)
  rounds, _ = run_method(Method("target"), target, tp, None, prompts, **common, round_tokens=2)
  assert rounds == one
  stop = lambda r: r[1] == one[1][1] or r[1] == one[3][1]  # rows 1 and 3 stop at 2 tokens
  cut, _ = run_method(Method("target"), target, tp, None, prompts, **common, round_tokens=2,
                      stopped=stop)
  for c, r in zip(cut, one):
    assert c == (r[:2] if stop(r[:2]) else r)
  assert [len(c) for c in cut].count(2) >= 2
  # an EOS id in the model's config: the loop ends the row there, no round revives it
  eos_target, eos_tp, _, _ = tiny_pair(vocab=48, eos=one[0][1])
  cut, _ = run_method(Method("target"), eos_target, eos_tp, None, prompts, **common,
                      round_tokens=2, eos=(one[0][1],))
  assert cut[0] == one[0][:2]
  for c, r in zip(cut, one):
    assert c == r[:r.index(one[0][1]) + 1] if one[0][1] in r else c == r
  with pytest.raises(ValueError, match="round_tokens=-1"):
    run_method(Method("target"), target, tp, None, prompts, **common, round_tokens=-1)


@pytest.mark.slow
def test_binary_screens_selects_and_runs_the_paired_stage_resumably(tmp_path):
  """End to end on the random "tiny" set (default tokenizer, raw completions, 8 tokens):
  the screening of 2 problems x 3 samples; one screening sample of problem 0 is then
  marked passed (c = 1 of 3: selected); the paired stage runs the target and a
  target-side matched baseline on problem 0 only, on fresh samples 3 and 4, and a rerun
  adds no record."""
  import json
  common = [sys.executable, "-m", "experiments.humaneval_screen", "--model=tiny",
            "--style=completion", "--limit=2", "--screen_samples=3", "--max_new_tokens=8",
            "--round_tokens=4", "--batch_size=3", f"--output_dir={tmp_path}"]
  run = lambda *a: subprocess.run(common + list(a), cwd=ROOT, capture_output=True, text=True,
                                  timeout=600)
  out = run("--stage=screen")
  assert out.returncode == 0, out.stderr[-2000:]
  path = tmp_path / "screen.jsonl"
  lines = [json.loads(l) for l in path.read_text().splitlines()]
  assert len(lines) == 2 and all(r["config"]["stage"] == "screen" for r in lines)
  lines[0]["result"]["problems"][0]["passed"] = True  # problem 0: 1 of 3
  path.write_text("".join(json.dumps(r) + "\n" for r in lines))
  paired = ("--stage=paired", "--methods=baseline:target:typical:eps=0.09", "--paired_samples=2")
  out = run(*paired)
  assert out.returncode == 0, out.stderr[-2000:]
  summary = json.loads((tmp_path / "screen_summary.json").read_text())
  assert summary["screen"]["selected_tasks"] == ["HumanEval/0"]
  rows = {r["method"]: r for r in summary["rows"]}
  assert set(rows) == {"target", "baseline:target:typical:eps=0.09"}
  assert all(r["problems"] == 1 and r["samples_per_problem"] == 2 for r in rows.values())
  recs = [json.loads(l) for l in path.read_text().splitlines()]
  samples = {p["sample"] for r in recs if r["config"]["stage"] == "paired"
             for p in r["result"]["problems"]}
  assert samples == {3, 4} and len(recs) == 4
  out = run(*paired)
  assert out.returncode == 0 and len(path.read_text().splitlines()) == 4
