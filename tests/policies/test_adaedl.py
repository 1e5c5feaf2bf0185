"""AdaEDL verify-length policy (docs/spec.md §5, "AdaEDL"): the criterion and
Algorithm 1 by hand, per-row lengths, greedy identity and exactness through the
loop, traced hyperparameters, bad values.  The well-powered law test with its
broken variant is in tests/verifiers/test_statistical_power.py (``adaedl-*``)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.decoding import speculative as spec
from specjax.decoding.drafters import LMDrafter
from specjax.decoding.proposal import Proposal
from specjax.distributions import SamplingConfig
from specjax.policies import (AdaEDL, AdaEDLParams, acceptance_bound, draft_entropy,
                              stop_lengths, update_threshold)
from tests.helpers import sharpened_noisy_pair

K = 4
GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def models():
  """Target and a noisy copy as draft (one tiny architecture, as tests/policies/test_sv.py)."""
  return sharpened_noisy_pair()


def test_criterion_by_hand():
  """1 - sqrt(gamma H) with H in nats (Section 3): H([1/2, 1/4, 1/4, 0]) = 1.5 ln 2,
  a one-hot row has H = 0 (bound 1), the uniform row over 4 has H = ln 4."""
  q = jnp.asarray([[0.5, 0.25, 0.25, 0.0], [0.0, 1.0, 0.0, 0.0], [0.25] * 4])
  h = np.asarray(draft_entropy(q))
  np.testing.assert_allclose(h, [1.5 * math.log(2), 0.0, math.log(4)], rtol=1e-6)
  b = np.asarray(acceptance_bound(jnp.asarray(h), 0.2))
  np.testing.assert_allclose(b, [1 - math.sqrt(0.3 * math.log(2)), 1.0,
                                 1 - math.sqrt(0.2 * math.log(4))], rtol=1e-6)
  assert abs(b[0] - 0.54399) < 1e-4 and abs(b[2] - 0.47345) < 1e-4
  # Stop at the first bound < lambda; at least min_draft; inactive rows 0.
  bound = jnp.asarray([[0.9, 0.8, 0.3, 0.9], [0.2, 0.9, 0.9, 0.9], [0.9] * 4, [0.9] * 4])
  lam = jnp.asarray([0.5, 0.5, 0.5, 0.95])
  act = jnp.asarray([True, True, True, True])
  assert stop_lengths(bound, lam, act, 0).tolist() == [2, 0, 4, 0]
  assert stop_lengths(bound, lam, act, 1).tolist() == [2, 1, 4, 1]
  assert stop_lengths(bound, lam, act.at[2].set(False), 1).tolist() == [2, 1, 0, 1]
  assert stop_lengths(bound, lam, act, 4).tolist() == [4, 4, 4, 4]


def test_threshold_update_by_hand():
  """Algorithm 1 lines 7-16 with the paper's beta1 = 0.5, beta2 = 0.9, eps = 0.01,
  alpha = 0.9 (Section 4.4), K = 4, lambda = 0.5 in every row."""
  hp = AdaEDLParams()
  lam = jnp.full((4,), 0.5)
  ar = jnp.asarray([0.9, 0.9, 1.0, 0.3])
  offered = jnp.asarray([4, 4, 2, 0])
  accepted = jnp.asarray([1, 4, 2, 0])
  new_lam, new_ar = update_threshold(lam, ar, offered, accepted, 4, hp)
  # row 0: AR = .5*.9 + .5*.25 = .575 < .9 -> lambda' = .51 -> .9*.5 + .1*.51 = .501
  # row 1: AR = .95 >= .9 and n_acc = K -> lambda' = lambda
  # row 2: AR = 1 >= .9, n_acc = 2 != K -> lambda' = .49 -> .499
  # row 3: no draft offered -> unchanged
  np.testing.assert_allclose(np.asarray(new_ar), [0.575, 0.95, 1.0, 0.3], rtol=1e-6)
  np.testing.assert_allclose(np.asarray(new_lam), [0.501, 0.5, 0.499, 0.5], rtol=1e-6)


def test_policy_round_trip_per_row_under_jit():
  """init -> choose -> commit -> choose, jitted: rows get their own lengths from their
  own entropies, n_acc comes from the committed length, lambda moves per row."""
  pol = AdaEDL(3)
  hp = pol.make_params(lam=0.5)
  sharp, flat = jnp.eye(8)[1] * 0.97 + 0.03 / 8, jnp.full((8,), 1 / 8)
  q = jnp.stack([jnp.stack([sharp, sharp, sharp]), jnp.stack([sharp, flat, sharp]),
                 jnp.stack([flat, sharp, sharp]), jnp.stack([sharp] * 3)])  # [4, 3, 8]
  x = jnp.zeros((4, 3), jnp.int32)
  active = jnp.asarray([True, True, True, False])

  @jax.jit
  def run(hp, lengths_after):
    st = pol.init(hp, None, jnp.asarray([5, 7, 9, 4]), 64)
    g1, st, sig = pol.choose(hp, st, None, None, Proposal(x, q), active)
    st = pol.commit(st, lengths_after)
    g2, st2, sig2 = pol.choose(hp, st, None, None, Proposal(x, q), active)
    return g1, st, sig2["lam"]

  g1, st, lam2 = run(hp, jnp.asarray([9, 9, 10, 4]))  # n_acc = 3, 1, 0; row 3 idle
  assert g1.tolist() == [3, 1, 1, 0]  # flat (H = ln 8, bound 0.355) stops the row
  assert st.offered.tolist() == [3, 1, 1, 0] and st.accepted.tolist() == [3, 1, 0, 0]
  # AR_i = 1, 1, 0: rows 0, 1 keep AR >= alpha (row 0 drafted K: lambda stays; row 1
  # did not: lambda falls to .499); row 2 raises lambda to .501; idle row 3 unchanged.
  np.testing.assert_allclose(np.asarray(lam2), [0.5, 0.499, 0.501, 0.5], rtol=1e-6)


def _run(models, pol, hp, prompts, **kw):
  target, tp, dp = models
  return spec.speculative_generate(target, tp, LMDrafter(pol.num_draft, GREEDY, target), dp,
                                   verifiers.get("lossless"), prompts, max_new_tokens=24,
                                   eos_token_id=None, policy=pol, policy_params=hp, **kw)


def test_greedy_identity_lengths_per_row_and_one_compile(models):
  """Greedy + lossless + AdaEDL = target greedy for every lambda; rows choose
  different lengths; a sweep of (lambda, gamma) reuses one compiled program."""
  from specjax.decoding.autoregressive import generate
  target, tp, _ = models
  rs = np.random.RandomState(3)
  prompts = [rs.randint(0, 32, size=n).tolist() for n in (3, 9, 5, 7)]
  ref = generate(target, tp, prompts, max_new_tokens=24, eos_token_id=None).to_lists()
  pol = AdaEDL(K)
  fn = spec._speculative
  before = fn._cache_size()
  counts = {}
  for lam, factor in [(0.3, 0.2), (0.5, 0.2), (0.7, 0.2), (0.5, 0.05)]:
    out = _run(models, pol, pol.make_params(lam=lam, entropy_factor=factor), prompts)
    assert out.to_lists() == ref, (lam, factor)
    counts[lam, factor] = np.asarray(out.stats.gamma_counts)  # [B, K+1]
  assert fn._cache_size() == before + 1
  assert counts[0.3, 0.2][:, K].sum() == counts[0.3, 0.2].sum()  # low lambda: all K
  mid = counts[0.5, 0.2]
  assert (mid[:, 1:K + 1] > 0).sum(1).min() >= 2  # every row used several lengths ...
  assert len({tuple(r) for r in mid}) == len(prompts)  # ... in its own proportions
  assert counts[0.7, 0.2][:, 1].sum() > mid[:, 1].sum()  # higher lambda stops earlier
  assert counts[0.5, 0.05][:, K].sum() > mid[:, K].sum()  # smaller gamma drafts longer


def test_bad_values_raise_naming_them():
  for kw, name in [({"entropy_factor": 0.0}, "entropy_factor"), ({"lam": 1.5}, "lam"),
                   ({"alpha": -0.1}, "alpha"), ({"eps": -1.0}, "eps"),
                   ({"beta1": 2.0}, "beta1"), ({"beta2": float("nan")}, "beta2")]:
    with pytest.raises(ValueError, match=name):
      AdaEDL.make_params(**kw)
  with pytest.raises(TypeError, match="lam"):
    AdaEDL.make_params(lam="0.5")
  with pytest.raises(ValueError, match="min_draft=5"):
    AdaEDL(4, min_draft=5)
  with pytest.raises(ValueError, match="min_draft"):
    AdaEDL(4, min_draft=-1)
  with pytest.raises(ValueError, match="buckets"):
    AdaEDL(4, verify_buckets=(0, 2))
  with pytest.raises(ValueError, match="adaptive"):
    AdaEDL(4, adaptive="yes")
  with pytest.raises(ValueError, match="make_params"):
    AdaEDL(4).init({"lam": 0.5}, None, jnp.zeros((2,), jnp.int32), 8)
  pol = AdaEDL(4)
  assert pol.buckets == (0, 1, 2, 4)
  hash(pol)  # static under jit
  assert AdaEDLParams().traced_fields == ("entropy_factor", "lam", "alpha", "eps", "beta1",
                                          "beta2")


class _OffByOne(AdaEDL):
  """Broken: draft k is offered on H(q_{k+1}) (which depends on x_k); the last
  position reuses H(q_K)."""

  def choose(self, params, state, prev, last, proposal, active):
    q = proposal.q if proposal.q_node is None else proposal.q_node
    shifted = jnp.concatenate([q[:, 1:], q[:, -1:]], axis=1)
    return super().choose(params, state, prev, last, Proposal(proposal.tokens, shifted),
                          active)


ROWS = 4000  # max |z|: real 2.5, broken 9.0 (4.9 at 1200 rows: too close to 4.5)


def _martingale_max_z(models, pol, seed):
  """Sampled T = 1 run, ROWS rows x 6 tokens; max |z| of the martingale check
  (tests/decoding/test_speculative.py) on every token after the first."""
  from tests.helpers import martingale_z, teacher_forced_probs
  target, tp, dp = models
  samp = SamplingConfig(temperature=1.0)
  prompt = [5, 9, 11]
  out = spec.speculative_generate(target, tp, LMDrafter(K, samp, target), dp,
                                  verifiers.get("lossless"), [prompt] * ROWS, max_new_tokens=6,
                                  sampling=samp, key=jax.random.key(seed), eos_token_id=None,
                                  policy=pol, policy_params=pol.make_params(lam=0.5))
  gc = np.asarray(out.stats.gamma_counts).sum(0)
  assert (gc[1:] > 0).sum() >= 2, gc  # the lengths really vary
  probs = np.asarray(teacher_forced_probs(target, tp, prompt, out.tokens, samp))
  z = martingale_z(np.asarray(out.tokens)[:, 1:], probs[:, 1:], np.asarray(out.lengths) - 1)
  return np.abs(z).max()


@pytest.mark.slow  # ~20 s; the default suite keeps the 200,000-sample synthetic test
def test_lossless_with_adaedl_samples_the_target(models):
  """AdaEDL only shortens what is verified: lossless + AdaEDL still samples the target
  through the real loop (q_node plumbing, per-row state).  4000 rows x 6 tokens,
  V = 32: max |z| < 4.5 (false alarm < 32 * 6.8e-6 per check).  The broken variant
  at the same N: the test below."""
  assert _martingale_max_z(models, AdaEDL(K, min_draft=0), 4) < 4.5


@pytest.mark.slow
def test_loop_check_catches_the_off_by_one_entropy(models):
  """The same check, same N, on the broken variant (draft k offered on H(q_{k+1})):
  it fails.  (Guaranteed power is shown on the synthetic chain,
  tests/verifiers/test_statistical_power.py; this shows the loop-level check sees it too.)"""
  assert _martingale_max_z(models, _OffByOne(K, min_draft=0), 4) > 4.5


@pytest.mark.slow
def test_same_result_on_1_and_8_devices(models):
  """Per-row state: the tokens do not depend on the split of rows over devices."""
  from specjax.decoding import parallel
  from tests.helpers import ragged_prompts
  pol = AdaEDL(K)
  samp = SamplingConfig(temperature=1.0)
  target, tp, dp = models
  prompts = ragged_prompts(11, 32, seed=4)
  kw = dict(max_new_tokens=12, sampling=samp, key=jax.random.key(3), eos_token_id=None,
            policy=pol, policy_params=pol.make_params())
  d = LMDrafter(K, samp, target)
  one = spec.speculative_generate(target, tp, d, dp, verifiers.get("lossless"), prompts, **kw)
  eight = spec.speculative_generate(target, tp, d, dp, verifiers.get("lossless"), prompts,
                                    mesh=parallel.make_mesh(8), **kw)
  assert one.to_lists() == eight.to_lists()
