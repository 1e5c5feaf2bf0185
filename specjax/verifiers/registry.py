"""Name -> rule registry, so ``--verifier=mars`` flags and ``get("mars", theta=0.9)`` work."""

from __future__ import annotations

from typing import Callable

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


def get(name: str, **hparams):
  """Instantiate the rule registered as ``name`` with ``hparams``.

  Raises ``ValueError`` for an unknown name (listing the known ones) or an
  unknown / out-of-range hyperparameter.
  """
  key = name.lower()
  if key not in _REGISTRY:
    raise ValueError(f"unknown verifier {name!r}; available: {', '.join(available())}")
  cls = _REGISTRY[key]
  import dataclasses
  fields = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(hparams) - fields)
  if unknown:
    raise ValueError(f"verifier {name!r} has no hyperparameter(s) {unknown}; "
                     f"allowed: {sorted(fields) or 'none'}")
  return cls(**hparams)
