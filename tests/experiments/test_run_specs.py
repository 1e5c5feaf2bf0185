"""Typed run specs (experiments/common/knobs.py, experiments/common/specs.py): every
binary's spec builds from its defaults, a knob is defined in one place only, and the
mechanism refuses what would let two definitions drift apart."""

import ast
import dataclasses
import importlib
import os

import pytest
from absl import app, flags

from experiments.common import knobs, specs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The binaries whose settings are an ml_collections config file (--config, defined once
# in experiments/common/cli.py); their fields are typed by experiments/configs/.
CONFIG_BINARIES = {"experiments.calibrate_sv", "experiments.compare_verifiers",
                   "experiments.sweep_k", "experiments.sweep_temperature",
                   "experiments.sweep_theta", "experiments.train_eagle",
                   "experiments.train_from_store", "experiments.train_lm"}
# The only modules that call flags.DEFINE_*: the knob mechanism and cli's shared flags.
DEFINERS = {"experiments/common/knobs.py", "experiments/common/cli.py"}


def _binaries() -> list:
  out = []
  for pkg in ("experiments", "benchmarks"):
    for f in sorted(os.listdir(os.path.join(ROOT, pkg))):
      path = os.path.join(ROOT, pkg, f)
      if f.endswith(".py") and "__main__" in open(path).read():
        out.append(f"{pkg}.{f[:-3]}")
  return out


def _build(module, tmp_path) -> tuple:
  """The module's specs built from its defaults on a fresh FlagValues (required
  knobs get ``tmp_path``)."""
  fv = flags.FlagValues()
  module.SPECS.define(fv)
  required = [f"--{f.name}={tmp_path}" for cls in module.SPECS.spec_classes
              for f in knobs.fields(cls) if f.metadata["required"]]
  fv(["prog", *required])
  return module.SPECS.build(fv)


def test_every_binary_builds_its_spec_from_its_defaults(tmp_path):
  binaries = _binaries()
  assert "experiments.benchmark" in binaries and "benchmarks.round_cost" in binaries
  owners, without = {}, []
  for name in binaries:
    module = importlib.import_module(name)
    if name in CONFIG_BINARIES:
      assert not hasattr(module, "SPECS"), name
      continue
    if not hasattr(module, "SPECS"):
      without.append(name)
      continue
    built = _build(module, tmp_path)
    assert [type(b) for b in built] == list(module.SPECS.spec_classes), name
    for cls in module.SPECS.spec_classes:
      for f in knobs.fields(cls):
        owners.setdefault(f.name, set()).add(cls)
  assert without == [], f"binaries without a SPECS: {without}"
  twice = {n: sorted(c.__qualname__ for c in cs) for n, cs in owners.items() if len(cs) > 1}
  assert twice == {}, f"knobs owned by several specs: {twice}"


def test_no_binary_defines_a_flag_itself():
  """Only the knob mechanism and cli's shared flags call ``flags.DEFINE_*``."""
  found = []
  for pkg in ("experiments", "benchmarks"):
    for d, _, files in os.walk(os.path.join(ROOT, pkg)):
      for f in files:
        rel = os.path.relpath(os.path.join(d, f), ROOT)
        if not f.endswith(".py") or rel in DEFINERS:
          continue
        for node in ast.walk(ast.parse(open(os.path.join(d, f)).read())):
          if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr.startswith("DEFINE")):
            found.append(f"{rel}:{node.lineno}")
  assert found == []


def test_shared_defaults_come_from_the_library():
  from specjax.decoding.eagle_trees import EagleTreeDrafter as EagleDrafter
  from specjax.decoding.suffix_drafter import SuffixTreeDrafter
  e, s = specs.EagleTreeSpec(), specs.SuffixTreeSpec()
  assert (e.eagle_top_k, e.eagle_total_tokens) == (EagleDrafter.top_k, EagleDrafter.total_tokens)
  assert (s.suffix_depth, s.suffix_total_tokens) == (SuffixTreeDrafter.depth,
                                                      SuffixTreeDrafter.total_tokens)


@dataclasses.dataclass(frozen=True)
class _Sizes:
  count: int = knobs.knob(help="how many", preset=True)
  widths: tuple[int, ...] = knobs.knob((1, 2), "widths")

  def __post_init__(self):
    knobs.check_int(self, "count", 1)


@dataclasses.dataclass(frozen=True)
class _Other:
  count: int = knobs.knob(3, "another count")


def _parse(s: knobs.Specs, *argv) -> tuple:
  fv = flags.FlagValues()
  s.define(fv)
  fv(["prog", *argv])
  return s.build(fv)


def test_knobs_parse_presets_lists_and_errors():
  s = knobs.Specs(_Sizes, presets={"count": 7})
  assert _parse(s) == (_Sizes(count=7, widths=(1, 2)),)
  assert _parse(s, "--count=2", "--widths=4,8") == (_Sizes(count=2, widths=(4, 8)),)
  with pytest.raises(app.UsageError, match=r"^--count=0: must be an integer >= 1$"):
    _parse(s, "--count=0")
  with pytest.raises(app.UsageError, match=r"--widths=4,x: 'x' is not an int"):
    _parse(s, "--widths=4,x")
  fv = flags.FlagValues()
  s.define(fv)
  assert "[preset: this binary's value, 7]" in fv["count"].help


def test_knobs_refuse_what_would_drift():
  # A preset knob needs the binary's value, and only preset knobs take one.
  with pytest.raises(ValueError, match="must give exactly the preset knobs"):
    knobs.Specs(_Sizes)
  with pytest.raises(ValueError, match="must give exactly the preset knobs"):
    knobs.Specs(_Sizes, presets={"count": 1, "widths": (3,)})
  # One name, two specs: in one binary, and across binaries sharing a FlagValues.
  with pytest.raises(ValueError, match="knob 'count' is in both _Sizes and _Other"):
    knobs.Specs(_Sizes, _Other, presets={"count": 1})
  fv = flags.FlagValues()
  knobs.Specs(_Sizes, presets={"count": 1}).define(fv)
  knobs.Specs(_Sizes, presets={"count": 1}).define(fv)  # the same spec again: a no-op
  with pytest.raises(ValueError, match="a knob belongs to one spec"):
    knobs.Specs(_Other).define(fv)
  # A flag defined by hand under a knob's name.
  fv = flags.FlagValues()
  flags.DEFINE_integer("count", 1, "by hand", flag_values=fv)
  with pytest.raises(ValueError, match="already defined outside the specs"):
    knobs.Specs(_Other).define(fv)


def test_shared_specs_name_the_bad_value():
  with pytest.raises(knobs.KnobError, match=r"--drafters=chain,medusa: choose from"):
    specs.DrafterSpec(drafters=("chain", "medusa"))
  with pytest.raises(knobs.KnobError, match=r"--tree_paths='\[\[-1\]\]'"):
    specs.StaticTreeSpec(tree_paths="[[-1]]")
  with pytest.raises(knobs.KnobError, match=r"--mesh_model=2: needs a mesh"):
    specs.MeshSpec(mesh_data=0, mesh_model=2)
  with pytest.raises(knobs.KnobError, match=r"--temperatures=-1.0: -1.0 is not a number"):
    specs.TemperaturesSpec(temperatures=(-1.0,))
  assert specs.StaticTreeSpec(tree_paths="[[0], [0, 1]]").paths() == ((0,), (0, 1))
