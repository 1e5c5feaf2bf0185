"""Tables of the MARS threshold (theta) and draft-length (K) sweeps on SmolLM2, from
their committed records (no model, no JAX).

Every row of a sweep ran the same prompts with the same keys, so any two rows are
paired: tau gains pair the per-prompt (emitted tokens, target calls), speed gains the
per-prompt speedups -- each row's (tokens, seconds) read against the target-only run
timed beside it on that prompt, so drift of the machine between rows, which ran
minutes apart, cancels (:func:`experiments.common.row_stats.paired_speedup_gain`) --
both with a percentile-bootstrap interval that resamples the
prompts once for both rows and the MDE at 80% power
(:func:`experiments.common.bootstrap.paired_ratio_gain`).

Records (paths relative to the repository root):

* ``benchmarks/results/sweep_theta_smollm2/sweep_theta_smollm2.jsonl``
  (``experiments.sweep_theta``, ``experiments/configs/theta.py:smollm2``);
* ``benchmarks/results/sweep_k_smollm2/sweep_k_smollm2.jsonl``
  (``experiments.sweep_k``, ``experiments/configs/k.py:smollm2``).
"""

from __future__ import annotations

import json

from experiments.common.row_stats import paired_speedup_gain
from experiments.common.rows import draft_depth
from experiments.results.families import Family, Test, family_note
from experiments.results.markdown import RESULTS, ci, gain_cell, path, speedup_cell, table
from experiments.results.rule_tables import paired_tau_gain

THETA_SWEEP = f"{RESULTS}/sweep_theta_smollm2/sweep_theta_smollm2.jsonl"
K_SWEEP = f"{RESULTS}/sweep_k_smollm2/sweep_k_smollm2.jsonl"


def spec_records(rel: str) -> list[dict]:
  """The speculative rows of a sweep record without a verify-length policy, as
  ``{"config", "result"}`` dicts in file order."""
  with open(path(rel)) as f:
    recs = [json.loads(line) for line in f if line.strip()]
  return [r for r in recs if r["config"]["kind"] == "spec"
          and r["config"].get("policy", "none") == "none"]


def _tau(res: dict) -> str:
  return f"{res['tau']:.2f} {ci(res['tau_ci'], '.2f')}"


def _quality(res: dict, t: float) -> str:
  """Agreement with target greedy at T = 0, the target log-likelihood per token else."""
  if t == 0:
    return f"agrees {res['agree_exact']:.2f}"
  return f"{res['loglik']:.3f} {ci(res['loglik_ci'], '.3f')}"


def _key(r: dict) -> tuple:
  """A row's test name: drafter, T, method and draft depth D (a chain's K, a tree's
  depth: :func:`experiments.common.rows.draft_depth`)."""
  c = r["config"]
  return (c["drafter"], c["temperature"], c["method"], draft_depth(c))


def _target_tps(res: dict) -> str:
  """The target-only tokens/s timed beside this row (its speedup's denominator; the
  machine's drift between rows shows here)."""
  v = res.get("target_tokens_per_s")
  return "-" if v is None else f"{v:.1f}"


def speedup_family(recs: list[dict], definition: str) -> Family:
  """Every row's speedup over target-only against 1."""
  return Family("speedup vs 1", definition, tuple(
      Test(_key(r), r["result"]["speedup_pooled"]["speedup"],
           tuple(r["result"]["speedup_pooled"]["ci95"]), 1.0,
           r["result"]["speedup_pooled"]["mde80"]) for r in recs), up="faster", down="slower")


def _corrected(cell: str, family: Family, key) -> str:
  """A cell rendered with its verdict replaced by the family-corrected one."""
  return cell.rsplit(": ", 1)[0] + f": {family.verdict(key)}"


def _theta_families(recs: list[dict], lossless: dict) -> tuple:
  """Speedup vs 1 over every row; MARS' tau and speedup vs lossless over every theta,
  drafter and T."""
  tau, speed = [], []
  for r in recs:
    ref = lossless.get((r["config"]["drafter"], r["config"]["temperature"]))
    if r["config"]["rule"] != "mars" or ref is None:
      continue
    for out, g in ((tau, paired_tau_gain(r["result"], ref)),
                   (speed, paired_speedup_gain(r["result"], ref))):
      out.append(Test(_key(r), g["diff"], tuple(g["ci95"]), 0.0, g["mde80"]))
  return (speedup_family(recs, "every row (lossless and MARS at every theta, both drafters "
                         "and temperatures)"),
          Family("tau vs lossless", "MARS at every theta against lossless on the same "
                 "drafter and T", tuple(tau)),
          Family("speedup vs lossless", "MARS at every theta against lossless's speedup on "
                 "the same drafter and T", tuple(speed)))


def theta_sweep_table() -> str:
  """MARS at every theta beside lossless on the same drafter, per drafter and T: tau,
  the target-only tokens/s timed beside the row, speedup over target-only, and MARS'
  tau and tokens/s against lossless (paired), with the quality column (greedy
  agreement at T = 0, log-likelihood at T > 0); verdicts corrected over the
  families of :func:`_theta_families`."""
  recs = spec_records(THETA_SWEEP)
  lossless = {(r["config"]["drafter"], r["config"]["temperature"]): r["result"] for r in recs
              if r["config"]["rule"] == "lossless"}
  fam = _theta_families(recs, lossless)
  rows = []

  def order(r):
    c = r["config"]
    return (c["drafter"], c["temperature"], c["rule"] != "lossless",
            c["hparams"].get("theta", 0.0))

  for r in sorted(recs, key=order):
    c, res = r["config"], r["result"]
    ref = lossless.get((c["drafter"], c["temperature"]))
    mars = c["rule"] == "mars"
    if not mars and c["rule"] != "lossless":
      continue
    versus = ([gain_cell(paired_tau_gain(res, ref), False) + f": {fam[1].verdict(_key(r))}",
               gain_cell(paired_speedup_gain(res, ref), False) + f": {fam[2].verdict(_key(r))}"]
              if mars and ref is not None else ["-", "-"])
    rows.append([c["drafter"], f"{c['temperature']:g}",
                 f"{c['hparams']['theta']:g}" if mars else "lossless", _tau(res),
                 _target_tps(res), _corrected(speedup_cell(res), fam[0], _key(r)), *versus,
                 f"{res.get('relaxed_rate', 0.0):.3f}", _quality(res, c["temperature"])])
  return table(["drafter", "T", "theta", "tau [95% CI over prompts]",
                "target-only tokens/s beside it",
                "speedup [95% CI over prompts], MDE: verdict vs 1",
                "tau vs lossless - 1 [95% CI, paired], MDE: verdict",
                "speedup vs lossless's - 1 [95% CI, paired], MDE: verdict",
                "relaxed acceptances per draft", "quality (T = 0: agreement with target "
                "greedy; T > 0: target log-likelihood per token [95% CI])"], rows) + (
                    "\n\n" + family_note(*fam))


def _peak_cell(fastest: dict, neighbours: list[dict]) -> str:
  """Where the fastest K stands against its neighbouring K (paired speedups): a peak
  when its speedup is higher than each neighbour's with the interval excluding 0."""
  cells = []
  for nb in neighbours:
    g = paired_speedup_gain(fastest["result"], nb["result"])
    cells.append((nb["config"]["num_draft"], g))
  resolved = all(g["ci95"][0] > 0 for _, g in cells)
  parts = ", ".join(f"K = {k}: {g['diff']:+.3f} {ci(g['ci95'])}" for k, g in cells)
  return f"fastest; vs {parts}: " + ("a peak" if resolved else "peak not resolved")


def _decode_cell(res: dict) -> str:
  """The decode-phase speedup (each prompt's prefill and first token taken off both
  sides) with its interval over prompts; no verdict (not a family of its own)."""
  dp = res["speedup_decode_pooled"]
  return f"{dp['speedup']:.2f} {ci(dp['ci95'], '.2f')}"


def k_sweep_table() -> str:
  """Lossless and MARS on the EAGLE-3 chain at every draft length K, per rule and T:
  tau, speedup over target-only, and on the fastest K's row (highest speedup) its
  speedup against the neighbouring K's (paired): whether it peaks there, and at a
  middle K."""
  recs = spec_records(K_SWEEP)
  speed = speedup_family(recs, "every row (both rules, every K, both temperatures)")
  decode = all("speedup_decode_pooled" in r["result"] for r in recs)
  groups: dict = {}
  for r in recs:
    c = r["config"]
    groups.setdefault((c["temperature"], c["method"], c["drafter"]), []).append(r)
  rows = []
  for (t, method, d), rs in sorted(groups.items()):
    rs = sorted(rs, key=lambda r: r["config"]["num_draft"])
    fast = max(range(len(rs)), key=lambda i: rs[i]["result"]["speedup"])
    for i, r in enumerate(rs):
      res = r["result"]
      peak = "-"
      if i == fast and len(rs) > 1 and all("batch_timing" in x["result"] for x in rs):
        nbs = [rs[j] for j in (i - 1, i + 1) if 0 <= j < len(rs)]
        peak = _peak_cell(r, nbs) + ("" if 0 < i < len(rs) - 1 else " (at the end of the "
                                                                  "grid)")
      rows.append([d, f"{t:g}", method, str(r["config"]["num_draft"]), _tau(res),
                   _target_tps(res), _corrected(speedup_cell(res), speed, _key(r))]
                  + ([_decode_cell(res)] if decode else []) + [peak])
  return table(["drafter", "T", "rule", "K", "tau [95% CI over prompts]",
                "target-only tokens/s beside it",
                "speedup [95% CI over prompts], MDE: verdict vs 1"]
               + (["decode-phase speedup [95% CI over prompts]"] if decode else [])
               + ["fastest K: speedup vs the neighbouring K's - 1 [95% CI, paired]"], rows) + (
                    "\n\n" + family_note(speed) + " The fastest-K column is one exploratory "
                    "comparison per rule and T, uncorrected.")


TABLES = {
    "sweep_theta_smollm2": theta_sweep_table,
    "sweep_k_smollm2": k_sweep_table,
}
