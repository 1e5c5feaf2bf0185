"""Timers of the decode loops' pieces, compile excluded: a step carried inside a
jitted loop as the loops run it (:func:`carried_timer`), a whole call
(:func:`call_timer`), the target's forward over n new tokens (:func:`forward_timer`)
and a drafter's step (:func:`draft_timer`), and round-robin medians of several
(:func:`interleaved_medians`).  The benchmarks time with them, and a run measures its
own round costs with them (:mod:`specjax.policies.cost_profile`)."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np


def carried_timer(step, args, make_carry, inner: int = 8):
  """A compiled timer for ``carry = step(args, carry)``, measured as the decode
  loops run it: steps inside one jitted ``lax.fori_loop`` that carries (and
  donates) the state, so cache writes stay in place and nothing the next step
  reads can be optimised away.  Returns ``once() -> seconds per step``: the
  time of ``1 + inner`` steps minus that of 1 step (two calls of one compiled
  loop, the trip count is traced), over ``inner`` -- the marginal cost of a
  step, without the call's dispatch and argument handling, as the decode
  loops' per-iteration times are.  ``make_carry()`` builds a fresh carry for
  every call (outside the timer)."""
  loop = jax.jit(lambda a, c, n: jax.lax.fori_loop(0, n, lambda _, cc: step(a, cc), c),
                 donate_argnums=(1,))
  jax.block_until_ready(loop(args, make_carry(), 1))

  def run(n: int) -> float:
    c = jax.block_until_ready(make_carry())
    t0 = time.perf_counter()
    jax.block_until_ready(loop(args, c, n))
    return time.perf_counter() - t0

  def once() -> float:
    return (run(1 + inner) - run(1)) / inner
  return once


def call_timer(fn, *args, **kwargs):
  """A warmed-up timer for ``fn(*args, **kwargs)``: ``once() -> seconds``
  (blocks on every output array)."""
  jax.block_until_ready(fn(*args, **kwargs))

  def once() -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args, **kwargs))
    return time.perf_counter() - t0
  return once


def interleaved_medians(timers: dict, rounds: int) -> dict:
  """``{name: median seconds}`` of ``rounds`` calls of every ``once()`` timer,
  run round-robin (name a, b, c, a, b, c, ...) so that every measurement sees
  the same background load; on a shared machine this keeps *differences*
  between the timers meaningful."""
  times = {name: [] for name in timers}
  for _ in range(rounds):
    for name, once in timers.items():
      times[name].append(once())
  return {name: float(np.median(t)) for name, t in times.items()}


def _cache_at(model, batch: int, context: int, cache_length: int):
  from specjax.models import kv_cache as kvc
  return kvc.commit(model.init_cache(batch, cache_length), jnp.full((batch,), context, jnp.int32))


def forward_timer(model, params, batch: int, num_tokens: int, context: int,
                  cache_length: int, inner: int = 8, attn_mask=None):
  """Timer (``once() -> seconds``) of one forward over ``num_tokens`` new tokens
  per row with ``context`` committed tokens in a cache of ``cache_length``
  slots, measured as the decode loops run it (:func:`carried_timer`): each forward writes its
  tokens in place at the same slots, as an uncommitted speculative step does,
  and feeds its argmax back, so neither the cache write nor the logits can be
  optimised away.  ``attn_mask [B, T, T]`` (a tree's ancestor mask) is passed on."""
  pos = context + jnp.broadcast_to(jnp.arange(num_tokens), (batch, num_tokens))
  params = model.decode_params(params)  # as the decode loops run their forwards

  def step(p, carry):
    c, t = carry
    out = model.apply(p, t, pos, c, attn_mask=attn_mask)
    return out.cache, jnp.argmax(out.logits, -1).astype(jnp.int32)

  make = lambda: (_cache_at(model, batch, context, cache_length),
                  jnp.ones((batch, num_tokens), jnp.int32))
  return carried_timer(step, params, make, inner=inner)


def draft_timer(drafter, draft_params, target, target_params, prompts_tokens, prompts_lengths,
                cache_length: int, inner: int = 8):
  """Timer (``once() -> seconds``) of one draft step (``drafter.propose`` plus
  its ``commit``) after the prompts ``[B, P]`` were prefilled, inside a jitted
  loop carrying the drafter state.  Every step commits only ``last`` (a
  rejected draft), so the drafter returns to the same length each step as it
  does in the loop; the first draft token is fed back as the next ``last`` and
  ``q`` is reduced into the carry, so neither can be optimised away."""
  from specjax.decoding.autoregressive import prefill
  tokens, lengths = jnp.asarray(prompts_tokens), jnp.asarray(prompts_lengths)
  b = tokens.shape[0]
  t_cache, _, t_hidden = prefill(target, target_params, tokens, lengths, cache_length)
  keys = jax.random.split(jax.random.key(0), b)
  prev = jnp.take_along_axis(tokens, (lengths - 1)[:, None], 1)[:, 0]
  n_sel = len(drafter.target_hidden_layers)
  hid = (None if not n_sel else
         jnp.zeros((n_sel, b, drafter.max_accepted + 1, t_hidden.shape[-1]), t_hidden.dtype))

  def step(dp, carry):
    state, last, acc = carry
    proposal, state = drafter.propose(dp, state, prev, last, keys)
    x, q = proposal.tokens, proposal.q
    committed = jnp.concatenate([last[:, None], x[:, :drafter.max_accepted]], 1)
    state = drafter.commit(state, t_cache.lengths, committed, jnp.ones((b,), jnp.int32), hid)
    return state, x[:, 0], acc + jnp.sum(q)

  # Fresh copies per carry: a state may hold its inputs (a model-free drafter's history
  # keeps ``lengths``), and the timer donates the carry.
  make = lambda: (drafter.prefill(draft_params, jnp.array(tokens), jnp.array(lengths),
                                  cache_length, t_hidden),
                  jnp.array(prev), jnp.float32(0))
  return carried_timer(step, drafter.decode_params(draft_params), make, inner=inner)
