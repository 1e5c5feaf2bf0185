"""Reports of comparison / sweep records: the markdown table and the figures.

* :func:`markdown_table` -- one line per record over :data:`COLUMNS`;
* :func:`write_reports` -- ``<workdir>/<name>.md`` and ``<figures_dir>/<name>.png``.

The figures themselves (:func:`plot_quality_vs_speed`, :func:`plot_lines`) are drawn
by :mod:`experiments.common.figures`; their names stay importable from here.
"""

from __future__ import annotations

import math
import os

from experiments.common.figures import plot_lines, plot_quality_vs_speed  # noqa: F401
from experiments.common.rows import draft_depth


def _fmt(x, spec=".3f"):
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "–"
  return format(x, spec)


# A column's field is a result key, a config key, or one of DERIVED (computed from the
# config): "draft_depth" is a chain row's K or a tree row's depth (old records too).
DERIVED = {"draft_depth": draft_depth}

COLUMNS = [("method", "method", None), ("drafter", "drafter", None), ("T", "temperature", "g"),
           ("K", "draft_depth", "d"), ("tau", "tau", ".2f"), ("speedup", "speedup", ".2f"),
           ("decode speedup", "speedup_decode", ".2f"),
           ("relaxed", "relaxed_rate", ".3f"), ("loglik/tok", "loglik", ".3f"),
           ("parse", "parse_frac", ".2f"), ("agree (T=0)", "agree_exact", ".2f"),
           ("KL1 vs base", "first_kl", ".3f"), ("TV1 vs base", "first_tv", ".3f"),
           ("note", "skipped", None)]


def _cell(res: dict, cfg: dict, field: str, spec) -> str:
  """One cell: the value (result, config or :data:`DERIVED` from the config), its ``<field>_ci`` interval appended as
  ``[low, high]`` when the result has one; "" for a missing note."""
  v = (res[field] if field in res else DERIVED[field](cfg) if field in DERIVED
       else cfg.get(field))
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
