"""Command-line parsing for the experiment binaries: a bad flag is one clear line,
and one ``main`` for all of them (:func:`run_binary`, :func:`run_config_binary`).

absl reports unknown ``--flags`` itself, but an ml_collections override such
as ``--config.nosuch=1`` or ``--config.seed=abc`` fails *inside* flag parsing
with a bare ``AttributeError`` / ``ValueError`` and a 20-frame traceback --
ml_collections applies the overrides already when the flag is *defined*.
:func:`define_config_file` (instead of ``config_flags.DEFINE_config_file``)
and :func:`parse_flags` (``app.run(main, flags_parser=cli.parse_flags)``)
turn both into one ``FATAL`` line naming the override and exit with status 1
before anything is loaded.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from absl import flags


def _fail_override(e: Exception, argv: list[str]) -> None:
  overrides = [a for a in argv[1:] if a.startswith("--config.")]
  reason = str(e).strip("\"'")
  if isinstance(e, (AttributeError, KeyError)):
    reason = f"the config has no field {reason!r}"
  sys.stderr.write(f"FATAL bad config override among {overrides}: {reason} "
                   f"({type(e).__name__}).\n")
  sys.exit(1)


def define_config_file(*args, **kwargs):
  """``config_flags.DEFINE_config_file`` that reports a bad ``--config.*`` override
  (unknown field, wrong type) as one line instead of a traceback."""
  from ml_collections import config_flags
  try:
    return config_flags.DEFINE_config_file(*args, **kwargs)
  except (AttributeError, KeyError, ValueError, TypeError) as e:
    _fail_override(e, sys.argv)


def parse_flags(argv: list[str]) -> list[str]:
  """``flags.FLAGS(argv)`` with clear, traceback-free errors (exit status 1)."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as e:
    sys.stderr.write(f"FATAL Flags parsing error: {e}\nPass --helpfull to see help on flags.\n")
    sys.exit(1)
  except (AttributeError, KeyError, ValueError, TypeError) as e:
    _fail_override(e, argv)


def run_binary(run: Callable[[], Any], *, define_flags: Callable[[], Any] | None = None,
               flags_parser: Callable[[list[str]], list[str]] | None = None) -> None:
  """The ``__main__`` of an absl binary: ``define_flags()`` (flags are defined here,
  never at import, because several binaries share one process in the tests), parse,
  refuse positional arguments, call ``run()``.

  ``run`` checks its flags first, raising ``app.UsageError`` naming the flag (absl
  prints it with the usage line), then makes its one library call and reports.
  ``flags_parser``: e.g. :func:`parse_flags` (default: absl's)."""
  from absl import app

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments {argv[1:]}")
    run()

  if define_flags is not None:
    define_flags()
  app.run(main, **({"flags_parser": flags_parser} if flags_parser else {}))


def run_config_binary(run, help_text: str, default: str | None = None) -> None:
  """The ``__main__`` of a config-file binary: define ``--config`` (required when
  there is no ``default``; bad overrides are one line), parse, call ``run(config)``."""
  config = define_config_file("config", default, help_text, lock_config=True)
  if default is None:
    flags.mark_flags_as_required(["config"])
  run_binary(lambda: run(config.value), flags_parser=parse_flags)


def define_distributed_flags() -> None:
  """``--coordinator_address``, ``--num_processes``, ``--process_id`` (idempotent:
  several binaries share one process in the tests)."""
  if "num_processes" in flags.FLAGS:
    return
  flags.DEFINE_string("coordinator_address", None, "multi-process runs: 'host:port' of "
                      "process 0 (jax.distributed); every process gets the same flags")
  flags.DEFINE_integer("num_processes", 1, "multi-process runs: number of processes")
  flags.DEFINE_integer("process_id", 0, "multi-process runs: this process's index in "
                       "[0, num_processes)")


def define_layer_stack_flag() -> None:
  """``--layer_stack`` (idempotent): how the decode loops run the models' layers
  (``specjax.models.transformer.resolve_layer_stack``); :func:`apply_layer_stack`
  puts it in force."""
  if "layer_stack" in flags.FLAGS:
    return
  flags.DEFINE_enum("layer_stack", "auto", ["auto", "rolled", "unrolled"],
                    "decode loops: 'unrolled' per-layer weights (faster steps on CPU), "
                    "'rolled' lax.scan over the stacked weights (1.5-3x faster to compile; "
                    "accelerators), 'auto' = $SPECJAX_LAYER_STACK or unrolled on CPU, "
                    "rolled elsewhere (benchmarks/RESULTS.md, 'Rolled or unrolled layers')")


def apply_layer_stack() -> None:
  """Put ``--layer_stack`` in force for every model this process builds (through
  ``SPECJAX_LAYER_STACK``, which ``Model(layer_stack="auto")`` reads); call before
  the first model runs."""
  import os
  if flags.FLAGS.layer_stack != "auto":
    os.environ["SPECJAX_LAYER_STACK"] = flags.FLAGS.layer_stack


def initialize_distributed() -> bool:
  """``specjax.distributed.initialize`` from the flags of
  :func:`define_distributed_flags`; a bad value is an ``app.UsageError``.
  Call before any JAX computation."""
  from absl import app

  from specjax import distributed
  f = flags.FLAGS
  try:
    return distributed.initialize(f.coordinator_address, f.num_processes, f.process_id)
  except ValueError as e:
    raise app.UsageError(f"--{str(e)}") from None


def define_decision_flag() -> None:
  """``--decision`` (idempotent): the run's records decide something, so the run
  refuses to start from a tree with uncommitted changes (:func:`apply_decision_flag`)."""
  if "decision" in flags.FLAGS:
    return
  flags.DEFINE_bool("decision", False, "the records decide something (which drafter ships, "
                    "whether a drafter is faster): refuse to run from a git tree with "
                    "uncommitted changes to tracked files and stamp every record "
                    "'decision': true (specjax.provenance.require_clean_tree)")


def apply_decision_flag() -> None:
  """With ``--decision``: :func:`specjax.provenance.require_clean_tree`, its refusal an
  ``app.UsageError`` naming the flag. Call before anything is measured."""
  from absl import app

  from specjax import provenance
  if not flags.FLAGS.decision:
    return
  try:
    provenance.require_clean_tree()
  except provenance.DirtyTreeError as e:
    raise app.UsageError(str(e)) from None
