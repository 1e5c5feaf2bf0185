"""The JSON records of training runs (feature-store manifests, ``training.json``):
read when present, written atomically (aside, then renamed) so that a kill never
leaves half a file."""

from __future__ import annotations

import json
import os
from typing import Optional


def read_json(path: str) -> Optional[dict]:
  """The JSON object in ``path``, or None when there is no such file."""
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def write_json_atomic(path: str, obj) -> None:
  """Write ``obj`` to ``path`` through a temporary file and ``os.replace``."""
  tmp = f"{path}.tmp-{os.getpid()}"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=1)
  os.replace(tmp, path)
