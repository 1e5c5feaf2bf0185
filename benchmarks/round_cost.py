r"""Where one speculative round's time goes, in target decode steps, per drafter and rule;
and the decode-phase speedup beside the end-to-end one.

For each (temperature, drafter, rule), batch 1, on the main job's held-out chat
prompts (ShareGPT and HumanEval, one prompt per call, EOS off so every call emits
exactly ``--max_new_tokens``), with ``n = --max_new_tokens``:

    step    = (gen(n) - gen(1)) / (n - 1)           target-only decode step
    round   = (spec(n) - spec(1)) / rounds          one speculative loop iteration
    draft   = one draft step and its commit         (benchmarks.common.draft_timer)
    verify  = the target forward over what the rounds verified: each round's length
              (a chain: its verify bucket + 1 -- K + 1 without buckets; a tree: N + 1)
              timed by benchmarks.common.forward_timer, averaged over the rounds
    other   = round - draft - verify                the rule, the commits, the loop

all in units of ``step``, where ``gen(m)`` / ``spec(m)`` is the wall time of
target-only / speculative generation of m tokens (the m = 1 call is the prefill and
the first token: the decode phase is the difference).  Speedups: decode phase
``(gen(n) - gen(1)) / (spec(n) - spec(1))``, end to end ``gen(n) / spec(n)``, both
summed over the prompts.  Every timer runs once per round, round-robin
(``interleaved_medians``), and reports the median of ``--repeats`` rounds; forwards
are timed at the prompts' mean context + n / 2 in the loops' cache length.

``--param_dtype=bfloat16`` runs everything -- target-only included -- with the
target's weights in bfloat16 (``cast_weights``: float32 activations and
accumulation), the comparison that option calls for.

    python -m benchmarks.round_cost                      # float32, T = 0, 4 prompts
    python -m benchmarks.round_cost --param_dtype=bfloat16 \
        --output=benchmarks/results/round_cost/smollm2_bfloat16.json
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from absl import app
import numpy as np

from experiments.common import cli, knobs, specs

RULES = {"lossless": {}, "mars": {"theta": 0.9}}  # the main job's two rules
ROWS = ("lookup_chain:lossless", "suffix_tree:24:lossless", "lm_chain:lossless",
        "eagle3_chain:lossless", "eagle3_chain:mars", "eagle3_tree:24:lossless")


def row_problem(entry: str) -> str:
  """What is wrong with a ``DRAFTER:RULE`` entry ('' if nothing)."""
  from benchmarks.speculative import drafter_name_problem
  drafter, _, rule = entry.rpartition(":")
  if not drafter or rule not in RULES:
    return f"must be DRAFTER:RULE with RULE one of {sorted(RULES)}"
  problem = drafter_name_problem(drafter)
  return f"has drafter {drafter!r}, which {problem}" if problem else ""


@dataclasses.dataclass(frozen=True)
class RoundCostSpec:
  """The rows timed: drafter entries (as ``benchmarks.speculative --loop_drafters``)
  with a verification rule. A preset, so a binary built on this one
  (benchmarks/adaptive_length.py) states its own rows."""
  rows: tuple[str, ...] = knobs.knob(help="DRAFTER:RULE entries (drafters as "
                                     "benchmarks.speculative --loop_drafters; rules: lossless, "
                                     "mars (theta 0.9))", preset=True)

  def __post_init__(self):
    if not self.rows:
      raise knobs.KnobError("rows", (), "give at least one DRAFTER:RULE entry")
    for entry in self.rows:
      problem = row_problem(entry)
      if problem:
        raise knobs.KnobError("rows", self.rows, f"entry {entry!r} {problem}")


SPECS = knobs.Specs(
    specs.ModelSpec, specs.ParamDtypeSpec, RoundCostSpec, specs.TemperaturesSpec,
    specs.ChainSpec, specs.PromptSpec, specs.NumPromptsSpec, specs.NewTokensSpec,
    specs.TimingSpec, specs.OutputSpec,
    presets=dict(model="smollm2-135m-instruct", rows=ROWS, temperatures=(0.0,), k=4,
                 num_prompts=4, max_new_tokens=64, repeats=3, output=""))


@dataclasses.dataclass(frozen=True)
class Run:
  """The benchmark's specs, by name (:func:`load_setup` reads ``model``, ``param_dtype``,
  ``rows``, ``prompts``, ``num_prompts`` and ``new_tokens``)."""
  model: specs.ModelSpec
  param_dtype: specs.ParamDtypeSpec
  rows: RoundCostSpec
  temperatures: specs.TemperaturesSpec
  chain: specs.ChainSpec
  prompts: specs.PromptSpec
  num_prompts: specs.NumPromptsSpec
  new_tokens: specs.NewTokensSpec
  timing: specs.TimingSpec
  output: specs.OutputSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()
  from experiments.common import cli
  cli.define_decision_flag()


def check_run(r) -> None:
  """The checks across specs (``app.UsageError``): a real chat model, prompts, two or
  more new tokens (a decode step is (gen(n) - gen(1)) / (n - 1))."""
  try:
    if r.model.is_default:
      raise knobs.KnobError("model", r.model.model, "times chat prompts: give a real chat "
                            "model, e.g. smollm2-135m-instruct")
    knobs.check_int(r.num_prompts, "num_prompts", 1)
    knobs.check_int(r.new_tokens, "max_new_tokens", 2)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  r = Run(*SPECS.build())
  check_run(r)
  from experiments.common import cli
  cli.apply_decision_flag()  # --decision: refuse a dirty tree, before anything is measured
  return r


def parse_rows(entries) -> list[tuple[str, str]]:
  """``[(drafter, rule)]`` of ``--rows``; ``UsageError`` naming a bad entry."""
  rows = []
  for entry in entries:
    problem = row_problem(entry)
    if problem:
      raise app.UsageError(f"--rows entry {entry!r} {problem}")
    drafter, _, rule = entry.rpartition(":")
    rows.append((drafter, rule))
  return rows


def verify_lengths(drafter, gamma_counts) -> dict[int, int]:
  """``{forward length: rounds}`` of a batch-1 run from its ``gamma_counts [1, G+1]``:
  a tree verifies N + 1 tokens every round; a chain ``bucket(gamma) + 1``, the
  smallest of ``drafter.verify_buckets`` covering gamma (K without buckets)."""
  counts = np.asarray(gamma_counts).sum(0)
  if drafter.tree:
    return {drafter.tokens_per_step: int(counts.sum())}
  buckets = sorted(drafter.verify_buckets or (drafter.num_draft,))
  out: dict[int, int] = {}
  for g, c in enumerate(counts):
    if c:
      n = next(b for b in buckets if b >= g)
      out[n + 1] = out.get(n + 1, 0) + int(c)
  return out


@dataclasses.dataclass
class Setup:
  """What every row of one temperature shares: the target (weights as run), its
  decode-form params, the prompts, the cache and prompt bucket, the forwards'
  context, and the sampling key."""

  model_set: Any
  target: Any
  target_params: Any
  decoded: Any
  prompts: list
  bucket: int
  ctx: int
  key: Any


def load_setup(r) -> Setup:
  """The :class:`Setup` of a run's specs ``r`` (:class:`Run`, or any object with its
  ``model``, ``param_dtype``, ``rows``, ``prompts``, ``num_prompts`` and ``new_tokens``)."""
  import jax

  from experiments.common.model_sets import load_model_set
  from experiments.common.prompts import load_chat_prompts
  from specjax.models.transformer import cast_weights
  from specjax.decoding.drafter_factory import needs
  needs_eagle = any(needs(d.partition(":")[0]) == "eagle" for d, _ in parse_rows(r.rows.rows))
  ms = load_model_set(r.model.model, eagle="eagle3" if needs_eagle else "")
  target, tp = ms.target, ms.target_params
  param_dtype = r.param_dtype.param_dtype
  if param_dtype != "float32":
    target, tp = cast_weights(target, tp, param_dtype)
  prompts = [list(p.ids) for p in load_chat_prompts(
      ms.encode_chat, r.num_prompts.num_prompts, sets=r.prompts.prompt_sets,
      max_tokens=r.prompts.max_prompt_tokens)]
  return Setup(ms, target, tp, target.decode_params(tp),  # decoded once: a timer copies
               prompts, max(len(p) for p in prompts),
               int(np.mean([len(p) for p in prompts])) + r.new_tokens.max_new_tokens // 2,
               jax.random.key(0))


def build_timers(r: Run, st: Setup, rows_spec, samp) -> tuple[dict, dict, dict]:
  """``(timers, runs, lengths)``: every timer of one temperature (target-only and
  speculative calls per prompt at n and 1 tokens, each drafter's step, the target
  forward at every length the rounds verified), the speculative results of the
  n-token runs, and per row ``{verify length: rounds}``."""
  from benchmarks.common import call_timer, draft_timer, forward_timer
  from benchmarks.speculative import make_drafter
  from specjax import verifiers
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.prompts import prepare_prompts
  from specjax.decoding.speculative import speculative_generate
  from specjax.models.transformer import Model
  n, ms, target, tp = r.new_tokens.max_new_tokens, st.model_set, st.target, st.target_params
  drafters = {d: make_drafter(d, r.chain.k, samp, ms.draft, ms.draft_params, target, tp, ms)
              for d in dict.fromkeys(d for d, _ in rows_spec)}
  cache_len = st.bucket + n + max(dr.tokens_per_step for dr, _ in drafters.values())
  common = dict(sampling=samp, key=st.key, eos_token_id=None, cache_length=cache_len,
                prompt_bucket=st.bucket)
  gen = lambda p, m: generate(target, tp, [p], max_new_tokens=m, **common)
  timers, runs, lengths = {}, {}, {}
  for i, p in enumerate(st.prompts):
    timers["gen", i, n], timers["gen", i, 1] = call_timer(gen, p, n), call_timer(gen, p, 1)
  for dname, rule in rows_spec:
    drafter, dparams = drafters[dname]
    verifier = verifiers.get(rule, **RULES[rule])
    spec = lambda p, m, d=drafter, dp=dparams, v=verifier: speculative_generate(
        target, tp, d, dp, v, [p], max_new_tokens=m, **common)
    runs[dname, rule] = [spec(p, n) for p in st.prompts]
    for i, p in enumerate(st.prompts):
      timers[dname, rule, i, n], timers[dname, rule, i, 1] = (call_timer(spec, p, n),
                                                              call_timer(spec, p, 1))
    t_target = target
    if drafter.target_hidden_layers:
      t_target = Model(target.config.replace(hidden_layers=tuple(drafter.target_hidden_layers)))
    p_tok, p_len = prepare_prompts(st.prompts[:1], target.config.vocab_size)
    timers["draft", dname] = draft_timer(drafter, dparams, t_target, tp, p_tok, p_len, cache_len)
    counted: dict[int, int] = {}
    for res in runs[dname, rule]:
      for length, c in verify_lengths(drafter, res.stats.gamma_counts).items():
        counted[length] = counted.get(length, 0) + c
    lengths[dname, rule] = counted
    for length in counted:
      if ("fwd", length) not in timers:
        timers["fwd", length] = forward_timer(target, st.decoded, 1, length, st.ctx, cache_len,
                                              inner=4)
  return timers, runs, lengths


def row_result(r: Run, temp: float, dname: str, rule: str, med: dict, runs: list, lengths: dict,
               num_prompts: int) -> dict:
  """One output row from the timers' medians (module docstring: step, round, draft,
  verify, other; the two speedups)."""
  n, p = r.new_tokens.max_new_tokens, range(num_prompts)
  gen_n, gen_1 = sum(med["gen", i, n] for i in p), sum(med["gen", i, 1] for i in p)
  step = (gen_n - gen_1) / (num_prompts * (n - 1))
  rounds = int(sum(np.sum(r.stats.target_calls) for r in runs))
  accepted = int(sum(np.sum(r.stats.accepted) for r in runs))
  spec_n = sum(med[dname, rule, i, n] for i in p)
  spec_1 = sum(med[dname, rule, i, 1] for i in p)
  round_s = (spec_n - spec_1) / rounds
  verify_s = sum(c * med["fwd", length] for length, c in lengths.items()) / rounds
  draft_s = med["draft", dname]
  return dict(temperature=temp, drafter=dname, rule=rule, k=r.chain.k, prompts=num_prompts,
              max_new_tokens=n, rounds=rounds, tau=(accepted + rounds) / rounds,
              step_ms=step * 1e3, round_steps=round_s / step, draft_steps=draft_s / step,
              verify_steps=verify_s / step, other_steps=(round_s - draft_s - verify_s) / step,
              verify_lengths={str(length): c for length, c in sorted(lengths.items())},
              speedup_decode=(gen_n - gen_1) / (spec_n - spec_1),
              speedup_end_to_end=gen_n / spec_n, prefill_share_target_only=gen_1 / gen_n)


def print_table(r: Run, rows: list, num_prompts: int) -> None:
  print(f"{r.model.model}, {r.param_dtype.param_dtype} weights, batch 1, {num_prompts} "
        f"prompts x {r.new_tokens.max_new_tokens} new tokens, K = {r.chain.k}\n")
  print("| T | drafter | rule | tau | round | draft | verify | other | speedup decode | "
        "speedup end to end |")
  print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
  for r in rows:
    print(f"| {r['temperature']:g} | {r['drafter']} | {r['rule']} | {r['tau']:.2f} | "
          f"{r['round_steps']:.2f} | {r['draft_steps']:.2f} | {r['verify_steps']:.2f} | "
          f"{r['other_steps']:.2f} | {r['speedup_decode']:.2f}x | "
          f"{r['speedup_end_to_end']:.2f}x |")
  print(f"\ncosts in target decode steps (step = {rows[0]['step_ms']:.1f} ms at T = "
        f"{rows[0]['temperature']:g})")


def run() -> None:
  """Time every row at every temperature, print the table, write ``--output``."""
  from benchmarks.common import interleaved_medians
  from specjax import provenance
  from specjax.distributions import SamplingConfig
  r = build_run()
  rows_spec = parse_rows(r.rows.rows)
  stamp = provenance.stamp()
  st = load_setup(r)
  out_rows = []
  for temp in r.temperatures.temperatures:
    timers, runs, lengths = build_timers(r, st, rows_spec, SamplingConfig(temperature=temp))
    load0 = os.getloadavg()[0]
    med = interleaved_medians(timers, r.timing.repeats)
    load1 = os.getloadavg()[0]
    for dname, rule in rows_spec:
      row = row_result(r, temp, dname, rule, med, runs[dname, rule], lengths[dname, rule],
                       len(st.prompts))
      out_rows.append({**row, "load_before": load0, "load_after": load1})
  print_table(r, out_rows, len(st.prompts))
  if r.output.output:
    from benchmarks.records import write_record
    record = provenance.stamped(dict(benchmark="round_cost", target=r.model.model,
                                     param_dtype=r.param_dtype.param_dtype, rows=out_rows),
                                stamp, dict(st.model_set.sources))
    write_record(r.output.output, record)


if __name__ == "__main__":
  cli.run_binary(run, define_flags=define_flags)
