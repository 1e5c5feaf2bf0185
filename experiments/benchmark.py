r"""The main job: target-only generation vs speculative decoding with the main
verifiers, on the embedded default models (or any HF checkpoints), on a CPU in
a few minutes.

    python -m experiments.benchmark                       # defaults
    python -m experiments.benchmark --verifiers="lossless,mars:theta=0.85" \
        --drafters=chain --k=6 --temperatures=1 --num_prompts=16 --batch_size=8
    python -m experiments.benchmark --target_dir=/path/to/hf_target \
        --draft_dir=/path/to/hf_draft --mesh_data=8

Prints one table (tau, speedup over ``generate()`` measured side by side in the
same run, relaxed-acceptance rate, quality against the target: log-likelihood
per token, parse fraction, agreement with target greedy at T = 0, first-token
KL to the matched baseline at T > 0) and writes ``benchmark.jsonl``,
``benchmark.md`` and ``benchmark.png`` to ``--output_dir``.  The rows are
evaluated by :mod:`experiments.compare_verifiers` (one definition of every
metric); a rerun resumes, skipping finished rows.
"""

from __future__ import annotations

import os

from absl import app, flags, logging

FLAGS = flags.FLAGS
flags.DEFINE_string("target_dir", "", "HF checkpoint dir of the target (default: embedded target)")
flags.DEFINE_string("draft_dir", "", "HF checkpoint dir of the draft LM (default: embedded draft)")
flags.DEFINE_string("eagle_dir", "", "trained EAGLE head dir (default: the embedded EAGLE-3 head "
                    "when present; 'none' disables)")
flags.DEFINE_string("verifiers", "lossless, greedy, mars:theta=0.9",
                    "comma-separated rules, each name[:hparam=value[:...]]")
flags.DEFINE_list("drafters", ["chain", "eagle_tree"],
                  "any of: chain (independent draft LM), tree (static tree of the draft LM), "
                  "eagle_chain, eagle_tree (EAGLE head, EAGLE-2 dynamic tree; skipped when no "
                  "head is available)")
flags.DEFINE_integer("k", 4, "draft length K for chains")
flags.DEFINE_string("tree_paths", "[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1], "
                    "[0, 0, 0, 0]]", "static tree as a JSON list of rank paths")
flags.DEFINE_list("temperatures", ["0", "1"], "sampling temperatures")
flags.DEFINE_integer("num_prompts", 8, "held-out code prompts")
flags.DEFINE_integer("batch_size", 0, "rows per call (0 = all prompts in one batch)")
flags.DEFINE_integer("max_new_tokens", 48, "tokens generated per prompt")
flags.DEFINE_integer("repeats", 2, "paired timing repeats (median)")
flags.DEFINE_integer("mesh_data", 0, "data-parallel devices (0 = no mesh, plain jit)")
flags.DEFINE_integer("mesh_model", 1, "tensor-parallel devices for the target params")
flags.DEFINE_boolean("kl", True, "first-token KL to the matched baseline at T > 0")
flags.DEFINE_string("output_dir", "outputs/benchmark", "where JSONL / markdown / PNG go")


def _validate_flags() -> None:
  """Every flag checked before any model loads (compare_verifiers.validate_config
  checks the assembled config on top)."""
  from experiments.compare_verifiers import DRAFTERS
  from specjax.checks import check_int
  bad = [d for d in FLAGS.drafters if d not in DRAFTERS]
  if bad:
    raise app.UsageError(f"--drafters: {bad} unknown; choose from {', '.join(DRAFTERS)}")
  for t in FLAGS.temperatures:
    try:
      if not float(t) >= 0:
        raise ValueError
    except ValueError:
      raise app.UsageError(f"--temperatures: {t!r} is not a number >= 0 (e.g. "
                           f"--temperatures=0,1)") from None
  for name, low in (("k", 1), ("num_prompts", 1), ("max_new_tokens", 1), ("repeats", 1),
                    ("batch_size", 0), ("mesh_data", 0), ("mesh_model", 1)):
    try:
      check_int(f"--{name}", getattr(FLAGS, name), low=low)
    except ValueError as e:
      raise app.UsageError(str(e)) from None
  for name in ("target_dir", "draft_dir"):
    path = getattr(FLAGS, name)
    if path and not os.path.isdir(path):
      raise app.UsageError(f"--{name}={path!r} is not a directory")
  if FLAGS.eagle_dir not in ("", "none") and not os.path.isdir(FLAGS.eagle_dir):
    raise app.UsageError(f"--eagle_dir={FLAGS.eagle_dir!r} is not a directory (or 'none')")
  if os.path.exists(FLAGS.output_dir) and not os.path.isdir(FLAGS.output_dir):
    raise app.UsageError(f"--output_dir={FLAGS.output_dir!r} is a file; give a directory")


def _config():
  from experiments.configs import compare
  _validate_flags()
  c = compare.get_config()
  c.name = "benchmark"
  c.workdir = FLAGS.output_dir
  c.rules = FLAGS.verifiers
  c.drafters = tuple(d for d in FLAGS.drafters if not d.startswith("eagle"))
  c.num_draft = FLAGS.k
  c.tree_paths = FLAGS.tree_paths
  c.temperatures = tuple(float(t) for t in FLAGS.temperatures)
  c.matched_baselines = False
  c.data.num_prompts = FLAGS.num_prompts
  c.data.batch_size = FLAGS.batch_size
  c.data.max_new_tokens = FLAGS.max_new_tokens
  c.timing.repeats = FLAGS.repeats
  c.kl.enabled = FLAGS.kl
  c.eagle_dir = _eagle_dir()
  # Changing models must not reuse stale rows: fold the model dirs into the run settings.
  c.models = "default" if not (FLAGS.target_dir or FLAGS.draft_dir) else \
      f"dirs:{FLAGS.target_dir}|{FLAGS.draft_dir}"
  return c


def _eagle_dir() -> str:
  if FLAGS.eagle_dir == "none":
    return ""
  if FLAGS.eagle_dir:
    return FLAGS.eagle_dir
  if FLAGS.target_dir:  # an embedded head only fits the embedded target
    return ""
  from specjax.models.defaults import assets_dir
  for name in ("eagle3", "eagle1"):
    path = os.path.join(assets_dir(), name)
    if os.path.isfile(os.path.join(path, "config.json")):
      return path
  return ""


def _context(c):
  """compare_verifiers.Context with the requested checkpoints and mesh."""
  from experiments import compare_verifiers as cv
  from experiments.prompts import load_eval_prompts
  from specjax.data.corpus import CorpusConfig
  from specjax.decoding import parallel
  from specjax.models import defaults, hf

  t_dir = FLAGS.target_dir or defaults.default_model_dir("target")
  d_dir = FLAGS.draft_dir or defaults.default_model_dir("draft")
  target, tp = hf.load_pretrained(t_dir)
  draft, dp = hf.load_pretrained(d_dir)
  tok = hf.load_tokenizer(t_dir)
  if draft.config.vocab_size != target.config.vocab_size:
    raise ValueError(f"vocab mismatch: target {t_dir} has vocab_size={target.config.vocab_size}, "
                     f"draft {d_dir} has {draft.config.vocab_size}")
  d = c.data
  prompts = load_eval_prompts(d.num_prompts, tokenizer=tok, max_tokens=d.max_prompt_tokens,
                              min_tokens=d.min_prompt_tokens, seed=d.prompt_seed,
                              corpus=CorpusConfig(root=d.root, heldout_fraction=d.heldout_fraction,
                                                  split_seed=d.split_seed))
  mesh = None
  if FLAGS.mesh_data:
    mesh = parallel.make_mesh(FLAGS.mesh_data, FLAGS.mesh_model)
    tp = parallel.shard_params(tp, mesh)
  eagle = None
  if c.eagle_dir:
    from specjax.decoding.eagle_drafter import EagleDrafter
    from specjax.models.eagle import load_eagle
    head, hp, d2t = load_eagle(c.eagle_dir, target.config)[:3]
    eagle = (head, EagleDrafter.make_params(hp, target, tp, d2t))
  return cv.Context(c, target, tp, draft, dp, tok, prompts, eagle, mesh=mesh)


def run() -> dict:
  """Entry point (also the ``specjax-bench`` console script)."""
  from experiments import compare_verifiers as cv
  c = _config()
  from experiments.compare_verifiers import parse_rules, validate_config
  try:
    validate_config(c)
    parse_rules(c.rules)
  except ValueError as e:  # TypeError-like ArgumentTypeError is a ValueError too
    raise app.UsageError(f"--verifiers / flags: {e}") from None
  wanted = set(FLAGS.drafters) | {"-"}
  if not c.eagle_dir and any(d.startswith("eagle") for d in FLAGS.drafters):
    logging.warning("no EAGLE head available: skipping drafters %s",
                    [d for d in FLAGS.drafters if d.startswith("eagle")])
  rows = [r for r in cv.default_rows(c) if r["drafter"] in wanted]
  ctx = _context(c)
  records, path = cv.run_rows(c, rows, ctx=ctx)
  files = cv.write_reports(c, records, c.name, "main verifiers")
  print()
  print(cv.markdown_table(records))
  print(f"\nwrote {path}, {files['markdown']}, {files['figure']}")
  return {"records": records, "jsonl": path, **files}


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  run()


def _console():
  app.run(main)


if __name__ == "__main__":
  app.run(main)
