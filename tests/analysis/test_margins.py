"""Margin statistics (specjax.analysis.margins) on hand-made logits with known answers."""

import jax.numpy as jnp
import numpy as np
import pytest

from specjax.analysis import margins as mg
from specjax.verifiers import get

# Five positions over V = 4 (z1, z2 in the first two slots unless noted):
#   0: z = [10, 9.5, 1, 0]   r = 0.95  relaxed at 0.9
#   1: z = [10, 5, 1, 0]     r = 0.5   strict
#   2: z = [2, 1.9, 0, 0]    r = 0.95  relaxed
#   3: z = [-1, -2, -3, -4]  z1 < 0: r = 2 -> relaxed only without the guard
#   4: z = [0, 8, 8.5, 1]    top1 = 2 (8.5), top2 = 1 (8): r = 8/8.5 = 0.941 relaxed
Z = np.array([[10.0, 9.5, 1.0, 0.0],
              [10.0, 5.0, 1.0, 0.0],
              [2.0, 1.9, 0.0, 0.0],
              [-1.0, -2.0, -3.0, -4.0],
              [0.0, 8.0, 8.5, 1.0]], np.float32)
RELAXED_09 = np.array([True, False, True, False, True])


def test_top2_and_ratios():
  z1, z2, i1, i2 = mg.top2(Z)
  np.testing.assert_array_equal(i1, [0, 0, 0, 0, 2])
  np.testing.assert_array_equal(i2, [1, 1, 1, 1, 1])
  np.testing.assert_allclose(mg.logit_ratio(Z), [0.95, 0.5, 0.95, 2.0, 8 / 8.5], rtol=1e-6)
  np.testing.assert_allclose(mg.prob_ratio(Z, 1.0), np.exp(z2 - z1), rtol=1e-6)
  np.testing.assert_allclose(mg.prob_ratio(Z, 2.0), np.exp((z2 - z1) / 2), rtol=1e-6)
  with pytest.raises(ValueError):
    mg.prob_ratio(Z, 0.0)


def test_relaxed_mask_matches_mars_rule():
  np.testing.assert_array_equal(mg.relaxed_mask(Z, 0.9), RELAXED_09)
  np.testing.assert_array_equal(mg.relaxed_mask(Z, 0.9, guard=False),
                                [True, False, True, True, True])
  for theta in (0.3, 0.9, 0.96):
    for guard in (True, False):
      rule = get("mars", theta=theta, guard=guard)
      p = jnp.asarray(np.exp(Z) / np.exp(Z).sum(1, keepdims=True))
      active = np.asarray([bool(rule.init(jnp.asarray(z), pp).active) for z, pp in zip(Z, p)])
      np.testing.assert_array_equal(mg.relaxed_mask(Z, theta, guard), active)


def test_ties_and_zero_top1():
  z = np.array([[0.0, 0.0, -1.0], [0.0, -1.0, -2.0], [3.0, 3.0, 1.0]], np.float32)
  # z1 = 0: guard -> never relaxed; bare ratio: r = 1 (0/0) and -inf.
  np.testing.assert_array_equal(mg.relaxed_mask(z, 0.9), [False, False, True])
  np.testing.assert_array_equal(mg.relaxed_mask(z, 0.9, guard=False), [True, False, True])
  _, _, i1, i2 = mg.top2(z)
  np.testing.assert_array_equal(i1, [0, 0, 0])
  np.testing.assert_array_equal(i2, [1, 1, 1])


def test_fractions_and_rejection_shares():
  np.testing.assert_allclose(mg.relaxed_fraction_curve(Z, [0.9, 0.4, 0.99]), [0.6, 0.8, 0.0])
  # Greedy draft tokens: pos 0 -> top2 (rejected, relaxed), 1 -> top2 (rejected, strict),
  # 2 -> token 3 (rejected, relaxed but not top2), 3 -> top1 (accepted), 4 -> top1 (accepted).
  draft = np.array([1, 1, 3, 0, 2])
  rej = mg.strict_rejections(Z, draft_token=draft)
  np.testing.assert_array_equal(rej, [1, 1, 1, 0, 0])
  np.testing.assert_allclose(mg.rejection_share_curve(Z, rej, [0.9, 0.4]), [2 / 3, 1.0])
  np.testing.assert_allclose(mg.rescued_share_curve(Z, draft, [0.9, 0.4, 0.99]),
                             [1 / 3, 2 / 3, 0.0])
  # q's argmax is the default draft token.
  q = np.eye(4)[draft]
  np.testing.assert_array_equal(mg.strict_rejections(Z, q), rej)
  # Sampled: rejection probability 1 - sum min(p, q).
  p = np.full((5, 4), 0.25)
  np.testing.assert_allclose(mg.strict_rejections(Z, q, p=p), np.full(5, 0.75))
  # No rejections -> nan shares.
  assert np.isnan(mg.rejection_share_curve(Z, np.zeros(5), [0.9])).all()


def test_fig1d_statistic_is_reject_rate_given_relaxed():
  """MARS Fig. 1d is P(strict reject | r > theta) (53.5% = 2590 / 4838 drafts at r > 0.9 that
  strict verification rejects), not P(r > theta | strict reject).  By hand, draft tokens
  [1, 0, 0, 0, 1]: greedy rejections at positions {0, 4} (draft != argmax [0, 0, 0, 0, 2]).
  theta = 0.9: relaxed {0, 2, 4} -> P(reject | relaxed) = 2/3, P(relaxed | reject) = 2/2 = 1;
  theta = 0.4: relaxed {0, 1, 2, 4} -> 2/4 and 1; theta = 0.99: nothing relaxed -> nan."""
  draft = np.array([1, 0, 0, 0, 1])
  rej = mg.strict_rejections(Z, draft_token=draft)
  np.testing.assert_array_equal(rej, [1, 0, 0, 0, 1])
  fig1d = mg.reject_rate_relaxed_curve(Z, rej, [0.9, 0.4, 0.99])
  np.testing.assert_allclose(fig1d[:2], [2 / 3, 0.5])
  assert np.isnan(fig1d[2])
  np.testing.assert_allclose(mg.rejection_share_curve(Z, rej, [0.9, 0.4]), [1.0, 1.0])
  s = mg.margin_summary(Z, draft_token=draft, thetas=[0.9, 0.4], theta=0.9, bins=5)
  assert s["greedy_reject_rate_relaxed"] == pytest.approx(2 / 3)
  assert s["greedy_num_relaxed"] == 3
  assert s["greedy_reject_share"] == pytest.approx(1.0)  # the converse conditional
  assert s["curves"]["greedy_reject_rate_relaxed"] == pytest.approx([2 / 3, 0.5])
  # Sampled drafts: the mean lossless rejection probability over the relaxed positions.
  w = np.array([0.1, 0.9, 0.3, 0.5, 0.2])
  np.testing.assert_allclose(mg.reject_rate_relaxed_curve(Z, w, [0.9]), [0.2])
  np.testing.assert_allclose(mg.rejection_share_curve(Z, w, [0.9]), [0.6 / 2.0])


def test_margin_summary_exact_numbers():
  draft = np.array([1, 1, 3, 0, 2])
  q = np.eye(4)[draft] * 0.9 + 0.025
  p = np.exp(Z) / np.exp(Z).sum(1, keepdims=True)
  s = mg.margin_summary(Z, q=q, p=p, thetas=[0.4, 0.9], theta=0.9, bins=10)
  assert s["n"] == 5 and s["vocab"] == 4
  assert s["frac_negative_top1"] == pytest.approx(0.2)
  assert s["frac_nonpositive_top1"] == pytest.approx(0.2)
  assert s["frac_relaxed"] == pytest.approx(0.6)
  assert s["frac_relaxed_noguard"] == pytest.approx(0.8)
  assert s["greedy_reject_rate"] == pytest.approx(0.6)
  assert s["greedy_num_rejections"] == 3
  assert s["greedy_reject_share"] == pytest.approx(2 / 3)
  assert s["greedy_reject_rate_relaxed"] == pytest.approx(2 / 3)  # rejected {0, 2} of {0, 2, 4}
  assert s["greedy_rescued_share"] == pytest.approx(1 / 3)
  assert s["greedy_draft_is_top2_share"] == pytest.approx(2 / 3)
  w = 1 - np.minimum(p, q).sum(1)
  assert s["sampled_reject_rate"] == pytest.approx(w.mean(), rel=1e-5)
  assert s["sampled_reject_share"] == pytest.approx(w[RELAXED_09].sum() / w.sum(), rel=1e-5)
  assert s["sampled_reject_rate_relaxed"] == pytest.approx(w[RELAXED_09].mean(), rel=1e-5)
  assert s["curves"]["frac_relaxed"] == pytest.approx([0.8, 0.6])
  assert sum(s["histograms"]["z1"]["counts"]) == 5
  assert sum(s["histograms"]["prob_ratio"]["counts"]) == 5
  import json
  json.dumps(s)  # JSON-ready


def test_figures_render(tmp_path):
  """The figures draw the summary's numbers: every histogram panel's bar heights
  sum to the number of positions, the theta curves' first line is the
  frac_relaxed curve, and the scatter holds max_points points."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  rng = np.random.RandomState(0)
  z = 5 + 2 * rng.randn(200, 32).astype(np.float32)
  draft = rng.randint(0, 32, 200)
  s = mg.margin_summary(z, draft_token=draft)
  for fig in (mg.plot_histograms(s), mg.plot_histograms(z)):
    for ax in fig.axes:
      assert sum(p.get_height() for p in ax.patches) == pytest.approx(200)
    plt.close(fig)
  fig = mg.plot_theta_curves(s)
  line = fig.axes[0].get_lines()[0]
  np.testing.assert_allclose(line.get_xdata(), s["curves"]["thetas"])
  np.testing.assert_allclose(line.get_ydata(), s["curves"]["frac_relaxed"])
  plt.close(fig)
  fig = mg.plot_ratio_scatter(z, draft_token=draft, max_points=50)
  n_points = sum(len(c.get_offsets()) for ax in fig.axes for c in ax.collections)
  assert 0 < n_points <= 50
  fig.savefig(tmp_path / "s.png")
  plt.close(fig)

def test_one_activation_for_the_rule_and_the_statistics(monkeypatch):
  """relaxed_mask and Mars.init both call verifiers.mars.activation (one definition)."""
  from specjax.verifiers import mars
  z1, z2, _, _ = mg.top2(Z)
  stat, active = mars.activation(z1, z2, 0.9)
  np.testing.assert_array_equal(np.asarray(active), RELAXED_09)
  np.testing.assert_allclose(np.asarray(stat), [0.95, 0.5, 0.95, 2.0, 8 / 8.5], rtol=1e-6)
  stat, active = mars.activation(z1, z2, 0.6, margin="difference")
  np.testing.assert_allclose(np.asarray(stat), z1 - z2)
  np.testing.assert_array_equal(np.asarray(active), [True, False, True, False, True])
  with pytest.raises(ValueError, match="margin='sum'"):
    mars.activation(z1, z2, 0.9, margin="sum")
  calls = []
  real = mars.activation

  def spy(*args, **kwargs):
    calls.append(kwargs)
    return real(*args, **kwargs)

  monkeypatch.setattr(mars, "activation", spy)
  mg.relaxed_mask(Z, 0.9)
  get("mars", theta=0.9).init(jnp.asarray(Z[0]), jnp.asarray(Z[0]))
  assert len(calls) == 2
