"""Misuse of every public entry point gets a clear error.

Each case asserts the error type and that the message names the offending
value (and, where there is one, what is allowed).  Every error is raised in
Python before anything is traced or loaded, so the whole file runs in seconds.
"""

import json
import os
import re
import warnings

import jax
import numpy as np
import pytest

from specjax import verifiers
from specjax.checks import ArgumentTypeError, check_finite, check_key, coerce_number
from specjax.decoding.arguments import PositionRangeWarning
from specjax.decoding.autoregressive import generate
from specjax.decoding.drafters import LMDrafter
from specjax.distributions import SamplingConfig
from specjax.decoding.speculative import speculative_generate
from specjax.models import eagle, eagle_io, hf, safetensors_io
from specjax.models.config import ModelConfig
from specjax.models.transformer import Model

V = 32
CFG = ModelConfig(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                  max_position_embeddings=24, tokenizer_fingerprint="aaaa")
MODEL = Model(CFG)
PARAMS = MODEL.init_params(jax.random.key(0))
BIG = Model(CFG.replace(hidden_size=32, intermediate_size=64))  # same vocab, other shapes
BIG_PARAMS = BIG.init_params(jax.random.key(1))
GREEDY = SamplingConfig(temperature=0.0)
LOSSLESS = verifiers.get("lossless")


def _raises(exc, *fragments):
  """pytest.raises(exc) whose message contains every fragment (literally)."""
  return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


# --- verifiers.get / rule construction ------------------------------------------------------


def test_string_hyperparameter_is_converted_not_stored():
  rule = verifiers.get("mars", theta="0.9")
  assert rule.theta == 0.9 and isinstance(rule.theta, float)
  assert verifiers.get("mars", theta=".85").theta == 0.85  # the --verifiers="mars:theta=.85" form
  assert verifiers.get("mars", guard="false").guard is False
  assert verifiers.get("typical", delta="none").delta is None


@pytest.mark.parametrize("name,hp,exc,fragments", [
    ("mars", dict(theta="abc"), ValueError, ["theta", "'abc'"]),
    ("mars", dict(theta=True), ArgumentTypeError, ["theta", "True"]),
    ("mars", dict(theta=[0.9]), ArgumentTypeError, ["theta", "[0.9]"]),
    ("mars", dict(theta=-0.1), ValueError, ["theta", "-0.1", "(0.0, inf)"]),
    ("mars", dict(thetta=0.9), ValueError, ["thetta", "allowed", "theta"]),
    ("mars", dict(margin="diff"), ValueError, ["margin", "'diff'", "ratio"]),
    ("mars", dict(guard="maybe"), ValueError, ["guard", "'maybe'", "true/false"]),
    ("mars", dict(base="nosuch"), ValueError, ["base", "'nosuch'", "lossless"]),
    ("cos", dict(lam="1.5"), ValueError, ["lam", "1.5", "[0.0, 1.0]"]),
    ("lenience", dict(l=None), ArgumentTypeError, ["l=None"]),
    ("typical", dict(eps="nan"), ValueError, ["eps", "'nan'"]),
    ("spec_cascade", dict(p_base=float("nan")), ValueError, ["p_base", "nan"]),
    ("nosuch", {}, ValueError, ["'nosuch'", "lossless", "mars"]),
])
def test_verifiers_get_refuses(name, hp, exc, fragments):
  with _raises(exc, *fragments):
    verifiers.get(name, **hp)


def test_rule_constructed_with_a_string_is_refused():
  with _raises(ArgumentTypeError, "theta='0.9'", "float"):
    verifiers.Mars(theta="0.9")


def test_verifier_name_must_be_a_string():
  with _raises(ArgumentTypeError, "name=3", "lossless"):
    verifiers.get(3)


def test_parse_rules_stores_numbers():
  from experiments.common.rows import parse_rules
  assert parse_rules("mars:theta=.9") == [("mars", {"theta": 0.9})]
  with _raises(ValueError, "'theta'", "hparam=value"):
    parse_rules("mars:theta")


# --- SamplingConfig --------------------------------------------------------------------------


@pytest.mark.parametrize("kw,exc,fragments", [
    (dict(temperature="1"), ArgumentTypeError, ["temperature='1'"]),
    (dict(temperature=-0.5), ValueError, ["temperature=-0.5", "[0.0, inf)"]),
    (dict(temperature=float("inf")), ValueError, ["temperature=inf"]),
    (dict(top_k=2.5), ArgumentTypeError, ["top_k=2.5"]),
    (dict(top_p=0.0), ValueError, ["top_p=0.0", "(0.0, 1.0]"]),
    (dict(eta=1.0), ValueError, ["eta=1.0", "[0.0, 1.0)"]),
])
def test_sampling_config_refuses(kw, exc, fragments):
  with _raises(exc, *fragments):
    SamplingConfig(**kw)


# --- prompts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("prompts,exc,fragments", [
    ([5, 6, 7], ValueError, ["[5, 6, 7]", "flat list", "[[5, 6, 7]]"]),
    ("def f():", ArgumentTypeError, ["'def f():'", "text", "encode"]),
    (["def f():"], ArgumentTypeError, ["prompt 0", "'def f():'", "encode"]),
    ([[1.5, 2.0]], ArgumentTypeError, ["prompt 0", "1.5", "ints"]),
    ([[1, 2], [3, True]], ArgumentTypeError, ["prompt 1", "True"]),
    ([[1, 999]], ValueError, ["prompt 0", "999", f"[0, {V})"]),
    ([[3], [-1, 2]], ValueError, ["prompt 1", "-1"]),
    ([], ValueError, ["prompts is empty"]),
    ([[1], []], ValueError, ["prompt 1 is empty"]),
    (5, ArgumentTypeError, ["int"]),
    ((np.zeros((2, 4), np.float32), np.array([2, 2])), ArgumentTypeError, ["float32"]),
    ([np.zeros((2, 2), np.int32)], ArgumentTypeError, ["prompt 0", "(2, 2)"]),
])
def test_generate_refuses_prompts(prompts, exc, fragments):
  with _raises(exc, *fragments):
    generate(MODEL, PARAMS, prompts, max_new_tokens=2)


def test_speculative_refuses_flat_prompt():
  with _raises(ValueError, "[5, 6, 7]", "[[5, 6, 7]]"):
    speculative_generate(MODEL, PARAMS, LMDrafter(2, GREEDY, MODEL), PARAMS, LOSSLESS,
                         [5, 6, 7], max_new_tokens=2)


# --- generate(): model, params, key, lengths -------------------------------------------------


def test_params_where_the_model_belongs():
  with _raises(ArgumentTypeError, "model must be a specjax Model", "dict", "params"):
    generate(PARAMS, MODEL, [[1, 2]], max_new_tokens=2)


def test_params_of_another_model():
  with _raises(ValueError, "model_params do not fit", "hidden_size=16", "(32, 16)", "swapped"):
    generate(MODEL, BIG_PARAMS, [[1, 2]], max_new_tokens=2)


@pytest.mark.parametrize("key,fragments", [
    (0, ["key=0", "jax.random.key"]),
    ("seed", ["key='seed'"]),
    (jax.random.split(jax.random.key(0), 2), ["shape (2,)"]),
])
def test_generate_refuses_keys(key, fragments):
  with _raises(ArgumentTypeError, *fragments):
    generate(MODEL, PARAMS, [[1, 2]], max_new_tokens=2, key=key,
             sampling=SamplingConfig(temperature=1.0))


@pytest.mark.parametrize("kw,exc,fragments", [
    (dict(max_new_tokens=0), ValueError, ["max_new_tokens=0", ">= 1"]),
    (dict(max_new_tokens=2.0), ArgumentTypeError, ["max_new_tokens=2.0"]),
    (dict(max_new_tokens=2, row_offset=-1), ValueError, ["row_offset=-1"]),
    (dict(max_new_tokens=2, sampling=0.7), ArgumentTypeError, ["sampling", "float"]),
    (dict(max_new_tokens=2, sampling=SamplingConfig(1.0)), ValueError, ["PRNG key"]),
    (dict(max_new_tokens=2, on_long_prompt="loud"), ValueError, ["'loud'", "warn"]),
])
def test_generate_refuses_arguments(kw, exc, fragments):
  with _raises(exc, *fragments):
    generate(MODEL, PARAMS, [[1, 2]], **kw)


def test_prompt_beyond_position_range_warns_or_refuses():
  long_prompt = [[1] * 20]  # 20 + 8 new > max_position_embeddings = 24
  with _raises(ValueError, "20 tokens", "position 28", "max_position_embeddings=24"):
    generate(MODEL, PARAMS, long_prompt, max_new_tokens=8, on_long_prompt="error")
  with pytest.warns(PositionRangeWarning, match="max_position_embeddings=24"):
    out = generate(MODEL, PARAMS, long_prompt, max_new_tokens=8)
  assert int(out.lengths[0]) == 8
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    generate(MODEL, PARAMS, [[1] * 4], max_new_tokens=8)  # within range: silent


# --- speculative_generate --------------------------------------------------------------------


def test_swapped_target_and_draft_params():
  drafter = LMDrafter(2, GREEDY, MODEL)
  with _raises(ValueError, "target_params do not fit", "swapped"):
    speculative_generate(BIG, PARAMS, drafter, BIG_PARAMS, LOSSLESS, [[1, 2]], max_new_tokens=2)
  with _raises(ValueError, "draft_params do not fit", "swapped"):
    speculative_generate(MODEL, PARAMS, drafter, BIG_PARAMS, LOSSLESS, [[1, 2]],
                         max_new_tokens=2)


@pytest.mark.parametrize("args,fragments", [
    (dict(verifier="lossless"), ["verifier must be a NodeRule", "str"]),
    (dict(drafter=MODEL), ["drafter must be a specjax Drafter", "Model"]),
    (dict(key=0), ["key=0"]),
])
def test_speculative_refuses_arguments(args, fragments):
  kw = dict(drafter=LMDrafter(2, GREEDY, MODEL), verifier=LOSSLESS)
  kw.update(args)
  drafter, verifier = kw.pop("drafter"), kw.pop("verifier")
  with _raises(ArgumentTypeError, *fragments):
    speculative_generate(MODEL, PARAMS, drafter, PARAMS, verifier, [[1, 2]], max_new_tokens=2,
                         **kw)


def test_tokenizer_mismatch_is_refused_unless_allowed():
  other = Model(CFG.replace(tokenizer_fingerprint="bbbb"))
  drafter = LMDrafter(2, GREEDY, other)
  with _raises(ValueError, "'aaaa'", "'bbbb'", "allow_tokenizer_mismatch=True"):
    speculative_generate(MODEL, PARAMS, drafter, PARAMS, LOSSLESS, [[1, 2]], max_new_tokens=2)
  out = speculative_generate(MODEL, PARAMS, drafter, PARAMS, LOSSLESS, [[1, 2]],
                             max_new_tokens=2, allow_tokenizer_mismatch=True)
  assert int(out.lengths[0]) == 2


@pytest.mark.parametrize("kw,fragments", [
    (dict(num_draft="4"), ["num_draft (K)='4'"]),
    (dict(num_draft=True), ["num_draft (K)=True"]),
    (dict(model=PARAMS), ["LMDrafter needs model=Model", "dict"]),
    (dict(sampling=1.0), ["sampling", "float"]),
])
def test_lm_drafter_refuses(kw, fragments):
  args = dict(num_draft=2, sampling=GREEDY, model=MODEL)
  args.update(kw)
  with _raises(ArgumentTypeError, *fragments):
    LMDrafter(**args)


# --- shared helpers ---------------------------------------------------------------------------


def test_coerce_and_check_helpers():
  assert coerce_number("x", "3", int) == 3 and coerce_number("x", " 0.5 ", float) == 0.5
  with _raises(ValueError, "x='3.5'", "int"):
    coerce_number("x", "3.5", int)
  with _raises(ArgumentTypeError, "key=None"):
    check_key("key", None)
  with _raises(ValueError, "'w'", "NaN/inf", "f.safetensors"):
    check_finite([("ok", np.ones(3)), ("w", np.array([1.0, np.inf]))], "f.safetensors")


# --- loaders ----------------------------------------------------------------------------------


def _save_tiny_hf(path, params=PARAMS, tokenizer_json=None):
  hf.save_pretrained(str(path), CFG, params)
  if tokenizer_json is not None:
    with open(os.path.join(path, hf.TOKENIZER_FILE), "w") as f:
      json.dump(tokenizer_json, f)


def test_hf_loader_refuses_pickle(tmp_path):
  _save_tiny_hf(tmp_path)
  os.remove(tmp_path / hf.WEIGHTS_FILE)
  (tmp_path / "pytorch_model.bin").write_bytes(b"not unpickled")
  with _raises(ValueError, "pytorch_model.bin", "never unpickles", "safetensors"):
    hf.load_pretrained(str(tmp_path))


def test_hf_loader_refuses_nan_weights(tmp_path):
  bad = jax.tree_util.tree_map_with_path(
      lambda p, x: x.at[(0,) * x.ndim].set(np.nan) if "up_proj" in jax.tree_util.keystr(p)
      else x, PARAMS)
  _save_tiny_hf(tmp_path, bad)
  with _raises(ValueError, "model.layers.0.mlp.up_proj.weight", "NaN/inf"):
    hf.load_pretrained(str(tmp_path))


def test_hf_loader_records_tokenizer_fingerprint(tmp_path):
  tok = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
         "added_tokens": [{"id": 2, "content": "<eos>"}]}
  _save_tiny_hf(tmp_path, tokenizer_json=tok)
  m, _ = hf.load_pretrained(str(tmp_path))
  assert m.config.tokenizer_fingerprint == hf.tokenizer_fingerprint(str(tmp_path))
  tok["model"]["vocab"] = {"a": 1, "b": 0}  # same size, other ids
  other = tmp_path / "other"
  _save_tiny_hf(other, tokenizer_json=tok)
  assert hf.load_pretrained(str(other))[0].config.tokenizer_fingerprint != \
      m.config.tokenizer_fingerprint


E_CFG = eagle.EagleConfig(kind="eagle1", vocab_size=V, draft_vocab_size=V, hidden_size=16,
                          intermediate_size=32, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=8, target_hidden_size=16, target_layers=(1,))


_HEAD_PARAMS = {}


def _saved_head(path, cfg=E_CFG, edit=None, tensors=None):
  """Save a head, then edit its config.json (``edit(d)``) and tensors (``tensors(t)``)."""
  if cfg not in _HEAD_PARAMS:
    _HEAD_PARAMS[cfg] = eagle.EagleHead(cfg).init_params(jax.random.key(0))
  eagle_io.save_eagle(str(path), cfg, _HEAD_PARAMS[cfg])
  if edit:
    d = json.load(open(path / "config.json"))
    edit(d)
    json.dump(d, open(path / "config.json", "w"))
  if tensors:
    from safetensors.numpy import save_file
    t = dict(safetensors_io.read_safetensors(str(path / "model.safetensors")))
    tensors(t)
    save_file(t, str(path / "model.safetensors"))
  return str(path)


def test_eagle_loader_refuses_pickle_without_unpickling(tmp_path, monkeypatch):
  import torch

  def boom(*a, **k):
    raise AssertionError("torch.load called")
  monkeypatch.setattr(torch, "load", boom)
  _saved_head(tmp_path)
  os.remove(tmp_path / "model.safetensors")
  (tmp_path / "pytorch_model.bin").write_bytes(b"not unpickled")
  with _raises(ValueError, "pytorch_model.bin", "never unpickles", "safetensors"):
    eagle_io.load_eagle(str(tmp_path), CFG)


@pytest.mark.parametrize("case,edit,tensors,fragments", [
    ("two layers", lambda d: d.update(num_hidden_layers=2), None,
     ["num_hidden_layers=2", "exactly one decoder layer"]),
    ("layer-1 tensors", None,
     lambda t: t.update({"layers.1.mlp.up_proj.weight": t["layers.0.mlp.up_proj.weight"]}),
     ["layers.1", "exactly one decoder layer"]),
    ("o_proj bias", None, lambda t: t.update({"layers.0.self_attn.o_proj.bias": np.zeros(16,
                                                                                 np.float32)}),
     ["layers.0.self_attn.o_proj.bias", "would not use"]),
    ("qkv_bias without tensors", lambda d: d.update(qkv_bias=True), None,
     ["qkv_bias=true", "q,k,v"]),
    ("aux ids out of range", lambda d: (d.pop("target_layers"), d.update(
        eagle_config={"eagle_aux_hidden_state_layer_ids": [7]})), None, ["[7]", "[0, 1]"]),
    ("aux ids for eagle1", lambda d: (d.pop("target_layers"), d.update(
        eagle_aux_hidden_state_layer_ids=[0, 1, 1])), None, ["EAGLE-1", "[0, 1, 1]"]),
    ("aux ids disagree", lambda d: d.update(eagle_aux_hidden_state_layer_ids=[0]), None,
     ["target_layers=[1]", "[0]", "agree"]),
    ("nan weight", None, lambda t: t.update({"fc.weight": np.full_like(t["fc.weight"], np.nan)}),
     ["'fc.weight'", "NaN/inf"]),
])
def test_eagle_loader_refuses(tmp_path, case, edit, tensors, fragments):
  path = _saved_head(tmp_path, edit=edit, tensors=tensors)
  with _raises(ValueError, *fragments):
    eagle_io.load_eagle(path, CFG)


def test_eagle_loader_reads_configured_aux_layers(tmp_path):
  cfg3 = E_CFG.replace(kind="eagle3", target_layers=(0, 1, 1), fc_bias=False)
  path = _saved_head(tmp_path, cfg=cfg3, edit=lambda d: (d.pop("target_layers"), d.update(
      eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 0, 1]})))
  head, _, _ = eagle_io.load_eagle(path, CFG)
  assert head.config.target_layers == (1, 0, 1)


# --- binaries: settings checked before any model loads -----------------------------------------


@pytest.mark.parametrize("field,value,exc,fragments", [
    ("drafters", ("chain", "nosuch"), ValueError, ["['nosuch']", "eagle_tree"]),
    ("temperatures", (0.0, "hot"), ValueError, ["temperatures entry='hot'"]),
    ("temperatures", (-1.0,), ValueError, ["temperatures entry=-1.0"]),
    ("num_draft", 0, ValueError, ["num_draft (K)=0"]),
    ("tree_paths", "[[0], [", ValueError, ["tree_paths='[[0], ['", "JSON"]),
])
def test_compare_config_is_validated_before_models_load(field, value, exc, fragments):
  from experiments.common import rows
  from experiments.configs import compare
  c = compare.get_config()
  c[field] = value
  with _raises(exc, *fragments):
    rows.default_rows(c)


def test_compare_workdir_that_is_a_file(tmp_path):
  from experiments.common import rows
  from experiments.configs import compare
  c = compare.get_config()
  c.workdir = str(tmp_path / "out.txt")
  (tmp_path / "out.txt").write_text("x")
  with _raises(ValueError, "out.txt", "not a directory"):
    rows.default_rows(c)
