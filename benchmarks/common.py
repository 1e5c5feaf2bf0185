"""Timing helpers shared by the benchmarks (wall clock, compile excluded)."""

from __future__ import annotations

import time

import jax
import numpy as np


def timed(fn, *args, repeats: int = 3, **kwargs):
  """Run ``fn`` once to compile/warm up, then ``repeats`` times; return
  (median seconds, last result).  Blocks on every output array."""
  out = jax.block_until_ready(fn(*args, **kwargs))
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args, **kwargs))
    times.append(time.perf_counter() - t0)
  return float(np.median(times)), out


def forward_latency(model, params, batch: int, num_tokens: int, context: int,
                    cache_length: int, repeats: int = 20) -> float:
  """Median seconds of one jitted forward over ``num_tokens`` new tokens per row
  with ``context`` committed tokens in a cache of ``cache_length`` slots.

  The call returns the logits *and* the written cache (as the decode loops use
  both), so XLA cannot drop the cache write from the timed program."""
  import jax.numpy as jnp
  from specjax.models import kv_cache as kvc

  cache = model.init_cache(batch, cache_length)
  cache = kvc.commit(cache, jnp.full((batch,), context, jnp.int32))
  toks = jnp.ones((batch, num_tokens), jnp.int32)
  pos = context + jnp.broadcast_to(jnp.arange(num_tokens), (batch, num_tokens))
  def fwd(p, t, ps, c):
    out = model.apply(p, t, ps, c)
    return out.logits, out.cache
  fwd = jax.jit(fwd)
  sec, _ = timed(fwd, params, toks, pos, cache, repeats=repeats)
  return sec
