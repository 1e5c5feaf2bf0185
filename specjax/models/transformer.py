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
import functools
import math
import os
from typing import NamedTuple, Optional, Union

import flax.linen as nn
import jax
import jax.numpy as jnp

from specjax.models import kv_cache as kvc
from specjax.models import sharding
from specjax.models.config import ModelConfig, llama3_inv_freq, resolve_dtype

# Every param declares its logical axes where it is declared (the initializers
# below carry them, ``nn.with_logical_partitioning``); ``Model.logical_axes``
# reads them back and specjax.models.sharding maps them to mesh axes with one
# rules table.  "heads" / "kv_heads" name the flattened ``heads * head_dim``
# projection dims (head-major: a split between whole heads); the layer stack
# adds a leading "layers" dim.
LAYER_STACKS = ("auto", "rolled", "unrolled")  # Model.layer_stack


def _declared(init, *axes: str):
  """``init`` tagged with the logical axes of the param it makes (one per dim)."""
  return nn.with_logical_partitioning(init, axes)


def matmul(x: jax.Array, w: jax.Array, dtype, w_contract: int = 0) -> jax.Array:
  """``x [..., in] @ w`` (``w [in, *out]``; ``w_contract=1``: ``w [out, in]``) in ``dtype``.

  Same precision as the stored weights: weights in ``dtype`` multiply as
  ``nn.Dense`` does (operands promoted to ``dtype``).  *Narrower* weights
  (bfloat16 weights of a float32 model, :func:`cast_weights`) are read as
  they are stored -- the activations are rounded to the weights' dtype and the
  products accumulate in float32 (``preferred_element_type``), the mixed
  precision of accelerator matmuls -- so a forward reads half the bytes
  instead of materialising a float32 copy of every weight.  On XLA:CPU that
  mixed dot runs a slow path for a single row (M = 1: several times the time
  of two rows, ``benchmarks/verify_matmul.py``), so a single row is padded to two.
  """
  dims = (((x.ndim - 1,), (w_contract,)), ((), ()))
  if jnp.dtype(w.dtype).itemsize >= jnp.dtype(dtype).itemsize:
    return jax.lax.dot_general(x.astype(dtype), w.astype(dtype), dims)
  xw = x.astype(w.dtype)
  rows = math.prod(x.shape[:-1])
  if rows == 1 and jax.default_backend() == "cpu":
    flat = jnp.concatenate([xw.reshape(1, -1)] * 2, axis=0)
    y = jax.lax.dot_general(flat, w, (((1,), (w_contract,)), ((), ())),
                            preferred_element_type=jnp.float32)[:1]
    return y.reshape(x.shape[:-1] + y.shape[1:]).astype(dtype)
  return jax.lax.dot_general(xw, w, dims, preferred_element_type=jnp.float32).astype(dtype)


class Linear(nn.Module):
  """``nn.Dense`` (same params: ``kernel [in, out]``, optional ``bias [out]``, XLA's
  default initializers) whose product is :func:`matmul`: the same values as
  ``nn.Dense`` when the weights are in the compute dtype, mixed precision when
  they are narrower.  ``features`` may be a tuple: ``kernel [in, *features]``
  (the decode form's stacked gate | up, :func:`fuse_projections`)."""

  features: Union[int, tuple]
  use_bias: bool
  dtype: jnp.dtype
  param_dtype: jnp.dtype
  kernel_axes: tuple

  @nn.compact
  def __call__(self, x):
    kernel = self.param("kernel", _declared(nn.linear.default_kernel_init, *self.kernel_axes),
                        (x.shape[-1], *self._out), self.param_dtype)
    y = matmul(x, kernel, self.dtype)
    if self.use_bias:
      bias = self.param("bias", _declared(nn.initializers.zeros_init(), *self.kernel_axes[1:]),
                        self._out, self.param_dtype)
      y = y + bias.astype(self.dtype)
    return y

  @property
  def _out(self) -> tuple:
    return (self.features,) if isinstance(self.features, int) else tuple(self.features)


def _dense(features: int, axes: tuple, bias: bool, c: ModelConfig, name: str) -> Linear:
  """A projection whose kernel has logical axes ``axes`` (in, out); its bias has
  the output axis."""
  return Linear(features, bias, c.compute_dtype, c.params_dtype, axes, name=name)


CACHE_AXES = ("layers", "batch", "length", "kv_heads", "head_dim")  # KVCache.k / .v


class ModelOutput(NamedTuple):
  logits: jax.Array
  hidden_states: Optional[jax.Array]
  cache: kvc.KVCache
  new_kv: Optional[tuple] = None  # write_cache=False: the new (k, v) [L, B, T, KVH, D]


class RMSNorm(nn.Module):
  """RMSNorm (Zhang & Sennrich 2019) computed in float32, as in HF Llama."""

  eps: float
  dtype: jnp.dtype
  param_dtype: jnp.dtype
  axis: str = "embed"  # the logical axis of the normalised dim

  @nn.compact
  def __call__(self, x):
    w = self.param("weight", _declared(nn.initializers.ones, self.axis), (x.shape[-1],),
                   self.param_dtype)
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


ATTENTION_CHUNKS = ("auto", "0", "64", "128", "256", "512")  # $SPECJAX_ATTENTION_CHUNK
DEFAULT_CPU_CHUNK = 256  # cache slots per chunk on CPU ("auto")
MAX_CHUNKED_QUERIES = 64  # forwards of at most this many new tokens (decode, verify) chunk


def resolve_attention_chunk() -> int:
  """Cache slots per chunk of :func:`chunked_attention`, or 0: attend to the whole cache
  (:func:`full_attention`). Read when a forward is traced.

  ``$SPECJAX_ATTENTION_CHUNK`` (one of :data:`ATTENTION_CHUNKS`) decides; "auto" (or
  unset) is :data:`DEFAULT_CPU_CHUNK` on CPU and 0 on accelerators. With one einsum a
  CPU decode step reads every slot of the static cache (and slicing a layer out of
  the cache copies all of them), so the step's cost grows with the cache's size
  rather than with what the rows have filled; chunks past the longest row are
  skipped (``benchmarks/attention_chunk.py`` measures both). Accelerators keep the
  one fused einsum.
  """
  value = os.environ.get("SPECJAX_ATTENTION_CHUNK", "auto") or "auto"
  if value not in ATTENTION_CHUNKS:
    raise ValueError(f"SPECJAX_ATTENTION_CHUNK={value!r} must be one of {ATTENTION_CHUNKS}")
  if value == "auto":
    return DEFAULT_CPU_CHUNK if jax.default_backend() == "cpu" else 0
  return int(value)


def full_attention(qg, k_buf, v_buf, mask, dt):
  """Grouped-query attention of ``qg [B, T, KVH, G, D]`` over every cache slot of
  ``k_buf, v_buf [B, S, KVH, D]`` where ``mask [B, T, S]`` allows; ``[B, T, KVH, G, D]``."""
  scores = jnp.einsum("btkgd,bskd->bkgts", qg, k_buf.astype(dt),
                      preferred_element_type=jnp.float32) * (qg.shape[-1] ** -0.5)
  scores = jnp.where(mask[:, None, None, :, :], scores, -1e30)
  w = jax.nn.softmax(scores, axis=-1).astype(dt)
  return jnp.einsum("bkgts,bskd->btkgd", w, v_buf.astype(dt))


def overlay_new(buf: jax.Array, start, new: jax.Array, lengths: jax.Array) -> jax.Array:
  """Cache slots ``start .. start + c`` of ``buf [B, c, KVH, D]`` as they would read
  had ``new [B, T, KVH, D]`` been written at each row's cursor (slots ``lengths[b]
  + t``, :func:`kv_cache.write_tokens`): the same values in the same places, so
  attention over the overlaid slots equals attention after the write bit for bit,
  while the cache itself stays unwritten (``Model.apply(write_cache=False)``)."""
  c, t = buf.shape[1], new.shape[1]
  rel = start + jnp.arange(c)[None, :] - lengths[:, None]  # [B, c]
  is_new = (rel >= 0) & (rel < t)
  idx = jnp.clip(rel, 0, t - 1)[:, :, None, None]
  taken = jnp.take_along_axis(new.astype(buf.dtype), idx, axis=1)  # [B, c, KVH, D]
  return jnp.where(is_new[:, :, None, None], taken, buf)


def chunked_attention(qg, k_all, v_all, layer, mask, extent, chunk: int, dt, new_kv=None):
  """:func:`full_attention` of layer ``layer`` of the whole cache ``k_all, v_all [L, B, S,
  KVH, D]`` (each chunk is sliced from it directly: slicing the layer out first copies
  all S slots of it on CPU) over the first ``extent`` slots only (a traced scalar, e.g.
  the longest row's length plus the new tokens; ``mask`` must allow nothing past it), in
  chunks of ``chunk`` slots with the online softmax (Milakov and Gimelshein 2018, Alg.
  3): running max ``m``, normaliser ``l`` and weighted sum ``acc`` per query,
  rescaled by ``exp(m_old - m_new)`` at each chunk. The chunk loop is a ``lax.scan``
  over every chunk of the cache whose body is a ``lax.cond`` that skips the chunks
  at or past ``extent``, so the forward stays differentiable and vmappable. The
  last chunk is clamped to end at S and ignores the slots an earlier chunk covered.
  Equal to :func:`full_attention` up to float rounding.  ``new_kv = (k, v [B, T, KVH,
  D], lengths [B])``: the new tokens' keys and values, not yet written, overlaid on
  each chunk (:func:`overlay_new`)."""
  b, t, kvh, g, d = qg.shape
  s = k_all.shape[2]
  n = -(-s // chunk)
  scale = d ** -0.5
  zero = jnp.zeros((), jnp.int32)

  def add_chunk(carry, c):
    m, l, acc = carry
    start = jnp.minimum(c * chunk, s - chunk)
    at, size = (jnp.asarray(layer, jnp.int32), zero, start, zero, zero), (1, b, chunk, kvh, d)
    ks = jax.lax.dynamic_slice(k_all, at, size)[0]  # [B, c, KVH, D]
    vs = jax.lax.dynamic_slice(v_all, at, size)[0]
    if new_kv is not None:
      ks, vs = (overlay_new(buf, start, new, new_kv[2]) for buf, new in zip((ks, vs), new_kv[:2]))
    ks, vs = ks.astype(dt), vs.astype(dt)
    ok = jax.lax.dynamic_slice_in_dim(mask, start, chunk, axis=2)  # [B, T, c]
    ok = ok & (start + jnp.arange(chunk) >= c * chunk)[None, None, :]
    ok = ok[:, None, None, :, :]  # [B, 1, 1, T, c]
    sc = jnp.einsum("btkgd,bskd->bkgts", qg, ks, preferred_element_type=jnp.float32) * scale
    m_new = jnp.maximum(m, jnp.max(jnp.where(ok, sc, -1e30), axis=-1))
    # Mask the exponent, not the exponential: where a query has seen no visible slot yet,
    # m_new is -1e30 and exp(sc - m_new) overflows to inf, and masking it afterwards
    # still sends 0 * inf = nan back through exp's gradient (padding rows in training).
    p = jnp.exp(jnp.where(ok, sc - m_new[..., None], -jnp.inf))
    corr = jnp.exp(m - m_new)
    l = l * corr + jnp.sum(p, axis=-1)
    acc = acc * corr[..., None] + jnp.einsum("bkgts,bskd->bkgtd", p.astype(dt), vs,
                                             preferred_element_type=jnp.float32)
    return m_new, l, acc

  def body(carry, c):
    return jax.lax.cond(c * chunk < extent, add_chunk, lambda cr, _: cr, carry, c), None

  # m starts at -1e30, not -inf: exp(m - m_new) is then 1 (not nan) while every slot so
  # far was masked, and 0 once a visible slot raised m_new.
  init = (jnp.full((b, kvh, g, t), -1e30, jnp.float32), jnp.zeros((b, kvh, g, t), jnp.float32),
          jnp.zeros((b, kvh, g, t, d), jnp.float32))
  (_, l, acc), _ = jax.lax.scan(body, init, jnp.arange(n))
  out = acc / jnp.maximum(l, 1e-30)[..., None]  # l = 0 only where a query sees nothing: 0
  return jnp.moveaxis(out, 3, 1).astype(dt)  # [B, T, KVH, G, D]


class Attention(nn.Module):
  config: ModelConfig
  write_cache: bool = True

  @nn.compact
  def __call__(self, x, cos, sin, k_all, v_all, layer, lengths, mask):
    """k_all, v_all: the whole cache ``[L, B, S, KVH, D]`` (scan carry): the T new
    keys/values are scattered into layer ``layer`` in place, and attention reads
    that layer's slice.  Returns ``(out [B, T, H], k_all, v_all, new)``: ``new`` is
    None, or -- with ``write_cache=False`` -- the new ``(k, v) [B, T, KVH, D]``,
    which attention overlays on the cache it reads (:func:`overlay_new`) while the
    cache is returned unwritten."""
    c = self.config
    dt, pdt = c.compute_dtype, c.params_dtype
    b, t, _ = x.shape
    q_dim, kv_dim = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
    q = _dense(q_dim, ("embed", "heads"), c.qkv_bias, c, "q_proj")(x)  # column-parallel
    k = _dense(kv_dim, ("embed", "kv_heads"), c.qkv_bias, c, "k_proj")(x)
    v = _dense(kv_dim, ("embed", "kv_heads"), c.qkv_bias, c, "v_proj")(x)
    q = q.reshape(b, t, c.num_attention_heads, c.head_dim)
    k = k.reshape(b, t, c.num_key_value_heads, c.head_dim)
    v = v.reshape(b, t, c.num_key_value_heads, c.head_dim)
    if c.qk_norm:
      q = RMSNorm(c.rms_norm_eps, dt, pdt, "head_dim", name="q_norm")(q)
      k = RMSNorm(c.rms_norm_eps, dt, pdt, "head_dim", name="k_norm")(k)
    q = apply_rope(q, cos, sin)
    k = apply_rope(k, cos, sin)
    new_kv = None
    if self.write_cache:
      k_all = kvc.write_tokens(k_all, layer, k, lengths)  # [L, B, S, KVH, D]
      v_all = kvc.write_tokens(v_all, layer, v, lengths)
    else:
      new_kv = (k, v, lengths)
    groups = c.num_attention_heads // c.num_key_value_heads
    qg = q.reshape(b, t, c.num_key_value_heads, groups, c.head_dim)
    chunk = resolve_attention_chunk()
    if chunk and t <= MAX_CHUNKED_QUERIES:
      out = chunked_attention(qg, k_all, v_all, layer, mask, jnp.max(lengths) + t,
                              min(chunk, k_all.shape[2]), dt, new_kv)
    else:
      k_buf, v_buf = k_all[layer], v_all[layer]  # [B, S, KVH, D] each
      if new_kv is not None:
        k_buf, v_buf = (overlay_new(buf, 0, new, lengths) for buf, new in ((k_buf, k), (v_buf, v)))
      out = full_attention(qg, k_buf, v_buf, mask, dt)
    out = out.reshape(b, t, c.num_attention_heads * c.head_dim)
    o_proj = _dense(c.hidden_size, ("heads", "embed"), c.o_bias, c, "o_proj")  # row-parallel
    return o_proj(out), k_all, v_all, (None if new_kv is None else new_kv[:2])


class MLP(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    c, f = self.config, self.config.intermediate_size
    down = _dense(c.hidden_size, ("mlp", "embed"), False, c, "down_proj")  # row-parallel
    if self.has_variable("params", "gate_up_proj"):  # decode form (Model.decode_params)
      gate_up = _dense((2, f), ("embed", None, "mlp"), False, c, "gate_up_proj")(x)
      return down(nn.silu(gate_up[..., 0, :]) * gate_up[..., 1, :])
    gate = _dense(f, ("embed", "mlp"), False, c, "gate_proj")  # column-parallel
    up = _dense(f, ("embed", "mlp"), False, c, "up_proj")
    return down(nn.silu(gate(x)) * up(x))


class DecoderLayer(nn.Module):
  """Pre-norm block: x + attn(norm(x)); x + mlp(norm(x)). Scanned over layers."""

  config: ModelConfig
  write_cache: bool = True

  @nn.compact
  def __call__(self, carry, layer, cos, sin, lengths, mask):
    """``carry = (x, k_all, v_all)`` -> ``(carry, (layer input, new))``: ``new`` is
    the layer's new ``(k, v)`` when it does not write the cache, else None."""
    c = self.config
    x, k_all, v_all = carry
    norm = lambda name: RMSNorm(c.rms_norm_eps, c.compute_dtype, c.params_dtype, name=name)
    h, k_all, v_all, new = Attention(c, self.write_cache, name="self_attn")(
        norm("input_layernorm")(x), cos, sin, k_all, v_all, layer, lengths, mask)
    layer_input = x
    x = x + h
    x = x + MLP(c, name="mlp")(norm("post_attention_layernorm")(x))
    return (x, k_all, v_all), (layer_input, new)


def run_layers(c: ModelConfig, layer_params, carry, cos, sin, lengths, mask,
               write_cache: bool = True):
  """The decoder layers over ``carry = (x [B,T,H], k [L,B,S,KVH,D], v)``.

  ``layer_params`` as stored -- one tree whose leaves stack the layers on a
  leading dim -- runs *rolled* (``lax.scan``, one compiled layer body), or as a
  tuple of per-layer trees (:meth:`Model.decode_params`) runs *unrolled* (a
  Python loop, L copies of the body).  Same modules, same values.  Returns
  the final carry, the layers' inputs (stacked ``[L, B, T, H]`` or a list) and
  -- with ``write_cache=False``, where the cache is read, never written -- the
  new keys and values ``(k, v) [L, B, T, KVH, D]`` (else None).
  """
  layer = DecoderLayer(c, write_cache, parent=None)
  _, k_all, v_all = carry

  def step(carry, lp, i):
    if not write_cache:  # only x is carried: the cache is a constant of the layers
      carry = (carry, k_all, v_all)
    out, (layer_input, new) = layer.apply({"params": lp}, carry, i, cos, sin, lengths, mask)
    return (out if write_cache else out[0]), (layer_input, new)

  start = carry if write_cache else carry[0]
  if isinstance(layer_params, tuple):
    ys = []
    for i, lp in enumerate(layer_params):
      start, y = step(start, lp, i)
      ys.append(y)
    inputs = [y[0] for y in ys]
    new_kv = None if write_cache else tuple(jnp.stack([y[1][j] for y in ys]) for j in (0, 1))
  else:
    start, (inputs, new_kv) = jax.lax.scan(lambda cr, xs: step(cr, *xs), start,
                                           (layer_params, jnp.arange(c.num_hidden_layers)))
  return (start if write_cache else (start, k_all, v_all)), inputs, new_kv


class Transformer(nn.Module):
  """The model: its params' declaration (init) and its one forward pass.

  ``init`` declares the layer stack with ``nn.scan`` (params stacked on a
  leading "layers" dim); ``apply`` runs the layers with :func:`run_layers`,
  rolled or unrolled by the layout of ``params["layers"]``.
  """

  config: ModelConfig

  @nn.compact
  def __call__(self, tokens, positions, cache: kvc.KVCache, attn_mask=None, logits_index=None,
               write_cache: bool = True):
    c = self.config
    dt, pdt = c.compute_dtype, c.params_dtype
    embed = nn.Embed(c.vocab_size, c.hidden_size, dtype=dt, param_dtype=pdt, name="embed_tokens",
                     embedding_init=_declared(nn.initializers.normal(0.02), "vocab", "embed"))
    x = embed(tokens)
    cos, sin = rope_tables(positions, c.head_dim, c.rope_theta, c.rope_scaling_dict)
    mask = visibility_mask(cache.lengths, tokens.shape[1], cache.max_length, attn_mask)
    # the cache is a scan *carry* updated in place (only the T new tokens are
    # written per layer), not a scanned input/output, which would allocate and
    # copy the whole [L, B, S, KVH, D] cache on every forward
    carry = (x, cache.k, cache.v)
    if self.is_initializing():
      stack = nn.scan(DecoderLayer, variable_axes={"params": 0}, split_rngs={"params": True},
                      in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
                      length=c.num_hidden_layers, metadata_params={nn.PARTITION_NAME: "layers"})
      new_kv = None
      carry, (layer_inputs, _) = stack(c, name="layers")(
          carry, jnp.arange(c.num_hidden_layers), cos, sin, cache.lengths, mask)
    else:
      carry, layer_inputs, new_kv = run_layers(c, self.variables["params"]["layers"], carry,
                                               cos, sin, cache.lengths, mask, write_cache)
    x, k_new, v_new = carry
    x = RMSNorm(c.rms_norm_eps, dt, pdt, name="norm")(x)
    hidden = None
    if c.hidden_layers:
      hidden = jnp.stack([x if i == c.num_hidden_layers else layer_inputs[i]
                          for i in c.hidden_layers], axis=0)
    if logits_index is not None:
      x = jnp.take_along_axis(x, logits_index[:, :, None], axis=1)
    if c.tie_word_embeddings:  # x @ embedding.T, in the embedding's own precision
      logits = matmul(x, embed.embedding, dt, w_contract=1)
    else:
      logits = _dense(c.vocab_size, ("embed", "vocab"), False, c, "lm_head")(x)  # vocab-parallel
    return ModelOutput(logits.astype(jnp.float32), hidden,
                       kvc.KVCache(k_new, v_new, cache.lengths), new_kv)


# (block, fused name, parts) of the decode form.  q / k / v stay apart: one
# [H, q + 2 kv] matmul rounds differently from three on XLA:CPU (1e-6 relative on
# the test models), and the decode step is no faster for it; gate | up gives the
# same bits, one matmul (one kernel launch on accelerators) instead of two, and on
# XLA:CPU the same step time as the separate pair (docs/speed.md).
_FUSED = (("mlp", "gate_up_proj", ("gate_proj", "up_proj")),)


def fuse_projections(layer: dict) -> dict:
  """One decoder layer's params with ``gate/up_proj`` stacked into ``gate_up_proj``
  (kernel ``[H, 2, I]``, bias ``[2, I]``; a layer already fused is returned as it
  is).  Row ``h`` of the stacked kernel holds ``gate[h]`` then ``up[h]``, the
  memory of a ``[H, 2I]`` concatenation, so one matmul reads both kernels and
  :class:`MLP` gets the values of the separate projections.  Stacked on a new
  axis rather than concatenated, each device of a model-parallel mesh stacks
  its own columns of ``I``: fusing moves no data between devices (a
  concatenation along the split dim is a cross-device permutation)."""
  out = dict(layer)
  for block, fused, parts in _FUSED:
    mods = dict(out[block])
    if fused in mods:
      continue
    pieces = [mods.pop(name) for name in parts]
    mods[fused] = {leaf: jnp.stack([p[leaf] for p in pieces], axis=-2)
                   for leaf in pieces[0]}
    out[block] = mods
  return out


def _is_fused(layer: dict) -> bool:
  return all(fused in layer[block] for block, fused, _ in _FUSED)


def split_projections(layer: dict, c: ModelConfig) -> dict:
  """The inverse of :func:`fuse_projections` (a layer not fused is returned as it is)."""
  del c  # the stacked axis says where each part is
  out = dict(layer)
  for block, fused, parts in _FUSED:
    mods = dict(out[block])
    if fused not in mods:
      continue
    whole = mods.pop(fused)
    for i, name in enumerate(parts):
      mods[name] = {leaf: w[..., i, :] for leaf, w in whole.items()}
    out[block] = mods
  return out


def cast_weights(model: "Model", params, param_dtype: str) -> tuple["Model", dict]:
  """``(model, params)`` with every param stored in ``param_dtype`` and the
  activations kept in the model's compute dtype: e.g. bfloat16 weights of a
  float32 model, whose matmuls read bfloat16 and accumulate in float32
  (:func:`matmul`).  A different target from the float32 one (its weights are
  rounded), so compare it with target-only decoding of the same cast model."""
  dt = resolve_dtype(param_dtype)
  cfg = model.config.replace(param_dtype=jnp.dtype(dt).name)
  return dataclasses.replace(model, config=cfg), jax.tree.map(lambda w: w.astype(dt), params)


def resolve_layer_stack(layer_stack: str = "auto") -> str:
  """"rolled" or "unrolled" for a :attr:`Model.layer_stack` value (see there).

  "auto" reads ``SPECJAX_LAYER_STACK`` (the binaries' ``--layer_stack`` flag and
  the test suite set it), then the backend: unrolled on CPU, where a decode
  step over per-layer weights is faster (SmolLM2-135M: 1.4x for ``generate``,
  1.2x for the speculative loop) at 1.5-3x the compile time, rolled on
  accelerators, whose matmuls read the stacked weights in place.
  """
  if layer_stack == "auto":
    layer_stack = os.environ.get("SPECJAX_LAYER_STACK", "auto") or "auto"
    if layer_stack not in LAYER_STACKS:
      raise ValueError(f"SPECJAX_LAYER_STACK={layer_stack!r} must be one of {LAYER_STACKS}")
  if layer_stack == "auto":
    return "unrolled" if jax.default_backend() == "cpu" else "rolled"
  return layer_stack


@functools.lru_cache(maxsize=64)
def _declared_axes(config: ModelConfig) -> dict:
  model = Model(config)
  shapes = jax.eval_shape(lambda: model.module.init(jax.random.key(0), *model._init_inputs()))
  specs = nn.get_partition_spec(shapes["params"])
  flat = jax.tree_util.tree_flatten_with_path(
      specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))[0]
  axes = {"/".join(str(k.key) for k in path): tuple(spec) for path, spec in flat}
  for block, fused, parts in _FUSED:  # the decode form's stacked projections: split as
    for leaf in ("kernel", "bias"):   # their parts, the stacking axis whole
      if f"layers/{block}/{parts[0]}/{leaf}" in axes:
        first = axes[f"layers/{block}/{parts[0]}/{leaf}"]
        axes[f"layers/{block}/{fused}/{leaf}"] = first[:-1] + (None, first[-1])
  return axes


@dataclasses.dataclass(frozen=True)
class Model:
  """A config bound to the pure functions that use it (hashable: static under jit).

  ``layer_stack`` is how the decode loops run the layer stack
  (:meth:`decode_params`): "rolled" (``lax.scan``: one compiled layer body),
  "unrolled" (per-layer weights, L copies of the body) or "auto"
  (:func:`resolve_layer_stack`: ``SPECJAX_LAYER_STACK`` if set, else unrolled
  on CPU and rolled elsewhere; the measurements behind that choice are in
  benchmarks/RESULTS.md, "Rolled or unrolled layers").  It changes no value.
  """

  config: ModelConfig
  layer_stack: str = "auto"

  def __post_init__(self):
    if self.layer_stack not in LAYER_STACKS:
      raise ValueError(f"layer_stack={self.layer_stack!r} must be one of {LAYER_STACKS}")

  @property
  def module(self) -> Transformer:
    return Transformer(self.config)

  def _init_inputs(self):
    tok = jnp.zeros((1, 4), jnp.int32)
    return tok, tok, kvc.init_cache(self.config.num_hidden_layers, 1, 4,
                                    self.config.num_key_value_heads, self.config.head_dim,
                                    self.config.compute_dtype)

  def init_params(self, key: jax.Array):
    """Random params (normal(0.02) embedding, XLA's default kernels) as a plain pytree."""
    return nn.meta.unbox(self.module.init(key, *self._init_inputs())["params"])

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

  def declared_axes(self) -> dict:
    """``{"embed_tokens/embedding": ("vocab", "embed"), "layers/mlp/...": ("layers",
    "embed", "mlp"), ...}``: every param's logical axes as its module declares
    them (an abstract init: no values are made)."""
    return _declared_axes(self.config)

  def logical_axes(self, params):
    """A pytree like ``params`` (stored, or :meth:`decode_params` form) whose
    leaves are ``PartitionSpec``s of logical axis names, as the modules declare
    them.  ``ValueError`` naming a leaf without a declaration or of another rank."""
    declared = self.declared_axes()

    def names(path, leaf):
      keys = [str(getattr(k, "key", getattr(k, "idx", k))) for k in path]
      per_layer = len(keys) > 1 and keys[0] == "layers" and keys[1].isdigit()
      axes = declared.get("/".join(keys[:1] + keys[2:] if per_layer else keys))
      where = jax.tree_util.keystr(path)
      if axes is None:
        raise ValueError(f"param {where} has no declared logical axes (the modules of "
                         f"specjax.models.transformer declare every param of this config)")
      axes = axes[1:] if per_layer else axes  # one layer of the stack
      shape = tuple(getattr(leaf, "shape", ()))
      if len(axes) != len(shape):
        raise ValueError(f"param {where} has shape {shape} but its logical axes "
                         f"{axes} name {len(axes)} dims")
      return jax.sharding.PartitionSpec(*axes)

    return jax.tree_util.tree_map_with_path(names, params)

  def apply(self, params, tokens, positions, cache, attn_mask=None, logits_index=None,
            write_cache: bool = True) -> ModelOutput:
    """Pure forward pass; see the module docstring for shapes.  ``params`` as
    stored (the layers run rolled) or from :meth:`decode_params` (per-layer
    trees: unrolled); same values either way.

    ``write_cache=False``: the cache is only read -- the new tokens' keys and
    values are returned in ``out.new_kv`` (``[L, B, T, KVH, D]`` each) and
    ``out.cache`` is the cache as given -- with the same logits and hidden
    states bit for bit.  A caller that picks among forwards of several lengths
    (``lax.switch``) writes the keys and values after the choice
    (:func:`kv_cache.write_layers`), so the cache is updated in place instead of
    copied in and out of the switch."""
    return self.module.apply({"params": params}, tokens, positions, cache, attn_mask,
                             logits_index, write_cache)

  def unrolls_layers(self) -> bool:
    """Whether :meth:`decode_params` splits the layer stack: ``layer_stack``, where
    "auto" is the environment's ``SPECJAX_LAYER_STACK`` (rolled / unrolled) when
    set, else unrolled on CPU and rolled elsewhere."""
    return resolve_layer_stack(self.layer_stack) == "unrolled"

  def decode_params(self, params):
    """``params`` for the forwards of a decode loop, made once before the loop.

    Unrolled (:meth:`unrolls_layers`): the layer stack split into a tuple of
    per-layer trees (one copy of the layer weights per call), which
    :meth:`apply` runs as L copies of the layer, each with its gate / up
    kernels stacked into one ``gate_up_proj`` (:func:`fuse_projections`:
    one matmul fewer per layer, the same values).  XLA:CPU copies every weight matrix out of the stacked
    array before its matmul on *each* scanned forward -- for SmolLM2-135M,
    425 MB copied per decode step, over half of the step's time -- while
    per-layer arrays are read in place.  The price is compile time and the
    memory of one copy of the layer weights.  Rolled: ``params`` as stored
    (per-layer trees are stacked back, their projections split again).
    """
    unrolled = isinstance(params["layers"], tuple)
    if self.unrolls_layers():
      layers = params["layers"]
      if unrolled and all(_is_fused(lp) for lp in layers):
        return params
      if not unrolled:
        n = self.config.num_hidden_layers
        layers = tuple(jax.tree.map(lambda w, i=i: w[i], layers) for i in range(n))
      return {**params, "layers": tuple(fuse_projections(lp) for lp in layers)}
    if not unrolled:
      return params
    layers = [split_projections(lp, self.config) for lp in params["layers"]]
    return {**params, "layers": jax.tree.map(lambda *w: jnp.stack(w), *layers)}

  def embed(self, params, tokens):
    """Token embeddings ``[..., H]`` (used by EAGLE heads)."""
    return params["embed_tokens"]["embedding"][tokens].astype(self.config.compute_dtype)

  def lm_head_kernel(self, params) -> jax.Array:
    """The LM head's kernel ``[H, V]``: ``lm_head``'s own, or the embedding ``[V, H]``
    transposed when the two are tied."""
    if self.config.tie_word_embeddings:
      return params["embed_tokens"]["embedding"].T
    return params["lm_head"]["kernel"]

  def lm_head(self, params, x):
    """The LM head applied to features ``x [..., H]`` -> float32 logits."""
    w = self.lm_head_kernel(params)
    if jnp.dtype(w.dtype).itemsize < jnp.dtype(self.config.compute_dtype).itemsize:
      return matmul(x, w, self.config.compute_dtype).astype(jnp.float32)
    return jnp.dot(x.astype(self.config.compute_dtype), w.astype(self.config.compute_dtype),
                   preferred_element_type=jnp.float32)
