"""Path rules in the speculative loop (chains): block verification end to end.

Fast: greedy identity with block (batch > 1, ragged prompts, EOS mid-generation,
and a model-free drafter whose rows offer 0 or K drafts) and the refusal of a
path rule on a tree drafter.  Slow: the same tokens on 1 and 8 devices at
T = 1 (ragged acceptance), and the martingale z-test of tests/decoding/test_speculative.py
on the real loop at T = 1 (block passes; an accept-all path rule fails at the
same sample size).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.decoding import parallel
from specjax.decoding.autoregressive import EOS, MAX_TOKENS, generate
from specjax.decoding.drafters import LMDrafter, LMTreeDrafter
from specjax.decoding.lookup_drafter import PromptLookupDrafter
from specjax.decoding.speculative import speculative_generate
from specjax.distributions import SamplingConfig
from specjax.verifiers.path import PathDecision
from tests.helpers import ragged_prompts as _ragged_prompts, teacher_forced_probs, tiny_pair

GREEDY = SamplingConfig(temperature=0.0)
SAMPLED = SamplingConfig(temperature=1.0)
BLOCK = verifiers.get("block")
MAX_NEW = 16  # one value for every fast test: few compiles


@pytest.fixture(scope="module")
def pair():
  return tiny_pair(vocab=32)


def _until(row, eos):
  """``row`` cut after its first ``eos`` (what generation with that EOS emits)."""
  return row[:row.index(eos) + 1] if eos in row else row


def test_block_greedy_equals_target_greedy(pair):
  target, tp, draft, dp = pair
  prompts = _ragged_prompts(6, 32)
  free = generate(target, tp, prompts, max_new_tokens=MAX_NEW, eos_token_id=None).to_lists()
  # An EOS some rows hit mid-generation and some never produce.
  eos = next(t for t in free[0][3:] if any(t not in row for row in free))
  ref = [_until(row, eos) for row in free]
  assert {len(r) for r in ref} - {MAX_NEW} and MAX_NEW in {len(r) for r in ref}
  out = speculative_generate(target, tp, LMDrafter(3, GREEDY, draft), dp, BLOCK, prompts,
                             max_new_tokens=MAX_NEW, eos_token_id=eos)
  assert out.to_lists() == ref
  hit = np.array([eos in r for r in ref])
  np.testing.assert_array_equal(np.asarray(out.finish_reason), np.where(hit, EOS, MAX_TOKENS))
  summary = out.stats.summary()
  assert 1.0 < summary["tau"] <= 4
  assert summary["relaxed"] == 0


def test_block_greedy_with_rows_offering_no_drafts(pair):
  """Prompt lookup offers K drafts after a match and 0 without: block verifies
  ``length = num_valid`` per row and still emits the target's greedy tokens."""
  target, tp, _, _ = pair
  prompts = _ragged_prompts(6, 32)[:3] + [[5, 6, 7, 5, 6, 7, 5, 6], [9, 10, 11, 12], [4] * 5]
  ref = generate(target, tp, prompts, max_new_tokens=MAX_NEW, eos_token_id=None)
  drafter = PromptLookupDrafter(3, vocab=32)
  out = speculative_generate(target, tp, drafter, None, BLOCK, prompts,
                             max_new_tokens=MAX_NEW, eos_token_id=None)
  assert out.to_lists() == ref.to_lists()
  gamma_counts = np.asarray(out.stats.gamma_counts)  # [B, K+1] steps verifying gamma drafts
  assert gamma_counts[:, 0].sum() > 0 and gamma_counts[:, 3].sum() > 0


@pytest.mark.slow  # two compiles (one sharded): ~15 s on 2 cores
def test_block_same_tokens_on_1_and_8_devices(pair):
  assert jax.device_count() >= 8, "conftest sets 8 fake CPU devices"
  target, tp, draft, dp = pair
  prompts = _ragged_prompts(11, 32, seed=4)  # 11 rows: not divisible by 8
  kw = dict(max_new_tokens=MAX_NEW, sampling=SAMPLED, key=jax.random.key(3), eos_token_id=None)
  d = LMDrafter(3, SAMPLED, draft)
  one = speculative_generate(target, tp, d, dp, BLOCK, prompts, **kw)
  eight = speculative_generate(target, tp, d, dp, BLOCK, prompts, mesh=parallel.make_mesh(8),
                               **kw)
  assert one.to_lists() == eight.to_lists()
  np.testing.assert_array_equal(one.stats.accepted, eight.stats.accepted)
  acc = np.asarray(one.stats.accepted)
  assert len(set(acc.tolist())) > 1  # ragged acceptance across rows


def test_path_rule_on_a_tree_is_refused(pair):
  target, tp, draft, dp = pair
  drafter = LMTreeDrafter(draft, paths=((0,), (1,), (0, 0)))
  with pytest.raises(ValueError, match=r"'block'.*tree path rule.*traversal"):
    speculative_generate(target, tp, drafter, dp, BLOCK, [[5, 6, 7]], max_new_tokens=MAX_NEW)


# ------------------------------------------------------------------------ lossless, T = 1


@dataclasses.dataclass(frozen=True)
class _AcceptAll(verifiers.PathRule):
  """BROKEN on purpose: accepts every offered draft and emits the bonus ``P_{L+1}``."""

  name = "accept_all"

  def verify_path(self, z, p, q, x, u, length=None, q_node=None):
    n = x.shape[0] if length is None else length
    return PathDecision(jnp.asarray(n, jnp.int32), p[n])


def _max_z(pair, rule, n_rows=1500, n_new=7, k=3):
  """max |z| of the martingale test (tests/decoding/test_speculative.py) over the tokens of
  speculative steps (positions >= 1), ``n_rows`` copies of one prompt at T = 1."""
  from tests.helpers import martingale_z
  target, tp, draft, dp = pair
  prompt = [5, 9, 11]
  out = speculative_generate(target, tp, LMDrafter(k, SAMPLED, draft), dp, rule,
                             [prompt] * n_rows, max_new_tokens=n_new, sampling=SAMPLED,
                             key=jax.random.key(11), eos_token_id=None)
  stats = out.stats.summary()
  assert 0 < stats["accepted"] < stats["target_calls"] * k or rule is not BLOCK
  probs = np.asarray(teacher_forced_probs(target, tp, prompt, out.tokens, SAMPLED))
  toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
  return max(np.abs(martingale_z(toks[:, sl], probs[:, sl], lens - sl.start)).max()
             for sl in (slice(1, 2), slice(2, n_new)))


# N = 1500 rows x 7 tokens, V = 32: under H0 P(max |z| > 4.5) < 2e-4 per group.
@pytest.mark.slow
def test_block_reproduces_target_distribution(pair):
  assert _max_z(pair, BLOCK) < 4.5


@pytest.mark.slow
def test_lossless_check_catches_an_accept_all_path_rule(pair):
  assert _max_z(pair, _AcceptAll()) > 10
