"""Hyperparameter dataclasses as pytrees: continuous values traced, the rest static.

One job: let a frozen dataclass of hyperparameters (a verification rule, a
:class:`~specjax.distributions.SamplingConfig`, a drafter) be passed to
``jax.jit`` as an ordinary argument, so that a sweep over its continuous
hyperparameters (MARS theta, CoS lam, a temperature, ...) reuses ONE compiled
program, while whatever fixes shapes or Python control flow stays part of the
compilation key (docs/design.md "Static vs traced hyperparameters"; t5x's per-example
temperature).

Subclasses of :class:`Hyperparams` are registered as pytrees automatically
(``__init_subclass__``).  Which fields are *traced* (pytree leaves, float32
scalars under jit) and which are *static* (part of the treedef, compared with
``==``) is decided per instance, from its concrete values, the first time it
is flattened:

* a field named in ``static_fields`` (collected over the class hierarchy) is
  static -- use it for a float that sets a shape or is read by Python ``if``;
* a float (Python or NumPy), a JAX array, a number in a field annotated
  ``float`` (``l=1`` travels as ``1.0``) or a nested :class:`Hyperparams`
  (e.g. MARS's base rule) is traced;
* anything else -- strings, bools, ints, ``None``, tuples, models -- is static.

The layout is stored with the treedef, so rebuilding an instance from leaves
(``jax.tree.unflatten``, which JAX does with tracers and with placeholder
objects) never looks at the values and never re-runs ``__post_init__``
validation: validation runs exactly once, at construction, on concrete values.
Derived attributes that the methods need under jit (e.g. SamplingConfig's
``greedy`` flag) are listed in ``static_attrs`` and travel with the treedef.

Equality and hashing stay the dataclass's (all fields), which is right for
concrete instances; an instance holding tracers is not hashable, and nothing
needs it to be.  :func:`static_key` is the hashable static part (the treedef).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import numpy as np

_LAYOUT = "_hp_layout_cache"


def _float_annotated(field: dataclasses.Field) -> bool:
  """True when the field's annotation says ``float`` (or ``float | None``)."""
  ann = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
  ann = ann.replace(" ", "").removesuffix("|None").removeprefix("Optional[").removesuffix("]")
  return ann == "float"


def _is_number(value) -> bool:
  return (isinstance(value, (int, float, np.integer, np.floating))
          and not isinstance(value, (bool, np.bool_)))


def _traced_value(field: dataclasses.Field, value) -> bool:
  if isinstance(value, Hyperparams):
    return True
  if isinstance(value, (float, np.floating, jax.Array)):
    return True
  return _float_annotated(field) and _is_number(value)


class Hyperparams:
  """Mixin for frozen dataclasses of hyperparameters: a pytree whose leaves are
  the traced (continuous) hyperparameters; see the module docstring.

  Class attributes:
    static_fields: names of fields kept static although they hold numbers.
    static_attrs: names of derived (non-field) attributes, computed at
      construction, that travel with the treedef.
  """

  static_fields: ClassVar[tuple[str, ...]] = ()
  static_attrs: ClassVar[tuple[str, ...]] = ()

  def __init_subclass__(cls, **kwargs):
    super().__init_subclass__(**kwargs)
    jax.tree_util.register_pytree_with_keys(cls, _flatten_with_keys, cls._hp_unflatten,
                                            _flatten)

  @classmethod
  def _declared_static(cls) -> frozenset:
    names = set()
    for klass in cls.__mro__:
      names.update(vars(klass).get("static_fields", ()))
    return frozenset(names)

  def _hp_compute_layout(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(traced field names, static field names)`` from the concrete values."""
    declared = self._declared_static()
    traced, static = [], []
    for f in dataclasses.fields(self):
      value = getattr(self, f.name)
      (traced if f.name not in declared and _traced_value(f, value) else static).append(f.name)
    return tuple(traced), tuple(static)

  def _hp_layout(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
    layout = self.__dict__.get(_LAYOUT)
    if layout is None:
      layout = self._hp_compute_layout()
      object.__setattr__(self, _LAYOUT, layout)
    return layout

  @property
  def traced_fields(self) -> tuple[str, ...]:
    """Names of the fields that are pytree leaves (traced under jit) in this instance."""
    return self._hp_layout()[0]

  @classmethod
  def _hp_unflatten(cls, aux, children):
    traced, static_items, attrs = aux
    obj = object.__new__(cls)  # no __init__ / __post_init__: values may be tracers
    for name, value in zip(traced, children):
      object.__setattr__(obj, name, value)
    for name, value in static_items + attrs:
      object.__setattr__(obj, name, value)
    object.__setattr__(obj, _LAYOUT, (traced, tuple(n for n, _ in static_items)))
    return obj


def _leaf(value):
  """NumPy / int leaves become Python floats (weak-typed float32 under jit): one
  compiled program serves ``0.9``, ``np.float64(0.9)`` and ``1``."""
  if _is_number(value):
    return float(value)
  return value


def _aux(obj: Hyperparams):
  traced, static = obj._hp_layout()
  static_items = tuple((n, getattr(obj, n)) for n in static)
  attrs = tuple((n, getattr(obj, n)) for n in type(obj).static_attrs)
  return traced, static_items, attrs


def _flatten(obj: Hyperparams):
  traced = obj._hp_layout()[0]
  return tuple(_leaf(getattr(obj, n)) for n in traced), _aux(obj)


def _flatten_with_keys(obj: Hyperparams):
  traced = obj._hp_layout()[0]
  children = tuple((jax.tree_util.GetAttrKey(n), _leaf(getattr(obj, n))) for n in traced)
  return children, _aux(obj)


def static_key(obj: Any):
  """The hashable static part of ``obj`` (its treedef): equal for two instances
  that differ only in traced hyperparameters."""
  return jax.tree.structure(obj)
