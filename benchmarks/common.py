"""Timing helpers shared by the benchmarks (wall clock, compile excluded); the loop's
piece timers live in :mod:`specjax.policies.timers` and are re-exported here."""

from __future__ import annotations

import time

import jax
import numpy as np

from specjax.policies.timers import (call_timer, carried_timer, draft_timer,  # noqa: F401
                                     forward_timer, interleaved_medians)


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
                    cache_length: int, repeats: int = 20, inner: int = 4,
                    attn_mask=None) -> float:
  """Median seconds of :func:`forward_timer` over ``repeats`` calls."""
  once = forward_timer(model, params, batch, num_tokens, context, cache_length, inner, attn_mask)
  return float(np.median([once() for _ in range(repeats)]))
