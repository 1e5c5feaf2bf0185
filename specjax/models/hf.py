"""Hugging Face interop: ``config.json`` + ``model.safetensors`` (single or
sharded via ``model.safetensors.index.json``) <-> specjax params, and
``tokenizer.json`` through the ``tokenizers`` library.

No network access: paths are local directories.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.config import SUPPORTED_MODEL_TYPES, ModelConfig, resolve_dtype
from specjax.models.safetensors_io import read_safetensors, write_safetensors
from specjax.models.transformer import Model

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILE = "tokenizer.json"
# Pickle-based weight files: never loaded (unpickling runs arbitrary code).
PICKLE_FILES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth",
                "consolidated.00.pth")
CONVERT_HINT = ("convert it once, in a trusted environment, to safetensors, e.g. "
                "`python -c \"import torch; from safetensors.torch import save_file; "
                "save_file({k: v.contiguous() for k, v in torch.load('pytorch_model.bin', "
                "weights_only=True).items()}, 'model.safetensors')\"` "
                "(or `model.save_pretrained(dir, safe_serialization=True)` in transformers)")


def refuse_pickle(path: str, weights_file: str) -> None:
  """``ValueError`` when ``path`` holds only pickle-based weights (``.bin`` / ``.pt``)."""
  found = [f for f in PICKLE_FILES if os.path.isfile(os.path.join(path, f))]
  found += sorted(f for f in os.listdir(path) if f.endswith((".bin", ".pt", ".pth"))
                  and f not in found) if os.path.isdir(path) else []
  if found:
    raise ValueError(f"{path} holds pickle-based weights {found} and no {weights_file}; "
                     f"specjax never unpickles (it can run arbitrary code): {CONVERT_HINT}")

# (specjax path under params["layers"], HF name under model.layers.{i}., transpose?)
_LAYER_TENSORS = [
    (("self_attn", "q_proj", "kernel"), "self_attn.q_proj.weight", True),
    (("self_attn", "k_proj", "kernel"), "self_attn.k_proj.weight", True),
    (("self_attn", "v_proj", "kernel"), "self_attn.v_proj.weight", True),
    (("self_attn", "o_proj", "kernel"), "self_attn.o_proj.weight", True),
    (("mlp", "gate_proj", "kernel"), "mlp.gate_proj.weight", True),
    (("mlp", "up_proj", "kernel"), "mlp.up_proj.weight", True),
    (("mlp", "down_proj", "kernel"), "mlp.down_proj.weight", True),
    (("input_layernorm", "weight"), "input_layernorm.weight", False),
    (("post_attention_layernorm", "weight"), "post_attention_layernorm.weight", False),
]
_QKV_BIAS = [(("self_attn", n, "bias"), f"self_attn.{n}.bias", False)
             for n in ("q_proj", "k_proj", "v_proj")]
_O_BIAS = [(("self_attn", "o_proj", "bias"), "self_attn.o_proj.bias", False)]
_QK_NORM = [(("self_attn", "q_norm", "weight"), "self_attn.q_norm.weight", False),
            (("self_attn", "k_norm", "weight"), "self_attn.k_norm.weight", False)]


def _layer_tensors(cfg: ModelConfig):
  out = list(_LAYER_TENSORS)
  if cfg.qkv_bias:
    out += _QKV_BIAS
  if cfg.o_bias:
    out += _O_BIAS
  if cfg.qk_norm:
    out += _QK_NORM
  return out


def _read_json(path: str) -> dict:
  if not os.path.isfile(path):
    raise FileNotFoundError(f"missing file: {path}")
  try:
    with open(path) as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f"malformed JSON in {path}: {e}") from None


def config_from_hf(d: dict, **overrides) -> ModelConfig:
  """Build a ModelConfig from a HF ``config.json`` dict (transformers 4 or 5 layout)."""
  mt = d.get("model_type")
  if mt not in SUPPORTED_MODEL_TYPES:
    raise ValueError(f"unknown model_type {mt!r}; specjax supports {SUPPORTED_MODEL_TYPES}")
  for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads"):
    if key not in d:
      raise ValueError(f"config.json lacks required field {key!r}")
  if d.get("hidden_act", "silu") != "silu":
    raise ValueError(f"hidden_act={d['hidden_act']!r} is not supported; only 'silu'")
  if d.get("mlp_bias", False):
    raise ValueError("mlp_bias=True is not supported")
  if d.get("use_sliding_window", False):
    raise ValueError("use_sliding_window=True is not supported")
  rope = dict(d.get("rope_parameters") or {})
  theta = d.get("rope_theta", rope.pop("rope_theta", 10000.0))
  rope.pop("rope_theta", None)
  scaling = d.get("rope_scaling") or rope or None
  if scaling and scaling.get("rope_type", scaling.get("type", "default")) == "default":
    scaling = None
  heads = d["num_attention_heads"]
  head_dim = d.get("head_dim") or d["hidden_size"] // heads
  bias = bool(d.get("attention_bias", False))
  eos = d.get("eos_token_id")
  if isinstance(eos, list):
    eos = tuple(eos)
  fields = dict(
      model_type=mt, vocab_size=d["vocab_size"], hidden_size=d["hidden_size"],
      intermediate_size=d["intermediate_size"], num_hidden_layers=d["num_hidden_layers"],
      num_attention_heads=heads, num_key_value_heads=d.get("num_key_value_heads") or heads,
      head_dim=head_dim, rope_theta=float(theta),
      rope_scaling=tuple(sorted(scaling.items())) if scaling else None,
      rms_norm_eps=d.get("rms_norm_eps", 1e-6),
      tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
      qkv_bias=True if mt == "qwen2" else bias, o_bias=False if mt == "qwen2" else bias,
      qk_norm=mt == "qwen3", max_position_embeddings=d.get("max_position_embeddings", 2048),
      bos_token_id=d.get("bos_token_id"), eos_token_id=eos)
  fields.update(overrides)
  return ModelConfig(**fields)


def config_to_hf(cfg: ModelConfig) -> dict:
  """A ``config.json`` dict that transformers loads (legacy rope_theta/rope_scaling keys)."""
  arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
  d = dict(
      architectures=[arch[cfg.model_type]], model_type=cfg.model_type,
      vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
      intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
      num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
      head_dim=cfg.head_dim, hidden_act="silu", rms_norm_eps=cfg.rms_norm_eps,
      rope_theta=cfg.rope_theta, rope_scaling=cfg.rope_scaling_dict or None,
      tie_word_embeddings=cfg.tie_word_embeddings,
      max_position_embeddings=cfg.max_position_embeddings, torch_dtype=cfg.param_dtype,
      bos_token_id=cfg.bos_token_id,
      eos_token_id=list(cfg.eos_token_id) if isinstance(cfg.eos_token_id, tuple)
      else cfg.eos_token_id)
  if cfg.model_type != "qwen2":
    d["attention_bias"] = cfg.qkv_bias
  # transformers would silently random-init (or drop) tensors a config cannot express
  if cfg.model_type in ("llama", "qwen3") and cfg.qkv_bias != cfg.o_bias:
    raise ValueError(f"a {cfg.model_type} config needs qkv_bias == o_bias (HF attention_bias "
                     f"covers both); got qkv_bias={cfg.qkv_bias}, o_bias={cfg.o_bias}")
  if cfg.model_type == "qwen2" and (not cfg.qkv_bias or cfg.o_bias):
    raise ValueError(f"a qwen2 config needs qkv_bias=True and o_bias=False (fixed by the "
                     f"architecture); got qkv_bias={cfg.qkv_bias}, o_bias={cfg.o_bias}")
  if cfg.qk_norm != (cfg.model_type == "qwen3"):
    raise ValueError(f"qk_norm={cfg.qk_norm} is not expressible for model_type="
                     f"{cfg.model_type!r} (HF: q/k norm exactly for qwen3)")
  return d


def _load_tensors(path: str) -> dict[str, np.ndarray]:
  single = os.path.join(path, WEIGHTS_FILE)
  index = os.path.join(path, INDEX_FILE)
  if os.path.isfile(single):
    files = [single]
  elif os.path.isfile(index):
    shards = sorted(set(_read_json(index).get("weight_map", {}).values()))
    if not shards:
      raise ValueError(f"{index} has an empty weight_map")
    files = [os.path.join(path, s) for s in shards]
    for f in files:
      if not os.path.isfile(f):
        raise FileNotFoundError(f"missing shard listed in {index}: {f}")
  else:
    refuse_pickle(path, WEIGHTS_FILE)
    raise FileNotFoundError(f"no {WEIGHTS_FILE} or {INDEX_FILE} in {path}")
  out: dict[str, np.ndarray] = {}
  for f in files:
    out.update(read_safetensors(f))
  return out


def params_from_tensors(cfg: ModelConfig, tensors: dict[str, Any], dtype=None):
  """Map HF tensor names to specjax params, checking every name and shape."""
  dt = resolve_dtype(dtype or cfg.param_dtype)
  h, v = cfg.hidden_size, cfg.vocab_size

  def get(name, shape):
    if name not in tensors:
      raise ValueError(f"checkpoint is missing tensor {name!r}")
    t = np.asarray(tensors[name])
    if tuple(t.shape) != tuple(shape):
      raise ValueError(f"tensor {name!r} has shape {tuple(t.shape)}, expected {tuple(shape)}")
    return t

  model = Model(cfg)
  ref = jax.eval_shape(model.init_params, jax.random.key(0))
  params: dict = {"embed_tokens": {"embedding": get("model.embed_tokens.weight", (v, h))},
                  "norm": {"weight": get("model.norm.weight", (h,))}, "layers": {}}
  if not cfg.tie_word_embeddings:
    params["lm_head"] = {"kernel": get("lm_head.weight", (v, h)).T}
  for path, hf_name, transpose in _layer_tensors(cfg):
    leaf_ref = ref["layers"]
    for p in path:
      leaf_ref = leaf_ref[p]
    per_layer = leaf_ref.shape[1:]
    hf_shape = per_layer[::-1] if transpose else per_layer
    stack = []
    for i in range(cfg.num_hidden_layers):
      t = get(f"model.layers.{i}.{hf_name}", hf_shape)
      stack.append(t.T if transpose else t)
    node = params["layers"]
    for p in path[:-1]:
      node = node.setdefault(p, {})
    node[path[-1]] = np.stack(stack)
  return jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.float32).astype(dt), params)


def tensors_from_params(cfg: ModelConfig, params) -> dict[str, np.ndarray]:
  """Inverse of :func:`params_from_tensors`: HF names -> numpy arrays."""
  to_np = lambda x: np.asarray(jax.device_get(x))
  out = {"model.embed_tokens.weight": to_np(params["embed_tokens"]["embedding"]),
         "model.norm.weight": to_np(params["norm"]["weight"])}
  if not cfg.tie_word_embeddings:
    out["lm_head.weight"] = to_np(params["lm_head"]["kernel"]).T
  for path, hf_name, transpose in _layer_tensors(cfg):
    node = params["layers"]
    for p in path:
      node = node[p]
    arr = to_np(node)
    for i in range(cfg.num_hidden_layers):
      out[f"model.layers.{i}.{hf_name}"] = np.ascontiguousarray(arr[i].T if transpose else arr[i])
  return out


def load_config(path: str, **overrides) -> ModelConfig:
  """Read ``path/config.json`` into a ModelConfig (``overrides`` e.g. hidden_layers, dtype)."""
  if not os.path.isdir(path):
    raise FileNotFoundError(f"checkpoint directory does not exist: {path}")
  return config_from_hf(_read_json(os.path.join(path, CONFIG_FILE)), **overrides)


def load_pretrained(path: str, dtype: str = "float32", **config_overrides):
  """Load a HF checkpoint directory. Returns ``(Model, params)``.

  Args:
    path: directory with config.json and model.safetensors (or a sharded index).
    dtype: "float32" | "bfloat16": both the params and the activations.
    **config_overrides: ModelConfig fields, e.g. ``hidden_layers=(2, 4, 7)``.
  """
  resolve_dtype(dtype)
  overrides = {"dtype": dtype, "param_dtype": dtype, **config_overrides}
  tok_file = os.path.join(path, TOKENIZER_FILE)
  if "tokenizer_fingerprint" not in overrides and os.path.isfile(tok_file):
    overrides["tokenizer_fingerprint"] = tokenizer_fingerprint(tok_file)
  cfg = load_config(path, **overrides)
  params = params_from_tensors(cfg, _load_tensors(path), dtype)
  return Model(cfg), params


def save_pretrained(path: str, config: ModelConfig, params, tokenizer=None,
                    dtype: str | None = None) -> None:
  """Write ``config.json`` + ``model.safetensors`` (+ ``tokenizer.json``) that
  transformers' ``AutoModelForCausalLM.from_pretrained`` loads."""
  os.makedirs(path, exist_ok=True)
  dt = resolve_dtype(dtype or config.param_dtype)
  d = config_to_hf(config)
  d["torch_dtype"] = jnp.dtype(dt).name
  with open(os.path.join(path, CONFIG_FILE), "w") as f:
    json.dump(d, f, indent=2)
  write_safetensors(os.path.join(path, WEIGHTS_FILE), tensors_from_params(config, params),
                    dtype=dt)
  if tokenizer is not None:
    tokenizer.save(os.path.join(path, TOKENIZER_FILE))


def tokenizer_fingerprint(path_or_tokenizer) -> str:
  """sha256 (16 hex) of a tokenizer's vocabulary: the ``model`` section of its
  ``tokenizer.json`` (vocab, merges) and its added tokens, as sorted JSON --
  independent of formatting and of the normaliser / decoder settings that do not
  change which id means which string.

  Accepts a ``tokenizer.json`` path, a directory holding one, or a
  ``tokenizers.Tokenizer`` (the same tokenizer gives the same fingerprint either way).
  """
  import hashlib
  if isinstance(path_or_tokenizer, (str, os.PathLike)):
    p = os.fspath(path_or_tokenizer)
    d = _read_json(os.path.join(p, TOKENIZER_FILE) if os.path.isdir(p) else p)
  else:
    d = json.loads(path_or_tokenizer.to_str())
  ident = {"model": d.get("model"),
           "added_tokens": sorted((t.get("id"), t.get("content")) for t in
                                  d.get("added_tokens") or [])}
  blob = json.dumps(ident, sort_keys=True, separators=(",", ":")).encode()
  return hashlib.sha256(blob).hexdigest()[:16]


def load_tokenizer(path: str):
  """Load ``tokenizer.json`` (a file or a directory holding one) with ``tokenizers``."""
  from tokenizers import Tokenizer
  f = os.path.join(path, TOKENIZER_FILE) if os.path.isdir(path) else path
  if not os.path.isfile(f):
    raise FileNotFoundError(f"missing tokenizer file: {f}")
  try:
    return Tokenizer.from_file(f)
  except Exception as e:
    raise ValueError(f"cannot parse tokenizer file {f}: {e}") from None
