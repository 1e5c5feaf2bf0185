r"""Rolled or unrolled layers: compile time against run time, per model.

``Model.layer_stack`` chooses how the decode loops run a model's layer stack
(``specjax.models.transformer``): *rolled* (``lax.scan`` over the stacked
weights: one compiled layer body) or *unrolled* (per-layer weights, L copies of
the body).  Unrolling costs compile time; on XLA:CPU it saves the copy of
every weight matrix out of the stacked array that a scanned forward makes.
This benchmark measures both sides for target-only ``generate()`` and the
speculative loop (draft LM chain of ``--k`` drafts, lossless, T = 0), target and
draft in the same mode, batch 1, one held-out prompt, EOS off:

* *first call*: wall seconds of the first call (tracing + compiling + one
  run) and the process CPU seconds it used (compiling is mostly one thread,
  so CPU seconds move less with background load than wall seconds);
* *run*: median wall seconds of ``--repeats`` further calls, the modes timed
  round-robin so both see the same background load.

The persistent compilation cache is off, so every first call compiles.  The
record (``--output``) carries the command, commit, machine load and model
hashes; ``python -m experiments.render_results`` renders its table into
benchmarks/RESULTS.md.

  python -m benchmarks.layer_stack                          # default + SmolLM2
  python -m benchmarks.layer_stack --models=default --repeats=3
"""

from __future__ import annotations

import dataclasses
import json
import time

from absl import app

from benchmarks.records import write_record
from experiments.common import knobs, specs

MODES = ("rolled", "unrolled")


@dataclasses.dataclass(frozen=True)
class LayerStackSpec:
  """The model sets timed."""
  models: tuple[str, ...] = knobs.knob(("default", "smollm2-135m-instruct"), "model sets "
                                       "(experiments.common.model_sets.load_model_set names) "
                                       "with a draft LM, comma-separated")

  def __post_init__(self):
    if not self.models:
      raise knobs.KnobError("models", self.models, "name at least one model set")


SPECS = knobs.Specs(specs.NewTokensSpec, specs.ChainSpec, specs.TimingSpec, specs.OutputSpec,
                    LayerStackSpec,
                    presets=dict(max_new_tokens=64, k=4, repeats=5,
                                 output="benchmarks/results/layer_stack.json"))


@dataclasses.dataclass(frozen=True)
class Run:
  """This benchmark's specs, by name."""
  new_tokens: specs.NewTokensSpec
  chain: specs.ChainSpec
  timing: specs.TimingSpec
  output: specs.OutputSpec
  bench: LayerStackSpec


def define_flags():
  """The flags of this binary, defined on its main path only."""
  SPECS.define()


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  r = Run(*SPECS.build())
  if r.new_tokens.max_new_tokens < 2:
    raise app.UsageError(str(knobs.KnobError("max_new_tokens", r.new_tokens.max_new_tokens,
                                             "must be an integer >= 2")))
  return r


def _workloads(r: Run, ms, prompts):
  """``{name: call(mode) -> tokens}`` for one model set; each mode has its own
  Model objects (a distinct static argument, so a distinct compile)."""
  import dataclasses

  from specjax import verifiers
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.drafter_factory import DraftSources, make_drafter
  from specjax.decoding.speculative import speculative_generate
  from specjax.distributions import SamplingConfig

  greedy = SamplingConfig(temperature=0.0)
  n = r.new_tokens.max_new_tokens
  models = {m: (dataclasses.replace(ms.target, layer_stack=m),
                dataclasses.replace(ms.draft, layer_stack=m)) for m in MODES}

  def gen(mode):
    return generate(models[mode][0], ms.target_params, prompts, max_new_tokens=n,
                    sampling=greedy, eos_token_id=None).tokens

  drafters = {m: make_drafter("chain", greedy, DraftSources.build(
      models[m][0], ms.target_params, models[m][1], ms.draft_params), num_draft=r.chain.k)
      for m in MODES}

  def spec(mode):
    drafter, draft_params = drafters[mode]
    return speculative_generate(models[mode][0], ms.target_params, drafter, draft_params,
                                verifiers.get("lossless"), prompts, max_new_tokens=n,
                                sampling=greedy, eos_token_id=None).tokens
  return {"generate": gen, "speculative": spec}


def _measure(call, modes, repeats):
  """First-call (wall, CPU) seconds per mode, then ``repeats`` round-robin runs."""
  import jax
  import numpy as np
  out, tokens = {}, {}
  for mode in modes:
    w0, c0 = time.perf_counter(), time.process_time()
    tokens[mode] = np.asarray(jax.block_until_ready(call(mode)))
    out[mode] = {"first_call_s": time.perf_counter() - w0,
                 "first_call_cpu_s": time.process_time() - c0, "runs_s": []}
  for _ in range(repeats):
    for mode in modes:
      w0 = time.perf_counter()
      jax.block_until_ready(call(mode))
      out[mode]["runs_s"].append(time.perf_counter() - w0)
  for mode in modes:
    out[mode]["run_s"] = float(np.median(out[mode]["runs_s"]))
  same = all(np.array_equal(tokens[modes[0]], tokens[m]) for m in modes[1:])
  return out, same


def main(argv):
  del argv
  r = build_run()
  import jax
  jax.config.update("jax_enable_compilation_cache", False)

  from experiments.common.model_sets import load_model_set
  from experiments.common.prompts import load_eval_prompts
  from specjax import provenance
  stamp = provenance.stamp()
  rows = []
  for name in r.bench.models:
    ms = load_model_set(name, draft="draft", eagle="")
    if ms.draft is None:
      raise app.UsageError(f"--models entry {name!r} has no draft LM")
    if ms.is_chat:
      from experiments.common.prompts import load_chat_prompts
      prompts = [list(p.ids) for p in load_chat_prompts(ms.encode_chat, 1, sets=("sharegpt",))]
    else:
      prompts = [list(p.ids) for p in load_eval_prompts(1, tokenizer=ms.tokenizer)]
    for workload, call in _workloads(r, ms, prompts).items():
      res, same = _measure(call, MODES, r.timing.repeats)
      row = {"model": name, "workload": workload, "layers": ms.target.config.num_hidden_layers,
             "draft_layers": ms.draft.config.num_hidden_layers, "same_tokens": same,
             "modes": res, "sources": ms.sources, "target_sha256": ms.sha256}
      rows.append(row)
      print(json.dumps({k: v for k, v in row.items() if k not in ("sources", "target_sha256")}),
            flush=True)
  record = {"benchmark": "layer_stack", "max_new_tokens": r.new_tokens.max_new_tokens,
            "num_draft": r.chain.k, "repeats": r.timing.repeats, "batch": 1,
            "provenance": provenance.finish(stamp), "rows": rows}
  if r.output.output:
    write_record(r.output.output, record)


if __name__ == "__main__":
  define_flags()
  app.run(main)
