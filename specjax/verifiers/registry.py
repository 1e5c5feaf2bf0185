"""THE verifier registry: rule names -> rule classes, and MARS threshold-hook names -> hooks.

``--verifier=mars`` flags and ``get("mars", theta=0.9)`` read the rule table;
``Mars(adaptive="entropy")`` reads the hook table.  Both tables share one
registration mechanism (:class:`_Table`): names are lower case, registering a
different object under a taken name raises.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from specjax.checks import ArgumentTypeError, coerce_number


class _Table:
  """A name -> object table with a registering decorator."""

  def __init__(self, what: str):
    self.what = what
    self.entries: dict[str, Any] = {}

  def register(self, name: str) -> Callable[[Any], Any]:
    def deco(obj):
      key = name.lower()
      if key in self.entries and self.entries[key] is not obj:
        raise ValueError(f"{self.what} {name!r} is already registered to {self.entries[key]}")
      self.entries[key] = obj
      return obj

    return deco

  def names(self) -> list[str]:
    return sorted(self.entries)

  def __contains__(self, name: str) -> bool:
    return name in self.entries

  def __getitem__(self, name: str):
    return self.entries[name]


_RULES = _Table("verifier name")
_THRESHOLD_HOOKS = _Table("threshold hook")

# A hook maps ``(threshold, margin, z [V], p [V]) -> [] threshold`` (see ``register_threshold_hook``).
ThresholdHook = Callable[[Any, str, Any, Any], Any]


RULE_KINDS = ("node", "path", "tree")
# name -> kind ("node": the four node functions of base.py, for chains and trees;
# "path": a path rule of path.py, e.g. "block", for chains; "tree": a tree rule of
# tree_rule.py, e.g. "traversal", for trees and chains).
_KINDS: dict[str, str] = {}


def register(name: str, kind: str = "node") -> Callable[[type], type]:
  """Class decorator registering a rule under ``name`` (lower case).

  ``kind`` is ``"node"`` (a :class:`~specjax.verifiers.base.NodeRule`),
  ``"path"`` (a :class:`~specjax.verifiers.path.PathRule`) or ``"tree"`` (a
  :class:`~specjax.verifiers.tree_rule.TreeRule`); all share one name space,
  so :func:`get` builds any.
  """
  if kind not in RULE_KINDS:
    raise ValueError(f"kind={kind!r}; allowed: {RULE_KINDS}")
  deco = _RULES.register(name)

  def register_kind(cls):
    out = deco(cls)
    _KINDS[name.lower()] = kind
    return out

  return register_kind


def available(kind: str | None = "node") -> list[str]:
  """Names of the registered rules of ``kind``: ``"node"`` (default: the rules the
  node drivers and the decoding loop take), ``"path"``, ``"tree"`` or ``None`` (all)."""
  if kind is not None and kind not in RULE_KINDS:
    raise ValueError(f"kind={kind!r}; allowed: {RULE_KINDS} or None (all)")
  return [n for n in _RULES.names() if kind is None or _KINDS.get(n, "node") == kind]


def register_threshold_hook(name: str) -> Callable[[ThresholdHook], ThresholdHook]:
  """Decorator registering an adaptive-threshold hook for ``Mars(adaptive=name)``.

  The hook is called inside ``Mars.init`` for every node as
  ``hook(threshold, margin, z, p)`` with the ``threshold`` (``theta`` or
  ``delta``; a traced [] scalar under jit), the static ``margin`` name, raw
  logits ``z [V]`` and target ``p [V]``; it must return the node's effective
  threshold ``[]`` and be jit-safe (no Python control flow on ``z`` / ``p``).
  """
  return _THRESHOLD_HOOKS.register(name)


def threshold_hooks() -> list[str]:
  """Names of the registered adaptive-threshold hooks."""
  return _THRESHOLD_HOOKS.names()


def threshold_hook(name: str) -> ThresholdHook:
  """The hook registered as ``name``; ``KeyError`` if none is."""
  return _THRESHOLD_HOOKS[name]


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
  if key not in _RULES:
    raise ValueError(f"unknown verifier {name!r}; available: {', '.join(available(None))}")
  cls = _RULES[key]
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


@functools.lru_cache(maxsize=None)
def default_rule(name: str):
  """The registered rule ``name`` with default hyperparameters, built once (MARS ``base="..."``)."""
  return get(name)


def kind_of(rule) -> str:
  """The kind of a rule object: ``"tree"`` (a :class:`~specjax.verifiers.tree_rule.TreeRule`),
  ``"path"`` (any other :class:`~specjax.verifiers.path.PathRule`) or ``"node"`` (a
  :class:`~specjax.verifiers.base.NodeRule`) -- :data:`RULE_KINDS`, read from the class so
  that unregistered rules (matched baselines, test variants) have one too."""
  from specjax.verifiers.base import NodeRule  # the rule modules import this one
  from specjax.verifiers.path import PathRule
  from specjax.verifiers.tree_rule import TreeRule
  if isinstance(rule, TreeRule):
    return "tree"
  if isinstance(rule, PathRule):
    return "path"
  if isinstance(rule, NodeRule):
    return "node"
  raise ValueError(f"rule={rule!r} is not a verification rule (a NodeRule, PathRule or "
                   f"TreeRule of specjax.verifiers); kinds: {RULE_KINDS}")
