"""Loading the committed records the results tables read (no model, no JAX): JSON
records (:func:`load_json`; one value of one, named by its keys: :func:`field`) and
JSON-lines records (:func:`jsonl`), a committed HumanEval grid with its summary
(:data:`HUMANEVAL_DIRS`, :func:`humaneval_run`), the stream outputs of a committed
notebook (:func:`notebook_text`, searched with :func:`find`; notebook 04 only: 02 and 03
write JSON records), and the markdown table lines of a raw text output
(:func:`md_table_lines`, :func:`text_table`). Paths are relative to the repository
root."""

from __future__ import annotations

import dataclasses
import functools
import json
import re

from experiments.humaneval import summary as hs
from experiments.results.markdown import RESULTS
from experiments.results.markdown import path as _path

HUMANEVAL_DIRS = {"t0": f"{RESULTS}/humaneval_t0", "t07": f"{RESULTS}/humaneval_t07",
                  "t1": f"{RESULTS}/humaneval_t1"}


@functools.lru_cache(maxsize=None)
def load_json(rel: str) -> dict:
  with open(_path(rel)) as f:
    return json.load(f)


def field(rel: str, *keys, hint: str | None = None):
  """The value at ``keys`` (dict keys, or list indices) in the JSON record ``rel``.

  Raises ``FileNotFoundError`` when there is no such record and ``ValueError`` when
  it lacks a key, each naming the file and the dotted path; ``hint`` (the command
  that regenerates the record) is added to the message."""
  tail = f"; regenerate it with `{hint}`" if hint else ""
  try:
    value = load_json(rel)
  except FileNotFoundError:
    raise FileNotFoundError(f"{rel}: no such record{tail}") from None
  for i, key in enumerate(keys):
    try:
      value = value[key]
    except (KeyError, IndexError, TypeError):
      path = ".".join(str(k) for k in keys[:i + 1])
      raise ValueError(f"{rel}: the record has no field {path!r}{tail}") from None
  return value


@dataclasses.dataclass(frozen=True)
class HumanEvalRun:
  """One committed HumanEval grid: its records and their summary."""

  directory: str
  records: list
  rows: list
  contrasts: list
  max_new_tokens: int

  def row(self, method: str) -> dict:
    return next(r for r in self.rows if r["method"] == method)


@functools.lru_cache(maxsize=None)
def humaneval_run(name: str) -> HumanEvalRun:
  """The grid in :data:`HUMANEVAL_DIRS` ``[name]``, summarized with the token cap read
  from the record keys (``<sha>-<style>-n<max_new_tokens>-seed<seed>-...``)."""
  d = HUMANEVAL_DIRS[name]
  with open(_path(f"{d}/humaneval.jsonl")) as f:
    records = [json.loads(line) for line in f if line.strip()]
  caps = {int(re.search(r"-n(\d+)-seed", r["key"]).group(1)) for r in records}
  if len(caps) != 1:
    raise ValueError(f"{d}: records of several token caps {sorted(caps)}")
  cap = caps.pop()
  rows = hs.summarize(records, max_new_tokens=cap)
  return HumanEvalRun(d, records, rows, hs.gap_contrasts(rows, records), cap)


@functools.lru_cache(maxsize=None)
def notebook_text(rel: str) -> str:
  """Every stream output of a committed notebook, in cell order."""
  nb = load_json(rel)
  return "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                 for o in c.get("outputs", []) if o.get("output_type") == "stream")


def find(pattern: str, text: str, what: str, index: int = 0) -> re.Match:
  """The ``index``-th match of ``pattern`` in ``text`` (a notebook's outputs); raises,
  naming ``what``, when there is none."""
  found = list(re.finditer(pattern, text))
  if len(found) <= index:
    raise ValueError(f"{what}: pattern {pattern!r} not in the notebook outputs")
  return found[index]


def md_table_lines(rel: str) -> str:
  """The markdown table lines (``|``) of a committed raw text output."""
  with open(_path(rel)) as f:
    return "\n".join(line.rstrip() for line in f if line.startswith("|"))


def jsonl(rel: str) -> list[dict]:
  """Every record of a JSON-lines file (blank lines skipped)."""
  with open(_path(rel)) as f:
    return [json.loads(line) for line in f if line.strip()]


def text_table(rel: str):
  """The table function that prints the markdown table lines of the raw text output
  ``rel`` (:func:`md_table_lines`)."""
  return lambda: md_table_lines(rel)
