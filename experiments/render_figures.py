r"""Re-draw the committed figures from their committed records: ``docs/figures`` and
the main job's / speed records' ``benchmark.png`` beside their records.

    python -m experiments.render_figures              # every figure of FIGURES
    python -m experiments.render_figures --only=sweep_k_smollm2 --output_dir=/tmp/figs

Each figure is drawn by the same code its run calls (the run writes the figure
itself; this re-draws it from the record without re-measuring anything), so a
change of figure code reaches the docs without a rerun. ``lossy_margins_scatter_*``
is not here: it is drawn from the raw logits during its run, which no record keeps.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Callable

from experiments.common import knobs, specs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = "benchmarks/results"


@dataclasses.dataclass(frozen=True)
class FigureSpec:
  """One committed figure: the record it is drawn from (relative to the repo) and
  ``draw(record_path, out_dir) -> [files written]``."""

  name: str
  record: str
  draw: Callable[[str, str], list]


def _jsonl(path: str) -> list[dict]:
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def _compare(record: str, out_dir: str) -> list:
  from experiments.common.figures import plot_quality_vs_speed
  return [plot_quality_vs_speed(_jsonl(record),
                                os.path.join(out_dir, "compare_verifiers_smollm2.png"),
                                "verifiers")]


def _theta(record: str, out_dir: str) -> list:
  from experiments.common.figures import plot_lines
  return [plot_lines(_jsonl(record), os.path.join(out_dir, "sweep_theta_smollm2.png"),
                     "MARS theta sweep", lambda cfg: cfg.get("x", 0.0), "theta")]


def _k(record: str, out_dir: str) -> list:
  from experiments.common.figures import plot_lines
  return [plot_lines(_jsonl(record), os.path.join(out_dir, "sweep_k_smollm2.png"),
                     "draft length sweep", lambda cfg: cfg["num_draft"], "K")]


def _sv(record: str, out_dir: str) -> list:
  from experiments.sv.evaluation import write_figures
  with open(record) as f:
    return write_figures(json.load(f), out_dir, "smollm2")


def _benchmark(record: str, out_dir: str) -> list:
  """An ``experiments/benchmark.py`` record's figure, written beside its record (the
  run writes it there): ``out_dir`` is ignored unless it is not the docs' figures."""
  from experiments.common.figures import plot_quality_vs_speed
  default = os.path.join(ROOT, "docs", "figures")
  here = os.path.dirname(record) if os.path.abspath(out_dir) == default else out_dir
  name = os.path.basename(os.path.dirname(record))
  out = os.path.join(here, "benchmark.png" if here == os.path.dirname(record)
                     else f"{name}_benchmark.png")
  return [plot_quality_vs_speed(_jsonl(record), out, "main verifiers, smollm2-135m-instruct")]


def _lossy(record: str, out_dir: str) -> list:
  from experiments.propositions.reports import make_figures
  return make_figures(_jsonl(record), out_dir, path_of=lambda name: os.path.join(
      out_dir, f"lossy_{os.path.splitext(name)[0]}_smollm2.png"))


def _adaptation_curve(record: str, out_dir: str) -> list:
  from experiments.results.adaptation_figures import plot_learning_curve
  return [plot_learning_curve(record, os.path.join(out_dir, "online_adaptation_curve_smollm2.png"),
                              "online adaptation of the EAGLE-3 head, SmolLM2, greedy "
                              "8-turn chats")]


FIGURES = {f.name: f for f in (
    FigureSpec("compare_verifiers_smollm2",
               f"{RESULTS}/compare_smollm2/compare_verifiers_smollm2.jsonl", _compare),
    FigureSpec("sweep_theta_smollm2", f"{RESULTS}/sweep_theta_smollm2/sweep_theta_smollm2.jsonl",
               _theta),
    FigureSpec("sweep_k_smollm2", f"{RESULTS}/sweep_k_smollm2/sweep_k_smollm2.jsonl", _k),
    FigureSpec("sv_smollm2", f"{RESULTS}/sv_batch_sweep_smollm2.json", _sv),
    FigureSpec("online_adaptation_curve_smollm2",
               f"{RESULTS}/online_adaptation/smollm2_long.json", _adaptation_curve),
    FigureSpec("lossy_smollm2", f"{RESULTS}/lossy_propositions_smollm2_conversations/records.jsonl", _lossy),
    *(FigureSpec(f"{d}_benchmark", f"{RESULTS}/{d}/benchmark.jsonl", _benchmark)
      for d in ("benchmark_smollm2", "speed_smollm2", "speed_smollm2_onpolicy_head")),
)}


@dataclasses.dataclass(frozen=True)
class RenderFiguresSpec:
  """Which figures are drawn."""
  only: tuple[str, ...] = knobs.knob((), "comma-separated names of FIGURES (default: all)")

  def __post_init__(self):
    knobs.check_subset(self, "only", list(FIGURES), nonempty=False)


SPECS = knobs.Specs(RenderFiguresSpec, specs.OutputDirSpec,
                    presets=dict(output_dir=os.path.join(ROOT, "docs", "figures")))


@dataclasses.dataclass(frozen=True)
class Run:
  """This binary's specs, by name."""
  figures: RenderFiguresSpec
  output: specs.OutputDirSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


def main() -> None:
  """The command line: draw ``--only`` (default: all of :data:`FIGURES`) into
  ``--output_dir``."""
  r = Run(*SPECS.build())
  out = r.output.output_dir
  os.makedirs(out, exist_ok=True)
  for n in r.figures.only or list(FIGURES):
    spec = FIGURES[n]
    for path in spec.draw(os.path.join(ROOT, spec.record), out):
      print(f"{n}: {os.path.relpath(path, ROOT)} <- {spec.record}")


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(main, define_flags=define_flags)
