r"""Fit the acceptance tables the cost-aware policy reads and ship them with the
target's drafters (docs/spec.md §5; ``experiments/common/shipped_tables.py``).

For every temperature, rule and source (prompt lookup, the EAGLE chain), ordinary
speculative decoding with every draft verified runs on ``--calibration_prompts``
held-out chat prompts, disjoint from the first ``--evaluation_prompts`` of the same
sets (every evaluation prompt of the main job and the speed records), and records
one entry per draft position the verifier reached
(``specjax.policies.acceptance.collect``).  The table (10 confidence bins per
position, smoothed towards each position's rate) is fitted on the first half of
the prompts and its calibration error (ECE) read on the second half, then refitted
on all; the file keeps both, with the command, commit and weight hashes.

    python -m experiments.calibrate_acceptance        # SmolLM2: K = 4, T = 0 and 1,
                                                      # lossless and MARS (theta 0.9)
"""

from __future__ import annotations

import dataclasses

from absl import app
import numpy as np

from experiments.common import cli, knobs, specs


@dataclasses.dataclass(frozen=True)
class CalibrateAcceptanceSpec:
  """Which tables, from which prompts."""
  sources: tuple[str, ...] = knobs.knob(
      ("lookup_chain", "eagle_chain"), "drafting sources whose tables are fitted (the "
      "sources of lookup_eagle_chain)")

  def __post_init__(self):
    from experiments.common.shipped_tables import SOURCES
    knobs.check_subset(self, "sources", SOURCES)


SPECS = knobs.Specs(specs.ModelSpec, specs.ChainSpec, specs.RuleSpec, specs.TemperaturesSpec,
                    specs.PromptSpec, specs.NewTokensSpec, specs.SeedSpec,
                    specs.CalibrationPromptsSpec, specs.EvaluationPromptsSpec,
                    CalibrateAcceptanceSpec,
                    presets=dict(model="smollm2-135m-instruct", k=4, temperatures=(0.0, 1.0),
                                 max_new_tokens=96, calibration_prompts=16))


@dataclasses.dataclass(frozen=True)
class Run:
  """This binary's specs, by name."""
  model: specs.ModelSpec
  chain: specs.ChainSpec
  rules: specs.RuleSpec
  temperatures: specs.TemperaturesSpec
  prompts: specs.PromptSpec
  new_tokens: specs.NewTokensSpec
  seed: specs.SeedSpec
  calibration: specs.CalibrationPromptsSpec
  held_out: specs.EvaluationPromptsSpec
  bench: CalibrateAcceptanceSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only."""
  SPECS.define()
  cli.define_decision_flag()


def build_run() -> Run:
  r = Run(*SPECS.build())
  if r.new_tokens.max_new_tokens < 2:
    raise app.UsageError(f"--max_new_tokens={r.new_tokens.max_new_tokens}: give at least 2")
  return r


def calibration_prompts(r: Run, ms) -> list:
  """The held-out prompts after the first ``--evaluation_prompts`` of the same sets."""
  from experiments.common.prompts import held_out_chat_prompts
  p = r.prompts
  return [list(q.ids) for q in held_out_chat_prompts(
      ms.encode_chat, r.calibration.calibration_prompts, after=r.held_out.evaluation_prompts,
      sets=p.prompt_sets, max_tokens=p.max_prompt_tokens)]


def fit_table(r: Run, ms, source: str, rule: str, hparams: dict, temperature: float,
              prompts: list) -> tuple:
  """``(fitted, reliability)`` of one table (module docstring)."""
  import jax

  from specjax import verifiers
  from specjax.decoding.drafter_factory import make_drafter
  from specjax.distributions import SamplingConfig
  from specjax.policies import acceptance
  samp = SamplingConfig(temperature=temperature)
  drafter, dparams = make_drafter(source, samp, ms.draft_sources(), num_draft=r.chain.k)
  rec = acceptance.collect(ms.target, ms.target_params, drafter, dparams,
                           verifiers.get(rule, **hparams), prompts,
                           max_new_tokens=r.new_tokens.max_new_tokens, sampling=samp,
                           key=jax.random.key(r.seed.seed))
  return acceptance.fit_held_out(rec, r.chain.k, len(prompts))


def main(_):
  from experiments.common.model_sets import load_model_set
  from experiments.common.rows import parse_rules
  from experiments.common.shipped_tables import table_metadata, table_path
  from specjax import provenance
  from specjax.policies import acceptance
  r = build_run()
  cli.apply_decision_flag()
  stamp = provenance.stamp()
  need_eagle = any(s != "lookup_chain" for s in r.bench.sources)
  ms = load_model_set(r.model.model, draft="", eagle="eagle3" if need_eagle else "")
  hashes = provenance.model_hashes(dict(ms.sources))
  prompts = calibration_prompts(r, ms)
  for t in r.temperatures.temperatures:
    for rule, hp in parse_rules(r.rules.verifiers):
      for source in r.bench.sources:
        fitted, rel = fit_table(r, ms, source, rule, hp, t, prompts)
        meta = dict(table_metadata(hashes, source, rule, hp, t, r.chain.k),
                    reliability=rel, prompts=len(prompts),
                    max_new_tokens=r.new_tokens.max_new_tokens,
                    provenance=provenance.finish(stamp))
        path = table_path(ms.name, source, rule, hp, t, r.chain.k)
        acceptance.save(path, fitted, meta)
        print(f"T={t:g} {rule}{hp or ''} {source}: {int(fitted.counts.sum())} records, prior "
              f"{np.round(fitted.prior, 3).tolist()}, held-out ECE {rel['ece']:.3f} -> {path}",
              flush=True)


if __name__ == "__main__":
  define_flags()
  app.run(main)
