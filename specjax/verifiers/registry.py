"""Name -> rule registry, so ``--verifier=mars`` flags and ``get("mars", theta=0.9)`` work."""

from __future__ import annotations

import dataclasses
from typing import Callable

from specjax.checks import ArgumentTypeError, coerce_number

_REGISTRY: dict[str, type] = {}


def register(name: str) -> Callable[[type], type]:
  """Class decorator registering a rule under ``name`` (lower case)."""

  def deco(cls: type) -> type:
    key = name.lower()
    if key in _REGISTRY and _REGISTRY[key] is not cls:
      raise ValueError(f"verifier name {name!r} is already registered to {_REGISTRY[key]}")
    _REGISTRY[key] = cls
    return cls

  return deco


def available() -> list[str]:
  """Names of all registered rules."""
  return sorted(_REGISTRY)


def _number_kind(field: dataclasses.Field) -> tuple[type | None, bool]:
  """``(kind, optional)``: kind is float / int / bool when the field holds a number
  of that kind (else None); optional when ``None`` is also allowed.

  Read from the annotation (``from __future__ import annotations`` makes it a
  string such as ``"float | None"``) or, failing that, the default's type.
  """
  ann = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
  ann = ann.replace(" ", "")
  optional = ann.endswith("|None") or ann.startswith("Optional[")
  ann = ann.removesuffix("|None").removeprefix("Optional[").removesuffix("]")
  for kind in (bool, int, float):
    if ann == kind.__name__:
      return kind, optional
  d = field.default
  if isinstance(d, bool):
    return bool, optional
  if isinstance(d, (int, float)):
    return type(d), optional
  return None, optional



def get(name: str, **hparams):
  """Instantiate the rule registered as ``name`` with ``hparams``.

  Hyperparameters given as strings (command lines: ``mars:theta=.9``) are
  converted to the field's number type here -- ``"0.9"`` becomes ``0.9``, a
  string that does not parse raises -- so a rule never stores a string where
  a number belongs.  Raises ``ValueError`` for an unknown name (listing the
  known ones), an unknown hyperparameter (listing the allowed ones) or an
  out-of-range value, ``TypeError`` for a value of the wrong type.
  """
  if not isinstance(name, str):
    raise ArgumentTypeError(f"verifier name={name!r} must be a string; available: "
                    f"{', '.join(available())}")
  key = name.strip().lower()
  if key not in _REGISTRY:
    raise ValueError(f"unknown verifier {name!r}; available: {', '.join(available())}")
  cls = _REGISTRY[key]
  fields = {f.name: f for f in dataclasses.fields(cls)}
  unknown = sorted(set(hparams) - set(fields))
  if unknown:
    raise ValueError(f"verifier {name!r} has no hyperparameter(s) {unknown}; "
                     f"allowed: {sorted(fields) or 'none'}")
  converted = {}
  for k, v in hparams.items():
    kind, optional = _number_kind(fields[k])
    if optional and isinstance(v, str) and v.strip().lower() in ("none", "null"):
      v = None
    converted[k] = coerce_number(f"{key}.{k}", v, kind) if kind is not None else v
  return cls(**converted)
