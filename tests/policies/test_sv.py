"""Speculative Verification policy: goodput search, batch allocation, companion
cache protocol, record collection."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.decoding.drafters import LMDrafter
from specjax.decoding.proposal import Proposal
from specjax.distributions import SamplingConfig, probs_from_logits
from specjax.policies import (ConstantGamma, FixedLength, SpeculativeVerification, bucket_index,
                              choose_batch_max, choose_batch_total, choose_row,
                              climb_until_decrease, default_buckets, expected_accepted, goodput, hill_climb,
                              round_up, uninformative_table)
from specjax.policies.calibration import CalibrationTable
from specjax.policies.sv_collect import collect_records
from tests.helpers import independent_draft

# An 8-token rollout of the goodput search (docs/spec.md §5), our own numbers: K = 8 drafts.
P8 = [0.9, 0.9, 0.8, 0.7, 0.3, 0.1, 0.1, 0.1]
LAT8 = [4.0 + 0.3 * g for g in range(9)]  # ms for gamma = 0..8


def test_expected_accepted_and_goodput_by_hand():
  en = np.asarray(expected_accepted(jnp.asarray(P8)))
  # E[N|g] = sum_{n<=g} prod_{i<=n} P_i
  prods = [0.9, 0.81, 0.648, 0.4536, 0.13608, 0.013608, 0.0013608, 0.00013608]
  np.testing.assert_allclose(en, np.concatenate([[0.0], np.cumsum(prods)]), rtol=1e-6)
  np.testing.assert_allclose(en[4], 2.8116, rtol=1e-6)
  np.testing.assert_allclose(en[7], 2.9626488, rtol=1e-6)
  g = np.asarray(goodput(jnp.asarray(P8), jnp.asarray(LAT8)))
  np.testing.assert_allclose(g[0], 1 / 4.0, rtol=1e-6)
  np.testing.assert_allclose(g[4], 3.8116 / 5.2, rtol=1e-6)  # 0.7330
  np.testing.assert_allclose(g[7], 3.9626488 / 6.1, rtol=1e-6)  # 0.6496 (fixed K=7)
  assert g[4] == g.max()
  assert g[4] / g[7] > 1.12  # fixed-7 is >= 11% slower here


def test_hill_climb_picks_four_not_seven():
  gamma = choose_row(jnp.asarray([P8]), jnp.asarray(LAT8), jnp.asarray([True]))
  assert int(gamma[0]) == 4
  # Inactive rows verify nothing.
  gamma = choose_row(jnp.asarray([P8, P8]), jnp.asarray(LAT8), jnp.asarray([True, False]))
  assert gamma.tolist() == [4, 0]


def test_hill_climb_semantics():
  # Stops at the first non-increase even when a later value is larger.
  assert int(hill_climb(jnp.asarray([1.0, 2.0, 1.5, 3.0]))) == 1
  assert int(hill_climb(jnp.asarray([1.0, 1.0, 3.0]))) == 0  # ties stop
  assert int(hill_climb(jnp.asarray([1.0, 2.0, 3.0]))) == 2
  # climb_until_decrease (docs/spec.md §5): ties continue, the first decrease stops.
  assert int(climb_until_decrease(jnp.asarray([1.0, 1.0, 3.0]))) == 2
  assert int(climb_until_decrease(jnp.asarray([1.0, 2.0, 1.5, 3.0]))) == 1
  assert int(climb_until_decrease(jnp.asarray([2.0, 1.0]))) == 0
  # The earlier search: gamma = 0 when goodput(1) < goodput(0) (first draft hopeless).
  p = jnp.asarray([[0.05, 0.9, 0.9]])
  lat = jnp.asarray([1.0, 1.5, 1.6, 1.7])
  active = jnp.asarray([True])
  assert choose_row(p, lat, active, "from0_nonincrease").tolist() == [0]
  # Free verification (flat latency) and certain acceptance: verify everything.
  for search in ("from1_decrease", "from0_nonincrease"):
    assert choose_row(jnp.ones((1, 3)), jnp.ones(4), active, search).tolist() == [3]
  with pytest.raises(ValueError, match="search='up'"):
    choose_row(p, lat, active, "up")


def test_row_search_from_one_stops_at_first_decrease():
  """docs/spec.md §5 by hand.  p_hat = [0.05, 0.9, 0.9], latency = [1, 1.5, 1.6, 1.7]:
  goodput = [1/1, 1.05/1.5, 1.095/1.6, 1.1355/1.7] = [1.0, 0.700, 0.684, 0.668]:
  from gamma = 1 the first step already decreases -> gamma = 1 (the old search: 0).
  Ties continue: with flat goodput 2 -> 3 the search goes on to the next decrease."""
  p = jnp.asarray([[0.05, 0.9, 0.9]])
  lat = jnp.asarray([1.0, 1.5, 1.6, 1.7])
  active = jnp.asarray([True, False])
  assert choose_row(jnp.tile(p, (2, 1)), lat, active).tolist() == [1, 0]
  # goodput(gamma) for p_hat = [1, 1, 0, ...]: E[N] = 0, 1, 2, 2, 2; latency chosen so that
  # goodput = [1, 1.2, 1.5, 1.5, 1.0]: rises, rises, tie, decrease -> gamma = 3 (old: 2).
  p2 = jnp.asarray([[1.0, 1.0, 0.0, 0.0]])
  lat2 = jnp.asarray([1.0, 2.0 / 1.2, 2.0, 2.0, 3.0])
  assert choose_row(p2, lat2, jnp.asarray([True])).tolist() == [3]
  assert choose_row(p2, lat2, jnp.asarray([True]), "from0_nonincrease").tolist() == [2]
  # P8 rollout: both searches pick 4 (goodput rises strictly up to 4, then falls).
  for search in ("from1_decrease", "from0_nonincrease"):
    assert choose_row(jnp.asarray([P8]), jnp.asarray(LAT8), jnp.asarray([True]),
                      search).tolist() == [4]


def test_batch_total_greedy_row_gets_zero():
  # Row 0 confident, row 1 hopeless. Marginals: row0 [0.9, 0.81], row1 [0.05, 0.025].
  p = jnp.asarray([[0.9, 0.9], [0.05, 0.5]])
  tot = jnp.asarray([1.0 + 0.2 * max(0, t - 2) for t in range(7)])  # by total tokens
  # G(0) = 2/1, G(1) = 2.9/1.2 = 2.417, G(2) = 3.71/1.4 = 2.65, G(3) = 3.76/1.6 = 2.35 -> stop
  gamma = choose_batch_total(p, tot, jnp.asarray([True, True]))
  assert gamma.tolist() == [2, 0]
  # Flat latency: every positive marginal is worth adding.
  gamma = choose_batch_total(p, jnp.ones(7), jnp.asarray([True, True]))
  assert gamma.tolist() == [2, 2]
  # An inactive row is never given tokens and does not count as a token.
  gamma = choose_batch_total(p, jnp.ones(7), jnp.asarray([False, True]))
  assert gamma.tolist() == [0, 2]


def test_batch_total_prefix_property_with_ties():
  p = jnp.asarray([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
  # Latency rises after 2 + 3 = 5 total tokens; gains are 1 for 5 tokens, then 0.
  tot = jnp.asarray([1.0] * 6 + [2.0] * 3)
  gamma = choose_batch_total(p, tot, jnp.asarray([True, True]))
  assert gamma.tolist() == [2, 1]  # ties round robin: (0,0), (1,0), (0,1)


def test_batch_max_levels():
  p = jnp.asarray([[0.9] * 4, [0.1] * 4, [0.9] * 4])
  active = jnp.asarray([True, True, False])
  # E rows (active): [0, .9, 1.71, 2.439, 3.0951] and [0, .1, .11, .111, .1111]
  # levels 0, 1, 2, 4 -> tokens 2, 3.0, 3.82, 5.2062
  lat = jnp.asarray([1.0, 1.1, 1.2, 1.5, 2.0])
  g = choose_batch_max(p, lat, active, (0, 1, 2, 4))  # G: 2, 2.73, 3.18, 2.60 -> level 2
  assert g.tolist() == [2, 2, 0]
  lat = jnp.asarray([1.0, 1.1, 1.2, 1.3, 1.4])  # G(4) = 3.72 > 3.18 -> level 4
  assert choose_batch_max(p, lat, active, (0, 1, 2, 4)).tolist() == [4, 4, 0]
  lat = jnp.asarray([1.0, 2.0, 3.0, 4.0, 5.0])  # G(1) = 1.5 < 2 -> level 0
  assert choose_batch_max(p, lat, active, (0, 1, 2, 4)).tolist() == [0, 0, 0]


def test_buckets_helpers():
  assert default_buckets(8) == (0, 1, 2, 4, 8)
  assert default_buckets(7) == (0, 1, 2, 4, 7)
  b = (0, 1, 2, 4, 7)
  assert int(bucket_index(b, jnp.asarray([3, 1, 7]), jnp.asarray([True, True, False]))) == 3
  assert int(bucket_index(b, jnp.asarray([0, 0]), jnp.asarray([True, True]))) == 0
  assert int(bucket_index(b, jnp.asarray([7, 0]), jnp.asarray([True, False]))) == 4
  assert round_up(b, jnp.asarray([0, 3, 5, 7])).tolist() == [0, 4, 7, 7]


def test_fixed_and_constant():
  f = FixedLength(5)
  assert f.buckets == (5,)
  g, st, sig = f.choose(None, f.init(None, None, None, 8), None, None, None,
                        jnp.asarray([True, False]))
  assert g.tolist() == [5, 0] and sig == {}
  c = ConstantGamma(5, gamma=2)
  assert c.buckets == (2, 5)
  assert c.choose(None, None, None, None, None, jnp.asarray([True]))[0].tolist() == [2]
  with pytest.raises(ValueError, match="gamma"):
    ConstantGamma(3, gamma=4)
  with pytest.raises(ValueError, match="num_draft"):
    FixedLength(0)


def _perturbed(params, seed, noise):
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [l + noise * jax.random.normal(kk, l.shape) if l.ndim > 1
                                   else l for l, kk in zip(leaves, keys)])


@pytest.fixture(scope="module")
def triple():
  """Target, draft and companion share one tiny architecture (one init, fast);
  draft and companion are noisy copies of the target."""
  model, tp = independent_draft(vocab=32, seed=7)
  tp = jax.tree.map(lambda x: x * 1.5 if x.ndim > 1 else x, tp)  # peakier predictions
  return model, tp, model, _perturbed(tp, 1, 0.02), model, _perturbed(tp, 2, 0.01)


def _sv_params(policy, cp, b):
  lat = np.array([1.0 + 0.1 * g for g in range(policy.num_draft + 1)])
  return policy.make_params(cp, uninformative_table(0.7), lat, b)


def test_policy_validation(triple):
  *_, companion, cp = triple
  with pytest.raises(ValueError, match="mode"):
    SpeculativeVerification(4, companion=companion, mode="tree")
  with pytest.raises(ValueError, match="gamma_search='x'"):
    SpeculativeVerification(4, companion=companion, gamma_search="x")
  with pytest.raises(ValueError, match="buckets"):
    SpeculativeVerification(4, companion=companion, verify_buckets=(0, 2))
  with pytest.raises(ValueError, match="companion"):
    SpeculativeVerification(4)
  pol = SpeculativeVerification(4, companion=companion)
  assert pol.buckets == (0, 1, 2, 4)
  hash(pol)  # static under jit
  with pytest.raises(ValueError, match="K\\+1"):
    pol.make_params(cp, uninformative_table(), np.ones(3), 2)
  with pytest.raises(ValueError, match="table_signals='SA?B'"):
    SpeculativeVerification(4, companion=companion, table_signals="SAB")
  s_only = SpeculativeVerification(4, companion=companion, table_signals="S")
  with pytest.raises(ValueError, match="table_signals='S' needs a table fitted on S only.*3 A bins"):
    s_only.make_params(cp, _steep_table(), np.ones(5), 2)


def test_s_only_table_never_reads_the_drafted_token(triple):
  """table_signals="S": P_hat_i = table(S_i), whatever A_i (the drafted token x_i)
  is; "SA" with the same S bins and a steep A axis does read it."""
  target, tp, draft, dp, companion, cp = triple
  k, b = 3, 2
  s_table = CalibrationTable(jnp.asarray([0.0, 0.5, 0.9, 1.0]), jnp.asarray([0.0, 1.0]),
                             jnp.asarray([[0.2], [0.5], [0.8]]))
  rs = np.random.RandomState(1)
  seq = jnp.asarray(rs.randint(0, 32, size=(b, 12)), jnp.int32)
  lengths = jnp.asarray([5, 8], jnp.int32)
  q = jax.nn.softmax(jnp.asarray(rs.randn(b, k, 32) * 2, jnp.float32), -1)
  x = jnp.asarray(rs.randint(0, 32, size=(b, k)), jnp.int32)
  prev, last = seq[jnp.arange(b), lengths - 2], seq[jnp.arange(b), lengths - 1]
  pol = SpeculativeVerification(k, companion=companion, table_signals="S")
  params = pol.make_params(cp, s_table, np.linspace(1, 1.3, k + 1), b)
  state = pol.init(params, seq, lengths, 24)
  s, a, p_hat, _ = pol.signals(params, state, prev, last, x, q)
  want = np.asarray([0.2, 0.5, 0.8])[np.digitize(np.asarray(s), [0.5, 0.9])]
  np.testing.assert_allclose(np.asarray(p_hat), want, rtol=1e-6)
  assert len(np.unique(np.asarray(a).round(3))) > 1  # A varies, P_hat ignores it
  sa = SpeculativeVerification(k, companion=companion)
  sa_params = sa.make_params(cp, _steep_table(), np.linspace(1, 1.3, k + 1), b)
  _, a2, p_hat2, _ = sa.signals(sa_params, state, prev, last, x, q)
  np.testing.assert_allclose(np.asarray(p_hat2),
                             np.asarray(_steep_table().lookup(a2 * 0, a2)), rtol=1e-6)


def test_companion_cache_matches_full_forward(triple):
  """choose() scores x with the companion exactly as a cache-free forward over the
  whole sequence does, before and after a commit."""
  target, tp, draft, dp, companion, cp = triple
  k, b = 3, 2
  pol = SpeculativeVerification(k, companion=companion)
  params = _sv_params(pol, cp, b)
  rs = np.random.RandomState(0)
  seq = jnp.asarray(rs.randint(0, 32, size=(b, 20)), jnp.int32)
  lengths = jnp.asarray([6, 9], jnp.int32)  # prompts seq[:, :len]
  state = jax.jit(pol.init, static_argnums=3)(params, seq, lengths, 24)
  assert state.lengths.tolist() == [5, 8]

  def reference(L):  # P_c of the drafts at positions L+1..L+k (L = target length)
    full = jax.jit(companion.apply)(cp, seq, jnp.broadcast_to(jnp.arange(20), (b, 20)),
                                    companion.init_cache(b, 20)).logits
    idx = L[:, None] + jnp.arange(k)[None, :]  # logits at position L+i predict x_{i+1}
    return probs_from_logits(jnp.take_along_axis(full, idx[:, :, None], 1), pol.companion_sampling)

  def step(state, L):
    prev = jnp.take_along_axis(seq, (L - 1)[:, None], 1)[:, 0]
    last = jnp.take_along_axis(seq, L[:, None], 1)[:, 0]
    x = jnp.take_along_axis(seq, L[:, None] + 1 + jnp.arange(k)[None, :], 1)
    q = jax.nn.one_hot(x, 32) * 0.5 + 0.5 / 32
    s, a, p_hat, cache = jax.jit(pol.signals)(params, state, prev, last, x, q)
    p_c = reference(L)
    np.testing.assert_allclose(s, jnp.sum(jnp.minimum(q, p_c), -1), rtol=1e-5, atol=1e-6)
    pcx = jnp.take_along_axis(p_c, x[..., None], -1)[..., 0]
    qx = jnp.take_along_axis(q, x[..., None], -1)[..., 0]
    np.testing.assert_allclose(a, jnp.minimum(1.0, pcx / qx), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(p_hat, 0.7)
    return cache

  # Target length L = prompt length: the target caches seq[:L]; seq[L] plays the
  # emitted token "last" and seq[L+1 : L+1+k] the drafts.
  state = step(state, lengths)
  # Accept 2 drafts in row 0, 0 in row 1: the target commits n + 1 tokens.
  new_t = lengths + jnp.asarray([3, 1])
  state = pol.commit(state, new_t)
  assert state.lengths.tolist() == (new_t - 1).tolist()
  step(state, new_t)


def test_choose_modes_under_jit(triple):
  target, tp, draft, dp, companion, cp = triple
  k, b = 4, 3
  rs = np.random.RandomState(1)
  seq = jnp.asarray(rs.randint(0, 32, size=(b, 8)), jnp.int32)
  lengths = jnp.asarray([4, 6, 8], jnp.int32)
  x = jnp.asarray(rs.randint(0, 32, size=(b, k)), jnp.int32)
  q = jax.nn.softmax(jnp.asarray(rs.randn(b, k, 32)), -1)
  prev = seq[:, 2]
  last = seq[:, 3]
  active = jnp.asarray([True, True, False])
  for mode, cost, fill in (("row", "max", True), ("batch", "max", False),
                           ("batch", "total", False)):
    pol = SpeculativeVerification(k, companion=companion, mode=mode, batch_cost=cost,
                                  fill_bucket=fill)
    params = _sv_params(pol, cp, b)
    st = jax.jit(pol.init, static_argnums=3)(params, seq, lengths, 20)
    g, st2, sig = jax.jit(pol.choose)(params, st, prev, last, Proposal(x, q), active)
    assert g.shape == (b,) and g.dtype == jnp.int32
    assert int(g[2]) == 0 and bool(jnp.all((g >= 0) & (g <= k)))
    assert set(sig) == {"S", "A", "p_hat", "expected_accepted"}
    assert sig["S"].shape == (b, k)
    assert bool(jnp.all((sig["S"] >= 0) & (sig["S"] <= 1 + 1e-6)))
    assert bool(jnp.all((sig["A"] >= 0) & (sig["A"] <= 1)))
    np.testing.assert_array_equal(st2.lengths, st.lengths)  # written, not committed
    if fill:
      gmax = int(jnp.max(g))
      assert gmax in pol.buckets and g[:2].tolist() == [gmax, gmax]


def test_collect_records(triple):
  target, tp, draft, dp, companion, cp = triple
  k = 3
  drafter = LMDrafter(k, SamplingConfig(temperature=1.0), draft)
  pol = SpeculativeVerification(k, companion=companion)
  params = _sv_params(pol, cp, 4)
  rs = np.random.RandomState(2)
  prompts = [rs.randint(0, 32, size=n).tolist() for n in (3, 7, 5, 11)]
  rec = collect_records(target, tp, drafter, dp, pol, params, verifiers.get("lossless"), prompts,
                        max_new_tokens=14, sampling=SamplingConfig(temperature=1.0),
                        key=jax.random.key(0), eos_token_id=None)
  n = len(rec["S"])
  assert n > 20 and all(len(rec[c]) == n for c in ("A", "accepted", "position", "row", "step"))
  assert set(np.unique(rec["row"]).tolist()) == {0, 1, 2, 3}
  # Per (row, step), reached positions are 0..n_acc (a prefix), accepted all but maybe the last.
  for r in range(4):
    for s in np.unique(rec["step"][rec["row"] == r]):
      m = (rec["row"] == r) & (rec["step"] == s)
      pos, acc = rec["position"][m], rec["accepted"][m]
      assert pos.tolist() == list(range(len(pos)))
      assert acc[:-1].all()
      if len(pos) < k:
        assert not acc[-1]
  assert 1.0 <= rec["tokens_per_call"] <= k + 1
  assert 0 < rec["accepted"].mean() < 1


def test_sv_in_speculative_loop_greedy_is_target_greedy(triple):
  """Through the loop (when it takes a policy): lossless + greedy output equals the
  target's greedy output whatever gamma SV picks, and verified tokens drop."""
  import inspect
  from specjax.decoding import speculative as spec
  from specjax.decoding.autoregressive import generate
  target, tp, draft, dp, companion, cp = triple
  k = 4
  greedy = SamplingConfig(temperature=0.0)
  rs = np.random.RandomState(3)
  prompts = [rs.randint(0, 32, size=n).tolist() for n in (3, 9, 5)]
  ref = generate(target, tp, prompts, max_new_tokens=16, eos_token_id=None).to_lists()
  # P_hat rises with A; latency steep enough that low-A drafts are not worth verifying.
  table = CalibrationTable(jnp.asarray([0.0, 1.0]), jnp.asarray([0.0, 0.3, 0.7, 1.0]),
                           jnp.asarray([[0.05, 0.5, 0.95]]))
  pol = SpeculativeVerification(k, companion=companion)
  params = pol.make_params(cp, table, np.array([1.0, 1.3, 1.6, 1.9, 2.2]), len(prompts))
  out = spec.speculative_generate(target, tp, LMDrafter(k, greedy, draft), dp,
                                  verifiers.get("lossless"), prompts, max_new_tokens=16,
                                  eos_token_id=None, policy=pol, policy_params=params)
  assert out.to_lists() == ref
  st = out.stats
  assert 0 < int(np.sum(st.verified_tokens)) < k * int(np.sum(st.target_calls)) / 2


def _steep_table():
  return CalibrationTable(jnp.asarray([0.0, 1.0]), jnp.asarray([0.0, 0.3, 0.7, 1.0]),
                          jnp.asarray([[0.05, 0.5, 0.95]]))


# In the slow step (the default suite's 8-minute budget).
@pytest.mark.slow
def test_lossless_with_sv_reproduces_the_target_distribution(triple):
  """SV only shortens what is verified: lossless + SV still samples the target.

  Martingale z-test on every generated token after the first (as in
  tests/decoding/test_speculative.py): 1200 rows x 6 tokens, V = 32, max |z| < 4.5
  (P(false alarm) < 32 * 6.8e-6 per check).  SV must actually shorten
  verification here (checked), otherwise the test would be vacuous.
  """
  from specjax.decoding import speculative as spec
  from tests.helpers import martingale_z, teacher_forced_probs
  target, tp, draft, dp, companion, cp = triple
  k, rows = 4, 1200
  samp = SamplingConfig(temperature=1.0)
  prompt = [5, 9, 11]
  pol = SpeculativeVerification(k, companion=companion, mode="batch", batch_cost="total")
  params = pol.make_params(cp, _steep_table(), np.array([1.0, 1.3, 1.6, 1.9, 2.2]), rows)
  out = spec.speculative_generate(target, tp, LMDrafter(k, samp, draft), dp,
                                  verifiers.get("lossless"), [prompt] * rows, max_new_tokens=6,
                                  sampling=samp, key=jax.random.key(4), eos_token_id=None,
                                  policy=pol, policy_params=params)
  st = out.stats
  assert int(np.sum(st.verified_tokens)) < k * int(np.sum(st.target_calls))
  probs = np.asarray(teacher_forced_probs(target, tp, prompt, out.tokens, samp))
  z = martingale_z(np.asarray(out.tokens)[:, 1:], probs[:, 1:], np.asarray(out.lengths) - 1)
  assert np.abs(z).max() < 4.5, z


@pytest.mark.slow  # SV's lossless composition stays in the default suite (above)
def test_mars_composes_with_sv(triple):
  """speculative_generate(..., verifier=mars, policy=sv): runs, relaxes, and
  verifies fewer drafts than fixed K; theta >= 1 gives exactly lossless + SV."""
  from specjax.decoding import speculative as spec
  target, tp, draft, dp, companion, cp = triple
  k = 4
  greedy = SamplingConfig(temperature=0.0)
  rs = np.random.RandomState(5)
  prompts = [rs.randint(0, 32, size=n).tolist() for n in (4, 7, 2, 9)]
  pol = SpeculativeVerification(k, companion=companion)
  params = pol.make_params(cp, _steep_table(), np.array([1.0, 1.3, 1.6, 1.9, 2.2]), len(prompts))
  run = lambda rule: spec.speculative_generate(
      target, tp, LMDrafter(k, greedy, draft), dp, rule, prompts, max_new_tokens=16,
      eos_token_id=None, policy=pol, policy_params=params)
  mars = run(verifiers.get("mars", theta=0.3))
  assert int(np.sum(mars.stats.relaxed)) > 0
  assert int(np.sum(mars.stats.verified_tokens)) < k * int(np.sum(mars.stats.target_calls))
  assert run(verifiers.get("mars", theta=1.0)).to_lists() == run(verifiers.get("lossless")).to_lists()



def _split_run(triple, pol, mesh=None, rows=16, batch_size=2):
  from specjax.decoding import speculative as spec
  target, tp, draft, dp, companion, cp = triple
  samp = SamplingConfig(temperature=1.0)
  rs = np.random.RandomState(6)
  prompts = [rs.randint(0, 32, size=n).tolist() for n in rs.randint(2, 10, size=rows)]
  params = pol.make_params(cp, _steep_table(), np.array([1.0, 1.3, 1.6, 1.9, 2.2]), batch_size)
  return spec.speculative_generate(
      target, tp, LMDrafter(pol.num_draft, samp, draft), dp, verifiers.get("lossless"), prompts,
      max_new_tokens=10, sampling=samp, key=jax.random.key(8), eos_token_id=None, mesh=mesh,
      policy=pol, policy_params=params)


@pytest.mark.slow  # device independence stays in the default suite via test_speculative
@pytest.mark.parametrize("cost,fill", [("total", False), ("max", True)])
def test_sv_batch_mode_is_independent_of_the_device_split(triple, cost, fill):
  """Batch mode couples rows only inside fixed global row groups, so a row's gamma,
  tokens and statistics are the same on 1 device and on an 8-device data mesh
  (processed_tokens excepted: it is each device's real forward size)."""
  from specjax.decoding import parallel
  k = 4
  pol = SpeculativeVerification(k, companion=triple[4], mode="batch", batch_cost=cost,
                                fill_bucket=fill, group_size=2)
  one, eight = _split_run(triple, pol), _split_run(triple, pol, parallel.make_mesh(8))
  np.testing.assert_array_equal(one.tokens, eight.tokens)
  np.testing.assert_array_equal(one.lengths, eight.lengths)
  for f in ("target_calls", "accepted", "relaxed", "accept_counts", "offered_counts",
            "verified_tokens"):
    np.testing.assert_array_equal(getattr(one.stats, f), getattr(eight.stats, f), err_msg=f)
  # Not vacuous: gamma varies (fewer than K verified per call, rows differ).
  v = np.asarray(one.stats.verified_tokens)
  assert v.sum() < k * int(np.sum(one.stats.target_calls)) and len(set(v.tolist())) > 1


def test_sv_row_groups_refuse_splits_that_change_results(triple):
  """Checked before tracing: no compile, fast."""
  from specjax.decoding import parallel
  companion, mesh8 = triple[4], parallel.make_mesh(8)
  whole = SpeculativeVerification(4, companion=companion, mode="batch")
  with pytest.raises(ValueError, match="group_size=None couples all 16 rows"):
    _split_run(triple, whole, mesh8, batch_size=16)
  fill = SpeculativeVerification(4, companion=companion, fill_bucket=True)  # row mode + fill
  with pytest.raises(ValueError, match="couples all 16 rows"):
    _split_run(triple, fill, mesh8, batch_size=16)
  g4 = SpeculativeVerification(4, companion=companion, mode="batch", group_size=4)
  with pytest.raises(ValueError, match="2 rows per device, not a multiple of group_size=4"):
    _split_run(triple, g4, mesh8, batch_size=4)
  with pytest.raises(ValueError, match="14 rows, not a multiple of group_size=4"):
    _split_run(triple, g4, rows=14, batch_size=4)
  with pytest.raises(ValueError, match="batch_size=6 must be a multiple of group_size=4"):
    g4.make_params(triple[5], _steep_table(), np.ones(5), 6)
  with pytest.raises(ValueError, match="group_size=0"):
    SpeculativeVerification(4, companion=companion, group_size=0)
