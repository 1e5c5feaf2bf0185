"""What the benchmark binaries share before and after the timing (no JAX): reading a
list flag of positive integers, and writing the JSON record."""

from __future__ import annotations

import json
import os

from absl import app


def positive_ints(name: str, values) -> list[int]:
  """``--name``'s list of strings as integers >= 1, or a ``UsageError`` naming the flag."""
  try:
    out = [int(v) for v in values]
  except ValueError:
    raise app.UsageError(f"--{name}={','.join(values)} must be a list of integers") from None
  if not out or min(out) < 1:
    raise app.UsageError(f"--{name}={','.join(values)} entries must be >= 1")
  return out


def write_record(path: str, record: dict) -> None:
  """Write ``record`` as indented JSON at ``path`` (making its directory) and say so."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path, "w") as f:
    json.dump(record, f, indent=1)
  print(f"wrote {path}")
