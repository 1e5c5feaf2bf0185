"""The claims read from committed notebook outputs (section 0 of ``docs/results.md``):
MARS margins from ``notebooks/02_mars_margins.ipynb`` and the lossy-verification
propositions from ``notebooks/03_lossy_verification.ipynb`` -- the stream outputs of
their full-settings runs (:func:`experiments.results.records.notebook_text`)."""

from __future__ import annotations

import re

from experiments.humaneval import summary as hs
from experiments.results import paper_claims as pc
from experiments.results.markdown import ci as _ci
from experiments.results.markdown import table as _table
from experiments.results.proportions import two_proportions, wilson
from experiments.results.records import find, notebook_text

NB02, NB03 = "notebooks/02_mars_margins.ipynb", "notebooks/03_lossy_verification.ipynb"


def _nb02_rows() -> list[list[str]]:
  t = notebook_text(NB02)
  n = int(find(r"\bn: (\d+)", t, "contexts").group(1))
  neg = float(find(r"frac_negative_top1: ([\d.]+)", t, "negative").group(1))
  z1 = float(find(r"z1 quantiles: \{[^}]*'q50': ([\d.]+)", t, "z1").group(1))
  ci_neg = wilson(round(neg * n), n)
  m = find(r"ours: ([\d.]+)% \((\d+) / (\d+) EAGLE-3 drafts\); overall strict rejection "
            r"([\d.]+)%", t, "Fig. 1d")
  k, kn, overall = int(m.group(2)), int(m.group(3)), float(m.group(4))
  relaxed = float(find(r"r > 0.9 at ([\d.]+)% of positions", t, "relaxed").group(1))
  pk, pn = pc.MARS_FIG1D
  d = two_proportions(k, kn, pk, pn)
  taus = {float(a): float(b) for a, b in re.findall(r"\n\s+([01]\.\d\d)\s+([\d.]+)\s+[\d.]+\s+"
                                                     r"[\d.]+\s+[\d.]+", t)}
  gain = taus[0.9] / taus[1.0] - 1
  return [
      ["top-1 logits that are negative (MARS Fig. 4a/5a)", "0.0% (Qwen3-8B)",
       f"{100 * neg:.1f}% of {n} contexts, 95% interval {_ci(ci_neg, '.4f')} (median z1 "
       f"{z1:.1f})", hs.verdict(ci_neg, 0.0, margin=0.01) + " (margin 1 point)"],
      ["P(strict reject \\| r > 0.9), EAGLE-3 greedy first drafts (MARS Fig. 1d)",
       f"{100 * pk / pn:.1f}% ({pk} / {pn})",
       f"{100 * k / kn:.1f}% ({k} / {kn}; unconditional {overall:.1f}%, r > 0.9 at "
       f"{relaxed:.1f}% of positions); minus the paper {d['diff']:+.3f} {_ci(d['ci95'])}, "
       f"MDE {d['mde80']:.3f} (positions treated as independent: the interval is too narrow "
       f"for 48 conversations)", hs.verdict(d["ci95"], 0.0)],
      ["MARS theta 0.9 raises tau (EAGLE-3 chain K = 7, greedy, 16 prompts x 128 tokens)",
       "+13-37% (Table 1, T = 1)",
       f"{taus[1.0]:.2f} -> {taus[0.9]:.2f} ({100 * gain:+.0f}%); one run, no interval",
       "inconclusive (no interval; the paired HumanEval T = 1 row below has one)"],
  ]


def _nb03_rows() -> list[list[str]]:
  t = notebook_text(NB03)
  kl = {}
  for m in re.finditer(r"(SpecCascade p_base=0.3|typical eps=0.09 \(hard\))\s+SD: KL ([\d.e+-]+)"
                       r" -> ([\d.e+-]+)\s+EAGLE: KL ([\d.]+) -> ([\d.]+) \(limit ([\d.]+)\)", t):
    kl[m.group(1)] = [float(x) for x in m.groups()[1:]]  # the last match: SmolLM2 contexts
  n = int(find(r"(\d+) contexts in [\d.]+ s \| lossless acceptance", t, "contexts").group(1))
  sd_n, sd_v = find(r"SD curve on (\d+) contexts x (\d+) tokens", t, "SD curve").groups()
  sc, ty = kl["SpecCascade p_base=0.3"], kl["typical eps=0.09 (hard)"]
  soft = find(r"typical eps=0.09 \(soft\)\s+[\d.]+\s+(\S+)\s+[\d.]+\s+(\S+)", t, "soft gate")

  def sweep(kind: str) -> tuple[float, list]:
    m = find(kind + r": BE\(p, q\) = ([\d.]+)\n((?:\s+[\d.]+\s+dBE.*\n?)+)", t, kind)
    pts = re.findall(r"([\d.]+)\s+dBE\(p_A,q\) [+-][\d.]+\s+dBE\(p_A,q_A\) ([+-][\d.]+)",
                     m.group(2))
    return float(m.group(1)), [(float(a), float(b)) for a, b in pts]

  be, eta = sweep("eta")
  _, minp = sweep("min_p")
  fmt = lambda pts: ", ".join(f"{b:+.3f} ({a:g})" for a, b in pts)
  d_eta, d_minp = [b for _, b in eta], [b for _, b in minp]
  flips = min(d_eta) < 0 < max(d_eta)
  rising = all(x <= y for x, y in zip(d_minp, d_minp[1:]))
  return [
      ["Prop. 1(a): SD + hard-gate truncation, KL(P_SD ‖ p_A) -> 0 as q -> p", "yes",
       f"{sd_n} SmolLM2 contexts (T = 0.7) on their top {sd_v} tokens, exact: SpecCascade "
       f"p_base 0.3 {sc[0]:.4f} (draft LM) -> {sc[1]:.1e} (q = p); typical eps 0.09 "
       f"{ty[0]:.4f} -> {ty[1]:.1e}",
       "agree (exact; no sampling)"],
      ["Prop. 1(b): EAGLE-style top-1 drafts, KL -> E[log Z_A / p(argmax)] > 0", "yes",
       f"{n} contexts, full vocabulary, EAGLE-3 head {sc[2]:.4f} -> at q = p {sc[3]:.4f} "
       f"(limit {sc[4]:.4f}) for SpecCascade; typical {ty[2]:.4f} -> {ty[3]:.4f} (limit "
       f"{ty[4]:.4f})", "agree (exact)"],
      ["soft-gate typical acceptance", "(Definition 1 is the hard gate)",
       f"accepts tokens outside A: KL(P ‖ p_A) = {soft.group(1)} (EAGLE-3), {soft.group(2)} "
       f"(draft LM)", "- (outside the paper's claim)"],
      ["Lemma 1 / Fig. 5: dBE of (p_A, q_A) at the draft LM, gamma = 5, eta 0.05 ... 0.25",
       "eta always positive", f"{fmt(eta)}; BE(p, q) = {be:.3f}",
       f"inconclusive (changes of at most {max(map(abs, d_eta)):.3f}"
       f"{' that change sign' if flips else ''}; no interval over contexts)"],
      ["the same, min-p p_base 0.1 ... 0.9", "min-p gain vanishes as p_base -> 0.9", fmt(minp),
       f"inconclusive ({'the gain grows with p_base instead' if rising else 'no monotone trend'}"
       f"; no interval over contexts)"],
  ]


def claims_notebooks() -> str:
  """Section 0 of docs/results.md: MARS margins and the propositions, from notebooks 02
  and 03 (full settings, outputs committed)."""
  return _table(["claim", "paper", "SmolLM2 (committed notebook output)", "verdict"],
                _nb02_rows() + _nb03_rows())
