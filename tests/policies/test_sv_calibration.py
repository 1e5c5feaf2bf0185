"""SV calibration table, information report, save/load refusal, latency profile."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models.config import ModelConfig
from specjax.models.transformer import Model
from specjax.policies import calibration as cal
from specjax.policies import latency as lat_lib


def _h(p):
  return 0.0 if p in (0.0, 1.0) else -(p * math.log2(p) + (1 - p) * math.log2(1 - p))


def _hand_data():
  """Four (S, A) cells of 10 records each with 2, 8, 3, 9 acceptances."""
  cells = [((0.1, 0.2), 2), ((0.1, 0.9), 8), ((0.6, 0.2), 3), ((0.6, 0.9), 9)]
  s, a, x = [], [], []
  for (sv, av), k in cells:
    s += [sv] * 10
    a += [av] * 10
    x += [1] * k + [0] * (10 - k)
  return np.array(s), np.array(a), np.array(x)


def test_fit_fixed_grid_frequencies_and_laplace():
  s, a, x = _hand_data()
  e = cal.fixed_edges(2)
  f = cal.fit_table(s, a, x, e, e, alpha=1.0)
  np.testing.assert_array_equal(f.counts, [[10, 10], [10, 10]])
  np.testing.assert_array_equal(f.accepts, [[2, 8], [3, 9]])
  np.testing.assert_allclose(f.freq, [[0.2, 0.8], [0.3, 0.9]])
  np.testing.assert_allclose(f.p_hat, [[3 / 12, 9 / 12], [4 / 12, 10 / 12]])  # (k+1)/(n+2)
  f0 = cal.fit_table(s, a, x, e, e, alpha=0.0)
  np.testing.assert_allclose(f0.p_hat, f0.freq)
  # Empty bins get the prior; "marginal" prior = overall accept rate.
  e4 = cal.fixed_edges(4)
  fm = cal.fit_table(s, a, x, e4, e4, alpha=1.0, prior="marginal")
  assert fm.counts[3, 3] == 0 and np.isclose(fm.p_hat[3, 3], 22 / 40)
  # Lookup (jnp, traceable) agrees with the host prediction; edge values.
  t = f.table()
  sq = jnp.asarray([0.0, 0.49, 0.5, 1.0])
  aq = jnp.asarray([1.0, 0.0, 0.99, 0.5])
  np.testing.assert_allclose(jax.jit(t.lookup)(sq, aq), f.predict(np.asarray(sq), np.asarray(aq)),
                             rtol=1e-6)
  np.testing.assert_allclose(t.lookup(sq, aq), [9 / 12, 3 / 12, 10 / 12, 10 / 12], rtol=1e-6)
  with pytest.raises(ValueError, match="0/1"):
    cal.fit_table(s, a, x * 2, e, e)
  with pytest.raises(ValueError, match="increasing"):
    cal.fit_table(s, a, x, np.array([0.0, 0.5, 0.5, 1.0]), e)


def test_fit_random_matches_bin_frequencies():
  rs = np.random.RandomState(0)
  n = 20000
  s, a = rs.rand(n), rs.rand(n)
  a[rs.rand(n) < 0.3] = 1.0  # point mass at A = 1, as with real drafts
  x = (rs.rand(n) < 0.2 + 0.7 * a * s).astype(np.int8)
  se, ae = cal.quantile_edges(s, 5), cal.quantile_edges(a, 5)
  f = cal.fit_table(s, a, x, se, ae, alpha=0.0)
  si, ai = cal.np_bin_index(se, s), cal.np_bin_index(ae, a)
  for i in range(len(se) - 1):
    for j in range(len(ae) - 1):
      m = (si == i) & (ai == j)
      assert f.counts[i, j] == m.sum()
      if m.any():
        assert np.isclose(f.p_hat[i, j], x[m].mean())
  assert f.counts.sum() == n
  # p_hat rises with A and S (the generating probability does).
  assert np.all(np.diff(f.p_hat[-1]) > 0) and np.all(np.diff(f.p_hat[:, -1]) > 0)


def test_quantile_edges_monotone_and_adaptive():
  rs = np.random.RandomState(1)
  v = rs.beta(5, 1, size=5000)  # dense near 1
  e = cal.quantile_edges(v, 8)
  assert e[0] == 0.0 and e[-1] == 1.0 and np.all(np.diff(e) > 0) and len(e) == 9
  counts = np.bincount(cal.np_bin_index(e, v), minlength=8)
  assert counts.min() > 0.9 * 5000 / 8 and counts.max() < 1.1 * 5000 / 8  # equal mass
  assert e[4] > 0.8  # finer bins where the data is dense
  # A point mass merges quantiles: fewer, still strictly increasing edges.
  a = np.concatenate([np.ones(700), rs.rand(300)])
  ea = cal.quantile_edges(a, 10)
  assert np.all(np.diff(ea) > 0) and ea[-1] == 1.0 and len(ea) - 1 < 10
  assert np.all(cal.np_bin_index(ea, np.ones(3)) == len(ea) - 2)  # A = 1 in the last bin


def test_information_report_by_hand():
  s, a, x = _hand_data()
  e = cal.fixed_edges(2)
  r = cal.information_report(s, a, x, e, e)
  hx = _h(22 / 40)
  hs = 0.5 * _h(10 / 20) + 0.5 * _h(12 / 20)
  hsa = 0.25 * (_h(0.2) + _h(0.8) + _h(0.3) + _h(0.9))
  assert np.isclose(r["H_X"], hx) and np.isclose(r["H_X_given_S"], hs)
  assert np.isclose(r["H_X_given_SA"], hsa)
  assert np.isclose(r["ig_SA"], hx - hsa) and np.isclose(r["ig_S"], hx - hs)
  # A is informative: most of the gain comes from adding A.
  assert r["ig_SA"] > 10 * r["ig_S"] > 0
  np.testing.assert_allclose([hx, hs, hsa], [0.992774, 0.985475, 0.698536], atol=1e-6)


def test_information_a_informative_synthetic():
  rs = np.random.RandomState(2)
  n = 40000
  s, a = rs.rand(n), rs.rand(n)
  x = (rs.rand(n) < np.where(a > 0.5, 0.95, 0.05)).astype(int)  # depends on A only
  e = cal.fixed_edges(4)
  r = cal.information_report(s, a, x, e, e)
  assert abs(r["H_X"] - 1.0) < 0.01
  assert r["ig_S"] < 0.01  # S carries nothing
  assert abs(r["H_X_given_SA"] - _h(0.05)) < 0.02 and r["ig_frac"] > 0.65
  f = cal.fit_table(s, a, x, e, e)
  held = cal.log_loss_bits(f.predict(s, a), x)
  assert abs(held - r["H_X_given_SA"]) < 0.01


def _tiny_models():
  cfg = ModelConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                    num_attention_heads=2, num_key_value_heads=1, head_dim=8)
  return Model(cfg), Model(cfg.replace(hidden_size=32)), Model(cfg.replace(num_hidden_layers=2))


def test_table_save_load_refuses_other_triple(tmp_path):
  t, d, c = _tiny_models()
  s, a, x = _hand_data()
  e = cal.fixed_edges(2)
  f = cal.fit_table(s, a, x, e, e)
  ids = {"target": cal.model_id(t), "draft": cal.model_id(d), "companion": cal.model_id(c)}
  path = str(tmp_path / "tab")
  cal.save_table(path, f, {"models": ids, "verifier": "lossless", "sampling": "T=1"})
  g, meta = cal.load_table(path, models=ids, verifier="lossless")
  np.testing.assert_array_equal(g.p_hat, f.p_hat)
  np.testing.assert_array_equal(g.s_edges, f.s_edges)
  assert meta["num_records"] == 40
  swapped = dict(ids, draft=cal.model_id(c), companion=cal.model_id(d))
  with pytest.raises(ValueError, match="models.draft.config.*models.companion.config"):
    cal.load_table(path, models=swapped)
  with pytest.raises(ValueError, match="verifier"):
    cal.load_table(path, models=ids, verifier="mars")
  with pytest.raises(ValueError, match="sampling"):
    cal.load_table(path, models=ids, sampling="T=0")
  with pytest.raises(ValueError, match="models"):
    cal.save_table(path, f, {"verifier": "lossless"})
  # Params identity: same config, different weights -> refused.
  p1 = {"w": np.ones((2, 2), np.float32)}
  p2 = {"w": np.zeros((2, 2), np.float32)}
  ids_p = dict(ids, target=cal.model_id(t, p1))
  cal.save_table(path, f, {"models": ids_p, "verifier": "lossless"})
  cal.load_table(path, models=ids_p)
  with pytest.raises(ValueError, match="models.target.params"):
    cal.load_table(path, models=dict(ids, target=cal.model_id(t, p2)))


def test_latency_profile_measure_save_load_refuse(tmp_path):
  t, d, _ = _tiny_models()
  params = t.init_params(jax.random.key(0))
  prof = lat_lib.measure_profile(t, params, batch_sizes=[1], gammas=[0, 1],
                                 cache_length=16, repeats=2, warmup=0)
  assert prof.batch_sizes == (1,) and prof.gammas == (0, 1)
  assert np.all(np.asarray(prof.latency_s) > 0)
  path = str(tmp_path / "prof.json")
  lat_lib.save_profile(path, prof)
  got = lat_lib.load_profile(path, model_config=t.config, cache_length=16)
  assert got == prof
  with pytest.raises(ValueError, match="hidden_size"):
    lat_lib.load_profile(path, model_config=d.config)
  with pytest.raises(ValueError, match="cache_length"):
    lat_lib.load_profile(path, model_config=t.config, cache_length=32)
  with pytest.raises(ValueError, match="device"):
    lat_lib.load_profile(path, device="TPU v5 lite")
  # Interpolation / range checks.
  fake = dataclasses.replace(prof, batch_sizes=(1, 3), gammas=(0, 2),
                             latency_s=((1.0, 3.0), (2.0, 6.0)))
  np.testing.assert_allclose(fake.latency_vector(2, 2), [1.5, 3.0, 4.5])
  tot = fake.total_tokens_vector(2, 2)  # B(g+1) tokens: 2 -> 1.5, 4 -> 3.0, 6 -> 4.5
  np.testing.assert_allclose(tot[[0, 2, 3, 4, 6]], [1.5, 1.5, 2.25, 3.0, 4.5])
  with pytest.raises(ValueError, match="batch_size"):
    fake.latency_vector(4, 2)
  with pytest.raises(ValueError, match="K=3"):
    fake.latency_vector(2, 3)


def test_load_sv_params_checks_both_files(tmp_path):
  from specjax.policies.sv import SpeculativeVerification, load_sv_params
  t, d, c = _tiny_models()
  s, a, x = _hand_data()
  e = cal.fixed_edges(2)
  ids = {"target": cal.model_id(t), "draft": cal.model_id(d), "companion": cal.model_id(c)}
  cal.save_table(str(tmp_path / "tab"), cal.fit_table(s, a, x, e, e),
                 {"models": ids, "verifier": "Lossless()"})
  prof = lat_lib.LatencyProfile(cal.config_hash(t.config), {}, 16, 8, "dev", "cpu", (1, 4),
                                (0, 1, 2), ((1.0, 2.0, 3.0), (2.0, 3.0, 4.0)))
  lat_lib.save_profile(str(tmp_path / "prof.json"), prof)
  pol = SpeculativeVerification(2, companion=c)
  params = load_sv_params(pol, {}, str(tmp_path / "tab"), str(tmp_path / "prof.json"), 2,
                          models=ids, verifier="Lossless()", target_config=t.config,
                          device="dev")
  np.testing.assert_allclose(params["latency"], [4 / 3, 7 / 3, 10 / 3], rtol=1e-6)
  assert params["latency_total"].shape == (2 * 3 + 1,)
  np.testing.assert_allclose(params["table"].p_hat, [[0.25, 0.75], [1 / 3, 10 / 12]], rtol=1e-6)
  with pytest.raises(ValueError, match="model config"):
    load_sv_params(pol, {}, str(tmp_path / "tab"), str(tmp_path / "prof.json"), 2, models=ids,
                   target_config=d.config, device="dev")
  with pytest.raises(ValueError, match="models.target"):
    load_sv_params(pol, {}, str(tmp_path / "tab"), str(tmp_path / "prof.json"), 2,
                   models=dict(ids, target=cal.model_id(d)), device="dev")


def test_latency_vector_monotone():
  prof = lat_lib.LatencyProfile("h", {}, 16, 8, "dev", "cpu", (1,), (0, 1, 2, 3),
                                ((1.0, 3.0, 2.0, 4.0),))
  np.testing.assert_allclose(prof.latency_vector(1, 3), [1.0, 3.0, 3.0, 4.0])
  np.testing.assert_allclose(prof.latency_vector(1, 3, monotone=False), [1.0, 3.0, 2.0, 4.0])


@pytest.mark.slow
def test_calibrate_binary_tiny(tmp_path):
  from experiments.sv import calibrate as calibrate_sv
  from experiments.configs import sv_tiny
  c = sv_tiny.get_config()
  c.workdir = str(tmp_path)
  rep = calibrate_sv.run(c)
  assert rep["num_records"] > 50 and 0 < rep["accept_rate"] < 1
  for name in ("fixed", "quantile"):
    info = rep["tables"][name]["info"]
    assert 0 <= info["H_X_given_SA"] <= info["H_X_given_S"] + 1e-9 <= info["H_X"] + 2e-9
  prof = lat_lib.load_profile(str(tmp_path / "profile.json"))
  assert prof.batch_sizes == (1, 8)


def test_quantile_edges_merge_float_noise_point_mass():
  v = np.concatenate([np.ones(500), 1 - 1e-7 * np.arange(500), np.linspace(0, 1, 100)])
  e = cal.quantile_edges(v, 10)
  assert np.all(np.diff(e) >= 1e-3) and e[-1] == 1.0 and e[-2] < 0.999


def test_the_drafting_lm_is_refused_as_its_own_companion():
  """Drafter "draft" with companion "lm:draft": P_c = P_d, so S = A = 1 at every draft
  (the calibration run that tried it recorded IG = 0 exactly). Refused before any model
  loads, naming both settings."""
  import ml_collections
  from experiments.sv import calibrate
  c = ml_collections.ConfigDict(dict(models="smollm2-135m-instruct", drafter="draft",
                                     companion="lm:draft", seed=0))
  with pytest.raises(ValueError, match="companion='lm:draft' is the drafter='draft' LM itself"):
    calibrate.load_models(c)
