"""Tables comparing verification rules on SmolLM2 from committed sweep records (no
model, no JAX): block vs token-level on chains, traversal vs token-level on trees, tree
children drawn top-k vs without replacement, and MARS with token-level vs block
verification.

Every comparison pairs two rows of one record file that ran the same prompts with the
same keys; the gain is a ratio of tau over prompts with a percentile-bootstrap interval
that resamples prompts for both rows at once
(:func:`experiments.common.bootstrap.paired_ratio_gain`), and its minimum detectable
effect at 80% power is read from the interval's width.

Records (paths relative to the repository root):

* ``benchmarks/results/block_vs_token_smollm2/sweep_k_smollm2.jsonl``
  (``experiments.sweep_k``);
* ``benchmarks/results/traversal_vs_token_smollm2/compare_verifiers_smollm2.jsonl``
  (``experiments.compare_verifiers``).
"""

from __future__ import annotations

import json

from experiments.common.rows import draft_depth
from experiments.humaneval import summary as hs
from experiments.results import paper_claims as pc
from experiments.results.markdown import RESULTS, ci, path, table, width_mde80

BLOCK_VS_TOKEN = f"{RESULTS}/block_vs_token_smollm2/sweep_k_smollm2.jsonl"
TRAVERSAL_VS_TOKEN = f"{RESULTS}/traversal_vs_token_smollm2/compare_verifiers_smollm2.jsonl"

# The trees of the traversal comparison, as the docs name them.
TREES = {
    "eagle_tree": ("EAGLE-3 head, dynamic tree (depth 5, top-8, 24 nodes)", "top-k"),
    "eagle_rsd_tree": ("EAGLE-3 head, static tree (9 nodes)", "sampled without replacement"),
    "tree": ("draft LM, static tree (9 nodes)", "top-k"),
    "rsd_tree": ("draft LM, static tree (9 nodes)", "sampled without replacement"),
}


def spec_rows(rel: str) -> dict:
  """``{(rule, drafter, D, T): result}`` of a sweep record's speculative rows (D: a
  chain's K or a tree's depth, :func:`experiments.common.rows.draft_depth`).

  Runs of the same row with other settings (``--config.seed``: other keys, the same
  prompts) are pooled: per-prompt accepted tokens and target calls are summed over
  the runs, so a prompt's runs stay together in the bootstrap; ``runs`` counts them.
  """
  with open(path(rel)) as f:
    recs = [json.loads(line) for line in f if line.strip()]
  pooled: dict = {}
  for r in recs:
    c, res = r["config"], r["result"]
    if c["kind"] != "spec":
      continue
    name = (c["rule"], c["drafter"], draft_depth(c), c["temperature"])
    acc, calls = res["accepted_per_prompt"], res["target_calls_per_prompt"]
    if name in pooled:
      p = pooled[name]
      if len(p["accepted_per_prompt"]) != len(acc):
        raise ValueError(f"{rel}: runs of {name} have different prompt lists")
      acc = [a + b for a, b in zip(p["accepted_per_prompt"], acc)]
      calls = [a + b for a, b in zip(p["target_calls_per_prompt"], calls)]
    runs = pooled[name]["runs"] + 1 if name in pooled else 1
    pooled[name] = {"accepted_per_prompt": acc, "target_calls_per_prompt": calls,
                    "tau": (sum(acc) + sum(calls)) / sum(calls), "runs": runs}
  return pooled


def paired_tau_gain(a: dict, b: dict, seed: int = 0) -> dict:
  """tau(a) / tau(b) - 1 of two spec rows that ran the same prompts and keys, with a
  95% percentile-bootstrap interval that resamples prompts for both at once."""
  from experiments.common.bootstrap import paired_ratio_gain
  pairs = lambda r: [[acc + calls, calls] for acc, calls in zip(r["accepted_per_prompt"],
                                                                 r["target_calls_per_prompt"])]
  g = paired_ratio_gain(pairs(a), pairs(b), seed=seed)
  return dict(g, ci95=tuple(g["ci95"]))


def gain_cells(a: dict, b: dict) -> list[str]:
  """tau of b, tau of a, a / b - 1 [CI], prompts x runs, MDE: the shared columns of a
  paired comparison (b is the reference)."""
  if a["runs"] != b["runs"]:
    raise ValueError(f"paired rows ran {a['runs']} and {b['runs']} times")
  g = paired_tau_gain(a, b)
  return [f"{b['tau']:.2f}", f"{a['tau']:.2f}", f"{g['diff']:+.3f} {ci(g['ci95'])}",
          f"{g['prompts']} x {a['runs']}", f"{width_mde80(g['ci95']):.3f}"]


def direction_rows(pairs: list, name: str, definition: str) -> tuple[list, str]:
  """Rows of a two-rule comparison without a paper effect, the verdict ("higher" /
  "lower" / "not resolved") corrected over the family of every pair in the table.

  ``pairs``: ``(leading cells, a, b)`` per row, ``b`` the reference. Returns the rows
  (leading cells + :func:`gain_cells` + verdict) and the family's note."""
  from experiments.results.families import Family, Test, family_note
  gains = [paired_tau_gain(a, b) for _, a, b in pairs]
  family = Family(name, definition, tuple(
      Test(i, g["diff"], tuple(g["ci95"]), 0.0, width_mde80(g["ci95"]))
      for i, g in enumerate(gains)), up="higher", down="lower", none="not resolved")
  rows = [list(lead) + gain_cells(a, b) + [family.verdict(i)]
          for i, (lead, a, b) in enumerate(pairs)]
  return rows, family_note(family)


def block_vs_token_table() -> str:
  """Block verification vs token-level (lossless) on the same EAGLE-3 chain drafts,
  per K and T: tau of each, the paired gain with its interval, MDE and verdict
  against the paper's +7-10% (:func:`~experiments.results.families.range_verdict`,
  corrected over the table's rows)."""
  from experiments.results.families import PaperFamily, range_verdict
  spec = spec_rows(BLOCK_VS_TOKEN)
  rows, cells = [], []
  read = lambda interval: range_verdict(interval, pc.BLOCK_GAIN_RANGE)
  for (rule, d, k, t), blk in sorted(spec.items(), key=lambda kv: (kv[0][3], kv[0][2])):
    if rule != "block" or ("lossless", d, k, t) not in spec:
      continue
    g = paired_tau_gain(blk, spec["lossless", d, k, t])
    cells.append(((k, t), g["diff"], g["ci95"], read))
    rows.append([f"{t:g}", str(k)] + gain_cells(blk, spec["lossless", d, k, t]) + [(k, t)])
  family = PaperFamily("block vs token-level", "every K and T of this table, read against "
                       "the paper's effect", tuple(cells))
  rows = [r[:-1] + [family.verdict(r[-1])] for r in rows]
  return table(["T", "K", "tau token-level", "tau block", "block / token-level - 1 "
                "[95% CI, paired over prompts]", "prompts x runs", "MDE (80% power)",
                "verdict (paper +7% to +10%)"], rows) + "\n\n" + family.note()


def traversal_vs_token_table() -> str:
  """Traversal verification vs token-level lossless verification of the same trees
  (dynamic EAGLE-2 and static, children top-k or sampled without replacement), per T:
  tau, paired gain, MDE, verdict against the paper's +2.2-5.7%
  (:func:`~experiments.results.families.range_verdict`, corrected over the table's rows)."""
  from experiments.results.families import PaperFamily, range_verdict
  spec = spec_rows(TRAVERSAL_VS_TOKEN)
  rows, cells = [], []
  read = lambda interval: range_verdict(interval, pc.TRAVERSAL_GAIN_RANGE)
  for d in TREES:
    for (rule, dd, k, t), trav in sorted(spec.items(), key=lambda kv: kv[0][3]):
      if rule != "traversal" or dd != d or ("lossless", d, k, t) not in spec:
        continue
      g = paired_tau_gain(trav, spec["lossless", d, k, t])
      theory = "0" if TREES[d][1] == "top-k" else ">= 0"
      cells.append(((d, k, t), g["diff"], g["ci95"], read))
      rows.append(list(TREES[d]) + [f"{t:g}"] + gain_cells(trav, spec["lossless", d, k, t])
                  + [theory, (d, k, t)])
  family = PaperFamily("traversal vs token-level", "every tree and T of this table, read "
                       "against the paper's effect", tuple(cells))
  rows = [r[:-1] + [family.verdict(r[-1])] for r in rows]
  return table(["drafter and tree", "children", "T", "tau token-level", "tau traversal",
                "traversal / token-level - 1 [95% CI, paired over prompts]", "prompts x runs",
                "MDE (80% power)", "exact gain per round on the same tree",
                "verdict (paper +2.2% to +5.7%)"], rows) + "\n\n" + family.note()


def tree_children_table() -> str:
  """The draft LM's static 9-node tree with children sampled without replacement
  (recursive rejection sampling) vs its top-k children, per rule and T: which one
  accepts more (no paper effect: the without-replacement paper compares against i.i.d.
  children, not top-k)."""
  spec = spec_rows(TRAVERSAL_VS_TOKEN)
  pairs = [((rule, f"{t:g}"), smp, spec[rule, "tree", k, t])
           for (rule, d, k, t), smp in sorted(spec.items(), key=lambda kv: (kv[0][3], kv[0][0]))
           if d == "rsd_tree" and (rule, "tree", k, t) in spec]
  rows, note = direction_rows(pairs, "children", "every rule and T: children without "
                              "replacement against top-k children")
  return table(["rule", "T", "tau top-k children", "tau children without replacement",
                "without replacement / top-k - 1 [95% CI, paired over prompts]", "prompts x runs",
                "MDE (80% power)", "without replacement is"], rows) + "\n\n" + note


def mars_block_table() -> str:
  """MARS with token-level verification vs MARS with block verification on the same
  EAGLE-3 chain drafts (rows of the block-vs-token record), per K and T: tau of each,
  the paired gain and its MDE, and the lossless rows' tau beside them."""
  spec = spec_rows(BLOCK_VS_TOKEN)
  pairs = []
  for (rule, d, k, t), mb in sorted(spec.items(), key=lambda kv: (kv[0][3], kv[0][2])):
    if rule != "mars_block" or ("mars", d, k, t) not in spec:
      continue
    lossless = [f"{spec[r, d, k, t]['tau']:.2f}" if (r, d, k, t) in spec else "-"
                for r in ("lossless", "block")]
    pairs.append(([f"{t:g}", str(k)] + lossless, mb, spec["mars", d, k, t]))
  rows, note = direction_rows(pairs, "MARS + block", "every K and T: MARS with block "
                              "verification against MARS token-level")
  return table(["T", "K", "tau lossless token-level", "tau block", "tau MARS",
                "tau MARS + block", "MARS + block / MARS - 1 [95% CI, paired over prompts]",
                "prompts x runs", "MDE (80% power)", "MARS + block is"], rows) + "\n\n" + note


TABLES = {
    "mars_block_smollm2": mars_block_table,
    "block_vs_token_smollm2": block_vs_token_table,
    "traversal_vs_token_smollm2": traversal_vs_token_table,
    "tree_children_smollm2": tree_children_table,
}
