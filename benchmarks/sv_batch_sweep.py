r"""Speculative Verification against fixed-K speculative decoding and target-only,
calibrated and evaluated per prompt set.  The work is
:func:`experiments.sv.evaluation.run` (see its docstring): calibrate with
``experiments.calibrate_sv`` on calibration prompts, then decode disjoint
held-out prompts of each set with target-only, fixed K = 1..K and SV (row mode,
the paper's gamma search; tables on (S, A) and on S alone) at each batch size,
T = 1, lossless.  Writes ``--output`` (JSON), the same name with ``.md`` (the
tables) and figures to ``--figure_dir``.

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

import json
import os

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  flags.DEFINE_string("model", "default", "'default', 'tiny' or a real model, e.g. "
                      "smollm2-135m-instruct")
  flags.DEFINE_string("drafter", "draft", "real model: 'draft' (shipped draft LM) or 'eagle3'")
  flags.DEFINE_string("companion", "early_exit:8", "real model: early_exit:N (the target's first "
                      "N layers with its norm and head) or lm:SPEC (a separate LM: lm:draft, the "
                      "shipped draft LM, with --drafter=eagle3; lm:DIR, a trained one)")
  flags.DEFINE_list("prompt_sets", ["sharegpt", "humaneval"], "real model: held-out prompt sets")
  flags.DEFINE_integer("k", 7, "SV's K (drafts per step) and the largest fixed K")
  flags.DEFINE_list("fixed_ks", [], "fixed-K baselines (default 1..k)")
  flags.DEFINE_list("table_signals", ["SA", "S"], "SV tables: SA (the paper's), S (exact)")
  flags.DEFINE_enum("binning", "quantile", ["quantile", "fixed"], "calibration table bins")
  flags.DEFINE_enum("mode", "row", ["row", "batch"], "SV mode")
  flags.DEFINE_list("batch_sizes", ["1", "4", "8"], "batch sizes")
  flags.DEFINE_integer("eval_prompts", 8, "held-out prompts per set (a multiple of every batch "
                       "size)")
  flags.DEFINE_integer("max_new_tokens", 48, "tokens per evaluation row")
  flags.DEFINE_float("temperature", 1.0, "target / draft / companion temperature")
  flags.DEFINE_bool("stop_at_eos", True, "rows stop at EOS (else every row emits max_new_tokens)")
  flags.DEFINE_integer("calib_prompts", 32, "calibration prompts (split over the sets)")
  flags.DEFINE_integer("calib_new_tokens", 64, "tokens per calibration prompt")
  flags.DEFINE_integer("calib_batch", 16, "calibration batch size")
  flags.DEFINE_integer("prompt_len", 256, "longest chat prompt in tokens (default/tiny: window)")
  flags.DEFINE_string("calibration_dir", "", "reuse this experiments.calibrate_sv workdir "
                      "(same K; profile for this run's batch sizes and cache length)")
  flags.DEFINE_string("workdir", "/tmp/specjax_runs/sv_batch_sweep", "calibration goes to "
                      "<workdir>/calibration")
  flags.DEFINE_integer("profile_repeats", 5, "timed calls per latency-profile point")
  flags.DEFINE_enum("profile_fit", "linear", ["linear", "raw"],
                    "linear: each batch size's latencies replaced by a non-decreasing line in "
                    "gamma (denoises CPU timings that stall the goodput search); raw: as measured")
  flags.DEFINE_bool("companion_timing", True, "time the companion forward (companion share)")
  flags.DEFINE_integer("seed", 0, "prompt / RNG seed")
  flags.DEFINE_string("compile_cache_dir", "", "persistent XLA compilation cache (reruns skip the "
                      "~30 compiles); '' = off")
  flags.DEFINE_string("output", "", "JSON output; default benchmarks/results/"
                      "sv_batch_sweep[_<model>].json (and .md)")
  flags.DEFINE_string("figure_dir", "", "figures; default docs/figures for a real model, else "
                      "benchmarks/results")


def model_suffix(model: str) -> str:
  """Short name for files: ``smollm2`` for smollm2-135m-instruct; the name otherwise."""
  return os.path.basename(model.rstrip("/")).split("-")[0].split(".")[0] or "model"


def sweep_config():
  """The :class:`~experiments.sv.evaluation.SweepConfig` of the flags (``app.UsageError`` if bad)."""
  from experiments.sv.evaluation import SweepConfig, validate

  def ints(name):
    try:
      return tuple(int(v) for v in FLAGS[name].value)
    except ValueError:
      raise app.UsageError(f"--{name}={','.join(FLAGS[name].value)} must be integers") from None

  cfg = SweepConfig(
      model=FLAGS.model, drafter=FLAGS.drafter, companion=FLAGS.companion,
      prompt_sets=tuple(FLAGS.prompt_sets), k=FLAGS.k, fixed_ks=ints("fixed_ks"),
      table_signals=tuple(FLAGS.table_signals), binning=FLAGS.binning, mode=FLAGS.mode,
      batch_sizes=ints("batch_sizes"), eval_prompts=FLAGS.eval_prompts,
      max_new_tokens=FLAGS.max_new_tokens, temperature=FLAGS.temperature,
      stop_at_eos=FLAGS.stop_at_eos, calib_prompts=FLAGS.calib_prompts,
      calib_new_tokens=FLAGS.calib_new_tokens, calib_batch=FLAGS.calib_batch,
      prompt_len=FLAGS.prompt_len, calibration_dir=FLAGS.calibration_dir,
      workdir=FLAGS.workdir, profile_repeats=FLAGS.profile_repeats,
      profile_fit=FLAGS.profile_fit, companion_timing=FLAGS.companion_timing, seed=FLAGS.seed)
  try:
    validate(cfg)
  except ValueError as e:
    raise app.UsageError(f"--{e}") from None  # every message starts with the flag's name
  return cfg


def main(_):
  from experiments.sv.evaluation import run, write_figures
  cfg = sweep_config()
  if FLAGS.compile_cache_dir:
    import jax
    jax.config.update("jax_compilation_cache_dir", FLAGS.compile_cache_dir)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
  real = cfg.real
  suffix = model_suffix(cfg.model)
  output = FLAGS.output or ("benchmarks/results/sv_batch_sweep.json" if cfg.model == "default"
                            else f"benchmarks/results/sv_batch_sweep_{suffix}.json")
  fig_dir = FLAGS.figure_dir or ("docs/figures" if real else "benchmarks/results")
  report = run(cfg)
  report["figures"] = write_figures(report, fig_dir, suffix)
  os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
  with open(output, "w") as f:
    json.dump(report, f, indent=2, default=str)
  md = os.path.splitext(output)[0] + ".md"
  with open(md, "w") as f:
    f.write(report["markdown"] + "\n")
  print(report["markdown"])
  print(f"wrote {output}, {md}, {', '.join(report['figures'])} ({report['wall_seconds']:.0f}s)")


if __name__ == "__main__":
  define_flags()
  app.run(main)
