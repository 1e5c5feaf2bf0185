"""Speed of the exact induced-distribution analysis (docs/spec.md §6) at LLM vocabulary size.

``python benchmarks/analysis_speed.py [--num_contexts=1000 --vocab_size=32000]``.
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

import dataclasses
import time

import jax
import jax.numpy as jnp

from experiments.common import cli, knobs
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


@dataclasses.dataclass(frozen=True)
class AnalysisSpeedSpec:
  """The synthetic contexts timed and how the analysis enumerates them."""
  num_contexts: int = knobs.knob(1000, "synthetic contexts")
  vocab_size: int = knobs.knob(32000, "vocabulary size V")
  draft_top_k: int = knobs.knob(8, "deterministic top-k drafts: candidates per context")
  support: int = knobs.knob(64, "non-zeros of the sparse drafter q")
  chunk: int = knobs.knob(32, "candidates per enumeration step (32 is cache-friendly on CPU)")
  context_batch: int = knobs.knob(1, "contexts per lax.map step (1 is cache-friendly on CPU)")
  dense_contexts: int = knobs.knob(2, "contexts timed with a dense q (V^2 each), then "
                                   "extrapolated (0: none)")

  def __post_init__(self):
    for name in ("num_contexts", "vocab_size", "draft_top_k", "support", "chunk",
                 "context_batch"):
      knobs.check_int(self, name, 1)
    knobs.check_int(self, "dense_contexts", 0)


SPECS = knobs.Specs(AnalysisSpeedSpec)


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


def main():
  (args,) = SPECS.build()
  n, v = args.num_contexts, args.vocab_size
  print(f"backend={jax.default_backend()} devices={jax.devices()} contexts={n} V={v}")
  rules = [verifiers.get("lossless"), verifiers.get("typical", eps=0.09)]
  key = jax.random.PRNGKey(0)

  z, p, q = contexts(key, n, v)
  for rule in rules:
    f = jax.jit(lambda z, p, q, rule=rule: case(rule, z, p, q, draft="topk",
                                               top_k=args.draft_top_k, context_batch=100))
    first, steady = timed(f, z, p, q)
    print(f"[topk k={args.draft_top_k:<3d}] {rule.name:<9s} {n} contexts: first "
          f"{first:7.2f} s, steady {steady:7.2f} s  ({1e3 * steady / n:.2f} ms/context)")

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
  cli.run_binary(main, define_flags=define_flags)
