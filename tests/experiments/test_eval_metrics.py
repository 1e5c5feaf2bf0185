"""Bootstrap intervals and the HumanEval summary, against hand computations."""

import numpy as np
import pytest

from experiments.common.bootstrap import (bootstrap_ci, bootstrap_distribution, bootstrap_sums,
                                           paired_ratio_gain)
from experiments.humaneval.run import batch_configs
from experiments.humaneval.summary import summarize


def test_bootstrap_ci_of_a_constant_is_the_constant():
  assert bootstrap_ci([0.25] * 10) == (0.25, 0.25)


def test_bootstrap_ci_matches_the_normal_approximation():
  """n = 400 Bernoulli(0.3) draws: the percentile interval of the mean is close to
  mean +- 1.96 sqrt(p (1 - p) / n) (CLT; +-0.045 here); 0.01 slack covers the
  Monte Carlo error of 4000 resamples (~0.003) and the discreteness of the mean."""
  x = (np.random.default_rng(1).random(400) < 0.3).astype(float)
  lo, hi = bootstrap_ci(x, num_resamples=4000)
  m, half = x.mean(), 1.96 * np.sqrt(x.mean() * (1 - x.mean()) / len(x))
  assert abs(lo - (m - half)) < 0.01 and abs(hi - (m + half)) < 0.01


def test_bootstrap_ci_of_a_ratio_resamples_pairs():
  rows = np.array([[4.0, 1.0], [2.0, 1.0], [6.0, 2.0]])  # tau per prompt 4, 2, 3
  lo, hi = bootstrap_ci(rows, statistic=lambda a: a[:, 0].sum() / a[:, 1].sum())
  assert 2.0 <= lo <= 3.0 <= hi <= 4.0


def test_bootstrap_sums_are_the_sums_of_the_same_resamples():
  """``bootstrap_sums`` draws the resamples ``bootstrap_distribution`` draws with the same
  seed, so the sums agree resample by resample ([7, 2, 3] values; another seed's do
  not); and the paired ratio gain it serves equals the one computed resample by
  resample with ``bootstrap_distribution`` (the way it was computed before)."""
  x = np.random.default_rng(2).random((7, 2, 3))
  got = bootstrap_sums(x, 300, seed=5)
  want = bootstrap_distribution(x.reshape(7, -1), lambda a: a.sum(0), 300, seed=5)
  np.testing.assert_allclose(got.reshape(300, -1), want, rtol=1e-12)
  assert not np.allclose(bootstrap_sums(x, 300, seed=6), got)
  a, b = np.abs(x[:, 0, :2]) + 0.1, np.abs(x[:, 1, :2]) + 0.1
  both = np.concatenate([a, b], 1)
  ratio = lambda z: (z[:, 0].sum() / z[:, 1].sum()) / (z[:, 2].sum() / z[:, 3].sum()) - 1
  draws = bootstrap_distribution(both, ratio, 500, seed=0)
  gain = paired_ratio_gain(a, b, num_resamples=500)
  np.testing.assert_allclose(gain["ci95"], np.quantile(draws, [0.025, 0.975]), rtol=1e-12)
  np.testing.assert_allclose(gain["diff"], ratio(both), rtol=1e-12)
  with pytest.raises(ValueError, match="non-empty"):
    bootstrap_sums([])


def test_bootstrap_ci_refuses_bad_input():
  with pytest.raises(ValueError, match="non-empty"):
    bootstrap_ci([])
  with pytest.raises(ValueError, match="alpha=1.5"):
    bootstrap_ci([1.0], alpha=1.5)


def test_humaneval_batches_and_summary():
  cfgs = batch_configs(5, 2, [0.0, 1.0], samples=3, settings="s")
  assert [c["key"] for c in cfgs[:3]] == ["s-T0-s0-p0", "s-T0-s0-p2", "s-T0-s0-p4"]
  assert len(cfgs) == 3 + 3 * 3 and cfgs[2]["stop"] == 5
  # T=1: problem A passes 2 of 3 samples, B 0 of 3 -> pass@1 = (2/3 + 0) / 2 = 1/3
  recs = [{"config": {"temperature": 1.0}, "result": {"problems": [
      {"task_id": "A", "passed": s < 2}, {"task_id": "B", "passed": False}]}} for s in range(3)]
  recs.append({"config": {"temperature": 0.0}, "result": {"problems": [
      {"task_id": "A", "passed": True}, {"task_id": "B", "passed": False}]}})
  rows = {r["temperature"]: r for r in summarize(recs)}
  assert rows[1.0]["pass@1"] == pytest.approx(1 / 3) and rows[1.0]["samples_per_problem"] == 3
  assert rows[0.0]["pass@1"] == 0.5 and rows[0.0]["ci95"][0] <= 0.5 <= rows[0.0]["ci95"][1]


def test_paired_repeats_alternate_which_side_runs_first():
  """The main job's paired timing runs target-only first where repeat + batch is even
  and the speculative row first where it is odd (an order effect then falls on both
  sides), and pairs each side's own output and time with its batch."""
  import types

  import jax.numpy as jnp
  from experiments.common.row_stats import SpecSums
  from experiments.compare import evaluation
  from specjax.decoding.loop_state import SpecStats
  order = []

  class Out:
    def __init__(self, side, batch):
      self.side, self.batch = side, batch
      self.stats = SpecStats.plain(jnp.ones((len(batch),), jnp.int32), 2, 3, 1)

    def to_lists(self):
      return [[self.side, *row] for row in self.batch]

  def run(side):
    def call(batch, key, bi):
      order.append((side, key, bi))
      return Out(side, batch)
    return call

  ctx = types.SimpleNamespace(c=types.SimpleNamespace(timing={}), cache={})
  batches = [[[1]], [[2]]]
  rep = evaluation._paired_repeats(ctx, ["k0", "k1"], batches, 1, run("t"), run("s"),
                                   ("target",), SpecSums(2))
  assert order == [("t", "k0", 0), ("s", "k0", 0), ("s", "k0", 1), ("t", "k0", 1),
                   ("s", "k1", 0), ("t", "k1", 0), ("t", "k1", 1), ("s", "k1", 1)]
  assert rep.outs_target == [[["t", 1]], [["t", 2]]] * 2
  assert rep.outs_spec == [[["s", 1]], [["s", 2]]] * 2
  assert len(rep.ratios) == 2 and all(r > 0 for r in rep.ratios)
