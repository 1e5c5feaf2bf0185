"""Where a record came from: the stamp every committed result record carries.

A number in the docs is only as good as the record behind it, and a record is
only re-derivable when it says how it was made.  :func:`stamp` returns the
facts a reader needs to rerun or distrust it::

    {"command": "python -m benchmarks.layer_stack --repeats=5",
     "git_commit": "b4c885a...", "git_dirty": false,
     "started": "2026-12-02T13:40:00Z",
     "load_average": [0.4, 0.6, 0.9],      # 1/5/15 min, when the run started
     "cpus": 2, "platform": "Linux-...", "python": "3.11.9",
     "jax": "0.10.2", "backend": "cpu", "devices": 1}

and :func:`finish` adds the load when the run ended (a run on a busy machine
is visibly so).  Model hashes are the caller's to name (they know which files
it loaded): :func:`model_hashes` hashes them and :func:`stamped` puts both on a
record (``"provenance"``, ``"model_sha256"``).  Nothing here reaches the network; git is asked only when the
working directory is a git checkout.

A record that *decides* something (which head ships, whether a drafter is faster)
must come from a committed tree: :func:`require_clean_tree` (a binary's
``--decision`` flag) refuses to start on a checkout with uncommitted changes to
tracked files, and every stamp the process writes afterwards carries
``"decision": true``.  Records from a dirty tree stay exploratory; the result
tables say so.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from typing import Mapping, Optional, Sequence

import jax


# environment variables that change what a run computes or how fast: a command that
# ran with one set reproduces only with it, so the command line names them
COMMAND_ENVIRONMENT = ("XLA_FLAGS", "JAX_PLATFORMS", "JAX_ENABLE_X64",
                       "JAX_DEFAULT_MATMUL_PRECISION", "JAX_DEFAULT_DTYPE_BITS")


def command_line(argv: Optional[Sequence[str]] = None,
                 environ: Optional[Mapping[str, str]] = None) -> str:
  """The command as a person would type it: ``python -m <module> <args>`` when
  run as a module (``sys.argv[0]`` is then the module's file path), preceded by
  the :data:`COMMAND_ENVIRONMENT` variables that are set (``XLA_FLAGS=... python
  ...``), read from ``environ`` (default ``os.environ``)."""
  environ = os.environ if environ is None else environ
  env = [f"{k}={shlex.quote(environ[k])}" for k in COMMAND_ENVIRONMENT if environ.get(k)]
  argv = list(sys.argv if argv is None else argv)
  if not argv:
    return " ".join(env + ["python"])
  main = sys.modules.get("__main__")
  spec = getattr(main, "__spec__", None)
  as_module = (spec is not None and spec.name != "__main__"
               and os.path.abspath(argv[0]) == os.path.abspath(getattr(main, "__file__", "")))
  name = spec.name.removesuffix(".__main__") if as_module else ""
  head = ["python", "-m", name] if as_module else ["python", argv[0]]
  return " ".join(env + [shlex.quote(a) for a in head + argv[1:]])


def git_state(cwd: Optional[str] = None) -> dict:
  """``{"git_commit": sha or None, "git_dirty": bool or None}`` of ``cwd``'s checkout."""
  def git(*args):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
  try:
    head = git("rev-parse", "HEAD")
    if head.returncode != 0:
      return {"git_commit": None, "git_dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": head.stdout.strip(), "git_dirty": bool(status.stdout.strip())}
  except (OSError, subprocess.TimeoutExpired):
    return {"git_commit": None, "git_dirty": None}


class DirtyTreeError(RuntimeError):
  """A decision run was asked for on a checkout that cannot vouch for its code."""


_DECISION = {"on": False}


def require_clean_tree(cwd: Optional[str] = None) -> dict:
  """Refuse (:class:`DirtyTreeError`) unless ``cwd`` is a git checkout without
  uncommitted changes to tracked files; then mark every later :func:`stamp` of this
  process ``"decision": True``. Returns the :func:`git_state`."""
  state = git_state(cwd)
  if state["git_commit"] is None:
    raise DirtyTreeError(f"--decision: {cwd or os.getcwd()!r} is not a git checkout (or git "
                         "failed); a decision record must name the commit it ran")
  if state["git_dirty"]:
    raise DirtyTreeError("--decision: the working tree has uncommitted changes to tracked "
                         "files (git status --untracked-files=no); a decision record must "
                         "come from a committed tree: commit, or run without --decision "
                         "(an exploratory record)")
  _DECISION["on"] = True
  return state


def _load() -> list:
  try:
    return [round(x, 2) for x in os.getloadavg()]
  except OSError:  # not available on this platform
    return []


def stamp(argv: Optional[Sequence[str]] = None, cwd: Optional[str] = None) -> dict:
  """The provenance of a run starting now (see the module docstring)."""
  return {
      "command": command_line(argv),
      **git_state(cwd),
      "started": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
      "load_average": _load(),
      "cpus": os.cpu_count(),
      "platform": platform.platform(),
      "python": platform.python_version(),
      "jax": jax.__version__,
      "backend": jax.default_backend(),
      "devices": jax.device_count(),
      **({"decision": True} if _DECISION["on"] else {}),
  }


def finish(record_stamp: dict) -> dict:
  """``record_stamp`` with the load average and time at the end of the run."""
  return {**record_stamp, "load_average_end": _load(),
          "finished": datetime.datetime.now(datetime.timezone.utc).strftime(
              "%Y-%m-%dT%H:%M:%SZ")}


def model_hashes(sources: Mapping[str, Optional[str]]) -> dict:
  """``{name: sha256}`` of the weights each model of a run was loaded from: a file
  (a ``.gguf``) is hashed itself, a checkpoint directory by its ``model.safetensors``;
  ``None`` where there is no such file (a random model, ``None`` source)."""
  from specjax.models.registry import file_sha256
  out = {}
  for name, path in sorted(sources.items()):
    f = os.path.join(path, "model.safetensors") if path and os.path.isdir(path) else path
    out[name] = file_sha256(f) if f and os.path.isfile(f) else None
  return out


def stamped(record: dict, record_stamp: dict,
            sources: Optional[Mapping[str, Optional[str]]] = None) -> dict:
  """``record`` with ``"provenance"`` (:func:`finish` of ``record_stamp``) and, when
  the run's model ``sources`` are given, ``"model_sha256"`` (:func:`model_hashes`)."""
  out = {**record, "provenance": finish(record_stamp)}
  if sources is not None:
    out["model_sha256"] = model_hashes(sources)
  return out
