"""Optimizer, exact resume after a simulated kill, the train_lm binary, and the
shipped default models (load, generate, transformers peer check)."""

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.data import batching
from specjax.models.config import ModelConfig
from specjax.training import lm, optim

TINY = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                   tie_word_embeddings=True)


def _batchers():
  rng = np.random.default_rng(0)
  # A learnable stream: a noisy repeating pattern.
  base = np.tile(np.arange(40) % 64, 60)
  stream = np.where(rng.random(base.shape) < 0.1, rng.integers(0, 64, base.shape), base)
  return (batching.Batcher(stream[:2000], seq_len=16, batch_size=4),
          batching.Batcher(stream[2000:], seq_len=16, batch_size=4))


def _trainer(workdir, steps, precision="float32", eval_every=3, checkpoint_every=0,
             model_config=TINY):
  train, held = _batchers()
  ocfg = optim.OptimConfig(learning_rate=1e-2, warmup_steps=2, total_steps=steps)
  tcfg = lm.LMTrainConfig(num_steps=steps, precision=precision, eval_every=eval_every,
                          eval_batches=2,
                          checkpoint_every=checkpoint_every, log_every=100)
  return lm.LMTrainer(model_config, ocfg, tcfg, train, held, workdir, progress=False)


def test_schedule_and_decay_mask():
  cfg = optim.OptimConfig(learning_rate=1.0, warmup_steps=10, total_steps=110, min_lr_ratio=0.1)
  sched = optim.schedule(cfg)
  assert float(sched(0)) == 0.0
  assert math.isclose(float(sched(5)), 0.5, rel_tol=1e-6)
  assert math.isclose(float(sched(10)), 1.0, rel_tol=1e-6)
  assert math.isclose(float(sched(60)), 0.55, rel_tol=1e-5)
  assert math.isclose(float(sched(110)), 0.1, rel_tol=1e-5)
  params = jax.eval_shape(lm.training_model(TINY, "float32").init_params, jax.random.key(0))
  mask = optim.decay_mask(params)
  assert mask["embed_tokens"]["embedding"] and mask["layers"]["mlp"]["up_proj"]["kernel"]
  assert not mask["norm"]["weight"] and not mask["layers"]["input_layernorm"]["weight"]
  with pytest.raises(ValueError, match="warmup_steps"):
    optim.OptimConfig(warmup_steps=5, total_steps=2)


def test_resume_after_kill_reproduces_losses_exactly(tmp_path):
  n = 4
  ref = _trainer(None, 2 * n)
  ref_hist = list(ref.train())
  assert ref_hist[-1] < ref_hist[0]

  first = _trainer(str(tmp_path), 2 * n)
  first.train(stop_after=n)  # checkpoint at n, then "killed"
  assert first.history == ref_hist[:n]
  params_n = jax.tree.map(np.asarray, first.state.params)
  first.close()
  del first

  resumed = _trainer(str(tmp_path), 2 * n)  # a fresh trainer restores from orbax
  resumed.init_or_restore()
  assert resumed.resumed_from == n and resumed.data_state.step == n
  assert int(resumed.state.step) == n
  hist = resumed.train()
  assert hist == ref_hist  # bitwise-equal losses, restored history included
  jax.tree.map(np.testing.assert_array_equal, resumed.state.params, ref.state.params)
  assert [e["eval_loss"] for e in resumed.evals] == [e["eval_loss"] for e in ref.evals]
  resumed.close()

  # A mid-run checkpoint (its buffers donated by the following steps) is intact.
  full = _trainer(str(tmp_path / "full"), 2 * n, checkpoint_every=n)
  assert full.train() == ref_hist
  state_n, data_n, meta_n = full.checkpointer.restore(jax.eval_shape(full.init_state), step=n)
  jax.tree.map(np.testing.assert_array_equal, state_n.params, params_n)
  assert data_n == {"seed": 0, "step": n} and meta_n["history"] == ref_hist[:n]
  full.close()


def test_resume_with_a_changed_model_names_the_leaf(tmp_path):
  """Resuming a workdir after changing the model raises one ValueError naming the
  first differing leaf and both shapes (checked before orbax restores anything)."""
  first = _trainer(str(tmp_path), 3, eval_every=0)
  first.train()
  first.close()
  wider = _trainer(str(tmp_path), 4, eval_every=0, model_config=TINY.replace(hidden_size=48))
  with pytest.raises(ValueError, match=r"leaf 'params\.embed\S*' has shape \(64, 32\) "
                     r"float32 in the checkpoint but \(64, 48\) float32 in the current model"
                     r".*config that wrote it.*new workdir"):
    wider.init_or_restore()
  wider.close()
  deeper = _trainer(str(tmp_path), 4, eval_every=0,
                    model_config=TINY.replace(num_hidden_layers=2))
  with pytest.raises(ValueError, match=r"leaf 'params\.\S+' .*(not in the checkpoint|"
                     r"\(1, .* in the checkpoint but \(2, )"):
    deeper.init_or_restore()
  deeper.close()
  same = _trainer(str(tmp_path), 4, eval_every=0)  # the original config still resumes
  same.init_or_restore()
  assert same.resumed_from == 3
  same.close()


def test_bf16_activations_keep_fp32_master_params():
  t = _trainer(None, 3, precision="bfloat16", eval_every=0)
  hist = t.train()
  assert all(np.isfinite(hist))
  assert t.model.config.compute_dtype == jnp.bfloat16
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(t.state.params))
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(t.final_params()))
  with pytest.raises(ValueError, match="precision"):
    lm.LMTrainConfig(precision="fp8")


@pytest.mark.slow
def test_train_lm_binary_end_to_end(tmp_path):
  from experiments import train_lm
  from experiments.configs import tiny
  from specjax.models import hf

  root = tmp_path / "corpus"
  for i in range(12):
    (root / f"d{i % 2}").mkdir(parents=True, exist_ok=True)
    (root / f"d{i % 2}" / f"m{i}.py").write_text(
        f"def func_{i}(a, b):\n    return a + b * {i}\n\n\nclass C{i}:\n    pass\n" * 12)
  c = tiny.get_config()
  c.data.root = str(root)
  c.data.heldout_fraction = 0.3
  c.data.vocab_size = 280
  c.data.tokenizer_path = str(tmp_path / "tok" / "tokenizer.json")
  c.data.cache_dir = str(tmp_path / "cache")
  c.workdir = str(tmp_path / "run")
  m = train_lm.run(c)
  assert m["steps"] == c.train.num_steps and np.isfinite(m["heldout_loss"])
  saved = json.load(open(tmp_path / "run" / "metrics.json"))
  assert saved["heldout_ppl"] == pytest.approx(math.exp(saved["heldout_loss"]))
  model, params = hf.load_pretrained(m["export_dir"])
  assert model.config.eos_token_id == 0 and model.config.vocab_size == 280
  assert os.path.isfile(os.path.join(m["export_dir"], "tokenizer.json"))
  # Rerunning the same command resumes from the final checkpoint (no more steps).
  m2 = train_lm.run(c)
  assert m2["resumed_from"] == c.train.num_steps
  assert m2["heldout_loss"] == m["heldout_loss"]


# ---- the shipped default models -------------------------------------------------------------

def _assets_present():
  from specjax.models import defaults
  return all(os.path.isfile(os.path.join(defaults.default_model_dir(n), "model.safetensors"))
             for n in defaults.DEFAULT_NAMES)


needs_assets = pytest.mark.skipif(not _assets_present(),
                                  reason="default model assets not built yet")


@needs_assets
def test_default_models_load_share_tokenizer_and_generate():
  from specjax.data.tokenizer import EOS_TOKEN
  from specjax.decoding.autoregressive import generate
  from specjax.models import defaults, hf

  tok = defaults.default_tokenizer()
  eos = tok.token_to_id(EOS_TOKEN)
  total = 0
  for name in defaults.DEFAULT_NAMES:
    d = defaults.default_model_dir(name)
    total += sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    assert hf.load_tokenizer(d).to_str() == tok.to_str()
    model, params = defaults.load_default(name)
    assert model.config.model_type in ("llama", "qwen3")
    assert model.config.eos_token_id == eos
    assert model.config.vocab_size == tok.get_vocab_size()
    res = generate(model, params, [tok.encode("def ").ids], max_new_tokens=8)
    assert res.lengths[0] >= 1
  assert total <= 30 * 2 ** 20
  assert defaults.load_default("draft")[0].config.num_hidden_layers <= 2
  with pytest.raises(ValueError, match="unknown default model"):
    defaults.load_default("huge")


@needs_assets
@pytest.mark.peer
@pytest.mark.parametrize("name", ["target", "draft", "companion"])
def test_default_models_match_transformers(name):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  from specjax.models import defaults

  model, params = defaults.load_default(name)
  tok = defaults.default_tokenizer()
  ids = tok.encode("import os\n\ndef main(argv):\n    return len(argv)\n").ids
  x = jnp.asarray([ids], jnp.int32)
  pos = jnp.arange(len(ids), dtype=jnp.int32)[None]
  ours = np.asarray(model.apply(params, x, pos, model.init_cache(1, len(ids))).logits[0])
  pt = transformers.AutoModelForCausalLM.from_pretrained(
      defaults.default_model_dir(name)).float().eval()
  with torch.no_grad():
    theirs = pt(torch.tensor([ids])).logits[0].float().numpy()
  np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
