"""Per-row token history and suffix matching: the state of the model-free drafters
(:mod:`specjax.decoding.lookup_drafter`, :mod:`specjax.decoding.suffix_drafter`).

A row's history is the text the target has committed -- the prompt, then every
token the row emitted that the target has cached -- so ``length`` always equals
the target's cache length L.  At a draft, the token ``last`` (position L,
emitted by the previous step and in no cache yet) is appended virtually
(:func:`with_last`), giving the current text ``h[0..n-1]``, ``n = L + 1``; at
commit the tokens the target kept (``last`` and the accepted drafts) are
written after position L - 1 (:func:`commit`), so a row's history only ever
holds tokens it really emitted, and rows never see each other.

Matching (:func:`match_lengths`) is a fixed-shape scan instead of a pointer
suffix tree: for every earlier end position j < n - 1, the length ``m_j`` of
the longest common suffix of ``h[..j]`` and ``h[..n-1]``, capped at
``max_len``.  It costs ``max_len * C`` comparisons per row and step (C the
history capacity), all vectorised, with no host round trip; a pointer-based
suffix tree would answer the same query in O(max_len) but needs dynamic
allocation that a jitted loop with static shapes cannot carry.

Continuations (:func:`continuation`) copy what followed an occurrence, with
overlap allowed as in LZ77: when the text after occurrence j runs out at n - 1,
the copy continues with the tokens it has just proposed, i.e. position
``j + 1 + (t mod P)`` with period ``P = n - 1 - j``.  So the most recent
occurrence of a repeated span (period P) proposes the span again, as far as
the draft reaches.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TokenHistory:
  """The committed text of every row.

  Attributes:
    tokens: [B, C] int32 token at each position (0 beyond ``length``); C is the
      loop's ``cache_length``, so the history never outgrows the target cache.
    length: [B] int32 committed tokens (the target's cache length L).
  """

  tokens: jax.Array
  length: jax.Array


def prefill(tokens: jax.Array, lengths: jax.Array, capacity: int) -> TokenHistory:
  """``tokens [B, P]`` right-padded prompts, ``lengths [B]`` -> a history of capacity C.

  The target's prefill caches the whole prompt, so the history is the prompt."""
  b, p = tokens.shape
  if p > capacity:
    tokens = tokens[:, :capacity]
  buf = jnp.zeros((b, capacity), jnp.int32).at[:, :min(p, capacity)].set(tokens.astype(jnp.int32))
  keep = jnp.arange(capacity)[None, :] < lengths[:, None]
  return TokenHistory(jnp.where(keep, buf, 0), lengths.astype(jnp.int32))


def commit(hist: TokenHistory, committed: jax.Array, num_committed: jax.Array) -> TokenHistory:
  """Append ``committed[b, :num_committed[b]]`` (``[B, D+1]``: ``last`` then the
  accepted drafts) after each row's history; rows with 0 are unchanged.

  A masked gather, not ``dynamic_update_slice``: a finished row at the end of its
  buffer can never write out of bounds."""
  c = hist.tokens.shape[1]
  i = jnp.arange(c)[None, :]
  rel = i - hist.length[:, None]
  new = (rel >= 0) & (rel < num_committed[:, None])
  src = jnp.take_along_axis(committed.astype(jnp.int32),
                            jnp.clip(rel, 0, committed.shape[1] - 1), axis=1)
  return TokenHistory(jnp.where(new, src, hist.tokens),
                      hist.length + jnp.maximum(num_committed, 0).astype(jnp.int32))


def with_last(hist: TokenHistory, last: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The current text: ``(h [B, C], n [B])`` with ``last [B]`` at position L, n = L + 1.

  A row whose buffer is full (a finished row; running rows always have room, as
  the loop stops a row before its cache overflows) keeps its history."""
  c = hist.tokens.shape[1]
  at = jnp.arange(c)[None, :] == hist.length[:, None]
  h = jnp.where(at, last[:, None].astype(jnp.int32), hist.tokens)
  return h, jnp.minimum(hist.length + 1, c)


def match_lengths(h: jax.Array, n: jax.Array, max_len: int) -> jax.Array:
  """``m [B, C]``: for every earlier end position ``j < n - 1``, the length (at most
  ``max_len``) of the longest common suffix of ``h[..j]`` and ``h[..n-1]``; 0 at
  ``j >= n - 1``.  ``max_len * C`` comparisons per row."""
  b, c = h.shape
  j = jnp.arange(c)[None, :]
  run = jnp.ones((b, c), bool)
  m = jnp.zeros((b, c), jnp.int32)
  for t in range(max_len):
    shifted = jnp.pad(h, ((0, 0), (t, 0)), constant_values=-1)[:, :c]  # h[j - t], -1 before 0
    want = jnp.take_along_axis(h, jnp.clip(n - 1 - t, 0, c - 1)[:, None], axis=1)  # h[n-1-t]
    want = jnp.where((n - 1 - t >= 0)[:, None], want, -2)
    run = run & (shifted == want)
    m = m + run.astype(jnp.int32)
  return jnp.where(j < (n - 1)[:, None], m, 0)


def continuation(h: jax.Array, n: jax.Array, ends: jax.Array, width: int) -> jax.Array:
  """``[B, R, width]`` tokens that follow the occurrences ending at ``ends [B, R]``
  (each ``< n - 1``), copied with overlap: ``h[j + 1 + (t mod (n - 1 - j))]``."""
  period = jnp.maximum(n[:, None] - 1 - ends, 1)  # [B, R]
  t = jnp.arange(width)[None, None, :]
  pos = ends[:, :, None] + 1 + t % period[:, :, None]
  c = h.shape[1]
  flat = jnp.clip(pos, 0, c - 1).reshape(h.shape[0], -1)
  return jnp.take_along_axis(h, flat, axis=1).reshape(pos.shape)
