"""The package's one ``.safetensors`` reader and writer (numpy, no torch).

Both go through the ``safetensors`` library's numpy binding.  bfloat16 needs
``ml_dtypes``: safetensors names the dtype ``"bfloat16"`` and numpy knows that
name only once ``ml_dtypes`` has registered it, so it is imported here (JAX
depends on it) before any file is read.  Every tensor read is checked finite.
"""

from __future__ import annotations

import os
from typing import Mapping

import numpy as np

from specjax.checks import check_finite

METADATA = {"format": "pt"}  # what transformers expects of a safetensors file


def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """All tensors of ``path`` as numpy arrays (bf16 as ``ml_dtypes.bfloat16``).

  Raises ``ValueError`` for a file safetensors cannot parse or a tensor with
  NaN / inf (naming it).
  """
  import ml_dtypes  # noqa: F401  registers "bfloat16" with numpy
  from safetensors import safe_open
  try:
    with safe_open(path, framework="np") as f:
      tensors = {k: f.get_tensor(k) for k in f.keys()}
  except Exception as e:  # safetensors raises its own error types
    raise ValueError(f"cannot read safetensors file {path}: {e}") from None
  check_finite(tensors.items(), path)
  return tensors


def write_safetensors(path: str, tensors: Mapping[str, np.ndarray], dtype=None) -> None:
  """Write ``tensors`` to ``path`` (the directory must exist), cast to ``dtype``
  ("float32" | "bfloat16" | ...) when given -- through JAX, so bf16 rounds as
  the model computes."""
  from safetensors.numpy import save_file
  if dtype is not None:
    import jax.numpy as jnp
    from specjax.models.config import resolve_dtype
    dt = resolve_dtype(dtype)
    tensors = {k: np.asarray(jnp.asarray(v).astype(dt)) for k, v in tensors.items()}
  save_file(dict(tensors), os.fspath(path), metadata=METADATA)
