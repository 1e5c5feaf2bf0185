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

import argparse
import dataclasses
import os
import re
import sys

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


def main(argv=None, tables: dict | None = None) -> int:
  """The command line; ``tables`` (name -> function returning the table's markdown)
  defaults to :data:`experiments.results.tables.TABLES`."""
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a table differs")
  ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  args = ap.parse_args(argv)
  stale = []
  for rel in DOCS:
    doc = render_doc(args.root, rel, tables)
    if doc.stale and not args.check:
      with open(os.path.join(args.root, rel), "w") as f:
        f.write(doc.rendered)
    stale += [rel] if doc.stale else []
    print(f"{rel}: {len(doc.tables)} tables, {'stale' if doc.stale else 'up to date'}"
          f"{' (rewritten)' if doc.stale and not args.check else ''}")
  return 1 if stale and args.check else 0


if __name__ == "__main__":
  sys.exit(main())
