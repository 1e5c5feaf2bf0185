"""EAGLE-1 and EAGLE-3 draft heads (Li et al. 2024, 2025) as pure functions.

A head drafts from the *target's* features instead of its own stack of
layers.  Its i-th KV-cache entry pairs the target feature of position i with
the embedding of the token at position i + 1 (the token that feature
predicted), and sits at RoPE position i.  Its output hidden state at entry i
is a guess of the feature at position i + 1, from which the next token is read.

EAGLE-1 (``kind="eagle1"``)::

    x   = fc(concat(embed(x_{t+1}), f_t))          # fc: 2h -> h (+ bias)
    out = decoder_layer(x)                         # no input norm (as published)
    logits = target.lm_head(out)                   # the target's frozen LM head

with ``f_t`` the target's final normed feature (``hidden_layers=(L,)``); at
later draft steps ``f`` is the head's own previous ``out``.  Trained by
smooth-L1 regression of ``out_t`` on ``f_{t+1}`` plus cross-entropy to the
target's next-token distribution.

EAGLE-3 (``kind="eagle3"``)::

    g_t = fc(concat(h_low, h_mid, h_high)_t)       # fc: 3h -> h, no bias
    a   = attn(concat(norm(embed(x_{t+1})), norm(g_t)))   # q/k/v read 2h
    out = g_t + a;  out = out + mlp(norm(out))
    logits = lm_head(norm(out))                    # own head, draft vocab
    # later draft steps feed ``out`` back in place of g

The draft vocabulary may be a subset of the target's: draft id ``d`` is target
id ``d + d2t[d]`` (the published offset convention); ``t2d[v]`` marks target
ids present in the draft vocabulary.

Head params are a plain pytree holding only the head's own weights; the
target's embedding (and for EAGLE-1 its LM head) are passed in explicitly, so a
saved head stays small and always matches the target it runs with.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from specjax.checks import check_finite
from specjax.models import kv_cache as kvc
from specjax.models.config import ModelConfig, resolve_dtype
from specjax.models.transformer import (MLP, Attention, RMSNorm, rope_tables,
                                        visibility_mask)

KINDS = ("eagle1", "eagle3")


def default_eagle3_layers(num_layers: int) -> tuple:
  """Low / middle / high target layers whose *inputs* EAGLE-3 fuses.

  The published choice is ``(2, L//2, L-3)``; for shallow targets (L < 6) it
  would not be increasing, so we use ``(L//2 - 1, L//2, L - 1)`` clipped to
  ``[0, L]`` (the high one is the final feature L when L < 4):
  L=5 -> (1, 2, 4), L=4 -> (1, 2, 3), L=3 -> (0, 1, 3), L=2 -> (0, 1, 2), L=1 -> (0, 0, 1).
  """
  if num_layers < 1:
    raise ValueError(f"num_layers={num_layers} must be >= 1")
  if num_layers >= 6:
    return (2, num_layers // 2, num_layers - 3)
  mid = num_layers // 2
  return (max(mid - 1, 0), mid, num_layers - 1 if num_layers >= 4 else num_layers)


@dataclasses.dataclass(frozen=True)
class EagleConfig:
  """Static hyperparameters of a draft head (hashable; they fix shapes).

  Attributes:
    kind: "eagle1" | "eagle3".
    vocab_size: the target's vocabulary.
    draft_vocab_size: rows of the EAGLE-3 LM head (<= vocab_size); EAGLE-1
      uses the target's head, so it must equal vocab_size.
    hidden_size, intermediate_size, num_attention_heads, num_key_value_heads,
    head_dim: the decoder layer's shapes (hidden_size = the head's width).
    target_hidden_size: width of the target's features (EAGLE-1: must equal
      hidden_size since the target's LM head reads the head's output).
    target_layers: the target ``hidden_layers`` the head reads: ``(L,)`` for
      EAGLE-1, three decoder-layer inputs for EAGLE-3.
    fc_bias: bias of ``fc`` (the published EAGLE-1 has one, EAGLE-3 not).
    qkv_bias: biases of the layer's q/k/v projections (EAGLE-1 heads for
      Qwen2 targets publish ``qkv_bias: true`` and ``layers.0.self_attn.*.bias``).
    rms_norm_eps, rope_theta, rope_scaling, max_position_embeddings: as the
      target's (positions and RoPE are handled like the target's).
    dtype, param_dtype: activation / storage dtypes.
  """

  kind: str = "eagle1"
  vocab_size: int = 256
  draft_vocab_size: int = 256
  hidden_size: int = 64
  intermediate_size: int = 128
  num_attention_heads: int = 4
  num_key_value_heads: int = 2
  head_dim: int = 16
  target_hidden_size: int = 64
  target_layers: tuple = (2,)
  fc_bias: bool = True
  qkv_bias: bool = False
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10000.0
  rope_scaling: Optional[tuple] = None
  max_position_embeddings: int = 2048
  dtype: str = "float32"
  param_dtype: str = "float32"

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"kind={self.kind!r}; choose one of {KINDS}")
    if not 1 <= self.draft_vocab_size <= self.vocab_size:
      raise ValueError(f"draft_vocab_size={self.draft_vocab_size} must lie in "
                       f"[1, vocab_size={self.vocab_size}]")
    if self.kind == "eagle1":
      if self.draft_vocab_size != self.vocab_size:
        raise ValueError("EAGLE-1 uses the target's LM head: draft_vocab_size must equal "
                         f"vocab_size ({self.draft_vocab_size} != {self.vocab_size})")
      if self.target_hidden_size != self.hidden_size:
        raise ValueError("EAGLE-1 needs target_hidden_size == hidden_size "
                         f"({self.target_hidden_size} != {self.hidden_size})")
      if len(self.target_layers) != 1:
        raise ValueError(f"EAGLE-1 reads one target feature; target_layers={self.target_layers}")
    if not isinstance(self.target_layers, tuple) or not self.target_layers:
      raise ValueError(f"target_layers={self.target_layers!r} must be a non-empty tuple")
    if any(not isinstance(i, (int, np.integer)) or i < 0 for i in self.target_layers):
      raise ValueError(f"target_layers={self.target_layers!r} must be non-negative ints")
    self.layer_config  # validates the layer shapes via ModelConfig
    resolve_dtype(self.dtype)
    resolve_dtype(self.param_dtype)

  @property
  def layer_config(self) -> ModelConfig:
    """The one decoder layer's config (llama family; q/k/v biases iff ``qkv_bias``)."""
    return ModelConfig(
        model_type="llama", vocab_size=self.vocab_size, hidden_size=self.hidden_size,
        qkv_bias=bool(self.qkv_bias),
        intermediate_size=self.intermediate_size, num_hidden_layers=1,
        num_attention_heads=self.num_attention_heads,
        num_key_value_heads=self.num_key_value_heads, head_dim=self.head_dim,
        rope_theta=self.rope_theta, rope_scaling=self.rope_scaling,
        rms_norm_eps=self.rms_norm_eps, max_position_embeddings=self.max_position_embeddings,
        dtype=self.dtype, param_dtype=self.param_dtype)

  @property
  def reduced_vocab(self) -> bool:
    return self.draft_vocab_size != self.vocab_size

  def replace(self, **kw) -> "EagleConfig":
    return dataclasses.replace(self, **kw)

  def num_params(self) -> int:
    h, i, th = self.hidden_size, self.intermediate_size, self.target_hidden_size
    qd, kvd = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
    attn_in = h if self.kind == "eagle1" else 2 * h
    n = attn_in * (qd + 2 * kvd) + qd * h + 3 * h * i + h  # attn, mlp, post-attn norm
    if self.qkv_bias:
      n += qd + 2 * kvd
    if self.kind == "eagle1":
      n += 2 * h * h + (h if self.fc_bias else 0)
    else:
      n += len(self.target_layers) * th * h + (h if self.fc_bias else 0)
      n += 3 * h + h * self.draft_vocab_size  # input/hidden/final norms, lm_head
    return n

  @classmethod
  def for_target(cls, target_config: ModelConfig, kind: str, *, intermediate_size=None,
                 draft_vocab_size=None, target_layers=None, **kw) -> "EagleConfig":
    """A head shaped like one of ``target_config``'s layers (the published recipe)."""
    L = target_config.num_hidden_layers
    if target_layers is None:
      target_layers = (L,) if kind == "eagle1" else default_eagle3_layers(L)
    v = target_config.vocab_size
    fields = dict(
        kind=kind, vocab_size=v, draft_vocab_size=draft_vocab_size or v,
        hidden_size=target_config.hidden_size,
        intermediate_size=intermediate_size or target_config.intermediate_size,
        num_attention_heads=target_config.num_attention_heads,
        num_key_value_heads=target_config.num_key_value_heads,
        head_dim=target_config.head_dim, target_hidden_size=target_config.hidden_size,
        target_layers=tuple(int(i) for i in target_layers), fc_bias=(kind == "eagle1"),
        rms_norm_eps=target_config.rms_norm_eps, rope_theta=target_config.rope_theta,
        rope_scaling=target_config.rope_scaling,
        max_position_embeddings=target_config.max_position_embeddings)
    fields.update(kw)
    return cls(**fields)


class HeadOutput(NamedTuple):
  hidden: jax.Array  # [B, T, H] the head's output feature (pre-norm), fed back / regressed
  cache: kvc.KVCache  # the T entries written at each row's cursor, not committed


class _Layer(nn.Module):
  """The head's decoder layer; EAGLE-3 attends over concat(norm(emb), norm(h))."""

  config: EagleConfig

  @nn.compact
  def __call__(self, emb, h, cos, sin, k_buf, v_buf, lengths, mask):
    c = self.config
    lc = c.layer_config
    dt, pdt = lc.compute_dtype, lc.params_dtype
    norm = lambda name: RMSNorm(c.rms_norm_eps, dt, pdt, name=name)
    if c.kind == "eagle1":
      attn_in = h  # the published EAGLE-1 layer 0 has no input norm
    else:
      attn_in = jnp.concatenate([norm("input_layernorm")(emb), norm("hidden_norm")(h)], -1)
    a, k_all, v_all = Attention(lc, name="self_attn")(attn_in, cos, sin, k_buf[None],
                                                      v_buf[None], 0, lengths, mask)
    k_buf, v_buf = k_all[0], v_all[0]
    x = h + a
    x = x + MLP(lc, name="mlp")(norm("post_attention_layernorm")(x))
    return x, k_buf, v_buf


class _Head(nn.Module):
  config: EagleConfig

  def setup(self):
    c = self.config
    dt, pdt = resolve_dtype(c.dtype), resolve_dtype(c.param_dtype)
    self.fc = nn.Dense(c.hidden_size, use_bias=c.fc_bias, dtype=dt, param_dtype=pdt)
    self.midlayer = _Layer(c)
    if c.kind == "eagle3":
      self.norm = RMSNorm(c.rms_norm_eps, dt, pdt)
      self.lm_head = nn.Dense(c.draft_vocab_size, use_bias=False, dtype=dt, param_dtype=pdt)

  def project(self, target_hidden):
    """``[n_sel, B, T, Ht]`` target features -> the head's input feature ``[B, T, H]``."""
    c = self.config
    if c.kind == "eagle1":
      return target_hidden[0].astype(resolve_dtype(c.dtype))
    x = jnp.concatenate([target_hidden[i] for i in range(target_hidden.shape[0])], -1)
    return self.fc(x)

  def __call__(self, emb, h, positions, k, v, lengths, mask):
    c = self.config
    if c.kind == "eagle1":
      h = self.fc(jnp.concatenate([emb, h.astype(emb.dtype)], -1))
    cos, sin = rope_tables(positions, c.head_dim, c.rope_theta, dict(c.rope_scaling or ()))
    return self.midlayer(emb, h, cos, sin, k, v, lengths, mask)

  def logits(self, h):
    return self.lm_head(self.norm(h))

  def init_all(self, target_hidden, emb, positions, k, v, lengths, mask):
    h = self.project(target_hidden)
    out, _, _ = self(emb, h, positions, k, v, lengths, mask)
    if self.config.kind == "eagle3":
      self.logits(out)
    return out


@dataclasses.dataclass(frozen=True)
class EagleHead:
  """A config bound to the head's pure functions (hashable: static under jit)."""

  config: EagleConfig

  @property
  def module(self) -> _Head:
    return _Head(self.config)

  def init_params(self, key: jax.Array):
    c = self.config
    b, t = 1, 4
    th = jnp.zeros((len(c.target_layers), b, t, c.target_hidden_size), jnp.float32)
    emb = jnp.zeros((b, t, c.hidden_size), jnp.float32)
    pos = jnp.zeros((b, t), jnp.int32)
    cache = self.init_cache(b, t)
    mask = visibility_mask(cache.lengths, t, t, None)
    return self.module.init(key, th, emb, pos, cache.k[0], cache.v[0], cache.lengths, mask,
                            method=_Head.init_all)["params"]

  def init_cache(self, batch: int, max_length: int, dtype=None) -> kvc.KVCache:
    c = self.config
    return kvc.init_cache(1, batch, max_length, c.num_key_value_heads, c.head_dim,
                          dtype or resolve_dtype(c.dtype))

  def project(self, params, target_hidden):
    """Target features ``[n_sel, B, T, Ht]`` -> head input features ``[B, T, H]``."""
    return self.module.apply({"params": params}, target_hidden, method=_Head.project)

  def apply(self, params, embeds, feats, positions, cache: kvc.KVCache, attn_mask=None,
            mask=None) -> HeadOutput:
    """One head forward over T entries per row.

    Args:
      embeds: [B, T, H] target embeddings of the tokens *after* the features'
        positions (entry t pairs feature f_t with token x_{t+1}).
      feats: [B, T, H] input features: ``project(target_hidden)`` or the
        head's own earlier outputs.
      positions: [B, T] RoPE positions (entry t: position t).
      cache: 1-layer KV cache; the entries are written at ``cache.lengths``.
      attn_mask: [B, T, T] among the new entries (default causal), as the target's.
      mask: [B, T, S] full visibility over cache slots, overriding attn_mask
        (tree drafting: ancestors written by earlier forwards).
    """
    t = embeds.shape[1]
    if mask is None:
      mask = visibility_mask(cache.lengths, t, cache.max_length, attn_mask)
    out, k, v = self.module.apply({"params": params}, embeds, feats, positions, cache.k[0],
                                  cache.v[0], cache.lengths, mask)
    return HeadOutput(out, kvc.KVCache(k[None], v[None], cache.lengths))

  def draft_logits(self, params, hidden, target_lm_head=None):
    """Float32 logits over the *draft* vocabulary ``[..., V_draft]``.

    EAGLE-1 needs ``target_lm_head`` (the target's ``[H, V]`` kernel).
    """
    c = self.config
    if c.kind == "eagle1":
      if target_lm_head is None:
        raise ValueError("an EAGLE-1 head needs the target's LM head kernel [H, V]")
      return jnp.dot(hidden, target_lm_head.astype(hidden.dtype),
                     preferred_element_type=jnp.float32)
    return self.module.apply({"params": params}, hidden, method=_Head.logits).astype(jnp.float32)

  def logits(self, params, hidden, target_lm_head=None, d2t=None):
    """Float32 logits over the *target* vocabulary ``[..., V]``: draft id d scattered
    to target id ``d + d2t[d]``; ids outside the draft vocabulary get -inf."""
    z = self.draft_logits(params, hidden, target_lm_head)
    c = self.config
    if not c.reduced_vocab:
      return z
    if d2t is None:
      raise ValueError("a reduced-vocabulary head needs its d2t map")
    ids = jnp.arange(c.draft_vocab_size, dtype=jnp.int32) + d2t.astype(jnp.int32)
    full = jnp.full(z.shape[:-1] + (c.vocab_size,), -jnp.inf, jnp.float32)
    return full.at[..., ids].set(z)


def vocab_maps(draft_to_target: np.ndarray, vocab_size: int):
  """Published ``(d2t, t2d)`` from the sorted target ids of the draft vocabulary.

  ``d2t[d] = draft_to_target[d] - d`` (int64 offsets), ``t2d`` bool ``[V]``.
  """
  ids = np.asarray(draft_to_target, np.int64)
  if ids.ndim != 1 or len(np.unique(ids)) != len(ids) or ids.min() < 0 or ids.max() >= vocab_size:
    raise ValueError("draft_to_target must hold distinct target ids in [0, vocab_size)")
  ids = np.sort(ids)
  t2d = np.zeros((vocab_size,), bool)
  t2d[ids] = True
  return ids - np.arange(len(ids)), t2d


def frequent_vocab(token_stream: np.ndarray, vocab_size: int, draft_vocab_size: int,
                   always=()) -> np.ndarray:
  """The ``draft_vocab_size`` most frequent target ids in a token stream (plus
  ``always``, e.g. EOS), sorted -- the EAGLE-3 recipe for the draft vocabulary."""
  counts = np.bincount(np.asarray(token_stream).ravel(), minlength=vocab_size).astype(np.float64)
  for t in always:
    counts[int(t)] = np.inf
  order = np.argsort(-counts, kind="stable")[:draft_vocab_size]
  return np.sort(order)



# ---- checkpoint interop: the published EAGLE / EAGLE-3 safetensors layout -------------------

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
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
  import json
  import os
  from safetensors.numpy import save_file
  os.makedirs(path, exist_ok=True)
  dt = resolve_dtype(dtype or cfg.param_dtype)
  tensors = {k: np.asarray(jnp.asarray(v).astype(dt)) for k, v in
             tensors_from_params(cfg, params).items()}
  if cfg.kind == "eagle3":
    if d2t is None:
      if cfg.reduced_vocab:
        raise ValueError("a reduced-vocabulary head needs d2t/t2d to be saved")
      d2t, t2d = vocab_maps(np.arange(cfg.vocab_size), cfg.vocab_size)
    tensors["d2t"] = np.asarray(d2t, np.int64)
    tensors["t2d"] = np.asarray(t2d, bool)
  d = config_to_json(cfg)
  d["torch_dtype"] = jnp.dtype(dt).name
  d.update(extra_config or {})
  with open(os.path.join(path, CONFIG_FILE), "w") as f:
    json.dump(d, f, indent=2)
  save_file(tensors, os.path.join(path, WEIGHTS_FILE), metadata={"format": "pt"})


_ST_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
              "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path: str) -> dict:
  """All tensors of a ``.safetensors`` file as numpy arrays, bf16 included (via
  ml_dtypes, which ``safetensors.numpy`` cannot do), without torch."""
  import json
  import struct

  import ml_dtypes
  dtypes = dict(_ST_DTYPES, BF16=ml_dtypes.bfloat16)
  try:
    with open(path, "rb") as f:
      n = struct.unpack("<Q", f.read(8))[0]
      header = json.loads(f.read(n))
      data = f.read()
    out = {}
    for name, info in header.items():
      if name == "__metadata__":
        continue
      start, end = info["data_offsets"]
      dt = dtypes[info["dtype"]]
      out[name] = np.frombuffer(data[start:end], dtype=dt).reshape(info["shape"])
    return out
  except (KeyError, ValueError, struct.error, json.JSONDecodeError) as e:
    raise ValueError(f"cannot read safetensors file {path}: {e!r}") from None


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
  import json
  import os
  cfg_path = os.path.join(path, CONFIG_FILE)
  if not os.path.isfile(cfg_path):
    raise FileNotFoundError(f"missing file: {cfg_path}")
  with open(cfg_path) as f:
    d = json.load(f)
  check_target_sha256(d, expect_target_sha256, path)
  st = os.path.join(path, WEIGHTS_FILE)
  if not os.path.isfile(st):
    from specjax.models.hf import refuse_pickle
    refuse_pickle(path, WEIGHTS_FILE)  # never torch.load: unpickling runs code
    raise FileNotFoundError(f"no {WEIGHTS_FILE} in {path}")
  tensors = read_safetensors(st)
  check_finite(tensors.items(), st)
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


def check_compatible(cfg: EagleConfig, target_config: ModelConfig) -> None:
  """ValueError unless the head can draft for a target with ``target_config``."""
  if cfg.vocab_size != target_config.vocab_size:
    raise ValueError(f"head vocab_size={cfg.vocab_size} != target vocab_size="
                     f"{target_config.vocab_size}")
  if cfg.target_hidden_size != target_config.hidden_size:
    raise ValueError(f"head target_hidden_size={cfg.target_hidden_size} != target hidden_size="
                     f"{target_config.hidden_size}")
  if cfg.kind == "eagle1" and cfg.hidden_size != target_config.hidden_size:
    raise ValueError("EAGLE-1 head width must equal the target's hidden_size")
  bad = [i for i in cfg.target_layers if not 0 <= i <= target_config.num_hidden_layers]
  if bad:
    raise ValueError(f"head target_layers {cfg.target_layers} outside [0, "
                     f"{target_config.num_hidden_layers}]")


DEFAULT_HEADS = ("eagle1", "eagle3")


def load_default_eagle(kind: str, dtype: str = "float32"):
  """``(EagleHead, params, d2t)`` of the shipped head ``kind`` ("eagle1" | "eagle3"),
  trained for ``specjax.models.defaults.load_default("target")`` (assets/README.md)."""
  import os
  from specjax.models import defaults
  if kind not in DEFAULT_HEADS:
    raise ValueError(f"unknown default head {kind!r}; choose one of {DEFAULT_HEADS}")
  target_cfg = defaults.hf.load_config(defaults.default_model_dir("target"))
  return load_eagle(os.path.join(defaults.assets_dir(), kind), target_cfg, dtype=dtype)
