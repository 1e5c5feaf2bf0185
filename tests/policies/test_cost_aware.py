"""Cost-aware draft length (docs/spec.md §5; specjax.policies.cost_aware) and its
acceptance calibration (specjax.policies.acceptance): the stopping rule against
a direct implementation, the stopping-time property, the rate lambda by hand,
costs per bucket, a flat (accelerator-like) cost curve against this CPU's,
fitting / saving / refusing tables, and the policy in the loop (greedy identity,
per-row lengths, one compile for any cost curve or table of a bin count, prompt
lookup's match-length score).  The law tests with their broken variant (the
rule fed the target's acceptance) are in tests/verifiers/test_statistical_power.py
(``cost-aware-*``)."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.decoding import speculative as spec
from specjax.decoding.autoregressive import generate
from specjax.decoding.drafters import LMDrafter
from specjax.distributions import SamplingConfig
from specjax.policies import acceptance, cost_aware
from specjax.policies.cost_aware import CostAwareLength, bucket_cost, fold_round, offer_lengths
from tests.helpers import sharpened_noisy_pair

K = 4
GREEDY = SamplingConfig(temperature=0.0)


def _reference_lengths(a, prior, cost, lam):
  """The module docstring's rule written directly: draft i (1-based) is offered,
  given 1..i-1 were, iff some m >= i has sum_{j=i..m} P_i abar_{i+1..j} -
  lam (c(m) - c(i-1)) > 0."""
  k = len(a)
  n = 0
  for i in range(1, k + 1):
    p_i = float(np.prod(a[:i]))
    best = -np.inf
    for m in range(i, k + 1):
      gain = sum(p_i * float(np.prod(prior[i:j])) for j in range(i, m + 1))
      best = max(best, gain - lam * (cost[m] - cost[i - 1]))
    if best <= 0:
      break
    n = i
  return n


def test_stopping_rule_against_a_direct_implementation():
  """500 random (estimates, priors, cost curve, lambda) rows: the vectorised rule
  equals the loops above.  Broken variant caught (by construction of the
  reference): valuing later positions with the row's own later estimates."""
  rs = np.random.RandomState(0)
  b = 500
  a = rs.uniform(0, 1, (b, K)).astype(np.float32)
  prior = rs.uniform(0, 1, K).astype(np.float32)
  cost = np.concatenate([[1.0], 1.0 + np.cumsum(rs.uniform(0, 0.4, K))]).astype(np.float32)
  lam = rs.uniform(0.5, 2.0, b).astype(np.float32)
  got = np.asarray(offer_lengths(jnp.asarray(a), jnp.asarray(prior), jnp.asarray(cost),
                                 jnp.asarray(lam), jnp.ones((b,), bool)))
  want = np.asarray([_reference_lengths(a[r], prior, cost, lam[r]) for r in range(b)])
  np.testing.assert_array_equal(got, want)
  assert len(set(got.tolist())) == K + 1  # every length 0..K occurs


def _reference_group_length(a, prior, cost, lam, offers):
  """The group's rule written directly (float64): the group goes on to draft i iff
  some m >= i has sum_b [sum_{j=i..m} P_{b,i} abar_{i+1..j} - lam_b (c(m) - c(i-1))]
  > 0, rows without an offer (``offers[b]`` False) gaining nothing."""
  k = a.shape[1]
  a = np.where(offers[:, None], a, 0.0).astype(np.float64)
  n = 0
  for i in range(1, k + 1):
    p_i = np.prod(a[:, :i], axis=1)
    best = -np.inf
    for m in range(i, k + 1):
      gain = sum(p_i * float(np.prod(prior[i:j])) for j in range(i, m + 1))
      best = max(best, float(np.sum(gain - lam * (cost[m] - cost[i - 1]))))
    if best <= 0:
      break
    n = i
  return n


def test_group_stopping_rule_against_a_direct_implementation():
  """250 random groups of 4 rows (a quarter of the rows without an offer, paying
  all the same): one length per group, the rule written directly; the rows'
  order inside a group changes nothing (the fixed-point sum); a batch of one row
  priced as a group is the row's own rule.  Broken variants caught: summing only
  the offering rows (the reference's paying rows), or each row alone (lengths
  would differ inside a group)."""
  rs = np.random.RandomState(5)
  g, groups = 4, 250
  b = g * groups
  a = rs.uniform(0, 1, (b, K)).astype(np.float32) ** 0.5
  offers = rs.uniform(size=b) > 0.25
  prior = rs.uniform(0.3, 0.9, K).astype(np.float32)
  cost = np.concatenate([[1.0], 1.0 + np.cumsum(rs.uniform(0, 0.3, K))]).astype(np.float32)
  lam = rs.uniform(0.6, 1.6, b).astype(np.float32)
  args = (jnp.asarray(prior), jnp.asarray(cost))
  got = np.asarray(offer_lengths(jnp.asarray(a), *args, jnp.asarray(lam), jnp.asarray(offers),
                                 running=jnp.ones((b,), bool), group_size=g))
  want = [_reference_group_length(a[r:r + g], prior, cost, lam[r:r + g], offers[r:r + g])
          for r in range(0, b, g)]
  np.testing.assert_array_equal(got, np.where(offers, np.repeat(want, g), 0))
  assert len(set(want)) >= 3 and not np.array_equal(
      got, np.asarray(offer_lengths(jnp.asarray(a), *args, jnp.asarray(lam),
                                    jnp.asarray(offers))))
  perm = np.concatenate([r + rs.permutation(g) for r in range(0, b, g)])
  again = np.asarray(offer_lengths(jnp.asarray(a[perm]), *args, jnp.asarray(lam[perm]),
                                   jnp.asarray(offers[perm]), running=jnp.ones((b,), bool),
                                   group_size=g))
  np.testing.assert_array_equal(again, got[perm])
  alone = [int(offer_lengths(jnp.asarray(a[r:r + 1]), *args, jnp.asarray(lam[r:r + 1]),
                             jnp.ones((1,), bool), group_size=None)[0]) for r in range(60)]
  assert alone == [_reference_lengths(a[r], prior, cost, lam[r]) for r in range(60)]


def test_one_eager_row_does_not_set_the_batch_length():
  """32 rows at this CPU's batch costs, one row sure of its drafts and 31 unsure:
  alone, the sure row drafts K and the batch's forward pays for it; as one group
  the batch takes a plain step.  A row that runs without an offer pays: with all
  31 offering nothing the group still stops, and without them (not running) the
  sure row's length is its own."""
  prior = jnp.full((K,), 0.6)
  cost = jnp.asarray([1.0, 1.45, 1.7, 2.1, 2.5])
  a = jnp.asarray([[0.99] * K] + [[0.1] * K] * 31, jnp.float32)
  lam, every = jnp.ones((32,)), jnp.ones((32,), bool)
  assert offer_lengths(a, prior, cost, lam, every).tolist() == [K] + [0] * 31
  assert offer_lengths(a, prior, cost, lam, every, group_size=None).tolist() == [0] * 32
  first = jnp.arange(32) == 0
  assert offer_lengths(a, prior, cost, lam, first, running=every,
                       group_size=None).tolist() == [0] * 32
  assert offer_lengths(a, prior, cost, lam, first, running=first,
                       group_size=None).tolist() == [K] + [0] * 31


def test_offer_of_draft_i_depends_on_estimates_up_to_i_only():
  """A stopping time: "n >= i" is unchanged when a_{i+1..K} change (exactness,
  docs/spec.md §5)."""
  rs = np.random.RandomState(1)
  prior = jnp.asarray(rs.uniform(0.2, 0.9, K), jnp.float32)
  cost = jnp.asarray([1.0, 1.3, 1.45, 1.6, 1.75], jnp.float32)
  for _ in range(50):
    a = rs.uniform(0, 1, (1, K)).astype(np.float32)
    n = int(offer_lengths(jnp.asarray(a), prior, cost, jnp.ones((1,)), jnp.ones((1,), bool))[0])
    for i in range(1, K + 1):
      b = a.copy()
      b[0, i:] = rs.uniform(0, 1, K - i)
      n2 = int(offer_lengths(jnp.asarray(b), prior, cost, jnp.ones((1,)),
                             jnp.ones((1,), bool))[0])
      assert (n >= i) == (n2 >= i), (a, b, i)


def test_flat_cost_offers_every_chance_and_zero_acceptance_offers_none():
  ones = jnp.ones((3,), bool)
  a = jnp.asarray([[0.9, 0.5, 0.1, 0.01], [0.3, 0.0, 0.9, 0.9], [0.0, 1.0, 1.0, 1.0]])
  flat = jnp.ones((K + 1,))
  prior = jnp.full((K,), 0.5)
  n = offer_lengths(a, prior, flat, jnp.ones((3,)), ones)
  assert n.tolist() == [4, 1, 0]  # up to the first zero estimate
  assert offer_lengths(a, prior, flat, jnp.ones((3,)), jnp.asarray([True, False, True])
                       ).tolist() == [4, 0, 0]


def test_a_flat_accelerator_cost_curve_drafts_longer_than_this_cpu():
  """The same estimates under this CPU's verify curve (each extra token ~0.1-0.3 of
  a step) and a flat one (an accelerator up to its compute bound): the flat curve
  offers at least as much on every row and strictly more on some."""
  rs = np.random.RandomState(2)
  a = jnp.asarray(rs.uniform(0.1, 0.95, (200, K)), jnp.float32)
  prior = jnp.asarray([0.7, 0.6, 0.55, 0.5], jnp.float32)
  cpu = jnp.asarray([1.0, 1.3, 1.45, 1.6, 1.75])
  accel = jnp.asarray([1.0, 1.01, 1.02, 1.03, 1.04])
  lam = jnp.full((200,), 1.2)
  n_cpu = np.asarray(offer_lengths(a, prior, cpu, lam, jnp.ones((200,), bool)))
  n_acc = np.asarray(offer_lengths(a, prior, accel, lam, jnp.ones((200,), bool)))
  assert np.all(n_acc >= n_cpu) and n_acc.mean() > n_cpu.mean() + 1


def test_fixed_length_rate_by_hand():
  """The best fixed length at the prior: E(n) / c(n) with E(n) = 1 + sum of the
  prior's running products, over both sources of a choosing drafter; below 1 on a
  steep curve (no length pays), above on a flat one."""
  table = acceptance.constant_table([0.5, 0.5, 0.5, 0.5])  # E = 1, 1.5, 1.75, 1.875, 1.9375
  steep = cost_aware.make_params(table, [1.1, 1.6, 2.0, 2.4, 2.8])
  rate, source, n = cost_aware.fixed_length_rate(steep, (0, 1, 2, 3, 4))
  assert (source, n) == (0, 1) and rate == pytest.approx(1.5 / 1.6)
  flat = cost_aware.make_params(table, [1.0, 1.05, 1.1, 1.15, 1.2])
  both = cost_aware.make_source_params(steep, flat)
  rate, source, n = cost_aware.fixed_length_rate(both, (0, 1, 2, 3, 4))
  assert (source, n) == (1, 3) and rate == pytest.approx(1.875 / 1.15)
  # a length between buckets is costed at its bucket: n = 3 pays n = 4's cost
  rate, _, n = cost_aware.fixed_length_rate(flat, (0, 1, 2, 4))
  assert n == 4 and rate == pytest.approx(1.9375 / 1.2)
  # "best": the most confident bin per position -- a round the table knows can pay
  sure = acceptance.AcceptanceTable(jnp.asarray([0.0, 0.5, 1.0]),
                                    jnp.asarray([[0.2, 0.9]] * K), jnp.full((K,), 0.3))
  on_steep = cost_aware.make_params(sure, [1.1, 1.6, 2.0, 2.4, 2.8])
  assert cost_aware.fixed_length_rate(on_steep, (0, 1, 2, 3, 4))[0] < 1
  rate, _, n = cost_aware.fixed_length_rate(on_steep, (0, 1, 2, 3, 4), "best")
  assert n == 4 and rate == pytest.approx((1 + 0.9 + 0.81 + 0.729 + 0.6561) / 2.8)
  with pytest.raises(ValueError, match="estimate='mean'"):
    cost_aware.fixed_length_rate(on_steep, (0, 1, 2, 3, 4), "mean")


def test_one_row_reads_its_best_bins_a_batch_its_prior_with_a_margin():
  """The run-level switch: at batch 1 the best bins against 1; at batch > 1 the prior
  against 1 + margin.  The batch-32 case of the committed records: best bins 1.02 and
  prior 0.70 (speculating ran at 0.77x) is off at batch 32 and on at batch 1; a prior of
  1.05 -- inside the profile's run-to-run error -- is off at batch 2, 1.15 is on.  A rule
  that reads the best bins at every batch size (the previous one) would speculate at
  batch 32 on 1.02."""
  one, many = cost_aware.speculation_rule(1), cost_aware.speculation_rule(32)
  assert (one.estimate, one.threshold) == ("best", 1.0)
  assert (many.estimate, many.threshold) == ("prior", 1.0 + cost_aware.BATCH_RATE_MARGIN)
  rates = {"best": 1.02, "prior": 0.70}
  assert one.speculates(rates[one.estimate]) and not many.speculates(rates[many.estimate])
  pair = cost_aware.speculation_rule(2)
  assert not pair.speculates(1.05) and pair.speculates(1.15)
  assert cost_aware.speculation_rule(2, margin=0.0).speculates(1.05)
  assert many.to_json() == {"estimate": "prior", "threshold": pytest.approx(1.1)}
  for bad, match in ((0, "batch=0"), (2.0, "batch=2.0")):
    with pytest.raises((ValueError, TypeError), match=match):
      cost_aware.speculation_rule(bad)
  with pytest.raises(ValueError, match="margin=-0.1"):
    cost_aware.speculation_rule(4, margin=-0.1)
  # the batch table reads the rule a record holds, else the estimate older records decided by
  from experiments.results.speed_profile_tables import _deciding_rate
  rates = dict(prior_rate={"rate": 0.7}, best_rate={"rate": 1.02})
  assert _deciding_rate(dict(rates, speculation_rule=many.to_json())) == "prior 0.70 against 1.10"
  assert _deciding_rate(rates) == "best 1.02 against 1.00"
  assert _deciding_rate({"prior_rate": {"rate": 0.88}}) == "prior 0.88 against 1.00"


def test_plain_stats_count_every_round_as_a_plain_step():
  from specjax.decoding.loop_state import SpecStats
  st = SpecStats.plain(jnp.asarray([3, 0, 5]), K, K + 1, 2)
  assert st.target_calls.tolist() == [3, 0, 5] == st.processed_tokens.tolist()
  assert st.gamma_counts.tolist() == [[3, 0, 0, 0, 0], [0] * 5, [5, 0, 0, 0, 0]]
  assert int(st.accepted.sum()) == int(st.verified_tokens.sum()) == 0
  assert st.accept_counts.shape == (3, K) and st.source_rounds.shape == (3, 2)


def test_rate_and_bucket_cost_by_hand():
  tok, cost = fold_round(jnp.asarray([4.0, 4.0]), jnp.asarray([4.0, 4.0]),
                         jnp.asarray([3, 0]), jnp.asarray([1.5, 1.5]), 0.5)
  np.testing.assert_allclose(np.asarray(tok), [5.0, 4.0])   # 0.5 * 4 + 3; idle row kept
  np.testing.assert_allclose(np.asarray(cost), [3.5, 4.0])  # 0.5 * 4 + 1.5
  c = jnp.asarray([1.0, 1.3, 1.4, 1.5, 1.6])
  np.testing.assert_allclose(np.asarray(bucket_cost(c, (0, 1, 2, 4))),
                             [1.0, 1.3, 1.4, 1.6, 1.6])


def test_params_and_policy_refuse_bad_values_naming_them():
  table = acceptance.constant_table([0.5] * K)
  for kw, name in [({"rate0": 0.0}, "rate0"), ({"prior_weight": -1.0}, "prior_weight"),
                   ({"forget": 1.5}, "forget")]:
    with pytest.raises(ValueError, match=name):
      cost_aware.make_params(table, [1.0, 1.1, 1.2, 1.3, 1.4], **kw)
  with pytest.raises(ValueError, match="K \\+ 1 = 5"):
    cost_aware.make_params(table, [1.0, 1.1])
  with pytest.raises(ValueError, match="non-decreasing"):
    cost_aware.make_params(table, [1.0, 1.3, 1.2, 1.4, 1.5])
  with pytest.raises(ValueError, match="K=4 positions"):
    CostAwareLength(3).init(cost_aware.make_params(table, np.ones(5)), None,
                            jnp.zeros((2,), jnp.int32), 8)
  with pytest.raises(ValueError, match="make_params"):
    CostAwareLength(K).init({"table": table}, None, jnp.zeros((2,), jnp.int32), 8)
  with pytest.raises(ValueError, match="buckets"):
    CostAwareLength(K, verify_buckets=(0, 2))
  for bad in (0, 2.0, True):
    with pytest.raises(ValueError, match=f"group_size={bad!r}"):
      CostAwareLength(K, group_size=bad)
  CostAwareLength(K).check_rows(11, 2, 8)  # rows alone: any split
  with pytest.raises(ValueError, match="group_size=None couples all 16 rows"):
    CostAwareLength(K, group_size=None).check_rows(16, 2, 8)
  with pytest.raises(ValueError, match="not a multiple of group_size=3"):
    CostAwareLength(K, group_size=3).check_rows(16, 2, 8)
  with pytest.raises(ValueError, match="straddle"):
    CostAwareLength(K, group_size=4).check_rows(16, 2, 8)
  hash(CostAwareLength(K, group_size=None))


# ---- calibration ----------------------------------------------------------------------------

def test_fit_by_hand_reliability_save_and_refusal(tmp_path):
  """Counts per (position, bin), smoothing towards the position's rate, an empty bin
  falling back to it; ECE 0 on the fitting data when every bin is pure; a saved
  table loads back and refuses another drafter / temperature, naming both."""
  pos = np.asarray([0, 0, 0, 0, 1, 1])
  conf = np.asarray([0.95, 0.95, 0.15, 0.15, 0.95, 0.95])
  acc = np.asarray([1, 1, 0, 0, 1, 0])
  f = acceptance.fit(pos, conf, acc, 2, edges=[0.0, 0.5, 1.0], alpha=0.0)
  np.testing.assert_array_equal(f.counts, [[2, 2], [0, 2]])
  np.testing.assert_allclose(f.p_hat, [[0.0, 1.0], [0.5, 0.5]])  # empty bin -> the rate
  np.testing.assert_allclose(f.prior, [0.5, 0.5])
  g = acceptance.fit(pos, conf, acc, 2, edges=[0.0, 0.5, 1.0], alpha=1.0)
  np.testing.assert_allclose(g.prior, [3 / 6, 2 / 4])
  np.testing.assert_allclose(g.p_hat[0], [(0 + 1) / 4, (2 + 1) / 4])
  rel = f.reliability(pos[:4], conf[:4], acc[:4])
  assert rel["ece"] == 0.0 and rel["records"] == 4
  meta = {"models": {"target": "t"}, "drafter": "eagle3", "verifier": "lossless",
          "temperature": 0.0}
  path = acceptance.save(str(tmp_path / "t.json"), f, meta)
  back, _ = acceptance.load(path, drafter="eagle3", temperature=0.0)
  np.testing.assert_allclose(back.p_hat, f.p_hat)
  np.testing.assert_allclose(np.asarray(back.table().lookup(jnp.asarray([[0.9, 0.2]]))),
                             [[1.0, 0.5]])
  with pytest.raises(ValueError, match="drafter.*temperature|temperature.*drafter"):
    acceptance.load(path, drafter="lookup", temperature=1.0)
  with pytest.raises(ValueError, match="position must be in"):
    acceptance.fit([0, 2], [0.5, 0.5], [1, 0], 2)


# ---- in the loop ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def models():
  """Target and a noisy copy as draft (as tests/policies/test_adaedl.py)."""
  return sharpened_noisy_pair()


def _run(models, params, prompts, **kw):
  target, tp, dp = models
  pol = CostAwareLength(K)
  return spec.speculative_generate(target, tp, LMDrafter(K, GREEDY, target), dp,
                                   verifiers.get("lossless"), prompts, max_new_tokens=24,
                                   eos_token_id=None, policy=pol, policy_params=params, **kw)


# In the slow step (the default suite's 8-minute budget).
@pytest.mark.slow
def test_greedy_identity_lengths_per_row_and_one_compile(models):
  """Greedy + lossless + cost-aware = target greedy for any table and cost curve;
  a table of zeros gives plain decode steps only, a flat curve with sure drafts
  all K, a calibrated table (fitted on a probe run of other prompts; acceptance
  0.1-0.6, so a cheap curve) lengths
  that vary by row; one compiled program serves all (tables of one bin count)."""
  target, tp, dp = models
  rs = np.random.RandomState(3)
  prompts = [rs.randint(0, 32, size=n).tolist() for n in (3, 9, 5, 7)]
  held_out = [rs.randint(0, 32, size=n).tolist() for n in (4, 6, 8, 5)]
  ref = generate(target, tp, prompts, max_new_tokens=24, eos_token_id=None).to_lists()
  rec = acceptance.collect(target, tp, LMDrafter(K, GREEDY, target), dp,
                           verifiers.get("lossless"), held_out, max_new_tokens=24,
                           sampling=GREEDY, eos_token_id=None)
  assert rec["position"].size > 0 and set(np.unique(rec["position"])) <= set(range(K))
  fitted = acceptance.fit(rec["position"], rec["confidence"], rec["accepted"], K,
                          edges=[0.0, 0.3, 0.5, 0.7, 1.0])
  cpu = [1.0, 1.3, 1.45, 1.6, 1.75]
  cases = {"zeros": (acceptance.constant_table([0.0] * K, num_bins=4), cpu),
           "sure": (acceptance.constant_table([1.0] * K, num_bins=4), [1.0] * (K + 1)),
           "fitted": (fitted.table(), [1.0, 1.1, 1.2, 1.3, 1.4])}
  fn = spec._speculative
  before = fn._cache_size()
  counts = {}
  for name, (table, cost) in cases.items():
    out = _run(models, cost_aware.make_params(table, cost), prompts)
    assert out.to_lists() == ref, name
    counts[name] = np.asarray(out.stats.gamma_counts)  # [B, K+1]
  assert fn._cache_size() == before + 1
  assert counts["zeros"][:, 1:].sum() == 0 and counts["zeros"][:, 0].sum() > 0
  assert counts["sure"][:, :K].sum() == 0
  assert (counts["fitted"] > 0).sum(1).max() >= 2  # a row used several lengths


@pytest.mark.slow
def test_same_result_on_1_and_8_devices(models):
  """Per-row lambda: the tokens do not depend on the split of rows over devices."""
  from specjax.decoding import parallel
  from tests.helpers import ragged_prompts
  samp = SamplingConfig(temperature=1.0)
  target, tp, dp = models
  prompts = ragged_prompts(11, 32, seed=4)
  params = cost_aware.make_params(acceptance.constant_table([0.8, 0.6, 0.5, 0.4]),
                                  [1.0, 1.3, 1.45, 1.6, 1.75])
  kw = dict(max_new_tokens=12, sampling=samp, key=jax.random.key(3), eos_token_id=None,
            policy=CostAwareLength(K), policy_params=params)
  d = LMDrafter(K, samp, target)
  one = spec.speculative_generate(target, tp, d, dp, verifiers.get("lossless"), prompts, **kw)
  eight = spec.speculative_generate(target, tp, d, dp, verifiers.get("lossless"), prompts,
                                    mesh=parallel.make_mesh(8), **kw)
  assert one.to_lists() == eight.to_lists()
  assert (np.asarray(one.stats.gamma_counts).sum(0) > 0).sum() >= 2  # lengths vary


@pytest.mark.slow
def test_groups_in_the_loop_greedy_identity_device_split_and_gate(models):
  """Rows priced in groups (``group_size``): greedy + lossless = target greedy with
  the whole batch as one group; sampled, groups of 2 give the same
  tokens on 1 and 8 devices, and with and without the draft gate."""
  from specjax.decoding import parallel
  from tests.helpers import ragged_prompts
  target, tp, dp = models
  table = acceptance.AcceptanceTable(jnp.asarray([0.0, 0.3, 0.5, 0.7, 1.0]),
                                     jnp.asarray([[0.1, 0.4, 0.7, 0.95]] * K),
                                     jnp.full((K,), 0.5))
  params = cost_aware.make_params(table, [1.0, 1.15, 1.3, 1.45, 1.6])
  prompts = [[3, 9, 4, 1], [7, 7, 2], [5, 1, 8, 8, 2, 6], [2, 2]]
  ref = generate(target, tp, prompts, max_new_tokens=16, eos_token_id=None).to_lists()
  whole = spec.speculative_generate(
      target, tp, LMDrafter(K, GREEDY, target), dp, verifiers.get("lossless"), prompts,
      max_new_tokens=16, eos_token_id=None, policy=CostAwareLength(K, group_size=None),
      policy_params=params)
  assert whole.to_lists() == ref
  samp = SamplingConfig(temperature=1.0)
  rows = ragged_prompts(16, 32, seed=6)
  runs = {}
  for mesh, gated in ((None, True), (parallel.make_mesh(8), True), (None, False)):
    runs[mesh is None, gated] = spec.speculative_generate(
        target, tp, LMDrafter(K, samp, target), dp, verifiers.get("lossless"), rows,
        max_new_tokens=12, sampling=samp, key=jax.random.key(5), eos_token_id=None,
        policy=CostAwareLength(K, group_size=2, gate_drafting=gated), policy_params=params,
        mesh=mesh)
  one = runs[True, True].to_lists()
  assert one == runs[False, True].to_lists() == runs[True, False].to_lists()
  used = np.asarray(runs[True, True].stats.gamma_counts).sum(0)
  assert (used > 0).sum() >= 2  # lengths vary


@pytest.mark.slow  # ~6 s (default-suite budget); the statistical and unit tests stay
def test_prompt_lookup_scores_by_match_length_and_stays_exact(models):
  """Prompt lookup gives the policy its matched n-gram length as confidence (1/3,
  2/3 or 1 with n-grams up to 3; rows without a match reach the policy as
  inactive and offer nothing); greedy + lossless + cost-aware lookup = target
  greedy."""
  from specjax.decoding.lookup_drafter import PromptLookupDrafter
  target, tp, _ = models
  prompts = [[3, 4, 5, 6, 3, 4, 5, 6, 3, 4], [7, 8, 9, 7, 8, 1, 2], [5, 5, 5, 5, 5, 5]]
  drafter = PromptLookupDrafter(num_draft=K, vocab=32, max_ngram=3)
  rec = acceptance.collect(target, tp, drafter, None, verifiers.get("lossless"), prompts,
                           max_new_tokens=16, sampling=GREEDY, eos_token_id=None)
  assert set(np.round(rec["confidence"] * 3).astype(int).tolist()) <= {1, 2, 3}
  assert rec["position"].size > 0
  fitted = acceptance.fit(rec["position"], rec["confidence"], rec["accepted"], K,
                          edges=[0.0, 0.5, 0.8, 1.0])
  ref = generate(target, tp, prompts, max_new_tokens=16, eos_token_id=None).to_lists()
  out = spec.speculative_generate(
      target, tp, drafter, None, verifiers.get("lossless"), prompts, max_new_tokens=16,
      eos_token_id=None, policy=CostAwareLength(K),
      policy_params=cost_aware.make_params(fitted.table(), [1.0, 1.1, 1.2, 1.3, 1.4]))
  assert out.to_lists() == ref


class _StopAfter:
  """A draft gate that offers positions < ``n`` on every row."""

  def __init__(self, n):
    self.n = n

  def start(self, b):
    return jnp.zeros((b,), jnp.float32)

  def step(self, i, q_node, g):
    return jnp.full(q_node.shape[:1], i < self.n), g


def test_gated_chain_stops_drafting_and_keeps_the_drafts_it_made():
  """``sample_chain`` under a gate: the drafter's step runs only while some row's
  latest draft is worth offering (counted in the carry), the drafts made are the
  ungated ones (same keys), ``num_valid`` counts them, the rest is filler."""
  from specjax.decoding.drafters import sample_chain
  v, b = 8, 3
  table = jax.random.normal(jax.random.key(0), (v, v)) * 3

  def step(carry, tok):
    return carry + 1, table[tok]

  keys = jax.random.split(jax.random.key(1), b)
  first = jax.random.normal(jax.random.key(2), (b, v))
  samp = SamplingConfig(temperature=1.0)
  full, calls = sample_chain(samp, keys, first, step, jnp.int32(0), K)
  assert int(calls) == K - 1
  for n in (1, 2):
    cut, calls = sample_chain(samp, keys, first, step, jnp.int32(0), K, gate=_StopAfter(n))
    assert int(calls) == n and cut.num_valid.tolist() == [n + 1] * b
    np.testing.assert_array_equal(cut.tokens[:, :n + 1], full.tokens[:, :n + 1])
    np.testing.assert_array_equal(cut.q[:, :n + 1], full.q[:, :n + 1])
    assert int(jnp.sum(cut.tokens[:, n + 1:])) == 0


@pytest.mark.slow  # ~8 s each; the default suite keeps the gated chain's unit test above
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_stopping_the_drafter_early_changes_no_token(models, temperature):
  """The cost-aware policy with and without its draft gate: the same tokens (greedy
  and sampled; the gate stops the chain no earlier than the policy's own choice,
  and every draft keeps its key), so the gate only removes draft steps."""
  target, tp, dp = models
  samp = SamplingConfig(temperature=temperature)
  prompts = [[3, 9, 4, 1], [7, 7, 2], [5, 1, 8, 8, 2, 6]]
  by_conf = jnp.asarray([[0.1, 0.4, 0.7, 0.95]] * K)  # acceptance rises with confidence
  table = acceptance.AcceptanceTable(jnp.asarray([0.0, 0.3, 0.5, 0.7, 1.0]), by_conf,
                                     jnp.full((K,), 0.5))
  params = cost_aware.make_params(table, [1.0, 1.15, 1.3, 1.45, 1.6])
  out = {}
  for gated in (True, False):
    out[gated] = spec.speculative_generate(
        target, tp, LMDrafter(K, samp, target), dp, verifiers.get("lossless"), prompts,
        max_new_tokens=16, sampling=samp, key=jax.random.key(4), eos_token_id=None,
        policy=CostAwareLength(K, gate_drafting=gated), policy_params=params)
  assert out[True].to_lists() == out[False].to_lists()
  used = np.asarray(out[True].stats.gamma_counts).sum(0)
  assert (used > 0).sum() >= 2 and used[K] < used.sum()  # short rounds happen


@pytest.mark.slow  # ~15 s (default-suite budget)
def test_eagle3_chain_under_the_gate_is_the_target_greedy_and_ungated_sampled():
  """An EAGLE-3 chain (tiny head, reduced draft vocabulary) stops drafting under the
  gate: greedy output equals the target's, sampled output the ungated run's."""
  from specjax.decoding.eagle_drafter import EagleDrafter
  from tests.helpers import eagle_head, eagle_target
  target, tp = eagle_target()
  head, p, d2t = eagle_head("eagle3", reduced=True)
  params = EagleDrafter.make_params(p, target, tp, d2t)
  table = acceptance.AcceptanceTable(jnp.asarray([0.0, 0.3, 0.5, 0.7, 1.0]),
                                     jnp.asarray([[0.1, 0.4, 0.7, 0.95]] * 3),
                                     jnp.full((3,), 0.5))
  pp = cost_aware.make_params(table, [1.0, 1.15, 1.3, 1.45])
  prompts = [[3, 9, 4, 1], [7, 7, 2], [5, 1, 8, 8, 2, 6]]
  ref = generate(target, tp, prompts, max_new_tokens=12, eos_token_id=None).to_lists()
  runs = {}
  for temp, gated in ((0.0, True), (1.0, True), (1.0, False)):
    samp = SamplingConfig(temperature=temp)
    runs[temp, gated] = spec.speculative_generate(
        target, tp, EagleDrafter(num_draft=3, sampling=samp, head=head), params,
        verifiers.get("lossless"), prompts, max_new_tokens=12, sampling=samp,
        key=jax.random.key(2), eos_token_id=None,
        policy=CostAwareLength(3, gate_drafting=gated), policy_params=pp).to_lists()
  assert runs[0.0, True] == ref
  assert runs[1.0, True] == runs[1.0, False]
