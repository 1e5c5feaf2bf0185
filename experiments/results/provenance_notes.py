"""Under every results table: where its records came from, and whether they can decide.

A record stamped by :mod:`specjax.provenance` names its command, commit and whether
the tree had uncommitted changes (``git_dirty``). A record from a dirty tree, or one
without a stamp (it predates stamping), is **exploratory**: the code that made it
cannot be checked out, so its verdicts decide nothing until it is rerun from a
committed tree (the binaries' ``--decision`` flag refuses a dirty tree).

* :func:`record_provenance` -- one record file's :class:`RecordProvenance`;
* :func:`provenance_note` -- the line printed under a table;
* :data:`RECORDS_OF` -- which records each table of
  :data:`experiments.results.tables.TABLES` reads; :func:`with_provenance` appends
  the note to each of them.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import json
import os
from typing import Callable

from experiments.results import adaptation_tables
from experiments.results.markdown import RESULTS, ROOT

ASSETS = "specjax/models/assets/smollm2-135m-instruct"
EXPLORATORY = ("A record from a tree with uncommitted changes, or one that does not show it "
               "came from a committed tree, is exploratory: its verdicts decide nothing until "
               "it is rerun from a committed tree (`--decision`).")


@dataclasses.dataclass(frozen=True)
class RecordProvenance:
  """What one record file says about where it came from.

  Attributes:
    rel: the file, relative to the repository root.
    records: records in it (JSON lines; 1 for a JSON file).
    stamped: records with a ``provenance`` stamp.
    dirty: stamped records taken from a tree with uncommitted changes.
    unknown: stamped records that do not say whether the tree was clean.
    decision: stamped records of a ``--decision`` run.
    commits: the commits named, in order of appearance (10 characters).
  """

  rel: str
  records: int
  stamped: int
  dirty: int
  unknown: int
  decision: int
  commits: tuple

  @property
  def exploratory(self) -> bool:
    return self.dirty > 0 or self.unknown > 0 or self.stamped < self.records

  def describe(self) -> str:
    commits = ", ".join(f"`{c}`" for c in self.commits) or "none named"
    head = f"`{self.rel}` ({self.records} record{'s' if self.records != 1 else ''}"
    if self.stamped == 0:
      return head + "): **no provenance stamp** (it predates stamping; no command, commit or load)"
    head += f", commit {commits}"
    if self.stamped < self.records:
      head += f", {self.records - self.stamped} without a stamp"
    if self.dirty:
      return head + f"): **{self.dirty} of {self.stamped} from a tree with uncommitted changes**"
    if self.unknown:
      return head + f"): **{self.unknown} of {self.stamped} do not record whether the tree was clean**"
    return head + "): committed tree" + (", a `--decision` run" if self.decision else "")


def _stamps(data) -> list:
  """The stamps of a one-record JSON file: each run's in ``parts`` when it was resumed
  over several runs, else its ``provenance``, else the bare
  ``command`` / ``commit`` some older writers put at the top (clean state unknown)."""
  if not isinstance(data, dict):
    return [None]
  if data.get("parts"):  # a record resumed over several runs: each run's stamp
    return list(data["parts"])
  if data.get("provenance"):
    return [data["provenance"]]
  if data.get("commit"):
    return [{"git_commit": data["commit"], "git_dirty": None, "command": data.get("command")}]
  return [None]


@functools.lru_cache(maxsize=None)
def record_provenance(rel: str) -> RecordProvenance:
  """The provenance of the record file ``rel`` (``.jsonl``: one record a line, each
  with its own ``provenance``; ``.json``: one record, a top-level ``provenance``)."""
  full = os.path.join(ROOT, rel)
  if not os.path.isfile(full):
    raise FileNotFoundError(f"rel={rel!r}: no such record under {ROOT}")
  with open(full) as f:
    if rel.endswith(".jsonl"):
      stamps = [json.loads(line).get("provenance") for line in f if line.strip()]
    else:
      stamps = _stamps(json.load(f))
  found = [s for s in stamps if s]
  commits = tuple(dict.fromkeys((s.get("git_commit") or "?")[:10] for s in found))
  return RecordProvenance(rel, len(stamps), len(found), sum(bool(s.get("git_dirty")) for s in found),
                          sum(s.get("git_dirty") is None for s in found),
                          sum(bool(s.get("decision")) for s in found), commits)


def _pooled(provs: list) -> str:
  """Many record files in one phrase: how many, their commits, how many records are
  from a dirty tree or unstamped."""
  n = sum(p.records for p in provs)
  commits = ", ".join(f"`{c}`" for c in dict.fromkeys(c for p in provs for c in p.commits))
  dirty, bare = sum(p.dirty for p in provs), sum(p.records - p.stamped for p in provs)
  parts = [f"{len(provs)} record files under `{os.path.commonpath([p.rel for p in provs])}/`"
           f" ({n} records, commit {commits or 'none named'})"]
  if dirty:
    parts.append(f"**{dirty} of {n} from a tree with uncommitted changes**")
  if bare:
    parts.append(f"**{bare} without a provenance stamp**")
  return ": ".join(parts[:1] + [", ".join(parts[1:]) or "committed trees"])


def provenance_note(rels) -> str:
  """``Provenance: <each record>.`` (more than three files: pooled into one phrase)
  and, when any is exploratory, what that means."""
  provs = [record_provenance(r) for r in rels]
  body = _pooled(provs) if len(provs) > 3 else "; ".join(p.describe() for p in provs)
  text = "Provenance: " + body + "."
  return text + (" " + EXPLORATORY if any(p.exploratory for p in provs) else "")


def _shipped_acceptance() -> tuple:
  from experiments.results.speed_profile_tables import shipped_acceptance_files
  return shipped_acceptance_files()


def _adaptive_batch() -> tuple:
  from experiments.results.speed_profile_tables import ADAPTIVE_BATCH
  return ADAPTIVE_BATCH


def _sv_companion_reports() -> tuple:
  return tuple(sorted(os.path.relpath(p, ROOT) for p in glob.glob(
      os.path.join(ROOT, RESULTS, "sv_companions_smollm2", "*", "report.json"))))


_HUMANEVAL = {t: f"{RESULTS}/humaneval_{t}/humaneval.jsonl" for t in ("t0", "t07", "t1")}
_SV = f"{RESULTS}/sv_batch_sweep_smollm2.json"
_DD = f"{RESULTS}/drafter_data"
_ACCEPTANCE = f"{RESULTS}/acceptance_smollm2/acceptance.jsonl"
_BLOCK = f"{RESULTS}/block_vs_token_smollm2/sweep_k_smollm2.jsonl"
_TRAVERSAL = f"{RESULTS}/traversal_vs_token_smollm2/compare_verifiers_smollm2.jsonl"

RECORDS_OF: dict[str, Callable[[], tuple]] = {
    **{f"humaneval_{t}": (lambda rel=rel: (rel,)) for t, rel in _HUMANEVAL.items()},
    "claims_humaneval": lambda: tuple(_HUMANEVAL.values()),
    "claims_notebooks": lambda: (f"{RESULTS}/notebooks/02_mars_margins.json",
                                 f"{RESULTS}/notebooks/03_lossy_verification.json"),
    **{name: (lambda: (_SV,)) for name in ("sv_smollm2", "sv_run_smollm2",
                                            "sv_information_bias")},
    "claims_sv": lambda: (_SV, f"{RESULTS}/sv_batch_sweep_smollm2_calibration/report.json"),
    "batch_sweep_smollm2": lambda: (f"{RESULTS}/batch_sweep_smollm2.json",),
    "sv_large_batch_smollm2": lambda: (f"{RESULTS}/sv_large_batch/smollm2.json",),
    "tree_shapes_smollm2": lambda: (f"{RESULTS}/tree_shapes_smollm2.json",),
    "small_models_drafters": lambda: (f"{RESULTS}/small_models_drafters.json",),
    "drafters_smollm2": lambda: (f"{ASSETS}/eagle3/training.json", f"{ASSETS}/draft/training.json"),
    "layer_stack": lambda: (f"{RESULTS}/layer_stack.json",),
    "attention_chunk": lambda: (f"{RESULTS}/attention_chunk.json",),
    "main_job_smollm2": lambda: (f"{RESULTS}/benchmark_smollm2/benchmark.jsonl",),
    "main_job_adaptive_usage": lambda: (f"{RESULTS}/benchmark_smollm2/benchmark.jsonl",),
    **{name: (lambda: (f"{RESULTS}/benchmark_smollm2_sets/benchmark.jsonl",)) for name in (
        "main_job_sets_smollm2", "main_job_sets_per_set", "main_job_sets_adaptive_usage")},
    "speed_smollm2": lambda: (f"{RESULTS}/speed_smollm2/benchmark.jsonl",),
    "speed_smollm2_decode": lambda: (f"{RESULTS}/speed_smollm2_decode/benchmark.jsonl",),
    "speed_smollm2_256": lambda: (f"{RESULTS}/speed_smollm2_256/benchmark.jsonl",),
    "speed_smollm2_onpolicy_head": lambda: (
        f"{RESULTS}/speed_smollm2_onpolicy_head/benchmark.jsonl",),
    "drafter_data_training": lambda: (f"{_DD}/training.jsonl",),
    "drafter_data_heldout": lambda: (f"{_DD}/heldout.jsonl",),
    **{name: (lambda: (f"{_DD}/acceptance.jsonl",)) for name in (
        "drafter_data_tau", "drafter_data_continued", "drafter_data_continued_shipped")},
    "drafter_data_replication": lambda: (f"{RESULTS}/drafter_data_replication/acceptance.jsonl",),
    "acceptance_smollm2": lambda: (_ACCEPTANCE,),
    "draft_continued_smollm2": lambda: (f"{RESULTS}/draft_continued_smollm2/acceptance.jsonl",
                                        _ACCEPTANCE),
    "mars_block_smollm2": lambda: (_BLOCK,),
    "block_vs_token_smollm2": lambda: (_BLOCK,),
    "traversal_vs_token_smollm2": lambda: (_TRAVERSAL,),
    "tree_children_smollm2": lambda: (_TRAVERSAL,),
    "sweep_theta_smollm2": lambda: (f"{RESULTS}/sweep_theta_smollm2/sweep_theta_smollm2.jsonl",),
    "sweep_k_smollm2": lambda: (f"{RESULTS}/sweep_k_smollm2/sweep_k_smollm2.jsonl",),
    "compare_smollm2": lambda: (f"{RESULTS}/compare_smollm2/compare_verifiers_smollm2.jsonl",),
    "lossy_propositions_smollm2": lambda: (f"{RESULTS}/lossy_propositions_smollm2_conversations/records.jsonl",),
    "sv_companions_smollm2": _sv_companion_reports,
    "bucketed_rule_ab": lambda: (f"{RESULTS}/bucketed_rule_ab/lookup_chain.json",),
    **{name: (lambda rels=rels: rels) for name, rels in adaptation_tables.RECORDS.items()},
    "forward_cost_b1": lambda: (f"{RESULTS}/forward_cost/smollm2_b1.json",),
    "round_cost_smollm2": lambda: tuple(f"{RESULTS}/round_cost/smollm2_{w}.json"
                                        for w in ("float32", "bfloat16")),
    "adaptive_length_smollm2": lambda: (f"{RESULTS}/adaptive_length/smollm2.json",),
    "adaptive_sources_smollm2": lambda: (f"{RESULTS}/adaptive_length/smollm2_sources.json",),
    "tree_budget_smollm2": lambda: (f"{RESULTS}/tree_budget/smollm2.json",),
    "adaptive_batch_smollm2": _adaptive_batch,
    "shipped_acceptance_smollm2": _shipped_acceptance,
    "verify_matmul": lambda: tuple(sorted(
        os.path.relpath(f, ROOT)
        for f in glob.glob(os.path.join(ROOT, RESULTS, "verify_matmul", "*.json")))),
}


def with_provenance(tables: dict) -> dict:
  """``tables`` with :func:`provenance_note` of :data:`RECORDS_OF` appended to each
  table it names (a name of :data:`RECORDS_OF` missing from ``tables`` is an error)."""
  missing = sorted(set(RECORDS_OF) - set(tables))
  if missing:
    raise KeyError(f"RECORDS_OF names tables that do not exist: {missing}")

  def noted(name: str, fn: Callable[[], str]) -> Callable[[], str]:
    return lambda: fn().rstrip("\n") + "\n\n" + provenance_note(RECORDS_OF[name]())

  return {name: noted(name, fn) if name in RECORDS_OF else fn for name, fn in tables.items()}
