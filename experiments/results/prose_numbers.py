"""Numbers in the prose of the docs that no committed record holds.

The tables of the docs are rendered from records (:mod:`experiments.render_results`);
the prose around them is written by hand, and a measured number typed there can
outlive its record or never have had one. :func:`unbacked_numbers` finds the
measured quantities in prose -- times (``s``, ``ms``, ``min``), throughputs
(``tokens/s``), token counts and speedups (``1.14x``) -- and checks each against the
values of the committed records whose field names carry that unit (``wall_s``,
``ms_per_step``, ``tokens_per_s``, ``speedup``, ...; a record file's span from its
first start to its last finish and its rows' summed wall time count as minutes /
seconds too), at the number's own precision (``46`` matches 45.5-46.5). What it does
not check: bare numbers without one of these units (tau, shares, percentages: too
many record values would match them by chance), text inside code spans and fences,
and the rendered tables. A number that is a setting or a published figure, not a
measurement, goes into :data:`ALLOWED` with its reason.
"""

from __future__ import annotations

import dataclasses
import datetime
import glob
import json
import math
import os
import re

from experiments.results.markdown import ROOT

TABLE = re.compile(r"^<!-- table:[\w.-]+ -->\n.*?^<!-- /table -->$", re.S | re.M)
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")
NUMBER = r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)"


@dataclasses.dataclass(frozen=True)
class Unit:
  """A measured quantity: how prose writes it (``pattern``, the number its first
  group), which record fields hold it (``field``, matched against the field's key
  path) and the factor from the field's unit (``scale(path) -> factor``)."""

  name: str
  pattern: re.Pattern
  field: re.Pattern
  scale: object = staticmethod(lambda path: 1.0)


def _time_scale(to_seconds: float):
  return lambda path: (1e-3 if re.search(r"_ms$|ms_per", path) else 1.0) / to_seconds


# a timing field: a key ending in _s / _ms / seconds (case matters: ig_S is not one), a
# value under a ms_per_* key, a wall time, or a record file's derived span
TIME_FIELDS = re.compile(r"(_s|_ms|seconds)$|ms_per\w*/|wall")

UNITS = (
    Unit("tokens/s", re.compile(NUMBER + r"\s*(?:generated\s+)?(?:tokens/s|tok/s)"),
         re.compile(r"per_s|tokens_per|tps", re.I)),
    Unit("min", re.compile(NUMBER + r"\s*(?:minutes|min)\b"),
         TIME_FIELDS, _time_scale(60.0)),
    Unit("s", re.compile(NUMBER + r"\s*s\b(?![/-])"),
         TIME_FIELDS, _time_scale(1.0)),
    Unit("ms", re.compile(NUMBER + r"\s*ms\b"),
         TIME_FIELDS, _time_scale(1e-3)),
    Unit("tokens", re.compile(NUMBER + r"\s*(?:more\s+)?(?:generated\s+)?tokens\b(?!/)"),
         re.compile(r"token|delta_be|(^|/)be_", re.I)),  # block efficiency: tokens per call
    Unit("x", re.compile(r"(?<![\w.])(\d+\.\d+)x\b"), re.compile(r"speedup", re.I)),
)


@dataclasses.dataclass(frozen=True)
class ProseNumber:
  """A number of ``unit`` written as ``text`` in ``doc``, with the words around it."""

  doc: str
  unit: str
  text: str
  context: str


@dataclasses.dataclass(frozen=True)
class Allowed:
  """A number in prose that is not a measurement (a setting, a published figure), and
  why."""

  doc: str
  unit: str
  text: str
  reason: str


ALLOWED = (
    Allowed("benchmarks/RESULTS.md", "tokens", "5", "K + 1 = 5 verified tokens: the setting K = 4"),
    Allowed("docs/results.md", "tokens", "5", "K + 1 = 5 verified tokens: the setting K = 4"),
    Allowed("benchmarks/RESULTS.md", "tokens", "7", "K = 7 drafted tokens: the SV setting"),
    Allowed("docs/path_rules.md", "tokens", "7", "the statistical test's setting: 1500 rows "
            "x 7 tokens"),
    Allowed("benchmarks/RESULTS.md", "x", "1.25", "a goal (the project's lossless speed goal "
            "at T = 1), not a measurement"),
    Allowed("docs/design.md", "ms", "150", "NOT a setting: a timing no committed record "
            "holds, in a doc another change owns; it is to be removed or backed there"),
)


def _files(root: str, patterns: tuple) -> list[str]:
  """The files under ``root`` matching ``patterns`` (recursive globs relative to
  ``root``): the ones git tracks when ``root`` is a checkout -- a clean clone sees only
  those, so an uncommitted doc or record neither fails nor backs anything -- else every
  match."""
  import subprocess
  try:
    r = subprocess.run(["git", "-C", root, "ls-files", "--",
                        *(f":(glob){p}" for p in patterns)], capture_output=True, text=True,
                       timeout=30)
    if r.returncode == 0 and r.stdout.strip():
      return sorted(line for line in r.stdout.splitlines() if line)
  except (OSError, subprocess.TimeoutExpired):
    pass
  return sorted(os.path.relpath(p, root) for pat in patterns
                for p in glob.glob(os.path.join(root, pat), recursive=True))


def docs(root: str = ROOT) -> list[str]:
  """The prose checked: README.md, benchmarks/RESULTS.md, docs/*.md, the assets READMEs."""
  out = _files(root, ("README.md", "benchmarks/RESULTS.md", "docs/*.md",
                      "specjax/models/assets/*/README.md"))
  return [d for d in out if os.path.isfile(os.path.join(root, d))]


def prose(text: str) -> str:
  """``text`` without its rendered tables, code fences and code spans."""
  return CODE.sub("", FENCE.sub("", TABLE.sub("", text)))


def _leaves(obj, path: str, out: list) -> None:
  if isinstance(obj, bool):
    return
  if isinstance(obj, (int, float)):
    if math.isfinite(obj):
      out.append((path, float(obj)))
  elif isinstance(obj, dict):
    for k, v in obj.items():
      _leaves(v, f"{path}/{k}" if path else str(k), out)
  elif isinstance(obj, list):
    for v in obj:
      _leaves(v, path, out)


def _when(s: str) -> datetime.datetime:
  return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ")


def _derived(records: list[dict]) -> list:
  """A record file's span (first start to last finish) and summed row wall time."""
  stamps = [r["provenance"] for r in records if isinstance(r.get("provenance"), dict)]
  out = []
  starts = [_when(s["started"]) for s in stamps if s.get("started")]
  ends = [_when(s["finished"]) for s in stamps if s.get("finished")]
  if starts and ends:
    out.append(("span_s", (max(ends) - min(starts)).total_seconds()))
  walls = [r["result"]["wall_s"] for r in records
           if isinstance(r.get("result"), dict) and isinstance(r["result"].get("wall_s"), (int, float))]
  if walls:
    out.append(("rows_wall_s", float(sum(walls))))
  return out


def record_leaves(root: str = ROOT) -> list:
  """``(key path, value)`` of every number in the committed records (and the derived
  spans of :func:`_derived`)."""
  files = _files(root, ("benchmarks/results/**/*.json", "benchmarks/results/**/*.jsonl",
                       "specjax/models/assets/*/*/training.json"))
  out: list = []
  for path in (os.path.join(root, f) for f in files):
    with open(path) as f:
      if path.endswith(".jsonl"):
        records = [json.loads(line) for line in f if line.strip()]
      elif path.endswith(".json"):
        records = [json.load(f)]
      else:
        continue
    for r in records:
      _leaves(r, "", out)
    out += _derived(records)
  return out


def values_by_unit(leaves: list) -> dict:
  """``{unit name: [values in that unit]}`` from :func:`record_leaves`."""
  return {u.name: [v * u.scale(p) for p, v in leaves if u.field.search(p)] for u in UNITS}


def _holds(text: str, values: list) -> bool:
  x = float(text.replace(",", ""))
  digits = len(text.split(".")[1]) if "." in text else 0
  tol = 0.5 * 10 ** (-digits) + 1e-9
  return any(abs(v - x) <= tol for v in values)


def unbacked_numbers(root: str = ROOT, allowed=ALLOWED) -> list[ProseNumber]:
  """Every measured number in the prose of :func:`docs` that no committed record holds
  at its precision and :data:`ALLOWED` does not list."""
  values = values_by_unit(record_leaves(root))
  skip = {(a.doc, a.unit, a.text) for a in allowed}
  out = []
  for doc in docs(root):
    with open(os.path.join(root, doc), encoding="utf-8") as f:
      text = prose(f.read())
    for unit in UNITS:
      for m in unit.pattern.finditer(text):
        num = m.group(1)
        if (doc, unit.name, num) in skip or _holds(num, values[unit.name]):
          continue
        context = " ".join(text[max(0, m.start() - 60):m.end() + 10].split())
        out.append(ProseNumber(doc, unit.name, num, context))
  return out
