"""Model config, forward-pass contract and HF checkpoint I/O without torch:
validation errors name the problem, export/import round-trips (single and
sharded safetensors), selected hidden states, logits_index, param counts."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from specjax.models import hf
from specjax.models.config import ModelConfig
from specjax.models.transformer import Model
from tests.helpers import TINY, random_params


# --- ModelConfig validation -------------------------------------------------------

@pytest.mark.parametrize("kwargs, match", [
    (dict(model_type="gpt2"), r"model_type='gpt2' is not supported"),
    (dict(num_attention_heads=4, num_key_value_heads=3),
     r"num_attention_heads=4 must be a multiple of num_key_value_heads=3"),
    (dict(head_dim=7), r"head_dim=7 must be even"),
    (dict(hidden_size=0), r"hidden_size=0 must be a positive integer"),
    (dict(vocab_size=10.0), r"vocab_size=10.0 must be a positive integer"),
    (dict(hidden_layers=(3,)), r"hidden_layers entry 3 outside \[0, 2\]"),
    (dict(dtype="float64"), r"dtype='float64' is not supported"),
    (dict(rope_scaling=(("rope_type", "yarn"), ("factor", 2.0))),
     r"rope_scaling type 'yarn' is not supported"),
])
def test_config_validation(kwargs, match):
  with pytest.raises(ValueError, match=match):
    ModelConfig(**{**TINY, **kwargs})


@pytest.mark.parametrize("extra", [dict(), dict(tie_word_embeddings=True),
                                   dict(model_type="qwen2", qkv_bias=True),
                                   dict(model_type="qwen3", qk_norm=True, qkv_bias=True,
                                        o_bias=True)])
def test_num_params_counts_every_leaf(extra):
  model = Model(ModelConfig(**{**TINY, **extra}))
  shapes = jax.eval_shape(model.init_params, jax.random.key(0))
  assert model.config.num_params() == sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))


# --- forward contract -------------------------------------------------------------

def test_hidden_states_logits_index_and_head():
  cfg = ModelConfig(**TINY, hidden_layers=(0, 1, 2))
  model = Model(cfg)
  params = random_params(model)
  toks = jnp.asarray(np.random.RandomState(0).randint(0, 64, (2, 5)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(5, dtype=jnp.int32), (2, 5))
  apply = jax.jit(model.apply)
  out = apply(params, toks, pos, model.init_cache(2, 8))
  assert out.logits.shape == (2, 5, 64) and out.logits.dtype == jnp.float32
  assert out.hidden_states.shape == (3, 2, 5, 32)
  # index 0: input of layer 0 = the token embeddings; index L: final normed feature
  np.testing.assert_allclose(np.asarray(out.hidden_states[0]),
                             np.asarray(model.embed(params, toks)), atol=1e-6)
  np.testing.assert_allclose(np.asarray(model.lm_head(params, out.hidden_states[2])),
                             np.asarray(out.logits), atol=1e-4)
  idx = jnp.array([[4, 0], [2, 2]])
  sel = apply(params, toks, pos, model.init_cache(2, 8), None, idx)
  np.testing.assert_allclose(np.asarray(sel.logits),
                             np.take_along_axis(np.asarray(out.logits),
                                                np.asarray(idx)[:, :, None], 1), atol=1e-5)
  plain = Model(ModelConfig(**TINY))
  assert jax.eval_shape(plain.apply, params, toks, pos, model.init_cache(2, 8)
                        ).hidden_states is None


def test_decode_params_forward_is_the_scanned_forward():
  """Model.decode_params (CPU: per-layer trees, unrolled) gives the scanned forward's
  values exactly: logits, hidden states and cache, with and without a tree mask
  and logits_index, for tied and untied heads."""
  from specjax.models import kv_cache as kvc
  for tie in (True, False):
    model = Model(ModelConfig(**TINY, hidden_layers=(0, 2), tie_word_embeddings=tie),
                  layer_stack="unrolled")
    params = random_params(model)
    dec = model.decode_params(params)
    assert isinstance(dec["layers"], tuple) and len(dec["layers"]) == 2
    assert model.decode_params(dec) is dec
    toks = jnp.asarray(np.random.RandomState(1).randint(0, 64, (2, 4)), jnp.int32)
    cache = kvc.commit(model.init_cache(2, 12), jnp.array([3, 5]))
    pos = cache.lengths[:, None] + jnp.arange(4)
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((4, 4), bool)).at[3, 1].set(False), (2, 4, 4))
    for attn_mask, idx in ((None, None), (mask, jnp.array([[1], [3]]))):
      run = jax.jit(lambda p, m=attn_mask, i=idx: model.apply(p, toks, pos, cache, m, i))
      for a, b in zip(jax.tree.leaves(run(params)), jax.tree.leaves(run(dec))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_layer_stack_choice(monkeypatch):
  """Model.layer_stack: "rolled" keeps the stacked params (and stacks per-layer trees
  back, bit for bit), "unrolled" splits them; "auto" follows SPECJAX_LAYER_STACK, else
  the backend (unrolled on CPU).  Both run generate() to the same tokens.  Bad values
  name themselves."""
  from specjax.decoding.autoregressive import generate
  cfg = ModelConfig(**TINY)
  rolled, unrolled = Model(cfg, layer_stack="rolled"), Model(cfg, layer_stack="unrolled")
  params = random_params(rolled)
  assert rolled.decode_params(params) is params
  split = unrolled.decode_params(params)
  assert isinstance(split["layers"], tuple) and len(split["layers"]) == 2
  for a, b in zip(jax.tree.leaves(rolled.decode_params(split)), jax.tree.leaves(params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  prompts = [[1, 2, 3], [4, 5]]
  outs = [generate(m, params, prompts, max_new_tokens=4, eos_token_id=None).to_lists()
          for m in (rolled, unrolled)]
  assert outs[0] == outs[1]
  for env, unrolls in (("rolled", False), ("unrolled", True),
                       ("", jax.default_backend() == "cpu")):
    monkeypatch.setenv("SPECJAX_LAYER_STACK", env)
    assert Model(cfg).unrolls_layers() is unrolls, env
  monkeypatch.setenv("SPECJAX_LAYER_STACK", "sideways")
  with pytest.raises(ValueError, match="SPECJAX_LAYER_STACK='sideways'"):
    Model(cfg).unrolls_layers()
  with pytest.raises(ValueError, match="layer_stack='diagonal' must be one of"):
    Model(cfg, layer_stack="diagonal")


def test_rows_are_independent():
  """A row's logits do not depend on the other rows of the batch."""
  model = Model(ModelConfig(**TINY))
  params = random_params(model, seed=1)
  toks = jnp.asarray(np.random.RandomState(1).randint(0, 64, (3, 6)), jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(6, dtype=jnp.int32), (3, 6))
  apply = jax.jit(model.apply)
  both = apply(params, toks, pos, model.init_cache(3, 6)).logits
  one = apply(params, toks[1:2], pos[1:2], model.init_cache(1, 6)).logits
  np.testing.assert_allclose(np.asarray(both[1]), np.asarray(one[0]), atol=1e-5)


# --- HF checkpoint I/O (no torch) -------------------------------------------------

@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  """A saved tiny Qwen3-style checkpoint (q/k norm, GQA, explicit head_dim)."""
  cfg = ModelConfig(**{**TINY, "model_type": "qwen3", "qk_norm": True, "head_dim": 16},
                    eos_token_id=(2, 5), bos_token_id=1)
  model = Model(cfg)
  params = random_params(model, seed=2)
  path = str(tmp_path_factory.mktemp("ckpt"))
  hf.save_pretrained(path, cfg, params)
  return path, cfg, params


def _copy(ckpt_dir, dst):
  os.makedirs(dst, exist_ok=True)
  for f in os.listdir(ckpt_dir):
    with open(os.path.join(ckpt_dir, f), "rb") as a, open(os.path.join(dst, f), "wb") as b:
      b.write(a.read())
  return str(dst)


def _assert_same(a, b):
  jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), a, b)


def test_save_load_round_trip(ckpt):
  path, cfg, params = ckpt
  d = json.load(open(os.path.join(path, "config.json")))
  assert d["model_type"] == "qwen3" and d["architectures"] == ["Qwen3ForCausalLM"]
  assert d["head_dim"] == 16 and d["eos_token_id"] == [2, 5]
  model, loaded = hf.load_pretrained(path)
  assert model.config == cfg
  _assert_same(params, loaded)


def test_load_bfloat16_and_overrides(ckpt):
  path, cfg, params = ckpt
  model, loaded = hf.load_pretrained(path, dtype="bfloat16", hidden_layers=(2,))
  assert model.config.dtype == model.config.param_dtype == "bfloat16"
  assert model.config.hidden_layers == (2,)
  assert {x.dtype for x in jax.tree.leaves(loaded)} == {jnp.dtype(jnp.bfloat16)}
  jax.tree.map(lambda a, b: np.testing.assert_allclose(np.asarray(a, np.float32),
                                                       np.asarray(b), rtol=1e-2, atol=1e-2),
               loaded, params)
  with pytest.raises(ValueError, match=r"dtype='float64' is not supported"):
    hf.load_pretrained(path, dtype="float64")


def test_bfloat16_export_round_trip(ckpt, tmp_path):
  _, cfg, params = ckpt
  hf.save_pretrained(str(tmp_path), cfg, params, dtype="bfloat16")
  assert json.load(open(tmp_path / "config.json"))["torch_dtype"] == "bfloat16"
  assert {t.dtype.name for t in load_file(str(tmp_path / hf.WEIGHTS_FILE)).values()} == {
      "bfloat16"}
  _, loaded = hf.load_pretrained(str(tmp_path), dtype="bfloat16")
  _assert_same(jax.tree.map(lambda x: x.astype(jnp.bfloat16), params), loaded)


def test_sharded_checkpoint_loads(ckpt, tmp_path):
  path, cfg, params = ckpt
  tensors = load_file(os.path.join(path, hf.WEIGHTS_FILE))
  names = sorted(tensors)
  shards = {"model-00001-of-00002.safetensors": names[::2],
            "model-00002-of-00002.safetensors": names[1::2]}
  d = str(tmp_path)
  for fname, keys in shards.items():
    save_file({k: tensors[k] for k in keys}, os.path.join(d, fname))
  weight_map = {k: f for f, keys in shards.items() for k in keys}
  json.dump({"weight_map": weight_map}, open(os.path.join(d, hf.INDEX_FILE), "w"))
  json.dump(json.load(open(os.path.join(path, "config.json"))),
            open(os.path.join(d, "config.json"), "w"))
  _, loaded = hf.load_pretrained(d)
  _assert_same(params, loaded)
  os.remove(os.path.join(d, "model-00002-of-00002.safetensors"))
  with pytest.raises(FileNotFoundError, match="missing shard listed in .*model-00002-of-00002"):
    hf.load_pretrained(d)


def test_config_from_hf_layouts():
  base = dict(model_type="llama", vocab_size=64, hidden_size=32, intermediate_size=64,
              num_hidden_layers=2, num_attention_heads=4)
  # transformers 4: legacy rope_theta / rope_scaling keys, head_dim and kv heads implied
  c4 = hf.config_from_hf({**base, "rope_theta": 5e5, "rope_scaling": {
      "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 64}, "eos_token_id": [7, 8]})
  # transformers 5: rope_parameters holds theta and the scaling
  c5 = hf.config_from_hf({**base, "rope_parameters": {
      "rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 64}, "eos_token_id": [7, 8]})
  assert c4 == c5
  assert (c4.head_dim, c4.num_key_value_heads, c4.rope_theta) == (8, 4, 5e5)
  assert c4.eos_token_id == (7, 8) and c4.rope_scaling_dict["rope_type"] == "llama3"
  plain = hf.config_from_hf({**base, "rope_parameters": {"rope_type": "default",
                                                         "rope_theta": 1e4}})
  assert plain.rope_scaling is None and plain.rope_theta == 1e4
  q2 = hf.config_from_hf({**base, "model_type": "qwen2"})
  assert q2.qkv_bias and not q2.o_bias and not q2.qk_norm
  assert hf.config_from_hf({**base, "model_type": "qwen3"}).qk_norm
  assert hf.config_to_hf(c4)["rope_scaling"]["rope_type"] == "llama3"


# --- HF checkpoint errors ---------------------------------------------------------

def _edit_config(d, **changes):
  p = os.path.join(d, "config.json")
  cfg = json.load(open(p))
  for k, v in changes.items():
    if v is None:
      cfg.pop(k, None)
    else:
      cfg[k] = v
  json.dump(cfg, open(p, "w"))


def _edit_tensors(d, fn):
  p = os.path.join(d, hf.WEIGHTS_FILE)
  t = load_file(p)
  fn(t)
  save_file(t, p)


def test_unknown_model_type(ckpt, tmp_path):
  d = _copy(ckpt[0], tmp_path)
  _edit_config(d, model_type="gpt2")
  with pytest.raises(ValueError, match=r"unknown model_type 'gpt2'"):
    hf.load_pretrained(d)
  _edit_config(d, model_type=None)
  with pytest.raises(ValueError, match=r"unknown model_type None"):
    hf.load_pretrained(d)


@pytest.mark.parametrize("changes, match", [
    (dict(hidden_size=None), r"config.json lacks required field 'hidden_size'"),
    (dict(hidden_act="gelu"), r"hidden_act='gelu' is not supported"),
    (dict(use_sliding_window=True), r"use_sliding_window=True is not supported"),
])
def test_unsupported_config_fields(ckpt, tmp_path, changes, match):
  d = _copy(ckpt[0], tmp_path)
  _edit_config(d, **changes)
  with pytest.raises(ValueError, match=match):
    hf.load_pretrained(d)


def test_tensor_shape_mismatch(ckpt, tmp_path):
  d = _copy(ckpt[0], tmp_path)
  name = "model.layers.1.self_attn.k_proj.weight"

  def shrink(t):
    t[name] = t[name][:-1]

  _edit_tensors(d, shrink)
  with pytest.raises(ValueError, match=rf"tensor '{name}' has shape \(31, 32\), "
                                       r"expected \(32, 32\)"):
    hf.load_pretrained(d)


def test_config_disagrees_with_tensors(ckpt, tmp_path):
  d = _copy(ckpt[0], tmp_path)
  _edit_config(d, vocab_size=65)
  with pytest.raises(ValueError, match=r"tensor 'model.embed_tokens.weight' has shape "
                                       r"\(64, 32\), expected \(65, 32\)"):
    hf.load_pretrained(d)


@pytest.mark.parametrize("name", ["model.norm.weight", "lm_head.weight",
                                  "model.layers.0.self_attn.q_norm.weight"])
def test_missing_tensor(ckpt, tmp_path, name):
  d = _copy(ckpt[0], tmp_path)
  _edit_tensors(d, lambda t: t.pop(name))
  with pytest.raises(ValueError, match=rf"checkpoint is missing tensor '{name}'"):
    hf.load_pretrained(d)


def test_missing_files(ckpt, tmp_path):
  with pytest.raises(FileNotFoundError, match="checkpoint directory does not exist"):
    hf.load_pretrained(str(tmp_path / "nope"))
  d = _copy(ckpt[0], tmp_path / "a")
  os.remove(os.path.join(d, "config.json"))
  with pytest.raises(FileNotFoundError, match=r"missing file: .*config.json"):
    hf.load_pretrained(d)
  d = _copy(ckpt[0], tmp_path / "b")
  os.remove(os.path.join(d, hf.WEIGHTS_FILE))
  with pytest.raises(FileNotFoundError, match=r"no model.safetensors or "
                                              r"model.safetensors.index.json in"):
    hf.load_pretrained(d)
  with pytest.raises(FileNotFoundError, match=r"missing tokenizer file: .*tokenizer.json"):
    hf.load_tokenizer(d)


def test_malformed_files(ckpt, tmp_path):
  d = _copy(ckpt[0], tmp_path / "a")
  with open(os.path.join(d, "config.json"), "w") as f:
    f.write('{"model_type": "llama", ')
  with pytest.raises(ValueError, match=r"malformed JSON in .*config.json"):
    hf.load_pretrained(d)
  d = _copy(ckpt[0], tmp_path / "b")
  with open(os.path.join(d, hf.WEIGHTS_FILE), "wb") as f:
    f.write(b"not a safetensors file")
  with pytest.raises(ValueError, match=r"cannot read safetensors file .*model.safetensors"):
    hf.load_pretrained(d)
  d = _copy(ckpt[0], tmp_path / "c")
  os.remove(os.path.join(d, hf.WEIGHTS_FILE))
  with open(os.path.join(d, hf.INDEX_FILE), "w") as f:
    f.write("{")
  with pytest.raises(ValueError, match=r"malformed JSON in .*model.safetensors.index.json"):
    hf.load_pretrained(d)
  with open(os.path.join(d, hf.INDEX_FILE), "w") as f:
    json.dump({"weight_map": {}}, f)
  with pytest.raises(ValueError, match="has an empty weight_map"):
    hf.load_pretrained(d)
  with open(os.path.join(d, hf.TOKENIZER_FILE), "w") as f:
    f.write("{}")
  with pytest.raises(ValueError, match=r"cannot parse tokenizer file .*tokenizer.json"):
    hf.load_tokenizer(d)


@pytest.mark.parametrize("kwargs, match", [
    (dict(qkv_bias=True, o_bias=False), r"a llama config needs qkv_bias == o_bias"),
    (dict(model_type="qwen3", qk_norm=True, o_bias=True),
     r"a qwen3 config needs qkv_bias == o_bias"),
    (dict(model_type="qwen2", qkv_bias=False), r"a qwen2 config needs qkv_bias=True"),
    (dict(model_type="qwen2", qkv_bias=True, o_bias=True), r"qwen2 config needs .*o_bias=False"),
    (dict(qk_norm=True), r"qk_norm=True is not expressible for model_type='llama'"),
    (dict(model_type="qwen3"), r"qk_norm=False is not expressible for model_type='qwen3'"),
])
def test_export_rejects_configs_transformers_cannot_express(kwargs, match, tmp_path):
  """transformers would silently random-init the weights such a config lacks."""
  cfg = ModelConfig(**{**TINY, **kwargs})
  with pytest.raises(ValueError, match=match):
    hf.config_to_hf(cfg)
  params = jax.tree.map(lambda s: np.zeros(s.shape, np.float32),
                        jax.eval_shape(Model(cfg).init_params, jax.random.key(0)))
  with pytest.raises(ValueError, match=match):
    hf.save_pretrained(str(tmp_path), cfg, params)
  assert not os.listdir(tmp_path)  # nothing half-written
