"""Every measured number in the prose of README.md, benchmarks/RESULTS.md, docs/*.md
and the assets READMEs is held by a committed record
(experiments.results.prose_numbers); a setting or a published figure is allowed only
with its reason.

Broken variants caught: a typed timing no record holds (README's old sandbox cost,
"about 76 ms per program"); a stale throughput ("46.3 tokens/s" against a record of
29.0); a rounded-up run time ("20 min" for a record whose span is 18.8 min)."""

import pytest

from experiments.results import prose_numbers as pn


def test_no_prose_number_without_a_record():
  found = pn.unbacked_numbers()
  assert not found, "numbers in prose that no committed record holds (render them from " \
      "the record, drop them, or allow them with a reason): " + "; ".join(
          f"{x.doc}: {x.text} {x.unit} ({x.context!r})" for x in found)


def test_the_check_finds_typed_numbers(tmp_path, monkeypatch):
  doc = tmp_path / "docs"
  doc.mkdir()
  (tmp_path / "README.md").write_text(
      "Cost: about 76 ms per program.\n\n```\n# ~99 min\n```\n`46.3 tokens/s` in code\n")
  (tmp_path / "benchmarks" / "results" / "r").mkdir(parents=True)
  (tmp_path / "benchmarks" / "RESULTS.md").write_text(
      "target-only at 46.3 tokens/s; the run took 20 min and 18.8 min.\n"
      "<!-- table:x -->\n| 12345 tokens/s |\n<!-- /table -->\n")
  (tmp_path / "benchmarks" / "results" / "r" / "a.jsonl").write_text(
      '{"result": {"tokens_per_s": 29.04, "wall_s": 1128.0}}\n')
  (doc / "d.md").write_text("a 1.14x speedup, 29.0 tokens/s\n")
  found = {(x.doc, x.unit, x.text) for x in pn.unbacked_numbers(str(tmp_path), allowed=())}
  assert found == {("README.md", "ms", "76"), ("benchmarks/RESULTS.md", "tokens/s", "46.3"),
                   ("benchmarks/RESULTS.md", "min", "20"), ("docs/d.md", "x", "1.14")}
  allowed = (pn.Allowed("README.md", "ms", "76", "a setting"),)
  assert ("README.md", "ms", "76") not in {
      (x.doc, x.unit, x.text) for x in pn.unbacked_numbers(str(tmp_path), allowed=allowed)}


@pytest.mark.parametrize("text,values,held", [("46", [45.6], True), ("46", [46.6], False),
                                              ("18.8", [18.78], True), ("2,048", [2048.0], True)])
def test_a_number_is_held_at_its_own_precision(text, values, held):
  assert pn._holds(text, values) is held
