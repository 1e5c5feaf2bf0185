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
saved head stays small and always matches the target it runs with.  Files (the
published safetensors layout) are read and written by :mod:`specjax.models.eagle_io`.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import kv_cache as kvc
from specjax.models.config import ModelConfig, resolve_dtype
from specjax.models.transformer import (MLP, Attention, Model, RMSNorm, rope_tables,
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
    a, k_all, v_all, _ = Attention(lc, name="self_attn")(attn_in, cos, sin, k_buf[None],
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
    # unboxed: the transformer layers it reuses declare their logical axes on their params
    return nn.meta.unbox(self.module.init(key, th, emb, pos, cache.k[0], cache.v[0],
                                          cache.lengths, mask, method=_Head.init_all)["params"])

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

  def logits(self, params, hidden, target_lm_head=None, d2t=None, delta=None):
    """Float32 logits over the *target* vocabulary ``[..., V]``: draft id d scattered
    to target id ``d + d2t[d]``; ids outside the draft vocabulary get -inf.
    ``delta [..., V_draft]``: added to the draft logits first (an online adapter,
    ``specjax.decoding.adaptation``)."""
    z = self.draft_logits(params, hidden, target_lm_head)
    if delta is not None:
      z = z + delta
    c = self.config
    if not c.reduced_vocab:
      return z
    if d2t is None:
      raise ValueError("a reduced-vocabulary head needs its d2t map")
    ids = jnp.arange(c.draft_vocab_size, dtype=jnp.int32) + d2t.astype(jnp.int32)
    full = jnp.full(z.shape[:-1] + (c.vocab_size,), -jnp.inf, jnp.float32)
    return full.at[..., ids].set(z)


def target_lm_head(target_config: ModelConfig, target_params) -> jax.Array:
  """The target's LM head kernel ``[H, V]`` an EAGLE-1 head projects with
  (:meth:`Model.lm_head_kernel <specjax.models.transformer.Model.lm_head_kernel>`)."""
  return Model(target_config).lm_head_kernel(target_params)


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
