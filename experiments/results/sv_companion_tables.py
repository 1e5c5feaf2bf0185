"""How much a companion tells about acceptance, per companion, from the committed
calibration records (Speculative Verification, Kim et al. 2025, Table 1).

One :mod:`experiments.sv.calibrate` run per companion -- an early exit, the target's first
N of its 30 layers with its final norm and head (:mod:`specjax.models.early_exit`), or a
separate small LM over the target's vocabulary (``lm:draft``: the first shipped 1-layer
draft LM; ``lm:DIR``: one trained on the target's own text) -- on the same calibration
prompts and keys: a shipped drafter (the draft LM, or the EAGLE-3 head beside a separate
LM as companion; the head's runs with ``c23`` in their names used the head continued on
on-policy text) drafts K = 7, every draft is verified
(lossless, T = 1), and each reached draft position leaves a record (S, A, accepted). The
table gives IG(S) / H(X) and IG(S, A) / H(X) on the paper's fixed 5 x 5 grid -- the
plug-in value, the bootstrap's bias-corrected value and its 95% basic interval over
prompts (:mod:`experiments.sv.information`) -- the Miller-Madow bias of the grid, the
paired difference from the first companion with the same drafter (same records of
acceptance), and a verdict against the paper's gain (chat for ShareGPT, code for
HumanEval).

Records: ``benchmarks/results/sv_companions_smollm2/<run>/{report.json,records.npz}``, runs
``draft_ee<N>``, ``eagle3_ee22``, ``eagle3_lm`` and ``eagle3c23_*``.
"""

from __future__ import annotations

import json
import os

from experiments.results.markdown import RESULTS, ci, path, table
from experiments.sv.information import plugin_bias_bits

SV_COMPANIONS = f"{RESULTS}/sv_companions_smollm2"
# (drafter, companion, run directory): early exits of SmolLM2's 30 layers under the draft
# LM's drafts, then the 22-layer exit and a separate small LM under the EAGLE-3 head's
# (the draft LM cannot be its own companion: S = A = 1). The first run of each drafter is
# the base of its paired differences.
HEAD2 = "EAGLE-3 head, continued on on-policy text"
COMPANIONS = (("draft LM", "early exit, 4 of 30 layers", "draft_ee4"),
              ("draft LM", "early exit, 8 of 30", "draft_ee8"),
              ("draft LM", "early exit, 15 of 30", "draft_ee15"),
              ("draft LM", "early exit, 22 of 30", "draft_ee22"),
              ("EAGLE-3 head", "early exit, 22 of 30", "eagle3_ee22"),
              ("EAGLE-3 head", "the draft LM (1 layer, 3.5M + shared embedding)", "eagle3_lm"),
              # the head continued on on-policy text (shipped after the runs above), and
              # separate LMs trained on the target's own text beside the first draft LM
              (HEAD2, "early exit, 22 of 30", "eagle3c23_ee22"),
              (HEAD2, "the first draft LM (ShareGPT text)", "eagle3c23_lm"),
              (HEAD2, "that draft LM continued on on-policy text", "eagle3c23_lm_onpolicy"),
              (HEAD2, "2-layer LM distilled on on-policy text (7.1M + shared embedding)",
               "eagle3c23_lm2_onpolicy"))
BINNING = "fixed"  # the paper's 5 x 5 grid; the report also fits quantile bins
PAPER_SET = {"sharegpt": "chat", "humaneval": "code"}


def load_run(root: str, run: str) -> tuple[dict, object]:
  """(report, records) of the calibration run ``run`` under ``root``."""
  from experiments.sv.information import CalibrationRecords
  d = path(f"{root}/{run}")
  with open(os.path.join(d, "report.json")) as f:
    report = json.load(f)
  return report, CalibrationRecords.load(os.path.join(d, "records.npz"))


def paper_frac(set_name: str) -> float | None:
  from experiments.sv.evaluation import PAPER_IG
  key = PAPER_SET.get(set_name)
  if key is None:
    return None
  h, h_cond = PAPER_IG[key]
  return 1 - h_cond / h


def paper_verdict(ci95, paper: float | None) -> str:
  """agree / differ / inconclusive of an ``IG / H(X)`` interval against the paper's share:
  differ when the interval excludes it, agree when it holds it and excludes 0,
  inconclusive when it holds both."""
  if paper is None:
    return "-"
  lo, hi = ci95
  if not lo <= paper <= hi:
    return f"differ (paper {100 * paper:.0f}%)"
  return f"{'inconclusive' if lo <= 0 else 'agree'} (paper {100 * paper:.0f}%)"


def _pct(x: float) -> str:
  return f"{100 * x:.1f}%"


def _gain(g: dict) -> str:
  """``plug-in, corrected [basic 95% CI]`` of :func:`~experiments.sv.information.gain_with_interval`."""
  return (f"{_pct(g['ig_frac'])}, {_pct(g['ig_frac_corrected'])} "
          f"{ci([100 * v for v in g['ig_frac_ci']], '.1f')}")


def companions_table(root: str = SV_COMPANIONS, companions=COMPANIONS,
                     num_resamples: int = 2000) -> str:
  """Per ``(drafter, companion, run)`` and prompt set: records, accept rate, H(X), IG(S) /
  H(X) and IG(S, A) / H(X) with their 95% intervals over prompts, the plug-in bias of the
  grid, the paired difference in IG(S, A) / H(X) from the drafter's first companion and
  the verdict against the paper."""
  from experiments.sv.information import by_prompt_set, gain_with_interval, paired_gain_difference
  runs = {run: load_run(root, run) for _, _, run in companions}
  bases = {}  # drafter -> (companion label, run, records by prompt set)
  for drafter, label, run in companions:
    if drafter not in bases:
      report, records = runs[run]
      bases[drafter] = (label, run, by_prompt_set(records, report["prompt_sets"]))
  from experiments.results.families import PaperFamily
  rows, cells, claims = [], set(), []
  for drafter, label, run in companions:
    base_label, base_run, base_sets = bases[drafter]
    report, records = runs[run]
    grid = report["tables"][BINNING]
    se, ae = grid["s_edges"], grid["a_edges"]
    names = report["prompt_sets"]
    for set_name, rec in by_prompt_set(records, names).items():
      sa = gain_with_interval(rec, se, ae, "SA", num_resamples)
      s_only = gain_with_interval(rec, se, ae, "S", num_resamples)
      cells.add(sa["cells"])
      bias = plugin_bias_bits(sa["n"], sa["cells"]) / sa["H_X"] if sa["H_X"] > 0 else 0.0
      if run == base_run:
        diff = "-"
      else:
        d = paired_gain_difference(rec, base_sets[set_name], se, ae, "SA", num_resamples)
        diff = (f"{100 * d['corrected']:+.1f} {ci([100 * v for v in d['ci']], '+.1f')} "
                f"(vs {base_label})")
      paper = paper_frac(set_name)
      key = (drafter, label, set_name)
      if paper is not None:
        lo, hi = sa["ig_frac_ci"]
        claims.append((key, (lo + hi) / 2, (lo, hi),
                       lambda interval, paper=paper: paper_verdict(interval, paper)))
      rows.append([drafter, label, set_name, f"{sa['prompts']} / {sa['n']:,}",
                   f"{rec.accepted.mean():.3f}", f"{sa['H_X']:.3f}", _gain(s_only), _gain(sa),
                   _pct(bias), diff, key if paper is not None else "-"])
  family = PaperFamily("against the paper", "every drafter, companion and prompt set with a "
                       "paper share to read against", tuple(claims))
  rows = [r[:-1] + [family.verdict(r[-1]) if r[-1] != "-" else "-"] for r in rows]
  return table(["drafter", "companion", "prompt set", "prompts / records", "accept rate",
                "H(X) bits",
                "IG(S)/H(X): plug-in, corrected [95% CI over prompts]",
                "IG(S,A)/H(X): plug-in, corrected [95% CI]",
                f"Miller-Madow bias of the {' / '.join(map(str, sorted(cells)))} bins (of H(X))",
                "IG(S,A)/H(X) minus the drafter's first companion's, corrected, points "
                "[95% CI, paired]", "vs the paper's IG(S,A)/H(X)"], rows) + (
                    "\n\n" + family.note())


TABLES = {"sv_companions_smollm2": companions_table}
