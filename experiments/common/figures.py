"""Figures of comparison / sweep records, drawn to be read without the table.

* :func:`plot_quality_vs_speed` -- tau and speedup (x) against target log-likelihood
  per token (y), one column per temperature;
* :func:`plot_lines` -- each metric against one swept axis (theta, K, T).

One visual grammar for both: **colour = rule** (:class:`RuleColours`; a matched
truncation baseline ``baseline:<rule>`` takes its rule's colour with a hollow
marker), **marker = drafter** (:data:`DRAFTER_MARKERS`), reference lines (target-only,
a single-point lossless reference) drawn in their own styles and named in the legend,
and the record's 95% bootstrap intervals over prompts as error bars wherever the
record has them. No per-point text labels: one figure-level legend outside the
panels names everything, so no text lands on data or on other text
(:mod:`experiments.common.figure_checks` checks the last part).
"""

from __future__ import annotations

import re

DRAFTER_MARKERS = {"chain": "o", "tree": "s", "eagle_chain": "^", "eagle_tree": "D",
                   "lookup_chain": "v", "suffix_tree": "P", "-": "*"}
DRAFTER_LINESTYLES = {"chain": "-", "eagle_chain": "-", "lookup_chain": "-", "tree": "--",
                      "eagle_tree": "--", "suffix_tree": "--"}
FAMILY_COLOURS = {"lossless": "tab:blue", "mars": "tab:orange", "greedy": "tab:green",
                  "typical": "tab:red", "spec_cascade": "tab:purple", "cos": "tab:brown",
                  "cos_contrastive": "tab:pink", "lenience": "tab:olive", "fuzzy": "tab:cyan"}
EXTRA_COLOURS = ("#393b79", "#8c6d31", "#843c39", "#7b4173", "#637939", "#17becf",
                 "#bcbd22", "#e7ba52", "#ad494a", "#a55194")
TARGET_STYLE = dict(color="0.35", ls="--", lw=1.2)
CI_NOTE = "bars: 95% bootstrap CI over prompts"


def rule_of(method: str) -> str:
  """The rule a row's ``method`` names, without the ``baseline:`` prefix:
  ``"baseline:typical(eps=0.09)"`` -> ``"typical(eps=0.09)"``."""
  return method[len("baseline:"):] if method.startswith("baseline:") else method


def family_of(method: str) -> str:
  """The rule family: the rule without hyperparameters or policy suffix
  (``"mars(theta=0.9)+adaedl"`` -> ``"mars"``)."""
  return re.sub(r"\(.*?\)", "", rule_of(method)).split("+")[0].strip()


class RuleColours:
  """Colour of each rule in one figure: a known family keeps its fixed colour
  (:data:`FAMILY_COLOURS`) for the first rule of that family seen; every other rule
  (an unknown family, or the same family at other hyperparameters) takes the next
  of :data:`EXTRA_COLOURS`."""

  def __init__(self, by_family: bool = False):
    self.by_family = by_family
    self.assigned: dict[str, str] = {}
    self.used_families: set[str] = set()

  def __call__(self, method: str) -> str:
    key = family_of(method) if self.by_family else rule_of(method)
    if key not in self.assigned:
      fam = family_of(method)
      if fam in FAMILY_COLOURS and fam not in self.used_families:
        self.assigned[key] = FAMILY_COLOURS[fam]
      else:
        n = len([k for k in self.assigned if self.assigned[k] in EXTRA_COLOURS])
        self.assigned[key] = EXTRA_COLOURS[n % len(EXTRA_COLOURS)]
      self.used_families.add(fam)
    return self.assigned[key]


def _pyplot():
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


def _interval(res: dict, field: str, value: float):
  """``[[below], [above]]`` error-bar lengths from ``res[field + "_ci"]``, or None."""
  ci = res.get(f"{field}_ci")
  if not ci or ci[0] is None or ci[1] is None:
    return None
  return [[max(value - ci[0], 0.0)], [max(ci[1] - value, 0.0)]]


def _legend_right(fig, handles: list, fontsize: float = 8):
  """One legend for the whole figure, right of the panels (the figure's constrained
  layout makes room for it)."""
  fig.legend(handles=handles, loc="outside right center", fontsize=fontsize, frameon=False)


def _x_of(res: dict, xfield: str):
  """The x value and its error bar: a speedup timed per prompt is the pooled one the
  tables show, with its interval (``speedup_pooled``); any other field as recorded."""
  pooled = res.get("speedup_pooled") if xfield == "speedup" else None
  if pooled:
    x = pooled["speedup"]
    return x, [[max(x - pooled["ci95"][0], 0.0)], [max(pooled["ci95"][1] - x, 0.0)]]
  x = res.get(xfield)
  return x, (None if x is None else _interval(res, xfield, x))


def _scatter_point(ax, res: dict, cfg: dict, xfield: str, colour: str):
  """One row: its marker (hollow for a matched baseline) and its intervals."""
  (x, xerr), y = _x_of(res, xfield), res.get("loglik")
  if x is None or y is None:
    return
  yerr = _interval(res, "loglik", y)
  if xerr or yerr:
    ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="none", ecolor=colour, alpha=0.35,
                lw=0.8)
  hollow = cfg["method"].startswith("baseline:")
  ax.scatter([x], [y], marker=DRAFTER_MARKERS.get(cfg["drafter"], "o"), s=36, zorder=3,
             facecolors="none" if hollow else colour, edgecolors=colour, linewidths=1.2)


def _quality_handles(colours: RuleColours, drafters: list, has_baseline: bool,
                     speed_line: bool) -> list:
  """Legend entries of :func:`plot_quality_vs_speed`: rules, drafters, references."""
  from matplotlib.lines import Line2D
  blank = Line2D([], [], ls="none")
  handles = [Line2D([], [], ls="none", label="colour = rule")]
  handles += [Line2D([], [], ls="none", marker="o", color=c, label=m)
              for m, c in colours.assigned.items()]
  if has_baseline:
    handles.append(Line2D([], [], ls="none", marker="o", mfc="none", color="0.3",
                          label="hollow: its matched baseline"))
  handles += [blank, Line2D([], [], ls="none", label="marker = drafter")]
  handles += [Line2D([], [], ls="none", marker=DRAFTER_MARKERS.get(d, "o"), color="0.2",
                     label=d) for d in drafters]
  handles += [blank, Line2D([], [], label="target-only log-lik / token", **TARGET_STYLE)]
  if speed_line:
    handles.append(Line2D([], [], color="black", ls=":", lw=1,
                          label="speedup 1 (target-only speed)"))
  return handles + [Line2D([], [], color="0.5", lw=0.8, alpha=0.5, label=CI_NOTE)]


def plot_quality_vs_speed(records: list[dict], path: str, title: str = "") -> str:
  """Two panels per temperature: tau and speedup (x) vs target log-lik / token (y);
  a marker per speculative row, error bars from the record's intervals, the
  target-only log-likelihood as a dashed line and speedup 1 as a dotted one."""
  plt = _pyplot()
  temps = sorted({r["config"]["temperature"] for r in records})
  fig, axes = plt.subplots(2, len(temps), figsize=(4.6 * len(temps) + 2.8, 8.4), squeeze=False,
                           layout="constrained")
  colours = RuleColours()
  spec = [r for r in records if r["config"]["kind"] == "spec"]
  for r in spec:  # colours in record order, the same in every panel
    colours(r["config"]["method"])
  for j, t in enumerate(temps):
    rows = [r for r in records if r["config"]["temperature"] == t]
    tgt = [r for r in rows if r["config"]["kind"] == "target"]
    for i, xfield in enumerate(("tau", "speedup")):
      ax = axes[i, j]
      if tgt and tgt[0]["result"].get("loglik") is not None:
        ax.axhline(tgt[0]["result"]["loglik"], **TARGET_STYLE)
      if xfield == "speedup":
        ax.axvline(1.0, color="black", ls=":", lw=1)
      for r in rows:
        if r["config"]["kind"] == "spec":
          _scatter_point(ax, r["result"], r["config"], xfield, colours(r["config"]["method"]))
      ax.set_xlabel(xfield)
      ax.set_ylabel("target log-lik / token")
      ax.set_title(f"{title} T={t:g}".strip())
      ax.grid(alpha=0.3)
  drafters = list(dict.fromkeys(r["config"]["drafter"] for r in spec))
  has_baseline = any(r["config"]["method"].startswith("baseline:") for r in spec)
  _legend_right(fig, _quality_handles(colours, drafters, has_baseline, True))
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def _series(records: list[dict], x_of) -> dict:
  """``name -> {"cfg": first config, "temps": set, "pts": [(x, result)]}``."""
  series: dict[str, dict] = {}
  for r in records:
    cfg = r["config"]
    name = cfg.get("series") or (cfg["method"] if cfg["kind"] == "target"
                                 else f"{cfg['method']} [{cfg['drafter']}]")
    s = series.setdefault(name, {"cfg": cfg, "temps": set(), "pts": []})
    s["temps"].add(cfg["temperature"])
    s["pts"].append((x_of(cfg), r["result"]))
  return series


def _panel_rows(series: dict) -> list:
  """One row of panels per temperature when every series lives at one temperature
  (theta, K sweeps); one row (``[None]``) when a series spans temperatures (a T sweep)."""
  temps = sorted({t for s in series.values() for t in s["temps"]})
  if len(temps) > 1 and all(len(s["temps"]) == 1 for s in series.values()):
    return temps
  return [None]


def _line_label(name: str, split_by_t: bool) -> str:
  return re.sub(r"\s*T=[-\d.e]+$", "", name) if split_by_t else name


def _draw_series(ax, s: dict, m: str, label: str, colours: RuleColours, x_span: list):
  """One series on one panel: target-only dashed grey, a single-point reference dotted
  in its rule's colour across the swept range (its drafter's marker, hollow), any
  other series a line (solid for a chain drafter, dashed for a tree) with error bars
  where the record has intervals."""
  pts = sorted(((x, res.get(m), res.get(f"{m}_ci")) for x, res in s["pts"]
                if res.get(m) is not None), key=lambda t: t[0])
  if not pts:
    return
  xs, ys, cis = zip(*pts)
  cfg = s["cfg"]
  if cfg["kind"] == "target":
    if len(xs) == 1:
      ax.axhline(ys[0], label="target-only", **TARGET_STYLE)
    else:
      ax.plot(xs, ys, label="target-only", **TARGET_STYLE)
    return
  colour, marker = colours(cfg["method"]), DRAFTER_MARKERS.get(cfg["drafter"], "o")
  ls = DRAFTER_LINESTYLES.get(cfg["drafter"], "-")
  if len(xs) == 1:
    span = x_span if len(x_span) > 1 else [xs[0]]
    ax.plot(span, [ys[0]] * len(span), ls=":", lw=1.3, color=colour, marker=marker,
            mfc="none", ms=5, label=f"{label} (reference)")
  elif all(cis):
    err = [[y - lo for y, (lo, _) in zip(ys, cis)], [hi - y for y, (_, hi) in zip(ys, cis)]]
    ax.errorbar(xs, ys, yerr=err, color=colour, marker=marker, ms=6, ls=ls, capsize=2,
                label=label)
  else:
    ax.plot(xs, ys, color=colour, marker=marker, ms=6, ls=ls, label=label)


def _dedup_handles(axes) -> list:
  """Every labelled artist of the panels, once per label, in drawing order."""
  seen: dict[str, object] = {}
  for ax in axes:
    for h, lab in zip(*ax.get_legend_handles_labels()):
      seen.setdefault(lab, h)
  return list(seen.values())


def plot_lines(records: list[dict], path: str, title: str, x_of, xlabel: str,
               metrics=("tau", "speedup", "loglik", "parse_frac", "agree_exact", "first_kl")
               ) -> str:
  """One panel per metric that has values (and one row of panels per temperature
  when every series lives at one temperature): a line per series against
  ``x_of(config)``, colour = rule, marker = drafter, the record's 95% bootstrap
  intervals over prompts as error bars; references (target-only dashed grey, a
  single-point lossless row dotted in its rule's colour) named in the legend."""
  plt = _pyplot()
  metrics = [m for m in metrics if any(r["result"].get(m) is not None for r in records)] or [
      "loglik"]
  series = _series(records, x_of)
  rows = _panel_rows(series)
  width = 4.2 * len(metrics) + 3.0
  fig, axes = plt.subplots(len(rows), len(metrics), figsize=(width, 3.6 * len(rows)),
                           squeeze=False, layout="constrained")
  colours = RuleColours(by_family=True)
  for i, t in enumerate(rows):
    mine = {n: s for n, s in series.items() if t is None or t in s["temps"]}
    x_span = sorted({x for s in mine.values() if len(s["pts"]) > 1 for x, _ in s["pts"]})
    for ax, m in zip(axes[i], metrics):
      for name, s in mine.items():
        _draw_series(ax, s, m, _line_label(name, t is not None), colours, x_span)
      if not ax.lines and not ax.collections:
        ax.text(0.5, 0.5, "no values" + ("" if t is None else f" at T={t:g}"),
                transform=ax.transAxes, ha="center", va="center", color="0.4")
      ax.set_xlabel(xlabel)
      ax.set_title(m if t is None else f"{m}, T={t:g}")
      ax.grid(alpha=0.3)
  handles = _dedup_handles(axes.ravel())
  if any(s["pts"][0][1].get(f"{m}_ci") for s in series.values() for m in metrics):
    from matplotlib.lines import Line2D
    handles.append(Line2D([], [], color="0.4", marker="|", ls="none", label=CI_NOTE))
  fig.suptitle(title)
  _legend_right(fig, handles)
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path
