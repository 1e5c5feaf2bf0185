r"""The chain rule over the verify-length bucket vs over all K drafts, before / after
in ONE process, interleaved round-robin (the same background load for both).

A chain drafter with verify-length buckets (prompt lookup: ``(0, K)``; AdaEDL and
SV: ``(0, 1, 2, 4, .., K)``) runs the target forward over the smallest bucket
``n`` covering the step's longest offer.  ``after`` (the code as is) also computes
the target's distributions and the rule over those ``n`` drafts only; ``before``
(re-created here) padded the logits back to K + 1 and ran softmax / one-hot and
the rule over all K positions of the 49,152-token vocabulary, even in a step
that offers nothing.  Both must emit the same tokens (checked per prompt).

Per prompt (batch 1, stop at EOS, the main job's chat prompts and key) it times
``generate()`` and ``speculative_generate()`` with each variant, every timer once
per round, round-robin, and keeps the median of ``--rounds``; the record has the
per-prompt medians and the pooled tokens/s of each, so a reader gets
``before / after`` and both speedups over target-only from one run.

    python -m benchmarks.bucketed_rule_ab --num_prompts=8 --rounds=3 \
        --output=benchmarks/results/bucketed_rule_ab/lookup_chain.json
"""

from __future__ import annotations

import functools
import os
import subprocess
import time

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  flags.DEFINE_string("model", "smollm2-135m-instruct", "registered name, .gguf or HF dir")
  flags.DEFINE_string("drafter", "lookup_chain", "a chain drafter of the drafter factory "
                      "whose verify buckets are not just (K,): lookup_chain")
  flags.DEFINE_integer("k", 4, "draft length K")
  flags.DEFINE_list("temperatures", ["0", "1"], "sampling temperatures")
  flags.DEFINE_integer("num_prompts", 8, "chat prompts (half ShareGPT, half HumanEval)")
  flags.DEFINE_integer("max_new_tokens", 96, "new tokens per prompt (stop at EOS)")
  flags.DEFINE_integer("rounds", 5, "timed rounds (median per timer)")
  flags.DEFINE_string("output", "benchmarks/results/bucketed_rule_ab/lookup_chain.json",
                      "JSON record")


def full_rule_verify(self, inputs):
  """``ChainStrategy.verify`` before the rule moved into the buckets: the forward over
  the bucket, its logits padded back to K + 1, then the target's distributions and
  the rule over all K drafts."""
  import jax
  import jax.numpy as jnp
  from specjax.decoding import strategies as S
  from specjax.distributions import probs_from_logits
  from specjax.models import kv_cache as kvc
  proposal, gamma = inputs.proposal, inputs.gamma
  x, q = proposal.tokens, proposal.q
  b, k = x.shape

  def forward(n):
    def run(_):
      z, hidden, o_cache = S._chain_forward(inputs.target, inputs.target_params, inputs.cache,
                                            inputs.last, x, n)
      hidden = None if hidden is None else S._pad_axis(hidden, k + 1, 2)
      return S._pad_axis(z, k + 1, 1), hidden, o_cache, jnp.int32(n + 1)
    return run

  if inputs.buckets is None:
    z, hidden, o_cache, processed = forward(k)(None)
  else:
    buckets = tuple(sorted(set(int(v) for v in inputs.buckets)))
    z, hidden, o_cache, processed = jax.lax.switch(S._bucket_index(gamma, buckets),
                                                   [forward(n) for n in buckets], None)
  p = probs_from_logits(z, inputs.sampling)
  u = jax.vmap(lambda kk: jax.random.uniform(kk, (k,)))(inputs.u_keys)
  decide = S._path_chain if isinstance(inputs.verifier, S.PathRule) else S._node_chain
  res = decide(inputs.verifier, z, p, q, x, u, inputs.verify_keys, gamma, proposal.q_node)
  cache = kvc.commit(o_cache, jnp.where(inputs.active, res.num_accepted + 1, 0))
  node_ids = jnp.broadcast_to(jnp.arange(k + 1)[None, :], (b, k + 1))
  return S.Verdict(cache, res.num_accepted, res.token, x, res.accepted, res.num_relaxed,
                   S._hidden_at(hidden, node_ids), processed)


def _load():
  from experiments.common.model_sets import load_model_set
  from experiments.common.prompts import load_chat_prompts
  ms = load_model_set(FLAGS.model, draft="", eagle="")
  prompts = load_chat_prompts(ms.encode_chat, FLAGS.num_prompts)
  return ms, prompts


def _timers(ms, prompts, temperature: float):
  """``{(prompt index, variant): once()}`` and the outputs of each variant's first call."""
  import jax
  from benchmarks.common import call_timer
  from specjax import verifiers
  from specjax.decoding import speculative as SP
  from specjax.decoding import strategies as S
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.drafter_factory import make_drafter
  from specjax.distributions import SamplingConfig
  samp = SamplingConfig(temperature=temperature)
  drafter, dparams = make_drafter(FLAGS.drafter, samp, ms.draft_sources(), num_draft=FLAGS.k)
  rule = verifiers.get("lossless")
  key = jax.random.key(0)
  after_verify = S.ChainStrategy.verify
  jits = {v: jax.jit(functools.wraps(SP.speculative_core)(
      lambda *a, **kw: SP.speculative_core(*a, **kw)), static_argnums=0)
      for v in ("before", "after")}

  def spec(variant, ids):
    saved = SP._speculative
    SP._speculative = jits[variant]
    S.ChainStrategy.verify = full_rule_verify if variant == "before" else after_verify
    try:
      return SP.speculative_generate(ms.target, ms.target_params, drafter, dparams, rule,
                                     [list(ids)], max_new_tokens=FLAGS.max_new_tokens,
                                     sampling=samp, key=key)
    finally:
      SP._speculative, S.ChainStrategy.verify = saved, after_verify

  timers, outs = {}, {}
  for i, pr in enumerate(prompts):
    gen = functools.partial(generate, ms.target, ms.target_params, [list(pr.ids)],
                            max_new_tokens=FLAGS.max_new_tokens, sampling=samp, key=key)
    outs[i, "target"] = gen()
    timers[i, "target"] = call_timer(gen)
    for v in ("before", "after"):
      call = functools.partial(spec, v, pr.ids)
      outs[i, v] = call()
      timers[i, v] = call_timer(call)
  return timers, outs


def _lists(out) -> list:
  return out.to_lists()[0]


def _one_temperature(ms, prompts, temperature: float) -> dict:
  import numpy as np
  from benchmarks.common import interleaved_medians
  t0 = time.time()
  timers, outs = _timers(ms, prompts, temperature)
  compile_s = time.time() - t0
  for i in range(len(prompts)):
    if _lists(outs[i, "before"]) != _lists(outs[i, "after"]):
      raise AssertionError(f"T={temperature} prompt {i}: before and after emit different tokens")
  med = interleaved_medians(timers, FLAGS.rounds)
  per_prompt = []
  for i, pr in enumerate(prompts):
    st = outs[i, "after"].stats.summary()
    per_prompt.append({"source": pr.source, "tokens": len(_lists(outs[i, "after"])),
                       "target_tokens": len(_lists(outs[i, "target"])),
                       "tau": st["tau"], "target_calls": int(np.sum(outs[i, "after"].stats
                                                                    .target_calls)),
                       "seconds": {v: med[i, v] for v in ("target", "before", "after")}})
  total = {v: sum(r["seconds"][v] for r in per_prompt) for v in ("target", "before", "after")}
  toks = sum(r["tokens"] for r in per_prompt)
  ttoks = sum(r["target_tokens"] for r in per_prompt)
  tps = {"target": ttoks / total["target"], "before": toks / total["before"],
         "after": toks / total["after"]}
  ratios = [r["seconds"]["before"] / r["seconds"]["after"] for r in per_prompt]
  return {"temperature": temperature, "per_prompt": per_prompt, "tokens_per_s": tps,
          "speedup_before": tps["before"] / tps["target"],
          "speedup_after": tps["after"] / tps["target"],
          "after_over_before_pooled": tps["after"] / tps["before"],
          "after_over_before_per_prompt": ratios,
          "identical_tokens": True, "warmup_s": compile_s}


def main(argv):
  del argv
  from benchmarks.records import write_record
  if FLAGS.num_prompts < 1 or FLAGS.rounds < 1 or FLAGS.max_new_tokens < 1:
    raise app.UsageError(f"--num_prompts={FLAGS.num_prompts}, --rounds={FLAGS.rounds}, "
                         f"--max_new_tokens={FLAGS.max_new_tokens}: each must be >= 1")
  if FLAGS.drafter != "lookup_chain":
    raise app.UsageError(f"--drafter={FLAGS.drafter!r}: only lookup_chain has verify buckets "
                         "among the factory's drafters without a policy")
  temps = [float(t) for t in FLAGS.temperatures]
  ms, prompts = _load()
  load0 = os.getloadavg()[0]
  t0 = time.time()
  results = [_one_temperature(ms, prompts, t) for t in temps]
  for r in results:
    print(f"T={r['temperature']:g}: tokens/s target {r['tokens_per_s']['target']:.1f}, "
          f"before {r['tokens_per_s']['before']:.1f} ({r['speedup_before']:.3f}x), "
          f"after {r['tokens_per_s']['after']:.1f} ({r['speedup_after']:.3f}x); "
          f"after / before {r['after_over_before_pooled']:.3f}")
  commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
  write_record(FLAGS.output, {
      "command": "python -m benchmarks.bucketed_rule_ab " + " ".join(
          f"--{n}={FLAGS[n].serialize().split('=', 1)[1]}" for n in
          ("model", "drafter", "k", "temperatures", "num_prompts", "max_new_tokens", "rounds")),
      "commit": commit.strip(), "model_sha256": ms.sha256, "cpus": os.cpu_count(),
      "load_start": load0, "load_end": os.getloadavg()[0], "wall_s": time.time() - t0,
      "results": results})


if __name__ == "__main__":
  define_flags()
  app.run(main)
