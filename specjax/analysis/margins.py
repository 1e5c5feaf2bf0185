"""Logit-ratio vs probability-ratio statistics: the MARS margin figures.

MARS (Song et al. 2026) relaxes verification where the target is
*indecisive*: ``r = z2 / z1 > theta`` on the two largest raw logits (docs/spec.md §3,
with the guard ``z1 > 0``).  This module measures, over a set of contexts
(raw target logits ``z [N, V]``, e.g. from :mod:`experiments.common.contexts`):

* the distributions of ``z1``, ``r = z2 / z1`` and the probability ratio
  ``p2 / p1 = exp((z2 - z1) / T)`` (temperature dependent, unlike r);
* the fraction of positions where relaxation is active (``r > theta``) as
  theta varies;
* the strict rejection rate *inside* the relaxation region,
  ``P(strict reject | r > theta)`` -- the MARS paper's Fig. 1d quantity:
  among EAGLE-3 drafts at positions with ``r > 0.9``, 53.5% (2590 / 4838) are
  rejected by strict verification (docs/spec.md §7).  With a greedy draft a
  strict rejection is a position where the draft's argmax differs from the
  target's; with a sampled draft each position is weighted by its lossless
  rejection probability ``1 - sum min(p, q)``;
* the converse conditional, ``P(r > theta | strict reject)``: the share of
  strict rejections that fall in the relaxation region (NOT Fig. 1d; an
  earlier version reported it as such);
* how many of those rejections MARS actually rescues (draft argmax = target
  top-2 and relaxation active);
* the fraction of negative top-1 logits (paper Fig. 5a: 0% for Qwen3-8B; the
  guard matters only where it is not 0).

Numbers come as plain dicts of Python floats (JSON-ready); the figure
functions return matplotlib ``Figure`` objects (the caller saves them).
The statistics are computed in NumPy on the host (they are O(N V)); the
relaxation region itself is :func:`specjax.verifiers.mars.activation`, the
test the rule applies at every node.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specjax.verifiers import mars

DEFAULT_THETAS = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.92, 0.94, 0.96, 0.98)


# --- per-position statistics ---------------------------------------------------------


def top2(z) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """``(z1, z2, i1, i2)`` [N] each: the two largest logits and their indices.

  Ties: the lower index first (as ``jax.lax.top_k`` / ``argmax``).
  """
  z = np.asarray(z, np.float32)
  # Two argmaxes (O(V), not a sort: V = 49,152 for real models); argmax returns the
  # first of equal maxima, so the lower index comes first among ties.
  i1 = np.argmax(z, axis=-1)
  z1 = np.take_along_axis(z, i1[..., None], -1)[..., 0]
  rest = z.copy()
  np.put_along_axis(rest, i1[..., None], -np.inf, -1)
  i2 = np.argmax(rest, axis=-1)
  z2 = np.take_along_axis(z, i2[..., None], -1)[..., 0]
  return z1, z2, i1, i2


def logit_ratio(z) -> np.ndarray:
  """``r = z2 / z1`` [N] (``+-inf`` / nan where ``z1 = 0``, as the bare ratio)."""
  z1, z2, _, _ = top2(z)
  with np.errstate(divide="ignore", invalid="ignore"):
    return z2 / z1


def prob_ratio(z, temperature: float = 1.0) -> np.ndarray:
  """``p2 / p1 = exp((z2 - z1) / T)`` [N] in (0, 1] for the target at temperature T > 0."""
  if temperature <= 0:
    raise ValueError(f"temperature={temperature!r} must be > 0 for a probability ratio")
  z1, z2, _, _ = top2(z)
  return np.exp((z2 - z1) / temperature)


def relaxed_mask(z, theta: float, guard: bool = True) -> np.ndarray:
  """bool [N]: MARS relaxation active, ``r > theta`` (and ``z1 > 0`` if ``guard``).

  The test of :class:`specjax.verifiers.Mars` (``margin="ratio"``),
  :func:`specjax.verifiers.mars.activation`: without the guard, ``z1 = z2 = 0``
  counts as ``r = 1`` and ``z1 = 0 > z2`` as ``-inf``.
  """
  z1, z2, _, _ = top2(z)
  _, active = mars.activation(z1, z2, theta, margin="ratio", guard=guard)
  return np.asarray(active)


def strict_rejections(z, q=None, *, draft_token=None, p=None) -> np.ndarray:
  """[N] weight of a strict rejection at each position.

  * ``draft_token`` [N] given (or ``q`` and no ``p``): greedy verification of a
    deterministic draft -- 1.0 where the draft token (default ``argmax q``)
    differs from the target's argmax, else 0.0.
  * ``p`` and ``q`` given: lossless verification of a sampled draft -- the
    rejection probability ``1 - sum_v min(p(v), q(v))``.
  """
  z = np.asarray(z, np.float32)
  if p is not None:
    if q is None:
      raise ValueError("sampled strict rejections need q as well as p")
    return 1.0 - np.minimum(np.asarray(p), np.asarray(q)).sum(-1)
  if draft_token is None:
    if q is None:
      raise ValueError("give draft_token, q, or p and q")
    draft_token = np.argmax(np.asarray(q), axis=-1)
  return (np.asarray(draft_token) != np.argmax(z, axis=-1)).astype(np.float64)


# --- curves and summaries ------------------------------------------------------------


def relaxed_fraction_curve(z, thetas: Sequence[float] = DEFAULT_THETAS, guard: bool = True
                           ) -> np.ndarray:
  """[n] fraction of positions with relaxation active, per theta."""
  return np.asarray([relaxed_mask(z, t, guard).mean() for t in thetas], np.float64)


def reject_rate_relaxed_curve(z, rejections, thetas: Sequence[float] = DEFAULT_THETAS,
                              guard: bool = True) -> np.ndarray:
  """[n] ``P(strict reject | r > theta)`` per theta: the mean rejection weight ([N]) over the
  positions where relaxation is active (MARS Fig. 1d: 0.535 at theta = 0.9); nan where no
  position is active."""
  w = np.asarray(rejections, np.float64)
  out = []
  for t in thetas:
    act = relaxed_mask(z, t, guard)
    out.append(w[act].mean() if act.any() else np.nan)
  return np.asarray(out, np.float64)


def rejection_share_curve(z, rejections, thetas: Sequence[float] = DEFAULT_THETAS,
                          guard: bool = True) -> np.ndarray:
  """[n] ``P(r > theta | strict reject)``: share of strict rejections (weights [N]) in the
  relaxation region, per theta (the converse of Fig. 1d's conditional)."""
  w = np.asarray(rejections, np.float64)
  tot = w.sum()
  if tot <= 0:
    return np.full(len(thetas), np.nan)
  return np.asarray([(w * relaxed_mask(z, t, guard)).sum() / tot for t in thetas])


def rescued_share_curve(z, draft_token, thetas: Sequence[float] = DEFAULT_THETAS,
                        guard: bool = True) -> np.ndarray:
  """[n] share of greedy strict rejections that MARS accepts (draft = top-2, relaxed)."""
  _, _, i1, i2 = top2(z)
  draft_token = np.asarray(draft_token)
  rej = draft_token != i1
  if not rej.any():
    return np.full(len(thetas), np.nan)
  hit = rej & (draft_token == i2)
  return np.asarray([(hit & relaxed_mask(z, t, guard)).sum() / rej.sum() for t in thetas])


def _quantiles(x, qs=(0.05, 0.25, 0.5, 0.75, 0.95)) -> dict:
  x = np.asarray(x, np.float64)
  x = x[np.isfinite(x)]
  if x.size == 0:
    return {}
  out = {f"q{int(round(q * 100)):02d}": float(np.quantile(x, q)) for q in qs}
  out["mean"] = float(x.mean())
  return out


def histogram(x, bins: int = 40, range_=None) -> dict:
  """JSON-ready histogram ``{"edges": [...], "counts": [...]}`` of the finite values."""
  x = np.asarray(x, np.float64)
  x = x[np.isfinite(x)]
  counts, edges = np.histogram(x, bins=bins, range=range_)
  return {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def _greedy_rejection_stats(z, draft_token, act, theta: float, thetas: list, guard: bool
                            ) -> tuple[dict, dict]:
  """:func:`margin_summary`'s greedy-draft rejection numbers at ``theta`` and their
  curves over ``thetas`` (``draft_token [N]``; ``act [N]``: relaxation active)."""
  _, _, _, i2 = top2(z)
  rej = strict_rejections(z, draft_token=draft_token)
  out = {
      "greedy_reject_rate": float(rej.mean()),
      "greedy_num_rejections": int(rej.sum()),
      "greedy_reject_rate_relaxed": float(reject_rate_relaxed_curve(z, rej, [theta],
                                                                    guard)[0]),
      "greedy_num_relaxed": int(act.sum()),
      "greedy_reject_share": float(rejection_share_curve(z, rej, [theta], guard)[0]),
      "greedy_rescued_share": float(rescued_share_curve(z, draft_token, [theta], guard)[0]),
      "greedy_draft_is_top2_share": (float(((draft_token == i2) & (rej > 0)).sum() / rej.sum())
                                     if rej.sum() > 0 else float("nan")),
  }
  curves = {
      "greedy_reject_rate_relaxed": reject_rate_relaxed_curve(z, rej, thetas, guard).tolist(),
      "greedy_reject_share": rejection_share_curve(z, rej, thetas, guard).tolist(),
      "greedy_rescued_share": rescued_share_curve(z, draft_token, thetas, guard).tolist(),
  }
  return out, curves


def _sampled_rejection_stats(z, q, p, theta: float, thetas: list, guard: bool
                             ) -> tuple[dict, dict]:
  """:func:`margin_summary`'s sampled-draft rejection numbers (weights from ``p`` and
  ``q [N, V]``) at ``theta`` and their curves over ``thetas``."""
  w = strict_rejections(z, q, p=p)
  out = {
      "sampled_reject_rate": float(w.mean()),
      "sampled_reject_rate_relaxed": float(reject_rate_relaxed_curve(z, w, [theta], guard)[0]),
      "sampled_reject_share": float(rejection_share_curve(z, w, [theta], guard)[0]),
  }
  curves = {
      "sampled_reject_rate_relaxed": reject_rate_relaxed_curve(z, w, thetas, guard).tolist(),
      "sampled_reject_share": rejection_share_curve(z, w, thetas, guard).tolist(),
  }
  return out, curves


def margin_summary(z, *, q=None, p=None, draft_token=None, temperature: float = 1.0,
                   thetas: Sequence[float] = DEFAULT_THETAS, theta: float = 0.9,
                   guard: bool = True, bins: int = 40, with_histograms: bool = True) -> dict:
  """Numeric summary of the margin statistics over contexts ``z [N, V]``.

  Args:
    z: [N, V] raw target logits.
    q: [N, V] draft distributions (greedy draft token = argmax q; with ``p``
      also the sampled-draft rejection weights).
    p: [N, V] target distributions at ``temperature`` (for sampled rejections
      and the lossless acceptance rate).
    draft_token: [N] explicit draft tokens (overrides argmax q).
    temperature: for the probability ratio ``p2 / p1``.
    thetas: sweep for the curves; theta: the headline threshold.
    guard: MARS's ``z1 > 0`` guard.
    bins: histogram bins; with_histograms: include histogram counts (for plots).

  Returns:
    dict with ``n``, ``frac_negative_top1``, ``frac_nonpositive_top1``,
    ``z1`` / ``ratio`` / ``prob_ratio`` quantiles, ``frac_relaxed`` (at theta),
    ``frac_relaxed_noguard``, ``greedy_reject_rate``,
    ``greedy_reject_rate_relaxed`` (``P(greedy strict reject | r > theta)``, the
    paper's Fig. 1d 53.5%), ``greedy_num_relaxed`` (positions with r > theta),
    ``greedy_reject_share`` (``P(r > theta | greedy strict reject)``, the
    converse), ``greedy_rescued_share``, ``sampled_reject_rate`` /
    ``sampled_reject_rate_relaxed`` / ``sampled_reject_share`` (when p and q
    are given), ``prob_ratio_at_relaxed`` (quantiles of p2/p1
    where relaxation is active), ``curves`` (per-theta lists), and
    ``histograms`` (z1, ratio clipped to [-1, 1.5], prob_ratio).
  """
  z = np.asarray(z, np.float32)
  n = int(z.shape[0])
  z1, z2, _, _ = top2(z)
  r = logit_ratio(z)
  pr = prob_ratio(z, temperature) if temperature > 0 else np.where(z1 == z2, 1.0, 0.0)
  act = relaxed_mask(z, theta, guard)
  out = {
      "n": n,
      "vocab": int(z.shape[-1]),
      "temperature": float(temperature),
      "theta": float(theta),
      "guard": bool(guard),
      "frac_negative_top1": float((z1 < 0).mean()),
      "frac_nonpositive_top1": float((z1 <= 0).mean()),
      "z1": _quantiles(z1),
      "z2": _quantiles(z2),
      "ratio": _quantiles(r),
      "prob_ratio": _quantiles(pr),
      "frac_relaxed": float(act.mean()),
      "frac_relaxed_noguard": float(relaxed_mask(z, theta, False).mean()),
      "prob_ratio_at_relaxed": _quantiles(pr[act]) if act.any() else {},
      "corr_ratio_prob_ratio": (float(np.corrcoef(r[np.isfinite(r)], pr[np.isfinite(r)])[0, 1])
                                if np.isfinite(r).sum() > 2 else float("nan")),
  }
  thetas = [float(t) for t in thetas]
  curves = {"thetas": thetas,
            "frac_relaxed": relaxed_fraction_curve(z, thetas, guard).tolist()}
  if draft_token is None and q is not None:
    draft_token = np.argmax(np.asarray(q), axis=-1)
  if draft_token is not None:
    g_out, g_curves = _greedy_rejection_stats(z, draft_token, act, theta, thetas, guard)
    out.update(g_out)
    curves.update(g_curves)
  if p is not None and q is not None:
    s_out, s_curves = _sampled_rejection_stats(z, q, p, theta, thetas, guard)
    out.update(s_out)
    curves.update(s_curves)
  out["curves"] = curves
  if with_histograms:
    out["histograms"] = {
        "z1": histogram(z1, bins),
        "ratio": histogram(np.clip(r, -1.0, 1.5), bins, (-1.0, 1.5)),
        "prob_ratio": histogram(pr, bins, (0.0, 1.0)),
    }
  return out


# --- figures -------------------------------------------------------------------------


def _plt():
  import matplotlib
  if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
    try:
      import IPython  # noqa: F401  (inline backend in notebooks)
      if IPython.get_ipython() is None:
        matplotlib.use("Agg")
    except ImportError:
      matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  return plt


def _bar_hist(ax, h: dict, **kw):
  e = np.asarray(h["edges"])
  ax.bar(e[:-1], h["counts"], width=np.diff(e), align="edge", **kw)


def plot_histograms(summary_or_z, *, temperature: float = 1.0, theta: float = 0.9,
                    bins: int = 40, title: str = ""):
  """Three panels: histogram of z1, of r = z2/z1 (theta marked), of p2/p1.

  Takes a :func:`margin_summary` dict (with histograms) or raw logits [N, V].
  """
  s = summary_or_z
  if not isinstance(s, dict):
    s = margin_summary(s, temperature=temperature, theta=theta, bins=bins)
  plt = _plt()
  fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
  hs = s["histograms"]
  _bar_hist(axes[0], hs["z1"], color="tab:blue")
  axes[0].axvline(0.0, color="k", lw=0.8)
  axes[0].set_xlabel("top-1 logit z1")
  axes[0].set_title(f"z1 (negative: {100 * s['frac_negative_top1']:.1f}%)")
  _bar_hist(axes[1], hs["ratio"], color="tab:orange")
  axes[1].axvline(s["theta"], color="r", ls="--", label=f"theta={s['theta']}")
  axes[1].set_xlabel("logit ratio r = z2 / z1 (clipped to [-1, 1.5])")
  axes[1].set_title(f"r > theta: {100 * s['frac_relaxed']:.1f}% of positions")
  axes[1].legend()
  _bar_hist(axes[2], hs["prob_ratio"], color="tab:green")
  axes[2].set_xlabel(f"probability ratio p2 / p1 (T={s['temperature']})")
  axes[2].set_title("p2 / p1")
  for ax in axes:
    ax.set_ylabel("positions")
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  return fig


def plot_ratio_scatter(z, *, theta: float = 0.9, guard: bool = True, draft_token=None,
                       max_points: int = 3000, seed: int = 0, title: str = ""):
  """Scatter of z2 vs z1 coloured by relaxation (r > theta), with the line z2 = theta z1.

  Greedy strict rejections (``draft_token`` given) are drawn as crosses.
  """
  plt = _plt()
  z1, z2, i1, _ = top2(z)
  act = relaxed_mask(z, theta, guard)
  n = len(z1)
  sel = np.arange(n)
  if n > max_points:
    sel = np.sort(np.random.RandomState(seed).choice(n, max_points, replace=False))
  fig, ax = plt.subplots(figsize=(5.2, 4.6))
  rej = None if draft_token is None else (np.asarray(draft_token) != i1)
  for mask, color, label in ((~act, "tab:blue", "strict (r <= theta)"),
                             (act, "tab:red", "relaxed (r > theta)")):
    m = mask[sel]
    s = sel[m]
    if rej is None:
      ax.scatter(z1[s], z2[s], s=6, alpha=0.5, color=color, label=label)
    else:
      ok, bad = s[~rej[s]], s[rej[s]]
      ax.scatter(z1[ok], z2[ok], s=6, alpha=0.4, color=color, label=label)
      ax.scatter(z1[bad], z2[bad], s=14, alpha=0.8, color=color, marker="x",
                 label=label + ", greedy reject")
  lo = float(min(z1.min(), z2.min(), 0.0))
  hi = float(max(z1.max(), 0.0))
  xs = np.linspace(max(lo, 0.0), hi, 50)
  ax.plot(xs, theta * xs, "k--", lw=1, label=f"z2 = {theta} z1")
  ax.plot(xs, xs, "k:", lw=0.8, label="z2 = z1")
  ax.set_xlabel("z1 (top-1 logit)")
  ax.set_ylabel("z2 (top-2 logit)")
  ax.legend(fontsize=7, loc="upper left")
  ax.set_title(title or f"relaxed: {100 * act.mean():.1f}% of positions")
  fig.tight_layout()
  return fig


def plot_theta_curves(summary: dict, *, title: str = ""):
  """Fraction of positions relaxed, P(strict reject | r > theta) (Fig. 1d) and the share of
  strict rejections with r > theta, vs theta."""
  plt = _plt()
  c = summary["curves"]
  fig, ax = plt.subplots(figsize=(5.6, 4))
  ax.plot(c["thetas"], c["frac_relaxed"], "o-", label="positions with r > theta")
  if "greedy_reject_share" in c:
    if "greedy_reject_rate_relaxed" in c:
      ax.plot(c["thetas"], c["greedy_reject_rate_relaxed"], "*-",
              label="P(greedy strict reject | r > theta) (Fig. 1d)")
    ax.plot(c["thetas"], c["greedy_reject_share"], "s-",
            label="P(r > theta | greedy strict reject)")
    ax.plot(c["thetas"], c["greedy_rescued_share"], "^-",
            label="greedy rejections MARS accepts (draft = top-2)")
  if "sampled_reject_rate_relaxed" in c:
    ax.plot(c["thetas"], c["sampled_reject_rate_relaxed"], "v-",
            label="P(sampled strict reject | r > theta)")
  if "sampled_reject_share" in c:
    ax.plot(c["thetas"], c["sampled_reject_share"], "d-",
            label="sampled rejection mass with r > theta")
  ax.axhline(0.535, color="gray", ls=":", lw=1,
             label="MARS Fig. 1d: P(strict reject | r > 0.9) = 53.5%")
  ax.set_xlabel("theta")
  ax.set_ylabel("fraction")
  ax.set_ylim(0, 1)
  ax.legend(fontsize=7)
  ax.set_title(title or "MARS relaxation region vs theta")
  fig.tight_layout()
  return fig
