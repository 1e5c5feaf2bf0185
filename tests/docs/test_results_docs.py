"""The result docs' tables equal what the committed records give
(:mod:`experiments.render_results`); no model, no JAX. Each table is rendered once per
process (about 10 s for all of them, mostly bootstraps) and shared by the tests here."""

import difflib
import functools
import os

import pytest
from absl import flags

from experiments import render_results as rr
from experiments.results.tables import TABLES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@functools.cache
def _table_once(name: str) -> str:
  return TABLES[name]()


RENDERED_ONCE = {name: functools.partial(_table_once, name) for name in TABLES}


def _first_difference(doc: rr.Rendered) -> str:
  diff = difflib.unified_diff(doc.current.splitlines(), doc.rendered.splitlines(), lineterm="",
                              n=0)
  return "\n".join(list(diff)[:12])


@pytest.mark.parametrize("rel", rr.DOCS)
def test_doc_tables_equal_their_records(rel):
  doc = rr.render_doc(ROOT, rel, RENDERED_ONCE)
  assert doc.tables, f"{rel} has no rendered table"
  assert not doc.stale, (f"{rel}: a table differs from its records; run `python -m "
                         f"experiments.render_results` and commit\n{_first_difference(doc)}")


def test_every_table_is_rendered_exactly_once():
  names = [n for rel in rr.DOCS for n in rr.render_doc(ROOT, rel, RENDERED_ONCE).tables]
  assert sorted(names) == sorted(TABLES)


def test_a_changed_number_in_a_table_is_caught():
  """Edit one cell of a rendered table by hand: the check sees it, and rendering
  restores the records' value; text outside the markers is left alone."""
  with open(os.path.join(ROOT, "docs/results.md")) as f:
    text = f.read()
  i = text.index("<!-- table:claims_humaneval -->")
  j = text.index("| differ |", i)
  edited = text[:j] + "| agree |" + text[j + len("| differ |"):]
  assert rr.render_text(edited, RENDERED_ONCE) == text != edited
  outside = text.replace("# Results beside the papers", "# Results beside the papers!")
  assert rr.render_text(outside, RENDERED_ONCE) == outside


def test_markers_replace_only_their_content():
  tables = {"a": lambda: "| x |\n|---|\n| 1 |"}
  text = "intro `<!-- table:a -->` in prose\n<!-- table:a -->\nold\n<!-- /table -->\ntail\n"
  out = rr.render_text(text, tables)
  assert out == ("intro `<!-- table:a -->` in prose\n<!-- table:a -->\n| x |\n|---|\n| 1 |\n"
                 "<!-- /table -->\ntail\n")
  assert rr.table_names(out) == ["a"]


@pytest.mark.parametrize("text, match", [
    ("<!-- table:nosuch -->\n<!-- /table -->\n", "unknown table 'nosuch'"),
    ("<!-- table:a -->\nnever closed\n", "has no"),
])
def test_bad_markers_fail(text, match):
  with pytest.raises(ValueError, match=match):
    rr.render_text(text, {"a": lambda: ""})


def test_check_exits_nonzero_on_a_stale_doc(tmp_path):
  """``--check`` against a copy of the repo's docs with one table emptied."""
  for rel in rr.DOCS:
    os.makedirs(tmp_path / os.path.dirname(rel), exist_ok=True)
    with open(os.path.join(ROOT, rel)) as f:
      text = f.read()
    if rel == "docs/results.md":
      i = text.index("<!-- table:claims_sv -->\n") + len("<!-- table:claims_sv -->\n")
      text = text[:i] + text[text.index("<!-- /table -->", i):]
    (tmp_path / rel).write_text(text)
  # the tables read their records from the repository, the docs from tmp_path
  check, write = ["--check", f"--root={tmp_path}"], [f"--root={tmp_path}"]
  assert _render(check) == 1
  assert _render(write) == 0 and _render(check) == 0


def _render(argv: list) -> int:
  """``experiments.render_results`` on the command line ``argv`` (its flags parsed on a
  fresh FlagValues), the tables rendered once per process."""
  fv = flags.FlagValues()
  rr.SPECS.define(fv)
  fv(["render_results", *argv])
  (spec,) = rr.SPECS.build(fv)
  return rr.render(spec, RENDERED_ONCE)
