"""No function of the library, the experiment binaries or the benchmarks is longer
than 80 lines: a longer one is split into named steps.  Read
with ``ast`` (docstrings and comments count: they are part of what a reader
scrolls through)."""

import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("specjax", "experiments", "benchmarks")
LIMIT = 80


def long_functions(source: str, limit: int = LIMIT) -> list:
  """``(name, first line, lines)`` of every function (nested ones too) longer than
  ``limit`` lines."""
  out = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      n = node.end_lineno - node.lineno + 1
      if n > limit:
        out.append((node.name, node.lineno, n))
  return out


def test_the_check_counts_lines():
  body = "".join(f"  x{i} = {i}\n" for i in range(LIMIT))
  assert long_functions("def short():\n" + body[:-len(f"  x{LIMIT - 1} = {LIMIT - 1}\n")]) == []
  assert long_functions("def long():\n" + body) == [("long", 1, LIMIT + 1)]
  nested = "class A:\n  def m(self):\n" + "".join("  " + l + "\n" for l in body.splitlines())
  assert long_functions(nested) == [("m", 2, LIMIT + 1)]


def test_no_function_over_80_lines():
  found = {}
  for pkg in PACKAGES:
    for d, _, files in os.walk(os.path.join(ROOT, pkg)):
      for f in files:
        if f.endswith(".py"):
          path = os.path.join(d, f)
          with open(path, encoding="utf-8") as fh:
            hits = long_functions(fh.read())
          if hits:
            found[os.path.relpath(path, ROOT)] = hits
  assert not found, f"functions over {LIMIT} lines (split them into named steps): {found}"
