"""The HumanEval tables: each committed grid's summary (:func:`humaneval_table`,
``benchmarks/RESULTS.md``) and every HumanEval comparison a paper makes a claim about,
with its power and verdict (:func:`claims_humaneval`, ``docs/results.md``), from
``benchmarks/results/humaneval_{t0,t07,t1}/humaneval.jsonl`` -- one JSON line per
(method, T, sample, batch of problems), summarized by :mod:`experiments.humaneval.summary`
(:func:`experiments.results.records.humaneval_run`)."""

from __future__ import annotations

import numpy as np

from experiments.humaneval import summary as hs
from experiments.results import paper_claims as pc
from experiments.results.markdown import width_mde80
from experiments.results.markdown import ci as _ci
from experiments.results.markdown import table as _table
from experiments.results.records import HUMANEVAL_DIRS, humaneval_run


def humaneval_table(name: str) -> str:
  """The summary tables of one grid (:func:`experiments.humaneval.summary.markdown`)."""
  run = humaneval_run(name)
  title = (f"Records: `{run.directory}/humaneval.jsonl` ({len(run.records)} batches, "
           f"max_new_tokens={run.max_new_tokens}).")
  return hs.markdown(run.rows, title, run.contrasts).rstrip("\n")


def tau_gain(name: str, method: str, control: str, seed: int = 0) -> dict:
  """tau(method) / tau(control) - 1 over the problems both ran, with a 95% paired
  percentile-bootstrap interval (one resample of problems for both)."""
  from experiments.common.bootstrap import paired_ratio_gain
  cs = hs.cells(humaneval_run(name).records)
  t = humaneval_run(name).rows[0]["temperature"]
  a, b = cs[(method, t)], cs[(control, t)]
  common = [k for k in sorted(a) if k in b]
  x = [[a[k]["accepted"] + a[k]["calls"], a[k]["calls"]] for k in common]
  y = [[b[k]["accepted"] + b[k]["calls"], b[k]["calls"]] for k in common]
  g = paired_ratio_gain(x, y, seed=seed)
  return {"diff": g["diff"], "ci95": tuple(g["ci95"]), "problems": g["prompts"],
          "tau": (float(np.sum(x, 0)[0] / np.sum(x, 0)[1]), float(np.sum(y, 0)[0] / np.sum(y, 0)[1]))}


def _power_row(p: dict, record: str) -> list[str]:
  d = p["diff"]
  paper = ("0, margin ±" + f"{p['margin']:.3f}" if p["paper_effect"] == 0
           else f"{p['paper_effect']:+.4f}")
  return [f"{p['method']} minus {p['compared_with']}" if p["compared_with"] != "(gap contrast)"
          else p["method"], f"{p['temperature']:g}", p["claim"], paper,
          f"{d['diff']:+.3f} {_ci(d['ci95'])}", str(d["problems"]), f"{d['mde80']:.3f}",
          p["verdict"], f"`{record}`"]


def claims_humaneval() -> str:
  """Every HumanEval comparison a paper makes a claim about, with its power and verdict,
  and MARS' tau gain over the lossless tree at T = 1 (paired)."""
  rows, claimed = [], []
  for name in ("t0", "t1", "t07"):
    run = humaneval_run(name)
    for p in hs.power_rows(run.rows, run.contrasts, correct=False):
      if p["verdict"] is not None:
        claimed.append(p)
        rows.append(_power_row(p, run.directory))
  g = tau_gain("t1", "eagle3_tree:mars:theta=0.9", "eagle3_tree:lossless")
  lo, hi = pc.mars_tau_gain_range()
  rows.append(["tau of eagle3_tree:mars:theta=0.9 / eagle3_tree:lossless - 1", "1",
               f"MARS Table 1 tau gain {100 * lo:+.0f}% to {100 * hi:+.0f}% (T = 1, K = 7)",
               f"{pc.mars_tau_gain_mean():+.3f} (mean)",
               f"{g['diff']:+.3f} {_ci(g['ci95'])} (tau {g['tau'][1]:.2f} -> {g['tau'][0]:.2f})",
               str(g["problems"]), f"{width_mde80(g['ci95']):.3f} (from the interval's width)",
               hs.verdict(g["ci95"], pc.mars_tau_gain_mean()),
               f"`{HUMANEVAL_DIRS['t1']}`"])
  claimed.append({"diff": g, "paper_effect": pc.mars_tau_gain_mean(), "margin": 0.0,
                  "verdict": rows[-1][-2]})
  corrected = hs.correct_verdicts(claimed)
  for row, p in zip(rows, corrected):
    row[-2] = p["verdict"]
  return _table(["comparison", "T", "paper", "paper's effect on our scale",
                 "ours [95% CI, paired over problems]", "problems", "MDE (80% power)",
                 "verdict", "record"], rows) + (
      f"\n\nFamily *paper claims on HumanEval*: every row of this table (m = {len(rows)}); "
      "each verdict re-read on its interval widened to the Bonferroni level 1 - 0.05/m, "
      "marked *exploratory* when it does not survive.")
