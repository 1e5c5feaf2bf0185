"""Every module of experiments/ and benchmarks/ imports in ONE interpreter, and
none defines an absl flag at import (experiments/common/cli.py: flags are defined on a
binary's main path only), so two binaries never collide with absl's
``DuplicateFlagError`` and importing a binary runs nothing."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_DRIVER = r'''
import importlib, json, sys
from absl import app, flags, logging  # absl's own flags (--logtostderr, ...) come first
defined, failed = {}, {}
for name in json.loads(sys.argv[1]):
  seen = set(flags.FLAGS)
  try:
    importlib.import_module(name)
  except Exception as e:
    failed[name] = f"{type(e).__name__}: {e}"
    continue
  new = sorted(set(flags.FLAGS) - seen)
  if new:
    defined[name] = new
print("IMPORTS " + json.dumps({"defined": defined, "failed": failed}))
'''


def _modules(*packages) -> list:
  out = []
  for pkg in packages:
    for d, _, files in os.walk(os.path.join(ROOT, pkg)):
      if "__pycache__" in d:
        continue
      for f in sorted(files):
        if f.endswith(".py") and f != "__init__.py":
          rel = os.path.relpath(os.path.join(d, f[:-3]), ROOT)
          out.append(rel.replace(os.sep, "."))
  return sorted(out)


def _import_all(modules, extra_path: str = "") -> dict:
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (extra_path, ROOT) if p))
  r = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps(modules)], cwd=ROOT, env=env,
                     capture_output=True, text=True, timeout=300)
  lines = [l for l in r.stdout.splitlines() if l.startswith("IMPORTS ")]
  assert r.returncode == 0 and lines, r.stderr[-3000:]
  return json.loads(lines[-1][len("IMPORTS "):])


def test_every_binary_imports_together_without_defining_flags(tmp_path):
  # The check itself: a module that defines a flag at import, and two that collide.
  (tmp_path / "flag_at_import.py").write_text(
      "from absl import flags\nflags.DEFINE_integer('k', 4, 'K')\n")
  (tmp_path / "flag_again.py").write_text(
      "from absl import flags\nflags.DEFINE_integer('k', 5, 'K')\n")
  got = _import_all(["flag_at_import", "flag_again"], str(tmp_path))
  assert got["defined"] == {"flag_at_import": ["k"]}
  assert "DuplicateFlagError" in got["failed"]["flag_again"]

  modules = _modules("experiments", "benchmarks")
  for binary in ("experiments.benchmark", "experiments.acceptance", "benchmarks.speculative",
                 "benchmarks.sv_batch_sweep", "benchmarks.round_cost", "experiments.configs.compare"):
    assert binary in modules
  got = _import_all(modules)
  assert got == {"defined": {}, "failed": {}}
