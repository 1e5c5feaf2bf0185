"""Every drafter's acceptance on SmolLM2 (``experiments.acceptance``, lossless, no
timing) per prompt set and temperature, against the shipped EAGLE-3 chain, from
``benchmarks/results/acceptance_smollm2/acceptance.jsonl`` (:data:`ACCEPTANCE`); and a
candidate drafter's cells against the shipped drafter's cells of the same settings
(:func:`candidate_table`; the shipped draft LM continued on the target's own text,
``benchmarks/results/draft_continued_smollm2/acceptance.jsonl``), both in
``docs/results.md``."""

from __future__ import annotations

from experiments.common.bootstrap import pooled_paired_ratio_gain
from experiments.results.commands import rerun_lines
from experiments.results.drafter_data_tables import POOLED_NOTE
from experiments.results.families import VerdictColumn, family_note, single_verdict
from experiments.results.markdown import RESULTS
from experiments.results.markdown import ci as _ci
from experiments.results.markdown import gain_cell as _gain_cell
from experiments.results.markdown import table as _table
from experiments.results.records import jsonl

ACCEPTANCE = f"{RESULTS}/acceptance_smollm2/acceptance.jsonl"
ACCEPTANCE_REFERENCE = "eagle3_chain"  # the shipped EAGLE-3 head's chain, same prompts and keys
# Row order within a (prompt set, T) group: the model-free drafters, the draft LM, the tree,
# then the reference.
ACCEPTANCE_ORDER = ("prompt_lookup_chain", "suffix_tree", "draft_lm_chain", "eagle3_tree",
                    ACCEPTANCE_REFERENCE)


def acceptance_table(rel: str = ACCEPTANCE) -> str:
  """Every drafter's acceptance (experiments.acceptance, lossless, no timing) per prompt
  set and temperature: tau, acceptance at the first three draft positions, and the
  paired gain over the shipped EAGLE-3 chain on the same prompts and keys (interval,
  MDE and :func:`~experiments.results.markdown.gain_cell`'s reading)."""
  from experiments.compare.acceptance import paired_tau_gain
  recs = jsonl(rel)
  cell = {(r["config"]["drafter"], r["config"]["prompt_set"], r["config"]["temperature"]):
          r["result"] for r in recs}
  rank = lambda d: ACCEPTANCE_ORDER.index(d) if d in ACCEPTANCE_ORDER else -1
  column = VerdictColumn(f"vs {ACCEPTANCE_REFERENCE}", "every other drafter, prompt set and T "
                         f"against {ACCEPTANCE_REFERENCE} on the same prompts and keys")
  rows = []
  for (d, pset, t) in sorted(cell, key=lambda k: (k[1], k[2], rank(k[0]), k[0])):
    res = cell[d, pset, t]
    acc = " / ".join(f"{a:.2f}" for a in res["accept_rate_per_position"][:3])
    ref = cell.get((ACCEPTANCE_REFERENCE, pset, t))
    gain = ("-" if d == ACCEPTANCE_REFERENCE or ref is None
            else column.cell((d, pset, t), paired_tau_gain(res, ref)))
    runs = f"{res['num_prompts']} x {res.get('seeds', 1)}"
    rows.append([d, pset, f"{t:g}", f"{res['tau']:.2f} {_ci(res['tau_ci'], '.2f')}", acc,
                 runs, gain])
  return _table(["drafter", "prompts", "T", "tau [95% CI over prompts]",
                 "acceptance at draft positions 1 / 2 / 3", "prompts x runs",
                 f"vs {ACCEPTANCE_REFERENCE}: tau ratio - 1 [95% CI, paired], MDE (80% power): "
                 "verdict"], column.fill(rows)) + "\n\n" + family_note(column.family()) + (
                     "\n\n" + rerun_lines(recs, rel))


# The shipped draft LM continued on the target's own text, measured with the settings of
# the shipped draft LM's cells in ACCEPTANCE (same prompts and keys).
DRAFT_CONTINUED = f"{RESULTS}/draft_continued_smollm2/acceptance.jsonl"


def _settings(key: str) -> str:
  """An acceptance key without its model fields (``drafter|set|T|model|draft|eagle|...``):
  two cells with equal settings ran the same prompts, keys and lengths."""
  parts = key.split("|")
  return "|".join(parts[:4] + parts[6:])


def candidate_table(candidate_rel: str = DRAFT_CONTINUED, shipped_rel: str = ACCEPTANCE,
                    drafter: str = "draft_lm_chain") -> str:
  """A candidate drafter's acceptance cells (``experiments.acceptance`` with another
  ``--draft`` / ``--eagle``) against the shipped drafter's cells of the same settings,
  paired over prompts: per cell, then pooled over the cells
  (:func:`~experiments.common.bootstrap.pooled_paired_ratio_gain`, each prompt set
  resampled once for its cells). Raises when a candidate cell has no shipped cell of the
  same settings."""
  from experiments.compare.acceptance import paired_tau_gain
  shipped = {_settings(r["key"]): r["result"] for r in jsonl(shipped_rel)
             if r["config"]["drafter"] == drafter}
  rows, groups = [], {}
  column = VerdictColumn("candidate cells", "every cell of the candidate against the shipped "
                         "drafter's cell of the same settings")
  recs = sorted((r for r in jsonl(candidate_rel) if r["config"]["drafter"] == drafter),
                key=lambda r: (r["config"]["prompt_set"], r["config"]["temperature"]))
  for r in recs:
    ref = shipped.get(_settings(r["key"]))
    if ref is None:
      raise ValueError(f"{candidate_rel}: cell {r['key']!r} has no cell of the same settings "
                       f"in {shipped_rel}")
    new, c = r["result"], r["config"]
    groups.setdefault(c["prompt_set"], []).append((new["per_prompt"], ref["per_prompt"]))
    rows.append([c["prompt_set"], f"{c['temperature']:g}",
                 f"{new['num_prompts']} x {new.get('seeds', 1)}",
                 f"{ref['tau']:.2f} {_ci(ref['tau_ci'], '.2f')}",
                 f"{new['tau']:.2f} {_ci(new['tau_ci'], '.2f')}",
                 column.cell((c["prompt_set"], c["temperature"]), paired_tau_gain(new, ref))])
  if groups:
    pooled = pooled_paired_ratio_gain(list(groups.values()))
    rows.append(["**pooled**: " + " + ".join(sorted(groups)), "all", f"{pooled['cells']} cells",
                 "", "geometric mean of the cells' ratios",
                 f"**{_gain_cell(pooled, False)}: {single_verdict(pooled)}**"])
  return _table(["prompts", "T", "prompts x runs", "tau, shipped [95% CI]",
                 "tau, candidate [95% CI]", "candidate / shipped - 1 [95% CI, paired], MDE "
                 "(80% power): verdict"], column.fill(rows)) + (
                     f"\n\n{family_note(column.family())} {POOLED_NOTE}")
