"""specjax.distributions: logits processors, sampling helpers, safe normalisation,
residuals and allowed sets (no torch; the transformers peer
comparison lives in tests/models/test_hf_peer.py): parameter validation, the defining
property of each filter, greedy, and the sampler drawing from the stated
distribution."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import distributions as smp
from specjax.distributions import SamplingConfig


@pytest.mark.parametrize("kwargs, match", [
    (dict(temperature=-0.5), r"temperature=-0.5 is outside the allowed range \[0.0, inf\)"),
    (dict(temperature=float("nan")), r"temperature=nan is outside the allowed range \[0.0, inf\)"),
    (dict(temperature=float("inf")), r"temperature=inf is outside the allowed range \[0.0, inf\)"),
    (dict(temperature="1"), r"temperature='1' \(str\) is not a number; give a float in \[0.0, inf\)"),
    (dict(top_k=-1), r"top_k=-1 must be an integer >= 0"),
    (dict(top_k=2.5), r"top_k=2.5 \(float\) must be an integer >= 0"),
    (dict(top_p=0.0), r"top_p=0.0 is outside the allowed range \(0.0, 1.0\]"),
    (dict(top_p=1.5), r"top_p=1.5 is outside the allowed range \(0.0, 1.0\]"),
    (dict(top_p=-0.1), r"top_p=-0.1 is outside the allowed range \(0.0, 1.0\]"),
    (dict(min_p=-0.1), r"min_p=-0.1 is outside the allowed range \[0.0, 1.0\]"),
    (dict(min_p=1.1), r"min_p=1.1 is outside the allowed range \[0.0, 1.0\]"),
    (dict(eta=1.0), r"eta=1.0 is outside the allowed range \[0.0, 1.0\)"),
    (dict(eta=-0.01), r"eta=-0.01 is outside the allowed range \[0.0, 1.0\)"),
])
def test_bad_sampling_parameters(kwargs, match):
  with pytest.raises(ValueError, match=match):
    SamplingConfig(**kwargs)


def test_config_is_hashable_and_greedy_flag():
  assert hash(SamplingConfig(temperature=0.7, top_k=5)) == hash(SamplingConfig(0.7, 5))
  assert SamplingConfig(temperature=0.0).greedy and SamplingConfig(temperature=0).greedy
  assert not SamplingConfig().greedy


LOGITS = jnp.asarray(np.random.RandomState(0).randn(6, 50).astype(np.float32) * 2.0)


def _p(x):
  return np.asarray(jax.nn.softmax(x, axis=-1))


def test_top_k_keeps_exactly_k():
  out = np.asarray(smp.top_k_filter(LOGITS, 5))
  assert (np.isfinite(out).sum(-1) == 5).all()
  kept_min = np.where(np.isfinite(out), out, np.inf).min(-1)
  dropped_max = np.where(np.isfinite(out), -np.inf, np.asarray(LOGITS)).max(-1)
  assert (kept_min > dropped_max).all()
  assert np.isfinite(np.asarray(smp.top_k_filter(LOGITS, 1000))).all()  # k > V: no-op


def test_top_p_keeps_smallest_nucleus():
  p = _p(LOGITS)
  for top_p in (0.05, 0.5, 0.9):
    kept = np.isfinite(np.asarray(smp.top_p_filter(LOGITS, top_p)))
    for row_p, row_kept in zip(p, kept):
      mass = row_p[row_kept].sum()
      assert mass >= top_p - 1e-6 or row_kept.sum() == 1
      # minimal: dropping the least likely kept token goes below top_p
      assert mass - row_p[row_kept].min() < top_p + 1e-6
      assert row_p[row_kept].min() >= row_p[~row_kept].max(initial=0.0)


def test_min_p_threshold():
  p = _p(LOGITS)
  kept = np.isfinite(np.asarray(smp.min_p_filter(LOGITS, 0.2)))
  np.testing.assert_array_equal(kept, p >= 0.2 * p.max(-1, keepdims=True))


def test_eta_threshold_and_keeps_top():
  eta = 0.05
  p = _p(LOGITS)
  h = -(p * np.log(p)).sum(-1, keepdims=True)
  thresh = np.minimum(eta, math.sqrt(eta) * np.exp(-h))
  kept = np.isfinite(np.asarray(smp.eta_filter(LOGITS, eta)))
  np.testing.assert_array_equal(kept, (p >= thresh) | (p == p.max(-1, keepdims=True)))
  # a peaked row (low entropy: threshold = eta) keeps only its top token
  peaked = jnp.zeros((1, 50)).at[0, 3].set(10.0)
  assert np.isfinite(np.asarray(smp.eta_filter(peaked, eta))).tolist()[0] == [
      i == 3 for i in range(50)]


def test_entropy_nats():
  np.testing.assert_allclose(np.asarray(smp.entropy_nats(jnp.full((4,), 0.25))), math.log(4),
                             rtol=1e-6)
  assert float(smp.entropy_nats(jnp.array([1.0, 0.0, 0.0]))) == 0.0


def test_temperature_and_disabled_filters():
  cfg = SamplingConfig(temperature=0.5)
  np.testing.assert_allclose(np.asarray(smp.process_logits(LOGITS, cfg)),
                             np.asarray(LOGITS) / 0.5, rtol=1e-6)
  probs = np.asarray(smp.probs_from_logits(LOGITS, SamplingConfig()))
  np.testing.assert_allclose(probs, _p(LOGITS), atol=1e-7)


def test_greedy_is_one_hot_argmax():
  cfg = SamplingConfig(temperature=0.0, top_k=3)  # processors ignored at T = 0
  probs = np.asarray(smp.probs_from_logits(LOGITS, cfg))
  np.testing.assert_array_equal(probs, np.eye(50)[np.asarray(LOGITS).argmax(-1)])
  tok, _ = smp.sample_logits(jax.random.key(0), LOGITS, cfg)
  np.testing.assert_array_equal(np.asarray(tok), np.asarray(LOGITS).argmax(-1))


def test_sampler_draws_from_filtered_distribution():
  """Empirical frequencies of 20k draws match the processed distribution
  (chi-square-style bound) and filtered-out tokens are never drawn."""
  logits = jnp.asarray(np.random.RandomState(1).randn(12).astype(np.float32))
  cfg = SamplingConfig(temperature=0.8, top_k=6, top_p=0.95)
  n = 20000
  keys = jax.random.split(jax.random.key(0), n)
  toks, probs = jax.vmap(lambda k: smp.sample_logits(k, logits, cfg))(keys)
  p = np.asarray(probs[0])
  counts = np.bincount(np.asarray(toks), minlength=12)
  assert (counts[p == 0] == 0).all() and (p == 0).sum() >= 6
  freq = counts / n
  se = np.sqrt(p * (1 - p) / n)
  assert (np.abs(freq - p) <= 5 * se + 1e-9).all()
  assert abs(p.sum() - 1) < 1e-6


def test_safe_normalize_and_residual():
  w = jnp.array([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0]])
  fb = jnp.array([[0.2, 0.3, 0.5], [0.5, 0.25, 0.25]])
  np.testing.assert_allclose(smp.safe_normalize(w, fb), [[0.25, 0.75, 0.0], [0.5, 0.25, 0.25]])
  p, q = jnp.array([0.5, 0.3, 0.2]), jnp.array([0.2, 0.6, 0.2])
  np.testing.assert_allclose(smp.residual(p, q), [1.0, 0.0, 0.0])
  np.testing.assert_array_equal(smp.residual(p, p), p)  # no mass left: p itself, no NaN
  # batched rows are normalised one by one
  np.testing.assert_allclose(smp.residual(jnp.stack([p, q]), jnp.stack([q, p])),
                             [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], atol=1e-6)


def test_processors_keep_the_allowed_sets():
  """min-p and eta processors keep exactly the truncation rules' allowed sets."""
  logits = jax.random.normal(jax.random.key(3), (16, 40)) * 3.0
  probs = jax.nn.softmax(logits, axis=-1)
  for value in (0.05, 0.2):
    kept = smp.min_p_filter(logits, value) > smp.NEG_INF
    np.testing.assert_array_equal(kept, smp.allowed_set_min_p(probs, value))
    kept = smp.eta_filter(logits, value) > smp.NEG_INF
    np.testing.assert_array_equal(kept, smp.allowed_set_eta(probs, value))
