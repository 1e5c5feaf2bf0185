"""The claims from notebooks 02 and 03 (section 0 of ``docs/results.md``): MARS margins
from ``notebooks/02_mars_margins.ipynb`` and the lossy-verification propositions from
``notebooks/03_lossy_verification.ipynb``, read from the JSON records their last cell
writes at the full settings (:data:`NB02`, :data:`NB03`, with their provenance; regenerate
with :data:`COMMAND`), not from the notebooks' printed outputs."""

from __future__ import annotations

from experiments.humaneval import summary as hs
from experiments.results import paper_claims as pc
from experiments.results.markdown import RESULTS
from experiments.results.markdown import ci as _ci
from experiments.results.markdown import table as _table
from experiments.results.proportions import two_proportions, wilson
from experiments.results.records import field

NB02 = f"{RESULTS}/notebooks/02_mars_margins.json"
NB03 = f"{RESULTS}/notebooks/03_lossy_verification.json"
COMMAND = "python notebooks/build.py 02 03 --execute --full"


def _full(rel: str) -> None:
  """Refuse a record of the CI settings (the tables quote the full ones)."""
  if field(rel, "settings", "full", hint=COMMAND) is not True:
    raise ValueError(f"{rel}: settings.full is not true (a CI-settings record); rerun `{COMMAND}`")


def _nb02_rows() -> list[list[str]]:
  _full(NB02)
  m = lambda *keys: field(NB02, "margins", *keys, hint=COMMAND)
  s = lambda key: field(NB02, "settings", key, hint=COMMAND)
  n, neg, z1 = m("n"), m("frac_negative_top1"), m("z1_median")
  ci_neg = wilson(round(neg * n), n)
  k, kn = m("greedy_rejected_relaxed"), m("greedy_num_relaxed")
  overall, relaxed = 100 * m("greedy_reject_rate"), 100 * m("frac_relaxed")
  pk, pn = pc.MARS_FIG1D
  d = two_proportions(k, kn, pk, pn)
  taus = {row["theta"]: row["tau"] for row in field(NB02, "tau_sweep", hint=COMMAND)}
  for theta in (1.0, 0.9):
    if theta not in taus:
      raise ValueError(f"{NB02}: tau_sweep has no theta {theta} (thetas {sorted(taus)})")
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
       f"for {s('n_conversations')} conversations)", hs.verdict(d["ci95"], 0.0)],
      [f"MARS theta 0.9 raises tau (EAGLE-3 chain K = {s('k')}, greedy, {s('tau_prompts')} "
       f"prompts x {s('tau_new_tokens')} tokens)",
       "+13-37% (Table 1, T = 1)",
       f"{taus[1.0]:.2f} -> {taus[0.9]:.2f} ({100 * gain:+.0f}%); one run, no interval",
       "inconclusive (no interval; the paired HumanEval T = 1 row below has one)"],
  ]


def _kl_ends(rule: str) -> list[float]:
  """``[SD KL at the real draft, SD KL at q = p, EAGLE KL at the real draft, EAGLE KL at
  q = p, EAGLE limit]`` of ``rule``'s SmolLM2 curves in notebook 03's record."""
  ts = field(NB03, "t", hint=COMMAND)
  if 1.0 not in ts or 0.0 not in ts:
    raise ValueError(f"{NB03}: t must hold 1 (the real drafter) and 0 (q = p), has {ts}")
  real, exact = ts.index(1.0), ts.index(0.0)
  sd = field(NB03, "kl_curves", rule, "sd", hint=COMMAND)
  eagle = field(NB03, "kl_curves", rule, "eagle", hint=COMMAND)
  return [sd[real], sd[exact], eagle[real], eagle[exact],
          field(NB03, "kl_curves", rule, "eagle_limit", hint=COMMAND)]


def _sweep(kind: str) -> list[tuple[float, float]]:
  """``(truncation value, dBE(p_A, q_A))`` of the ``kind`` sweep in notebook 03's record,
  the change rounded to the 3 decimals the table shows (its verdict reads those)."""
  values = field(NB03, "truncation_sweeps", kind, "values", hint=COMMAND)
  deltas = field(NB03, "truncation_sweeps", kind, "delta_be_paqa", hint=COMMAND)
  if len(values) != len(deltas):
    raise ValueError(f"{NB03}: truncation_sweeps.{kind}: {len(values)} values, "
                     f"{len(deltas)} delta_be_paqa")
  return [(float(a), round(float(b), 3)) for a, b in zip(values, deltas)]


def _nb03_rows() -> list[list[str]]:
  _full(NB03)
  f = lambda *keys: field(NB03, *keys, hint=COMMAND)
  sc, ty = _kl_ends("SpecCascade p_base=0.3"), _kl_ends("typical eps=0.09 (hard)")
  soft_eagle, soft_sd = float(f("soft_gate", "eagle_kl")), float(f("soft_gate", "sd_kl"))
  be = f("truncation_sweeps", "eta", "be_pq")
  eta, minp = _sweep("eta"), _sweep("min_p")
  fmt = lambda pts: ", ".join(f"{b:+.3f} ({a:g})" for a, b in pts)
  d_eta, d_minp = [b for _, b in eta], [b for _, b in minp]
  flips = min(d_eta) < 0 < max(d_eta)
  rising = all(x <= y for x, y in zip(d_minp, d_minp[1:]))
  return [
      ["Prop. 1(a): SD + hard-gate truncation, KL(P_SD ‖ p_A) -> 0 as q -> p", "yes",
       f"{f('sd_contexts')} SmolLM2 contexts (T = {f('settings', 'temperature'):g}) on their "
       f"top {f('sd_tokens')} tokens, exact: SpecCascade p_base 0.3 {sc[0]:.4f} (draft LM) -> "
       f"{sc[1]:.1e} (q = p); typical eps 0.09 {ty[0]:.4f} -> {ty[1]:.1e}",
       "agree (exact; no sampling)"],
      ["Prop. 1(b): EAGLE-style top-1 drafts, KL -> E[log Z_A / p(argmax)] > 0", "yes",
       f"{f('contexts')} contexts, full vocabulary, EAGLE-3 head {sc[2]:.4f} -> at q = p "
       f"{sc[3]:.4f} (limit {sc[4]:.4f}) for SpecCascade; typical {ty[2]:.4f} -> {ty[3]:.4f} "
       f"(limit {ty[4]:.4f})", "agree (exact)"],
      ["soft-gate typical acceptance", "(Definition 1 is the hard gate)",
       f"accepts tokens outside A: KL(P ‖ p_A) = {soft_eagle:.4f} (EAGLE-3), {soft_sd:.4f} "
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
  """Section 0 of docs/results.md: MARS margins and the propositions, from the records
  notebooks 02 and 03 write at their full settings."""
  return _table(["claim", "paper", "SmolLM2 (notebook record)", "verdict"],
                _nb02_rows() + _nb03_rows())
