"""Speed of the exact induced-distribution analysis (docs/spec.md §6) at LLM vocabulary size.

Plain script: ``python benchmarks/analysis_speed.py [--contexts 1000 --vocab 32000]``.
Prints, per case, compile+first-call time and steady-state time for computing
the induced first-token distribution of every context and its KL to the
matched baseline:

* deterministic top-k drafts (EAGLE trees): k candidate steps of O(V) -- cheap;
* sampled drafts from a sparse (top-``support``-truncated) drafter:
  ``support x V`` per context;
* sampled drafts from a dense drafter: ``V x V`` per context -- timed on a few
  contexts and extrapolated to all of them.

Contexts are synthetic (Gaussian logits, drafter = noisy target), which does
not change the cost: the work depends only on V, the support and the rule.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp

from specjax import verifiers
from specjax.analysis import divergences as dv
from specjax.analysis.induced import induced_parts
from specjax.verifiers import truncation  # noqa: F401  (registers "typical", "spec_cascade")


def contexts(key, n, v, support=None):
  """(z, p, q) [n, V]: logits N(0, 3^2), p = softmax(z), q = softmax(z + N(0, 1)) (top-support)."""
  k1, k2 = jax.random.split(key)
  z = 3.0 * jax.random.normal(k1, (n, v), jnp.float32)
  p = jax.nn.softmax(z, axis=-1)
  zq = z + jax.random.normal(k2, (n, v), jnp.float32)
  if support is not None:
    kth = jax.lax.top_k(zq, support)[0][:, -1:]
    zq = jnp.where(zq >= kth, zq, -jnp.inf)
  return z, p, jax.nn.softmax(zq, axis=-1)


def timed(fn, *args):
  """(first call incl. compile, steady-state call) in seconds."""
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  t1 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  t2 = time.perf_counter()
  return t1 - t0, t2 - t1


def case(rule, z, p, q, **kw):
  """Induced distribution + KL(P || p_A) for all contexts."""
  p_a = dv.matched_baseline_probs(rule, p)
  big_p = induced_parts(rule, z, p, q, **kw).dist
  return dv.kl(big_p, p_a), dv.tv(big_p, p_a)


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--contexts", type=int, default=1000)
  ap.add_argument("--vocab", type=int, default=32000)
  ap.add_argument("--top_k", type=int, default=8, help="deterministic candidates per context")
  ap.add_argument("--support", type=int, default=64, help="non-zeros of the sparse drafter q")
  ap.add_argument("--chunk", type=int, default=32,
                  help="candidates per enumeration step (32 is cache-friendly on CPU)")
  ap.add_argument("--context_batch", type=int, default=1,
                  help="contexts per lax.map step (1 is cache-friendly on CPU)")
  ap.add_argument("--dense_contexts", type=int, default=2,
                  help="contexts timed with a dense q (V^2 each), then extrapolated")
  args = ap.parse_args()
  n, v = args.contexts, args.vocab
  print(f"backend={jax.default_backend()} devices={jax.devices()} contexts={n} V={v}")
  rules = [verifiers.get("lossless"), verifiers.get("typical", eps=0.09)]
  key = jax.random.PRNGKey(0)

  z, p, q = contexts(key, n, v)
  for rule in rules:
    f = jax.jit(lambda z, p, q, rule=rule: case(rule, z, p, q, draft="topk", top_k=args.top_k,
                                               context_batch=100))
    first, steady = timed(f, z, p, q)
    print(f"[topk k={args.top_k:<3d}] {rule.name:<9s} {n} contexts: first {first:7.2f} s, "
          f"steady {steady:7.2f} s  ({1e3 * steady / n:.2f} ms/context)")

  zs, ps, qs = contexts(key, n, v, args.support)
  for rule in rules:
    f = jax.jit(lambda z, p, q, rule=rule: case(
        rule, z, p, q, draft="sampled", max_support=args.support, chunk_size=args.chunk,
        context_batch=args.context_batch))
    first, steady = timed(f, zs, ps, qs)
    print(f"[sampled, support {args.support}] {rule.name:<9s} {n} contexts: first {first:7.2f} s,"
          f" steady {steady:7.2f} s  ({1e3 * steady / n:.2f} ms/context)")

  m = args.dense_contexts
  if m > 0:
    for rule in rules:
      f = jax.jit(lambda z, p, q, rule=rule: case(
          rule, z, p, q, draft="sampled", chunk_size=args.chunk, context_batch=1))
      first, steady = timed(f, z[:m], p[:m], q[:m])
      print(f"[sampled, dense q]  {rule.name:<9s} {m} contexts: first {first:7.2f} s, steady "
            f"{steady:7.2f} s  ({steady / m:.2f} s/context -> {n * steady / m / 60:.1f} min "
            f"for {n} contexts)")


if __name__ == "__main__":
  main()
