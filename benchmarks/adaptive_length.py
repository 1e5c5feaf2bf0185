r"""Cost-aware draft length against fixed K, side by side, on this machine.

For each (temperature, drafter, rule) of ``--rows``, batch 1, SmolLM2:

1. **Profile** (this machine, the prompts' mean context + n / 2): the target
   forward over 1..K+1 tokens and the drafter's K-draft chain, timed
   round-robin (``benchmarks.common``), give the round cost in target decode
   steps ``c(n) = (forward(n + 1) + draft * max(n, 1) / K) / forward(1)`` for a
   drafter that stops drafting after its last offered draft (the draft LM,
   EAGLE chains; the first draft is always made), ``draft`` in full for one
   that drafts all K (prompt lookup, whose drafting costs next to nothing).
2. **Calibrate** on held-out prompts disjoint from the evaluation prompts
   (``--calibration_prompts``, the next ones of the same sets): ordinary
   speculative decoding with every draft verified, one record per reached
   position; the table (10 confidence bins per position) is fitted on the
   first half and its reliability (ECE) read on the second half, then refitted
   on all.
3. **Evaluate**: target-only, fixed K (the drafter's own verify buckets) and
   the cost-aware policy (``specjax.policies.cost_aware``), each prompt at n
   and 1 new tokens (the 1-token call is the prefill and first token), every
   call once per round, round-robin, median of ``--repeats`` rounds.  Decode
   phase speedup ``(gen(n) - gen(1)) / (spec(n) - spec(1))`` and end to end
   ``gen(n) / spec(n)``, summed over prompts, and the share of rounds at each
   verify length.

EOS is off, so every call emits exactly n tokens.  No interval: a few prompts
of one machine (exploratory); the main job's table is where rows are compared
with intervals.

    python -m benchmarks.adaptive_length                          # T = 0 and 1
    python -m benchmarks.adaptive_length --rows=lookup_chain:lossless \
        --temperatures=1 --output=benchmarks/results/adaptive_length/smollm2.json
"""

from __future__ import annotations

import os

from absl import app, flags
import numpy as np

from benchmarks import round_cost

FLAGS = flags.FLAGS


def define_flags() -> None:
  round_cost.define_flags()
  FLAGS.set_default("rows", ["lookup_chain:lossless", "eagle3_chain:lossless",
                             "eagle3_chain:mars"])
  FLAGS.set_default("temperatures", ["0", "1"])
  flags.DEFINE_integer("calibration_prompts", 8, "held-out prompts the acceptance table is "
                       "fitted on (disjoint from the evaluation prompts)")
  flags.DEFINE_integer("profile_repeats", 5, "timed rounds of the cost profile (median)")
  from experiments.common import cli
  cli.define_decision_flag()


def calibration_prompts(st) -> list:
  """The next prompts of the same sets, excluding the evaluation prompts."""
  from experiments.common.prompts import load_chat_prompts
  ms = st.model_set
  evals = load_chat_prompts(ms.encode_chat, FLAGS.prompts, max_tokens=FLAGS.max_prompt_tokens)
  cal = load_chat_prompts(ms.encode_chat, FLAGS.calibration_prompts,
                          max_tokens=FLAGS.max_prompt_tokens,
                          exclude={p.source for p in evals})
  return [list(p.ids) for p in cal]


def forward_profile(st, cache_len: int) -> np.ndarray:
  """``forward(n + 1) / forward(1)``, n = 0..K: the target's verify forwards, shared
  by every row (module docstring, step 1), non-decreasing (timing noise removed)."""
  from benchmarks.common import forward_timer, interleaved_medians
  timers = {n: forward_timer(st.target, st.decoded, 1, n + 1, st.ctx, cache_len, inner=4)
            for n in range(FLAGS.k + 1)}
  med = interleaved_medians(timers, FLAGS.profile_repeats)
  return np.maximum.accumulate([med[n] / med[0] for n in range(FLAGS.k + 1)])


def round_costs(st, drafter, dparams, forward: np.ndarray, cache_len: int) -> np.ndarray:
  """``c(n)``, n = 0..K, in target decode steps: ``forward`` plus the drafter's
  steps, timed against the one-token forward round-robin (module docstring)."""
  from benchmarks.common import draft_timer, forward_timer, interleaved_medians
  from specjax.decoding.prompts import prepare_prompts
  from specjax.decoding.speculative import loop_target
  k = drafter.num_draft
  p_tok, p_len = prepare_prompts(st.prompts[:1], st.target.config.vocab_size)
  med = interleaved_medians({
      "step": forward_timer(st.target, st.decoded, 1, 1, st.ctx, cache_len, inner=4),
      "draft": draft_timer(drafter, dparams, loop_target(st.target, drafter), st.target_params,
                           p_tok, p_len, cache_len)}, FLAGS.profile_repeats)
  # drafting stops after the last draft offered (the first one is always made)
  drafts = np.maximum(np.arange(k + 1), 1) / k if drafter.gates_drafting else np.ones(k + 1)
  return forward + med["draft"] / med["step"] * drafts


def calibrate(st, drafter, dparams, verifier, samp, prompts) -> tuple:
  """``(table, reliability)``: fitted on the first half of ``prompts``, ECE on the
  second, refitted on all (module docstring, step 2).  One batch of all prompts."""
  from specjax.policies import acceptance
  k = drafter.num_draft
  rec = acceptance.collect(st.target, st.target_params, drafter, dparams, verifier, prompts,
                           max_new_tokens=FLAGS.max_new_tokens, sampling=samp, key=st.key,
                           eos_token_id=None)
  fit = lambda m: acceptance.fit(rec["position"][m], rec["confidence"][m],
                                 rec["accepted"][m], k)
  first = rec["row"] < len(prompts) // 2
  rel = fit(first).reliability(rec["position"][~first], rec["confidence"][~first],
                               rec["accepted"][~first])
  return fit(np.ones_like(first)), rel


def calibrate_row(st, dname: str, rule: str, samp, cal_prompts, forward) -> dict:
  """The row's drafter, rule, cost curve and fitted acceptance table (steps 1-2)."""
  from benchmarks.speculative import make_drafter
  from specjax import verifiers
  n, ms, target, tp = FLAGS.max_new_tokens, st.model_set, st.target, st.target_params
  drafter, dparams = make_drafter(dname, FLAGS.k, samp, ms.draft, ms.draft_params, target, tp, ms)
  verifier = verifiers.get(rule, **round_cost.RULES[rule])
  cache_len = st.bucket + n + drafter.tokens_per_step
  costs = round_costs(st, drafter, dparams, forward, cache_len)
  fitted, rel = calibrate(st, drafter, dparams, verifier, samp, cal_prompts)
  return dict(drafter=drafter, dparams=dparams, verifier=verifier, cache_len=cache_len,
              costs=costs, fitted=fitted, reliability=rel)


def build_row(st, row: dict, samp) -> dict:
  """Timers and runs of one row: fixed K and cost-aware, per prompt at n and 1 tokens."""
  from benchmarks.common import call_timer
  from specjax.decoding.speculative import speculative_generate
  from specjax.policies import cost_aware
  n, target, tp = FLAGS.max_new_tokens, st.target, st.target_params
  drafter, dparams, verifier = row["drafter"], row["dparams"], row["verifier"]
  policy = cost_aware.CostAwareLength(drafter.num_draft)
  params = cost_aware.make_params(row["fitted"].table(), row["costs"])
  common = dict(sampling=samp, key=st.key, eos_token_id=None, cache_length=row["cache_len"],
                prompt_bucket=st.bucket)
  fixed = lambda p, m: speculative_generate(target, tp, drafter, dparams, verifier, [p],
                                            max_new_tokens=m, **common)
  adaptive = lambda p, m: speculative_generate(target, tp, drafter, dparams, verifier, [p],
                                               max_new_tokens=m, policy=policy,
                                               policy_params=params, **common)
  timers, runs = {}, {"fixed": [], "adaptive": []}
  for name, fn in (("fixed", fixed), ("adaptive", adaptive)):
    for i, p in enumerate(st.prompts):
      runs[name].append(fn(p, n))
      timers[name, i, n], timers[name, i, 1] = call_timer(fn, p, n), call_timer(fn, p, 1)
  return dict(row, timers=timers, runs=runs)


def row_result(temp, dname, rule, med, row, gen_n, gen_1) -> dict:
  """Speedups of fixed K and cost-aware over target-only, and the lengths used."""
  n, p = FLAGS.max_new_tokens, range(len(row["runs"]["fixed"]))
  out = dict(temperature=temp, drafter=dname, rule=rule, k=FLAGS.k, prompts=len(p),
             max_new_tokens=n, round_cost=[float(c) for c in row["costs"]],
             table_prior=[float(a) for a in row["fitted"].prior],
             calibration_records=int(row["fitted"].counts.sum()),
             calibration_ece=row["reliability"]["ece"],
             calibration_heldout_records=row["reliability"]["records"])
  for name in ("fixed", "adaptive"):
    spec_n = sum(med[dname, rule, name, i, n] for i in p)
    spec_1 = sum(med[dname, rule, name, i, 1] for i in p)
    runs = row["runs"][name]
    rounds = int(sum(np.sum(r.stats.target_calls) for r in runs))
    gammas = np.sum([np.asarray(r.stats.gamma_counts).sum(0) for r in runs], axis=0)
    out[name] = dict(speedup_decode=(gen_n - gen_1) / (spec_n - spec_1),
                     speedup_end_to_end=gen_n / spec_n, rounds=rounds,
                     tau=(sum(int(np.sum(r.stats.accepted)) for r in runs) + rounds) / rounds,
                     gamma_share=[float(g) / max(rounds, 1) for g in gammas])
  return out


def print_table(rows: list) -> None:
  print(f"{FLAGS.target}, {FLAGS.param_dtype} weights, batch 1, {rows[0]['prompts']} prompts "
        f"x {FLAGS.max_new_tokens} new tokens, K = {FLAGS.k}\n")
  print("| T | drafter | rule | c(0..K) | ECE | fixed tau | fixed decode | cost-aware tau | "
        "cost-aware decode | cost-aware end to end | share of rounds at n = 0..K |")
  print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---|")
  for r in rows:
    f, a = r["fixed"], r["adaptive"]
    print(f"| {r['temperature']:g} | {r['drafter']} | {r['rule']} | "
          f"{' '.join(f'{c:.2f}' for c in r['round_cost'])} | {r['calibration_ece']:.3f} | "
          f"{f['tau']:.2f} | {f['speedup_decode']:.2f}x | {a['tau']:.2f} | "
          f"{a['speedup_decode']:.2f}x | {a['speedup_end_to_end']:.2f}x | "
          f"{' '.join(f'{s:.2f}' for s in a['gamma_share'])} |")


def main(_):
  from benchmarks.common import call_timer, interleaved_medians
  from specjax import compiled_code, provenance
  from specjax.decoding.autoregressive import generate
  from specjax.distributions import SamplingConfig
  from experiments.common import cli
  rows_spec = round_cost.parse_rows(FLAGS.rows)
  cli.apply_decision_flag()  # before anything is measured
  stamp = provenance.stamp()
  st = round_cost.load_setup()
  cal = calibration_prompts(st)
  out_rows = []
  n = FLAGS.max_new_tokens
  cache_len = st.bucket + n + FLAGS.k + 1
  forward = forward_profile(st, cache_len)
  # Each phase's programs are dropped before the next (SmolLM2's unrolled programs
  # fill the process's memory maps otherwise); none is dropped while timing.
  compiled_code.release_compiled_programs()
  for temp in map(float, FLAGS.temperatures):
    samp = SamplingConfig(temperature=temp)
    rows = {}
    for d, r in rows_spec:
      rows[d, r] = calibrate_row(st, d, r, samp, cal, forward)
      compiled_code.release_compiled_programs()
    built = {key: build_row(st, row, samp) for key, row in rows.items()}
    gen = lambda p, m: generate(st.target, st.target_params, [p], max_new_tokens=m,
                                sampling=samp, key=st.key, eos_token_id=None,
                                cache_length=cache_len, prompt_bucket=st.bucket)
    timers = {}
    for i, p in enumerate(st.prompts):
      timers["gen", i, n], timers["gen", i, 1] = call_timer(gen, p, n), call_timer(gen, p, 1)
    for (d, r), row in built.items():
      timers.update({(d, r) + key: t for key, t in row["timers"].items()})
    load0 = os.getloadavg()[0]
    med = interleaved_medians(timers, FLAGS.repeats)
    load1 = os.getloadavg()[0]
    gen_n = sum(med["gen", i, n] for i in range(len(st.prompts)))
    gen_1 = sum(med["gen", i, 1] for i in range(len(st.prompts)))
    for (d, r), row in built.items():
      out_rows.append({**row_result(temp, d, r, med, row, gen_n, gen_1),
                       "load_before": load0, "load_after": load1})
    del built, timers
    compiled_code.release_compiled_programs()
  print_table(out_rows)
  if FLAGS.output:
    from benchmarks.records import write_record
    record = provenance.stamped(dict(benchmark="adaptive_length", target=FLAGS.target,
                                     param_dtype=FLAGS.param_dtype,
                                     calibration_prompts=FLAGS.calibration_prompts,
                                     rows=out_rows), stamp, dict(st.model_set.sources))
    write_record(FLAGS.output, record)


if __name__ == "__main__":
  define_flags()
  app.run(main)
