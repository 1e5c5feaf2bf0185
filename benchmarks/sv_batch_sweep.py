r"""Speculative Verification against fixed-K speculative decoding and target-only,
calibrated and evaluated per prompt set.  The work is
:func:`experiments.sv.evaluation.run` (see its docstring): calibrate with
``experiments.calibrate_sv`` on calibration prompts, then decode disjoint
held-out prompts of each set with target-only, fixed K = 1..K and SV (row mode,
the paper's gamma search; tables on (S, A) and on S alone) at each batch size,
T = 1, lossless.  Writes ``--output`` (JSON), the same name with ``.md`` (the
tables), the calibration's report and per-draft records to ``<output>_calibration/``
(:func:`keep_calibration`) and figures to ``--figure_dir``; ``--output=''`` (this
binary's preset) is
``benchmarks/results/sv_batch_sweep.json`` for the default models, else
``benchmarks/results/sv_batch_sweep_<model>.json``.  ``--max_prompt_tokens`` is the
longest chat prompt (default / tiny models: the prompt window).

    # SmolLM2 with its draft LM and an 8-layer early-exit companion: 32 calibration
    # prompts, 8 held-out prompts per set, B = 1, 4, 8, 48 tokens, K = 1..7 + SV (SA, S):
    # ~20 min on 2 idle CPU cores (about 30 compiles of ~10 s, 3 min calibration + profile,
    # the rest decoding); time the profile on an idle machine -- under load its noise can
    # flatten the fitted latency line, and SV then verifies all K (ties continue).
    python -m benchmarks.sv_batch_sweep --model=smollm2-135m-instruct --drafter=draft \
        --companion=early_exit:8 --compile_cache_dir=/tmp/specjax_xla_cache
    python -m benchmarks.sv_batch_sweep                 # the small default models
    python -m benchmarks.sv_batch_sweep --model=tiny    # random models, seconds
"""

from __future__ import annotations

import dataclasses
import json
import os

from absl import app

from experiments.common import cli, knobs, specs


@dataclasses.dataclass(frozen=True)
class SvBatchSweepSpec:
  """The sweep's own knobs: the real model's drafter and companion, the SV variants and
  baselines, the evaluation and calibration run sizes, the latency profile's fit, and
  where the compile cache and figures go (experiments.sv.evaluation.SweepConfig)."""
  drafter: str = knobs.knob("draft", "real model: 'draft' (shipped draft LM) or 'eagle3'")
  companion: str = knobs.knob(
      "early_exit:8", "real model: early_exit:N (the target's first N layers with its norm "
      "and head) or lm:SPEC (a separate LM: lm:draft, the shipped draft LM, with "
      "--drafter=eagle3; lm:DIR, a trained one)")
  fixed_ks: tuple[int, ...] = knobs.knob((), "fixed-K baselines (default 1..k)")
  table_signals: tuple[str, ...] = knobs.knob(("SA", "S"), "SV tables: SA (the paper's), "
                                              "S (exact)")
  binning: str = knobs.knob("quantile", "calibration table bins", choices=("quantile", "fixed"))
  mode: str = knobs.knob("row", "SV mode", choices=("row", "batch"))
  eval_prompts: int = knobs.knob(8, "held-out prompts per set (a multiple of every batch size)")
  stop_at_eos: bool = knobs.knob(True, "rows stop at EOS (else every row emits max_new_tokens)")
  calib_prompts: int = knobs.knob(32, "calibration prompts (split over the sets)")
  calib_new_tokens: int = knobs.knob(64, "tokens per calibration prompt")
  calib_batch: int = knobs.knob(16, "calibration batch size")
  calibration_dir: str = knobs.knob("", "reuse this experiments.calibrate_sv workdir (same K; "
                                    "profile for this run's batch sizes and cache length)")
  profile_fit: str = knobs.knob(
      "linear", "linear: each batch size's latencies replaced by a non-decreasing line in "
      "gamma (denoises CPU timings that stall the goodput search); raw: as measured",
      choices=("linear", "raw"))
  companion_timing: bool = knobs.knob(True, "time the companion forward (companion share)")
  compile_cache_dir: str = knobs.knob("", "persistent XLA compilation cache (reruns skip the "
                                      "~30 compiles); '' = off")
  figure_dir: str = knobs.knob("", "figures; default docs/figures for a real model, else "
                               "benchmarks/results")

  def __post_init__(self):
    from specjax.policies.sv import TABLE_SIGNALS
    for name in ("eval_prompts", "calib_prompts", "calib_new_tokens", "calib_batch"):
      knobs.check_int(self, name, 1)
    if self.fixed_ks and min(self.fixed_ks) < 1:
      raise knobs.KnobError("fixed_ks", self.fixed_ks, "give integers in [1, --k]")
    knobs.check_subset(self, "table_signals", TABLE_SIGNALS)


SPECS = knobs.Specs(
    specs.ModelSpec, specs.PromptSpec, specs.ChainSpec, specs.BatchSizesSpec,
    specs.NewTokensSpec, specs.TemperatureSpec, specs.ProfileSpec, specs.SeedSpec,
    specs.WorkdirSpec, specs.OutputSpec, SvBatchSweepSpec,
    presets=dict(model="default", k=7,  # SV's K (drafts per step) and the largest fixed K
                 batch_sizes=(1, 4, 8), max_new_tokens=48, temperature=1.0,
                 workdir="/tmp/specjax_runs/sv_batch_sweep",  # calibration: <workdir>/calibration
                 output=""))  # '': benchmarks/results/sv_batch_sweep[_<model>].json (and .md)


@dataclasses.dataclass(frozen=True)
class Run:
  """The sweep's specs, by name."""
  model: specs.ModelSpec
  prompts: specs.PromptSpec
  chain: specs.ChainSpec
  batch_sizes: specs.BatchSizesSpec
  new_tokens: specs.NewTokensSpec
  temperature: specs.TemperatureSpec
  profile: specs.ProfileSpec
  seed: specs.SeedSpec
  workdir: specs.WorkdirSpec
  output: specs.OutputSpec
  sweep: SvBatchSweepSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()
  cli.define_decision_flag()


def model_suffix(model: str) -> str:
  """Short name for files: ``smollm2`` for smollm2-135m-instruct; the name otherwise."""
  return os.path.basename(model.rstrip("/")).split("-")[0].split(".")[0] or "model"


def sweep_config(r: Run):
  """The :class:`~experiments.sv.evaluation.SweepConfig` of the specs (``app.UsageError``
  if the settings do not fit together)."""
  from experiments.sv.evaluation import SweepConfig, validate
  w = r.sweep
  cfg = SweepConfig(
      model=r.model.model, drafter=w.drafter, companion=w.companion,
      prompt_sets=r.prompts.prompt_sets, k=r.chain.k, fixed_ks=w.fixed_ks,
      table_signals=w.table_signals, binning=w.binning, mode=w.mode,
      batch_sizes=r.batch_sizes.batch_sizes, eval_prompts=w.eval_prompts,
      max_new_tokens=r.new_tokens.max_new_tokens, temperature=r.temperature.temperature,
      stop_at_eos=w.stop_at_eos, calib_prompts=w.calib_prompts,
      calib_new_tokens=w.calib_new_tokens, calib_batch=w.calib_batch,
      prompt_len=r.prompts.max_prompt_tokens, calibration_dir=w.calibration_dir,
      workdir=r.workdir.workdir, profile_repeats=r.profile.profile_repeats,
      profile_fit=w.profile_fit, companion_timing=w.companion_timing, seed=r.seed.seed)
  try:
    validate(cfg)
  except ValueError as e:
    raise app.UsageError(f"--{e}") from None  # every message starts with the flag's name
  return cfg


CALIBRATION_FILES = ("report.json", "records.npz")


def calibration_copy_dir(output: str) -> str:
  """Where the sweep keeps its calibration's report and records beside ``output``:
  ``<output without .json>_calibration``."""
  return os.path.splitext(output)[0] + "_calibration"


def keep_calibration(calibration_dir: str, output: str) -> str:
  """Copy the calibration's ``report.json`` and ``records.npz`` (the per-draft (S, A,
  accepted) records, a few tens of KB) beside ``output``, so the information gains get
  their intervals over prompts from committed files; returns the directory."""
  import shutil
  dest = calibration_copy_dir(output)
  os.makedirs(dest, exist_ok=True)
  for name in CALIBRATION_FILES:
    shutil.copyfile(os.path.join(calibration_dir, name), os.path.join(dest, name))
  return dest


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  return Run(*SPECS.build())


def run() -> None:
  """Calibrate, sweep, write ``--output`` (JSON and .md) and the figures."""
  from experiments.sv.evaluation import run as run_sweep, write_figures
  r = build_run()
  cfg = sweep_config(r)
  cli.apply_decision_flag()  # --decision: refuse a dirty tree, before anything is measured
  if r.sweep.compile_cache_dir:
    import jax
    jax.config.update("jax_compilation_cache_dir", r.sweep.compile_cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  real = cfg.real
  suffix = model_suffix(cfg.model)
  output = r.output.output or ("benchmarks/results/sv_batch_sweep.json"
                               if cfg.model == "default"
                               else f"benchmarks/results/sv_batch_sweep_{suffix}.json")
  fig_dir = r.sweep.figure_dir or ("docs/figures" if real else "benchmarks/results")
  report = run_sweep(cfg)
  report["figures"] = write_figures(report, fig_dir, suffix)
  os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
  report["calibration_records"] = keep_calibration(report["calibration_dir"], output)
  with open(output, "w") as f:
    json.dump(report, f, indent=2, default=str)
  md = os.path.splitext(output)[0] + ".md"
  with open(md, "w") as f:
    f.write(report["markdown"] + "\n")
  print(report["markdown"])
  print(f"wrote {output}, {md}, {', '.join(report['figures'])} ({report['wall_seconds']:.0f}s)")


if __name__ == "__main__":
  cli.run_binary(run, define_flags=define_flags)
