"""Decoder-only transformer for the Llama / Qwen2 / Qwen3 family (Flax linen,
used only through pure ``apply``).

Contract (docs/design.md "Model")::

    model = Model(config)
    out = model.apply(params, tokens[B,T], positions[B,T], cache, attn_mask=None)
    out.logits        # [B, T, V] float32 (or [B, n, V] with logits_index [B, n])
    out.hidden_states # [n_sel, B, T, H]: inputs of the layers in config.hidden_layers
                      # (index L = the final normed feature), or None
    out.cache         # the cache with the T new tokens *written* at each row's
                      # cursor, not committed (see kv_cache.commit)

The T new tokens of row b sit at cache slots ``lengths[b] + t``; token t sees
every committed slot of its row plus the new tokens allowed by ``attn_mask
[B, T, T]`` (default causal) -- tree tokens pass their ancestor mask.
Positions (for RoPE) are explicit and per row.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from specjax.models import kv_cache as kvc
from specjax.models import sharding
from specjax.models.config import ModelConfig, llama3_inv_freq

# Logical axes of every param, declared once (leaf path -> one name per dim);
# specjax.models.sharding maps them to mesh axes with one rules table.
# "heads" / "kv_heads" name the flattened ``heads * head_dim`` projection dims
# (head-major: a split between whole heads); the layer stack adds a leading
# "layers" dim.  A param without an entry here is an error in shard_params.
PARAM_AXES = {
    "embed_tokens/embedding": ("vocab", "embed"),  # also the tied LM head
    "norm/weight": ("embed",),
    "lm_head/kernel": ("embed", "vocab"),  # vocab-parallel
}
LAYER_PARAM_AXES = {
    "input_layernorm/weight": ("embed",),
    "post_attention_layernorm/weight": ("embed",),
    "self_attn/q_proj/kernel": ("embed", "heads"),  # column-parallel
    "self_attn/q_proj/bias": ("heads",),
    "self_attn/k_proj/kernel": ("embed", "kv_heads"),
    "self_attn/k_proj/bias": ("kv_heads",),
    "self_attn/v_proj/kernel": ("embed", "kv_heads"),
    "self_attn/v_proj/bias": ("kv_heads",),
    "self_attn/o_proj/kernel": ("heads", "embed"),  # row-parallel
    "self_attn/o_proj/bias": ("embed",),
    "self_attn/q_norm/weight": ("head_dim",),
    "self_attn/k_norm/weight": ("head_dim",),
    "mlp/gate_proj/kernel": ("embed", "mlp"),  # column-parallel
    "mlp/up_proj/kernel": ("embed", "mlp"),
    "mlp/down_proj/kernel": ("mlp", "embed"),  # row-parallel
}
CACHE_AXES = ("layers", "batch", "length", "kv_heads", "head_dim")  # KVCache.k / .v


class ModelOutput(NamedTuple):
  logits: jax.Array
  hidden_states: Optional[jax.Array]
  cache: kvc.KVCache


class RMSNorm(nn.Module):
  """RMSNorm (Zhang & Sennrich 2019) computed in float32, as in HF Llama."""

  eps: float
  dtype: jnp.dtype
  param_dtype: jnp.dtype

  @nn.compact
  def __call__(self, x):
    w = self.param("weight", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return (w.astype(jnp.float32) * x32.astype(x.dtype).astype(jnp.float32)).astype(self.dtype)


def rope_tables(positions: jax.Array, head_dim: int, theta: float, scaling: dict):
  """cos, sin ``[B, T, head_dim]`` for rotate-half RoPE (Su et al. 2021; HF layout)."""
  inv_freq = 1.0 / (theta ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
  kind = scaling.get("rope_type", scaling.get("type", "default"))
  pos = positions.astype(jnp.float32)
  if kind == "llama3":
    inv_freq = llama3_inv_freq(inv_freq, scaling)
  elif kind == "linear":
    pos = pos / scaling["factor"]
  freqs = pos[..., None] * inv_freq  # [B, T, D/2]
  emb = jnp.concatenate([freqs, freqs], axis=-1)
  return jnp.cos(emb), jnp.sin(emb)


def apply_rope(x, cos, sin):
  """x: [B, T, heads, D]; cos/sin: [B, T, D]."""
  half = x.shape[-1] // 2
  rot = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  x32 = x.astype(jnp.float32)
  out = x32 * cos[:, :, None, :] + rot.astype(jnp.float32) * sin[:, :, None, :]
  return out.astype(x.dtype)


def visibility_mask(lengths: jax.Array, t: int, s: int, attn_mask: Optional[jax.Array]):
  """Bool ``[B, T, S]``: may new token t of row b attend to cache slot s?

  Committed slots (s < lengths[b]) are always visible; new slot lengths[b]+j
  is visible iff ``attn_mask[b, t, j]`` (causal when None).
  """
  slots = jnp.arange(s)[None, :]  # [1, S]
  rel = slots - lengths[:, None]  # [B, S]
  is_new = (rel >= 0) & (rel < t)
  if attn_mask is None:
    new_ok = rel[:, None, :] <= jnp.arange(t)[None, :, None]  # causal
  else:
    idx = jnp.broadcast_to(jnp.clip(rel, 0, t - 1)[:, None, :], (lengths.shape[0], t, s))
    new_ok = jnp.take_along_axis(attn_mask.astype(bool), idx, axis=2)
  return (rel[:, None, :] < 0) | (is_new[:, None, :] & new_ok)


class Attention(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x, cos, sin, k_all, v_all, layer, lengths, mask):
    """k_all, v_all: the whole cache ``[L, B, S, KVH, D]`` (scan carry): the T new
    keys/values are scattered into layer ``layer`` in place, and attention reads
    that layer's slice."""
    c = self.config
    dt, pdt = c.compute_dtype, c.params_dtype
    b, t, _ = x.shape
    dense = lambda f, bias, name: nn.Dense(f, use_bias=bias, dtype=dt, param_dtype=pdt, name=name)
    q = dense(c.num_attention_heads * c.head_dim, c.qkv_bias, "q_proj")(x)
    k = dense(c.num_key_value_heads * c.head_dim, c.qkv_bias, "k_proj")(x)
    v = dense(c.num_key_value_heads * c.head_dim, c.qkv_bias, "v_proj")(x)
    q = q.reshape(b, t, c.num_attention_heads, c.head_dim)
    k = k.reshape(b, t, c.num_key_value_heads, c.head_dim)
    v = v.reshape(b, t, c.num_key_value_heads, c.head_dim)
    if c.qk_norm:
      q = RMSNorm(c.rms_norm_eps, dt, pdt, name="q_norm")(q)
      k = RMSNorm(c.rms_norm_eps, dt, pdt, name="k_norm")(k)
    q = apply_rope(q, cos, sin)
    k = apply_rope(k, cos, sin)
    k_all = kvc.write_tokens(k_all, layer, k, lengths)  # [L, B, S, KVH, D]
    v_all = kvc.write_tokens(v_all, layer, v, lengths)
    k_buf, v_buf = k_all[layer], v_all[layer]  # [B, S, KVH, D]
    groups = c.num_attention_heads // c.num_key_value_heads
    qg = q.reshape(b, t, c.num_key_value_heads, groups, c.head_dim)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, k_buf.astype(dt),
                        preferred_element_type=jnp.float32) * (c.head_dim ** -0.5)
    scores = jnp.where(mask[:, None, None, :, :], scores, -1e30)
    w = jax.nn.softmax(scores, axis=-1).astype(dt)
    out = jnp.einsum("bkgts,bskd->btkgd", w, v_buf.astype(dt))
    out = out.reshape(b, t, c.num_attention_heads * c.head_dim)
    return dense(c.hidden_size, c.o_bias, "o_proj")(out), k_all, v_all


class MLP(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    c = self.config
    dense = lambda f, name: nn.Dense(f, use_bias=False, dtype=c.compute_dtype,
                                     param_dtype=c.params_dtype, name=name)
    h = nn.silu(dense(c.intermediate_size, "gate_proj")(x)) * dense(c.intermediate_size, "up_proj")(x)
    return dense(c.hidden_size, "down_proj")(h)


class DecoderLayer(nn.Module):
  """Pre-norm block: x + attn(norm(x)); x + mlp(norm(x)). Scanned over layers."""

  config: ModelConfig

  @nn.compact
  def __call__(self, carry, layer, cos, sin, lengths, mask):
    c = self.config
    x, k_all, v_all = carry
    norm = lambda name: RMSNorm(c.rms_norm_eps, c.compute_dtype, c.params_dtype, name=name)
    h, k_all, v_all = Attention(c, name="self_attn")(norm("input_layernorm")(x), cos, sin,
                                                     k_all, v_all, layer, lengths, mask)
    layer_input = x
    x = x + h
    x = x + MLP(c, name="mlp")(norm("post_attention_layernorm")(x))
    return (x, k_all, v_all), layer_input


class Transformer(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, tokens, positions, cache: kvc.KVCache, attn_mask=None, logits_index=None):
    c = self.config
    dt, pdt = c.compute_dtype, c.params_dtype
    embed = nn.Embed(c.vocab_size, c.hidden_size, dtype=dt, param_dtype=pdt,
                     embedding_init=nn.initializers.normal(0.02), name="embed_tokens")
    x = embed(tokens)
    b, t = tokens.shape
    cos, sin = rope_tables(positions, c.head_dim, c.rope_theta, c.rope_scaling_dict)
    mask = visibility_mask(cache.lengths, t, cache.max_length, attn_mask)
    layers = nn.scan(DecoderLayer, variable_axes={"params": 0}, split_rngs={"params": True},
                     in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
                     length=c.num_hidden_layers)
    # the cache is a scan *carry* updated in place (only the T new tokens are
    # written per layer), not a scanned input/output, which would allocate and
    # copy the whole [L, B, S, KVH, D] cache on every forward
    (x, k_new, v_new), layer_inputs = layers(c, name="layers")(
        (x, cache.k, cache.v), jnp.arange(c.num_hidden_layers), cos, sin, cache.lengths, mask)
    x = RMSNorm(c.rms_norm_eps, dt, pdt, name="norm")(x)
    hidden = None
    if c.hidden_layers:
      sel = [x if i == c.num_hidden_layers else layer_inputs[i] for i in c.hidden_layers]
      hidden = jnp.stack(sel, axis=0)
    if logits_index is not None:
      x = jnp.take_along_axis(x, logits_index[:, :, None], axis=1)
    if c.tie_word_embeddings:
      logits = embed.attend(x)
    else:
      logits = nn.Dense(c.vocab_size, use_bias=False, dtype=dt, param_dtype=pdt,
                        name="lm_head")(x)
    new_cache = kvc.KVCache(k_new, v_new, cache.lengths)
    return ModelOutput(logits.astype(jnp.float32), hidden, new_cache)


@dataclasses.dataclass(frozen=True)
class Model:
  """A config bound to the pure functions that use it (hashable: static under jit)."""

  config: ModelConfig

  @property
  def module(self) -> Transformer:
    return Transformer(self.config)

  def init_params(self, key: jax.Array):
    """Random params (normal(0.02) kernels) as a plain pytree."""
    cache = self.init_cache(1, 4)
    tok = jnp.zeros((1, 4), jnp.int32)
    return self.module.init(key, tok, tok, cache)["params"]

  def init_cache(self, batch: int, max_length: int, dtype=None) -> kvc.KVCache:
    """An empty cache; under a mesh (the loops' shard_map) its KV heads are
    placed by the current axis rules (:func:`sharding.constrain`)."""
    c = self.config
    cache = kvc.init_cache(c.num_hidden_layers, batch, max_length, c.num_key_value_heads,
                           c.head_dim, dtype or c.compute_dtype)
    place = lambda buf: sharding.constrain(buf, CACHE_AXES, self.axis_units)
    return kvc.KVCache(place(cache.k), place(cache.v), cache.lengths)

  @property
  def axis_units(self) -> dict:
    """Indivisible units of the logical axes that are not counted in entries:
    a head dim splits only between whole heads."""
    return {"heads": self.config.num_attention_heads,
            "kv_heads": self.config.num_key_value_heads}

  def logical_axes(self, params):
    """A pytree like ``params`` (stored, or :meth:`decode_params` form) whose
    leaves are ``PartitionSpec``s of logical axis names (:data:`PARAM_AXES`).
    ``ValueError`` naming a leaf without a declaration or of another rank."""

    def names(path, leaf):
      keys = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]
      stacked = False
      if keys and keys[0] == "layers":
        stacked = not (len(keys) > 1 and keys[1].isdigit())
        keys = keys[1:] if stacked else keys[2:]
        table = LAYER_PARAM_AXES
      else:
        table = PARAM_AXES
      axes = table.get("/".join(keys))
      where = jax.tree_util.keystr(path)
      if axes is None:
        raise ValueError(f"param {where} has no declared logical axes "
                         f"(transformer.PARAM_AXES / LAYER_PARAM_AXES)")
      axes = (("layers",) if stacked else ()) + axes
      shape = tuple(getattr(leaf, "shape", ()))
      if len(axes) != len(shape):
        raise ValueError(f"param {where} has shape {shape} but its logical axes "
                         f"{axes} name {len(axes)} dims")
      return jax.sharding.PartitionSpec(*axes)

    return jax.tree_util.tree_map_with_path(names, params)

  def apply(self, params, tokens, positions, cache, attn_mask=None, logits_index=None
            ) -> ModelOutput:
    """Pure forward pass; see the module docstring for shapes.  ``params`` as
    stored (the layer stack scanned), or from :meth:`decode_params` (a tuple of
    per-layer trees: the layers unrolled, same values)."""
    if isinstance(params, dict) and isinstance(params.get("layers"), tuple):
      return self._apply_unrolled(params, tokens, positions, cache, attn_mask, logits_index)
    return self.module.apply({"params": params}, tokens, positions, cache, attn_mask,
                             logits_index)

  def decode_params(self, params):
    """``params`` for the forwards of a decode loop, made once before the loop.

    On CPU: the layer stack split into a tuple of per-layer trees (one copy of
    the layer weights per call), which :meth:`apply` runs as unrolled layers.
    XLA:CPU copies every weight matrix out of the stacked array before its
    matmul on *each* scanned forward -- for SmolLM2-135M, 425 MB copied per
    decode step, over half of the step's time -- while per-layer arrays are
    read in place.  The price is compile time (the loop's forward is unrolled)
    and the memory of one copy of the layer weights.  Elsewhere (accelerators
    slice the stack inside their matmuls) ``params`` unchanged.
    """
    if jax.default_backend() != "cpu" or isinstance(params["layers"], tuple):
      return params
    n = self.config.num_hidden_layers
    layers = tuple(jax.tree.map(lambda w, i=i: w[i], params["layers"]) for i in range(n))
    return {**params, "layers": layers}

  def _apply_unrolled(self, params, tokens, positions, cache, attn_mask, logits_index
                      ) -> ModelOutput:
    """:class:`Transformer` with the layers unrolled over ``params["layers"]``, a
    tuple of per-layer param trees (same modules, same values)."""
    c = self.config
    dt, pdt = c.compute_dtype, c.params_dtype
    x = nn.Embed(c.vocab_size, c.hidden_size, dtype=dt, param_dtype=pdt).apply(
        {"params": params["embed_tokens"]}, tokens)
    t = tokens.shape[1]
    cos, sin = rope_tables(positions, c.head_dim, c.rope_theta, c.rope_scaling_dict)
    mask = visibility_mask(cache.lengths, t, cache.max_length, attn_mask)
    carry, layer_inputs = (x, cache.k, cache.v), []
    for i, layer_params in enumerate(params["layers"]):
      carry, layer_input = DecoderLayer(c).apply({"params": layer_params}, carry, i, cos, sin,
                                                 cache.lengths, mask)
      layer_inputs.append(layer_input)
    x, k_new, v_new = carry
    x = RMSNorm(c.rms_norm_eps, dt, pdt).apply({"params": params["norm"]}, x)
    hidden = None
    if c.hidden_layers:
      hidden = jnp.stack([x if i == c.num_hidden_layers else layer_inputs[i]
                          for i in c.hidden_layers], axis=0)
    if logits_index is not None:
      x = jnp.take_along_axis(x, logits_index[:, :, None], axis=1)
    if c.tie_word_embeddings:
      logits = nn.Embed(c.vocab_size, c.hidden_size, dtype=dt, param_dtype=pdt).apply(
          {"params": params["embed_tokens"]}, x, method=nn.Embed.attend)
    else:
      logits = nn.Dense(c.vocab_size, use_bias=False, dtype=dt, param_dtype=pdt).apply(
          {"params": params["lm_head"]}, x)
    return ModelOutput(logits.astype(jnp.float32), hidden, kvc.KVCache(k_new, v_new,
                                                                       cache.lengths))

  def embed(self, params, tokens):
    """Token embeddings ``[..., H]`` (used by EAGLE heads)."""
    return params["embed_tokens"]["embedding"][tokens].astype(self.config.compute_dtype)

  def lm_head(self, params, x):
    """The LM head applied to features ``x [..., H]`` -> float32 logits."""
    if self.config.tie_word_embeddings:
      w = params["embed_tokens"]["embedding"].T
    else:
      w = params["lm_head"]["kernel"]
    return jnp.dot(x.astype(self.config.compute_dtype), w.astype(self.config.compute_dtype),
                   preferred_element_type=jnp.float32)
