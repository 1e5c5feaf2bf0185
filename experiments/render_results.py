r"""Re-render every table of the result docs from the committed records.

    python -m experiments.render_results            # rewrite the tables in place
    python -m experiments.render_results --check    # exit 1 (and name them) if any differ

A table in a doc sits between marker comments, each alone on its line::

    <!-- table:humaneval_t0 -->
    ...written by experiments.results.tables.TABLES["humaneval_t0"]...
    <!-- /table -->

Everything between the two markers is replaced; the text around them is the docs'
own. :mod:`experiments.results.tables` maps each table's name to the function that
writes it; the functions, and the records each one reads, are in the topic modules of
:mod:`experiments.results`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys

from experiments.common import knobs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ("docs/results.md", "docs/speed.md", "benchmarks/RESULTS.md")
MARKER = re.compile(r"^(<!-- table:([\w.-]+) -->\n)(.*?)^(<!-- /table -->)$", re.S | re.M)
OPENING = re.compile(r"^<!-- table:[\w.-]+ -->$", re.M)


@dataclasses.dataclass(frozen=True)
class Rendered:
  """One doc: its text now and as the records give it; ``tables`` = the names it holds."""

  path: str
  current: str
  rendered: str
  tables: tuple[str, ...]

  @property
  def stale(self) -> bool:
    return self.current != self.rendered


def table_names(text: str) -> list[str]:
  """The table names of a doc's markers, in order."""
  return [m.group(2) for m in MARKER.finditer(text)]


def render_text(text: str, tables: dict) -> str:
  """``text`` with every marked table replaced by ``tables[name]()``; an unknown name
  or an unclosed marker raises ValueError."""
  opened = len(OPENING.findall(text))
  if opened != len(MARKER.findall(text)):
    raise ValueError("a '<!-- table:NAME -->' marker has no '<!-- /table -->'")

  def sub(m: re.Match) -> str:
    name = m.group(2)
    if name not in tables:
      raise ValueError(f"unknown table {name!r}; known: {', '.join(sorted(tables))}")
    return m.group(1) + tables[name]().rstrip("\n") + "\n" + m.group(4)

  return MARKER.sub(sub, text)


def render_doc(root: str, rel: str, tables: dict | None = None) -> Rendered:
  """One doc as it is and as rendered from the records (nothing written)."""
  if tables is None:
    from experiments.results.tables import TABLES as tables
  with open(os.path.join(root, rel)) as f:
    text = f.read()
  return Rendered(rel, text, render_text(text, tables), tuple(table_names(text)))


@dataclasses.dataclass(frozen=True)
class RenderResultsSpec:
  """Whether the docs are rewritten or only checked, and where they are."""
  check: bool = knobs.knob(False, "write nothing; exit 1 if a table differs")
  root: str = knobs.knob(ROOT, "the directory the docs are read from and written to (the "
                         "tables read their records from this checkout)")

  def __post_init__(self):
    if not os.path.isdir(self.root):
      raise knobs.KnobError("root", self.root, "is not a directory")


SPECS = knobs.Specs(RenderResultsSpec)


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


def render(spec: RenderResultsSpec, tables: dict | None = None) -> int:
  """Render (or with ``spec.check``, only compare) every doc; the exit status: 1 when
  checking and a table differs. ``tables`` (name -> function returning the table's
  markdown) defaults to :data:`experiments.results.tables.TABLES`."""
  stale = []
  for rel in DOCS:
    doc = render_doc(spec.root, rel, tables)
    if doc.stale and not spec.check:
      with open(os.path.join(spec.root, rel), "w") as f:
        f.write(doc.rendered)
    stale += [rel] if doc.stale else []
    print(f"{rel}: {len(doc.tables)} tables, {'stale' if doc.stale else 'up to date'}"
          f"{' (rewritten)' if doc.stale and not spec.check else ''}")
  return 1 if stale and spec.check else 0


def main() -> None:
  """The command line: :func:`render` of the parsed flags, its status the exit status."""
  (spec,) = SPECS.build()
  status = render(spec)
  if status:
    sys.exit(status)


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(main, define_flags=define_flags)
