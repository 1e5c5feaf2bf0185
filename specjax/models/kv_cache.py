"""Static-shape KV cache with one write cursor per row.

Buffers ``k, v: [layers, B, S_max, kv_heads, head_dim]`` and ``lengths: [B]``
(committed tokens per row).  A forward pass *writes* its T new tokens at slots
``lengths[b] .. lengths[b] + T - 1`` of each row without committing them;
:func:`commit` then advances each row by the number of tokens it keeps, so
rejected speculative tokens are dropped by simply not committing them (the
next write overwrites them).  For trees, :func:`gather_path` first moves the
accepted path's entries to contiguous slots.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
  """Attributes:
    k: [L, B, S_max, KVH, D] keys.
    v: [L, B, S_max, KVH, D] values.
    lengths: [B] int32 committed tokens per row.
  """

  k: jax.Array
  v: jax.Array
  lengths: jax.Array

  @property
  def max_length(self) -> int:
    return self.k.shape[2]

  @property
  def batch_size(self) -> int:
    return self.k.shape[1]


def init_cache(num_layers: int, batch: int, max_length: int, kv_heads: int, head_dim: int,
               dtype=jnp.float32) -> KVCache:
  """An empty cache (all lengths 0)."""
  shape = (num_layers, batch, max_length, kv_heads, head_dim)
  return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype), jnp.zeros((batch,), jnp.int32))


def write_tokens(buf: jax.Array, layer, new: jax.Array, offsets: jax.Array) -> jax.Array:
  """Scatter ``new [B, T, KVH, D]`` into layer ``layer`` of ``buf [L, B, S, KVH, D]`` (or,
  ``layer = slice(None)``, ``new [L, B, T, KVH, D]`` into every layer) at
  per-row ``offsets [B]`` (slots ``offsets[b] + t``). Only the T new entries are
  written, so inside a loop that carries ``buf`` the update is in place.
  Slots past S are dropped (the caller keeps ``offsets + T <= S`` for rows whose
  result matters)."""
  b, t = new.shape[-4:-2]  # new: [..., B, T, KVH, D]
  rows = jnp.arange(b)[:, None]  # [B, 1]
  slots = offsets[:, None] + jnp.arange(t)[None, :]  # [B, T]
  return buf.at[layer, rows, slots].set(new.astype(buf.dtype), mode="drop")


def write_layers(cache: KVCache, k_new: jax.Array, v_new: jax.Array) -> KVCache:
  """Write ``k_new, v_new [L, B, T, KVH, D]`` (every layer's keys and values of T new
  tokens, ``Model.apply(write_cache=False)``) at each row's cursor, slots
  ``lengths[b] + t``, not committed; slots past S are dropped.  In a loop that
  carries the cache the update is in place."""
  every = slice(None)  # write_tokens over all layers at once
  return dataclasses.replace(cache, k=write_tokens(cache.k, every, k_new, cache.lengths),
                             v=write_tokens(cache.v, every, v_new, cache.lengths))


def commit(cache: KVCache, num_tokens: jax.Array) -> KVCache:
  """Keep the first ``num_tokens[b]`` written-but-uncommitted tokens of each row."""
  return dataclasses.replace(cache, lengths=cache.lengths + num_tokens.astype(jnp.int32))


def gather_path(cache: KVCache, path: jax.Array, num_accepted: jax.Array) -> KVCache:
  """Move an accepted tree path to contiguous slots and commit it.

  After a tree forward wrote nodes 0..N (node 0 = the root token) at slots
  ``lengths[b] + j``, the accepted nodes ``path[b, :num_accepted[b]]`` (tree
  indices, root excluded) are copied to slots ``lengths[b] + 1 + i`` and
  ``1 + num_accepted[b]`` tokens (root + path) are committed.

  Args:
    path: [B, P] int32 tree node indices of the accepted path.
    num_accepted: [B] int32 accepted path length.
  """
  b, p = path.shape
  src = cache.lengths[:, None] + path  # [B, P] slots holding the accepted nodes
  dst = cache.lengths[:, None] + 1 + jnp.arange(p)[None, :]  # [B, P]
  keep = jnp.arange(p)[None, :] < num_accepted[:, None]
  s = cache.max_length
  dst = jnp.where(keep, dst, s)  # out-of-range index: dropped by mode="drop"

  def move(buf):  # [L, B, S, KVH, D]
    vals = jnp.take_along_axis(buf, jnp.clip(src, 0, s - 1)[None, :, :, None, None], axis=2)
    rows = jnp.arange(b)[:, None]
    return buf.at[:, rows, dst].set(vals, mode="drop")

  moved = KVCache(move(cache.k), move(cache.v), cache.lengths)
  return commit(moved, 1 + num_accepted)
