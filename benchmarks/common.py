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
                    cache_length: int, repeats: int = 20, inner: int = 4) -> float:
  """Median seconds of one forward over ``num_tokens`` new tokens per row with
  ``context`` committed tokens in a cache of ``cache_length`` slots, measured as
  the decode loops run it: ``inner`` forwards inside one jitted loop that
  carries the cache (each writes its tokens in place at the same slots, as an
  uncommitted speculative step does) and feeds its argmax back, so neither the
  cache write nor the logits can be optimised away. The one copy of the input
  cache per call is amortised over ``inner``."""
  import jax.numpy as jnp
  from specjax.models import kv_cache as kvc

  cache = model.init_cache(batch, cache_length)
  cache = kvc.commit(cache, jnp.full((batch,), context, jnp.int32))
  toks = jnp.ones((batch, num_tokens), jnp.int32)
  pos = context + jnp.broadcast_to(jnp.arange(num_tokens), (batch, num_tokens))

  def loop(p, t, ps, c):
    def body(_, carry):
      c, t = carry
      out = model.apply(p, t, ps, c)
      return out.cache, jnp.argmax(out.logits, -1).astype(jnp.int32)
    return jax.lax.fori_loop(0, inner, body, (c, t))

  sec, _ = timed(jax.jit(loop), params, toks, pos, cache, repeats=repeats)
  return sec / inner
