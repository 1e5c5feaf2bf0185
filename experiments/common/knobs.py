"""Typed run specs and the absl flags generated from them.

A *spec* is a frozen dataclass whose fields are *knobs* (:func:`knob`): one
field = one command-line flag of the same name, with its one default and help
text written next to it. A binary lists the specs it takes in a :class:`Specs`
and gets its flags (:meth:`Specs.define`) and its validated spec instances
(:meth:`Specs.build`) from it; it never calls ``flags.DEFINE_*`` itself. So a
knob is defined in exactly one place and shows the same default in every
binary's ``--help``.

Run-size knobs (how many prompts, tokens, repeats; where the output goes) differ
by purpose: a throughput benchmark and a data generator do not want the same
``--max_new_tokens``. Such a knob is declared ``preset=True``: it has no
default of its own, every binary that takes it states its value in
``Specs(presets=...)``, and ``--help`` prints it next to the knob ("this
binary: 96"). Every other knob has the one default of its field.

A spec checks its values in ``__post_init__`` and raises :class:`KnobError`
naming the flag, the value and what is allowed; :meth:`Specs.build` turns that
into ``app.UsageError`` (one line, exit status 1) before anything loads.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from typing import Any, Optional, Sequence

from absl import flags

_MISSING = dataclasses.MISSING


class KnobError(ValueError):
  """A knob's value is not allowed; the message names ``--flag=value``."""

  def __init__(self, name: str, value: Any, allowed: str):
    super().__init__(f"--{name}={_show(value)}: {allowed}")
    self.name = name


def _show(value: Any) -> str:
  if isinstance(value, tuple):
    return ",".join(str(v) for v in value)
  return repr(value) if isinstance(value, str) else str(value)


def knob(default: Any = None, help: str = "", *, choices: Optional[Sequence[str]] = None,
         preset: bool = False, required: bool = False, multi: bool = False):
  """A spec field that is also a command-line flag.

  Args:
    default: the knob's one default (ignored for ``preset`` knobs). A tuple default
      makes a comma-separated list flag.
    help: what the knob sets, shown by ``--help``.
    choices: the allowed values of a string knob (an enum flag).
    preset: a run-size knob whose value each binary states (module docstring).
    required: the flag must be given (no default).
    multi: a ``tuple[str, ...]`` knob given by repeating the flag (``--prompt=a
      --prompt=b``) instead of one comma-separated value (values may hold commas).
  """
  meta = {"help": help, "choices": tuple(choices) if choices else None, "preset": preset,
          "required": required, "multi": multi}
  return dataclasses.field(default=None if preset or required else default, metadata=meta)


def fields(spec_cls) -> list:
  """The knobs of a spec class, in declaration order."""
  return [f for f in dataclasses.fields(spec_cls) if "help" in f.metadata]


def _base_type(spec_cls, f) -> Any:
  hint = typing.get_type_hints(spec_cls)[f.name]
  args = [a for a in typing.get_args(hint) if a is not type(None)]
  if typing.get_origin(hint) is typing.Union and len(args) == 1:
    hint = args[0]  # Optional[X]
  return hint


def _define_one(spec_cls, f, fv: flags.FlagValues, preset_value: Any) -> None:
  meta = f.metadata
  typ = _base_type(spec_cls, f)
  default = preset_value if meta["preset"] else f.default
  help_text = meta["help"]
  if meta["preset"]:
    help_text += f" [preset: this binary's value, {_show(preset_value)}]"
  kw = dict(name=f.name, help=help_text, flag_values=fv)
  if typing.get_origin(typ) is tuple and meta["multi"]:
    flags.DEFINE_multi_string(default=None if default is None else list(default), **kw)
  elif typing.get_origin(typ) is tuple:
    flags.DEFINE_list(default=None if default is None else [str(v) for v in default], **kw)
  elif meta["choices"]:
    flags.DEFINE_enum(default=default, enum_values=list(meta["choices"]), **kw)
  elif typ is bool:
    flags.DEFINE_bool(default=default, **kw)
  elif typ is int:
    flags.DEFINE_integer(default=default, **kw)
  elif typ is float:
    flags.DEFINE_float(default=default, **kw)
  elif typ is str:
    flags.DEFINE_string(default=default, **kw)
  else:
    raise TypeError(f"{spec_cls.__name__}.{f.name}: knobs are str, int, float, bool or "
                    f"tuple[...], not {typ!r}")
  if meta["required"]:
    flags.mark_flag_as_required(f.name, flag_values=fv)
  # A key flag of the binary being run, so its --help lists the knob.
  fv.register_key_flag_for_module(sys.argv[0], fv[f.name])


def _convert(spec_cls, f, raw: Any) -> Any:
  """A parsed flag value as the field's type (list flags -> tuples of the element type)."""
  typ = _base_type(spec_cls, f)
  if raw is None or typing.get_origin(typ) is not tuple:
    return raw
  elem = (typing.get_args(typ) or (str,))[0]
  out = []
  for v in raw:
    try:
      out.append(elem(v) if elem is not str else v)
    except ValueError:
      raise KnobError(f.name, tuple(raw), f"{v!r} is not a{'n' if elem is int else ''} "
                      f"{elem.__name__}") from None
  return tuple(out)


# id(FlagValues) -> (that FlagValues, {name: the spec class that owns it}): a knob name
# belongs to one spec. The FlagValues is held so that its id is never reused by another.
_OWNERS: dict = {}


class Specs:
  """The specs one binary takes, and the values of its preset knobs.

  ``define()`` defines their flags (idempotent; a knob name owned by two specs is
  an error), ``build()`` returns one validated instance per spec, in order.
  """

  def __init__(self, *spec_classes, presets: Optional[dict] = None):
    self.spec_classes = spec_classes
    self.presets = dict(presets or {})
    names = {}
    for cls in spec_classes:
      for f in fields(cls):
        if f.name in names:
          raise ValueError(f"knob {f.name!r} is in both {names[f.name].__name__} and "
                           f"{cls.__name__}")
        names[f.name] = cls
    wanted = {f.name for cls in spec_classes for f in fields(cls) if f.metadata["preset"]}
    if set(self.presets) != wanted:
      raise ValueError(f"presets={sorted(self.presets)} must give exactly the preset knobs "
                       f"{sorted(wanted)}")

  def define(self, fv: flags.FlagValues = flags.FLAGS) -> None:
    """Define every knob's flag on ``fv`` (once; the owner check spans binaries)."""
    owners = _OWNERS.setdefault(id(fv), (fv, {}))[1]
    for cls in self.spec_classes:
      for f in fields(cls):
        owner = owners.get(f.name)
        if owner is not None and owner is not cls:
          raise ValueError(f"flag --{f.name} is a knob of both {owner.__name__} and "
                           f"{cls.__name__}: a knob belongs to one spec")
        if f.name in fv:
          if owner is cls:
            continue
          raise ValueError(f"flag --{f.name} is already defined outside the specs")
        _define_one(cls, f, fv, self.presets.get(f.name))
        owners[f.name] = cls

  def build(self, fv: flags.FlagValues = flags.FLAGS) -> tuple:
    """One validated instance per spec class; a bad value is ``app.UsageError``."""
    from absl import app
    out = []
    for cls in self.spec_classes:
      try:
        values = {f.name: _convert(cls, f, fv[f.name].value) for f in fields(cls)}
        out.append(cls(**values))
      except KnobError as e:
        raise app.UsageError(str(e)) from None
    return tuple(out)


# ---- checks a spec's __post_init__ uses ---------------------------------------------------

def check_int(spec, name: str, low: int, high: Optional[int] = None) -> None:
  """``spec.name`` is an integer in [low, high]."""
  v = getattr(spec, name)
  if v is None or isinstance(v, bool) or not isinstance(v, int) or v < low or (
      high is not None and v > high):
    rng = f">= {low}" if high is None else f"in [{low}, {high}]"
    raise KnobError(name, v, f"must be an integer {rng}")


def check_float(spec, name: str, low: float, high: Optional[float] = None) -> None:
  """``spec.name`` is a number in [low, high]."""
  v = getattr(spec, name)
  if v is None or not low <= v <= (float("inf") if high is None else high):
    rng = f">= {low}" if high is None else f"in [{low}, {high}]"
    raise KnobError(name, v, f"must be a number {rng}")


def check_subset(spec, name: str, allowed: Sequence[str], nonempty: bool = True) -> None:
  """Every element of the list knob ``spec.name`` is in ``allowed``."""
  v = getattr(spec, name) or ()
  bad = [x for x in v if x not in allowed]
  if bad or (nonempty and not v):
    raise KnobError(name, tuple(v), f"choose from {', '.join(allowed)}"
                    + (f" ({bad} unknown)" if bad else " (at least one)"))


def check_numbers(spec, name: str, low: float = 0.0) -> None:
  """The list knob ``spec.name`` holds numbers >= low (e.g. temperatures)."""
  for v in getattr(spec, name) or ():
    if not v >= low:
      raise KnobError(name, getattr(spec, name), f"{v!r} is not a number >= {low}")
