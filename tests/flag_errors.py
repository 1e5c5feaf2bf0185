"""Check many bad command lines of one absl binary in ONE fresh interpreter.

Starting an interpreter (and importing JAX) per bad flag cost the suite ~5 s a
case. :func:`usage_errors` starts one, defines the binary's flags once, and
for each command line parses it into a reset ``FLAGS`` and calls the binary's
entry point, which must raise ``app.UsageError`` (or absl's flag-parse error)
before any model loads. Anything else -- another exception (a traceback for
the user), or no error at all -- fails the calling test. The end-to-end path
(absl printing the usage error, exit code 1, no traceback) is covered by one
real subprocess per binary in the binaries' own tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_DRIVER = r'''
import importlib, json, sys
from absl import app, flags
module, entry, define, argvs = json.loads(sys.argv[1])
m = importlib.import_module(module)
if define:
    getattr(m, define)()
out = []
for argv in argvs:
    flags.FLAGS.unparse_flags()
    try:
        flags.FLAGS([module] + argv)
    except flags.Error as e:
        out.append({"kind": "flag_error", "message": str(e)})
        continue
    try:
        getattr(m, entry)()
        out.append({"kind": "no_error", "message": ""})
    except app.UsageError as e:
        out.append({"kind": "usage_error", "message": str(e)})
    except Exception as e:  # a traceback for the user: the case fails
        out.append({"kind": "exception", "message": f"{type(e).__name__}: {e}"})
print("FLAG_ERRORS " + json.dumps(out))
'''


def usage_errors(module: str, argvs: list[list[str]], *, entry: str = "run",
                 define: str | None = None, timeout: float = 300) -> list[str]:
  """The error message of each command line in ``argvs`` (one interpreter).

  Args:
    module: the binary's module (``experiments.benchmark``).
    argvs: command lines without the program name; each must fail.
    entry: the binary's entry point, called after parsing (it checks its flags
      first and raises ``app.UsageError`` naming the bad one).
    define: the module's flag-defining function when flags are not defined at
      import (``define_flags``).

  Raises ``AssertionError`` naming the command line that did not fail with a
  usage or flag error.
  """
  r = subprocess.run([sys.executable, "-c", _DRIVER, json.dumps([module, entry, define, argvs])],
                     cwd=ROOT, capture_output=True, text=True, timeout=timeout)
  lines = [l for l in r.stdout.splitlines() if l.startswith("FLAG_ERRORS ")]
  assert r.returncode == 0 and lines, r.stderr[-3000:]
  results = json.loads(lines[-1][len("FLAG_ERRORS "):])
  for argv, res in zip(argvs, results):
    assert res["kind"] in ("usage_error", "flag_error"), (argv, res)
  return [res["message"] for res in results]
