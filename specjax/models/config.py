"""ModelConfig: the Llama / Qwen2 / Qwen3 family in one frozen dataclass."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import jax.numpy as jnp

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}


def resolve_dtype(dtype: Any):
  """'float32' | 'bfloat16' | 'float16' | a jnp dtype -> jnp dtype; ValueError otherwise."""
  if isinstance(dtype, str):
    if dtype not in _DTYPES:
      raise ValueError(f"dtype={dtype!r} is not supported; choose one of {sorted(_DTYPES)}")
    return _DTYPES[dtype]
  if jnp.dtype(dtype) not in [jnp.dtype(d) for d in _DTYPES.values()]:
    raise ValueError(f"dtype={dtype!r} is not supported; choose one of {sorted(_DTYPES)}")
  return jnp.dtype(dtype).type


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Decoder-only LM hyperparameters (static: they fix shapes).

  Attributes follow the Hugging Face names where one exists.
    model_type: "llama" | "qwen2" | "qwen3".
    vocab_size, hidden_size, intermediate_size, num_hidden_layers,
    num_attention_heads, num_key_value_heads, head_dim: shapes.
    rope_theta, rope_scaling: RoPE base and optional scaling as a tuple of
      (key, value) pairs (hashable form of HF's dict); "llama3" and "linear".
    rms_norm_eps: RMSNorm epsilon.
    tie_word_embeddings: share the embedding matrix with the LM head.
    qkv_bias / o_bias: projection biases (Qwen2: qkv True; Llama attention_bias: all).
    qk_norm: per-head RMSNorm on q and k before RoPE (Qwen3).
    max_position_embeddings: informative (context length of the checkpoint).
    hidden_layers: which decoder-layer *inputs* to return as hidden states
      (index L means the final normed output feature); an EAGLE-1 head wants
      (L,), EAGLE-3 (2, L//2, L-3) plus the last feature.
    dtype: activation dtype; param_dtype: storage dtype of the params.
    bos_token_id, eos_token_id: special tokens (eos may be None).
    tokenizer_fingerprint: identity of the tokenizer the ids belong to
      (``hf.tokenizer_fingerprint``: sha256 of its vocabulary, merges and added
      tokens), set by the loaders when a ``tokenizer.json`` is present, else
      None (unknown).  ``speculative_generate`` refuses a target / draft pair
      whose fingerprints differ.
  """

  model_type: str = "llama"
  vocab_size: int = 256
  hidden_size: int = 64
  intermediate_size: int = 128
  num_hidden_layers: int = 2
  num_attention_heads: int = 4
  num_key_value_heads: int = 2
  head_dim: int = 16
  rope_theta: float = 10000.0
  rope_scaling: Optional[tuple] = None
  rms_norm_eps: float = 1e-6
  tie_word_embeddings: bool = False
  qkv_bias: bool = False
  o_bias: bool = False
  qk_norm: bool = False
  max_position_embeddings: int = 2048
  hidden_layers: tuple = ()
  dtype: str = "float32"
  param_dtype: str = "float32"
  bos_token_id: Optional[int] = None
  eos_token_id: Optional[int] = None
  tokenizer_fingerprint: Optional[str] = None

  def __post_init__(self):
    if self.model_type not in SUPPORTED_MODEL_TYPES:
      raise ValueError(f"model_type={self.model_type!r} is not supported; "
                       f"choose one of {SUPPORTED_MODEL_TYPES}")
    for name in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                 "num_attention_heads", "num_key_value_heads", "head_dim"):
      v = getattr(self, name)
      if not (isinstance(v, int) and v > 0):
        raise ValueError(f"{name}={v!r} must be a positive integer")
    if self.num_attention_heads % self.num_key_value_heads:
      raise ValueError(f"num_attention_heads={self.num_attention_heads} must be a multiple of "
                       f"num_key_value_heads={self.num_key_value_heads}")
    if self.head_dim % 2:
      raise ValueError(f"head_dim={self.head_dim} must be even for RoPE")
    for layer in self.hidden_layers:
      if not 0 <= layer <= self.num_hidden_layers:
        raise ValueError(f"hidden_layers entry {layer} outside [0, {self.num_hidden_layers}]")
    resolve_dtype(self.dtype)
    resolve_dtype(self.param_dtype)
    if self.rope_scaling is not None:
      rs = dict(self.rope_scaling)
      kind = rs.get("rope_type", rs.get("type", "default"))
      if kind not in ("default", "llama3", "linear"):
        raise ValueError(f"rope_scaling type {kind!r} is not supported; "
                         "choose 'default', 'linear' or 'llama3'")

  @property
  def rope_scaling_dict(self) -> dict:
    return dict(self.rope_scaling or ())

  @property
  def compute_dtype(self):
    return resolve_dtype(self.dtype)

  @property
  def params_dtype(self):
    return resolve_dtype(self.param_dtype)

  def replace(self, **kw) -> "ModelConfig":
    return dataclasses.replace(self, **kw)

  def num_params(self) -> int:
    """Parameter count (embeddings counted once when tied)."""
    h, i, v, l = self.hidden_size, self.intermediate_size, self.vocab_size, self.num_hidden_layers
    qd = self.num_attention_heads * self.head_dim
    kvd = self.num_key_value_heads * self.head_dim
    attn = h * qd + 2 * h * kvd + qd * h
    if self.qkv_bias:
      attn += qd + 2 * kvd
    if self.o_bias:
      attn += h
    if self.qk_norm:
      attn += 2 * self.head_dim
    layer = attn + 3 * h * i + 2 * h
    return v * h * (1 if self.tie_word_embeddings else 2) + l * layer + h


def llama3_inv_freq(inv_freq, scaling: dict):
  """Llama-3 frequency-dependent RoPE scaling (as in Meta's reference / HF)."""
  factor = scaling["factor"]
  low = scaling.get("low_freq_factor", 1.0)
  high = scaling.get("high_freq_factor", 4.0)
  old = scaling.get("original_max_position_embeddings", 8192)
  low_wavelen = old / low
  high_wavelen = old / high
  wavelen = 2 * math.pi / inv_freq
  scaled = jnp.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
  smooth = (old / wavelen - low) / (high - low)
  smoothed = (1 - smooth) * scaled / factor + smooth * scaled
  is_medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
  return jnp.where(is_medium, smoothed, scaled)
