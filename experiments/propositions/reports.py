"""Figures and tables of the lossy-verification propositions' records
(:mod:`experiments.propositions.sweep`): PNG figures, a text summary for stdout and
markdown tables (for ``benchmarks/RESULTS.md``).  Reads records only; computes nothing.
"""

from __future__ import annotations

import math
import os


def _nan_for_null(x):
  if x is None:
    return float("nan")
  if isinstance(x, list):
    return [_nan_for_null(v) for v in x]
  if isinstance(x, dict):
    return {k: _nan_for_null(v) for k, v in x.items()}
  return x


def flatten(records: list[dict]) -> list[dict]:
  """``{"key", "config", "result", "provenance"}`` sweep records -> flat dicts (``null`` -> nan)."""
  out = []
  for r in records:
    if "config" in r and "result" in r:
      flat = {**r["config"], **_nan_for_null(r["result"]), "key": r["key"]}
    else:
      flat = _nan_for_null(dict(r))
    out.append(flat)
  return out


def latest(records):
  """Flat records, last one per key."""
  out = {}
  for r in flatten(records):
    out[r["key"]] = r
  return list(out.values())


def _kl_figure(plt, kl: list, rules: list, source: str):
  """Part (a)/(b): mean KL and TV to the truncated target vs t, one column per rule."""
  fig, axes = plt.subplots(2, len(rules), figsize=(4.6 * len(rules), 7.0), squeeze=False)
  for col, rule in enumerate(rules):
    ax, ax_tv = axes[0, col], axes[1, col]
    lim = None
    for r in sorted((r for r in kl if r["rule"] == rule),
                    key=lambda r: (r["part"], r["family"], r.get("top_k", 0))):
      label = ("SD" if r["part"] == "sd" else f"EAGLE top-{r['top_k']}") + \
          f", q_ref={r['family']}"
      ls = "-" if r["part"] == "sd" else "--"
      finite = [k if k is not None and math.isfinite(k) else float("nan")
                for k in r["kl_mean"]]
      if any(math.isfinite(k) for k in finite):
        ax.plot(r["ts"], finite, ls, marker="o", ms=3, label=label)
      else:
        label += " (KL = inf)"
      ax_tv.plot(r["ts"], r["tv_mean"], ls, marker="o", ms=3, label=label)
      if r["part"] == "eagle":
        lim = r["limit"]
    if lim is not None:
      ax.axhline(lim, color="k", ls=":", lw=1,
                 label=f"E[log Z_A/p(argmax)] = {lim:.3f}")
    ax.set_ylabel("mean KL(P || p_A)  [nats]")
    ax.set_title(rule, fontsize=9)
    ax.legend(fontsize=6)
    ax_tv.set_xlabel("t  (q_t = (1-t) p + t q_ref; t=0: q = p)")
    ax_tv.set_ylabel("mean TV(P, p_A)")
    ax_tv.legend(fontsize=6)
  fig.suptitle(f"Truncation rules: SD vs EAGLE drafts ({source} contexts)")
  fig.tight_layout()
  return fig


def _truncation_figure(plt, tr: list, source: str):
  """Part (c): block-efficiency change under truncation."""
  fig, axes = plt.subplots(1, len(tr), figsize=(4.8 * len(tr), 3.6), squeeze=False)
  for ax, r in zip(axes[0], sorted(tr, key=lambda r: r["kind"])):
    ax.plot(r["values"], r["delta_be_paq"], "o-", label="(p_A, q) - (p, q)")
    ax.plot(r["values"], r["delta_be_paqa"], "s-", label="(p_A, q_A) - (p, q)")
    ax.plot(r["values"], r["delta_be_gate"], "^-", label="hard gate q(A) - (p, q)")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xlabel("p_base" if r["kind"] == "min_p" else "eta (eps)")
    ax.set_ylabel(f"Delta block efficiency (gamma={r['gamma']})")
    ax.set_title(f"{r['kind']}: BE(p,q) = {r['be_pq']:.3f}", fontsize=9)
    ax.legend(fontsize=7)
  fig.suptitle(f"Block efficiency change under truncation ({source})")
  fig.tight_layout()
  return fig


def _alignment_figure(plt, al: list, source: str):
  """Part (c): net block-efficiency change vs draft-target alignment."""
  fig, axes = plt.subplots(1, len(al), figsize=(4.4 * len(al), 3.8), squeeze=False)
  for ax, r in zip(axes[0], al):
    for i, v in enumerate(r["values"]):
      ax.plot(r["rhos"], [row[i] for row in r["delta_be"]], "o-", ms=3,
              label=("p_base" if r["kind"] == "min_p" else "eps") + f"={v:g}")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xlabel("alignment ratio rho  (q = rho p + (1-rho) q_draft)")
    ax.set_ylabel(f"net Delta BE (gamma={r['gamma']})")
    pair = "(p_A, q_A)" if r["truncate_draft"] else "(p_A, q)"
    ax.set_title(f"{r['kind']} {pair}; alpha(p,q): {r['alpha_pq'][0]:.2f}"
                 f"->{r['alpha_pq'][-1]:.2f}", fontsize=8)
    ax.legend(fontsize=6)
  fig.suptitle(f"Truncation: net block-efficiency change vs draft-target alignment ({source})")
  fig.tight_layout()
  return fig


def _mars_figure(plt, ms: list, source: str):
  """Part (d): MARS KL to p and the strict-rejection share vs theta."""
  fig, ax = plt.subplots(figsize=(5.8, 4))
  ax2 = ax.twinx()
  for r in sorted(ms, key=lambda r: r["draft"]):
    ax.plot(r["thetas"], r["kl_mean"], "o-", label=f"KL(P_MARS || p), {r['draft']} draft")
    ax2.plot(r["thetas"], r["reject_share"], "s--", alpha=0.7,
             label=f"strict-rejection share r>theta, {r['draft']}")
  ax.set_xlabel("theta")
  ax.set_ylabel("mean KL to p [nats]")
  ax2.set_ylabel("share of strict rejections in r > theta")
  ax2.set_ylim(0, 1)
  h1, l1 = ax.get_legend_handles_labels()
  h2, l2 = ax2.get_legend_handles_labels()
  ax.legend(h1 + h2, l1 + l2, fontsize=6)
  ax.set_title(f"MARS theta sweep ({source})")
  fig.tight_layout()
  return fig


def make_figures(records: list[dict], output_dir: str, path_of=None) -> list[str]:
  """PNG figures from the records; returns the written paths.

  ``path_of(name) -> path`` places each figure (default ``<output_dir>/<name>``).
  """
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from specjax.analysis import margins as mg
  written = []
  path_of = path_of or (lambda name: os.path.join(output_dir, name))

  def save(fig, name):
    path = path_of(name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

  recs = latest(records)
  for source in ("synthetic", "real"):
    kl = [r for r in recs if r["part"] in ("sd", "eagle") and r["source"] == source]
    rules = sorted({r["rule"] for r in kl})
    if rules:
      save(_kl_figure(plt, kl, rules, source), f"kl_vs_t_{source}.png")
    tr = [r for r in recs if r["part"] == "truncation" and r["source"] == source]
    if tr:
      save(_truncation_figure(plt, tr, source), f"truncation_be_{source}.png")
    al = sorted((r for r in recs if r["part"] == "alignment" and r["source"] == source),
                key=lambda r: (r["kind"], not r["truncate_draft"]))
    if al:
      save(_alignment_figure(plt, al, source), f"alignment_be_{source}.png")

  for source in ("synthetic_logits", "real"):
    ms = [r for r in recs if r["part"] == "mars" and r["source"] == source]
    if ms:
      save(_mars_figure(plt, ms, source), f"mars_theta_{source}.png")
    mg_rec = [r for r in recs if r["part"] == "margins" and r["source"] == source]
    for r in mg_rec:
      save(mg.plot_histograms(r["summary"], title=f"margins ({source})"),
           f"margins_hist_{source}.png")
      save(mg.plot_theta_curves(r["summary"], title=f"MARS relaxation vs theta ({source})"),
           f"margins_theta_{source}.png")
  return written


def summary_table(records: list[dict], theta: float = 0.9) -> str:
  """A small text table of the headline numbers."""
  lines = []
  recs = latest(records)
  lines.append(f"{'part':<10} {'source':<17} {'config':<44} {'result'}")
  for r in sorted(recs, key=lambda r: r["key"]):
    part, src = r["part"], r["source"]
    if part in ("sd", "eagle"):
      cfg = f"{r['rule']} q_ref={r['family']}" + (f" k={r['top_k']}" if part == "eagle" else "")
      kl_s = lambda x: "inf" if not math.isfinite(x) else f"{x:.4f}"  # null/nan = +inf
      res = (f"KL(t={r['ts'][0]:g})={kl_s(r['kl_mean'][0])} "
             f"KL(t={r['ts'][-1]:g})={kl_s(r['kl_mean'][-1])} "
             f"TV(t={r['ts'][-1]:g})={r['tv_mean'][-1]:.4f} eagle_limit={r['limit']:.4f}")
    elif part == "alignment":
      pair = "(pA,qA)" if r["truncate_draft"] else "(pA,q)"
      cfg = f"{r['kind']} {pair} rho={r['rhos'][0]:g}..{r['rhos'][-1]:g}"
      res = (f"dBE(rho={r['rhos'][0]:g})={[round(x, 3) for x in r['delta_be'][0]]} "
             f"dBE(rho={r['rhos'][-1]:g})={[round(x, 3) for x in r['delta_be'][-1]]}")
    elif part == "truncation":
      cfg = f"{r['kind']} {r['values']}"
      res = (f"BE(p,q)={r['be_pq']:.3f} dBE(pA,q)={[round(x, 3) for x in r['delta_be_paq']]} "
             f"dBE(pA,qA)={[round(x, 3) for x in r['delta_be_paqa']]}")
    elif part == "mars":
      i = min(range(len(r["thetas"])), key=lambda j: abs(r["thetas"][j] - theta))
      cfg = f"draft={r['draft']} theta={r['thetas'][i]:g}"
      res = (f"KL={r['kl_mean'][i]:.4f} accept {r['lossless_accept_mean']:.3f}->"
             f"{r['accept_mean'][i]:.3f} relaxed={r['relaxed_mean'][i]:.3f} "
             f"reject_share={r['reject_share'][i]:.3f}")
    elif part == "margins":
      s = r["summary"]
      cfg = f"theta={s['theta']} n={s['n']}"
      res = (f"neg_z1={s['frac_negative_top1']:.3f} relaxed={s['frac_relaxed']:.3f} "
             f"fig1d_P(rej|r>theta)={s.get('greedy_reject_rate_relaxed', float('nan')):.3f} "
             f"greedy_reject_share={s.get('greedy_reject_share', float('nan')):.3f} "
             f"rescued={s.get('greedy_rescued_share', float('nan')):.3f}")
    else:
      continue
    lines.append(f"{part:<10} {src:<17} {cfg:<44} {res}")
  return "\n".join(lines)


def _table(header: list[str], rows) -> list[str]:
  """Markdown lines of a table (and a blank line): one row per list of cell strings."""
  return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
          + ["| " + " | ".join(cells) + " |" for cells in rows] + [""])


def _nearest(values, x) -> int:
  return min(range(len(values)), key=lambda j: abs(values[j] - x))


def markdown_tables(records: list[dict]) -> str:
  """Markdown tables of the records (for ``benchmarks/RESULTS.md``)."""
  recs = latest(records)
  out = []
  f4 = lambda x: "inf" if x is None or not math.isfinite(x) else f"{x:.4f}"
  kl = sorted((r for r in recs if r["part"] in ("sd", "eagle")),
              key=lambda r: (r["source"], r["rule"], r["part"] != "sd", r["family"],
                             r.get("top_k", 0)))
  if kl:
    out += _table(
        ["source", "rule", "drafts", "q_ref", "n", "KL(P‖p_A) t=1", "t=0.1", "t=0", "TV t=0",
         "E[log Z_A/p(argmax)]"],
        ([r["source"], r["rule"], "SD (sampled)" if r["part"] == "sd" else
          f"EAGLE top-{r['top_k']}", r["family"], str(r["n"]),
          f4(r["kl_mean"][_nearest(r["ts"], 1.0)]), f4(r["kl_mean"][_nearest(r["ts"], 0.1)]),
          f4(r["kl_mean"][_nearest(r["ts"], 0.0)]), f4(r["tv_mean"][_nearest(r["ts"], 0.0)]),
          f4(r["limit"])] for r in kl))
  tr = sorted((r for r in recs if r["part"] == "truncation"),
              key=lambda r: (r["source"], r["kind"]))
  if tr:
    out += _table(
        ["source", "kind", "value", "alpha(p,q)", "alpha(p_A,q)", "alpha(p_A,q_A)",
         "alpha gate q(A)", "BE(p,q)", "dBE(p_A,q)", "dBE(p_A,q_A)", "dBE gate"],
        ([r["source"], r["kind"], f"{v:g}", f"{r['alpha_pq']:.3f}",
          *(f"{r[k][i]:.3f}" for k in ("alpha_paq", "alpha_paqa", "alpha_gate")),
          f"{r['be_pq']:.3f}",
          *(f"{r[k][i]:+.3f}" for k in ("delta_be_paq", "delta_be_paqa", "delta_be_gate"))]
         for r in tr for i, v in enumerate(r["values"])))
  al = sorted((r for r in recs if r["part"] == "alignment"),
              key=lambda r: (r["source"], r["kind"], not r["truncate_draft"]))
  if al:
    out += _table(
        ["source", "kind", "pair", "value", "rho", "alpha(p,q)", "alpha trunc", "gain",
         "loss", "BE(p,q)", "net dBE"],
        ([r["source"], r["kind"], "(p_A, q_A)" if r["truncate_draft"] else "(p_A, q)", f"{v:g}",
          f"{rho:g}", f"{r['alpha_pq'][j]:.3f}", f"{r['alpha_trunc'][j][i]:.3f}",
          f"{r['gain'][j][i]:.3f}", f"{r['loss'][j][i]:.3f}", f"{r['be_pq'][j]:.3f}",
          f"{r['delta_be'][j][i]:+.3f}"]
         for r in al for j, rho in enumerate(r["rhos"]) for i, v in enumerate(r["values"])))
  ms = sorted((r for r in recs if r["part"] == "mars"), key=lambda r: (r["source"], r["draft"]))
  if ms:
    out += _table(
        ["source", "draft", "n", "theta", "KL(P_MARS‖p)", "TV", "accept (lossless → MARS)",
         "relaxed", "positions r>theta", "strict-rejection share r>theta"],
        ([r["source"], r["draft"], str(r["n"]), f"{th:g}", f4(r["kl_mean"][i]),
          f"{r['tv_mean'][i]:.4f}", f"{r['lossless_accept_mean']:.3f} → {r['accept_mean'][i]:.3f}",
          *(f"{r[k][i]:.3f}" for k in ("relaxed_mean", "active_frac", "reject_share"))]
         for r in ms for i, th in enumerate(r["thetas"])))
  mg_recs = sorted((r for r in recs if r["part"] == "margins"), key=lambda r: r["source"])
  if mg_recs:
    def row(r):
      s = r["summary"]
      g = lambda k: (f"{s[k]:.3f}" if isinstance(s.get(k), float) and math.isfinite(s[k])
                     else "–")
      return [r["source"], str(s["n"]), f"{s['frac_negative_top1']:.3f}",
              f"{s['z1'].get('q50', float('nan')):.2f}",
              f"{s['ratio'].get('q50', float('nan')):.3f}",
              f"{s['prob_ratio'].get('q50', float('nan')):.3f}",
              f"{s['frac_relaxed']:.3f} (theta={s['theta']:g})",
              *(g(k) for k in ("greedy_reject_rate", "greedy_reject_rate_relaxed",
                               "greedy_reject_share", "greedy_rescued_share",
                               "sampled_reject_share"))]
    out += _table(
        ["source", "n", "z1 < 0", "z1 median", "r median", "p2/p1 median", "r > theta",
         "greedy reject rate", "P(greedy reject \\| r > theta) (Fig. 1d)",
         "greedy rejections in r > theta", "rescued by MARS",
         "sampled rejection mass in r > theta"], map(row, mg_recs))
  return "\n".join(out)


def timing_table(records: list[dict]) -> str:
  """Markdown table of the time per part and source: wall seconds and process CPU
  seconds (all threads; on a shared machine the CPU time is the load-independent
  number).  Building a context set is counted in its first configuration and shown
  apart."""
  keys = ("seconds", "contexts_seconds", "cpu_seconds", "contexts_cpu_seconds")
  acc = {}
  for r in latest(records):
    k = (r["part"], r["source"])
    prev = acc.get(k, (0,) + (0.0,) * len(keys))
    acc[k] = (prev[0] + 1,) + tuple(a + float(r.get(name) or 0.0)
                                    for a, name in zip(prev[1:], keys))
  rows = [[part, src, str(n), f"{sec - ctx:.1f}", f"{cpu - ctx_cpu:.1f}", f"{ctx:.1f}",
           f"{ctx_cpu:.1f}"]
          for (part, src), (n, sec, ctx, cpu, ctx_cpu) in sorted(acc.items())]
  tot = [sum(v[i] for v in acc.values()) for i in range(1, len(keys) + 1)]
  rows.append(["all", "", str(sum(v[0] for v in acc.values())), f"{tot[0] - tot[1]:.1f}",
               f"{tot[2] - tot[3]:.1f}", f"{tot[1]:.1f}", f"{tot[3]:.1f}"])
  return "\n".join(_table(["part", "source", "configs", "wall s (analysis)",
                            "CPU s (analysis)", "wall s (contexts)", "CPU s (contexts)"], rows))
