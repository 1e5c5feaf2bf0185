"""The dependency arrows point one way:

    distributions <- models / verifiers <- decoding / analysis <- policies <- experiments

Read with ``ast`` from every module file (imports inside functions count too),
so a late import cannot hide a wrong arrow.
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PKG = os.path.join(ROOT, "specjax")


def _module_name(path: str) -> str:
  rel = os.path.relpath(path, ROOT)[:-len(".py")].split(os.sep)
  if rel[-1] == "__init__":
    rel = rel[:-1]
  return ".".join(rel)


def _imports_in(source: str, module: str, is_package: bool = False) -> set[str]:
  """Every module ``source`` (the text of ``module``) imports, as absolute names;
  ``from a import b`` gives ``a`` and ``a.b``."""
  package = module if is_package else module.rpartition(".")[0]
  out = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      out.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = package.split(".")
        base = base[:len(base) - (node.level - 1)]
        mod = ".".join(base + ([node.module] if node.module else []))
      else:
        mod = node.module
      out.add(mod)
      out.update(f"{mod}.{a.name}" for a in node.names)
  return out


def _imports(path: str) -> set[str]:
  with open(path, encoding="utf-8") as f:
    return _imports_in(f.read(), _module_name(path), path.endswith("__init__.py"))


def _files(*parts: str) -> list[str]:
  path = os.path.join(PKG, *parts)
  if path.endswith(".py"):
    return [path]
  return sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".py"))


def _hits(imports: set[str], forbidden) -> list[str]:
  return sorted(i for i in imports if any(i == f or i.startswith(f + ".") for f in forbidden))


LOW = ("specjax.decoding", "specjax.models", "experiments")

# (files, imports they must not make)
RULES = {
    "distributions.py": LOW + ("specjax.verifiers", "specjax.analysis", "specjax.policies",
                               "specjax.training", "specjax.data"),
    "verifiers": LOW + ("specjax.analysis", "specjax.policies", "specjax.training",
                        "specjax.data"),
    "analysis": LOW + ("specjax.policies", "specjax.training", "specjax.data"),
    "models": ("specjax.decoding", "specjax.verifiers", "specjax.analysis", "specjax.policies",
               "experiments"),
    "decoding": ("specjax.analysis", "specjax.policies", "specjax.training", "experiments"),
    "policies": ("specjax.training", "experiments"),
}


def test_the_checker_sees_function_level_and_relative_imports():
  assert "specjax.verifiers.mars" in _imports(os.path.join(PKG, "analysis", "margins.py"))
  src = "def f():\n  from ..decoding import speculative\n  import experiments.common.contexts\n"
  found = _imports_in(src, "specjax.analysis.fake")
  assert {"specjax.decoding", "specjax.decoding.speculative", "experiments.common.contexts"} <= found
  assert _hits(found, RULES["analysis"]) == ["experiments.common.contexts", "specjax.decoding",
                                             "specjax.decoding.speculative"]


@pytest.mark.parametrize("where", sorted(RULES))
def test_dependency_arrows_point_one_way(where):
  bad = {}
  for path in _files(where):
    hits = _hits(_imports(path), RULES[where])
    if hits:
      bad[os.path.relpath(path, ROOT)] = hits
  assert not bad, f"imports against the dependency arrows: {bad}"


def test_no_library_module_imports_experiments():
  for path in _files(""):
    assert not _hits(_imports(path), ("experiments",)), path
