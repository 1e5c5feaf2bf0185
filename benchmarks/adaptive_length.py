r"""Cost-aware draft length against fixed K, side by side, on this machine.

For each (temperature, drafter, rule) of ``--rows``, batch 1, SmolLM2:

``lookup_eagle_chain`` rows (``specjax.decoding.source_choice``) choose, per round
and row, between prompt lookup and the EAGLE chain: "fixed" is the choice without a
policy (lookup wherever it matched, K drafts), "cost-aware" the policy with one table
and cost curve per source (:func:`calibrate_sources`); the record holds each source's
share of the rounds.

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

import dataclasses
import os

from absl import app
import numpy as np

from benchmarks import round_cost
from experiments.common import cli, knobs, specs


SPECS = knobs.Specs(
    specs.ModelSpec, specs.ParamDtypeSpec, round_cost.RoundCostSpec, specs.TemperaturesSpec,
    specs.ChainSpec, specs.PromptSpec, specs.NumPromptsSpec, specs.NewTokensSpec,
    specs.TimingSpec, specs.ProfileSpec, specs.OutputSpec, specs.CalibrationPromptsSpec,
    presets=dict(model="smollm2-135m-instruct", calibration_prompts=8,
                 rows=("lookup_chain:lossless", "eagle3_chain:lossless", "eagle3_chain:mars"),
                 temperatures=(0.0, 1.0), k=4, num_prompts=4, max_new_tokens=64, repeats=3,
                 output=""))


@dataclasses.dataclass(frozen=True)
class Run:
  """This benchmark's specs, by name (round_cost.load_setup reads ``model``,
  ``param_dtype``, ``rows``, ``prompts``, ``num_prompts`` and ``new_tokens``)."""
  model: specs.ModelSpec
  param_dtype: specs.ParamDtypeSpec
  rows: round_cost.RoundCostSpec
  temperatures: specs.TemperaturesSpec
  chain: specs.ChainSpec
  prompts: specs.PromptSpec
  num_prompts: specs.NumPromptsSpec
  new_tokens: specs.NewTokensSpec
  timing: specs.TimingSpec
  profile: specs.ProfileSpec
  output: specs.OutputSpec
  calibration: specs.CalibrationPromptsSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only."""
  SPECS.define()
  cli.define_decision_flag()


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``; the
  cross-spec checks are round_cost's: a real chat model, prompts, n >= 2)."""
  r = Run(*SPECS.build())
  round_cost.check_run(r)
  return r


def calibration_prompts(r: Run, st) -> list:
  """The next prompts of the same sets, excluding the evaluation prompts."""
  from experiments.common.prompts import load_chat_prompts
  ms, p = st.model_set, r.prompts
  evals = load_chat_prompts(ms.encode_chat, r.num_prompts.num_prompts, sets=p.prompt_sets,
                            max_tokens=p.max_prompt_tokens)
  cal = load_chat_prompts(ms.encode_chat, r.calibration.calibration_prompts, sets=p.prompt_sets,
                          max_tokens=p.max_prompt_tokens, exclude={q.source for q in evals})
  return [list(q.ids) for q in cal]


def forward_profile(r: Run, st, cache_len: int) -> np.ndarray:
  """``forward(n + 1) / forward(1)``, n = 0..K: the target's verify forwards, shared
  by every row (module docstring, step 1), non-decreasing (timing noise removed)."""
  from benchmarks.common import forward_timer, interleaved_medians
  timers = {n: forward_timer(st.target, st.decoded, 1, n + 1, st.ctx, cache_len, inner=4)
            for n in range(r.chain.k + 1)}
  med = interleaved_medians(timers, r.profile.profile_repeats)
  return np.maximum.accumulate([med[n] / med[0] for n in range(r.chain.k + 1)])


def drafting_profile(r: Run, st, sources: dict, forward: np.ndarray,
                     cache_len: int):
  """A :class:`~specjax.policies.cost_profile.RoundCostProfile` of ``forward`` and each
  of ``sources`` (``{name: (drafter, params)}``): one drafting step of each, timed
  against the one-token forward round-robin (module docstring); the round cost curves
  are its ``round_cost`` / ``source_costs``."""
  from benchmarks.common import draft_timer, forward_timer, interleaved_medians
  from specjax.decoding.prompts import prepare_prompts
  from specjax.decoding.speculative import loop_target
  from specjax.policies.cost_profile import RoundCostProfile
  p_tok, p_len = prepare_prompts(st.prompts[:1], st.target.config.vocab_size)
  med = interleaved_medians({
      "step": forward_timer(st.target, st.decoded, 1, 1, st.ctx, cache_len, inner=4),
      **{name: draft_timer(d, dp, loop_target(st.target, d), st.target_params, p_tok, p_len,
                           cache_len) for name, (d, dp) in sources.items()}},
      r.profile.profile_repeats)
  return RoundCostProfile(
      r.chain.k, st.ctx, cache_len, med["step"], tuple(float(f) for f in forward),
      {name: med[name] / med["step"] for name in sources},
      {name: bool(d.gates_drafting) for name, (d, _) in sources.items()}, "")


def calibrate(r: Run, st, drafter, dparams, verifier, samp, prompts) -> tuple:
  """``(table, reliability)``: fitted on the first half of ``prompts``, ECE on the
  second, refitted on all (module docstring, step 2).  One batch of all prompts."""
  from specjax.policies import acceptance
  rec = acceptance.collect(st.target, st.target_params, drafter, dparams, verifier, prompts,
                           max_new_tokens=r.new_tokens.max_new_tokens, sampling=samp, key=st.key,
                           eos_token_id=None)
  return acceptance.fit_held_out(rec, drafter.num_draft, len(prompts))


def calibrate_row(r: Run, st, dname: str, rule: str, samp, cal_prompts, forward) -> dict:
  """The row's drafter, rule, cost curve and fitted acceptance table (steps 1-2); a
  drafter choosing between sources gets them per source (:func:`calibrate_sources`)."""
  from benchmarks.speculative import make_drafter
  from specjax import verifiers
  n, ms, target, tp = r.new_tokens.max_new_tokens, st.model_set, st.target, st.target_params
  drafter, dparams = make_drafter(dname, r.chain.k, samp, ms.draft, ms.draft_params, target, tp,
                                  ms)
  verifier = verifiers.get(rule, **round_cost.RULES[rule])
  cache_len = st.bucket + n + drafter.tokens_per_step
  if drafter.num_sources > 1:
    return calibrate_sources(r, st, drafter, dparams, verifier, samp, cal_prompts, forward,
                             cache_len)
  costs = drafting_profile(r, st, {dname: (drafter, dparams)}, forward,
                           cache_len).round_cost(dname)
  fitted, rel = calibrate(r, st, drafter, dparams, verifier, samp, cal_prompts)
  return dict(drafter=drafter, dparams=dparams, verifier=verifier, cache_len=cache_len,
              costs=costs, fitted=fitted, reliability=rel)


def calibrate_sources(r: Run, st, drafter, dparams, verifier, samp, cal_prompts, forward,
                      cache_len: int) -> dict:
  """Per source of a ``SourceChoiceDrafter`` (prompt lookup, the EAGLE chain): a table
  fitted on each source drafting alone, and the cost curves of the choosing drafter,
  which runs lookup and the chain's first step every round -- ``c_0(n) = forward(n+1) +
  lookup + chain / K`` for a lookup round, ``c_1(n) = forward(n+1) + lookup + chain
  max(n, 1) / K`` for a chain round (``lookup``, ``chain``: each source's drafting
  step alone, timed against the one-token forward round-robin: :func:`drafting_profile`,
  ``RoundCostProfile.source_costs``)."""
  params = {"first": None, "second": dparams["second"]}
  sources = (drafter.first, drafter.second)
  prof = drafting_profile(r, st, {name: (d, params[name])
                                  for name, d in zip(("first", "second"), sources)},
                          forward, cache_len)
  costs = prof.source_costs("first", "second")
  fits = [calibrate(r, st, d, params[name], verifier, samp, cal_prompts)
          for name, d in zip(("first", "second"), sources)]
  return dict(drafter=drafter, dparams=dparams, verifier=verifier, cache_len=cache_len,
              costs=costs, fitted=tuple(f for f, _ in fits),
              reliability=tuple(rel for _, rel in fits))


def policy_params(row: dict):
  """The cost-aware policy's params of a calibrated row (one table and curve per source
  for a drafter choosing between sources)."""
  from specjax.policies import cost_aware
  if isinstance(row["fitted"], tuple):
    return cost_aware.make_source_params(*[cost_aware.make_params(f.table(), c)
                                           for f, c in zip(row["fitted"], row["costs"])])
  return cost_aware.make_params(row["fitted"].table(), row["costs"])


def build_row(r: Run, st, row: dict, samp) -> dict:
  """Timers and runs of one row: fixed K and cost-aware, per prompt at n and 1 tokens."""
  from benchmarks.common import call_timer
  from specjax.decoding.speculative import speculative_generate
  from specjax.policies import cost_aware
  n, target, tp = r.new_tokens.max_new_tokens, st.target, st.target_params
  drafter, dparams, verifier = row["drafter"], row["dparams"], row["verifier"]
  policy = cost_aware.CostAwareLength(drafter.num_draft)
  params = policy_params(row)
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


def row_result(r: Run, temp, dname, rule, med, row, gen_n, gen_1) -> dict:
  """Speedups of fixed K and cost-aware over target-only, and the lengths used."""
  n, p = r.new_tokens.max_new_tokens, range(len(row["runs"]["fixed"]))
  several = isinstance(row["fitted"], tuple)
  fits = row["fitted"] if several else (row["fitted"],)
  costs = row["costs"] if several else (row["costs"],)
  rels = row["reliability"] if several else (row["reliability"],)
  per = lambda values: values if several else values[0]  # one value per source, or one
  out = dict(temperature=temp, drafter=dname, rule=rule, k=r.chain.k, prompts=len(p),
             max_new_tokens=n, round_cost=per([[float(x) for x in c] for c in costs]),
             table_prior=per([[float(a) for a in f.prior] for f in fits]),
             calibration_records=per([int(f.counts.sum()) for f in fits]),
             calibration_ece=per([rel["ece"] for rel in rels]),
             calibration_heldout_records=per([rel["records"] for rel in rels]))
  for name in ("fixed", "adaptive"):
    spec_n = sum(med[dname, rule, name, i, n] for i in p)
    spec_1 = sum(med[dname, rule, name, i, 1] for i in p)
    runs = row["runs"][name]
    rounds = int(sum(np.sum(res.stats.target_calls) for res in runs))
    gammas = np.sum([np.asarray(res.stats.gamma_counts).sum(0) for res in runs], axis=0)
    by_source = np.sum([np.asarray(res.stats.source_rounds).sum(0) for res in runs], axis=0)
    out[name] = dict(speedup_decode=(gen_n - gen_1) / (spec_n - spec_1),
                     speedup_end_to_end=gen_n / spec_n, rounds=rounds,
                     tau=(sum(int(np.sum(res.stats.accepted)) for res in runs) + rounds) / rounds,
                     gamma_share=[float(g) / max(rounds, 1) for g in gammas],
                     source_share=[float(g) / max(rounds, 1) for g in by_source])
  return out


def print_table(r: Run, rows: list) -> None:
  print(f"{r.model.model}, {r.param_dtype.param_dtype} weights, batch 1, "
        f"{rows[0]['prompts']} prompts x {r.new_tokens.max_new_tokens} new tokens, "
        f"K = {r.chain.k}\n")
  print("| T | drafter | rule | c(0..K) | ECE | fixed tau | fixed decode | cost-aware tau | "
        "cost-aware decode | cost-aware end to end | share of rounds at n = 0..K |")
  print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---|")
  for row in rows:
    f, a = row["fixed"], row["adaptive"]
    several = isinstance(row["calibration_ece"], list)
    cost = row["round_cost"][-1] if several else row["round_cost"]  # the model source's
    ece = max(row["calibration_ece"]) if several else row["calibration_ece"]
    print(f"| {row['temperature']:g} | {row['drafter']} | {row['rule']} | "
          f"{' '.join(f'{c:.2f}' for c in cost)} | {ece:.3f} | "
          f"{f['tau']:.2f} | {f['speedup_decode']:.2f}x | {a['tau']:.2f} | "
          f"{a['speedup_decode']:.2f}x | {a['speedup_end_to_end']:.2f}x | "
          f"{' '.join(f'{s:.2f}' for s in a['gamma_share'])} |")


def main(_):
  from benchmarks.common import call_timer, interleaved_medians
  from specjax import compiled_code, provenance
  from specjax.decoding.autoregressive import generate
  from specjax.distributions import SamplingConfig
  r = build_run()
  rows_spec = round_cost.parse_rows(r.rows.rows)
  cli.apply_decision_flag()  # before anything is measured
  stamp = provenance.stamp()
  st = round_cost.load_setup(r)
  cal = calibration_prompts(r, st)
  out_rows = []
  n = r.new_tokens.max_new_tokens
  cache_len = st.bucket + n + r.chain.k + 1
  forward = forward_profile(r, st, cache_len)
  # Each phase's programs are dropped before the next (SmolLM2's unrolled programs
  # fill the process's memory maps otherwise); none is dropped while timing.
  compiled_code.release_compiled_programs()
  for temp in r.temperatures.temperatures:
    samp = SamplingConfig(temperature=temp)
    rows = {}
    for d, rule in rows_spec:
      rows[d, rule] = calibrate_row(r, st, d, rule, samp, cal, forward)
      compiled_code.release_compiled_programs()
    built = {key: build_row(r, st, row, samp) for key, row in rows.items()}
    gen = lambda p, m: generate(st.target, st.target_params, [p], max_new_tokens=m,
                                sampling=samp, key=st.key, eos_token_id=None,
                                cache_length=cache_len, prompt_bucket=st.bucket)
    timers = {}
    for i, p in enumerate(st.prompts):
      timers["gen", i, n], timers["gen", i, 1] = call_timer(gen, p, n), call_timer(gen, p, 1)
    for (d, rule), row in built.items():
      timers.update({(d, rule) + key: t for key, t in row["timers"].items()})
    load0 = os.getloadavg()[0]
    med = interleaved_medians(timers, r.timing.repeats)
    load1 = os.getloadavg()[0]
    gen_n = sum(med["gen", i, n] for i in range(len(st.prompts)))
    gen_1 = sum(med["gen", i, 1] for i in range(len(st.prompts)))
    for (d, rule), row in built.items():
      out_rows.append({**row_result(r, temp, d, rule, med, row, gen_n, gen_1),
                       "load_before": load0, "load_after": load1})
    del built, timers
    compiled_code.release_compiled_programs()
  print_table(r, out_rows)
  if r.output.output:
    from benchmarks.records import write_record
    record = provenance.stamped(dict(benchmark="adaptive_length", target=r.model.model,
                                     param_dtype=r.param_dtype.param_dtype,
                                     calibration_prompts=r.calibration.calibration_prompts,
                                     rows=out_rows), stamp, dict(st.model_set.sources))
    write_record(r.output.output, record)


if __name__ == "__main__":
  define_flags()
  app.run(main)
