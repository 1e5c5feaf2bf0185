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
   (``--num_prompts`` per set, never in either store), with paired bootstrap intervals over prompts for
   each arm against ``sharegpt`` and the minimum detectable gain at 80% power.

    python -m experiments.extract_features --max_tokens=150000     # ShareGPT-text store
    python -m experiments.generate_onpolicy --max_tokens=200000    # on-policy store
    python -m experiments.drafter_data --eagle_total_tokens=24     # train, evaluate, record
    python -m experiments.drafter_data --phases=tau --arms=onpolicy --eagle_total_tokens=24

The committed records ran the dynamic tree with 24 nodes (the default then, 16 now);
every tau record holds the tree, so a rerun that resumes them passes
``--eagle_total_tokens=24``.

Every phase is resumable (training from its orbax checkpoints, evaluations as
sweep records). Records in ``--output_dir`` (``training.jsonl``,
``heldout.jsonl``, ``acceptance.jsonl``, each record with its provenance); runs
under ``--runs_dir`` (outside the repo). ``experiments.render_results`` writes
the docs' table from the records.
"""

from __future__ import annotations

import dataclasses
import os

from absl import app, logging

from experiments.common import knobs, specs

ARMS = ("sharegpt", "onpolicy", "mix")
PHASES = ("train", "heldout", "tau")
# load_chat_prompts' prompt length, which the committed tau records ran at (their rows
# name --max_prompt_tokens only when it differs, so they resume)
RECORDED_MAX_PROMPT_TOKENS = 256


@dataclasses.dataclass(frozen=True)
class DrafterDataSpec:
  """The comparison's own knobs: the feature stores, the arms and phases, what every
  arm trains with, the held-out evaluation, and the heads measured in phase tau."""
  sharegpt_store: str = knobs.knob("", "ShareGPT-text store (default <cache>/features/"
                                   "<model>-<sha12>)")
  onpolicy_store: str = knobs.knob("", "on-policy store (default <cache>/features/"
                                   "onpolicy-<model>-<sha12>)")
  arms: tuple[str, ...] = knobs.knob(ARMS, f"training data arms, from {ARMS}; none (--arms=) "
                                     "to measure only --reference and --extra_heads")
  phases: tuple[str, ...] = knobs.knob(PHASES, f"what to run, from {PHASES}")
  budget: int = knobs.knob(96_000, "target tokens each arm trains on")
  steps: int = knobs.knob(400, "training steps per arm")
  window: int = knobs.knob(128, "tokens per training window")
  train_batch_size: int = knobs.knob(8, "windows per training batch")
  ttt_steps: int = knobs.knob(3, "EAGLE-3 training-time-test steps")
  learning_rate: float = knobs.knob(6e-4, "peak learning rate (cosine to 10%)")
  warmup_steps: int = knobs.knob(50, "linear warmup steps")
  eval_permille: int = knobs.knob(50, "held-out share of conversations (per mille)")
  heldout_batches: int = knobs.knob(32, "held-out batches per store (phase heldout)")
  runs_dir: str = knobs.knob("", "training runs (default <cache>/runs/drafter_data)")
  reference: str = knobs.knob("eagle3", "also measure this head in phase tau ('eagle3' = the "
                              "shipped head, a head directory, '' = none)")
  extra_heads: tuple[str, ...] = knobs.knob((), "more heads for phase tau, as name=directory "
                                            "(e.g. continued=<a head continued from the "
                                            "shipped one on on-policy text>)")
  tau_batch_size: int = knobs.knob(8, "rows per call (phase tau)")
  prompts_after: int = knobs.knob(0, "phase tau measures each prompt set's prompts after "
                                  "its first N: fresh prompts, for replicating a decision "
                                  "that read the first N")

  def __post_init__(self):
    knobs.check_subset(self, "arms", ARMS, nonempty=False)
    if not (self.arms or self.reference or self.extra_heads):
      raise knobs.KnobError("arms", self.arms, "at least one head to train or measure: an "
                            "arm, --reference or --extra_heads")
    knobs.check_subset(self, "phases", PHASES)
    for name in ("budget", "steps", "window", "train_batch_size", "ttt_steps",
                 "heldout_batches", "tau_batch_size"):
      knobs.check_int(self, name, 1)
    knobs.check_int(self, "warmup_steps", 0)
    knobs.check_int(self, "prompts_after", 0)
    bad = [h for h in self.extra_heads if h.count("=") != 1 or not all(h.split("="))
           or h.split("=")[0] in ARMS + ("reference",)]
    if bad:
      raise knobs.KnobError("extra_heads", self.extra_heads, "give name=directory with a "
                            f"name other than {ARMS + ('reference',)}")
    if not 0 < self.eval_permille < 1000:
      raise knobs.KnobError("eval_permille", self.eval_permille, "an integer in (0, 1000)")


SPECS = knobs.Specs(
    specs.ModelSpec, specs.ChainSpec, specs.EagleTreeSpec, specs.TemperaturesSpec,
    specs.SeedsSpec, specs.PromptSpec, specs.NumPromptsSpec, specs.NewTokensSpec,
    specs.OutputDirSpec, DrafterDataSpec,
    presets=dict(model="smollm2-135m-instruct", k=4, temperatures=(0.0, 1.0), seeds=1,
                 num_prompts=16,  # per prompt set
                 max_new_tokens=96, output_dir="benchmarks/results/drafter_data"))


@dataclasses.dataclass(frozen=True)
class Run:
  """The comparison's specs, by name."""
  model: specs.ModelSpec
  chain: specs.ChainSpec
  eagle_tree: specs.EagleTreeSpec
  temperatures: specs.TemperaturesSpec
  seeds: specs.SeedsSpec
  prompts: specs.PromptSpec
  num_prompts: specs.NumPromptsSpec
  new_tokens: specs.NewTokensSpec
  output: specs.OutputDirSpec
  data: DrafterDataSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()
  from experiments.common import cli
  cli.define_decision_flag()


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  r = Run(*SPECS.build())
  try:
    knobs.check_int(r.num_prompts, "num_prompts", 1)
    knobs.check_int(r.new_tokens, "max_new_tokens", 1)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r


def store_dirs(lm, d: DrafterDataSpec) -> dict:
  """``{"sharegpt": dir, "onpolicy": dir}`` (the knobs or the default cache paths)."""
  from specjax.models import registry
  root = os.path.join(registry.cache_root(), "features")
  tag = f"{lm.name}-{lm.sha256[:12]}"
  return {"sharegpt": d.sharegpt_store or os.path.join(root, tag),
          "onpolicy": d.onpolicy_store or os.path.join(root, f"onpolicy-{tag}")}


@dataclasses.dataclass(frozen=True)
class ArmSettings:
  """What every arm shares (the knobs of the same names; ``batch_size`` is
  ``--train_batch_size``)."""

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
  def from_run(cls, r: Run) -> "ArmSettings":
    d = r.data
    return cls(model=r.model.model, budget=d.budget, steps=d.steps, window=d.window,
               batch_size=d.train_batch_size, ttt_steps=d.ttt_steps,
               learning_rate=d.learning_rate, warmup_steps=d.warmup_steps,
               eval_permille=d.eval_permille)


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


def heldout_agreement(c, store_dir: str, num_batches: int) -> dict:
  """Per-position top-1 agreement and CE of arm ``c``'s latest checkpoint on the
  held-out windows of ``store_dir`` (``num_batches`` of them), with 95% bootstrap
  intervals over batches."""
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
  batches = held.eval_batches(num_batches)
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


def _heads(r: Run, runs_dir: str) -> dict:
  d = r.data
  heads = {arm: os.path.join(runs_dir, arm, "head") for arm in d.arms}
  if d.reference:
    heads["reference"] = d.reference
  heads.update(h.split("=") for h in d.extra_heads)
  return heads


def tau_cells(r: Run, runs_dir: str) -> list:
  """One sweep row per head x drafter x prompt set x temperature."""
  e, rows = r.eagle_tree, []
  for head, path in _heads(r, runs_dir).items():
    for kind in ("eagle_chain", "eagle_tree"):
      for s in r.prompts.prompt_sets:
        for t in r.temperatures.temperatures:
          row = {"head": head, "head_dir": path, "kind": kind, "prompt_set": s,
                 "temperature": t, "k": r.chain.k, "num_prompts": r.num_prompts.num_prompts,
                 "tree": [e.eagle_depth, e.eagle_top_k, e.eagle_total_tokens],
                 "max_new_tokens": r.new_tokens.max_new_tokens, "seeds": r.seeds.seeds,
                 "budget": r.data.budget, "steps": r.data.steps}
          if r.prompts.max_prompt_tokens != RECORDED_MAX_PROMPT_TOKENS:
            row["max_prompt_tokens"] = r.prompts.max_prompt_tokens
          if r.data.prompts_after:  # rows of the first prompts keep their keys (resume)
            row["prompts_after"] = r.data.prompts_after
          rows.append(row)
  return rows


def run_tau(r: Run, runs_dir: str) -> list:
  from experiments.common import sweep
  from experiments.common.model_sets import load_model_set
  from experiments.common.prompts import held_out_chat_prompts
  from experiments.compare.acceptance import CellSettings, run_cell
  e = r.eagle_tree
  settings = CellSettings(k=r.chain.k, depth=e.eagle_depth, top_k=e.eagle_top_k,
                          total_tokens=e.eagle_total_tokens, seeds=r.seeds.seeds,
                          batch_size=r.data.tau_batch_size,
                          max_new_tokens=r.new_tokens.max_new_tokens)
  loaded: dict = {}

  def evaluate(row):
    if loaded.get("head") != row["head"]:
      loaded.clear()
      ms = load_model_set(r.model.model, draft="", eagle=row["head_dir"])
      loaded.update(head=row["head"], ms=ms, sources=ms.draft_sources(), prompts={
          s: [list(p.ids) for p in held_out_chat_prompts(
              ms.encode_chat, r.num_prompts.num_prompts, after=r.data.prompts_after,
              sets=(s,), max_tokens=r.prompts.max_prompt_tokens)]
          for s in r.prompts.prompt_sets})
    res = run_cell(loaded["ms"], loaded["sources"], row["kind"], row["temperature"],
                   loaded["prompts"][row["prompt_set"]], settings)
    logging.info("%s %s %s T=%g: tau %.3f %s", row["head"], row["kind"], row["prompt_set"],
                 row["temperature"], res["tau"], res["tau_ci"])
    return res

  return sweep.run_sweep(tau_cells(r, runs_dir), evaluate,
                         os.path.join(r.output.output_dir, "acceptance.jsonl"), desc="tau")


def run() -> dict:
  from experiments.common import cli, sweep
  from specjax.models import registry
  r = build_run()
  cli.apply_decision_flag()
  d, out_dir = r.data, r.output.output_dir
  lm = registry.load_model(r.model.model)
  stores = store_dirs(lm, d)
  runs_dir = d.runs_dir or os.path.join(registry.cache_root(), "runs", "drafter_data")
  os.makedirs(out_dir, exist_ok=True)
  settings = ArmSettings.from_run(r)
  configs = {arm: arm_config(arm, stores, runs_dir, settings) for arm in d.arms}
  out = {}
  if "train" in d.phases:
    rows = [{"arm": a, "settings": configs[a].to_dict()} for a in d.arms]
    out["train"] = sweep.run_sweep(rows, lambda row: train_arm(configs[row["arm"]]),
                                   os.path.join(out_dir, "training.jsonl"), desc="train")
  if "heldout" in d.phases:
    rows = [{"arm": a, "heldout": s, "store": stores[s], "steps": d.steps,
             "budget": d.budget, "batches": d.heldout_batches}
            for a in d.arms for s in ("sharegpt", "onpolicy")]
    out["heldout"] = sweep.run_sweep(
        rows, lambda row: heldout_agreement(configs[row["arm"]], row["store"],
                                            d.heldout_batches),
        os.path.join(out_dir, "heldout.jsonl"), desc="held-out")
  if "tau" in d.phases:
    out["tau"] = run_tau(r, runs_dir)
  return out


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(run, define_flags=define_flags)
