"""The lossy-verification propositions and MARS margins on SmolLM2 from their committed
record (no model, no JAX): the claims the notebooks do not cover -- MARS Fig. 1d with the
draft LM's greedy drafts, MARS' exact first-token acceptance and KL(P_MARS || p), the
soft gate's total variation, Lemma 1 at the paper's gamma = 10 and the change against
draft-target alignment.

Every number is an exact per-context quantity averaged over the record's held-out
assistant positions (SmolLM2 at T = 0.7, its shipped draft LM at T = 0.7): there is no
sampling, so no interval over draws; but the contexts are a sample of conversations (one
held-out window each). Where the record keeps per-conversation sums (``by_window``,
:func:`experiments.propositions.sweep.window_sums`), a reading that rests on a mean (a
sign, a trend) gets a 95% percentile-bootstrap interval over conversations and its
verdict is read from it (:func:`sign_verdict`); a record that keeps only the means leaves
it without one, marked exploratory (:data:`NO_INTERVAL`). Where a claim compares a
proportion with the paper's, positions are treated as independent and the interval says
so.

Record: ``benchmarks/results/lossy_propositions_smollm2_conversations/records.jsonl``
(``experiments.lossy_propositions``, ``experiments/configs/propositions.py:smollm2``).
"""

from __future__ import annotations

import json
import math

import numpy as np

from experiments.common.bootstrap import bootstrap_ci
from experiments.humaneval import summary as hs
from experiments.propositions.reports import latest
from experiments.results import paper_claims as pc
from experiments.results.markdown import RESULTS, ci, path, table
from experiments.results.proportions import two_proportions

PROPOSITIONS = f"{RESULTS}/lossy_propositions_smollm2_conversations/records.jsonl"
# A reading of means over the record's sampled contexts: exact per context, but the
# contexts come from a sample of conversations and the record keeps only the means, so
# there is no interval over conversations and the reading stays exploratory.
NO_INTERVAL = (", exploratory (means of exact per-context values over sampled contexts; "
               "no interval over conversations)")


def window_pairs(by: dict, row=None) -> np.ndarray:
  """``[W, 2]`` (sum, contexts) per conversation of a ``window_sums`` record entry (``row``:
  the index of a swept value, for sums kept per value)."""
  sums = np.asarray(by["sums"], np.float64)
  return np.stack([sums if row is None else sums[row], np.asarray(by["counts"], np.float64)], 1)


def block_efficiency(alpha, gamma: int):
  """``sum_{i=0..gamma} alpha^i`` (Leviathan et al., Eq. 1): expected tokens per target
  call at draft length gamma, as ``specjax.analysis.divergences.block_efficiency``."""
  return sum(np.asarray(alpha, np.float64) ** i for i in range(gamma + 1))


def conversation_interval(columns: list, statistic, seed: int = 0) -> dict:
  """``statistic`` of per-conversation ``[W, 2]`` (sum, contexts) columns -- each a ratio
  of sums over conversations -- and its 95% percentile-bootstrap interval, resampling
  conversations once for every column: ``{"value", "ci95", "conversations"}``."""
  both = np.concatenate(columns, 1)
  ratios = lambda a: [a[:, i].sum() / a[:, i + 1].sum() for i in range(0, a.shape[1], 2)]
  stat = lambda a: statistic(*ratios(a))
  return {"value": float(stat(both)), "ci95": list(bootstrap_ci(both, stat, seed=seed)),
          "conversations": len(both)}


def sign_verdict(cis: list, claim: str) -> str:
  """``agree in sign`` when every interval excludes 0 on the claim's side (``claim``:
  "positive" or "negative"), ``differ in sign`` when one excludes it on the other side,
  else ``inconclusive``. Agreeing needs every interval (an intersection-union test: its
  level is each interval's, no correction); differing needs one, uncorrected over the
  claim's few intervals -- so a "differ" over many intervals is the weaker reading."""
  side = 1 if claim == "positive" else -1
  if all(side * lo > 0 and side * hi > 0 for lo, hi in cis):
    return "agree in sign"
  if any(side * lo < 0 and side * hi < 0 for lo, hi in cis):
    return "differ in sign"
  return "inconclusive"


def load(rel: str = PROPOSITIONS) -> list[dict]:
  """The record's configurations (the last per key) as flat dicts, ``null`` read as nan."""
  with open(path(rel)) as f:
    return latest([json.loads(line) for line in f if line.strip()])


def _one(recs: list[dict], **match) -> dict:
  hits = [r for r in recs if all(r.get(k) == v for k, v in match.items())]
  if len(hits) != 1:
    raise ValueError(f"{PROPOSITIONS}: expected one configuration with {match}, found "
                     f"{len(hits)}")
  return hits[0]


def _nearest(values: list[float], x: float) -> int:
  return min(range(len(values)), key=lambda j: abs(values[j] - x))


def _kl(x: float) -> str:
  return "inf" if not math.isfinite(x) else f"{x:.4f}"


def _fig1d_row(recs: list[dict]) -> list[str]:
  s = _one(recs, part="margins")["summary"]
  relaxed = round(s["frac_relaxed"] * s["n"])
  rejected = round(s["greedy_reject_rate_relaxed"] * relaxed)
  pk, pn = pc.MARS_FIG1D
  d = two_proportions(rejected, relaxed, pk, pn)
  return ["P(strict reject \\| r > 0.9), the draft LM's greedy drafts (MARS Fig. 1d)",
          f"{100 * pk / pn:.1f}% ({pk} / {pn}, EAGLE-3 drafts)",
          f"{100 * rejected / relaxed:.1f}% ({rejected} / {relaxed}; unconditional "
          f"{100 * s['greedy_reject_rate']:.1f}%, r > 0.9 at {100 * s['frac_relaxed']:.1f}% of "
          f"{s['n']} positions); minus the paper {d['diff']:+.3f} {ci(d['ci95'])}, MDE "
          f"{d['mde80']:.3f} (positions treated as independent)",
          hs.verdict(d["ci95"], 0.0)]


def _mars_row(recs: list[dict], theta: float = 0.9) -> list[str]:
  cells, cis = [], []
  raises = True
  for draft, name in (("sampled", "sampled drafts"), ("top1", "greedy drafts")):
    r = _one(recs, part="mars", draft=draft)
    i = _nearest(r["thetas"], theta)
    raises &= r["accept_mean"][i] > r["lossless_accept_mean"]
    gain = ""
    if "by_window" in r:
      by = r["by_window"]
      d = conversation_interval([window_pairs(by["accept"], i),
                                 window_pairs(by["lossless_accept"])], lambda a, b: a - b)
      cis.append(d["ci95"])
      gain = (f", gain {d['value']:+.3f} {ci(d['ci95'], '+.3f')} over "
              f"{d['conversations']} conversations")
    cells.append(f"{name}: acceptance {r['lossless_accept_mean']:.3f} -> "
                 f"{r['accept_mean'][i]:.3f}{gain}, KL(P_MARS ‖ p) {_kl(r['kl_mean'][i])} nats, "
                 f"TV {r['tv_mean'][i]:.4f} ({r['n']} contexts)")
  lo, hi = pc.mars_tau_gain_range()
  verdict = (sign_verdict(cis, "positive") if len(cis) == 2 else
             ("agree in sign" if raises else "differ in sign") + NO_INTERVAL)
  return [f"MARS at theta {theta:g} raises first-token acceptance (exact)",
          f"tau {100 * lo:+.0f}% to {100 * hi:+.0f}% (Table 1)", "; ".join(cells), verdict]


def _prop1_rows(recs: list[dict]) -> list[list[str]]:
  rows = []
  for rule, name in (("spec_cascade:p_base=0.3", "SpecCascade p_base 0.3"),
                     ("typical:eps=0.09", "typical eps 0.09")):
    sd = _one(recs, part="sd", rule=rule, family="draft")
    ea = _one(recs, part="eagle", rule=rule, family="draft", top_k=1)
    t1, t0 = _nearest(sd["ts"], 1.0), _nearest(sd["ts"], 0.0)
    gap = abs(ea["kl_mean"][t0] - ea["limit"])
    rows.append([f"Prop. 1 (a), (b), {name}: KL(P ‖ p_A) from the draft LM (q) to q = p; "
                 "SD's sampled drafts -> 0, top-1 drafts -> E[log Z_A / p(argmax)] > 0",
                 "yes (Prop. 1)",
                 f"SD {_kl(sd['kl_mean'][t1])} -> {sd['kl_mean'][t0]:.1e}; top-1 "
                 f"{_kl(ea['kl_mean'][t1])} -> {ea['kl_mean'][t0]:.4f} (limit {ea['limit']:.4f}) "
                 f"({sd['n']} contexts)",
                 "agree (exact)" if sd["kl_mean"][t0] < 1e-4 and gap < 1e-3 and ea["limit"] > 0
                 else "differ (exact)"])
  soft = _one(recs, part="sd", rule="typical:eps=0.09,gate=soft", family="draft")
  t0 = _nearest(soft["ts"], 0.0)
  rows.append(["soft-gate typical acceptance at q = p", "(Definition 1 is the hard gate)",
               f"accepts tokens outside A: KL(P ‖ p_A) {_kl(soft['kl_mean'][t0])}, TV "
               f"{soft['tv_mean'][t0]:.4f}", "- (outside the paper's claim)"])
  return rows


def _lemma1_rows(recs: list[dict]) -> list[list[str]]:
  rows = []
  for kind, claim in (("eta", "eta always positive"),
                      ("min_p", "min-p gain vanishes as p_base -> 0.9")):
    r = _one(recs, part="truncation", kind=kind)
    d = r["delta_be_paqa"]
    cells = ", ".join(f"{x:+.3f} ({v:g})" for v, x in zip(r["values"], d))
    if "by_window" in r:
      cells, verdict = _lemma1_by_conversation(r, kind)
    elif kind == "eta":
      verdict = ("agree in sign" if min(d) > 0 else "differ") + NO_INTERVAL
    else:
      verdict = ("agree" if abs(d[-1]) < abs(d[0]) else
                 "differ: the gain does not shrink towards p_base 0.9") + NO_INTERVAL
    rows.append([f"Lemma 1 / Fig. 5, {kind.replace('_', '-')}: block-efficiency change of "
                 f"(p_A, q_A), gamma = {r['gamma']}", claim,
                 f"{cells}; BE(p, q) = {r['be_pq']:.3f}", verdict + "; changes of "
                 f"{100 * max(map(abs, d)) / r['be_pq']:.1f}% of BE at most"])
  return rows


def _lemma1_by_conversation(r: dict, kind: str) -> tuple[str, str]:
  """The block-efficiency changes of one truncation record with their intervals over
  conversations, and the verdict read from them: eta, every change above 0; min-p, the
  change at the last p_base below the change at the first (the gain shrinks)."""
  by, g = r["by_window"], r["gamma"]
  base = window_pairs(by["alpha_pq"])
  change = lambda trunc, pq: block_efficiency(trunc, g) - block_efficiency(pq, g)
  ds = [conversation_interval([window_pairs(by["alpha_paqa"], j), base], change)
        for j in range(len(r["values"]))]
  n = ds[0]["conversations"]
  cells = ", ".join(f"{d['value']:+.3f} {ci(d['ci95'], '+.3f')} ({v:g})"
                    for v, d in zip(r["values"], ds)) + f" over {n} conversations"
  if kind == "eta":
    return cells, sign_verdict([d["ci95"] for d in ds], "positive")
  shrink = conversation_interval(
      [window_pairs(by["alpha_paqa"], len(r["values"]) - 1), window_pairs(by["alpha_paqa"], 0),
       base], lambda last, first, pq: change(last, pq) - change(first, pq))
  cells += (f"; last minus first {shrink['value']:+.3f} {ci(shrink['ci95'], '+.3f')}")
  return cells, {"agree in sign": "agree", "differ in sign": "differ: the gain does not "
                 "shrink towards p_base 0.9"}.get(sign_verdict([shrink["ci95"]], "negative"),
                                                  "inconclusive")


def _alignment_row(recs: list[dict], value: float = 0.1) -> list[str]:
  both = _one(recs, part="alignment", kind="eta", truncate_draft=True)
  target_only = _one(recs, part="alignment", kind="eta", truncate_draft=False)
  i = _nearest(both["values"], value)
  series = ", ".join(f"{d[i]:+.3f} ({rho:g})" for rho, d in zip(both["rhos"],
                                                                both["delta_be"]))
  signs = {int(math.copysign(1, d[i])) if d[i] else 0 for d in target_only["delta_be"]}
  sign_text = {frozenset({-1}): "negative throughout", frozenset({1}): "positive throughout"}
  return [f"Fig. 4: the change against draft-target alignment, eta {both['values'][i]:g}, "
          "q_rho = rho p + (1 - rho) q (our axis)", "Fig. 4's axis is not published",
          f"(p_A, q_A), by rho: {series}; truncating the target only, (p_A, q): "
          f"{sign_text.get(frozenset(signs), 'changes sign')}",
          "not comparable (our axis)"]


def propositions_claims(rel: str = PROPOSITIONS) -> str:
  """The claims table of the record (module docstring)."""
  recs = load(rel)
  rows = [_fig1d_row(recs), _mars_row(recs), *_prop1_rows(recs), *_lemma1_rows(recs),
          _alignment_row(recs)]
  return table(["claim", "paper", "SmolLM2 (exact, held-out assistant positions, T = 0.7)",
                "verdict"], rows)


TABLES = {"lossy_propositions_smollm2": propositions_claims}
