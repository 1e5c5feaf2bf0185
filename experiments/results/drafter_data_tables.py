"""The drafter training-data comparison (``experiments/drafter_data.py``, section 7 of
``docs/results.md``), from its records under ``benchmarks/results/drafter_data/``
(:data:`DRAFTER_DATA`): what each arm trained on (``training.jsonl``), each arm's
held-out agreement per draft position (``heldout.jsonl``), and tau of each arm's head
and of the continued heads against their baselines, paired over prompts
(``acceptance.jsonl``)."""

from __future__ import annotations

import os

from experiments.common.bootstrap import pooled_paired_ratio_gain
from experiments.results.families import VerdictColumn, family_note, single_verdict
from experiments.results.markdown import RESULTS
from experiments.results.markdown import ci as _ci
from experiments.results.markdown import gain_cell as _gain_cell
from experiments.results.markdown import table as _table
from experiments.results.records import jsonl

DRAFTER_DATA = f"{RESULTS}/drafter_data"
# The shipped-head decision (continued35 over continued23) measured again on fresh
# prompts from a clean committed tree (``--prompts_after``).
DRAFTER_DATA_REPLICATION = f"{RESULTS}/drafter_data_replication"
REPLICATED_DECISION = {"continued35": "continued23"}
DATA_ARMS = ("sharegpt", "onpolicy", "mix")


def drafter_data_training_table() -> str:
  """The three arms of the training-data comparison (experiments/drafter_data.py):
  what each trained on and how long, from ``training.jsonl``."""
  rows = []
  for r in jsonl(f"{DRAFTER_DATA}/training.jsonl"):
    res, data = r["result"], r["result"]["data"]
    parts = data.get("mixture", [data])
    rows.append([r["config"]["arm"], " + ".join(os.path.basename(p["store"]) for p in parts),
                 f"{data['target_tokens']:,}", str(data["num_windows"]), str(res["steps"]),
                 f"{res['target_positions_seen']:,}", f"{res['seconds_per_step']:.1f}"])
  return _table(["arm", "store(s)", "target tokens", "windows", "steps",
                 "target positions seen", "s/step (loaded machine)"], rows)


def drafter_data_heldout_table() -> str:
  """Held-out top-1 agreement per draft position of each arm on the held-out windows
  of both stores, with 95% bootstrap intervals over held-out batches."""
  recs = jsonl(f"{DRAFTER_DATA}/heldout.jsonl")
  positions = sorted(int(k[len("eval_acc"):]) for k in recs[0]["result"]
                     if k.startswith("eval_acc") and not k.endswith("_ci"))
  rows = []
  for r in sorted(recs, key=lambda r: (r["config"]["heldout"],
                                       DATA_ARMS.index(r["config"]["arm"]))):
    res = r["result"]
    cells = [f"{res[f'eval_acc{i}']:.3f} {_ci(res[f'eval_acc{i}_ci'], '.3f')}"
             for i in positions]
    rows.append([r["config"]["heldout"], r["config"]["arm"], *cells,
                 f"{res['target_positions']:,}"])
  return _table(["held-out text", "trained on", *[f"agreement at position {i} [95% CI]"
                                                   for i in positions], "positions"], rows)


# A head measured after a continued head was shipped is compared against the head
# shipped when it was measured (``continued35`` against ``continued23``, ``continued44``
# against ``continued35``); every other extra head against the first shipped head,
# measured as ``reference``.
CONTINUED_BASELINES = {"continued35": "continued23", "continued44": "continued35"}


POOLED_NOTE = ("A **pooled** row is one test per head (the geometric mean of the cells' "
               "paired ratios), the test a replacement decision reads: it is outside the "
               "per-cell family and is not corrected.")


def _continued_rows(cell: dict, heads: list, baseline_of, column: VerdictColumn) -> list:
  """Rows of both continued-head tables: per head, one row per cell it shares with its
  baseline (``baseline_of(head)``, a head name in ``cell``; its verdict corrected over
  ``column``) and one pooled row (one pre-registered test, :data:`POOLED_NOTE`)."""
  from experiments.compare.acceptance import paired_tau_gain
  rows = []
  for head in heads:
    base_head = baseline_of(head)
    groups: dict = {}
    for kind, pset, t in sorted({k[1:] for k in cell if k[0] == head},
                                key=lambda k: (k[0], k[2], k[1])):
      ref = cell.get((base_head, kind, pset, t))
      if ref is None:
        continue
      new = cell[(head, kind, pset, t)]
      groups.setdefault(pset, []).append((new["per_prompt"], ref["per_prompt"]))
      rows.append([head, kind.replace("eagle_", ""), pset, f"{t:g}",
                   f"{ref['tau']:.2f} {_ci(ref['tau_ci'], '.2f')}",
                   f"{new['tau']:.2f} {_ci(new['tau_ci'], '.2f')}",
                   column.cell((head, kind, pset, t), paired_tau_gain(new, ref))])
    if groups:
      pooled = pooled_paired_ratio_gain(list(groups.values()))
      rows.append([head, "**pooled**", " + ".join(sorted(groups)), "all",
                   f"{pooled['cells']} cells", "geometric mean of the cells' ratios",
                   f"**{_gain_cell(pooled, False)}: {single_verdict(pooled)}**"])
  return rows


def _acceptance_cells(rel: str) -> dict:
  """``{(head, kind, prompt set, T): result}`` of a drafter_data acceptance record."""
  return {(r["config"]["head"], r["config"]["kind"], r["config"]["prompt_set"],
           r["config"]["temperature"]): r["result"] for r in jsonl(rel)}


def drafter_data_continued_table(rel: str = f"{DRAFTER_DATA}/acceptance.jsonl",
                                 baselines: dict | None = None) -> str:
  """Heads measured beside the arms (``--extra_heads``, e.g. the shipped head
  continued on on-policy text) against the first shipped head (``reference``), paired
  over prompts; heads in ``baselines`` (default :data:`CONTINUED_BASELINES`) are in
  :func:`drafter_data_continued_shipped_table` instead."""
  baselines = CONTINUED_BASELINES if baselines is None else baselines
  cell = _acceptance_cells(rel)
  extra = sorted({k[0] for k in cell} - set(DATA_ARMS) - {"reference"} - set(baselines))
  column = VerdictColumn("cells vs first shipped head", "every cell of every head in this "
                         "table against the first shipped head")
  rows = _continued_rows(cell, extra, lambda head: "reference", column)
  return _table(["head", "drafter", "prompts", "T", "tau, first shipped head [95% CI]",
                 "tau, this head [95% CI]", "this / first - 1 [95% CI, paired], MDE "
                 "(80% power): verdict"], column.fill(rows)) + (
                     f"\n\n{family_note(column.family())} {POOLED_NOTE}")


def _against_baselines(rel: str, baselines: dict, column: VerdictColumn, base: str,
                       short: str) -> str:
  """Each head of ``baselines`` found in the record at ``rel`` against its baseline
  (``baselines[head]``), paired over prompts, with the pooled test: the table of
  :func:`drafter_data_continued_shipped_table` and :func:`drafter_data_replication_table`
  (``base`` names the baseline's tau column, ``short`` it in the gain column)."""
  cell = _acceptance_cells(rel)
  heads = sorted(h for h in baselines if any(k[0] == h for k in cell))
  rows = _continued_rows(cell, heads, baselines.__getitem__, column)
  return _table(["head", "drafter", "prompts", "T", f"tau, {base} [95% CI]",
                 "tau, this head [95% CI]", f"this / {short} - 1 [95% CI, paired], MDE "
                 "(80% power): verdict"], column.fill(rows)) + (
                     f"\n\n{family_note(column.family())} {POOLED_NOTE}")


def drafter_data_continued_shipped_table(rel: str = f"{DRAFTER_DATA}/acceptance.jsonl",
                                         baselines: dict | None = None) -> str:
  """Heads measured after a continued head was shipped (:data:`CONTINUED_BASELINES`: head
  -> the head shipped when it was measured) against that head, paired over prompts --
  the comparison docs/results.md §7's replacement rule reads."""
  column = VerdictColumn("cells vs shipped head", "every cell of every head in this table "
                         "against the head shipped when it was measured")
  return _against_baselines(rel, CONTINUED_BASELINES if baselines is None else baselines,
                            column, "shipped head", "shipped")


def drafter_data_replication_table(
    rel: str = f"{DRAFTER_DATA_REPLICATION}/acceptance.jsonl") -> str:
  """The shipped-head decision (:data:`REPLICATED_DECISION`: the shipped head against
  the head it replaced) measured again on fresh prompts: the cells, their family and
  the pooled test the replacement rule reads."""
  column = VerdictColumn("replication cells", "every cell of the shipped head against the "
                         "head it replaced, on the fresh prompts")
  return _against_baselines(rel, REPLICATED_DECISION, column, "the head it replaced",
                            "replaced")


def drafter_data_tau_table() -> str:
  """tau of each arm's head (lossless, EAGLE-3 chain and dynamic tree), and the
  paired gain of the on-policy and mixed arms over the ShareGPT-text arm."""
  from experiments.compare.acceptance import paired_tau_gain
  recs = jsonl(f"{DRAFTER_DATA}/acceptance.jsonl")
  cell = {(r["config"]["head"], r["config"]["kind"], r["config"]["prompt_set"],
           r["config"]["temperature"]): r["result"] for r in recs}
  columns = {arm: VerdictColumn(f"{arm} vs ShareGPT", f"the {arm} arm's head against the "
                                "ShareGPT-text arm's, every drafter, prompt set and T")
             for arm in ("onpolicy", "mix")}
  rows = []
  for kind, pset, t in sorted({k[1:] for k in cell}, key=lambda k: (k[0], k[2], k[1])):
    base = cell.get(("sharegpt", kind, pset, t))
    if base is None:
      continue
    row = [kind.replace("eagle_", ""), pset, f"{t:g}",
           f"{base['tau']:.2f} {_ci(base['tau_ci'], '.2f')}"]
    for arm in ("onpolicy", "mix"):
      other = cell.get((arm, kind, pset, t))
      if other is None:
        row += ["-", "-"]
        continue
      row += [f"{other['tau']:.2f}",
              columns[arm].cell((kind, pset, t), paired_tau_gain(other, base))]
    ref = cell.get(("reference", kind, pset, t))
    row.append(f"{ref['tau']:.2f}" if ref else "-")
    rows.append(row)
  return _table(["drafter", "prompts", "T", "tau, ShareGPT text [95% CI]", "tau, on-policy",
                 "on-policy / ShareGPT - 1 [95% CI, paired], MDE (80% power): verdict",
                 "tau, mix", "mix / ShareGPT - 1 [95% CI, paired], MDE: verdict",
                 "tau, first shipped head"], columns["mix"].fill(columns["onpolicy"].fill(rows))
                ) + "\n\n" + family_note(*(c.family() for c in columns.values()))
