r"""Lossy-verification propositions (docs/spec.md §6), on synthetic and real contexts.

  python -m experiments.lossy_propositions --config=experiments/configs/propositions.py \
      [--output_dir=/tmp/props] [--checkpoint_dir=DIR_WITH_target_AND_draft]
  python -m experiments.lossy_propositions --config=experiments/configs/propositions.py:tiny
  python -m experiments.lossy_propositions --config=experiments/configs/propositions.py:smollm2

Parts (a) ``sd``, (b) ``eagle``, (c) ``truncation`` and ``alignment``, (d) ``mars`` and
``margins``; the ``smollm2`` config runs them on SmolLM2-135M-Instruct's real logits
(held-out ShareGPT chats) and writes its figures to ``docs/figures/*_smollm2.png``.

Each part runs on synthetic families and on real contexts: see
:mod:`experiments.propositions.sweep` (configurations and their computation);
:mod:`experiments.propositions.reports` draws the figures and writes the tables.

Output (``--output_dir``; default: the config's ``output_dir``): ``records.jsonl`` --
one JSON line per configuration ``{"key", "config", "result", "provenance"}`` written by
the generic resumable runner :mod:`experiments.common.sweep` (atomic append; a restart
skips configurations whose key is already there -- the key includes a hash of the
settings that produce it; non-finite floats are stored as ``null``, i.e. ``KL = +inf``
appears as ``null``); PNG figures rebuilt from the records each run;
``tables.md`` (markdown tables, and the wall time per part); a summary table on stdout.
"""

from __future__ import annotations

import dataclasses
import os

from experiments.common import cli, knobs, specs
from experiments.propositions.reports import markdown_tables, summary_table, timing_table
from experiments.propositions.sweep import RECORDS, run


@dataclasses.dataclass(frozen=True)
class LossyPropositionsSpec:
  """The models the real-context parts run on, over the config's."""
  checkpoint_dir: str = knobs.knob("", "directory with target/ and draft/ HF checkpoints; "
                                   "overrides config.models (use 'tiny' for random tiny "
                                   "models; '' = config.models)")


SPECS = knobs.Specs(specs.OutputDirSpec, LossyPropositionsSpec,
                    presets=dict(output_dir=""))  # '': the config's output_dir

_CONFIG = None  # defined in __main__ only: importing this module defines no flags


@dataclasses.dataclass(frozen=True)
class Run:
  """This binary's specs (besides ``--config``), by name."""
  output: specs.OutputDirSpec
  props: LossyPropositionsSpec


def main():
  r = Run(*SPECS.build())
  cli.apply_decision_flag()
  c = _CONFIG.value
  output_dir = r.output.output_dir or c.output_dir
  models = r.props.checkpoint_dir or c.models
  records = run(c, output_dir, models)
  print(summary_table(records, c.theta))
  timing = timing_table(records)
  print("\n" + timing)
  md = markdown_tables(records) + "\n" + timing
  with open(os.path.join(output_dir, "tables.md"), "w") as f:
    f.write(md)
  print(f"\nrecords: {os.path.join(output_dir, RECORDS)}")


def _define_flags():
  """absl flags of this binary (not at import: several binaries share a process in tests)."""
  global _CONFIG
  _CONFIG = cli.define_config_file(
      "config", os.path.join(os.path.dirname(__file__), "configs", "propositions.py"),
      "Propositions config file.", lock_config=True)
  SPECS.define()
  cli.define_decision_flag()


if __name__ == "__main__":
  cli.run_binary(main, define_flags=_define_flags, flags_parser=cli.parse_flags)
