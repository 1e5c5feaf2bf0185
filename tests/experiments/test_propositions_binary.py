"""experiments/lossy_propositions.py (proposition_sweep + proposition_reports) end to end at a
tiny setting (random tiny models)."""

import json
import os

import numpy as np
import pytest

from experiments.propositions import reports
from experiments.propositions import sweep as lp
from experiments.configs import propositions as cfg_lib
from experiments.common import contexts as ctx_lib


def _tiny_config():
  c = cfg_lib.get_config("tiny")
  c.rules = ("spec_cascade:p_base=0.3",)
  c.ts = (1.0, 0.0)
  c.thetas = (0.9,)
  c.mars_drafts = ("top1",)
  # Synthetic and real contexts share one shape [12, 64] (the tiny models' vocabulary),
  # so every jitted analysis compiles once.
  c.synthetic.num_contexts = 12
  c.synthetic.vocab = 64
  c.real.num_positions = 12
  c.real.seq_len = 8
  c.real.sd_contexts = 12
  return c


def test_contexts_tiny_shapes():
  ms = ctx_lib.load_models("tiny")
  ctx = ctx_lib.extract_contexts(ms, num_positions=10, seq_len=8, min_position=2, batch_size=3)
  v = ms.vocab_size
  assert ctx.z.shape == ctx.p.shape == ctx.q.shape == (10, v)
  np.testing.assert_allclose(ctx.p.sum(-1), 1.0, atol=1e-5)
  np.testing.assert_allclose(ctx.q.sum(-1), 1.0, atol=1e-5)
  assert ((ctx.position >= 2) & (ctx.position <= 6)).all()
  # distinct (window, position) pairs; a prefix is a sub-sample
  assert len({(int(r), int(c)) for r, c in zip(ctx.window, ctx.position)}) == 10
  assert ctx.take(4).z.shape == (4, v)
  # the gathered rows are the (window, position) logits of the batched forward pass
  # (same padded shape as inside extract_contexts: a compilation-cache hit)
  import jax.numpy as jnp
  windows = ctx_lib.random_windows(v, 2, 8, seed=0)
  padded = np.concatenate([windows, np.zeros((1, 8), np.int32)])
  logits = np.asarray(ctx_lib._forward_logits(ms.target, ms.target_params, jnp.asarray(padded)))
  np.testing.assert_allclose(ctx.z, logits[ctx.window, ctx.position], rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(ctx.next_token, windows[ctx.window, ctx.position + 1])


@pytest.mark.slow  # the binary end to end (65 s); the main job's end-to-end test stays
def test_binary_end_to_end_and_restart(tmp_path):
  c = _tiny_config()
  out = str(tmp_path / "run")
  records = lp.run(c, out, "tiny")
  path = os.path.join(out, lp.RECORDS)
  keys = [r["key"] for r in records]
  assert len(keys) == len(set(keys))
  # experiments.common.sweep format: every record also says how it was made
  assert all(set(r) == {"key", "config", "result", "provenance"} for r in records)
  assert all(r["provenance"]["command"] for r in records)
  flat = reports.flatten(records)
  parts = {(r["part"], r["source"]) for r in flat}
  for part in ("sd", "eagle", "truncation", "alignment"):
    assert (part, "synthetic") in parts and (part, "real") in parts
  assert ("mars", "synthetic_logits") in parts and ("margins", "real") in parts
  by = {r["key"]: r for r in flat}
  for r in by.values():
    if r["part"] == "sd":  # Proposition 1, standard SD: KL -> 0 as t -> 0
      assert r["kl_mean"][-1] < 1e-4
    if r["part"] == "eagle":  # EAGLE drafts: the KL at t = 0 is the closed-form limit
      assert abs(r["kl_mean"][-1] - r["limit"]) < 1e-4
    if r["part"] in ("truncation", "mars"):  # per-conversation sums on real contexts only
      sums = r.get("by_window", {})
      assert bool(sums) == (r["source"] == "real"), r["key"]
      assert all(sum(v["counts"]) == r.get("n", sum(v["counts"])) for v in sums.values())
  pngs = sorted(f for f in os.listdir(out) if f.endswith(".png"))
  for name in ("kl_vs_t_synthetic.png", "kl_vs_t_real.png", "truncation_be_real.png",
               "alignment_be_real.png", "alignment_be_synthetic.png",
               "mars_theta_real.png", "margins_hist_real.png"):
    assert name in pngs
  lines = open(path).read().splitlines()
  assert len(lines) == len(records)
  # Restart: nothing recomputed, no duplicate records.
  records2 = lp.run(c, out, "tiny")
  lines2 = open(path).read().splitlines()
  assert lines2 == lines
  assert len(records2) == len(records)
  # A changed setting is a new configuration; a torn last line is tolerated.
  with open(path, "a") as f:
    f.write('{"key": "torn')
  c.thetas = (0.8,)
  c.parts = ("mars",)
  c.sources = ("synthetic",)
  records3 = lp.run(c, out, "tiny")
  new = [r for r in records3 if r["key"] not in set(keys)]
  assert len(new) == 1 and new[0]["config"]["part"] == "mars"
  assert all(json.loads(l)["key"] for l in open(path).read().splitlines()[-1:])
  assert "mars" in reports.summary_table(records3)
  assert "| source |" in reports.markdown_tables(records)


def test_parse_rule():
  canon, rule = lp.parse_rule("typical:gate=soft,eps=0.05")
  assert canon == "typical:eps=0.05,gate=soft"
  assert rule.eps == 0.05 and rule.gate == "soft"
  canon, rule = lp.parse_rule("lossless")
  assert canon == "lossless"


def test_chat_contexts_assistant_positions():
  """The chat path of experiments.common.contexts: a tiny random model with a real byte-level BPE
  and a ChatML template; only positions whose next token is assistant content are used."""
  from experiments.common.model_sets import ModelSet, TinySpec, _tiny_set
  from specjax.data.chat_tokenize import tokenize_chat
  from specjax.data.sharegpt import Conversation
  from specjax.models.chat_template import ChatTemplate
  from tests import gguf_fixtures as fx
  tok = fx.train_tokenizer()
  tmpl = ChatTemplate(fx.CHAT_TEMPLATE, eos_token="<|im_end|>")
  tiny = _tiny_set(TinySpec(vocab_size=fx.VOCAB, keys="split", eos_token_id=None), 0, False)
  ms = ModelSet("tiny-chat", tiny.target, tiny.target_params, tok, tiny.draft, tiny.draft_params,
                chat_template=tmpl)
  convs = [Conversation("a", ({"role": "user", "content": "what is the answer?"},
                              {"role": "assistant", "content": "The dog sleeps."})),
           Conversation("b", ({"role": "user", "content": "print it"},)),  # no assistant turn
           Conversation("c", ({"role": "user", "content": "fox?"},
                              {"role": "assistant", "content": "The quick brown fox runs."},
                              {"role": "user", "content": "and?"},
                              {"role": "assistant", "content": "It jumps."}))]
  windows, eligible = ctx_lib.chat_windows(tok, tmpl, convs, num_windows=5, seq_len=40)
  assert windows.shape == eligible.shape == (2, 40)  # "b" is skipped
  for w, conv in zip(windows, (convs[0], convs[2])):
    tc = tokenize_chat(tok, tmpl, list(conv.messages), max_len=40)
    n = len(tc.ids)
    np.testing.assert_array_equal(w[:n], tc.ids)
  ok = eligible[0]
  tc = tokenize_chat(tok, tmpl, list(convs[0].messages), max_len=40)
  np.testing.assert_array_equal(ok[:len(tc.ids) - 1], tc.loss_mask[1:].astype(bool))
  assert not ok[len(tc.ids) - 1:].any()
  kw = dict(windows=windows, eligible=eligible, num_positions=15, seq_len=40, min_position=0,
            temperature=0.7, batch_size=2, seed=3)
  ctx = ctx_lib.extract_contexts(ms, **kw)
  assert ctx.z.shape == ctx.q.shape == (15, fx.VOCAB)
  assert eligible[ctx.window, ctx.position].all()  # assistant positions only
  np.testing.assert_allclose(ctx.p.sum(-1), 1.0, atol=1e-5)
  again = ctx_lib.extract_contexts(ms, **kw)  # deterministic given the seed
  np.testing.assert_array_equal(again.position, ctx.position)
  np.testing.assert_array_equal(again.z, ctx.z)
  # p is the target at T = 0.7
  import jax
  np.testing.assert_allclose(ctx.p, np.asarray(jax.nn.softmax(ctx.z / 0.7, -1)), atol=1e-5)
