"""The speculative loop: greedy equality, lossless distribution, devices, compiles."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.decoding import parallel
from specjax.decoding.autoregressive import CACHE_FULL, EOS, MAX_TOKENS, generate
from specjax.decoding.drafters import LMDrafter
from specjax.distributions import SamplingConfig
from specjax.decoding import speculative as spec
from specjax.decoding.speculative import speculative_generate
from tests.helpers import independent_draft, martingale_z, teacher_forced_probs, tiny_pair
from tests.helpers import ragged_prompts as _ragged_prompts

GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def pair():
  return tiny_pair(vocab=32)


@pytest.mark.parametrize("k", [1, pytest.param(3, marks=pytest.mark.slow),
                               pytest.param(7, marks=pytest.mark.slow)])
def test_greedy_equals_target_greedy(pair, k):
  target, tp, draft, dp = pair
  prompts = _ragged_prompts(6, 32)
  # Pick an EOS that some rows hit mid-generation, so EOS handling is exercised.
  free = generate(target, tp, prompts, max_new_tokens=24, eos_token_id=None).to_lists()
  eos = free[0][9]
  ref = generate(target, tp, prompts, max_new_tokens=24, eos_token_id=eos)
  reasons = set(np.asarray(ref.finish_reason).tolist())
  assert EOS in reasons and MAX_TOKENS in reasons
  drafter = LMDrafter(num_draft=k, sampling=GREEDY, model=draft)
  out = speculative_generate(target, tp, drafter, dp, verifiers.get("lossless"), prompts,
                             max_new_tokens=24, eos_token_id=eos)
  assert out.to_lists() == ref.to_lists()
  np.testing.assert_array_equal(out.finish_reason, ref.finish_reason)
  summary = out.stats.summary()
  assert 1.0 < summary["tau"] <= k + 1
  # The greedy rule is the same thing at T = 0.
  out_g = speculative_generate(target, tp, drafter, dp, verifiers.get("greedy"), prompts,
                               max_new_tokens=24, eos_token_id=eos)
  assert out_g.to_lists() == ref.to_lists()


# CI's slow step (11 s): a draft LM of another shape, and tau = K + 1 when the target drafts;
# the default suite keeps greedy identity with tiny_pair's draft LM (above).
@pytest.mark.slow
def test_independent_drafter_greedy_and_identical_drafter_tau():
  target, tp, _, _ = tiny_pair(vocab=32, seed=3)
  draft, dp = independent_draft(vocab=32)
  prompts = _ragged_prompts(5, 32, seed=1)
  ref = generate(target, tp, prompts, max_new_tokens=16, eos_token_id=None).to_lists()
  out = speculative_generate(target, tp, LMDrafter(3, GREEDY, draft), dp,
                             verifiers.get("lossless"), prompts, max_new_tokens=16,
                             eos_token_id=None)
  assert out.to_lists() == ref
  # Drafting with the target itself accepts everything: tau = K + 1 exactly.
  same = speculative_generate(target, tp, LMDrafter(3, GREEDY, target), tp,
                              verifiers.get("lossless"), [prompts[0]], max_new_tokens=17,
                              eos_token_id=None)
  assert same.stats.summary()["tau"] == 4.0
  assert same.to_lists() == [ref[0] + generate(target, tp, [prompts[0]], max_new_tokens=17,
                                                eos_token_id=None).to_lists()[0][16:]]


def test_cache_full_signal(pair):
  target, tp, draft, dp = pair
  prompts = [[5, 6, 7], [8] * 10]
  out = speculative_generate(target, tp, LMDrafter(3, GREEDY, draft), dp,
                             verifiers.get("lossless"), prompts, max_new_tokens=50,
                             eos_token_id=None, cache_length=24)
  assert (np.asarray(out.finish_reason) == CACHE_FULL).all()
  ref = generate(target, tp, prompts, max_new_tokens=50, eos_token_id=None).to_lists()
  for row, r in zip(out.to_lists(), ref):
    assert 0 < len(row) < 50 and row == r[:len(row)]


def test_bad_inputs(pair):
  target, tp, draft, dp = pair
  d = LMDrafter(3, GREEDY, draft)
  lossless = verifiers.get("lossless")
  with pytest.raises(ValueError, match="does not fit the cache"):
    speculative_generate(target, tp, d, dp, lossless, [[1] * 30], max_new_tokens=4,
                         cache_length=16)
  with pytest.raises(ValueError, match="K=20 is too large"):
    speculative_generate(target, tp, LMDrafter(20, GREEDY, draft), dp, lossless, [[1, 2]],
                         max_new_tokens=4, cache_length=16)
  other, op = independent_draft(vocab=48)
  with pytest.raises(ValueError, match="vocab mismatch"):
    speculative_generate(target, tp, LMDrafter(3, GREEDY, other), op, lossless, [[1, 2]],
                         max_new_tokens=4)
  with pytest.raises(ValueError, match="num_draft"):
    LMDrafter(0, GREEDY, draft)
  with pytest.raises(ValueError, match="NodeRule"):
    speculative_generate(target, tp, d, dp, "lossless", [[1, 2]], max_new_tokens=4)
  with pytest.raises(ValueError, match="PRNG key"):
    speculative_generate(target, tp, LMDrafter(3, SamplingConfig(1.0), draft), dp, lossless,
                         [[1, 2]], max_new_tokens=4, sampling=SamplingConfig(1.0))


# Sample size: 1500 rows x 7 tokens, V = 32. |z| < 4.5 for all 32 entries per
# position group: under H0 P(max |z| > 4.5) < 32 * 6.8e-6 ~ 2e-4 per check.
# Power: the negative control below (a lossy rule) gives max |z| >> 10.
# Top-k and top-p truncation run in CI's slow step; the default suite keeps T = 1 and 0.7.
@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.7, 0, 1.0), pytest.param(1.0, 8, 1.0, marks=pytest.mark.slow),
    pytest.param(0.7, 0, 0.9, marks=pytest.mark.slow)])
def test_lossless_reproduces_target_distribution(pair, temperature, top_k, top_p):
  target, tp, draft, dp = pair
  samp = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
  prompt = [5, 9, 11]
  n_rows, n_new, k = 1500, 7, 3
  drafter = LMDrafter(k, SamplingConfig(temperature=1.0), draft)
  out = speculative_generate(target, tp, drafter, dp, verifiers.get("lossless"),
                             [prompt] * n_rows, max_new_tokens=n_new, sampling=samp,
                             key=jax.random.key(11), eos_token_id=None)
  toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
  stats = out.stats.summary()
  assert 0 < stats["accepted"] < stats["target_calls"] * k  # rejections did happen
  probs = np.asarray(teacher_forced_probs(target, tp, prompt, out.tokens, samp))
  # Position 0 comes from prefill; positions >= 1 from the speculative steps,
  # position >= 2 always after at least one verify step (and, for most rows, a rollback).
  for sl in (slice(1, 2), slice(2, n_new)):
    z = martingale_z(toks[:, sl], probs[:, sl], lens - sl.start)
    assert np.abs(z).max() < 4.5, (sl, z)


def test_statistical_check_detects_a_lossy_rule(pair):
  """Negative control: the same check must fail for a rule that is not lossless."""
  target, tp, draft, dp = pair
  samp = SamplingConfig(temperature=1.0)
  prompt = [5, 9, 11]

  class AcceptAll(verifiers.Lossless):
    def accept_prob(self, state, q, x):
      return jnp.float32(1.0)

  out = speculative_generate(target, tp, LMDrafter(3, samp, draft), dp, AcceptAll(),
                             [prompt] * 1500, max_new_tokens=7, sampling=samp,
                             key=jax.random.key(11), eos_token_id=None)
  probs = np.asarray(teacher_forced_probs(target, tp, prompt, out.tokens, samp))
  z = martingale_z(np.asarray(out.tokens)[:, 1:], probs[:, 1:], np.asarray(out.lengths) - 1)
  assert np.abs(z).max() > 10


@pytest.mark.slow  # the default suite keeps tests/decoding/test_tensor_parallel.py's meshes (rows
# over 4 devices x TP 2, and 1 x 3) against one device
def test_same_result_on_1_and_8_devices(pair):
  assert jax.device_count() >= 8, "conftest sets 8 fake CPU devices"
  target, tp, draft, dp = pair
  prompts = _ragged_prompts(11, 32, seed=4)  # 11 rows: not divisible by 8
  samp = SamplingConfig(temperature=1.0)
  kw = dict(max_new_tokens=12, sampling=samp, key=jax.random.key(3), eos_token_id=None)
  d = LMDrafter(3, samp, draft)
  one = speculative_generate(target, tp, d, dp, verifiers.get("lossless"), prompts, **kw)
  eight = speculative_generate(target, tp, d, dp, verifiers.get("lossless"), prompts,
                               mesh=parallel.make_mesh(8), **kw)
  assert one.to_lists() == eight.to_lists()
  np.testing.assert_array_equal(one.stats.accepted, eight.stats.accepted)
  # Target-only generation shards the same way.
  g1 = generate(target, tp, prompts, **kw)
  g8 = generate(target, tp, prompts, mesh=parallel.make_mesh(8), **kw)
  assert g1.to_lists() == g8.to_lists()


@pytest.mark.slow  # tests/decoding/test_tensor_parallel.py runs data x model meshes in the
# default suite
def test_same_result_on_a_4x2_tensor_parallel_mesh(pair):
  target, tp, draft, dp = pair
  prompts = _ragged_prompts(11, 32, seed=4)
  samp = SamplingConfig(temperature=1.0)
  kw = dict(max_new_tokens=12, sampling=samp, key=jax.random.key(3), eos_token_id=None)
  d = LMDrafter(3, samp, draft)
  one = speculative_generate(target, tp, d, dp, verifiers.get("lossless"), prompts, **kw)
  mesh = parallel.make_mesh(4, 2)
  tensor = speculative_generate(target, parallel.shard_params(target, tp, mesh), d, dp,
                                verifiers.get("lossless"), prompts, mesh=mesh, **kw)
  assert one.to_lists() == tensor.to_lists()


def test_no_recompilation_within_a_bucket(pair):
  target, tp, draft, dp = pair
  d = LMDrafter(2, GREEDY, draft)
  run = lambda prompts: speculative_generate(target, tp, d, dp, verifiers.get("lossless"),
                                             prompts, max_new_tokens=5, eos_token_id=None)
  run([[1, 2, 3]])
  before = spec._speculative._cache_size()
  run([[4, 5, 6, 7, 8, 9, 10]])
  run([[4] * 15])
  assert spec._speculative._cache_size() == before
  run([[4] * 17])  # next bucket: one new compilation
  assert spec._speculative._cache_size() == before + 1


TREE_PATHS = ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0))


def test_tree_greedy_equals_target_greedy(pair):
  from specjax.decoding.drafters import LMTreeDrafter
  target, tp, draft, dp = pair
  prompts = _ragged_prompts(6, 32, seed=2)
  ref = generate(target, tp, prompts, max_new_tokens=20, eos_token_id=None).to_lists()
  tree = LMTreeDrafter(model=draft, paths=TREE_PATHS)
  out = speculative_generate(target, tp, tree, dp, verifiers.get("lossless"), prompts,
                             max_new_tokens=20, eos_token_id=None)
  assert out.to_lists() == ref
  # With the target as its own drafter the rank-0 path is always accepted.
  same = speculative_generate(target, tp, LMTreeDrafter(model=target, paths=TREE_PATHS),
                              tp, verifiers.get("lossless"), prompts, max_new_tokens=20,
                              eos_token_id=None)
  assert same.to_lists() == ref
  acc = np.asarray(same.stats.accept_counts).sum(0)
  off = np.asarray(same.stats.offered_counts).sum(0)
  np.testing.assert_array_equal(acc, off)


@pytest.mark.slow  # trees stay lossless in the default suite: tests/decoding/test_sampled_tree.py
# (the loop, with broken variants) and tests/experiments/test_first_step_law.py (exact laws)
def test_tree_lossless_reproduces_target_distribution(pair):
  """Deterministic top-k tree candidates (q = onehot) with the lossless rule.

  Same martingale z-test as for chains: 1500 rows x 6 tokens, V = 32, |z| < 4.5.
  """
  from specjax.decoding.drafters import LMTreeDrafter
  target, tp, draft, dp = pair
  samp = SamplingConfig(temperature=1.0)
  prompt = [5, 9, 11]
  tree = LMTreeDrafter(model=draft, paths=TREE_PATHS, sampling=samp)
  out = speculative_generate(target, tp, tree, dp, verifiers.get("lossless"), [prompt] * 1500,
                             max_new_tokens=6, sampling=samp, key=jax.random.key(5),
                             eos_token_id=None)
  s = out.stats.summary()
  assert 0 < s["accepted"] < 3 * s["target_calls"]
  probs = np.asarray(teacher_forced_probs(target, tp, prompt, out.tokens, samp))
  z = martingale_z(np.asarray(out.tokens)[:, 1:], probs[:, 1:], np.asarray(out.lengths) - 1)
  assert np.abs(z).max() < 4.5, z


@pytest.mark.slow  # tests/models/test_models.py checks the decode-params forward in the
# default suite
def test_prepared_decode_params(pair):
  """Target and draft params prepared once with Model.decode_params (per-layer trees)
  give the same tokens and statistics as the stored (stacked) params, greedy and sampled."""
  target, tp, draft, dp = pair
  prompts = _ragged_prompts(3, 32, seed=5)
  for samp in (GREEDY, SamplingConfig(temperature=1.0)):
    drafter = LMDrafter(3, samp, draft)
    run = lambda t_params, d_params: speculative_generate(
        target, t_params, drafter, d_params, verifiers.get("lossless"), prompts,
        max_new_tokens=10, sampling=samp, key=jax.random.key(3), eos_token_id=None)
    a = run(tp, dp)
    b = run(target.decode_params(tp), draft.decode_params(dp))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.slow  # compiles the step and the whole loop twice (33 s)
def test_host_loop_of_the_jitted_step_matches_the_while_loop(pair):
  """The one step, called from a host loop (jit_init / jit_step, as SV calibration
  and streaming callers do), gives the while_loop's tokens and statistics bit for bit,
  for a sampled chain and a tree; its records add up to the statistics."""
  from specjax.decoding.autoregressive import RUNNING
  from specjax.decoding.drafters import LMTreeDrafter
  from specjax.decoding.prompts import prepare_prompts
  target, tp, draft, dp = pair
  prompts = _ragged_prompts(3, 32, seed=7)
  samp = SamplingConfig(temperature=1.0)
  rule, key = verifiers.get("mars", theta=0.5), jax.random.key(4)
  for drafter in (LMDrafter(3, samp, draft),
                  LMTreeDrafter(model=draft, paths=TREE_PATHS, sampling=samp)):
    ref = speculative_generate(target, tp, drafter, dp, rule, prompts, max_new_tokens=9,
                               sampling=samp, key=key, eos_token_id=None, cache_length=40)
    tokens, lengths = prepare_prompts(prompts, 32)  # bucket 16 < cache 40
    loop = spec.make_loop(target, drafter, None, 9, (), 40)
    inputs, state = spec.jit_init(loop, drafter, rule, samp, tp, dp, None, jnp.asarray(tokens),
                                  jnp.asarray(lengths), key, jnp.arange(3, dtype=jnp.int32))
    accepted, emitted, steps = 0, 0, 0
    while np.any(np.asarray(state.finish_reason) == RUNNING):
      state, rec = spec.jit_step(loop, inputs, state)
      accepted += np.asarray(rec.num_accepted)
      emitted += np.asarray(rec.num_emitted)
      steps += 1
    assert int(np.asarray(rec.step)) == steps  # steps count from 1 (prefill is step 0)
    np.testing.assert_array_equal(state.tokens[:, :9], ref.tokens)
    np.testing.assert_array_equal(state.num_tokens, ref.lengths)
    for x, y in zip(jax.tree.leaves(state.stats), jax.tree.leaves(ref.stats)):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    np.testing.assert_array_equal(accepted, ref.stats.accepted)
    np.testing.assert_array_equal(emitted + 1, ref.lengths)  # + the prefill's token
