"""HumanEval methods: ``--methods`` parsing, record keys and the paired summary
(offline: no model, no sandbox)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from experiments.humaneval.run import batch_configs
from experiments.humaneval.methods import parse_method, parse_methods
from experiments.humaneval.summary import (difference_of_gaps, gap_contrasts, markdown,
                                           paired_difference, summarize)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_specs_parse_to_canonical_methods():
  m = parse_method(" EAGLE3_chain:MARS:theta=.9 ", k=4)
  assert (m.spec, m.drafter, m.rule, m.hparams) == (
      "eagle3_chain:mars:theta=0.9", "eagle3_chain", "mars", (("theta", 0.9),))
  assert m.drafter_settings == (("k", 4),) and not m.baseline and m.asset == "eagle3"
  t = parse_method("eagle3_tree:typical:gate=soft:eps=0.09", eagle_total_tokens=24)
  assert t.spec == "eagle3_tree:typical:eps=0.09:gate=soft"
  assert dict(t.drafter_settings) == {"depth": 5, "top_k": 8, "total_tokens": 24}
  b = parse_method("baseline:draft_chain:spec_cascade:p_base=0.3")
  assert b.baseline and b.spec == "baseline:draft_chain:spec_cascade:p_base=0.3"
  assert b.asset == "draft" and parse_method("target").is_target
  tb = parse_method("baseline:TARGET:typical:eps=0.09")
  assert (tb.spec, tb.drafter, tb.asset, tb.drafter_settings) == (
      "baseline:target:typical:eps=0.09", "", "", ())
  assert tb.runs_target_only and not tb.is_target
  assert tb.target_sampling(1.0).eta == 0.09 and parse_method("target").target_sampling(0.7).eta == 0


@pytest.mark.parametrize("spec, match", [
    ("eagle3_chain", "<drafter>:<rule>"),                    # no rule
    ("medusa:lossless", "one of"),                           # unknown drafter
    ("eagle3_chain:nosuch", "unknown verifier 'nosuch'"),
    ("eagle3_chain:mars:alpha=1", "no hyperparameter"),
    ("eagle3_chain:mars:theta", "not hparam=value"),
    ("eagle3_tree:typical:eps=2", "eps=2"),
    ("eagle3_chain:all", "one rule per method"),
    ("draft_chain:lossless;mars", "one rule per method"),
    ("baseline:eagle3_chain:mars", "use eagle3_chain:lossless"),  # baseline = lossless
    ("target:typical", "one of"),                            # target only as a baseline
    ("baseline:target:lossless", "use target:lossless"),
])
def test_bad_specs_name_the_entry(spec, match):
  with pytest.raises(ValueError, match=match) as e:
    parse_method(spec)
  assert repr(spec) in str(e.value)


def test_methods_add_target_and_matched_baselines_once():
  ms = parse_methods(["eagle3_tree:typical:eps=0.09", "eagle3_chain:lossless",
                      "eagle3_tree:typical:eps=0.09", "draft_chain:typical:eps=0.09"], [0.0, 1.0])
  # one target-side baseline per rule, shared by the drafters
  assert [m.spec for m in ms] == ["target", "eagle3_tree:typical:eps=0.09",
                                  "baseline:target:typical:eps=0.09", "eagle3_chain:lossless",
                                  "draft_chain:typical:eps=0.09"]
  assert ms[2].sampled_only and ms[2].runs_target_only  # added: T > 0 only, generate()
  explicit = parse_methods(["eagle3_tree:typical:eps=0.09", "baseline:eagle3_tree:typical:eps=0.09"],
                           [0.0])
  assert not explicit[-1].sampled_only  # listed: every temperature
  assert [m.spec for m in parse_methods(["draft_chain:spec_cascade"], [1.0],
                                        matched_baselines=False)] == ["target",
                                                                      "draft_chain:spec_cascade"]
  with pytest.raises(ValueError, match="nomatched_baselines"):  # delta != sqrt(eps): no baseline
    parse_methods(["eagle3_tree:typical:eps=0.09:delta=0.5"], [1.0])


def test_target_keys_are_unchanged_and_methods_get_their_own():
  target_only = batch_configs(5, 2, [0.0, 1.0], samples=3, settings="s")
  assert [c["key"] for c in target_only[:3]] == ["s-T0-s0-p0", "s-T0-s0-p2", "s-T0-s0-p4"]
  assert "method" not in target_only[0]  # records written before --methods resume as they are
  ms = parse_methods(["eagle3_chain:typical:eps=0.09"], [0.0, 1.0])
  fp = {m.spec: m.fingerprint("sha") for m in ms if not m.is_target}
  cfgs = batch_configs(5, 2, [0.0, 1.0], samples=3, settings="s", methods=ms, fingerprints=fp)
  assert cfgs[:len(target_only)] == target_only
  spec = [c for c in cfgs if c.get("method") == "eagle3_chain:typical:eps=0.09"]
  assert len(spec) == 3 + 9 and spec[0]["key"].startswith("s-eagle3_chain:typical:eps=0.09-")
  base = [c for c in cfgs if c.get("method", "").startswith("baseline:")]
  assert len(base) == 9 and all(c["temperature"] == 1.0 for c in base)  # sampled_only
  assert base[0]["key"].startswith("s-baseline:target:typical:eps=0.09-")
  assert len({c["key"] for c in cfgs}) == len(cfgs)
  # the fingerprint follows the rule's defaults, the drafter shape and the drafter weights
  m = ms[1]
  assert m.fingerprint("sha") != m.fingerprint("other")
  assert m.fingerprint("sha") != parse_method(m.spec, k=3).fingerprint("sha")


def _records(method, temperature, passed: dict, samples=1, answers=None, accepted=0, calls=0):
  """One record per sample; ``passed[task]`` = passes (an int <= samples, the first ones)."""
  out = []
  for s in range(samples):
    cfg = {"temperature": temperature, "sample": s}
    if method != "target":
      cfg["method"] = method
    out.append({"config": cfg, "result": {"problems": [
        {"task_id": t, "passed": s < n, "answer": (answers or {}).get(t, f"a{t}"),
         "accepted": accepted, "calls": calls} for t, n in passed.items()]}})
  return out


def test_summary_detects_a_paired_difference():
  """40 problems: the method fails 6 of the 20 the target passes, nothing else changes ->
  diff -0.15; the paired interval excludes 0 although the two pass@1 intervals overlap."""
  tasks = [f"P{i}" for i in range(40)]
  tgt = {t: int(i % 2 == 0) for i, t in enumerate(tasks)}
  spec = {t: (0 if i % 2 == 0 and i < 12 else tgt[t]) for i, t in enumerate(tasks)}
  recs = _records("target", 0.0, tgt) + _records("draft_chain:lossless", 0.0, spec,
                                                   accepted=3, calls=2)
  rows = {r["method"]: r for r in summarize(recs)}
  d = rows["draft_chain:lossless"]["vs_target"]
  assert d["diff"] == pytest.approx(-0.15) and d["ci95"][1] < 0 and d["excludes_zero"]
  assert rows["draft_chain:lossless"]["ci95"][1] > rows["target"]["ci95"][0]  # unpaired overlap
  assert rows["draft_chain:lossless"]["tau"] == pytest.approx(2.5)
  assert rows["target"]["vs_target"] is None and rows["target"]["tau"] is None
  assert rows["target"]["identical_to_greedy"] == 1.0
  assert "*" in markdown(list(rows.values()), "t")


def test_summary_gap_covers_zero_without_a_difference():
  """T = 1, 3 samples: rule and baseline disagree on single samples but not on average
  over problems -> the gap's paired interval covers 0; pass@1 is unbiased per problem."""
  rng = np.random.default_rng(0)
  tasks = [f"P{i}" for i in range(30)]
  a = {t: int(rng.integers(0, 4)) for t in tasks}
  b = dict(a)
  b["P0"], b["P1"] = a["P0"] - 1 if a["P0"] else 1, a["P1"] + 1 if a["P1"] < 3 else 2
  rule = "eagle3_tree:typical:eps=0.09"
  recs = (_records("target", 1.0, a, samples=3)
          + _records(rule, 1.0, b, samples=3, accepted=1, calls=1)
          + _records("baseline:" + rule, 1.0, a, samples=3, accepted=1, calls=1))
  rows = {r["method"]: r for r in summarize(recs)}
  assert rows["target"]["pass@1"] == pytest.approx(np.mean([n / 3 for n in a.values()]))
  gap = rows[rule]["vs_baseline"]
  assert gap["baseline"] == "baseline:" + rule and gap["problems"] == 30
  assert gap["ci95"][0] <= 0 <= gap["ci95"][1] and not gap["excludes_zero"]
  assert rows["baseline:" + rule]["vs_baseline"] is None
  assert rows[rule]["identical_to_greedy"] is None  # T > 0


def test_summary_pairs_a_rule_with_the_target_side_baseline():
  """Without its own drafter's baseline a rule is compared with baseline:target:<rule>;
  with it, with its own. 20 problems: the rule loses 5 passes against the baseline."""
  tasks = [f"P{i}" for i in range(20)]
  base = {t: 1 for t in tasks}
  rule_passes = {t: int(i >= 5) for i, t in enumerate(tasks)}
  rule = "draft_chain:spec_cascade:p_base=0.3"
  recs = (_records("target", 1.0, base) + _records(rule, 1.0, rule_passes)
          + _records("baseline:target:spec_cascade:p_base=0.3", 1.0, base))
  rows = {r["method"]: r for r in summarize(recs)}
  gap = rows[rule]["vs_baseline"]
  assert gap["baseline"] == "baseline:target:spec_cascade:p_base=0.3"
  assert gap["diff"] == pytest.approx(-0.25) and gap["excludes_zero"]
  assert rows["baseline:target:spec_cascade:p_base=0.3"]["vs_baseline"] is None
  own = recs + _records("baseline:" + rule, 1.0, rule_passes)
  rows = {r["method"]: r for r in summarize(own)}
  assert rows[rule]["vs_baseline"]["baseline"] == "baseline:" + rule
  assert rows[rule]["vs_baseline"]["diff"] == 0.0


def test_gap_contrast_is_the_difference_of_the_drafters_gaps():
  """40 problems at T = 0.7, shared target-side baseline passing all: the chain loses 4,
  the tree 14 -> gaps -0.10 / -0.35, contrast -0.25 with an interval excluding 0; a
  drafter that loses the same 4 problems as the chain gives contrast 0 and [0, 0]."""
  tasks = [f"P{i}" for i in range(40)]
  base = {t: 1 for t in tasks}
  chain = {t: int(i >= 4) for i, t in enumerate(tasks)}
  tree = {t: int(i >= 14) for i, t in enumerate(tasks)}
  b = "baseline:target:typical:eps=0.09"
  recs = (_records("target", 0.7, base) + _records(b, 0.7, base)
          + _records("eagle3_tree:typical:eps=0.09", 0.7, tree)
          + _records("draft_chain:typical:eps=0.09", 0.7, chain)
          + _records("eagle3_chain:typical:eps=0.09", 0.7, chain))
  rows = summarize(recs)
  cs = gap_contrasts(rows, recs)
  assert [(c["first"], c["second"]) for c in cs] == [  # HUMANEVAL_DRAFTERS order, not the rows'
      ("draft_chain:typical:eps=0.09", "eagle3_chain:typical:eps=0.09"),
      ("draft_chain:typical:eps=0.09", "eagle3_tree:typical:eps=0.09")]
  same_c, tree_c = cs
  assert tree_c["rule"] == "typical:eps=0.09" and tree_c["temperature"] == 0.7
  assert (tree_c["gap_first"], tree_c["gap_second"]) == pytest.approx((-0.10, -0.35))
  assert tree_c["contrast"]["diff"] == pytest.approx(-0.25) and tree_c["contrast"]["excludes_zero"]
  assert same_c["contrast"]["diff"] == 0.0 and same_c["contrast"]["ci95"] == [0.0, 0.0]
  assert "Gap contrasts" in markdown(rows, "t", cs) and "Gap contrasts" not in markdown(rows, "t")


def test_difference_of_gaps_resamples_problems_jointly():
  """Own baselines per drafter: rule b and base_b differ only on problems where a and
  base_a differ the same way -> contrast exactly 0 in every resample; no shared problem
  -> None."""
  a, base_a = {"A": 0.0, "B": 1.0, "C": 1.0}, {"A": 1.0, "B": 1.0, "C": 0.0}
  d = difference_of_gaps(a, base_a, dict(a), dict(base_a), num_resamples=200)
  assert d["diff"] == 0.0 and d["ci95"] == [0.0, 0.0] and d["problems"] == 3
  assert difference_of_gaps(a, base_a, {"Z": 1.0}, {"Z": 0.0}) is None


def test_summarize_only_without_records_fails_before_loading(tmp_path):
  out = subprocess.run([sys.executable, "-m", "experiments.humaneval_eval", "--summarize_only",
                        f"--output_dir={tmp_path}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
  assert out.returncode != 0 and "--summarize_only" in out.stderr
  assert str(tmp_path) in out.stderr and "methods:" not in out.stdout


def test_paired_difference_uses_shared_problems_only():
  assert paired_difference({"A": 1.0}, {"B": 0.0}) is None
  d = paired_difference({"A": 1.0, "B": 0.0}, {"A": 1.0, "C": 1.0})
  assert d["problems"] == 1 and d["diff"] == 0.0 and d["ci95"] == [0.0, 0.0]


def test_identical_to_greedy_compares_t0_answers():
  recs = (_records("target", 0.0, {"A": 1, "B": 0}, answers={"A": "x", "B": "y"})
          + _records("eagle3_chain:mars", 0.0, {"A": 1, "B": 0}, answers={"A": "x", "B": "z"}))
  rows = {r["method"]: r for r in summarize(recs)}
  assert rows["eagle3_chain:mars"]["identical_to_greedy"] == 0.5


def test_bad_methods_flag_fails_before_loading():
  out = subprocess.run([sys.executable, "-m", "experiments.humaneval_eval",
                        "--methods=target,eagle3_chain:nosuch", "--output_dir=/nonexistent/x"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert out.returncode != 0
  assert "--methods=target,eagle3_chain:nosuch" in out.stderr and "available:" in out.stderr
  assert "methods:" not in out.stdout  # nothing loaded


def test_build_gives_the_rule_and_its_matched_baseline():
  """draft_chain methods on a random pair: the rule verifies with itself under plain
  sampling; its baseline verifies losslessly under the min-p processor."""
  from experiments.humaneval.methods import build
  from specjax.decoding.drafter_factory import DraftSources
  from specjax.verifiers import Lossless, SpecCascade
  from tests.helpers import tiny_pair
  _, _, draft, dp = tiny_pair()
  ms = DraftSources(draft.config.vocab_size, draft, dp)
  rule = parse_method("draft_chain:spec_cascade:p_base=0.3", k=3)
  _, _, v, samp = build(rule, ms, 1.0)
  assert isinstance(v, SpecCascade) and samp.min_p == 0.0 and samp.temperature == 1.0
  drafter, params, v, samp = build(parse_method("baseline:" + rule.spec, k=3), ms, 1.0)
  assert isinstance(v, Lossless) and samp.min_p == 0.3 and samp.temperature == 1.0
  assert drafter.num_draft == 3 and params is dp
  with pytest.raises(ValueError, match="no drafter"):
    build(parse_method("baseline:target:spec_cascade:p_base=0.3"), ms, 1.0)


def test_outcomes_count_every_answer():
  """2 problems x 3 samples: statuses and lengths per answer, counted over all 6 answers
  (not per problem); the cap counts answers as long as max_new_tokens; without the cap,
  or with a length missing, at_cap is None."""
  recs = _records("eagle3_chain:mars", 0.7, {"A": 1, "B": 0}, samples=3)
  stats = [[("pass", 10), ("error", 64)], [("fail", 64), ("timeout", 20)],
           [("fail", 30), ("error", 12)]]
  for rec, per_sample in zip(recs, stats):
    for p, (status, n) in zip(rec["result"]["problems"], per_sample):
      p["status"], p["tokens"] = status, n
  o = summarize(recs, max_new_tokens=64)[0]["outcomes"]
  assert o == {"answers": 6, "pass": 1, "fail": 2, "timeout": 1, "error": 2,
               "mean_tokens": pytest.approx(200 / 6), "at_cap": 2}
  assert summarize(recs)[0]["outcomes"]["at_cap"] is None
  table = markdown(summarize(recs, max_new_tokens=64), "t")
  assert "| eagle3_chain:mars | 0.7 | 6 | 1 | 2 | 2 | 1 | 33 | 2 |" in table
  del recs[0]["result"]["problems"][0]["tokens"]
  o = summarize(recs, max_new_tokens=64)[0]["outcomes"]
  assert o["at_cap"] is None and o["mean_tokens"] == pytest.approx(190 / 5)
