"""The tables of ``docs/results.md`` and ``benchmarks/RESULTS.md``, each computed from
committed records only (no model; JAX is imported only to bin the SV calibration
records, :mod:`experiments.results.sv_companion_tables`): :data:`TABLES` maps a table's name (the
``<!-- table:NAME -->`` marker in the docs, :mod:`experiments.render_results`) to the
function that writes it.

Records read (paths relative to the repository root):

* ``benchmarks/results/humaneval_{t0,t07,t1}/humaneval.jsonl`` -- one JSON line per
  (method, T, sample, batch of problems), summarized by :mod:`experiments.humaneval.summary`;
* ``benchmarks/results/sv_batch_sweep_smollm2.json`` -- the SV sweep's report;
* ``benchmarks/results/{batch_sweep,tree_shapes}_smollm2.json``,
  ``small_models_drafters.json`` -- ``benchmarks/speculative.py`` rows;
* ``benchmarks/results/{generate_vs_hf,forward_cost}_smollm2.txt`` -- the raw output;
* ``benchmarks/results/layer_stack.json`` -- ``benchmarks/layer_stack.py``'s record;
* ``benchmarks/results/attention_chunk.json`` -- ``benchmarks/attention_chunk.py``'s record;
* ``benchmarks/results/acceptance_smollm2/acceptance.jsonl`` -- ``experiments.acceptance``;
* ``specjax/models/assets/smollm2-135m-instruct/*/training.json`` -- the drafters' runs;
* ``notebooks/0{2,3,4}_*.ipynb`` -- committed cell outputs of the full-settings runs.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re

import numpy as np

from experiments.common.bootstrap import pooled_paired_ratio_gain
from experiments.common.row_stats import paired_speed_gain, round_cost_in_steps
from experiments.humaneval import summary as hs
from experiments.results import paper_claims as pc
from experiments.results.commands import benchmark_rerun, rerun_lines
from experiments.results.families import (Family, Test, VerdictColumn, family_note,
                                           single_verdict)
from experiments.results import (ab_tables, compare_tables, propositions_tables, rule_tables,
                                 speed_profile_tables, sv_companion_tables, sweep_tables)
from experiments.results.markdown import RESULTS, ROOT, width_mde80  # noqa: F401 (re-exported)
from experiments.results.markdown import ci as _ci
from experiments.results.markdown import gain_cell as _gain_cell
from experiments.results.markdown import speedup_cell as _speedup_cell
from experiments.results.markdown import path as _path
from experiments.results.markdown import table as _table
from experiments.results.proportions import two_proportions, wilson
from experiments.sv.information import plugin_bias_bits

HUMANEVAL_DIRS = {"t0": f"{RESULTS}/humaneval_t0", "t07": f"{RESULTS}/humaneval_t07",
                  "t1": f"{RESULTS}/humaneval_t1"}


# ---------------------------------------------------------------- loading records


@functools.lru_cache(maxsize=None)
def load_json(rel: str) -> dict:
  with open(_path(rel)) as f:
    return json.load(f)


@dataclasses.dataclass(frozen=True)
class HumanEvalRun:
  """One committed HumanEval grid: its records and their summary."""

  directory: str
  records: list
  rows: list
  contrasts: list
  max_new_tokens: int

  def row(self, method: str) -> dict:
    return next(r for r in self.rows if r["method"] == method)


@functools.lru_cache(maxsize=None)
def humaneval_run(name: str) -> HumanEvalRun:
  """The grid in :data:`HUMANEVAL_DIRS` ``[name]``, summarized with the token cap read
  from the record keys (``<sha>-<style>-n<max_new_tokens>-seed<seed>-...``)."""
  d = HUMANEVAL_DIRS[name]
  with open(_path(f"{d}/humaneval.jsonl")) as f:
    records = [json.loads(line) for line in f if line.strip()]
  caps = {int(re.search(r"-n(\d+)-seed", r["key"]).group(1)) for r in records}
  if len(caps) != 1:
    raise ValueError(f"{d}: records of several token caps {sorted(caps)}")
  cap = caps.pop()
  rows = hs.summarize(records, max_new_tokens=cap)
  return HumanEvalRun(d, records, rows, hs.gap_contrasts(rows, records), cap)


@functools.lru_cache(maxsize=None)
def notebook_text(rel: str) -> str:
  """Every stream output of a committed notebook, in cell order."""
  nb = load_json(rel)
  return "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                 for o in c.get("outputs", []) if o.get("output_type") == "stream")


def _find(pattern: str, text: str, what: str, index: int = 0) -> re.Match:
  found = list(re.finditer(pattern, text))
  if len(found) <= index:
    raise ValueError(f"{what}: pattern {pattern!r} not in the notebook outputs")
  return found[index]


def _md_table_lines(rel: str) -> str:
  """The markdown table lines (``|``) of a committed raw text output."""
  with open(_path(rel)) as f:
    return "\n".join(line.rstrip() for line in f if line.startswith("|"))


# ---------------------------------------------------------------- small statistics


# ---------------------------------------------------------------- HumanEval


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


# ---------------------------------------------------------------- notebooks (MARS, propositions)

NB02, NB03, NB04 = ("notebooks/02_mars_margins.ipynb", "notebooks/03_lossy_verification.ipynb",
                    "notebooks/04_speculative_verification.ipynb")


def _nb02_rows() -> list[list[str]]:
  t = notebook_text(NB02)
  n = int(_find(r"\bn: (\d+)", t, "contexts").group(1))
  neg = float(_find(r"frac_negative_top1: ([\d.]+)", t, "negative").group(1))
  z1 = float(_find(r"z1 quantiles: \{[^}]*'q50': ([\d.]+)", t, "z1").group(1))
  ci_neg = wilson(round(neg * n), n)
  m = _find(r"ours: ([\d.]+)% \((\d+) / (\d+) EAGLE-3 drafts\); overall strict rejection "
            r"([\d.]+)%", t, "Fig. 1d")
  k, kn, overall = int(m.group(2)), int(m.group(3)), float(m.group(4))
  relaxed = float(_find(r"r > 0.9 at ([\d.]+)% of positions", t, "relaxed").group(1))
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
  n = int(_find(r"(\d+) contexts in [\d.]+ s \| lossless acceptance", t, "contexts").group(1))
  sd_n, sd_v = _find(r"SD curve on (\d+) contexts x (\d+) tokens", t, "SD curve").groups()
  sc, ty = kl["SpecCascade p_base=0.3"], kl["typical eps=0.09 (hard)"]
  soft = _find(r"typical eps=0.09 \(soft\)\s+[\d.]+\s+(\S+)\s+[\d.]+\s+(\S+)", t, "soft gate")

  def sweep(kind: str) -> tuple[float, list]:
    m = _find(kind + r": BE\(p, q\) = ([\d.]+)\n((?:\s+[\d.]+\s+dBE.*\n?)+)", t, kind)
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


# ---------------------------------------------------------------- Speculative Verification

SV_JSON = f"{RESULTS}/sv_batch_sweep_smollm2.json"


def sv_table() -> str:
  """The SV sweep's tables (:func:`experiments.sv.evaluation.markdown` of the committed report)."""
  from experiments.sv.evaluation import markdown
  return markdown(load_json(SV_JSON))


def _info(set_name: str, signals: str) -> dict:
  return next(r for r in load_json(SV_JSON)["information"]
              if r["set"] == set_name and r["signals"] == signals)


def sv_run_table() -> str:
  """The SV sweep's calibration and the latency profile that steered its gamma search
  (a line over gamma per B: the time at gamma = 0 and the slope per verified draft)."""
  rep = load_json(SV_JSON)
  cal, prof = rep["calibration"], rep["profile"]
  per_set = ", ".join(f"{k} {v}" for k, v in cal["records_per_set"].items())
  rows = [["calibration", f"{cal['num_records']} records ({per_set}), accept rate "
           f"{cal['accept_rate']:.3f}"], ["wall time", f"{rep['wall_seconds'] / 60:.1f} min"]]
  for b, lat in zip(prof["batch_sizes"], prof["latency_s"]):
    rows.append([f"latency profile, B = {b}", f"{1e3 * lat[0]:.1f} ms + "
                 f"{1e3 * (lat[-1] - lat[0]) / (len(lat) - 1):.1f} ms per verified draft"])
  return _table(["quantity", "value"], rows)


def sv_information_bias() -> str:
  """Information gains beside the plug-in bias of their bins (:func:`plugin_bias_bits`),
  in bits and as a share of H(X)."""
  rows = []
  for s in ("sharegpt", "humaneval", "all"):
    sa, so = _info(s, "SA"), _info(s, "S")
    cells_sa, cells_s = int(np.prod(sa["num_bins"])), int(np.prod(so["num_bins"]))
    ig_sa, ig_s = sa["H_X"] - sa["H_X_given_SA"], so["H_X"] - so["H_X_given_S"]
    b_sa, b_s = plugin_bias_bits(sa["n"], cells_sa), plugin_bias_bits(so["n"], cells_s)
    pct = lambda bits: f"{bits:.4f} ({100 * bits / sa['H_X']:.1f}%)"
    rows.append([s, str(sa["n"]), f"{cells_s} / {cells_sa}", pct(ig_s), pct(b_s), pct(ig_sa),
                 pct(b_sa), pct(ig_sa - ig_s), pct(b_sa - b_s)])
  return _table(["set", "records", "bins S / (S, A)", "IG(S) bits (of H(X))", "bias, S",
                 "IG(S,A)", "bias, (S, A)", "IG(S,A) - IG(S): the A signal", "bias of A's bins"],
                rows)


def _a_signal(set_name: str) -> tuple[float, float]:
  """(IG(S,A) - IG(S), the plug-in bias of the extra bins A adds), as shares of H(X)."""
  sa, so = _info(set_name, "SA"), _info(set_name, "S")
  gain = (so["H_X_given_S"] - sa["H_X_given_SA"]) / sa["H_X"]
  bias = (plugin_bias_bits(sa["n"], int(np.prod(sa["num_bins"])))
          - plugin_bias_bits(so["n"], int(np.prod(so["num_bins"])))) / sa["H_X"]
  return gain, bias


def _sv_rows(method: str, batches) -> list[dict]:
  return [r for r in load_json(SV_JSON)["rows"] if r["method"] == method and r["batch"] in batches]


def _span(values, fmt: str = ".2f") -> str:
  lo, hi = min(values), max(values)
  return format(lo, fmt) if format(lo, fmt) == format(hi, fmt) else \
      f"{format(lo, fmt)}-{format(hi, fmt)}"


def claims_sv() -> str:
  """Section 4 of docs/results.md, from the SV sweep's report and notebook 04."""
  from experiments.sv.evaluation import PAPER_IG
  paper = {k: 1 - b / a for k, (a, b) in PAPER_IG.items()}
  sh, he = _info("sharegpt", "SA"), _info("humaneval", "SA")
  bias = {r["set"]: plugin_bias_bits(r["n"], int(np.prod(r["num_bins"]))) / r["H_X"]
          for r in (sh, he)}
  a_bias = {s: _a_signal(s)[1] for s in ("sharegpt", "humaneval")}
  a_ratio = [_a_signal(s)[0] / _a_signal(s)[1] for s in ("sharegpt", "humaneval")]
  t4 = notebook_text(NB04)
  nrec = int(_find(r"(\d+) records in", t4, "records").group(1))
  q = _find(r"quantile bins \[(\d+), (\d+)\]:.*IG\(S\)=([\d.]+)\s+IG\(S,A\)=([\d.]+) \(([\d.]+)% of",
            t4, "quantile")
  fx = _find(r"fixed\s+bins \[(\d+), (\d+)\]:.*IG\(S\)=([\d.]+)\s+IG\(S,A\)=([\d.]+) \(([\d.]+)% of",
             t4, "fixed")
  sv = _sv_rows("sv_SA", (4, 8)) + _sv_rows("sv_S", (4, 8))
  sv1 = _sv_rows("sv_SA", (1,)) + _sv_rows("sv_S", (1,))
  k7 = _sv_rows("fixed_7", (1, 4, 8))
  acc = lambda r: (r["tau"] - 1) / r["verified_per_call"]
  sh_rows = {(r["method"], r["batch"]): r for r in load_json(SV_JSON)["rows"]
             if r["set"] == "sharegpt"}
  good_sv = [r["speedup"] for r in _sv_rows("sv_SA", (1, 4, 8)) + _sv_rows("sv_S", (1, 4, 8))]
  good_k1 = [r["speedup"] for r in _sv_rows("fixed_1", (1, 4, 8))]
  rows = [
      ["information gain of (S, A) about acceptance",
       f"chat {100 * paper['chat']:.0f}% of H(X), code {100 * paper['code']:.0f}%",
       f"ShareGPT {100 * sh['ig_frac']:.1f}%, HumanEval {100 * he['ig_frac']:.1f}% "
       f"(plug-in bias of the {int(np.prod(sh['num_bins']))} bins: {100 * bias['sharegpt']:.1f}% "
       f"/ {100 * bias['humaneval']:.1f}%)",
       f"differ, exploratory (no interval for this run, whose calibration records are not committed; the "
       f"committed records of the same companion, section 4's depth table, put every interval "
       f"below the paper; the paper's gain is "
       f"{paper['chat'] / sh['ig_frac']:.1f}x ours on chat, {paper['code'] / he['ig_frac']:.1f}x "
       f"on code, and the plug-in estimate errs upwards, away from the paper)"],
      ["A carries most of it; S alone 4-13%", "yes",
       f"S alone {100 * sh['ig_S_frac']:.1f}% / {100 * he['ig_S_frac']:.1f}%; the A signal adds "
       f"{100 * (sh['ig_frac'] - sh['ig_S_frac']):.1f}% / {100 * (he['ig_frac'] - he['ig_S_frac']):.1f}%"
       f" at a plug-in bias of its extra bins of ~{100 * a_bias['sharegpt']:.1f}% / "
       f"~{100 * a_bias['humaneval']:.1f}% (table in benchmarks/RESULTS.md); notebook 04 "
       f"({nrec} records): quantile bins [{q.group(1)}, {q.group(2)}] IG(S) = IG(S,A) = "
       f"{q.group(5)}% of H(X), fixed bins [{fx.group(1)}, {fx.group(2)}] IG(S,A) "
       f"{fx.group(5)}%", f"inconclusive (the A gain is {_span(a_ratio, '.1f')}x the bias of its "
       f"bins in one binning and absent in another; no interval)"],
      ["SV verifies fewer drafts than its K", "SD -> SV: net -18% / -45% FLOPs",
       f"processed tokens per emitted token: SV {_span([r['processed_per_emitted'] for r in sv], '.1f')}"
       f" at B = 4 / 8 and {_span([r['processed_per_emitted'] for r in sv1], '.1f')} at B = 1, "
       f"fixed K = 7 {_span([r['processed_per_emitted'] for r in k7], '.1f')}",
       "no verdict: true by construction (SV verifies at most K), counts of one run, "
       "no interval"],
      ["acceptance among verified drafts rises", "e.g. 0.56 -> 0.62",
       f"(tau - 1) / verified per call, ShareGPT: fixed K = 7 "
       f"{acc(sh_rows[('fixed_7', 4)]):.2f} -> SV {acc(sh_rows[('sv_SA', 4)]):.2f} (B = 4) / "
       f"{acc(sh_rows[('sv_SA', 1)]):.2f} (B = 1)", "inconclusive (one run of 8 prompts; no "
       "interval)"],
      ["goodput: slightly slower than SD at batch 1, up to 1.9x at batch 32-80", "yes",
       f"SV {_span(good_sv)}x target-only at B = 1 / 4 / 8, fixed K = 1 {_span(good_k1)}x",
       "no verdict: one timed run per cell (no interval), and batches above 8 not run"],
  ]
  return _table(["claim", "paper", "SmolLM2 (`benchmarks/results/sv_batch_sweep_smollm2.json`, "
                 "notebook 04)", "verdict"], rows)


# ---------------------------------------------------------------- speed (benchmarks/speculative.py)


def _spec_rows(rel: str) -> list[dict]:
  return load_json(rel)["rows"]


def batch_sweep_table() -> str:
  rows = [[str(r["batch"]), f"{r['tau']:.2f}", f"{r['tokens_per_s_target_only']:.1f}",
           f"{r['tokens_per_s_speculative']:.1f}", f"{r['speedup']:.2f}",
           f"{r['generate_step_ms']:.1f}",
           f"{r['iteration_ms']:.1f} ({r['draft_ms']:.1f} + {r['verify_ms']:.1f})",
           f"{r['verify_ms'] / r['t_target_1_ms']:.2f}", f"{r['draft_ms'] / r['t_target_1_ms']:.2f}",
           f"{r['iteration_ms'] / r['generate_step_ms']:.2f}",
           "yes" if r["greedy_identical"] else "no"]
          for r in _spec_rows(f"{RESULTS}/batch_sweep_smollm2.json")]
  return _table(["batch", "tau", "target-only tok/s", "speculative tok/s", "speedup",
                 "generate step ms", "iteration ms (draft + verify)", "verify / 1-token forward",
                 "draft / 1-token forward", "break-even tau = iteration / step",
                 "greedy identical"], rows)


def _nodes(r: dict) -> str:
  parts = r["drafter"].split(":")
  return parts[1] if parts[0].endswith("_tree") and len(parts) > 1 else str(r["k"])


def tree_shapes_table() -> str:
  rows = [[r["drafter"], _nodes(r), f"{r['tau']:.2f}", f"{r['speedup']:.2f}",
           f"{r['iteration_ms']:.1f} ({r['draft_ms']:.1f} + {r['verify_ms']:.1f})",
           f"{r['verify_ms'] / r['generate_step_ms']:.2f}",
           f"{r['iteration_ms'] / r['generate_step_ms']:.2f}"]
          for r in _spec_rows(f"{RESULTS}/tree_shapes_smollm2.json")]
  return _table(["drafter", "nodes verified", "tau", "speedup", "iteration ms (draft + verify)",
                 "verify / generate step", "break-even tau"], rows)


def small_models_table() -> str:
  rows = [[r["drafter"], f"{r['tau']:.2f}", f"{r['speedup']:.2f}",
           f"{r['iteration_ms']:.2f} ({r['draft_ms']:.2f} + {r['verify_ms']:.2f})",
           f"{r['generate_step_ms']:.2f}", f"{r['iteration_ms'] / r['generate_step_ms']:.1f}"]
          for r in _spec_rows(f"{RESULTS}/small_models_drafters.json")]
  return _table(["drafter", "tau", "speedup", "iteration ms (draft + verify)",
                 "generate step ms", "break-even tau"], rows)


def layer_stack_table() -> str:
  """Rolled vs unrolled layers (``benchmarks/layer_stack.py``): first-call (compile)
  and run seconds per model and workload, and the unrolled / rolled ratios."""
  rec = load_json(f"{RESULTS}/layer_stack.json")
  rows = []
  for r in rec["rows"]:
    ro, un = r["modes"]["rolled"], r["modes"]["unrolled"]
    rows.append([f"{r['model']} ({r['layers']} layers)", r["workload"],
                 f"{ro['first_call_cpu_s']:.1f} / {un['first_call_cpu_s']:.1f}",
                 f"{un['first_call_cpu_s'] / ro['first_call_cpu_s']:.2f}x",
                 f"{1e3 * ro['run_s']:.0f} / {1e3 * un['run_s']:.0f}",
                 f"{un['run_s'] / ro['run_s']:.2f}x",
                 "yes" if r["same_tokens"] else "NO"])
  return _table(["model", "workload", "first call CPU s (rolled / unrolled)",
                 "unrolled / rolled", "run ms (rolled / unrolled)", "unrolled / rolled",
                 "same tokens"], rows)


def attention_chunk_table() -> str:
  """Decode-step cost against cache slots (``benchmarks/attention_chunk.py``): whole-cache
  attention against chunked attention, per batch size."""
  rec = load_json(f"{RESULTS}/attention_chunk.json")
  rows = []
  for r in rec["rows"]:
    full, chunked = r["ms_per_step"]["whole cache"], r["ms_per_step"]["chunks of 256"]
    rows.append([str(r["batch"]), f"{r['cache_slots']:,}", f"{full:.1f}", f"{chunked:.1f}",
                 f"{full / chunked:.2f}x", "yes" if r["same_tokens"] else "NO"])
  return _table(["batch", "cache slots", "ms per step, whole cache",
                 "ms per step, chunks of 256", "whole / chunked", "same tokens"], rows)


MAIN_JOB = f"{RESULTS}/benchmark_smollm2/benchmark.jsonl"
SPEED_RECORD = f"{RESULTS}/speed_smollm2/benchmark.jsonl"
# The same command rerun with the decode-phase speedup (prefill timed apart).
SPEED_RECORD_DECODE = f"{RESULTS}/speed_smollm2_decode/benchmark.jsonl"
# the EAGLE-3 drafters again after the head was continued on on-policy text
SPEED_RECORD_ONPOLICY_HEAD = f"{RESULTS}/speed_smollm2_onpolicy_head/benchmark.jsonl"


def _row_key(r: dict) -> tuple:
  c = r["config"]
  return (c["drafter"], c["method"], c["temperature"])


@functools.lru_cache(maxsize=None)
def speed_families(rel: str) -> tuple:
  """The two families of a timed ``experiments/benchmark.py`` record: every
  speculative row's speedup against 1, and every lossy row's tokens/s against
  lossless on the same drafter and T (:mod:`experiments.results.families`)."""
  recs = [r for r in _jsonl(rel) if r["config"]["kind"] == "spec"]
  lossless = {(r["config"]["drafter"], r["config"]["temperature"]): r["result"] for r in recs
              if r["config"]["method"] == "lossless"}
  speed = [Test(_row_key(r), r["result"]["speedup_pooled"]["speedup"],
                tuple(r["result"]["speedup_pooled"]["ci95"]), 1.0,
                r["result"]["speedup_pooled"]["mde80"]) for r in recs]
  gains = []
  for r in recs:
    ref = lossless.get((r["config"]["drafter"], r["config"]["temperature"]))
    if ref is not None and r["config"]["method"] != "lossless":
      g = paired_speed_gain(r["result"], ref)
      gains.append(Test(_row_key(r), g["diff"], tuple(g["ci95"]), 0.0, g["mde80"]))
  return (Family("speedup vs 1", "every speculative row's speedup over target-only, both "
                 "temperatures", tuple(speed), up="faster", down="slower"),
          Family("vs lossless", "every lossy row's tokens/s against lossless on the same "
                 "drafter and T", tuple(gains)))


def benchmark_table(rel: str, verdicts: bool = True) -> str:
  """``experiments/benchmark.py``'s rows from the record ``rel``: tau with its interval
  over prompts, tokens/s, the target-only tokens/s the row's speedup divides by (the
  machine's drift between rows shows there), speedup over target-only (with its
  interval over prompts when the record has per-prompt timings; one repeat of the old
  records: none), with per-prompt timings also a lossy row's tokens/s against lossless
  on the same drafter and each round's cost in target decode steps (the break-even
  tau: speedup = tau / cost), agreement with target greedy at T = 0, and each row's
  wall time. ``verdicts=False``: intervals and MDEs without verdicts (a record with
  too few prompts to decide anything, e.g. the main job's)."""
  recs = _jsonl(rel)
  timed = all("speedup_pooled" in r["result"] for r in recs if r["config"]["kind"] == "spec")
  families = speed_families(rel) if timed and verdicts else None
  repeats = sorted({len(r["result"].get("speedup_per_repeat", [])) for r in recs
                    if r["config"]["kind"] == "spec"})
  lossless = {(r["config"]["drafter"], r["config"]["temperature"]): r["result"] for r in recs
              if r["config"]["kind"] == "spec" and r["config"]["method"] == "lossless"}
  decode = all("speedup_decode" in r["result"] for r in recs if r["config"]["kind"] == "spec")
  rows = []
  for r in recs:
    cfg, res = r["config"], r["result"]
    spec = cfg["kind"] == "spec"
    tau = (f"{res['tau']:.2f} {_ci(res['tau_ci'], '.2f')}" if spec and res.get("tau_ci")
           else f"{res['tau']:.2f}" if spec else "-")
    agree = f"{res['agree_exact']:.2f}" if cfg["temperature"] == 0 else "-"
    target_tps = res.get("target_tokens_per_s", res["tokens_per_s"] if not spec else None)
    row = [cfg["drafter"], cfg["method"], f"{cfg['temperature']:g}", tau,
           f"{res['tokens_per_s']:.1f}", "-" if target_tps is None else f"{target_tps:.1f}",
           _speedup_cell(res, verdicts and not families) if spec else "1"]
    if spec and families:
      row[-1] += f": {families[0].verdict(_row_key(r))}"
    if decode:  # prefill and first token taken off both sides (no verdict: not a family)
      dp = res.get("speedup_decode_pooled")
      row.append("1" if not spec else f"{dp['speedup']:.2f} {_ci(dp['ci95'], '.2f')}" if dp
                 else f"{res['speedup_decode']:.2f}")
    if timed:  # a lossy rule's tokens/s against lossless on the same drafter, prompts, keys
      ref = lossless.get((cfg["drafter"], cfg["temperature"]))
      row.append("-" if not spec or ref is None or cfg["method"] == "lossless"
                 else _gain_cell(paired_speed_gain(res, ref), False)
                 + (f": {families[1].verdict(_row_key(r))}" if families else ""))
      row.append(f"{round_cost_in_steps(res):.2f}" if spec else "-")
    rows.append(row + [agree, f"{res['wall_s']:.0f}"])
  prov = recs[0]["provenance"]
  end = recs[-1]["provenance"]
  cmd = benchmark_rerun(recs)
  command = (f"`{cmd.rerun}` (recorded as `{cmd.recorded}`; {cmd.why})" if cmd.pinned
             else f"`{cmd.recorded}`")
  note = (f"\n\nRecord `{rel}`: {command} at commit "
          f"`{(prov['git_commit'] or '?')[:10]}`, {prov['cpus']} CPUs, load "
          f"{prov['load_average'][0]:.2f} at the start and "
          f"{end['load_average_end'][0]:.2f} at the end (1-minute averages); rows' wall "
          f"times sum to {sum(x['result']['wall_s'] for x in recs):.0f} s.")
  verdict = ": verdict vs 1" if verdicts else ""
  head = (f"speedup [95% CI over prompts], MDE (80% power){verdict}" if timed else
          f"speedup ({'one repeat' if repeats == [1] else 'median of repeats'})")
  vs = ([f"tokens/s vs lossless on the same drafter - 1 [95% CI, paired], MDE (80% power)"
         f"{': verdict' if verdicts else ''}",
         "round cost in target decode steps (= break-even tau)"] if timed else [])
  if not verdicts:
    note += (f" {recs[0]['result'].get('num_rows', '?')} prompts: intervals and MDEs only, "
             "no verdicts (too few prompts to decide anything).")
  if families:
    note += "\n\n" + family_note(*families)
  dec = ["decode-phase speedup [95% CI over prompts]"] if decode else []
  return _table(["drafter", "rule", "T", "tau [95% CI over prompts]", "tokens/s",
                 "target-only tokens/s beside it", head, *dec, *vs,
                 "agrees with target greedy", "row wall s"], rows) + note


def main_job_table() -> str:
  """README command 1's rows (``experiments/benchmark.py``, defaults), and the whole
  command's wall time in a fresh clone when the record beside them has it
  (``benchmarks/fresh_clone_main_job.sh``)."""
  out = benchmark_table(MAIN_JOB, verdicts=False)
  fresh = f"{os.path.dirname(MAIN_JOB)}/fresh_clone.json"
  if os.path.exists(_path(fresh)):
    f = load_json(fresh)
    by_script = f.get("written_by") == "benchmarks/fresh_clone_main_job.sh"
    how = ("" if by_script else "; written by hand, not by the script, so exploratory: "
           + f.get("note", "the record does not say how"))
    out += (f"\n\nREADME command 1 in a fresh clone, venv and caches (`{fresh}`, "
            f"`benchmarks/fresh_clone_main_job.sh`, commit `{f['git_commit'][:10]}`): install "
            f"{f['install_s']} s, main job {f['job_s']} s, **{f['total_s']} s in all** "
            f"({f['total_s'] / 60:.1f} minutes; {f['cpus']} CPUs, load "
            f"{f['load_average'][0]:.2f} at the start{how}).")
  return out


def claims_speed() -> str:
  """Section 5 of docs/results.md: the speed records that are committed."""
  small = _spec_rows(f"{RESULTS}/small_models_drafters.json")
  batch = _spec_rows(f"{RESULTS}/batch_sweep_smollm2.json")
  trees = _spec_rows(f"{RESULTS}/tree_shapes_smollm2.json")
  b1 = next(r for r in batch if r["batch"] == 1)
  rows = [
      ["small models, every drafter, batch 1, T = 0", f"`{RESULTS}/small_models_drafters.json`",
       f"speedup {_span([r['speedup'] for r in small])}x at tau "
       f"{_span([r['tau'] for r in small])}; break-even tau "
       f"{_span([r['iteration_ms'] / r['generate_step_ms'] for r in small], '.1f')}"],
      ["SmolLM2, EAGLE-3 chain K = 2, T = 0, batch 1 ... 16", f"`{RESULTS}/batch_sweep_smollm2.json`",
       f"speedup {b1['speedup']:.2f}x at batch 1 (tau {b1['tau']:.2f}, break-even "
       f"{b1['iteration_ms'] / b1['generate_step_ms']:.2f}), "
       f"{_span([r['speedup'] for r in batch if r['batch'] > 1])}x at batch 2-16"],
      ["SmolLM2, EAGLE-3 chain K = 4 and four tree shapes, one prompt, batch 1",
       f"`{RESULTS}/tree_shapes_smollm2.json`",
       "; ".join(f"{r['drafter']} {r['speedup']:.2f}x (tau {r['tau']:.2f})" for r in trees)],
  ]
  if os.path.exists(_path(SPEED_RECORD)):
    rows += _speed_record_rows(SPEED_RECORD, "every drafter")
  if os.path.exists(_path(SPEED_RECORD_ONPOLICY_HEAD)):
    rows += _speed_record_rows(SPEED_RECORD_ONPOLICY_HEAD,
                               "EAGLE-3 head continued on on-policy text")
  return _table(["measurement", "record", "result (interval over prompts and MDE where the "
                 "record has per-prompt timings, the verdict corrected over the record's "
                 f"family '{speed_families(SPEED_RECORD)[0].name}' as in its own table; "
                 "else one run, no interval)"], rows)


def _speed_record_rows(rel: str, what: str) -> list[list[str]]:
  """Per temperature, every lossless drafter's speedup in record ``rel`` with its
  interval over prompts."""
  recs = [r for r in _jsonl(rel)
          if r["config"]["kind"] == "spec" and r["config"]["method"] == "lossless"]
  n = recs[0]["result"]["speedup_pooled"]["batches"]
  rows = []
  for t in sorted({r["config"]["temperature"] for r in recs}):
    family = speed_families(rel)[0]
    cells = [f"{r['config']['drafter']} {_speedup_cell(r['result'], False)}: "
             f"{family.verdict(_row_key(r))} (tau {r['result']['tau']:.2f})"
             for r in recs if r["config"]["temperature"] == t]
    rows.append([f"SmolLM2, {what}, lossless, {n} prompts, main-job settings at 128 new tokens, "
                 f"T = {t:g}", f"`{rel}`", "; ".join(cells)])
  return rows


# ---------------------------------------------------------------- drafter training data

DRAFTER_DATA = f"{RESULTS}/drafter_data"
DATA_ARMS = ("sharegpt", "onpolicy", "mix")


def _jsonl(rel: str) -> list[dict]:
  with open(_path(rel)) as f:
    return [json.loads(line) for line in f if line.strip()]


def drafter_data_training_table() -> str:
  """The three arms of the training-data comparison (experiments/drafter_data.py):
  what each trained on and how long, from ``training.jsonl``."""
  rows = []
  for r in _jsonl(f"{DRAFTER_DATA}/training.jsonl"):
    res, data = r["result"], r["result"]["data"]
    parts = data.get("mixture", [data])
    rows.append([r["config"]["arm"], " + ".join(os.path.basename(p["store"]) for p in parts),
                 f"{data['target_tokens']:,}", str(data["num_windows"]), str(res["steps"]),
                 f"{res['target_positions_seen']:,}", f"{res['seconds_per_step']:.1f}"])
  return _table(["arm", "store(s)", "target tokens", "windows", "steps",
                 "target positions seen", "s/step (loaded machine)"], rows)


def drafter_data_heldout_table() -> str:
  """Held-out top-1 agreement per draft position of each arm on the held-out windows
  of both stores, with 95% bootstrap intervals over held-out batches."""
  recs = _jsonl(f"{DRAFTER_DATA}/heldout.jsonl")
  positions = sorted(int(k[len("eval_acc"):]) for k in recs[0]["result"]
                     if k.startswith("eval_acc") and not k.endswith("_ci"))
  rows = []
  for r in sorted(recs, key=lambda r: (r["config"]["heldout"],
                                       DATA_ARMS.index(r["config"]["arm"]))):
    res = r["result"]
    cells = [f"{res[f'eval_acc{i}']:.3f} {_ci(res[f'eval_acc{i}_ci'], '.3f')}"
             for i in positions]
    rows.append([r["config"]["heldout"], r["config"]["arm"], *cells,
                 f"{res['target_positions']:,}"])
  return _table(["held-out text", "trained on", *[f"agreement at position {i} [95% CI]"
                                                   for i in positions], "positions"], rows)


# A head measured after a continued head was shipped is compared against the head
# shipped when it was measured (``continued35`` against ``continued23``, ``continued44``
# against ``continued35``); every other extra head against the first shipped head,
# measured as ``reference``.
CONTINUED_BASELINES = {"continued35": "continued23", "continued44": "continued35"}


POOLED_NOTE = ("A **pooled** row is one test per head (the geometric mean of the cells' "
               "paired ratios), the test a replacement decision reads: it is outside the "
               "per-cell family and is not corrected.")


def _continued_rows(cell: dict, heads: list, baseline_of, column: VerdictColumn) -> list:
  """Rows of both continued-head tables: per head, one row per cell it shares with its
  baseline (``baseline_of(head)``, a head name in ``cell``; its verdict corrected over
  ``column``) and one pooled row (one pre-registered test, :data:`POOLED_NOTE`)."""
  from experiments.compare.acceptance import paired_tau_gain
  rows = []
  for head in heads:
    base_head = baseline_of(head)
    groups: dict = {}
    for kind, pset, t in sorted({k[1:] for k in cell if k[0] == head},
                                key=lambda k: (k[0], k[2], k[1])):
      ref = cell.get((base_head, kind, pset, t))
      if ref is None:
        continue
      new = cell[(head, kind, pset, t)]
      groups.setdefault(pset, []).append((new["per_prompt"], ref["per_prompt"]))
      rows.append([head, kind.replace("eagle_", ""), pset, f"{t:g}",
                   f"{ref['tau']:.2f} {_ci(ref['tau_ci'], '.2f')}",
                   f"{new['tau']:.2f} {_ci(new['tau_ci'], '.2f')}",
                   column.cell((head, kind, pset, t), paired_tau_gain(new, ref))])
    if groups:
      pooled = pooled_paired_ratio_gain(list(groups.values()))
      rows.append([head, "**pooled**", " + ".join(sorted(groups)), "all",
                   f"{pooled['cells']} cells", "geometric mean of the cells' ratios",
                   f"**{_gain_cell(pooled, False)}: {single_verdict(pooled)}**"])
  return rows


def _acceptance_cells(rel: str) -> dict:
  """``{(head, kind, prompt set, T): result}`` of a drafter_data acceptance record."""
  return {(r["config"]["head"], r["config"]["kind"], r["config"]["prompt_set"],
           r["config"]["temperature"]): r["result"] for r in _jsonl(rel)}


def drafter_data_continued_table(rel: str = f"{DRAFTER_DATA}/acceptance.jsonl",
                                 baselines: dict | None = None) -> str:
  """Heads measured beside the arms (``--extra_heads``, e.g. the shipped head
  continued on on-policy text) against the first shipped head (``reference``), paired
  over prompts; heads in ``baselines`` (default :data:`CONTINUED_BASELINES`) are in
  :func:`drafter_data_continued_shipped_table` instead."""
  baselines = CONTINUED_BASELINES if baselines is None else baselines
  cell = _acceptance_cells(rel)
  extra = sorted({k[0] for k in cell} - set(DATA_ARMS) - {"reference"} - set(baselines))
  column = VerdictColumn("cells vs first shipped head", "every cell of every head in this "
                         "table against the first shipped head")
  rows = _continued_rows(cell, extra, lambda head: "reference", column)
  return _table(["head", "drafter", "prompts", "T", "tau, first shipped head [95% CI]",
                 "tau, this head [95% CI]", "this / first - 1 [95% CI, paired], MDE "
                 "(80% power): verdict"], column.fill(rows)) + (
                     f"\n\n{family_note(column.family())} {POOLED_NOTE}")


def drafter_data_continued_shipped_table(rel: str = f"{DRAFTER_DATA}/acceptance.jsonl",
                                         baselines: dict | None = None) -> str:
  """Heads measured after a continued head was shipped (:data:`CONTINUED_BASELINES`: head
  -> the head shipped when it was measured) against that head, paired over prompts --
  the comparison docs/results.md §7's replacement rule reads."""
  baselines = CONTINUED_BASELINES if baselines is None else baselines
  cell = _acceptance_cells(rel)
  heads = sorted(h for h in baselines if any(k[0] == h for k in cell))
  column = VerdictColumn("cells vs shipped head", "every cell of every head in this table "
                         "against the head shipped when it was measured")
  rows = _continued_rows(cell, heads, baselines.__getitem__, column)
  return _table(["head", "drafter", "prompts", "T", "tau, shipped head [95% CI]",
                 "tau, this head [95% CI]", "this / shipped - 1 [95% CI, paired], MDE "
                 "(80% power): verdict"], column.fill(rows)) + (
                     f"\n\n{family_note(column.family())} {POOLED_NOTE}")


def drafter_data_tau_table() -> str:
  """tau of each arm's head (lossless, EAGLE-3 chain and dynamic tree), and the
  paired gain of the on-policy and mixed arms over the ShareGPT-text arm."""
  from experiments.compare.acceptance import paired_tau_gain
  recs = _jsonl(f"{DRAFTER_DATA}/acceptance.jsonl")
  cell = {(r["config"]["head"], r["config"]["kind"], r["config"]["prompt_set"],
           r["config"]["temperature"]): r["result"] for r in recs}
  columns = {arm: VerdictColumn(f"{arm} vs ShareGPT", f"the {arm} arm's head against the "
                                "ShareGPT-text arm's, every drafter, prompt set and T")
             for arm in ("onpolicy", "mix")}
  rows = []
  for kind, pset, t in sorted({k[1:] for k in cell}, key=lambda k: (k[0], k[2], k[1])):
    base = cell.get(("sharegpt", kind, pset, t))
    if base is None:
      continue
    row = [kind.replace("eagle_", ""), pset, f"{t:g}",
           f"{base['tau']:.2f} {_ci(base['tau_ci'], '.2f')}"]
    for arm in ("onpolicy", "mix"):
      other = cell.get((arm, kind, pset, t))
      if other is None:
        row += ["-", "-"]
        continue
      row += [f"{other['tau']:.2f}",
              columns[arm].cell((kind, pset, t), paired_tau_gain(other, base))]
    ref = cell.get(("reference", kind, pset, t))
    row.append(f"{ref['tau']:.2f}" if ref else "-")
    rows.append(row)
  return _table(["drafter", "prompts", "T", "tau, ShareGPT text [95% CI]", "tau, on-policy",
                 "on-policy / ShareGPT - 1 [95% CI, paired], MDE (80% power): verdict",
                 "tau, mix", "mix / ShareGPT - 1 [95% CI, paired], MDE: verdict",
                 "tau, first shipped head"], columns["mix"].fill(columns["onpolicy"].fill(rows))
                ) + "\n\n" + family_note(*(c.family() for c in columns.values()))


# ---------------------------------------------------------------- acceptance of every drafter

ACCEPTANCE = f"{RESULTS}/acceptance_smollm2/acceptance.jsonl"
ACCEPTANCE_REFERENCE = "eagle3_chain"  # the shipped EAGLE-3 head's chain, same prompts and keys
# Row order within a (prompt set, T) group: the model-free drafters, the draft LM, the tree,
# then the reference.
ACCEPTANCE_ORDER = ("prompt_lookup_chain", "suffix_tree", "draft_lm_chain", "eagle3_tree",
                    ACCEPTANCE_REFERENCE)


def acceptance_table(rel: str = ACCEPTANCE) -> str:
  """Every drafter's acceptance (experiments.acceptance, lossless, no timing) per prompt
  set and temperature: tau, acceptance at the first three draft positions, and the
  paired gain over the shipped EAGLE-3 chain on the same prompts and keys (interval,
  MDE and :func:`~experiments.results.markdown.gain_cell`'s reading)."""
  from experiments.compare.acceptance import paired_tau_gain
  recs = _jsonl(rel)
  cell = {(r["config"]["drafter"], r["config"]["prompt_set"], r["config"]["temperature"]):
          r["result"] for r in recs}
  rank = lambda d: ACCEPTANCE_ORDER.index(d) if d in ACCEPTANCE_ORDER else -1
  column = VerdictColumn(f"vs {ACCEPTANCE_REFERENCE}", "every other drafter, prompt set and T "
                         f"against {ACCEPTANCE_REFERENCE} on the same prompts and keys")
  rows = []
  for (d, pset, t) in sorted(cell, key=lambda k: (k[1], k[2], rank(k[0]), k[0])):
    res = cell[d, pset, t]
    acc = " / ".join(f"{a:.2f}" for a in res["accept_rate_per_position"][:3])
    ref = cell.get((ACCEPTANCE_REFERENCE, pset, t))
    gain = ("-" if d == ACCEPTANCE_REFERENCE or ref is None
            else column.cell((d, pset, t), paired_tau_gain(res, ref)))
    runs = f"{res['num_prompts']} x {res.get('seeds', 1)}"
    rows.append([d, pset, f"{t:g}", f"{res['tau']:.2f} {_ci(res['tau_ci'], '.2f')}", acc,
                 runs, gain])
  return _table(["drafter", "prompts", "T", "tau [95% CI over prompts]",
                 "acceptance at draft positions 1 / 2 / 3", "prompts x runs",
                 f"vs {ACCEPTANCE_REFERENCE}: tau ratio - 1 [95% CI, paired], MDE (80% power): "
                 "verdict"], column.fill(rows)) + "\n\n" + family_note(column.family()) + (
                     "\n\n" + rerun_lines(recs, rel))


# The shipped draft LM continued on the target's own text, measured with the settings of
# the shipped draft LM's cells in ACCEPTANCE (same prompts and keys).
DRAFT_CONTINUED = f"{RESULTS}/draft_continued_smollm2/acceptance.jsonl"


def _settings(key: str) -> str:
  """An acceptance key without its model fields (``drafter|set|T|model|draft|eagle|...``):
  two cells with equal settings ran the same prompts, keys and lengths."""
  parts = key.split("|")
  return "|".join(parts[:4] + parts[6:])


def candidate_table(candidate_rel: str = DRAFT_CONTINUED, shipped_rel: str = ACCEPTANCE,
                    drafter: str = "draft_lm_chain") -> str:
  """A candidate drafter's acceptance cells (``experiments.acceptance`` with another
  ``--draft`` / ``--eagle``) against the shipped drafter's cells of the same settings,
  paired over prompts: per cell, then pooled over the cells
  (:func:`~experiments.common.bootstrap.pooled_paired_ratio_gain`, each prompt set
  resampled once for its cells). Raises when a candidate cell has no shipped cell of the
  same settings."""
  from experiments.compare.acceptance import paired_tau_gain
  shipped = {_settings(r["key"]): r["result"] for r in _jsonl(shipped_rel)
             if r["config"]["drafter"] == drafter}
  rows, groups = [], {}
  column = VerdictColumn("candidate cells", "every cell of the candidate against the shipped "
                         "drafter's cell of the same settings")
  recs = sorted((r for r in _jsonl(candidate_rel) if r["config"]["drafter"] == drafter),
                key=lambda r: (r["config"]["prompt_set"], r["config"]["temperature"]))
  for r in recs:
    ref = shipped.get(_settings(r["key"]))
    if ref is None:
      raise ValueError(f"{candidate_rel}: cell {r['key']!r} has no cell of the same settings "
                       f"in {shipped_rel}")
    new, c = r["result"], r["config"]
    groups.setdefault(c["prompt_set"], []).append((new["per_prompt"], ref["per_prompt"]))
    rows.append([c["prompt_set"], f"{c['temperature']:g}",
                 f"{new['num_prompts']} x {new.get('seeds', 1)}",
                 f"{ref['tau']:.2f} {_ci(ref['tau_ci'], '.2f')}",
                 f"{new['tau']:.2f} {_ci(new['tau_ci'], '.2f')}",
                 column.cell((c["prompt_set"], c["temperature"]), paired_tau_gain(new, ref))])
  if groups:
    pooled = pooled_paired_ratio_gain(list(groups.values()))
    rows.append(["**pooled**: " + " + ".join(sorted(groups)), "all", f"{pooled['cells']} cells",
                 "", "geometric mean of the cells' ratios",
                 f"**{_gain_cell(pooled, False)}: {single_verdict(pooled)}**"])
  return _table(["prompts", "T", "prompts x runs", "tau, shipped [95% CI]",
                 "tau, candidate [95% CI]", "candidate / shipped - 1 [95% CI, paired], MDE "
                 "(80% power): verdict"], column.fill(rows)) + (
                     f"\n\n{family_note(column.family())} {POOLED_NOTE}")


# ---------------------------------------------------------------- drafters, raw text outputs


def drafters_table() -> str:
  """The shipped SmolLM2 drafters, from their ``training.json``."""
  rows = []
  base = "specjax/models/assets/smollm2-135m-instruct"
  for kind, label in (("eagle3", "EAGLE-3 head"), ("draft", "draft LM")):
    t = load_json(f"{base}/{kind}/training.json")
    if kind == "eagle3":
      cfg = t["head_config"]
      params = f"{t['head_params'] / 1e6:.2f}M"
      extra = (f"draft vocabulary {cfg['draft_vocab_size']:,} "
               f"({100 * t['draft_vocab_coverage'][str(cfg['draft_vocab_size'])]:.1f}% argmax "
               f"coverage of the last stage's store), TTT {t['config']['train']['ttt_steps']}")
    else:
      cfg = t["draft_config"]
      emb = cfg["vocab_size"] * cfg["hidden_size"]
      params = f"{(t['draft_params'] - emb) / 1e6:.2f}M (+ the target's {emb / 1e6:.1f}M embedding)"
      first = [*t.get("lineage", []), t][0]  # the stage that initialised it
      extra = (f"{cfg['num_hidden_layers']} decoder layer, init from target layers "
               f"{first['init_layers']}")
    stages = [*t.get("lineage", []), t]  # oldest first (experiments/ship_drafter.py)
    rows.append([f"{label}: {extra}", params,
                 ", then ".join(f"{s['steps']:,} steps, {s['tokens_seen'] / 1e6:.2f}M window "
                                f"tokens of `{os.path.basename(s['data']['store'])}`"
                                for s in stages),
                 "; ".join(f"{s['final_eval']['eval_acc0']:.3f} (after stage {i + 1}, its "
                           f"store's held-out windows)" for i, s in enumerate(stages))
                 if len(stages) > 1 else
                 f"{t['final_eval']['eval_acc0']:.3f} (step {t['final_eval']['step']})"])
  return _table(["drafter", "params shipped", "training (stages)",
                 "held-out top-1 vs target argmax"], rows)


def text_table(rel: str):
  return lambda: _md_table_lines(rel)


TABLES = {
    "claims_notebooks": claims_notebooks,
    "claims_humaneval": claims_humaneval,
    "claims_sv": claims_sv,
    "claims_speed": claims_speed,
    "generate_vs_hf_smollm2": text_table(f"{RESULTS}/generate_vs_hf_smollm2.txt"),
    "forward_cost_smollm2": text_table(f"{RESULTS}/forward_cost_smollm2.txt"),
    "humaneval_t0": functools.partial(humaneval_table, "t0"),
    "humaneval_t07": functools.partial(humaneval_table, "t07"),
    "humaneval_t1": functools.partial(humaneval_table, "t1"),
    "sv_smollm2": sv_table,
    "sv_information_bias": sv_information_bias,
    "sv_run_smollm2": sv_run_table,
    "batch_sweep_smollm2": batch_sweep_table,
    "tree_shapes_smollm2": tree_shapes_table,
    "small_models_drafters": small_models_table,
    "drafters_smollm2": drafters_table,
    "layer_stack": layer_stack_table,
    "attention_chunk": attention_chunk_table,
    "main_job_smollm2": main_job_table,
    "speed_smollm2": functools.partial(benchmark_table, SPEED_RECORD),
    "speed_smollm2_decode": functools.partial(benchmark_table, SPEED_RECORD_DECODE),
    "speed_smollm2_onpolicy_head": functools.partial(benchmark_table, SPEED_RECORD_ONPOLICY_HEAD),
    "drafter_data_training": drafter_data_training_table,
    "drafter_data_heldout": drafter_data_heldout_table,
    "drafter_data_tau": drafter_data_tau_table,
    "drafter_data_continued": drafter_data_continued_table,
    "drafter_data_continued_shipped": drafter_data_continued_shipped_table,
    "acceptance_smollm2": acceptance_table,
    "draft_continued_smollm2": candidate_table,
}
# The verification-rule comparisons (block, traversal, tree children, MARS + block).
TABLES.update(rule_tables.TABLES)
# The MARS threshold and draft-length sweeps.
TABLES.update(sweep_tables.TABLES)
# The verifier comparison on SmolLM2 (every rule against its matched baseline).
TABLES.update(compare_tables.TABLES)
# The propositions and MARS margins on SmolLM2 that the notebooks do not cover.
TABLES.update(propositions_tables.TABLES)
# The SV companions' information about acceptance, per early-exit depth.
TABLES.update(sv_companion_tables.TABLES)
# Before / after timings of one code change in one process.
TABLES.update(ab_tables.TABLES)
# The forward cost curve and one speculative round's parts, in target decode steps.
TABLES.update(speed_profile_tables.TABLES)
# Under each table that reads stamped records: their provenance, exploratory or not.
from experiments.results import provenance_notes  # noqa: E402 (applied to the finished mapping)

TABLES = provenance_notes.with_provenance(TABLES)
