"""The verifier comparison on SmolLM2 from its committed record (no model, no JAX):
every rule against its matched baseline, per drafter and temperature.

A rule's *matched baseline* is what the rule should be read against (the
lossy-verification papers' convention; docs/spec.md, "Matched truncation
baselines"): for a truncation rule at T > 0 (SpecCascade, typical acceptance)
the ``baseline:<rule>`` row -- lossless verification of the same truncated target
law; for every other rule the lossless row on the same drafter (the unprocessed
target); for lossless itself and the baseline rows, target-only generation. All
rows of one record ran the same prompts with the same keys, so each comparison is
paired over prompts:

* tau against lossless on the same drafter: a ratio of sums (emitted tokens, target
  calls) per prompt (:func:`experiments.results.rule_tables.paired_tau_gain`);
* log-likelihood per token under the target against the matched baseline: the
  difference of two ratios of sums (log-likelihood, tokens) per prompt
  (:func:`experiments.common.bootstrap.paired_ratio_difference`), with its 95%
  percentile-bootstrap interval and MDE at 80% power;
* the first speculative token's exact KL / TV to the matched baseline's law, where
  the record computed it (``kl.enabled``: exact over ``kl.num_prompts x
  kl.contexts`` of the loop's contexts, no interval);
* at T = 0, the share of prompts whose output equals target greedy (every rule is
  expected to reduce to greedy or to say why not).

Record: ``benchmarks/results/compare_smollm2/compare_verifiers_smollm2.jsonl``
(``experiments.compare_verifiers``, ``experiments/configs/compare.py:smollm2``).
"""

from __future__ import annotations

import json

from experiments.common.bootstrap import paired_ratio_difference
from experiments.results.markdown import RESULTS, ci, path, table
from experiments.results.families import VerdictColumn, family_note
from experiments.results.rule_tables import paired_tau_gain

COMPARE = f"{RESULTS}/compare_smollm2/compare_verifiers_smollm2.jsonl"


def load(rel: str) -> list[dict]:
  """The record's rows as ``{"config", "result"}`` dicts in file order, skipped rows
  (a rule its drafter cannot serve) and rows with a verify-length policy left out."""
  with open(path(rel)) as f:
    recs = [json.loads(line) for line in f if line.strip()]
  return [r for r in recs if "skipped" not in r["result"]
          and r["config"].get("policy", "none") == "none"]


def matched_baseline(rec: dict, recs: list[dict]) -> dict | None:
  """The row ``rec`` is read against (module docstring), or None when the record
  lacks it."""
  c = rec["config"]
  same_t = [r for r in recs if r["config"]["temperature"] == c["temperature"]]
  if c["kind"] == "target":
    return None
  if c["rule"] == "lossless" or c["baseline"]:
    return next((r for r in same_t if r["config"]["kind"] == "target"), None)
  matched = [r for r in same_t if r["config"]["drafter"] == c["drafter"]
             and r["config"]["baseline"] and r["config"]["rule"] == c["rule"]
             and r["config"]["hparams"] == c["hparams"]]
  if matched:
    return matched[0]
  return next((r for r in same_t if r["config"]["drafter"] == c["drafter"]
               and r["config"]["kind"] == "spec" and r["config"]["rule"] == "lossless"
               and not r["config"]["baseline"]), None)


def loglik_gap(a: dict, b: dict) -> dict:
  """Log-likelihood per token of result ``a`` minus result ``b`` (same prompts and
  keys), paired over prompts; both need ``loglik_per_prompt``."""
  try:
    return paired_ratio_difference(a["loglik_per_prompt"], b["loglik_per_prompt"])
  except KeyError as e:
    raise ValueError("both rows need per-prompt log-likelihoods (result['loglik_per_prompt']); "
                     "records written before they were kept have none") from e


# The cell of two rows with the same per-prompt values (e.g. two rules that reduce to
# greedy at T = 0): no test, so not part of the column's family.
IDENTICAL = "identical on every prompt"


def _base_name(base: dict | None) -> str:
  if base is None:
    return "-"
  c = base["config"]
  return "target-only" if c["kind"] == "target" else c["method"]


def compare_table(rel: str = COMPARE) -> str:
  """One line per speculative row: tau (and its gain over lossless on the same
  drafter), log-likelihood per token and its gap to the matched baseline, the exact
  first-token KL / TV to that baseline, and agreement with target greedy at T = 0."""
  recs = load(rel)
  lossless = {(r["config"]["drafter"], r["config"]["temperature"]): r["result"] for r in recs
              if r["config"]["kind"] == "spec" and r["config"]["rule"] == "lossless"
              and not r["config"]["baseline"]}
  rows = []
  taus = VerdictColumn("tau vs lossless", "every rule's tau against lossless on the same "
                       "drafter and T (identical rows left out)", up="higher", down="lower")
  gaps = VerdictColumn("log-likelihood vs baseline", "every row's log-likelihood per token "
                       "against its matched baseline (identical rows left out)", up="higher",
                       down="lower")
  spec = [r for r in recs if r["config"]["kind"] == "spec"]
  order = lambda r: (r["config"]["drafter"], r["config"]["temperature"],
                     r["config"]["rule"] != "lossless", r["config"]["rule"],
                     r["config"]["baseline"])
  for r in sorted(spec, key=order):
    c, res = r["config"], r["result"]
    t = c["temperature"]
    ref = lossless.get((c["drafter"], t))
    tau_gain = "-"
    if ref is not None and res is not ref:
      same = (res["accepted_per_prompt"] == ref["accepted_per_prompt"]
              and res["target_calls_per_prompt"] == ref["target_calls_per_prompt"])
      key = (c["drafter"], t, c["method"])
      tau_gain = IDENTICAL if same else taus.cell(key, paired_tau_gain(res, ref))
    base = matched_baseline(r, recs)
    gap = "-"
    if base is not None:
      g = loglik_gap(res, base["result"])  # raises, naming the field, on an old record
      same = res.get("loglik_per_prompt") == base["result"].get("loglik_per_prompt")
      gap = IDENTICAL if same else gaps.cell((c["drafter"], t, c["method"]), g)
    kl = (f"{res['first_kl']:.4f} / {res['first_tv']:.4f}"
          if res.get("first_kl") is not None else "-")
    agree = (f"{res['agree_exact']:.2f} {ci(res['agree_exact_ci'], '.2f')}"
             if t == 0 and "agree_exact_ci" in res else
             f"{res['agree_exact']:.2f}" if t == 0 else "-")
    rows.append([c["drafter"], f"{t:g}", c["method"],
                 f"{res['tau']:.2f} {ci(res['tau_ci'], '.2f')}", tau_gain,
                 f"{res['loglik']:.3f} {ci(res['loglik_ci'], '.3f')}", _base_name(base), gap,
                 kl, agree])
  return table(["drafter", "T", "rule", "tau [95% CI over prompts]",
                "tau vs lossless - 1 [95% CI, paired], MDE: verdict",
                "log-likelihood per token under the target [95% CI]", "matched baseline",
                "log-likelihood minus the baseline's [95% CI, paired], MDE: verdict",
                "first-token KL / TV to the baseline (exact)",
                "T = 0: equals target greedy (share of prompts)"], gaps.fill(taus.fill(rows))
               ) + "\n\n" + family_note(taus.family(), gaps.family())


TABLES = {"compare_smollm2": compare_table}
