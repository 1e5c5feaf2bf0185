"""Every committed figure's code draws a figure a reader can read: no two texts
overlap, no text is cut off by the figure's edge, and no two legend entries of one
legend look the same.

The checks run on the figure as it is saved (``Figure.savefig`` is wrapped), so the
figure code is exercised unchanged. The comparison and sweep figures are drawn from
small synthetic records crowded like the real ones (9 rules x 3 drafters at two
temperatures); the SV and lossy-propositions figures from their committed records,
which are small.

The broken variants these tests catch (both were the committed code once):

* per-point text labels: the comparison figure annotated every marker with
  ``"<method> [<drafter>]"`` -- dozens of overlapping labels per panel
  (:func:`test_per_point_labels_are_caught`);
* indistinct reference lines: the sweep figures drew every single-point reference
  (lossless per drafter and temperature) black dotted, so four legend entries
  looked the same (:func:`test_black_dotted_references_are_caught`).
"""

import json
import os

import pytest

from experiments.common import figure_checks, figures

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = ("lossless", "greedy", "mars(theta=0.9)", "spec_cascade(p_base=0.3)",
         "typical(eps=0.09)", "cos(lam=0.4)", "cos_contrastive(mu=0.5)", "lenience(l=0.5)",
         "fuzzy(threshold=0.4)")
DRAFTERS = (("chain", 4), ("eagle_chain", 4), ("eagle_tree", 5))


def _result(tau: float, speedup: float, loglik: float) -> dict:
  return {"tau": tau, "tau_ci": [tau - 0.1, tau + 0.1], "speedup": speedup,
          "loglik": loglik, "loglik_ci": [loglik - 0.2, loglik + 0.15]}


def compare_records() -> list[dict]:
  """A comparison record shaped like ``compare_verifiers_smollm2``: close points."""
  out = []
  for t in (0.0, 1.0):
    out.append({"config": {"kind": "target", "method": "target", "drafter": "-",
                           "temperature": t, "num_draft": 0}, "result": {"loglik": -0.3 - 2 * t}})
    methods = RULES + (("baseline:typical(eps=0.09)", "baseline:spec_cascade(p_base=0.3)")
                       if t else ())
    for j, (d, k) in enumerate(DRAFTERS):
      for i, m in enumerate(methods):
        out.append({"config": {"kind": "spec", "method": m, "drafter": d, "temperature": t,
                               "num_draft": k},
                    "result": _result(1.2 + 0.03 * i + 0.4 * j, 0.7 + 0.01 * i + 0.1 * j,
                                      -0.3 - 0.02 * i - t)})
  return out


def theta_records() -> list[dict]:
  """A theta-sweep record: target-only and one lossless reference per drafter and
  temperature, MARS at five thetas."""
  out = []
  for t in (0.0, 1.0):
    out.append({"config": {"kind": "target", "method": "target", "drafter": "-",
                           "temperature": t, "num_draft": 0, "series": f"target T={t:g}"},
                "result": {"loglik": -0.3 - 2 * t}})
    for j, (d, k) in enumerate(DRAFTERS[1:]):
      spec = {"kind": "spec", "drafter": d, "temperature": t, "num_draft": k}
      out.append({"config": {**spec, "method": "lossless",
                             "series": f"lossless [{d}] T={t:g}"},
                  "result": _result(1.5 + j, 0.9 - 0.2 * j, -0.3 - t)})
      for n, th in enumerate((0.8, 0.85, 0.9, 0.95, 0.98)):
        out.append({"config": {**spec, "method": f"mars(theta={th})", "x": th,
                               "series": f"mars [{d}] T={t:g}"},
                    "result": _result(2.0 + j - 0.1 * n, 1.1 - 0.2 * j - 0.05 * n, -0.6 - t)})
  return out


@pytest.fixture
def saved(monkeypatch):
  """``{file name: (overlaps, cut-off texts, indistinct legend entries)}`` of every
  figure saved while the test runs."""
  from matplotlib.figure import Figure
  found = {}
  original = Figure.savefig

  def checked_savefig(self, path, *args, **kwargs):
    found[os.path.basename(str(path))] = (figure_checks.overlapping_texts(self),
                                          figure_checks.texts_outside(self),
                                          figure_checks.indistinct_legend_entries(self))
    return original(self, path, *args, **kwargs)

  monkeypatch.setattr(Figure, "savefig", checked_savefig)
  return found


def _assert_readable(found: dict, names: list):
  assert sorted(found) == sorted(names), found
  for name, (overlaps, outside, indistinct) in found.items():
    assert overlaps == [], f"{name}: overlapping texts {overlaps[:5]}"
    assert outside == [], f"{name}: texts cut off by the figure's edge {outside[:5]}"
    assert indistinct == [], f"{name}: legend entries that look the same {indistinct}"


def test_comparison_and_sweep_figures_are_readable(saved, tmp_path):
  figures.plot_quality_vs_speed(compare_records(), str(tmp_path / "compare.png"), "verifiers")
  figures.plot_lines(theta_records(), str(tmp_path / "theta.png"), "MARS theta sweep",
                     lambda cfg: cfg.get("x", 0.0), "theta")
  k_records = [dict(r, config=dict(r["config"], num_draft=n + 1, series=r["config"]["series"]
                                   .replace("lossless", "mars"), method="mars(theta=0.9)"))
               if r["config"]["kind"] == "spec" else r
               for n, r in enumerate(theta_records())]
  figures.plot_lines(k_records, str(tmp_path / "k.png"), "draft length sweep",
                     lambda cfg: cfg["num_draft"], "K")
  _assert_readable(saved, ["compare.png", "theta.png", "k.png"])


@pytest.mark.parametrize("name", ["sv_smollm2", "lossy_smollm2",
                                  "online_adaptation_curve_smollm2"])
def test_committed_records_draw_readable_figures(saved, tmp_path, name):
  from experiments.render_figures import FIGURES
  spec = FIGURES[name]
  files = spec.draw(os.path.join(ROOT, spec.record), str(tmp_path))
  assert files
  _assert_readable(saved, [os.path.basename(f) for f in files])


def test_every_figure_record_is_committed():
  from experiments.render_figures import FIGURES
  for spec in FIGURES.values():
    assert os.path.isfile(os.path.join(ROOT, spec.record)), spec


def test_per_point_labels_are_caught(saved, tmp_path, monkeypatch):
  """The broken variant: the old comparison figure's label next to every marker."""
  plain = figures._scatter_point

  def labelled(ax, res, cfg, xfield, colour):
    plain(ax, res, cfg, xfield, colour)
    ax.annotate(f"{cfg['method']} [{cfg['drafter']}]", (res[xfield], res["loglik"]),
                fontsize=6, xytext=(3, 3), textcoords="offset points")

  monkeypatch.setattr(figures, "_scatter_point", labelled)
  figures.plot_quality_vs_speed(compare_records(), str(tmp_path / "old.png"), "verifiers")
  overlaps = saved["old.png"][0]
  assert len(overlaps) > 20, overlaps


def test_black_dotted_references_are_caught(saved, tmp_path, monkeypatch):
  """The broken variant: every single-point reference drawn black dotted."""
  plain = figures._draw_series

  def old_references(ax, s, m, label, colours, x_span):
    values = [res[m] for _, res in s["pts"] if res.get(m) is not None]
    if s["cfg"]["kind"] == "spec" and len(values) == 1:
      ax.axhline(values[0], lw=1, ls=":", color="black", label=label)
    else:
      plain(ax, s, m, label, colours, x_span)

  monkeypatch.setattr(figures, "_draw_series", old_references)
  records = [r for r in theta_records() if r["config"]["temperature"] == 0.0 or
             r["config"]["kind"] != "target"]
  figures.plot_lines(records, str(tmp_path / "old.png"), "t", lambda c: c.get("x", 0.0),
                     "theta")
  assert saved["old.png"][2], "four black dotted references were not reported"


def test_checks_name_bad_arguments():
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig = plt.figure()
  fig.text(0.1, 0.1, "a")
  fig.text(0.1, 0.1, "a")
  assert len(figure_checks.overlapping_texts(fig)) == 1
  with pytest.raises(ValueError, match="min_area=-1"):
    figure_checks.overlapping_texts(fig, min_area=-1)
  with pytest.raises(ValueError, match="tolerance=-2"):
    figure_checks.texts_outside(fig, tolerance=-2)
  fig.text(0.99, 0.5, "cut off at the right edge")
  assert figure_checks.texts_outside(fig) == ["cut off at the right edge"]
  plt.close(fig)
