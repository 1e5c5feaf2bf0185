"""The traced-hyperparameter loop change, before / after in ONE process, interleaved round-robin (the
same background load for both): 'before' traces generate() / speculative_generate()
with the layer stack scanned in the loop (Model.decode_params -> identity) and
jnp.argmax (distributions.argmax patched while tracing); 'after' is the code as is.
Checks that both emit the same tokens, then prints per-iteration milliseconds
(time of max_new_tokens minus time of 1 token, over the loop iterations).

    python benchmarks/loop_ab.py smol 0,1 24 5    # SmolLM2 + random 1-layer draft, T 0 and 1
    python benchmarks/loop_ab.py small 0,1 48 9   # the embedded target / draft
"""
import os, sys, time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import functools

import jax
import jax.numpy as jnp
import numpy as np

import specjax.decoding.autoregressive as AR
import specjax.decoding.speculative as SP
from specjax.models import registry, defaults
from specjax.models.transformer import Model
from specjax import distributions
from specjax import verifiers
from specjax.decoding.drafter_factory import DraftSources, make_drafter
from specjax.distributions import SamplingConfig
from experiments.common.prompts import load_eval_prompts


def main(argv):
  """``argv``: ``[program, which, temperatures, max_new_tokens, rounds]`` (module docstring)."""
  which, temps, n_new, rounds = argv[1], [float(t) for t in argv[2].split(",")], int(argv[3]), int(argv[4])
  if which == "smol":
    lm = registry.load_model("smollm2-135m-instruct"); target, tp, tok = lm.model, lm.params, lm.tokenizer
    draft = Model(target.config.replace(num_hidden_layers=1)); dp = draft.init_params(jax.random.key(1))
  else:
    target, tp = defaults.load_default("target"); draft, dp = defaults.load_default("draft"); tok = defaults.default_tokenizer()
  prompts = [list(p.ids) for p in load_eval_prompts(1, tokenizer=tok)]
  cache_len = 128 + n_new + 5
  orig = (Model.decode_params, distributions.argmax)
  def patch(v):
    if v == "before":
      Model.decode_params = lambda self, p: p
      distributions.argmax = lambda x: jnp.argmax(x, axis=-1).astype(jnp.int32)
  def unpatch():
    Model.decode_params, distributions.argmax = orig


  def fresh(f):
    """A new function object for ``f``: its own jit cache (one compile per variant)."""
    @functools.wraps(f)
    def g(*a, **k):
      return f(*a, **k)
    return g
  jits = {}
  def get_jits(v, T):
    if (v, T) not in jits:
      jits[v, T] = (jax.jit(fresh(AR._generate.__wrapped__), static_argnames=("model", "max_new_tokens", "eos", "cache_length")),
                    jax.jit(fresh(SP._speculative.__wrapped__), static_argnames=("target", "policy", "max_new_tokens", "eos", "cache_length")))
    return jits[v, T]
  def run(kind, T, v, m):
    g, s = get_jits(v, T)
    samp = SamplingConfig(temperature=T)
    a, b = AR._generate, SP._speculative
    AR._generate, SP._speculative = g, s
    try:
      if kind == "gen":
        return jax.block_until_ready(AR.generate(target, tp, prompts, max_new_tokens=m, sampling=samp, key=jax.random.key(0), eos_token_id=None, cache_length=cache_len))
      drafter, _ = make_drafter("chain", samp, DraftSources(target.config.vocab_size, draft, dp), num_draft=4)
      return jax.block_until_ready(SP.speculative_generate(target, tp, drafter, dp, verifiers.get("lossless"), prompts, max_new_tokens=m, sampling=samp, key=jax.random.key(0), eos_token_id=None, cache_length=cache_len))
    finally:
      AR._generate, SP._speculative = a, b
  outs = {}
  keys = [(kind, T, v, m) for T in temps for kind in ("gen", "spec") for v in ("before", "after") for m in (1, n_new)]
  for k in keys:
    patch(k[2])
    try:
      t0 = time.perf_counter(); outs[k] = run(*k); c = time.perf_counter() - t0
    finally:
      unpatch()
    print(f"compile+first {k}: {c:.1f} s", flush=True)
  for T in temps:
    for kind in ("gen", "spec"):
      a, b = outs[kind, T, "before", n_new], outs[kind, T, "after", n_new]
      print(f"T={T} {kind}: identical tokens before/after: {bool(jnp.all(a.tokens == b.tokens))}")
    print(f"T={T} spec == gen (greedy identity) after: {bool(jnp.all(outs['spec', T, 'after', n_new].tokens == outs['gen', T, 'after', n_new].tokens))}")
  ts = {k: [] for k in keys}
  for r in range(rounds):
    for k in keys:
      t0 = time.perf_counter(); run(*k); ts[k].append(time.perf_counter() - t0)
  for T in temps:
    for kind in ("gen", "spec"):
      for v in ("before", "after"):
        o = outs[kind, T, v, n_new]
        it = (n_new - 1) if kind == "gen" else int(np.max(o.stats.target_calls))
        d = np.median(ts[kind, T, v, n_new]) - np.median(ts[kind, T, v, 1])
        print(f"{which} T={T} {kind:4s} {v:6s}: {d/it*1e3:8.2f} ms per iteration ({it} iterations; "
              f"full {np.median(ts[kind, T, v, n_new])*1e3:.0f} ms, first token {np.median(ts[kind, T, v, 1])*1e3:.0f} ms)", flush=True)


if __name__ == "__main__":
  main(sys.argv)
