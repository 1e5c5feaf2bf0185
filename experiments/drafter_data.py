r"""Which text should a drafter learn from? The controlled comparison of training data.

The same EAGLE-3 head, steps and schedule, trained on equal counts of target
tokens (positions whose next token is an assistant token) from

* ``sharegpt``: ShareGPT conversations as written (ChatGPT's answers;
  ``experiments/extract_features.py``),
* ``onpolicy``: the same kind of conversations answered by the target itself
  (``experiments/generate_onpolicy.py``; greedy, T = 0.7 and T = 1 shards),
* ``mix``: half the budget from each,

then measured on what decoding needs:

1. held-out top-1 agreement with the target per draft position (the head's
   training-time test, positions 0..4) on held-out windows of *both* stores --
   the same conversations are held out in both (hashed conversation ids) -- with
   95% bootstrap intervals over held-out batches;
2. tau with lossless verification for the EAGLE-3 chain (K = 4) and the dynamic
   tree, at T = 0 and T = 1, on held-out ShareGPT and HumanEval chat prompts
   (never in either store), with paired bootstrap intervals over prompts for
   each arm against ``sharegpt`` and the minimum detectable gain at 80% power.

    python -m experiments.extract_features --max_tokens=150000     # ShareGPT-text store
    python -m experiments.generate_onpolicy --max_tokens=200000    # on-policy store
    python -m experiments.drafter_data                             # train, evaluate, record
    python -m experiments.drafter_data --phases=tau --arms=onpolicy

Every phase is resumable (training from its orbax checkpoints, evaluations as
sweep records). Records in ``--output_dir`` (``training.jsonl``,
``heldout.jsonl``, ``acceptance.jsonl``, each record with its provenance); runs
under ``--runs_dir`` (outside the repo). ``experiments.render_results`` writes
the docs' table from the records.
"""

from __future__ import annotations

import dataclasses
import os

from absl import app, flags, logging

FLAGS = flags.FLAGS
ARMS = ("sharegpt", "onpolicy", "mix")
PHASES = ("train", "heldout", "tau")


def define_flags() -> None:
  flags.DEFINE_string("model", "smollm2-135m-instruct", "target: registered real model name")
  flags.DEFINE_string("sharegpt_store", "", "ShareGPT-text store (default <cache>/features/"
                      "<model>-<sha12>)")
  flags.DEFINE_string("onpolicy_store", "", "on-policy store (default <cache>/features/"
                      "onpolicy-<model>-<sha12>)")
  flags.DEFINE_list("arms", list(ARMS), f"training data arms, from {ARMS}")
  flags.DEFINE_list("phases", list(PHASES), f"what to run, from {PHASES}")
  flags.DEFINE_integer("budget", 96_000, "target tokens each arm trains on")
  flags.DEFINE_integer("steps", 400, "training steps per arm")
  flags.DEFINE_integer("window", 128, "tokens per training window")
  flags.DEFINE_integer("batch_size", 8, "windows per training batch")
  flags.DEFINE_integer("ttt_steps", 3, "EAGLE-3 training-time-test steps")
  flags.DEFINE_float("learning_rate", 6e-4, "peak learning rate (cosine to 10%)")
  flags.DEFINE_integer("warmup_steps", 50, "linear warmup steps")
  flags.DEFINE_integer("eval_permille", 50, "held-out share of conversations (per mille)")
  flags.DEFINE_integer("heldout_batches", 32, "held-out batches per store (phase heldout)")
  flags.DEFINE_string("runs_dir", "", "training runs (default <cache>/runs/drafter_data)")
  flags.DEFINE_string("reference", "eagle3", "also measure this head in phase tau "
                      "('eagle3' = the shipped head, a head directory, '' = none)")
  flags.DEFINE_list("extra_heads", [], "more heads for phase tau, as name=directory (e.g. "
                    "continued=<a head continued from the shipped one on on-policy text>)")
  flags.DEFINE_integer("k", 4, "chain draft length K")
  flags.DEFINE_integer("eagle_depth", 5, "dynamic tree depth")
  flags.DEFINE_integer("eagle_top_k", 8, "dynamic tree: children per expanded node")
  flags.DEFINE_integer("eagle_total_tokens", 24, "dynamic tree: nodes verified per step")
  flags.DEFINE_list("temperatures", ["0", "1"], "sampling temperatures")
  flags.DEFINE_list("prompt_sets", ["sharegpt", "humaneval"], "held-out prompt sets "
                    "(experiments.common.prompts.PROMPT_SETS)")
  flags.DEFINE_integer("num_prompts", 16, "prompts per set")
  flags.DEFINE_integer("max_new_tokens", 96, "tokens per prompt")
  flags.DEFINE_integer("seeds", 1, "runs per prompt at T > 0")
  flags.DEFINE_integer("tau_batch_size", 8, "rows per call (phase tau)")
  flags.DEFINE_string("output_dir", "benchmarks/results/drafter_data", "records")
  from experiments.common import cli
  cli.define_decision_flag()


def _check_flags() -> list:
  from experiments.common.prompts import PROMPT_SETS
  from specjax.checks import check_int
  for name, allowed in (("arms", ARMS), ("phases", PHASES), ("prompt_sets", PROMPT_SETS)):
    got = getattr(FLAGS, name)
    if not got or any(g not in allowed for g in got):
      raise app.UsageError(f"--{name}={got}: choose from {allowed}")
  try:
    temps = [float(t) for t in FLAGS.temperatures]
  except ValueError:
    temps = []
  if not temps or min(temps) < 0:
    raise app.UsageError(f"--temperatures={FLAGS.temperatures}: numbers >= 0")
  for name in ("budget", "steps", "window", "batch_size", "ttt_steps", "heldout_batches", "k",
               "eagle_depth", "eagle_top_k", "eagle_total_tokens", "num_prompts",
               "max_new_tokens", "seeds", "tau_batch_size"):
    try:
      check_int(f"--{name}", getattr(FLAGS, name), low=1)
    except ValueError as e:
      raise app.UsageError(str(e)) from None
  bad = [h for h in FLAGS.extra_heads if h.count("=") != 1 or not all(h.split("="))
         or h.split("=")[0] in ARMS + ("reference",)]
  if bad:
    raise app.UsageError(f"--extra_heads={FLAGS.extra_heads}: give name=directory with a name "
                         f"other than {ARMS + ('reference',)}")
  if not 0 < FLAGS.eval_permille < 1000:
    raise app.UsageError(f"--eval_permille={FLAGS.eval_permille}: an integer in (0, 1000)")
  return temps


def store_dirs(lm) -> dict:
  """``{"sharegpt": dir, "onpolicy": dir}`` (flags or the default cache paths)."""
  from specjax.models import registry
  root = os.path.join(registry.cache_root(), "features")
  tag = f"{lm.name}-{lm.sha256[:12]}"
  return {"sharegpt": FLAGS.sharegpt_store or os.path.join(root, tag),
          "onpolicy": FLAGS.onpolicy_store or os.path.join(root, f"onpolicy-{tag}")}


@dataclasses.dataclass(frozen=True)
class ArmSettings:
  """What every arm shares (the flags of the same names)."""

  model: str = "smollm2-135m-instruct"
  budget: int = 96_000
  steps: int = 400
  window: int = 128
  batch_size: int = 8
  ttt_steps: int = 3
  learning_rate: float = 6e-4
  warmup_steps: int = 50
  eval_permille: int = 50

  @classmethod
  def from_flags(cls) -> "ArmSettings":
    return cls(**{f.name: getattr(FLAGS, f.name) for f in dataclasses.fields(cls)})


def arm_config(arm: str, stores: dict, runs_dir: str, s: ArmSettings):
  """The from-store EAGLE-3 config of one arm: everything but the data is shared."""
  from experiments.configs import from_store
  c = from_store.get_config("eagle3")
  c.name = f"drafter_data_{arm}"
  c.target = s.model
  c.workdir = os.path.join(runs_dir, arm)
  c.store = ",".join([stores["sharegpt"], stores["onpolicy"]] if arm == "mix" else [stores[arm]])
  c.data.window, c.data.batch_size = s.window, s.batch_size
  c.data.eval_permille, c.data.max_target_tokens = s.eval_permille, s.budget
  c.train.num_steps, c.train.ttt_steps = s.steps, s.ttt_steps
  c.train.eval_every, c.train.checkpoint_every = s.steps, 50
  c.optim.learning_rate, c.optim.warmup_steps = s.learning_rate, s.warmup_steps
  return c


def train_arm(c) -> dict:
  """Train (or resume, or just re-export) one arm; the training.json summary
  without the per-step loss list."""
  from experiments import train_from_store
  out = train_from_store.run(c)
  return {k: v for k, v in out.items() if k not in ("loss_history", "config")}


def heldout_agreement(c, store_dir: str) -> dict:
  """Per-position top-1 agreement and CE of arm ``c``'s latest checkpoint on the
  held-out windows of ``store_dir``, with 95% bootstrap intervals over batches."""
  import numpy as np

  from experiments import train_from_store
  from experiments.common.bootstrap import bootstrap_ci
  from specjax.training import features, store_batching
  built = train_from_store.build(c, progress=False)
  store = features.FeatureStore(store_dir, expect_sha256=built.lm.sha256)
  bcfg = store_batching.StoreBatchConfig(window=c.data.window, batch_size=c.data.batch_size,
                                         feature_layers=built.feature_layers,
                                         eval_permille=c.data.eval_permille)
  held = store_batching.StoreBatcher(store, bcfg, "heldout")
  trainer = built.trainer
  trainer.init_or_restore()
  if trainer.resumed_from is None:
    raise FileNotFoundError(f"no checkpoint in {built.workdir}: run --phases=train first")
  batches = held.eval_batches(FLAGS.heldout_batches)
  rows = [{k: float(v) for k, v in trainer.eval_metrics(b).items()} for b in batches]
  trainer.close()
  out = {"step": int(trainer.resumed_from), "batches": len(rows),
         "windows": len(rows) * held.batch_size,
         "target_positions": int(sum(float(b["mask"].sum()) for b in batches))}
  for name in sorted(rows[0]):  # acc<i>, ce<i>, loss: named as in training.json's evals
    vals = np.array([r[name] for r in rows])
    out[f"eval_{name}"] = float(vals.mean())
    out[f"eval_{name}_ci"] = list(bootstrap_ci(vals)) if len(vals) > 1 else None
  return out


def _heads(runs_dir: str) -> dict:
  heads = {arm: os.path.join(runs_dir, arm, "head") for arm in FLAGS.arms}
  if FLAGS.reference:
    heads["reference"] = FLAGS.reference
  heads.update(h.split("=") for h in FLAGS.extra_heads)
  return heads


def tau_cells(temps, runs_dir: str) -> list:
  """One sweep row per head x drafter x prompt set x temperature."""
  rows = []
  for head, path in _heads(runs_dir).items():
    for kind in ("eagle_chain", "eagle_tree"):
      for s in FLAGS.prompt_sets:
        for t in temps:
          rows.append({"head": head, "head_dir": path, "kind": kind, "prompt_set": s,
                       "temperature": t, "k": FLAGS.k, "num_prompts": FLAGS.num_prompts,
                       "tree": [FLAGS.eagle_depth, FLAGS.eagle_top_k, FLAGS.eagle_total_tokens],
                       "max_new_tokens": FLAGS.max_new_tokens, "seeds": FLAGS.seeds,
                       "budget": FLAGS.budget, "steps": FLAGS.steps})
  return rows


def run_tau(temps, runs_dir: str) -> list:
  from experiments.common import sweep
  from experiments.common.model_sets import load_model_set
  from experiments.common.prompts import load_chat_prompts
  from experiments.compare.acceptance import CellSettings, run_cell
  settings = CellSettings(k=FLAGS.k, depth=FLAGS.eagle_depth, top_k=FLAGS.eagle_top_k,
                          total_tokens=FLAGS.eagle_total_tokens, seeds=FLAGS.seeds,
                          batch_size=FLAGS.tau_batch_size, max_new_tokens=FLAGS.max_new_tokens)
  loaded: dict = {}

  def evaluate(row):
    if loaded.get("head") != row["head"]:
      loaded.clear()
      ms = load_model_set(FLAGS.model, draft="", eagle=row["head_dir"])
      loaded.update(head=row["head"], ms=ms, sources=ms.draft_sources(), prompts={
          s: [list(p.ids) for p in load_chat_prompts(ms.encode_chat, FLAGS.num_prompts,
                                                      sets=(s,))]
          for s in FLAGS.prompt_sets})
    res = run_cell(loaded["ms"], loaded["sources"], row["kind"], row["temperature"],
                   loaded["prompts"][row["prompt_set"]], settings)
    logging.info("%s %s %s T=%g: tau %.3f %s", row["head"], row["kind"], row["prompt_set"],
                 row["temperature"], res["tau"], res["tau_ci"])
    return res

  return sweep.run_sweep(tau_cells(temps, runs_dir), evaluate,
                         os.path.join(FLAGS.output_dir, "acceptance.jsonl"), desc="tau")


def run() -> dict:
  from experiments.common import sweep
  from specjax.models import registry
  temps = _check_flags()
  from experiments.common import cli
  cli.apply_decision_flag()
  lm = registry.load_model(FLAGS.model)
  stores = store_dirs(lm)
  runs_dir = FLAGS.runs_dir or os.path.join(registry.cache_root(), "runs", "drafter_data")
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  settings = ArmSettings.from_flags()
  configs = {arm: arm_config(arm, stores, runs_dir, settings) for arm in FLAGS.arms}
  out = {}
  if "train" in FLAGS.phases:
    rows = [{"arm": a, "settings": configs[a].to_dict()} for a in FLAGS.arms]
    out["train"] = sweep.run_sweep(rows, lambda r: train_arm(configs[r["arm"]]),
                                   os.path.join(FLAGS.output_dir, "training.jsonl"),
                                   desc="train")
  if "heldout" in FLAGS.phases:
    rows = [{"arm": a, "heldout": s, "store": stores[s], "steps": FLAGS.steps,
             "budget": FLAGS.budget, "batches": FLAGS.heldout_batches}
            for a in FLAGS.arms for s in ("sharegpt", "onpolicy")]
    out["heldout"] = sweep.run_sweep(
        rows, lambda r: heldout_agreement(configs[r["arm"]], r["store"]),
        os.path.join(FLAGS.output_dir, "heldout.jsonl"), desc="held-out")
  if "tau" in FLAGS.phases:
    out["tau"] = run_tau(temps, runs_dir)
  return out


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(run, define_flags=define_flags)
