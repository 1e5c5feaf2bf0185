"""experiments/{prompts,quality,compare_verifiers,sweep_*}.py on tiny settings."""

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.compare import quality
from tests.helpers import tiny_pair

# --------------------------------------------------------------------------- parsing


@pytest.mark.parametrize("prompt,completion,eos,ok", [
    ("def f(x):", "\n    return x\n", False, True),
    ("def f(x):", "\n    return x", False, True),  # partial last line not judged
    ("def f(x):", "\n    y = (1,\n", False, True),  # open bracket: incomplete, valid
    ("def f(x):", "\n    y = = 1\n", False, False),
    ("def f(x):", "\nreturn x\n", False, False),  # 'return' outside function
    ("x = 1", "\n    y = 2\n", False, False),  # unexpected indent
    ("x = 1", " + ", False, True),  # no complete line: nothing judged
    ("x = 1", " +\n", False, False),  # a complete line ending in a dangling operator
    ("class A:", "\n    '''doc\n", False, True),  # open string
    ("x = (", "1,\n2)\n", True, True),
    ("def f():", "\n    pass\n)\n", True, False),
])
def test_parses_hand_examples(prompt, completion, eos, ok):
  assert quality.parses(prompt, completion, eos) is ok


def test_checked_text_and_fraction():
  assert quality.checked_text("a = 1", "\nb = 2\nc = (", False) == "a = 1\nb = 2\n"
  assert quality.checked_text("a = 1", "\nb = 2", True) == "a = 1\nb = 2\n"
  frac = quality.parse_fraction(["x = 1"] * 4, ["\ny = 2\n", "\ny = = 2\n", "\n", "\n)\n"])
  assert frac == 0.5
  assert quality.is_valid_prefix("import os\n") and not quality.is_valid_prefix("import\n")


def test_decode_completions_strips_eos():
  class Tok:
    def decode(self, ids, skip_special_tokens=False):
      return "".join(chr(ord("a") + i) for i in ids)
  texts, ended = quality.decode_completions(Tok(), [[1, 2, 0], [3], []], [0])
  assert texts == ["bc", "d", ""] and ended == [True, False, False]


# --------------------------------------------------------------------------- likelihood


def test_target_loglik_equals_direct_computation():
  model, params, _, _ = tiny_pair(vocab=32)
  prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
  comps = [[9, 10, 11, 12], [13]]
  got = quality.target_loglik(model, params, prompts, comps, batch_size=1, bucket=4)
  want_rows = []
  for p, c in zip(prompts, comps):
    seq = jnp.asarray([p + c])
    cache = model.init_cache(1, seq.shape[1])
    logits = model.apply(params, seq, jnp.arange(seq.shape[1])[None], cache).logits[0]
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
    want_rows.append([float(logp[len(p) - 1 + j, c[j]]) for j in range(len(c))])
  flat = [v for r in want_rows for v in r]
  assert got["num_tokens"] == 5
  np.testing.assert_allclose(got["mean"], np.mean(flat), rtol=1e-5)
  np.testing.assert_allclose(got["per_row"], [np.mean(r) for r in want_rows], rtol=1e-5)
  # Batching / padding does not change anything beyond float32 rounding: padded
  # widths 4 vs 64 reduce in another order (measured 1.9e-5 relative at LLVM -O0,
  # where the default suite compiles; a masking or padding bug moves a log-prob by
  # O(1)).
  got2 = quality.target_loglik(model, params, prompts, comps, batch_size=8, bucket=64)
  np.testing.assert_allclose(got2["per_row"], got["per_row"], rtol=1e-4)


def test_greedy_agreement():
  a = quality.greedy_agreement([[1, 2, 3], [1, 2, 4], [5]], [[1, 2, 3], [1, 2, 3], [6, 7]])
  assert a["exact"] == pytest.approx(1 / 3)
  assert a["prefix"] == pytest.approx((1 + 2 / 3 + 0) / 3)


# --------------------------------------------------------------------------- prompts


def test_eval_prompts_are_deterministic_heldout_line_prefixes():
  from experiments.common.prompts import load_eval_prompts
  from specjax.data import corpus
  from specjax.models.defaults import default_tokenizer
  tok = default_tokenizer()
  a = load_eval_prompts(4, tokenizer=tok, seed=3, max_tokens=64, min_tokens=16)
  b = load_eval_prompts(4, tokenizer=tok, seed=3, max_tokens=64, min_tokens=16)
  assert a == b
  cfg = corpus.CorpusConfig()
  root = cfg.resolved_root
  for p in a:
    assert corpus.split_of(p.source, cfg.heldout_fraction, cfg.split_seed) == "heldout"
    assert 16 <= len(p.ids) <= 64 and list(p.ids) == tok.encode(p.text).ids
    with open(os.path.join(root, p.source), encoding="utf-8", errors="replace") as f:
      lines = f.read().split("\n")
    assert p.text == "\n".join(lines[p.start_line:p.end_line])
    assert not p.text.endswith("\n") and p.text[:1].strip()  # starts at column 0
    assert quality.is_valid_prefix(p.text + "\n")


# --------------------------------------------------------------------------- end to end


def _tiny_config(tmp_path, **over):
  from experiments.configs.compare import get_config
  c = get_config()
  c.models = "tiny"
  c.workdir = str(tmp_path)
  c.progress = False
  c.compile_cache_dir = ""  # no persistent XLA cache: it is process-global and would
  # make every later test in this pytest process write executables to disk
  c.rules = "lossless, mars:theta=0.9, typical:eps=0.09"
  c.tree_paths = "[[0], [1], [0, 0]]"
  c.num_draft = 2
  c.data.num_prompts = 2
  c.data.max_prompt_tokens = 40
  c.data.min_prompt_tokens = 8
  c.data.max_new_tokens = 6
  c.timing.repeats = 1
  c.kl.num_prompts = 1
  c.kl.contexts = 8
  for k, v in over.items():
    c[k] = v
  return c


@pytest.mark.slow  # the main job's end-to-end test stays in the default suite
def test_compare_verifiers_end_to_end(tmp_path):
  """Target-only + lossless chain at T = 0 and T = 1 (with the first-token KL), resumable."""
  from experiments import compare_verifiers as cv
  from experiments.compare import evaluation
  from experiments.common import rows
  c = _tiny_config(tmp_path, rules="lossless", drafters=("chain",))
  out = cv.run(c)
  recs = out["records"]
  assert len(recs) == len(rows.default_rows(c)) == 4
  assert os.path.isfile(out["markdown"]) and os.path.isfile(out["figure"])
  lines = open(out["jsonl"]).read().splitlines()
  assert len(lines) == len(recs) and len({json.loads(l)["key"] for l in lines}) == len(lines)
  by = {(r["config"]["method"], r["config"]["temperature"]): r["result"] for r in recs}
  for (m, t), res in by.items():
    assert math.isfinite(res["loglik"]) and 0 <= res["parse_frac"] <= 1
    if m != "target":
      assert res["tau"] >= 1 and res["speedup"] > 0 and res["relaxed_rate"] == 0.0
      # Per-batch timings: [repeat][batch] (tokens, s); the spec side's tokens are the row's.
      bt = res["batch_timing"]
      assert len(bt["spec"]) == len(bt["target"]) == 1
      assert sum(n for n, _ in bt["spec"][0]) == res["generated_tokens"]
      assert ("speedup_pooled" in res) == (len(bt["spec"][0]) >= 2)
  # exact first-token law: lossless is its own baseline (checked on the loop's contexts)
  assert by[("lossless", 1.0)]["first_contexts"] == 8
  assert by[("lossless", 1.0)]["first_kl"] < 1e-6
  assert "first_kl" not in by[("target", 1.0)]
  # Greedy lossless speculative decoding reproduces target greedy; same quality.
  assert by[("lossless", 0.0)]["agree_exact"] == 1.0
  assert by[("lossless", 0.0)]["loglik"] == pytest.approx(by[("target", 0.0)]["loglik"], abs=1e-4)
  assert "| lossless | chain | 0 |" in open(out["markdown"]).read()
  # Rerun: everything resumes from the file, nothing is recomputed.
  orig = evaluation.evaluate_row
  evaluation.evaluate_row = lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed"))
  try:
    again = cv.run(c)
  finally:
    evaluation.evaluate_row = orig
  assert [r["key"] for r in again["records"]] == [r["key"] for r in recs]


def test_default_rows_and_sweep_rows(tmp_path):
  from experiments.common import rows as cv
  from experiments import sweep_k, sweep_temperature, sweep_theta
  from experiments.configs import compare, k, temperature, theta
  from specjax import verifiers
  c = compare.get_config()
  rows = cv.default_rows(c)
  names = {r["rule"] for r in rows if r["kind"] == "spec"}
  assert names == set(verifiers.available())  # every registered rule
  assert {r["drafter"] for r in rows} == {"-", "chain", "tree"}
  assert {r["method"] for r in rows if r["baseline"]} == {"baseline:spec_cascade(p_base=0.3)",
                                                          "baseline:typical(eps=0.09)"}
  assert all(r["temperature"] > 0 for r in rows if r["baseline"])
  assert len({r["key"] for r in rows}) == len(rows)
  th = sweep_theta.rows(theta.get_config())
  assert sorted(r["hparams"]["theta"] for r in th if r["rule"] == "mars") == [0.84, 0.88, 0.9,
                                                                               0.92, 0.96]
  ks = sweep_k.rows(k.get_config())
  assert {(r["rule"], r["num_draft"]) for r in ks if r["kind"] == "spec"} == {
      (n, kk) for n in ("lossless", "mars") for kk in (1, 2, 4, 6, 8)}
  ts = sweep_temperature.rows(temperature.get_config())
  assert sorted({r["temperature"] for r in ts}) == [0.0, 0.5, 0.7, 1.0]
  # Changing a run setting changes every key (no stale resume).
  c2 = compare.get_config()
  c2.data.max_new_tokens = 7
  assert not {r["key"] for r in rows} & {r["key"] for r in cv.default_rows(c2)}
  from specjax import verifiers
  expect = [(n, {"theta": 0.8, "guard": False} if n == "mars" else {})
            for n in verifiers.available()]
  assert cv.parse_rules("all, mars:theta=0.8:guard=false") == expect



def test_rows_say_whether_they_hold_k_or_a_depth(monkeypatch):
  """A chain row holds num_draft (K, key ``K=``), a tree row depth (key ``D=``, no
  num_draft), a target row num_draft 0; the wrong size is refused; draft_depth,
  the table's K column and evaluation.build read new rows and old tree records
  (depth in num_draft) alike."""
  from experiments.common import reports, rows
  from experiments.compare import evaluation
  from experiments.configs import compare
  c = compare.get_config()
  c.drafters = ("chain", "tree", "eagle_chain", "eagle_tree", "suffix_tree", "rsd_tree")
  c.num_draft, c.tree_paths, c.eagle_depth = 3, "[[0], [1], [0, 0]]", 5
  c.eagle_dir = "eagle3"
  all_rows = rows.default_rows(c)
  depth = {"chain": 3, "tree": 2, "rsd_tree": 2, "eagle_tree": 5, "eagle_chain": 3,
           "suffix_tree": int(c.suffix_depth)}
  assert {r["drafter"] for r in all_rows} == set(depth) | {"-"}
  for r in all_rows:
    d = r["drafter"]
    if d == "-":
      assert r["num_draft"] == 0 and "depth" not in r and "|K=0|" in r["key"]
    elif d in ("chain", "eagle_chain"):
      assert r["num_draft"] == depth[d] and "depth" not in r, r
      assert f"|K={depth[d]}|" in r["key"]
    else:
      assert r["depth"] == depth[d] and "num_draft" not in r, r
      assert f"|D={depth[d]}|" in r["key"] and "|K=" not in r["key"]
    assert rows.draft_depth(r) == (depth[d] if d != "-" else 0)
  assert rows.drafter_size(c, "eagle_tree") == {"depth": 5}
  assert rows.drafter_size(c, "chain") == {"num_draft": 3}
  with pytest.raises(ValueError, match="drafts trees: its row takes depth="):
    rows.make_row(c, kind="spec", drafter="tree", temperature=0.0, num_draft=2)
  with pytest.raises(ValueError, match="drafts chains: its row takes num_draft="):
    rows.make_row(c, kind="spec", drafter="chain", temperature=0.0, depth=2)
  # An old tree record: the depth in num_draft.
  old = {"kind": "spec", "method": "lossless", "rule": "lossless", "hparams": {},
         "baseline": False, "drafter": "eagle_tree", "temperature": 0.0, "num_draft": 5}
  new = {k: v for k, v in old.items() if k != "num_draft"} | {"depth": 5}
  assert rows.draft_depth(old) == rows.draft_depth(new) == 5
  table = reports.markdown_table([{"config": x, "result": {"tau": 2.0}} for x in (old, new)])
  assert table.count("| lossless | eagle_tree | 0 | 5 | 2.00 |") == 2
  # evaluation.build: num_draft= for a chain, depth= for a tree (old records too).
  seen = []

  def fake_make_drafter(name, samp, sources, **kw):
    seen.append((name, {k: kw.get(k) for k in ("num_draft", "depth")}))
    return None, None

  monkeypatch.setattr("specjax.decoding.drafter_factory.make_drafter", fake_make_drafter)

  class Ctx:
    sources, eagle = None, object()
  Ctx.c = c
  chain = next(r for r in all_rows if r["drafter"] == "chain")
  for row in (chain, new, old):
    evaluation.build(Ctx, row)
  assert seen == [("chain", {"num_draft": 3, "depth": None}),
                  ("eagle_tree", {"num_draft": None, "depth": 5}),
                  ("eagle_tree", {"num_draft": None, "depth": 5})]

def test_plots_from_records(tmp_path):
  from experiments.common import reports as cv
  recs = []
  for t in (0.0, 1.0):
    recs.append({"config": {"kind": "target", "method": "target", "drafter": "-",
                            "temperature": t, "num_draft": 0},
                 "result": {"loglik": -1.0}})
    for th in (0.8, 0.9):
      recs.append({"config": {"kind": "spec", "method": f"mars(theta={th})", "drafter": "chain",
                              "temperature": t, "num_draft": 4, "x": th, "series": "mars"},
                   "result": {"loglik": -1.1, "tau": 2.0 + th, "speedup": 1.2,
                              "parse_frac": 0.9}})
  cv.plot_quality_vs_speed(recs, str(tmp_path / "a.png"))
  cv.plot_lines(recs, str(tmp_path / "b.png"), "t", lambda c: c.get("x", 0.0), "theta")
  import matplotlib.image as mpimg
  for name in ("a.png", "b.png"):  # a decodable image with drawn (non-white) content
    img = mpimg.imread(str(tmp_path / name))
    assert img.ndim == 3 and img.shape[0] >= 200 and img.shape[1] >= 200
    assert (img[..., :3] < 0.5).mean() > 0.001, name
  table = cv.markdown_table(recs)
  assert table.count("\n") == len(recs) + 1 and "| mars(theta=0.9) | chain | 1 | 4 | 2.90 |" in table


def test_decode_speedup_per_prompt_set():
  """Per-set decode speedups read only that set's batches (here sharegpt at 2x, humaneval
  at 1x exactly, with no spread), and none are given for one set, a batch that mixes
  sets, or a set with fewer than MIN_SET_BATCHES batches."""
  import types
  from experiments.common.prompts import ChatPrompt
  from experiments.compare.evaluation import MIN_SET_BATCHES, _per_prompt_set

  def ctx(*sets):
    return types.SimpleNamespace(prompts=[ChatPrompt("x", (1,), f"{s}:{i}", s)
                                          for i, s in enumerate(sets)])

  m = MIN_SET_BATCHES
  target = [[(10, 1.0)] * (2 * m)]
  spec = [[(10, 0.5)] * m + [(10, 1.0)] * m]
  one = [[p] for p in range(2 * m)]
  both = ctx(*["sharegpt"] * m, *["humaneval"] * m)
  out = _per_prompt_set(both, one, spec, target)
  assert list(out) == ["sharegpt", "humaneval"]
  assert out["sharegpt"]["speedup"] == pytest.approx(2.0)
  assert out["humaneval"]["speedup"] == pytest.approx(1.0)
  assert out["sharegpt"]["batches"] == m
  assert not _per_prompt_set(ctx(*["sharegpt"] * (2 * m)), one, spec, target)
  pairs = [[2 * i, 2 * i + 1] for i in range(m)]
  mixed = ctx(*["sharegpt", "humaneval"] * m)
  assert not _per_prompt_set(mixed, pairs, [[(20, 1.0)] * m], [[(20, 2.0)] * m])
  lone = _per_prompt_set(ctx(*["sharegpt"] * (2 * m - 1), "humaneval"), one, spec, target)
  assert list(lone) == ["sharegpt"]
