"""Boundary checks shared by every public entry point (errors at the boundary).

One job: turn a user's misuse into an error raised in Python, before tracing
or loading anything, that names the argument, the offending value and what is
allowed.  Wrong *types* raise ``TypeError``, wrong *values* ``ValueError``.

* :func:`check_range` -- a real number (never a string, bool or None) in a range.
* :func:`coerce_number` -- the one place a string becomes a number (command
  lines, ``verifiers.get``): ``"0.9"`` -> ``0.9``, ``"abc"`` -> error.
* :func:`check_int` -- an integer (not a bool, not a float) with a lower bound.
* :func:`check_key` -- a JAX PRNG key (``jax.random.key(0)``), not ``0``.
* :func:`check_finite` -- every tensor of a checkpoint is finite, by name.

This module is the ground floor: it imports nothing from specjax.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

import numpy as np


class ArgumentTypeError(TypeError, ValueError):
  """An argument of the wrong type (a string where a number belongs, a list of ids
  where a batch belongs, an int where a PRNG key belongs, ...)."""


def _describe(value) -> str:
  return f"{value!r} ({type(value).__name__})"


def is_real(value) -> bool:
  """A real number usable as a hyperparameter: int / float / numpy scalar, not bool."""
  if isinstance(value, (bool, np.bool_)):
    return False
  if isinstance(value, numbers.Real):
    return True
  return isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf"


def check_range(name: str, value, *, low=None, high=None, low_open=False,
                high_open=False) -> None:
  """Raise unless ``value`` is a real number in the stated range.

  ``TypeError`` for a non-number (a string such as ``"0.9"`` included: strings
  are converted only by :func:`coerce_number`, never stored); ``ValueError``
  naming ``name``, the value and the allowed range for NaN or out-of-range.
  """
  lo = "(" if low_open or low is None else "["
  hi = ")" if high_open or high is None else "]"
  allowed = f"{lo}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi}"
  if not is_real(value):
    raise ArgumentTypeError(f"{name}={_describe(value)} is not a number; give a float in {allowed}"
                    + (f" (convert the string first: {name}=float({value!r}))"
                       if isinstance(value, str) else ""))
  v = float(value)
  bad = v != v
  if low is not None:
    bad |= v <= low if low_open else v < low
  if high is not None:
    bad |= v >= high if high_open else v > high
  if bad:
    raise ValueError(f"{name}={value!r} is outside the allowed range {allowed}")


def check_int(name: str, value, *, low: int | None = None) -> int:
  """``value`` as a Python int; ``TypeError`` for bools, floats and strings,
  ``ValueError`` below ``low``."""
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
    raise ArgumentTypeError(f"{name}={_describe(value)} must be an integer"
                    + (f" >= {low}" if low is not None else ""))
  if low is not None and value < low:
    raise ValueError(f"{name}={value!r} must be an integer >= {low}")
  return int(value)


_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def coerce_number(name: str, value, kind: type) -> Any:
  """Convert a command-line / keyword string to ``kind`` (float, int or bool).

  Non-strings are returned unchanged (their type is checked by the consumer).
  Raises ``ValueError`` naming ``name`` and the string when it does not parse.
  """
  if not isinstance(value, str):
    return value
  s = value.strip()
  if kind is bool:
    if s.lower() in _TRUE:
      return True
    if s.lower() in _FALSE:
      return False
    raise ValueError(f"{name}={value!r} is not a boolean; allowed: true/false")
  try:
    if kind is int:
      return int(s)
    v = float(s)
  except ValueError:
    raise ValueError(f"{name}={value!r} is not a {kind.__name__}") from None
  if kind is float and not math.isfinite(v) and s.lower() not in ("inf", "+inf", "-inf"):
    raise ValueError(f"{name}={value!r} is not a finite float")
  return v


def check_key(name: str, key) -> None:
  """``TypeError`` unless ``key`` is a JAX PRNG key: a typed key array of shape ``()``
  (``jax.random.key``) or a raw ``uint32[2]`` key (``jax.random.PRNGKey``)."""
  import jax
  import jax.numpy as jnp
  if isinstance(key, (jax.Array, np.ndarray)):
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
      if key.shape == ():
        return
    elif key.dtype == np.uint32 and key.shape == (2,):
      return
    raise ArgumentTypeError(f"{name} must be one PRNG key (jax.random.key(seed)); got an array of "
                    f"shape {key.shape} and dtype {key.dtype}")
  raise ArgumentTypeError(f"{name}={_describe(key)} is not a PRNG key; use {name}=jax.random.key(seed)")


def check_finite(tensors: Iterable[tuple[str, Any]], where: str) -> None:
  """``ValueError`` naming the first tensor holding NaN or inf (``where``: the file)."""
  for name, t in tensors:
    a = np.asarray(t)
    if a.dtype.kind not in "fc":
      if str(a.dtype) in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):  # ml_dtypes (kind "V")
        a = a.astype(np.float32)
      else:
        continue
    finite = np.isfinite(a)
    if not finite.all():
      bad = a[~finite]
      raise ValueError(f"tensor {name!r} in {where} holds {bad.size} non-finite value(s) "
                       f"(first: {bad.flat[0]}); refusing weights with NaN/inf")
