"""Drafters: propose K tokens per row together with the exact distribution q
each was drawn from (DESIGN.md "Drafter").

A drafter is a frozen dataclass (static under jit); its params and state are
pytrees passed in and out.  The protocol, for chains::

    state = drafter.prefill(params, tokens[B,P], lengths[B], cache_length)
    x[B,K], q[B,K,V], state = drafter.draft(params, state, prev[B], last[B], keys[B])
    state = drafter.commit(state, target_lengths[B])   # roll back to the new context

``prev`` is the last token already in the target's cache (position L-1, L the
target's committed length), ``last`` the token emitted by the previous step
(position L, not yet in any cache).  ``q`` is the distribution *after* the
drafter's own processors (one-hot for greedy drafts): losslessness depends on
it being the one the token was really drawn from.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from specjax.decoding.sampling import SamplingConfig, sample_logits
from specjax.models import kv_cache as kvc
from specjax.models.transformer import Model


@dataclasses.dataclass(frozen=True)
class Drafter:
  """Base class: ``num_draft`` (K) tokens per step, drawn under ``sampling``."""

  num_draft: int
  sampling: SamplingConfig

  @property
  def vocab_size(self) -> int:
    raise NotImplementedError

  def prefill(self, params, tokens, lengths, cache_length: int) -> Any:
    raise NotImplementedError

  def draft(self, params, state, prev, last, keys):
    raise NotImplementedError

  def commit(self, state, target_lengths):
    raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class LMDrafter(Drafter):
  """Independent small LM (vanilla speculative decoding, Leviathan et al. 2023).

  Its cache holds the committed context except the target's last cached
  token: at each step it re-reads ``[prev, last]`` (2 tokens, one of them
  recomputed -- identical values), then drafts K tokens autoregressively.
  Commit rolls the cache back to ``target_length - 1``.
  """

  model: Model = None

  def __post_init__(self):
    if self.model is None:
      raise ValueError("LMDrafter needs a model")
    if not (isinstance(self.num_draft, int) and self.num_draft >= 1):
      raise ValueError(f"num_draft (K)={self.num_draft!r} must be an integer >= 1")

  @property
  def vocab_size(self) -> int:
    return self.model.config.vocab_size

  def prefill(self, params, tokens, lengths, cache_length: int) -> kvc.KVCache:
    b, p = tokens.shape
    cache = self.model.init_cache(b, cache_length)
    positions = jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32), (b, p))
    out = self.model.apply(params, tokens, positions, cache, logits_index=jnp.zeros((b, 1), jnp.int32))
    return kvc.commit(out.cache, lengths - 1)

  def draft(self, params, state: kvc.KVCache, prev, last, keys):
    k = self.num_draft
    pos0 = state.lengths  # position of prev
    out = self.model.apply(params, jnp.stack([prev, last], 1),
                           jnp.stack([pos0, pos0 + 1], 1), state,
                           logits_index=jnp.ones((prev.shape[0], 1), jnp.int32))
    cache = kvc.commit(out.cache, jnp.full_like(pos0, 2))
    step_keys = jax.vmap(lambda kk: jax.random.split(kk, k))(keys)  # [B, K]
    sample = jax.vmap(lambda kk, l: sample_logits(kk, l, self.sampling))
    x0, q0 = sample(step_keys[:, 0], out.logits[:, 0])

    def step(carry, i):
      cache, tok = carry
      o = self.model.apply(params, tok[:, None], cache.lengths[:, None], cache)
      cache = kvc.commit(o.cache, jnp.ones_like(tok))
      x, q = sample(step_keys[:, i], o.logits[:, 0])
      return (cache, x), (x, q)

    (cache, _), (xs, qs) = jax.lax.scan(step, (cache, x0), jnp.arange(1, k))
    x = jnp.concatenate([x0[:, None], xs.T], axis=1)  # [B, K]
    q = jnp.concatenate([q0[:, None], jnp.swapaxes(qs, 0, 1)], axis=1)  # [B, K, V]
    return x, q, cache

  def commit(self, state: kvc.KVCache, target_lengths):
    """Keep the context the target committed, minus its last token (re-read next step)."""
    return dataclasses.replace(state, lengths=(target_lengths - 1).astype(jnp.int32))
