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
"""

from __future__ import annotations

import numpy as np

from experiments.bootstrap import bootstrap_ci

TARGET = "target"
BASELINE_PREFIX = "baseline:"


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


def _joint_bootstrap(score_dicts: list[dict], statistic, num_resamples: int, seed: int
                     ) -> dict | None:
  """``statistic`` of the ``[n, len(score_dicts)]`` matrix of scores over the problems
  all dicts share, with a 95% percentile-bootstrap interval from ONE resample of
  problems for every column. None when no problem is shared."""
  common = sorted(set.intersection(*(set(d) for d in score_dicts)))
  if not common:
    return None
  x = np.array([[d[t] for d in score_dicts] for t in common], np.float64)  # [n, m]
  lo, hi = bootstrap_ci(x, statistic=statistic, num_resamples=num_resamples, seed=seed)
  return {"diff": float(statistic(x)), "ci95": [lo, hi], "problems": len(common),
          "excludes_zero": bool(lo > 0 or hi < 0)}


def paired_difference(a: dict, b: dict, num_resamples: int = 2000, seed: int = 0) -> dict | None:
  """mean(a) - mean(b) over the problems in both ``{task_id: score}`` dicts, with a 95%
  paired percentile-bootstrap interval (one resample of problems for both). None when
  no problem is shared."""
  return _joint_bootstrap([a, b], lambda s: s[:, 0].mean() - s[:, 1].mean(),
                          num_resamples, seed)


def difference_of_gaps(a: dict, base_a: dict, b: dict, base_b: dict,
                       num_resamples: int = 2000, seed: int = 0) -> dict | None:
  """(mean(b) - mean(base_b)) - (mean(a) - mean(base_a)) over the problems in all four
  ``{task_id: score}`` dicts, with a 95% percentile-bootstrap interval from ONE resample
  of problems for all four. None when no problem is shared."""
  stat = lambda s: (s[:, 2].mean() - s[:, 3].mean()) - (s[:, 0].mean() - s[:, 1].mean())
  return _joint_bootstrap([a, base_a, b, base_b], stat, num_resamples, seed)


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
  from experiments.humaneval_methods import target_baseline_spec
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
  from experiments.humaneval_methods import DRAFTERS
  drafter = method.partition(":")[0]
  return DRAFTERS.index(drafter) if drafter in DRAFTERS else len(DRAFTERS)


def gap_contrasts(rows: list[dict], records: list[dict]) -> list[dict]:
  """For every (rule, T) that two or more drafters ran with a matched baseline (rows of
  :func:`summarize` with ``vs_baseline``): each later drafter's gap minus the first
  one's (drafters in ``humaneval_methods.DRAFTERS`` order: draft-LM chain, EAGLE-3
  chain, EAGLE-3 tree, so a negative contrast reads "the rule costs more under the
  later drafter"), :func:`difference_of_gaps` under key
  ``contrast``. Rows: ``rule, temperature, first, second, gap_first, gap_second,
  contrast``."""
  from experiments.humaneval_methods import rule_spec_of
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


def _ci(d: dict | None, digits: int = 3) -> str:
  if d is None:
    return "-"
  star = " *" if d["excludes_zero"] else ""
  return f"{d['diff']:+.{digits}f} [{d['ci95'][0]:+.{digits}f}, {d['ci95'][1]:+.{digits}f}]{star}"


def markdown(rows: list[dict], title: str, contrasts: list[dict] = ()) -> str:
  """The summary table (``*``: the paired 95% interval excludes 0) and, when given, the
  gap contrasts of :func:`gap_contrasts`."""
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
