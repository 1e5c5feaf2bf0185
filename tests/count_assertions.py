"""Count the assertions each test executes (a pytest plugin; tests/README.md, "Counting
assertions").

Counted per test, by kind:

* ``assert`` -- ``assert`` statements that passed (pytest's ``pytest_assertion_pass``
  hook; it fires only for modules rewritten while the ini option
  ``enable_assertion_pass_hook`` is true, so run with
  ``-o enable_assertion_pass_hook=true`` and with an empty ``PYTHONPYCACHEPREFIX``,
  so that no rewritten ``.pyc`` written without the hook is reused);
* ``numpy`` -- calls of ``numpy.testing.assert_*``;
* ``chex`` -- calls of ``chex.assert_*``;
* ``raises`` -- ``pytest.raises`` / ``pytest.warns``.

Only the outermost call counts (an ``assert_allclose`` that calls other numpy asserts
counts once). A test whose call phase failed is recorded with its outcome; its counts
are the assertions that passed before the failure.

Use (also with pytest-xdist: every worker writes its own file)::

    export PYTHONPYCACHEPREFIX=$(mktemp -d)
    python -m pytest -p tests.count_assertions -o enable_assertion_pass_hook=true \\
        --count-assertions-dir=DIR ...
    python tests/count_assertions.py summarize DIR [BASELINE_DIR] [--json OUT]

Self-contained (standard library, pytest, and numpy / chex when installed) so that
it can be copied outside a tree and loaded with ``-p count_assertions`` on an older
commit.
"""

from __future__ import annotations

import argparse
import collections
import functools
import glob
import json
import os
import sys
import threading

KINDS = ("assert", "numpy", "chex", "raises")
_state = threading.local()
_counts: dict = collections.defaultdict(lambda: dict.fromkeys(KINDS, 0))
_outcomes: dict = {}
_current = [None]


def _bump(kind: str) -> None:
  if _current[0] is not None:
    _counts[_current[0]][kind] += 1


def _counted(fn, kind: str):
  """``fn`` that counts one ``kind`` assertion per outermost call."""

  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    depth = getattr(_state, "depth", 0)
    if depth == 0:
      _bump(kind)
    _state.depth = depth + 1
    try:
      return fn(*args, **kwargs)
    finally:
      _state.depth = depth
  wrapper.__counted__ = True
  return wrapper


def _wrap_module(mod, prefix: str, kind: str) -> None:
  for name in dir(mod):
    fn = getattr(mod, name)
    if name.startswith(prefix) and callable(fn) and not getattr(fn, "__counted__", False):
      setattr(mod, name, _counted(fn, kind))


def pytest_addoption(parser):
  parser.addoption("--count-assertions-dir", default=os.environ.get(
      "SPECJAX_COUNT_ASSERTIONS_DIR", ""), help="write per-test assertion counts here")


def pytest_configure(config):
  if not config.getoption("--count-assertions-dir"):
    return
  if not config.getini("enable_assertion_pass_hook"):
    raise SystemExit("count_assertions: run with -o enable_assertion_pass_hook=true")
  import numpy.testing
  import pytest
  _wrap_module(numpy.testing, "assert_", "numpy")
  try:
    import chex
    _wrap_module(chex, "assert_", "chex")
  except ImportError:
    pass
  pytest.raises = _counted(pytest.raises, "raises")
  pytest.warns = _counted(pytest.warns, "raises")


def pytest_runtest_setup(item):
  _current[0] = item.nodeid
  _counts[item.nodeid]  # every test gets an entry, even with no assertion


def pytest_runtest_teardown(item):
  _current[0] = None


def pytest_assertion_pass(item, lineno, orig, expl):
  _counts[item.nodeid]["assert"] += 1


def pytest_runtest_logreport(report):
  if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
    _outcomes[report.nodeid] = report.outcome


def pytest_sessionfinish(session):
  out = session.config.getoption("--count-assertions-dir")
  if not out or not _counts:
    return
  os.makedirs(out, exist_ok=True)
  worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
  with open(os.path.join(out, f"counts-{worker}-{os.getpid()}.json"), "w") as f:
    json.dump({"tests": {k: dict(v, outcome=_outcomes.get(k, "?"))
                         for k, v in _counts.items()}}, f)


# ---------------------------------------------------------------- summaries


def load(directory: str) -> dict:
  """``{nodeid: {kind: n, "outcome": ...}}`` merged over a run's files."""
  tests: dict = {}
  for p in sorted(glob.glob(os.path.join(directory, "counts-*.json"))):
    with open(p) as f:
      tests.update(json.load(f)["tests"])
  if not tests:
    raise SystemExit(f"no counts-*.json under {directory!r}")
  return tests


def by_file(tests: dict) -> dict:
  """``{file: {"tests": n, "failed": n, kind: n, "total": n}}``."""
  files: dict = collections.defaultdict(lambda: dict({"tests": 0, "failed": 0, "total": 0},
                                                     **dict.fromkeys(KINDS, 0)))
  for nodeid, c in tests.items():
    f = files[nodeid.split("::")[0]]
    f["tests"] += 1
    f["failed"] += c.get("outcome") == "failed"
    for k in KINDS:
      f[k] += c.get(k, 0)
      f["total"] += c.get(k, 0)
  return dict(files)


def totals(files: dict) -> dict:
  keys = ("tests", "failed", "total") + KINDS
  return {k: sum(f[k] for f in files.values()) for k in keys}


def summarize(now_dir: str, base_dir: str = "", json_out: str = "") -> dict:
  """Print totals (and per-file counts against a baseline run); returns the record."""
  now = by_file(load(now_dir))
  record = {"now": {"totals": totals(now), "files": now}}
  print("now:", record["now"]["totals"])
  if base_dir:
    base = by_file(load(base_dir))
    record["baseline"] = {"totals": totals(base), "files": base}
    print("baseline:", record["baseline"]["totals"])
    print(f"{'file':<48} {'tests':>11} {'assertions':>15}")
    fell = []
    for name in sorted(set(now) | set(base)):
      n, b = now.get(name, {}), base.get(name, {})
      nt, bt = n.get("total", 0), b.get("total", 0)
      flag = " <" if nt < bt else ""
      fell += [name] if nt < bt else []
      print(f"{name:<48} {b.get('tests', 0):>5}->{n.get('tests', 0):<5} "
            f"{bt:>7}->{nt:<7}{flag}")
    record["files_that_fell"] = fell
  if json_out:
    with open(json_out, "w") as f:
      json.dump(record, f, indent=1, sort_keys=True)
  return record


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description="summarize assertion counts")
  ap.add_argument("command", choices=["summarize"])
  ap.add_argument("now")
  ap.add_argument("baseline", nargs="?", default="")
  ap.add_argument("--json", default="")
  a = ap.parse_args(argv)
  summarize(a.now, a.baseline, a.json)
  return 0


if __name__ == "__main__":
  sys.exit(main())
