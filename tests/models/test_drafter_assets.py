"""Drafters shipped for a real target (specjax.models.drafter_assets): a draft LM
stored without the embedding it shares with the target loads back to exactly the
same model; drafters of another target, inconsistent files and unknown kinds are
refused with errors naming what is wrong."""

import json
import os

import jax
import numpy as np
import pytest

from specjax.models import drafter_assets, hf, safetensors_io
from specjax.models.config import ModelConfig
from specjax.models.transformer import Model
from specjax.training import distill
from tests.helpers import scaled_params

TC = ModelConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                 tie_word_embeddings=True)
SHA, OTHER = "12" * 32, "34" * 32


@pytest.fixture(scope="module")
def target():
  m = Model(TC)
  return m, scaled_params(m, 0, 2.0)


def _draft(target):
  m, tp = target
  dcfg = distill.draft_config(TC, 1)
  params = jax.tree.map(lambda x: x + 0.01, distill.init_from_target(dcfg, m, tp))
  params["embed_tokens"] = tp["embed_tokens"]  # shared: not trained
  return dcfg, params


def test_draft_without_embedding_round_trip(tmp_path, target):
  m, tp = target
  dcfg, params = _draft(target)
  path = str(tmp_path / "draft")
  drafter_assets.save_draft(path, dcfg, params, target_sha256=SHA, target_name="tiny",
                            dtype="float32", training={"steps": 3})
  stored = safetensors_io.read_safetensors(os.path.join(path, hf.WEIGHTS_FILE))
  assert "model.embed_tokens.weight" not in stored and len(stored) > 0
  d = json.load(open(os.path.join(path, "config.json")))
  assert d["target_sha256"] == SHA and d["shared_from_target"] == ["model.embed_tokens.weight"]
  dm, dp = drafter_assets.load_draft(path, m, tp, target_sha256=SHA)
  assert dm.config.num_hidden_layers == 1
  jax.tree.map(np.testing.assert_array_equal, dp, params)
  # the complete HF directory loads with the generic loader to the same params
  out = drafter_assets.export_draft_hf(path, str(tmp_path / "hf"), m, tp, None,
                                       target_sha256=SHA)
  jax.tree.map(np.testing.assert_array_equal, hf.load_pretrained(out)[1], params)
  # bfloat16 storage: the embedding is still exactly the target's
  drafter_assets.save_draft(str(tmp_path / "bf16"), dcfg, params, target_sha256=SHA)
  _, bp = drafter_assets.load_draft(str(tmp_path / "bf16"), m, tp, target_sha256=SHA)
  np.testing.assert_array_equal(bp["embed_tokens"]["embedding"], tp["embed_tokens"]["embedding"])


def test_refusals(tmp_path, target):
  m, tp = target
  dcfg, params = _draft(target)
  path = str(tmp_path / "draft")
  drafter_assets.save_draft(path, dcfg, params, target_sha256=SHA)
  with pytest.raises(ValueError, match=r"draft LM .* trained for target sha256 121212"):
    drafter_assets.load_draft(path, m, tp, target_sha256=OTHER)
  drafter_assets.load_draft(path, m, tp, target_sha256=None)  # explicit opt-out
  wide = Model(TC.replace(vocab_size=48))
  with pytest.raises(ValueError, match="cannot share tensors"):
    drafter_assets.load_draft(path, wide, wide.init_params(jax.random.key(0)), target_sha256=SHA)
  with pytest.raises(ValueError, match="shared=.*not tensors"):
    drafter_assets.save_draft(str(tmp_path / "x"), dcfg, params, target_sha256=SHA,
                              shared=("model.nope",))
  with pytest.raises(ValueError, match="drafter kind 'medusa'"):
    drafter_assets.drafter_dir("smollm2-135m-instruct", "medusa")
  with pytest.raises(FileNotFoundError, match="no 'draft' drafter is shipped for target 'nope'"):
    drafter_assets.resolve("nope", "draft")
  with pytest.raises(FileNotFoundError, match="neither a kind"):
    drafter_assets.resolve("nope", str(tmp_path / "missing"))


def test_early_exit_is_the_truncated_target(target):
  """The early-exit model equals running the target's first n layers, then its own
  final norm and head (computed here by zeroing the later layers' residual updates)."""
  import jax.numpy as jnp
  from specjax.models.early_exit import early_exit
  m, tp = target
  comp, cp = early_exit(m, tp, 2)
  assert comp.config.num_hidden_layers == 2
  assert cp["embed_tokens"] is tp["embed_tokens"]
  tok = jnp.asarray([[1, 5, 7, 3, 9]])
  pos = jnp.arange(5)[None]
  got = comp.apply(cp, tok, pos, comp.init_cache(1, 5)).logits
  # layer 3 with o_proj and down_proj zeroed adds nothing to the residual stream
  zeroed = jax.tree.map(lambda x: x, tp)
  for group, name in (("self_attn", "o_proj"), ("mlp", "down_proj")):
    node = zeroed["layers"][group][name]
    node["kernel"] = node["kernel"].at[2].set(0.0)
  want = m.apply(zeroed, tok, pos, m.init_cache(1, 5)).logits
  np.testing.assert_allclose(got, want, atol=1e-5)
  full = m.apply(tp, tok, pos, m.init_cache(1, 5)).logits
  assert not np.allclose(got, full, atol=1e-3)
  with pytest.raises(ValueError, match=r"num_layers=4 must be an integer in \[1, 3\]"):
    early_exit(m, tp, 4)
