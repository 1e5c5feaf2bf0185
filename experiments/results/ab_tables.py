"""Before / after comparisons of one code change timed in one process
(``benchmarks/bucketed_rule_ab.py``, retired; it runs at the record's commit): per
temperature, tau, tokens/s of target-only ``generate()`` and of the speculative loop before and after, both speedups over
target-only with 95% bootstrap intervals over prompts, and the paired gain of after
over before with its minimum detectable effect at 80% power.

Record: ``benchmarks/results/bucketed_rule_ab/lookup_chain.json``.
"""

from __future__ import annotations

import json

import numpy as np

from experiments.common.bootstrap import paired_ratio_gain
from experiments.results.families import VerdictColumn, family_note
from experiments.results.markdown import RESULTS, ci, path, table

BUCKETED_RULE_AB = f"{RESULTS}/bucketed_rule_ab/lookup_chain.json"


def _pairs(per_prompt: list, variant: str) -> np.ndarray:
  """``[n, 2]`` (tokens, seconds) per prompt of ``variant`` (target / before / after)."""
  tokens = "target_tokens" if variant == "target" else "tokens"
  return np.array([[r[tokens], r["seconds"][variant]] for r in per_prompt], float)


def _speedup(per_prompt: list, variant: str) -> str:
  g = paired_ratio_gain(_pairs(per_prompt, variant), _pairs(per_prompt, "target"))
  return f"{g['diff'] + 1:.2f} {ci([v + 1 for v in g['ci95']], '.2f')}"


def bucketed_rule_ab_table(rel: str = BUCKETED_RULE_AB) -> str:
  """One row per temperature of :data:`BUCKETED_RULE_AB`, then the record's command."""
  with open(path(rel)) as f:
    rec = json.load(f)
  rows = []
  column = VerdictColumn("bucket vs K", "every temperature: the rule over the verify bucket "
                         "against the rule over all K drafts")
  for r in rec["results"]:
    pp = r["per_prompt"]
    # tau pooled over prompts: tokens per target call in the loop (prefill excluded)
    tau = sum(p["tau"] * p["target_calls"] for p in pp) / sum(p["target_calls"] for p in pp)
    gain = paired_ratio_gain(_pairs(pp, "after"), _pairs(pp, "before"))
    tps = r["tokens_per_s"]
    rows.append([f"{r['temperature']:g}", f"{len(pp)}", f"{tau:.2f}",
                 f"{tps['target']:.1f}", f"{tps['before']:.1f}", f"{tps['after']:.1f}",
                 _speedup(pp, "before"), _speedup(pp, "after"),
                 column.cell(r["temperature"], gain)])
  head = ["T", "prompts", "tau", "tokens/s, target-only", "tokens/s, rule over K",
          "tokens/s, rule over the bucket", "speedup, rule over K [95% CI]",
          "speedup, rule over the bucket [95% CI]",
          "bucket / K - 1 [95% CI, paired], MDE (80% power): verdict"]
  note = (f"\n\nRecord `{rel}`: `{rec['command']}` at commit `{rec['commit'][:10]}`, "
          f"{rec['cpus']} CPUs, load {rec['load_start']:.2f} at the start and "
          f"{rec['load_end']:.2f} at the end (1-minute averages), {rec['wall_s']:.0f} s; "
          "both variants emitted the same tokens on every prompt.")
  return table(head, column.fill(rows)) + note + "\n\n" + family_note(column.family())


TABLES = {"bucketed_rule_ab": bucketed_rule_ab_table}
