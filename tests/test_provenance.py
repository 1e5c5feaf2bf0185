"""specjax.provenance: the stamp a committed record carries."""

import json
import os
import subprocess
import sys

from specjax import provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_stamp_names_command_commit_and_load(tmp_path):
  s = provenance.finish(provenance.stamp(["bench.py", "--repeats=3", "a b"], cwd=ROOT))
  json.dumps(s)  # a record field: JSON-able
  assert s["command"] == "python bench.py --repeats=3 'a b'"
  head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                        text=True).stdout.strip()
  assert s["git_commit"] == head and isinstance(s["git_dirty"], bool)
  assert len(s["load_average"]) == 3 and len(s["load_average_end"]) == 3
  assert s["backend"] and s["devices"] >= 1 and s["cpus"] >= 1
  assert s["started"] <= s["finished"]
  # outside a checkout: no commit, no error
  assert provenance.git_state(str(tmp_path)) == {"git_commit": None, "git_dirty": None}


def test_command_line_of_a_module_run(tmp_path):
  """``python -m pkg.mod args`` is recorded as typed, not as the module's file path."""
  pkg = tmp_path / "stamped"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("")
  (pkg / "run.py").write_text("from specjax import provenance\n"
                              "print(provenance.command_line())\n")
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT]))
  r = subprocess.run([sys.executable, "-m", "stamped.run", "--x=1"], cwd=tmp_path, env=env,
                     capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.strip() == "python -m stamped.run --x=1"
