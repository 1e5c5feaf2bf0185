"""The summary of a HumanEval run (:mod:`experiments.humaneval_eval`) from its records:
no model, no sandbox.

Per (method, T): pass@1 -- the unbiased estimator (Chen et al. 2021) per problem over
its samples, averaged over problems -- with a 95% percentile-bootstrap interval over
problems; the PAIRED difference to target-only at the same T and, for a truncation
rule, to its matched baseline at the same T (the "gap" of Revisiting Lossy
Verification, Tables 2/3): each problem's score under both methods, the problems
resampled with replacement and the SAME resample used for both, over the problems both
have. tau = (accepted + target calls) / target calls over all rows, with an interval
over problems; at T = 0 the fraction of answers identical to target-only greedy; the
outcome of every answer (:data:`specjax.data.sandbox.STATUSES`), its mean length in tokens
and how many answers stopped at the token cap (:func:`outcomes`).

Per (rule, T) and pair of drafters that both ran it (:func:`gap_contrasts`): the
difference of their gaps, e.g. (EAGLE-3 tree - its baseline) - (draft-LM chain - its
baseline) -- the paper's Tables 2/3 claim is that this is negative (the lossy rule costs
more quality under EAGLE-style drafts) -- with a paired interval over the problems all
four (three, when the baseline is the shared target-side one) share.

Power (:func:`mde80`): every paired difference also carries the SD of its per-problem
paired differences and the minimum detectable effect at 80% power, two-sided alpha 0.05,
MDE = (z_0.975 + z_0.8) * sd / sqrt(n) ~= 2.80 sd / sqrt(n) (the normal approximation
of a paired test over n problems). :func:`verdict` reads an interval against a paper's
effect on our scale: agree / differ / inconclusive; :func:`power_rows` sets every
method's main comparison beside the paper's claim (:mod:`experiments.results.paper_claims`).
"""

from __future__ import annotations

import numpy as np

from experiments.common.bootstrap import Z_ALPHA, Z_POWER, bootstrap_ci, mde80  # noqa: F401

TARGET = "target"
BASELINE_PREFIX = "baseline:"

def verdict(ci: tuple[float, float], paper_effect: float, margin: float = 0.0) -> str:
  """agree / differ / inconclusive: a 95% interval ``ci`` of our difference read
  against the paper's effect on our scale.

  A paper effect of 0 is a no-effect claim ("keeps accuracy"): agree when the interval
  lies inside ``[-margin, +margin]``, differ when it lies wholly outside, else
  inconclusive (with margin 0 an interval that holds 0 is inconclusive: it contains
  both zero and the paper's effect). A non-zero effect: inconclusive when the interval
  contains both 0 and the effect; agree when it excludes 0 on the effect's side; differ
  otherwise (it excludes the effect but not 0, or lies on the other side of 0)."""
  lo, hi = ci
  if lo > hi or margin < 0:
    raise ValueError(f"bad interval {ci!r} or margin {margin!r}")
  if paper_effect == 0:
    if -margin <= lo and hi <= margin:
      return "agree"
    return "differ" if hi < -margin or lo > margin else "inconclusive"
  if lo <= 0 <= hi:
    return "inconclusive" if lo <= paper_effect <= hi else "differ"
  return "agree" if (lo > 0) == (paper_effect > 0) else "differ"


def cells(records: list[dict]) -> dict:
  """``{(method, T): {task_id: {"passed": [...], "answers": {sample: text},
  "statuses": [...], "tokens": [...], "accepted": int, "calls": int}}}`` (records of
  target-only runs written before ``--methods`` existed have no ``method``: they are
  "target"; answers recorded without a status or length give None there)."""
  out: dict = {}
  for r in records:
    c = r["config"]
    cell = out.setdefault((c.get("method", TARGET), float(c["temperature"])), {})
    for p in r["result"]["problems"]:
      d = cell.setdefault(p["task_id"], {"passed": [], "answers": {}, "statuses": [],
                                         "tokens": [], "accepted": 0, "calls": 0})
      d["passed"].append(bool(p["passed"]))
      d["statuses"].append(p.get("status"))
      d["tokens"].append(p.get("tokens"))
      d["answers"][c.get("sample", 0)] = p.get("answer")
      d["accepted"] += int(p.get("accepted", 0))
      d["calls"] += int(p.get("calls", 0))
  return out


def pass_scores(cell: dict) -> dict:
  """``{task_id: unbiased pass@1 over that problem's samples}``."""
  from specjax.data.pass_at_k import pass_at_k
  return {t: pass_at_k(len(d["passed"]), int(sum(d["passed"])), 1) for t, d in cell.items()}


def _joint_bootstrap(score_dicts: list[dict], statistic, weights: tuple,
                     num_resamples: int, seed: int) -> dict | None:
  """``statistic`` of the ``[n, len(score_dicts)]`` matrix of scores over the problems
  all dicts share, with a 95% percentile-bootstrap interval from ONE resample of
  problems for every column; ``statistic`` is the mean of the per-problem contrast
  ``x @ weights``, whose SD gives ``sd`` and ``mde80`` (:func:`mde80`). None when no
  problem is shared."""
  common = sorted(set.intersection(*(set(d) for d in score_dicts)))
  if not common:
    return None
  x = np.array([[d[t] for d in score_dicts] for t in common], np.float64)  # [n, m]
  lo, hi = bootstrap_ci(x, statistic=statistic, num_resamples=num_resamples, seed=seed)
  per_problem = x @ np.asarray(weights, np.float64)
  sd = float(np.std(per_problem, ddof=1)) if len(common) > 1 else 0.0
  return {"diff": float(statistic(x)), "ci95": [lo, hi], "problems": len(common),
          "excludes_zero": bool(lo > 0 or hi < 0), "sd": sd, "mde80": mde80(sd, len(common))}


def paired_difference(a: dict, b: dict, num_resamples: int = 2000, seed: int = 0) -> dict | None:
  """mean(a) - mean(b) over the problems in both ``{task_id: score}`` dicts, with a 95%
  paired percentile-bootstrap interval (one resample of problems for both). None when
  no problem is shared."""
  return _joint_bootstrap([a, b], lambda s: s[:, 0].mean() - s[:, 1].mean(), (1, -1),
                          num_resamples, seed)


def difference_of_gaps(a: dict, base_a: dict, b: dict, base_b: dict,
                       num_resamples: int = 2000, seed: int = 0) -> dict | None:
  """(mean(b) - mean(base_b)) - (mean(a) - mean(base_a)) over the problems in all four
  ``{task_id: score}`` dicts, with a 95% percentile-bootstrap interval from ONE resample
  of problems for all four. None when no problem is shared."""
  stat = lambda s: (s[:, 2].mean() - s[:, 3].mean()) - (s[:, 0].mean() - s[:, 1].mean())
  return _joint_bootstrap([a, base_a, b, base_b], stat, (-1, 1, 1, -1), num_resamples, seed)


def _tau(cell: dict) -> tuple[float | None, list | None]:
  pairs = np.array([[d["accepted"] + d["calls"], d["calls"]] for d in cell.values()], np.float64)
  if pairs[:, 1].sum() == 0:
    return None, None
  ratio = lambda s: s[:, 0].sum() / max(s[:, 1].sum(), 1.0)
  return float(ratio(pairs)), list(bootstrap_ci(pairs, ratio))


def _identical(cell: dict, greedy: dict) -> float | None:
  common = [t for t in cell if t in greedy]
  if not common:
    return None
  return float(np.mean([cell[t]["answers"].get(0) == greedy[t]["answers"].get(0)
                        for t in common]))


def outcomes(cell: dict, max_new_tokens: int | None = None) -> dict:
  """Per-answer counts over every sample of every problem: ``answers``; one count per
  sandbox status (``pass, fail, timeout, error``; answers recorded without a status are
  not counted there); ``mean_tokens`` (None when no length was recorded) and ``at_cap``:
  answers whose length reached ``max_new_tokens`` -- cut off, or ending exactly there
  (None when the cap is not given or a length is missing)."""
  from specjax.data.sandbox import STATUSES
  statuses = [s for d in cell.values() for s in d["statuses"]]
  tokens = [n for d in cell.values() for n in d["tokens"]]
  out = {"answers": len(statuses), **{s: statuses.count(s) for s in STATUSES}}
  known = [n for n in tokens if n is not None]
  out["mean_tokens"] = float(np.mean(known)) if known else None
  out["at_cap"] = (sum(n >= max_new_tokens for n in known)
                   if max_new_tokens is not None and known and len(known) == len(tokens)
                   else None)
  return out


def _baseline_name(method: str, t: float, scores: dict) -> str:
  """The matched baseline a method is compared with: ``baseline:<method>`` (same
  drafter) when it ran, else the target-side ``baseline:target:<rule>`` (the same law:
  lossless verification reproduces the processed target)."""
  from experiments.humaneval.methods import target_baseline_spec
  own = BASELINE_PREFIX + method
  if method == TARGET or method.startswith(BASELINE_PREFIX) or (own, t) in scores:
    return own
  return target_baseline_spec(method)


def _vs_baseline(sc: dict, base: dict | None, name: str) -> dict | None:
  d = paired_difference(sc, base) if base is not None else None
  return None if d is None else {"baseline": name, **d}


def summarize(records: list[dict], max_new_tokens: int | None = None) -> list[dict]:
  """One row per (method, T), ordered by T then by the methods' order in ``records``:
  ``method, temperature, problems, samples_per_problem, pass@1, ci95, vs_target,
  vs_baseline`` (:func:`paired_difference` or None), ``tau, tau_ci95`` (None for
  target-only), ``identical_to_greedy`` (T = 0 only, else None) and ``outcomes``
  (:func:`outcomes`; ``max_new_tokens`` is the runs' token cap)."""
  cs = cells(records)
  order = list(dict.fromkeys(m for m, _ in cs))
  scores = {k: pass_scores(v) for k, v in cs.items()}
  greedy = cs.get((TARGET, 0.0))
  rows = []
  for (m, t) in sorted(cs, key=lambda k: (k[1], order.index(k[0]))):
    cell, sc = cs[(m, t)], scores[(m, t)]
    lo, hi = bootstrap_ci(list(sc.values()))
    tau, tau_ci = _tau(cell)
    ref = scores.get((TARGET, t))
    base_name = _baseline_name(m, t, scores)
    base = scores.get((base_name, t))
    rows.append({
        "method": m, "temperature": t, "problems": len(cell),
        "samples_per_problem": float(np.mean([len(d["passed"]) for d in cell.values()])),
        "pass@1": float(np.mean(list(sc.values()))), "ci95": [lo, hi],
        "vs_target": paired_difference(sc, ref) if ref is not None and m != TARGET else None,
        "vs_baseline": _vs_baseline(sc, base, base_name),
        "tau": tau, "tau_ci95": tau_ci,
        "identical_to_greedy": _identical(cell, greedy) if t == 0 and greedy else None,
        "outcomes": outcomes(cell, max_new_tokens)})
  return rows


def _drafter_rank(method: str) -> int:
  from experiments.humaneval.methods import HUMANEVAL_DRAFTERS as order
  drafter = method.partition(":")[0]
  return order.index(drafter) if drafter in order else len(order)


def gap_contrasts(rows: list[dict], records: list[dict]) -> list[dict]:
  """For every (rule, T) that two or more drafters ran with a matched baseline (rows of
  :func:`summarize` with ``vs_baseline``): each later drafter's gap minus the first
  one's (drafters in ``humaneval_methods.HUMANEVAL_DRAFTERS`` order: draft-LM chain, EAGLE-3
  chain, EAGLE-3 tree, so a negative contrast reads "the rule costs more under the
  later drafter"), :func:`difference_of_gaps` under key
  ``contrast``. Rows: ``rule, temperature, first, second, gap_first, gap_second,
  contrast``."""
  from experiments.humaneval.methods import rule_spec_of
  scores = {k: pass_scores(v) for k, v in cells(records).items()}
  groups: dict = {}
  for r in rows:
    if r["vs_baseline"] is None or r["method"].startswith(BASELINE_PREFIX):
      continue
    groups.setdefault((rule_spec_of(r["method"]), r["temperature"]), []).append(r)
  out = []
  for (rule, t), rs in groups.items():
    rs = sorted(rs, key=lambda r: _drafter_rank(r["method"]))
    first = rs[0]
    for second in rs[1:]:
      d = difference_of_gaps(scores[(first["method"], t)],
                             scores[(first["vs_baseline"]["baseline"], t)],
                             scores[(second["method"], t)],
                             scores[(second["vs_baseline"]["baseline"], t)])
      if d is not None:
        out.append({"rule": rule, "temperature": t, "first": first["method"],
                    "second": second["method"], "gap_first": first["vs_baseline"]["diff"],
                    "gap_second": second["vs_baseline"]["diff"], "contrast": d})
  return out


def _comparison(row: dict) -> tuple[str, dict | None]:
  """A row's main comparison: a truncation rule's gap to its matched baseline when it
  has one, else its difference to target-only."""
  if row["vs_baseline"] is not None and not row["method"].startswith(BASELINE_PREFIX):
    return row["vs_baseline"]["baseline"], row["vs_baseline"]
  return TARGET, row["vs_target"]


def _read_claim(claim, diff: dict, reference: float) -> dict:
  """The claim's effect on our scale (``reference`` = the compared method's pass@1), its
  margin and the :func:`verdict` of ``diff``'s interval; all None without a claim."""
  from experiments.results.paper_claims import NoLossClaim
  if claim is None:
    return {"claim": None, "paper_effect": None, "margin": None, "verdict": None}
  no_loss = isinstance(claim, NoLossClaim)
  effect = 0.0 if no_loss else claim.on_our_scale(reference)
  margin = claim.margin(reference) if no_loss else 0.0
  return {"claim": claim.describe(), "paper_effect": effect, "margin": margin,
          "verdict": verdict(tuple(diff["ci95"]), effect, margin)}


def correct_verdicts(prows: list[dict]) -> list[dict]:
  """``prows`` with every verdict re-read over the family of its rows that carry one
  (Bonferroni, :class:`experiments.results.families.PaperFamily`): a verdict that does
  not survive the correction becomes ``"<verdict>, exploratory"``."""
  from experiments.results.families import PaperFamily
  claimed = [i for i, p in enumerate(prows) if p["verdict"] is not None]
  family = PaperFamily("paper claims", "rows with a claim", tuple(
      (i, prows[i]["diff"]["diff"], tuple(prows[i]["diff"]["ci95"]),
       lambda ci, p=prows[i]: verdict(ci, p["paper_effect"], p["margin"])) for i in claimed))
  return [dict(p, verdict=family.verdict(i)) if i in claimed else p
          for i, p in enumerate(prows)]


def power_rows(rows: list[dict], contrasts: list[dict] = (), correct: bool = True) -> list[dict]:
  """Every comparison with its power and, where a paper makes a claim
  (:func:`experiments.results.paper_claims.claim_for`), the verdict: one row per non-target
  method (its :func:`_comparison`) and one per gap contrast (read against the paper's
  EAGLE-3 gap minus its plain-SD gap). Fields: ``method, temperature, compared_with,
  diff`` (the paired difference, with ``sd`` and ``mde80``), ``reference`` (pass@1 of
  the compared method), ``claim, paper_effect, margin, verdict``. ``correct``: the
  verdicts corrected over the rows that carry one (:func:`correct_verdicts`; a caller
  that pools several grids into one family corrects over that family instead)."""
  from experiments.results.paper_claims import claim_for, contrast_on_our_scale
  pass1 = {(r["method"], r["temperature"]): r["pass@1"] for r in rows}
  out = []
  for r in rows:
    other, diff = _comparison(r)
    if diff is None:
      continue
    ref = pass1[(other, r["temperature"])]
    out.append({"method": r["method"], "temperature": r["temperature"], "compared_with": other,
                "diff": diff, "reference": ref, **_read_claim(claim_for(r["method"]), diff, ref)})
  for c in contrasts:
    first = next(r for r in rows if r["method"] == c["first"] and
                 r["temperature"] == c["temperature"])
    ref = pass1[(first["vs_baseline"]["baseline"], c["temperature"])]
    effect = contrast_on_our_scale(c["rule"].partition(":")[0], ref)
    read = {"claim": None, "paper_effect": None, "margin": None, "verdict": None}
    if effect is not None and c["first"].startswith("draft_chain:"):
      read = {"claim": "EAGLE-3 gap minus plain-SD gap (Wang, Zhou et al. 2026, Tables 2/3)",
              "paper_effect": effect, "margin": 0.0,
              "verdict": verdict(tuple(c["contrast"]["ci95"]), effect)}
    out.append({"method": f"{c['second']} gap - {c['first']} gap",
                "temperature": c["temperature"], "compared_with": "(gap contrast)",
                "diff": c["contrast"], "reference": ref, **read})
  return correct_verdicts(out) if correct else out


def power_markdown(prows: list[dict]) -> list[str]:
  """The lines of the power / verdict table of :func:`power_rows`."""
  lines = ["| comparison | T | minus | difference [95% CI] | problems | SD of paired "
           "differences | MDE (80% power) | paper's effect on our scale | verdict |",
           "|:---|---:|:---|:---|---:|---:|---:|:---|:---|"]
  for p in prows:
    d = p["diff"]
    paper = "-" if p["paper_effect"] is None else (
        f"0 (margin ±{p['margin']:.3f})" if p["paper_effect"] == 0 else f"{p['paper_effect']:+.4f}")
    lines.append(f"| {p['method']} | {p['temperature']:g} | {p['compared_with']} | {_ci(d)} | "
                 f"{d['problems']} | {d['sd']:.3f} | {d['mde80']:.3f} | {paper} | "
                 f"{p['verdict'] or '-'} |")
  return lines


def _ci(d: dict | None, digits: int = 3) -> str:
  if d is None:
    return "-"
  star = " *" if d["excludes_zero"] else ""
  return f"{d['diff']:+.{digits}f} [{d['ci95'][0]:+.{digits}f}, {d['ci95'][1]:+.{digits}f}]{star}"


def markdown(rows: list[dict], title: str, contrasts: list[dict] = ()) -> str:
  """The summary table (``*``: the paired 95% interval excludes 0), the outcomes, the
  power / verdict table of :func:`power_rows` and, when given, the gap contrasts of
  :func:`gap_contrasts`."""
  lines = [title, "",
           "| method | T | problems | samples/problem | pass@1 [95% CI] | minus target [95% CI] | "
           "minus matched baseline [95% CI] | tau [95% CI] | identical to greedy |",
           "|:---|---:|---:|---:|:---|:---|:---|:---|---:|"]
  for r in rows:
    tau = "-" if r["tau"] is None else \
        f"{r['tau']:.2f} [{r['tau_ci95'][0]:.2f}, {r['tau_ci95'][1]:.2f}]"
    same = "-" if r["identical_to_greedy"] is None else f"{r['identical_to_greedy']:.2f}"
    lines.append(f"| {r['method']} | {r['temperature']:g} | {r['problems']} | "
                 f"{r['samples_per_problem']:.0f} | {r['pass@1']:.3f} [{r['ci95'][0]:.3f}, "
                 f"{r['ci95'][1]:.3f}] | {_ci(r['vs_target'])} | {_ci(r['vs_baseline'])} | "
                 f"{tau} | {same} |")
  lines += ["", "Differences are paired over problems (same bootstrap resample for both "
            "methods); * marks an interval that excludes 0. pass@1 at T > 0 is the unbiased "
            "estimator over each problem's samples. tau = tokens per target call; identical "
            "to greedy = answers equal to target-only greedy (T = 0)."]
  lines += ["", "Outcomes per answer (every sample of every problem; at cap = answers as long "
            "as the token cap, i.e. cut off or ending exactly there):", "",
            "| method | T | answers | pass | fail | error | timeout | mean tokens | at cap |",
            "|:---|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for r in rows:
    o = r["outcomes"]
    mean = "-" if o["mean_tokens"] is None else f"{o['mean_tokens']:.0f}"
    cap = "-" if o["at_cap"] is None else str(o["at_cap"])
    lines.append(f"| {r['method']} | {r['temperature']:g} | {o['answers']} | {o['pass']} | "
                 f"{o['fail']} | {o['error']} | {o['timeout']} | {mean} | {cap} |")
  prows = power_rows(rows, contrasts)
  if prows:
    lines += ["", "Power and verdicts (MDE = minimum detectable effect of the paired difference "
              "at 80% power, two-sided alpha 0.05: 2.80 x SD / sqrt(problems); the paper's "
              "effect is a relative loss put on our scale (experiments/results/paper_claims.py); "
              "verdict: inconclusive when the interval holds both 0 and the paper's effect, or "
              "for a no-loss claim reaches past its margin; each verdict re-read on its "
              "interval widened to the Bonferroni level 1 - 0.05/m over the m rows with a "
              "verdict, and marked exploratory when it does not survive):", "",
              *power_markdown(prows)]
  if contrasts:
    lines += ["", "Gap contrasts (Revisiting Lossy Verification, Tables 2/3: the rule's gap to "
              "its matched baseline under one drafter minus under another):", "",
              "| rule | T | gap, first drafter | gap, second drafter | second - first [95% CI] "
              "| problems |", "|:---|---:|:---|:---|:---|---:|"]
    for c in contrasts:
      lines.append(f"| {c['rule']} | {c['temperature']:g} | {c['first']}: "
                   f"{c['gap_first']:+.3f} | {c['second']}: {c['gap_second']:+.3f} | "
                   f"{_ci(c['contrast'])} | {c['contrast']['problems']} |")
  return "\n".join(lines) + "\n"
