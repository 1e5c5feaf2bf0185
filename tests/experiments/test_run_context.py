"""The one context builder of the comparison, the sweeps and the benchmark
(experiments/common/run_context.py) on a tiny *real-model-shaped* set: an HF directory
target with a chat template, a draft LM directory and an EAGLE-3 head recording
the target's hash -- the path SmolLM2 takes, offline, with tiny chat prompts;
every rule of DEFAULT_RULES x {chain, eagle_chain, eagle_tree} x {T = 0, T > 0};
config errors before any model loads; reports (intervals, notes, figures_dir)."""

import json
import math
import os

import jax
import numpy as np
import pytest

from experiments.compare import evaluation
from experiments.common import reports, row_stats, rows, run_context
from experiments.configs import compare
from specjax.models.config import ModelConfig
from specjax.models.transformer import Model
from tests import gguf_fixtures as fx
from tests.helpers import scaled_params

TEMPLATE_CONFIG = {"chat_template": fx.CHAT_TEMPLATE, "bos_token": "<|im_start|>",
                   "eos_token": "<|im_end|>"}
MESSAGES = ["What is a fox?", "Write fibonacci in Python.", "Count to four."]


def _write_set(root: str) -> dict:
  """A tiny target HF dir (chat template, eos 2), a 1-layer draft LM dir and an
  EAGLE-3 head dir that records the target's file hash."""
  from specjax.models import eagle, eagle_io, hf, registry
  tok = fx.train_tokenizer()
  tc = ModelConfig(vocab_size=fx.VOCAB, hidden_size=32, intermediate_size=64,
                   num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
                   head_dim=16, eos_token_id=2, max_position_embeddings=512)
  tdir, ddir, edir = (os.path.join(root, n) for n in ("target", "draft", "eagle"))
  hf.save_pretrained(tdir, tc, scaled_params(Model(tc), 0, 3.0), tokenizer=tok)
  with open(os.path.join(tdir, "tokenizer_config.json"), "w") as f:
    json.dump(TEMPLATE_CONFIG, f)
  dc = tc.replace(num_hidden_layers=1)
  hf.save_pretrained(ddir, dc, scaled_params(Model(dc), 1, 3.0), tokenizer=tok)
  ec = eagle.EagleConfig.for_target(tc, "eagle3")
  sha = registry.file_sha256(os.path.join(tdir, "model.safetensors"))
  eagle_io.save_eagle(edir, ec, eagle.EagleHead(ec).init_params(jax.random.key(2)),
                      extra_config={"target_sha256": sha})
  return {"models": tdir, "draft": ddir, "eagle_dir": edir}


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory):
  return _write_set(str(tmp_path_factory.mktemp("tiny_real")))


def _fake_chat_prompts(calls):
  """Stands in for the held-out ShareGPT / HumanEval loader (offline): tiny chat
  prompts rendered by the model's own chat template."""
  from experiments.common.prompts import ChatPrompt

  def load(encode_chat, num_prompts, *, sets, max_tokens, seed):
    calls.append({"n": num_prompts, "sets": tuple(sets), "max_tokens": max_tokens, "seed": seed})
    return [ChatPrompt(m, tuple(encode_chat([{"role": "user", "content": m}])), f"fake:{i}", "qa")
            for i, m in enumerate(MESSAGES[:num_prompts])]
  return load


def _config(tiny_set, tmp_path, **over):
  c = compare.get_config("smollm2")  # the real-model settings, on the tiny set
  c.update(tiny_set)
  c.workdir = str(tmp_path / "run")
  c.figures_dir = str(tmp_path / "figures")
  c.progress = False
  c.compile_cache_dir = ""
  c.num_draft = 2
  c.eagle_depth, c.eagle_top_k, c.eagle_total_tokens = 2, 2, 3
  c.data.num_prompts = 2
  c.data.max_new_tokens = 4
  c.data.prompt_bucket = 32
  c.data.max_prompt_tokens = 32
  c.timing.repeats = 2
  c.kl.num_prompts, c.kl.contexts = 2, 4
  for k, v in over.items():
    c[k] = v
  return c


@pytest.fixture
def ctx(tiny_set, tmp_path, monkeypatch):
  calls = []
  monkeypatch.setattr("experiments.common.prompts.load_chat_prompts", _fake_chat_prompts(calls))
  c = _config(tiny_set, tmp_path)
  out = run_context.load_context(c)
  out.calls = calls
  return out


@pytest.mark.slow  # a whole evaluated row on the chat set-up (49 s)
def test_real_model_context(ctx):
  """A chat model: chat prompts from data.prompt_sets, both drafters, no parse fraction."""
  assert ctx.calls == [{"n": 2, "sets": ("sharegpt", "humaneval"), "max_tokens": 32, "seed": 0}]
  assert not ctx.code_prompts and ctx.draft is not None and ctx.eagle is not None
  assert ctx.draft.config.num_hidden_layers == 1
  text = ctx.tokenizer.decode(list(ctx.prompts[0].ids), skip_special_tokens=False)
  assert text.startswith("<|im_start|>user\n" + MESSAGES[0]) and text.endswith("assistant\n")
  c = ctx.c
  row = rows.make_row(c, kind="spec", drafter="eagle_tree", temperature=0.0, depth=2,
                      rule="lossless")
  res = evaluation.evaluate_row(ctx, row)
  assert "parse_frac" not in res and res["agree_exact"] == 1.0  # greedy lossless == target
  assert res["tau"] >= 1 and res["repeats_identical"] and res["num_rows"] == 4
  lo, hi = res["loglik_ci"]
  assert lo <= res["loglik"] <= hi and len(res["tau_ci"]) == 2


def test_every_rule_is_defined_for_every_drafter(ctx):
  """DEFAULT_RULES x {chain, eagle_chain, eagle_tree} x {0, 1}: every drafter
  supplies the node distribution CoS needs, so no pair is skipped."""
  from specjax.decoding.speculative import node_dist_missing
  c = ctx.c
  all_rows = [r for r in rows.default_rows(c) if r["kind"] == "spec"]
  assert {r["drafter"] for r in all_rows} == {"chain", "eagle_chain", "eagle_tree"}
  assert {r["rule"] for r in all_rows} == {n for n, _ in rows.parse_rules(compare.DEFAULT_RULES)}
  assert {r["temperature"] for r in all_rows} == {0.0, 1.0}
  for r in all_rows:
    drafter, _, verifier, _ = evaluation.build(ctx, r)
    assert node_dist_missing(drafter, verifier) == "", r["key"]


def test_undefined_pair_is_a_row_with_a_reason(ctx, monkeypatch):
  """A drafter without node distributions and a CoS rule: a skipped row, not a crash."""
  from specjax.decoding.drafters import LMTreeDrafter

  class NoNodeDist(LMTreeDrafter):
    supplies_node_dist = False

  real_build = evaluation.build

  def build(ctx_, row):
    d, p, v, s = real_build(ctx_, row)
    return NoNodeDist(d.model, paths=d.paths, sampling=d.sampling), p, v, s

  monkeypatch.setattr(evaluation, "build", build)
  c = ctx.c
  c.drafters = ("tree",)
  row = rows.make_row(c, kind="spec", drafter="tree", temperature=0.0, depth=2,
                      rule="cos", hparams={"lam": 0.4})
  res = evaluation.evaluate_row(ctx, row)
  assert set(res) == {"skipped"} and "needs the drafter's full distribution" in res["skipped"]
  table = reports.markdown_table([{"config": row, "result": res}])
  assert "| cos(lam=0.4) | tree | 0 | 2 | – |" in table and "NoNodeDist" in table


@pytest.mark.slow
def test_every_rule_runs_with_every_drafter(tiny_set, tmp_path, monkeypatch):
  """The smollm2 comparison's rows on the tiny set, end to end, at T = 1 for four rules
  (lossless, MARS, typical with its matched baseline, CoS) x the three drafters:
  finite quality everywhere.  (All 8 rules x 3 drafters x 2 temperatures in one
  process compile ~56 programs: 17 min under load and an XLA abort once, too much
  for CI; that every rule is defined for every drafter is tested above without
  running them.)"""
  from experiments import compare_verifiers as cv
  monkeypatch.setattr("experiments.common.prompts.load_chat_prompts", _fake_chat_prompts([]))
  c = _config(tiny_set, tmp_path, matched_baselines=True)
  c.timing.repeats = 1
  c.temperatures = (1.0,)
  c.rules = "lossless, mars:theta=0.9, typical:eps=0.09, cos:lam=0.4"
  out = cv.run(c)
  recs = out["records"]
  assert len(recs) == len(rows.default_rows(c)) == 1 + 4 * 3 + 1 * 3
  for r in recs:
    res, cfg = r["result"], r["config"]
    assert "skipped" not in res and math.isfinite(res["loglik"]), cfg["key"]
    if cfg["kind"] == "spec":
      assert res["tau"] >= 1 and res["speedup"] > 0
    if cfg["temperature"] > 0 and cfg["kind"] == "spec":
      assert math.isfinite(res["first_kl"]) and res["first_contexts"] == 8, cfg["key"]
      if cfg["baseline"] or cfg["method"] == "lossless":  # their own baselines: exact 0
        assert res["first_kl"] < 1e-5, cfg["key"]
    if cfg["method"] == "lossless" and cfg["temperature"] == 0:
      assert res["agree_exact"] == 1.0, cfg["key"]
  assert out["figure"] == os.path.join(c.figures_dir, "compare_verifiers_smollm2.png")
  assert os.path.isfile(out["figure"])


# --------------------------------------------------------------------------- config errors


@pytest.mark.parametrize("over, message", [
    ({"models": "/nowhere/model.gguf"}, "models='/nowhere/model.gguf': give 'default'"),
    ({"draft": "/nowhere"}, "draft='/nowhere': give 'draft'"),
    ({"eagle_dir": "eagle9"}, "eagle_dir='eagle9': give eagle1 / eagle3"),
    ({"eagle_dir": "eagle1"}, "eagle_dir='eagle1': no 'eagle1' drafter is shipped"),
    ({"eagle_dir": ""}, "has 'eagle_chain' but eagle_dir=''"),
    ({"draft": ""}, "needs a draft LM but draft=''"),
    ({"mesh_model": 2}, "mesh_model=2 needs a mesh"),
    ({"eagle_top_k": 0}, "eagle_top_k"),
    ({"figures_dir": __file__}, "figures_dir="),
])
def test_bad_config_names_key_before_loading(over, message, monkeypatch, tmp_path):
  from experiments import compare_verifiers as cv
  monkeypatch.setattr("experiments.common.model_sets.load_model_set",
                      lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded a model")))
  c = compare.get_config("smollm2")
  c.workdir = str(tmp_path)
  for k, v in over.items():
    c[k] = v
  with pytest.raises(ValueError, match=None) as e:
    cv.run(c)
  assert message in str(e.value)


def test_bad_prompt_sets_and_sweep_values(tmp_path):
  from experiments import sweep_k, sweep_theta
  from experiments.configs import k, theta
  c = compare.get_config("smollm2")
  c.data.prompt_sets = ("wiki",)
  with pytest.raises(ValueError, match=r"data.prompt_sets=\('wiki',\): choose one or more"):
    rows.default_rows(c)
  t = theta.get_config("smollm2")
  t.thetas = (0.9, 0.0)
  with pytest.raises(ValueError, match="theta"):
    sweep_theta.rows(t)
  kc = k.get_config("smollm2")
  kc.drafters = ("eagle_tree",)
  with pytest.raises(ValueError, match=r"drafters=\('eagle_tree',\): the K sweep takes chain"):
    sweep_k.rows(kc)
  with pytest.raises(ValueError, match="unknown config variant 'smol'"):
    compare.get_config("smol")


def test_smollm2_variants():
  """The smollm2 variants: the acceptance table's 24-node tree, batch 1, >= 3 repeats,
  figures into docs/figures named *_smollm2.png, every rule x drafter x T."""
  from experiments import sweep_k, sweep_theta
  from experiments.configs import k, theta
  for c in (compare.get_config("smollm2"), theta.get_config("smollm2"),
            k.get_config("smollm2")):
    assert c.models == "smollm2-135m-instruct" and c.name.endswith("_smollm2")
    assert (c.eagle_depth, c.eagle_top_k, c.eagle_total_tokens) == (5, 8, 24)
    assert c.data.batch_size == 1 and c.timing.repeats >= 3
    assert c.figures_dir == "docs/figures"
    assert 0.0 in c.temperatures and any(t > 0 for t in c.temperatures)
  th = sweep_theta.rows(theta.get_config("smollm2"))
  assert sorted({r["hparams"]["theta"] for r in th if r["rule"] == "mars"}) == [
      0.8, 0.85, 0.9, 0.95, 0.98]
  assert {r["drafter"] for r in th if r["kind"] == "spec"} == {"eagle_chain", "eagle_tree"}
  ks = sweep_k.rows(k.get_config("smollm2"))
  assert {r["drafter"] for r in ks if r["kind"] == "spec"} == {"eagle_chain"}


# --------------------------------------------------------------------------- reports


def test_row_stats_intervals():
  s = row_stats.SpecSums(2)

  class St:  # one call of 2 rows
    accepted, relaxed = np.array([3, 1]), np.array([1, 0])
    target_calls, verified_tokens = np.array([2, 2]), np.array([8, 8])
    accept_counts, offered_counts = np.array([[2, 1], [1, 0]]), np.array([[2, 2], [2, 1]])
    gamma_counts = np.array([[0, 0, 2], [1, 0, 1]])  # rounds at gamma = 0, 1, 2
    source_rounds = np.array([[2, 0], [1, 1]])  # rounds by each of two sources

  s.add(St, 0, 2)
  out = s.result()
  assert out["tau"] == pytest.approx((4 + 4) / 4) and out["relaxed_rate"] == 0.25
  assert out["accept_rate_per_position"] == [0.75, pytest.approx(1 / 3)]
  assert out["gamma_share"] == [0.25, 0.0, 0.75] and out["source_share"] == [0.75, 0.25]
  lo, hi = out["tau_ci"]
  assert 1.5 <= lo <= 2.0 <= hi <= 2.5  # prompts: tau 2.5 and 1.5
  # log-lik over [repeat][prompt] rows: token-weighted, repeats of a prompt together
  lo, hi = row_stats.loglik_ci([-1.0, -3.0, -1.0, -3.0], [2, 2, 2, 2], 2)
  assert (lo, hi) == (-3.0, -1.0)
  assert row_stats.fraction_ci([1, 0], 1) is None  # one prompt: no interval


def test_table_intervals_and_figures_dir(tmp_path):
  recs = [{"config": {"kind": "spec", "method": "mars(theta=0.9)", "drafter": "eagle_chain",
                      "temperature": 1.0, "num_draft": 4, "x": 0.9},
           "result": {"tau": 2.0, "tau_ci": [1.5, 2.5], "loglik": -1.0, "loglik_ci": [-1.2, -0.8],
                      "speedup": 1.1}},
          {"config": {"kind": "spec", "method": "mars(theta=0.95)", "drafter": "eagle_chain",
                      "temperature": 1.0, "num_draft": 4, "x": 0.95},
           "result": {"tau": 1.8, "tau_ci": [1.4, 2.2], "loglik": -0.9,
                      "loglik_ci": [-1.1, -0.7], "speedup": 1.0}}]
  table = reports.markdown_table(recs)
  assert "| 2.00 [1.50, 2.50] | 1.10 |" in table and "| -1.000 [-1.200, -0.800] |" in table
  c = compare.get_config()
  c.workdir, c.figures_dir = str(tmp_path / "w"), str(tmp_path / "fig")
  os.makedirs(c.workdir)
  out = reports.write_reports(c, recs, "sweep_theta_smollm2", "t",
                              plot_fn=lambda r, p, t: reports.plot_lines(
                                  r, p, t, lambda cfg: cfg["x"], "theta"))
  assert out["figure"] == str(tmp_path / "fig" / "sweep_theta_smollm2.png")
  assert os.path.isfile(out["figure"]) and os.path.isfile(out["markdown"])
