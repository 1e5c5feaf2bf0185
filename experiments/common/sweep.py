"""A resumable sweep runner: one JSON line per configuration, append-only.

    from experiments.common import sweep
    records = sweep.run_sweep(configs, evaluate, "/tmp/out/results.jsonl")

``configs`` is a list of JSON-serialisable dicts; ``evaluate(config) -> dict``
computes one configuration's result.  Each finished configuration becomes one
line of the JSONL file::

    {"key": <stable key>, "config": <config>, "result": <evaluate(config)>}

and nothing else (no timestamps), so an interrupted-then-resumed sweep writes
byte-for-byte the file an uninterrupted one writes, whenever ``evaluate`` is
deterministic.

**Keys.**  A configuration's key is its ``"key"`` entry when present (a
string), else ``sha256`` of its canonical JSON (sorted keys, compact
separators), first 16 hex digits -- stable across processes and Python
versions.  Two configurations with the same key in one sweep are an error.

**Atomicity (choice: O_APPEND + one write + fsync).**  A record is serialised
to a single ``bytes`` line ending in ``\\n`` and written with ONE ``os.write``
on a file descriptor opened with ``O_APPEND``, followed by ``os.fsync``.  The
line is therefore either entirely in the file or -- if the process is killed
mid-write, or the machine loses power before the fsync -- a *torn* final line
(no trailing newline, or not valid JSON).  Earlier lines are never rewritten.
(Rewriting the whole file through a temp file + rename would cost O(records)
per record; appending costs O(1).)  Should the kernel perform a short write
(disk full, signal), the rest is written by further ``os.write`` calls on the
same descriptor before the fsync; a kill in between leaves a torn line, which
the next load drops exactly as above.

**Resume.**  :func:`load_records` reads the complete lines; a torn last line
is dropped and -- when ``repair=True``, as :func:`run_sweep` does -- the file
is truncated to the end of the last complete line before anything is
appended.  A malformed line that is *not* the last one cannot come from a
kill (writes are append-only) and raises ``ValueError`` rather than silently
losing data.  :func:`run_sweep` then skips every configuration whose key is
already in the file and evaluates the rest in the given order.

**Concurrency.**  ``run_sweep`` holds an exclusive ``fcntl.flock`` on the
JSONL file while it runs; a second sweep on the same file fails fast with
``RuntimeError`` instead of interleaving duplicates.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
from typing import Any, Callable, Sequence

from specjax import compiled_code


def canonical_json(obj: Any) -> str:
  """Deterministic compact JSON (sorted keys); NaN / inf become null."""
  return json.dumps(_jsonable(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


def _jsonable(obj: Any) -> Any:
  """Plain-JSON copy of ``obj``: numpy scalars/arrays -> Python, tuples -> lists,
  non-finite floats -> None."""
  if isinstance(obj, dict):
    return {str(k): _jsonable(v) for k, v in obj.items()}
  if isinstance(obj, (list, tuple)):
    return [_jsonable(v) for v in obj]
  if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):  # numpy / jax
    return _jsonable(obj.tolist())
  if isinstance(obj, bool) or obj is None or isinstance(obj, (int, str)):
    return obj
  if isinstance(obj, float):
    return obj if math.isfinite(obj) else None
  if hasattr(obj, "to_dict"):  # ml_collections.ConfigDict
    return _jsonable(obj.to_dict())
  raise TypeError(f"not JSON-serialisable: {type(obj).__name__}: {obj!r}")


def config_key(config: dict) -> str:
  """The stable key of one configuration (see module docstring)."""
  if "key" in config:
    key = config["key"]
    if not isinstance(key, str) or not key:
      raise ValueError(f"config key must be a non-empty string, got {key!r}")
    return key
  return hashlib.sha256(canonical_json(config).encode("utf-8")).hexdigest()[:16]


def _scan(data: bytes, path: str) -> tuple[list[dict], int]:
  """Parse complete JSONL records; returns (records, byte length of the good part)."""
  records, good = [], 0
  pos = 0
  while pos < len(data):
    nl = data.find(b"\n", pos)
    last = nl < 0 or nl == len(data) - 1
    line = data[pos:] if nl < 0 else data[pos:nl]
    try:
      rec = json.loads(line.decode("utf-8")) if nl >= 0 else None
      if rec is not None and not (isinstance(rec, dict) and "key" in rec):
        raise ValueError("record without a key")
    except (UnicodeDecodeError, ValueError):
      rec = None
    if rec is None:
      if last:
        break  # torn final line (killed mid-write): dropped
      raise ValueError(f"{path}: malformed record at byte {pos} that is not the last line; "
                       "refusing to guess (the file was not written by this module alone)")
    records.append(rec)
    pos = nl + 1
    good = pos
  return records, good


def load_records(path: str, repair: bool = False) -> list[dict]:
  """Complete records of a sweep file (``[]`` if it does not exist).

  A torn last line is dropped; with ``repair=True`` it is also cut off the file
  (``os.truncate`` + fsync) so that the next append starts on a fresh line.
  """
  if not os.path.exists(path):
    return []
  with open(path, "rb") as f:
    data = f.read()
  records, good = _scan(data, path)
  if repair and good < len(data):
    os.truncate(path, good)
    fd = os.open(path, os.O_RDONLY)
    try:
      os.fsync(fd)
    finally:
      os.close(fd)
  return records


def append_record(fd: int, record: dict) -> None:
  """Append one record as a single line: one ``os.write`` on an O_APPEND fd, then fsync."""
  line = (canonical_json(record) + "\n").encode("utf-8")
  view = memoryview(line)
  while view:
    n = os.write(fd, view)
    view = view[n:]
  os.fsync(fd)


@contextlib.contextmanager
def _open_append(path: str):
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as e:
      raise RuntimeError(f"{path} is locked by another running sweep") from e
    yield fd
  finally:
    os.close(fd)  # releases the lock


def _progress(total: int, initial: int, desc: str, enabled: bool):
  if not enabled:
    return None
  try:
    from tqdm import tqdm
  except ImportError:  # pragma: no cover
    return None
  return tqdm(total=total, initial=initial, desc=desc, unit="cfg", dynamic_ncols=True)


def run_sweep(configs: Sequence[dict], evaluate: Callable[[dict], dict], path: str, *,
              desc: str = "sweep", progress: bool = True,
              on_record: Callable[[dict], None] | None = None) -> list[dict]:
  """Evaluate every configuration not yet recorded in ``path``; return all records.

  Args:
    configs: JSON-serialisable dicts; keys from :func:`config_key`.
    evaluate: ``config -> result dict`` (JSON-serialisable).
    path: the JSONL file (created if missing; torn last line repaired).
    desc: tqdm label.
    progress: show a tqdm bar.
    on_record: called with each *new* record after it is durably written.

  Each new record is ``{"key", "config", "result", "provenance"}``; provenance is
  :func:`specjax.provenance.stamp` of this call (command, commit, load at the
  start) finished when the record was written (load and time then).

  Returns:
    The records of ``configs``, in ``configs`` order (previously written ones
    read back from the file).  Records of other keys in the file are kept in
    the file but not returned.
  """
  keys = [config_key(c) for c in configs]
  dup = sorted({k for k in keys if keys.count(k) > 1})
  if dup:
    raise ValueError(f"duplicate configuration keys in one sweep: {dup}")
  from specjax import provenance
  stamp = provenance.stamp()
  with _open_append(path) as fd:
    done = {r["key"]: r for r in load_records(path, repair=True)}
    todo = [(k, c) for k, c in zip(keys, configs) if k not in done]
    bar = _progress(len(configs), len(configs) - len(todo), desc, progress)
    try:
      for key, cfg in todo:
        if bar is not None:
          bar.set_postfix_str(key[:40])
        result = evaluate(cfg)
        # Long sweeps compile hundreds of programs; stay under vm.max_map_count.
        compiled_code.release_if_crowded()
        record = json.loads(canonical_json({"key": key, "config": cfg, "result": result,
                                            "provenance": provenance.finish(stamp)}))
        append_record(fd, record)
        done[key] = record
        if on_record is not None:
          on_record(record)
        if bar is not None:
          bar.update(1)
    finally:
      if bar is not None:
        bar.close()
  return [done[k] for k in keys]
