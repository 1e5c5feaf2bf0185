"""Published-layout I/O of EAGLE heads: ``config.json`` + ``model.safetensors``
as the EAGLE / EAGLE-3 authors (and SpecForge / vLLM) publish them.

* :func:`save_eagle` / :func:`load_eagle` -- a head directory <-> ``(EagleHead,
  params, d2t)``, every tensor name and shape checked; ``d2t`` / ``t2d`` carry a
  reduced EAGLE-3 vocabulary (the published offset convention);
* :func:`config_to_json` / :func:`config_from_json` -- our config fields plus
  the published ones (the kind read from tensor names when the config lacks it);
* :func:`load_default_eagle` -- the heads shipped in ``specjax/models/assets``.

The architecture lives in :mod:`specjax.models.eagle`; files are read and
written by :mod:`specjax.models.safetensors_io`.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.config import ModelConfig, resolve_dtype
from specjax.models.eagle import (EagleConfig, EagleHead, check_compatible,
                                  default_eagle3_layers, vocab_maps)
from specjax.models.hf import CONFIG_FILE, WEIGHTS_FILE, refuse_pickle
from specjax.models.safetensors_io import read_safetensors, write_safetensors

# Tensors published heads ship that the head does not own: EAGLE-1 checkpoints
# carry a copy of the target's embedding (we always use the target's own), and
# EAGLE-3 the vocabulary maps (read by load_eagle).
IGNORED_TENSORS = ("embed_tokens.weight", "d2t", "t2d")
_ATTN = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


def _layer_prefix(cfg: EagleConfig) -> str:
  return "layers.0." if cfg.kind == "eagle1" else "midlayer."


def published_shapes(cfg: EagleConfig) -> dict:
  """Published tensor name -> shape (torch ``[out, in]`` linear layout)."""
  h, i = cfg.hidden_size, cfg.intermediate_size
  qd, kvd = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
  attn_in = h if cfg.kind == "eagle1" else 2 * h
  pre = _layer_prefix(cfg)
  fc_in = 2 * h if cfg.kind == "eagle1" else len(cfg.target_layers) * cfg.target_hidden_size
  s = {"fc.weight": (h, fc_in),
       pre + "self_attn.q_proj.weight": (qd, attn_in),
       pre + "self_attn.k_proj.weight": (kvd, attn_in),
       pre + "self_attn.v_proj.weight": (kvd, attn_in),
       pre + "self_attn.o_proj.weight": (h, qd),
       pre + "mlp.gate_proj.weight": (i, h), pre + "mlp.up_proj.weight": (i, h),
       pre + "mlp.down_proj.weight": (h, i),
       pre + "post_attention_layernorm.weight": (h,)}
  if cfg.fc_bias:
    s["fc.bias"] = (h,)
  if cfg.qkv_bias:
    s[pre + "self_attn.q_proj.bias"] = (qd,)
    s[pre + "self_attn.k_proj.bias"] = (kvd,)
    s[pre + "self_attn.v_proj.bias"] = (kvd,)
  if cfg.kind == "eagle3":
    s[pre + "input_layernorm.weight"] = (h,)
    s[pre + "hidden_norm.weight"] = (h,)
    s["norm.weight"] = (h,)
    s["lm_head.weight"] = (cfg.draft_vocab_size, h)
  return s


def tensors_from_params(cfg: EagleConfig, params) -> dict:
  """specjax head params -> published tensor names (numpy)."""
  to_np = lambda x: np.asarray(jax.device_get(x))
  pre = _layer_prefix(cfg)
  m = params["midlayer"]
  out = {"fc.weight": to_np(params["fc"]["kernel"]).T}
  if cfg.fc_bias:
    out["fc.bias"] = to_np(params["fc"]["bias"])
  for n in _ATTN:
    out[f"{pre}self_attn.{n}.weight"] = to_np(m["self_attn"][n]["kernel"]).T
  if cfg.qkv_bias:
    for n in _ATTN[:3]:
      out[f"{pre}self_attn.{n}.bias"] = to_np(m["self_attn"][n]["bias"])
  for n in _MLP:
    out[f"{pre}mlp.{n}.weight"] = to_np(m["mlp"][n]["kernel"]).T
  out[pre + "post_attention_layernorm.weight"] = to_np(m["post_attention_layernorm"]["weight"])
  if cfg.kind == "eagle3":
    out[pre + "input_layernorm.weight"] = to_np(m["input_layernorm"]["weight"])
    out[pre + "hidden_norm.weight"] = to_np(m["hidden_norm"]["weight"])
    out["norm.weight"] = to_np(params["norm"]["weight"])
    out["lm_head.weight"] = to_np(params["lm_head"]["kernel"]).T
  return {k: np.ascontiguousarray(v) for k, v in out.items()}


def params_from_tensors(cfg: EagleConfig, tensors: dict, dtype=None):
  """Published tensors -> specjax head params, checking every name and shape."""
  shapes = published_shapes(cfg)
  missing = [k for k in shapes if k not in tensors]
  if missing:
    raise ValueError(f"EAGLE checkpoint ({cfg.kind}) is missing tensors {missing}")
  unexpected = sorted(k for k in tensors if k not in shapes and k not in IGNORED_TENSORS)
  if unexpected:
    raise ValueError(f"EAGLE checkpoint ({cfg.kind}) holds tensors this head would not use: "
                     f"{unexpected[:6]}{' ...' if len(unexpected) > 6 else ''}; refusing to "
                     f"load it silently wrong (supported: one decoder layer, fc bias, q/k/v "
                     f"biases)")
  for k, shp in shapes.items():
    if tuple(np.shape(tensors[k])) != shp:
      raise ValueError(f"EAGLE tensor {k!r} has shape {tuple(np.shape(tensors[k]))}, "
                       f"expected {shp} for {cfg.kind} with hidden_size={cfg.hidden_size}")
  t = lambda k: np.asarray(tensors[k], np.float32)
  pre = _layer_prefix(cfg)
  mid = {"self_attn": {n: {"kernel": t(f"{pre}self_attn.{n}.weight").T} for n in _ATTN},
         "mlp": {n: {"kernel": t(f"{pre}mlp.{n}.weight").T} for n in _MLP},
         "post_attention_layernorm": {"weight": t(pre + "post_attention_layernorm.weight")}}
  params = {"fc": {"kernel": t("fc.weight").T}, "midlayer": mid}
  if cfg.fc_bias:
    params["fc"]["bias"] = t("fc.bias")
  if cfg.qkv_bias:
    for n in _ATTN[:3]:
      mid["self_attn"][n]["bias"] = t(f"{pre}self_attn.{n}.bias")
  if cfg.kind == "eagle3":
    mid["input_layernorm"] = {"weight": t(pre + "input_layernorm.weight")}
    mid["hidden_norm"] = {"weight": t(pre + "hidden_norm.weight")}
    params["norm"] = {"weight": t("norm.weight")}
    params["lm_head"] = {"kernel": t("lm_head.weight").T}
  dt = resolve_dtype(dtype or cfg.param_dtype)
  return jax.tree.map(lambda x: jnp.asarray(x).astype(dt), params)


def config_to_json(cfg: EagleConfig) -> dict:
  """A published-style ``config.json`` (Llama fields, 1 layer) plus specjax fields."""
  arch = "LlamaForCausalLMEagle3" if cfg.kind == "eagle3" else "LlamaForCausalLM"
  return dict(
      architectures=[arch], model_type="llama", hidden_act="silu",
      vocab_size=cfg.vocab_size, draft_vocab_size=cfg.draft_vocab_size,
      hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
      num_hidden_layers=1, num_attention_heads=cfg.num_attention_heads,
      num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim,
      target_hidden_size=cfg.target_hidden_size, rms_norm_eps=cfg.rms_norm_eps,
      rope_theta=cfg.rope_theta, rope_scaling=dict(cfg.rope_scaling) if cfg.rope_scaling else None,
      max_position_embeddings=cfg.max_position_embeddings, bias=cfg.fc_bias,
      qkv_bias=cfg.qkv_bias,
      tie_word_embeddings=False, torch_dtype=cfg.param_dtype,
      eagle_kind=cfg.kind, target_layers=list(cfg.target_layers))


AUX_LAYER_KEYS = ("eagle_aux_hidden_state_layer_ids", "aux_hidden_state_layer_ids")


def _configured_layers(d: dict, kind: str) -> Optional[tuple]:
  """Target layers fixed by the config: ours (``target_layers``) or SpecForge /
  vLLM-style ``eagle_aux_hidden_state_layer_ids`` (top level or under
  ``eagle_config``); None when the config fixes none.

  **(choice) indexing**: an aux id ``j`` is read with vLLM's convention -- the
  hidden state entering decoder layer ``j`` (``hidden_states[j]`` of HF, 0 = the
  embeddings) -- which is exactly specjax's ``hidden_layers`` index, so ids are
  used unchanged (vLLM's default ``(2, L//2, L-3)`` = ours).
  """
  ours = d.get("target_layers")
  nested = d.get("eagle_config") if isinstance(d.get("eagle_config"), dict) else {}
  aux = None
  for src in (d, nested):
    for key in AUX_LAYER_KEYS:
      if src.get(key) is not None and aux is None:
        aux = (key, src[key])
  if ours is None and aux is None:
    return None
  key, val = ("target_layers", ours) if ours is not None else aux
  if (not isinstance(val, (list, tuple)) or not val or
      any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in val)):
    raise ValueError(f"EAGLE config {key}={val!r} must be a non-empty list of layer indices >= 0")
  if ours is not None and aux is not None and tuple(ours) != tuple(aux[1]):
    raise ValueError(f"EAGLE config has target_layers={ours} and {aux[0]}={aux[1]}; they "
                     "must agree")
  if kind == "eagle1" and len(val) != 1:
    raise ValueError(f"EAGLE-1 reads one target feature; config {key}={val!r}")
  return tuple(int(i) for i in val)


def config_from_json(d: dict, tensor_names=(), target_config: Optional[ModelConfig] = None,
                     **overrides) -> EagleConfig:
  """EagleConfig from a ``config.json`` dict (ours or a published one).

  Published configs lack ``eagle_kind`` / ``target_layers``: the kind is read
  from the tensor names (``midlayer.*`` = EAGLE-3, ``layers.0.*`` = EAGLE-1) and
  the target layers from ``target_config`` (the published defaults).
  """
  for key in ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size"):
    if key not in d:
      raise ValueError(f"EAGLE config.json lacks required field {key!r}")
  names = set(tensor_names)
  kind = d.get("eagle_kind")
  if kind is None:
    if any(n.startswith("midlayer.") for n in names):
      kind = "eagle3"
    elif any(n.startswith("layers.0.") for n in names):
      kind = "eagle1"
    else:
      raise ValueError("cannot tell EAGLE-1 from EAGLE-3: no eagle_kind in config.json and no "
                       "'midlayer.*' or 'layers.0.*' tensors")
  n_layers = d.get("num_hidden_layers", 1)
  deeper = sorted({n.split(".")[1] for n in names if n.startswith("layers.")} - {"0"})
  if n_layers != 1 or deeper:
    raise ValueError(f"EAGLE head with num_hidden_layers={n_layers!r}"
                     + (f" (tensors layers.{', layers.'.join(deeper)}.*)" if deeper else "")
                     + " is not supported: specjax heads have exactly one decoder layer "
                     "(loading only layer 0 would draft silently wrong)")
  layers = _configured_layers(d, kind)
  if layers is None:
    if target_config is None:
      raise ValueError("config.json has no target_layers / eagle_aux_hidden_state_layer_ids; "
                       "pass target_config so the published default layers can be derived")
    L = target_config.num_hidden_layers
    layers = (L,) if kind == "eagle1" else default_eagle3_layers(L)
  elif target_config is not None:
    bad = [i for i in layers if not 0 <= i <= target_config.num_hidden_layers]
    if bad:
      raise ValueError(f"EAGLE config names target layers {list(layers)}; {bad} lie outside "
                       f"[0, {target_config.num_hidden_layers}] for this target")
  q_bias = sorted(n for n in names if n.startswith("layers.0.self_attn.") and
                  n.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")))
  cfg_bias = bool(d.get("qkv_bias", d.get("attention_bias", False)))
  qkv_bias = bool(q_bias) if names else cfg_bias
  if names and cfg_bias and not q_bias:
    raise ValueError("EAGLE config.json says qkv_bias=true but the checkpoint has no "
                     "layers.0.self_attn.{q,k,v}_proj.bias tensors")
  h = d["hidden_size"]
  rs = d.get("rope_scaling")
  fields = dict(
      kind=kind, vocab_size=d["vocab_size"],
      draft_vocab_size=d.get("draft_vocab_size") or d["vocab_size"], hidden_size=h,
      intermediate_size=d["intermediate_size"], num_attention_heads=d["num_attention_heads"],
      num_key_value_heads=d.get("num_key_value_heads", d["num_attention_heads"]),
      head_dim=d.get("head_dim") or h // d["num_attention_heads"],
      target_hidden_size=d.get("target_hidden_size") or h,
      target_layers=tuple(int(i) for i in layers),
      fc_bias=("fc.bias" in names) if names else bool(d.get("bias", kind == "eagle1")),
      qkv_bias=qkv_bias,
      rms_norm_eps=d.get("rms_norm_eps", 1e-6), rope_theta=d.get("rope_theta", 10000.0),
      rope_scaling=tuple(sorted(rs.items())) if rs else None,
      max_position_embeddings=d.get("max_position_embeddings", 2048))
  fields.update(overrides)
  return EagleConfig(**fields)


def save_eagle(path: str, cfg: EagleConfig, params, d2t=None, t2d=None,
               dtype: Optional[str] = None, extra_config: Optional[dict] = None) -> None:
  """Write ``config.json`` + ``model.safetensors`` in the published layout
  (``d2t`` int64 offsets / ``t2d`` bool for a reduced EAGLE-3 vocabulary)."""
  os.makedirs(path, exist_ok=True)
  dt = resolve_dtype(dtype or cfg.param_dtype)
  tensors = tensors_from_params(cfg, params)
  if cfg.kind == "eagle3":
    if d2t is None:
      if cfg.reduced_vocab:
        raise ValueError("a reduced-vocabulary head needs d2t/t2d to be saved")
      d2t, t2d = vocab_maps(np.arange(cfg.vocab_size), cfg.vocab_size)
  d = config_to_json(cfg)
  d["torch_dtype"] = jnp.dtype(dt).name
  d.update(extra_config or {})
  with open(os.path.join(path, CONFIG_FILE), "w") as f:
    json.dump(d, f, indent=2)
  tensors = {k: np.asarray(jnp.asarray(v).astype(dt)) for k, v in tensors.items()}
  if cfg.kind == "eagle3":
    tensors["d2t"] = np.asarray(d2t, np.int64)
    tensors["t2d"] = np.asarray(t2d, bool)
  write_safetensors(os.path.join(path, WEIGHTS_FILE), tensors)


def load_eagle(path: str, target_config: Optional[ModelConfig] = None, dtype: str = "float32",
               expect_target_sha256: Optional[str] = None, **overrides):
  """Load a head saved by :func:`save_eagle` or published by the EAGLE authors
  (``model.safetensors`` only: a ``pytorch_model.bin`` is refused with a
  conversion hint, since loading it would unpickle).

  Returns ``(EagleHead, params, d2t)``; ``d2t`` is None for a full vocabulary.
  Raises ``ValueError`` naming a missing or mis-shaped tensor, a head that
  does not fit ``target_config``, or -- when ``expect_target_sha256`` is given --
  a head whose ``config.json`` does not record that target file hash as
  ``target_sha256`` (heads trained by specjax record it; a head trained for
  another target drafts valid but useless tokens, so it is refused loudly).
  """
  cfg_path = os.path.join(path, CONFIG_FILE)
  if not os.path.isfile(cfg_path):
    raise FileNotFoundError(f"missing file: {cfg_path}")
  with open(cfg_path) as f:
    d = json.load(f)
  check_target_sha256(d, expect_target_sha256, path)
  st = os.path.join(path, WEIGHTS_FILE)
  if not os.path.isfile(st):
    refuse_pickle(path, WEIGHTS_FILE)  # never torch.load: unpickling runs code
    raise FileNotFoundError(f"no {WEIGHTS_FILE} in {path}")
  tensors = read_safetensors(st)
  cfg = config_from_json(d, tensors.keys(), target_config, dtype=dtype, param_dtype=dtype,
                         **overrides)
  if target_config is not None:
    check_compatible(cfg, target_config)
  params = params_from_tensors(cfg, tensors, dtype)
  d2t = None
  if cfg.kind == "eagle3" and cfg.reduced_vocab:
    if "d2t" not in tensors:
      raise ValueError(f"EAGLE-3 head with draft_vocab_size={cfg.draft_vocab_size} < "
                       f"vocab_size={cfg.vocab_size} lacks its 'd2t' tensor")
    d2t = np.asarray(tensors["d2t"]).astype(np.int64)
    if d2t.shape != (cfg.draft_vocab_size,):
      raise ValueError(f"EAGLE tensor 'd2t' has shape {d2t.shape}, expected "
                       f"({cfg.draft_vocab_size},)")
    ids = d2t + np.arange(cfg.draft_vocab_size)
    if ids.min() < 0 or ids.max() >= cfg.vocab_size:
      raise ValueError("EAGLE tensor 'd2t' maps draft ids outside the target vocabulary")
    if "t2d" in tensors and np.shape(tensors["t2d"]) != (cfg.vocab_size,):
      raise ValueError(f"EAGLE tensor 't2d' has shape {np.shape(tensors['t2d'])}, expected "
                       f"({cfg.vocab_size},)")
  return EagleHead(cfg), params, d2t


def check_target_sha256(config_json: dict, expect: Optional[str], path: str = "",
                        what: str = "head") -> None:
  """ValueError unless ``config_json['target_sha256'] == expect`` (no check when
  ``expect`` is None); ``what`` names the checked model in the message."""
  if expect is None:
    return
  got = config_json.get("target_sha256")
  if got is None:
    raise ValueError(f"{what} {path} records no target_sha256, so it cannot be checked against "
                     f"target {expect[:12]}...; load it with expect_target_sha256=None to skip "
                     "the check")
  if got != expect:
    raise ValueError(f"{what} {path} was trained for target sha256 {got[:12]}..., not this "
                     f"target {expect[:12]}...; train a {what} for this target (experiments/"
                     "train_from_store.py on its feature store)")


DEFAULT_HEADS = ("eagle1", "eagle3")


def load_default_eagle(kind: str, dtype: str = "float32"):
  """``(EagleHead, params, d2t)`` of the shipped head ``kind`` ("eagle1" | "eagle3"),
  trained for ``specjax.models.defaults.load_default("target")`` (assets/README.md)."""
  from specjax.models import defaults
  if kind not in DEFAULT_HEADS:
    raise ValueError(f"unknown default head {kind!r}; choose one of {DEFAULT_HEADS}")
  target_cfg = defaults.hf.load_config(defaults.default_model_dir("target"))
  return load_eagle(os.path.join(defaults.assets_dir(), kind), target_cfg, dtype=dtype)
