"""Reports of comparison / sweep records: the markdown table and the figures.

* :func:`markdown_table` -- one line per record over :data:`COLUMNS`;
* :func:`plot_quality_vs_speed` -- tau / speedup against target log-likelihood;
* :func:`plot_lines` -- each metric against one swept axis (theta, K, T);
* :func:`write_reports` -- ``<workdir>/<name>.md`` and ``<figures_dir>/<name>.png``.
"""

from __future__ import annotations

import math
import os


def _fmt(x, spec=".3f"):
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "–"
  return format(x, spec)


COLUMNS = [("method", "method", None), ("drafter", "drafter", None), ("T", "temperature", "g"),
           ("K", "num_draft", "d"), ("tau", "tau", ".2f"), ("speedup", "speedup", ".2f"),
           ("relaxed", "relaxed_rate", ".3f"), ("loglik/tok", "loglik", ".3f"),
           ("parse", "parse_frac", ".2f"), ("agree (T=0)", "agree_exact", ".2f"),
           ("KL1 vs base", "first_kl", ".3f"), ("TV1 vs base", "first_tv", ".3f"),
           ("note", "skipped", None)]


def _cell(res: dict, cfg: dict, field: str, spec) -> str:
  """One cell: the value (config or result), its ``<field>_ci`` interval appended as
  ``[low, high]`` when the result has one; "" for a missing note."""
  v = res[field] if field in res else cfg.get(field)
  if spec is None:
    return "" if v is None else str(v)
  out = _fmt(v, spec)
  lo_hi = res.get(f"{field}_ci")
  if lo_hi and v is not None:
    out += f" [{_fmt(lo_hi[0], spec)}, {_fmt(lo_hi[1], spec)}]"
  return out


def markdown_table(records: list[dict], columns=COLUMNS) -> str:
  """One line per record; 95% bootstrap intervals over prompts in brackets; a
  skipped row (a rule its drafter cannot serve) says why in ``note``."""
  head = "| " + " | ".join(c[0] for c in columns) + " |"
  sep = "|" + "|".join("---" for _ in columns) + "|"
  lines = [head, sep]
  for r in records:
    cells = [_cell(r["result"], r["config"], field, spec) for _, field, spec in columns]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def plot_quality_vs_speed(records: list[dict], path: str, title: str = "") -> str:
  """Two panels per temperature: tau and speedup (x) vs target log-lik/token (y)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  temps = sorted({r["config"]["temperature"] for r in records})
  fig, axes = plt.subplots(2, len(temps), figsize=(6 * len(temps), 9), squeeze=False)
  markers = {"chain": "o", "tree": "s", "eagle_chain": "^", "eagle_tree": "D",
             "lookup_chain": "v", "suffix_tree": "P", "-": "*"}
  for j, t in enumerate(temps):
    rows = [r for r in records if r["config"]["temperature"] == t]
    tgt = [r for r in rows if r["config"]["kind"] == "target"]
    for i, xfield in enumerate(("tau", "speedup")):
      ax = axes[i, j]
      if tgt:
        ax.axhline(tgt[0]["result"]["loglik"], color="gray", ls="--", lw=1,
                   label="target-only")
      for r in rows:
        if r["config"]["kind"] != "spec":
          continue
        x, y = r["result"].get(xfield), r["result"].get("loglik")
        if x is None or y is None:
          continue
        ax.scatter([x], [y], marker=markers.get(r["config"]["drafter"], "o"))
        ax.annotate(f"{r['config']['method']} [{r['config']['drafter']}]", (x, y), fontsize=6,
                    xytext=(3, 3), textcoords="offset points")
      ax.set_xlabel(xfield)
      ax.set_ylabel("target log-lik / token")
      ax.set_title(f"{title} T={t:g}")
      ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path



def write_reports(c, records, name: str, title: str = "", plot_fn=None) -> dict:
  """``<workdir>/<name>.md`` and the figure ``<figures_dir or workdir>/<name>.png``
  (``figures_dir``: e.g. ``docs/figures``, so the command itself writes the figure
  the docs show)."""
  workdir = c.workdir or f"/tmp/specjax_runs/{c.name}"
  md = os.path.join(workdir, f"{name}.md")
  with open(md, "w") as f:
    f.write(markdown_table(records) + "\n")
  figdir = c.get("figures_dir", "") or workdir
  os.makedirs(figdir, exist_ok=True)
  png = os.path.join(figdir, f"{name}.png")
  (plot_fn or plot_quality_vs_speed)(records, png, title)
  return {"markdown": md, "figure": png}


def plot_lines(records: list[dict], path: str, title: str, x_of, xlabel: str,
               metrics=("tau", "speedup", "loglik", "parse_frac", "agree_exact", "first_kl")
               ) -> str:
  """One panel per metric that has values: a line per (method family, drafter)
  against ``x_of(config)``, with the 95% bootstrap interval over prompts as error
  bars where the record has one; target-only rows are drawn dashed (a line when x
  varies with them, e.g. T)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  metrics = [m for m in metrics if any(r["result"].get(m) is not None for r in records)] or [
      "loglik"]
  fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 4), squeeze=False)
  series: dict[str, list] = {}
  for r in records:
    cfg = r["config"]
    name = cfg.get("series") or (cfg["method"] if cfg["kind"] == "target"
                                 else f"{cfg['method']} [{cfg['drafter']}]")
    series.setdefault(name, []).append((x_of(cfg), r["result"]))
  for ax, m in zip(axes[0], metrics):
    for name, pts in series.items():
      pts = sorted(((x, res.get(m), res.get(f"{m}_ci")) for x, res in pts
                    if res.get(m) is not None), key=lambda t: t[0])
      if not pts:
        continue
      xs, ys, cis = zip(*pts)
      is_target = name.startswith("target")
      style = dict(ls="--", color="gray") if is_target else dict(marker="o")
      if len(xs) == 1:  # a reference (target-only, lossless): a horizontal line
        ax.axhline(ys[0], lw=1, label=name,
                   **(style if is_target else dict(ls=":", color="black")))
      elif all(cis):
        err = [[y - lo for y, (lo, _) in zip(ys, cis)], [hi - y for y, (_, hi) in zip(ys, cis)]]
        ax.errorbar(xs, ys, yerr=err, label=name, capsize=2, **style)
      else:
        ax.plot(xs, ys, label=name, **style)
    ax.set_xlabel(xlabel)
    ax.set_title(m)
    ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=7)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path
