"""SourceChoiceDrafter (specjax.decoding.source_choice): prompt lookup where it pays,
else an EAGLE-3 chain, chosen per round and row.  Greedy identity with the target,
with and without the cost-aware policy, both sources used and counted; the choice
follows the policy's tables (a lookup table of zeros never takes lookup, a sure one
takes it wherever it matched); the sampled run equals the ungated one where every
row drafts by EAGLE; bad input is refused naming it.  The law test of the choice
and its broken variant (a choice that reads the draft) are in
tests/verifiers/test_statistical_power.py (``source-choice-*``)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.checks import ArgumentTypeError
from specjax.decoding import speculative as spec
from specjax.decoding.autoregressive import generate
from specjax.decoding.drafters import LMDrafter
from specjax.decoding.eagle_drafter import EagleDrafter
from specjax.decoding.lookup_drafter import PromptLookupDrafter
from specjax.decoding.source_choice import SourceChoiceDrafter
from specjax.distributions import SamplingConfig
from specjax.policies import acceptance, cost_aware
from specjax.policies.cost_aware import CostAwareLength
from tests.helpers import eagle_head, eagle_target

K = 3
GREEDY = SamplingConfig(temperature=0.0)
# Prompts that repeat themselves (lookup matches) and ones that do not.
PROMPTS = [[3, 4, 5, 6, 3, 4, 5, 6, 3, 4], [7, 8, 9, 1, 2, 11], [5, 5, 5, 5, 5, 5],
           [9, 2, 7, 4, 12, 1, 8]]
CPU = [1.0, 1.3, 1.45, 1.6]  # a round's cost in target steps, n = 0..K


@pytest.fixture(scope="module")
def setup():
  target, tp = eagle_target()
  head, p, d2t = eagle_head("eagle3", reduced=True)
  return target, tp, head, EagleDrafter.make_params(p, target, tp, d2t)


def _choice(setup, samp=GREEDY):
  target, _, head, _ = setup
  return SourceChoiceDrafter(PromptLookupDrafter(K, vocab=target.config.vocab_size),
                             EagleDrafter(num_draft=K, sampling=samp, head=head))


def _params(lookup_accept, eagle_accept=0.6):
  return cost_aware.make_source_params(
      cost_aware.make_params(acceptance.constant_table([lookup_accept] * K), CPU),
      cost_aware.make_params(acceptance.constant_table([eagle_accept] * K),
                             [c + 0.1 for c in CPU]))


def _run(setup, drafter, samp=GREEDY, **kw):
  target, tp, _, ep = setup
  return spec.speculative_generate(target, tp, drafter, SourceChoiceDrafter.make_params(ep),
                                   verifiers.get("lossless"), PROMPTS, max_new_tokens=16,
                                   sampling=samp, key=jax.random.key(5), eos_token_id=None,
                                   **kw)


def test_greedy_identity_both_sources_used_and_the_tables_decide(setup):
  """Without a policy lookup drafts wherever it matched, EAGLE elsewhere; under the
  cost-aware policy a lookup table of zeros never takes lookup and a sure one takes
  it more often than EAGLE's value would; every run is the target's greedy text."""
  target, tp, _, _ = setup
  ref = generate(target, tp, PROMPTS, max_new_tokens=16, eos_token_id=None).to_lists()
  drafter = _choice(setup)
  runs = {"none": _run(setup, drafter)}
  for name, a in (("never", 0.0), ("sure", 1.0)):
    runs[name] = _run(setup, drafter, policy=CostAwareLength(K), policy_params=_params(a))
  for name, out in runs.items():
    assert out.to_lists() == ref, name
  rounds = {n: np.asarray(o.stats.source_rounds).sum(0) for n, o in runs.items()}
  calls = {n: int(np.sum(o.stats.target_calls)) for n, o in runs.items()}
  assert rounds["none"].min() > 0 and rounds["none"].sum() == calls["none"]
  assert rounds["never"][0] == 0 and rounds["never"].sum() == calls["never"]
  assert rounds["sure"][0] > 0
  acc = np.asarray(runs["none"].stats.source_accepted).sum(0)
  assert acc.sum() == int(np.sum(runs["none"].stats.accepted))


@pytest.mark.slow  # ~10 s (default-suite budget)
def test_sampled_rows_drafting_by_eagle_match_the_eagle_chain(setup):
  """At T = 1, with lookup never worth it (a table of zeros), every row drafts by
  EAGLE with the same keys as the EAGLE chain alone under the same policy: the same
  tokens (the source choice adds nothing to a row that takes the model source)."""
  samp = SamplingConfig(temperature=1.0)
  target, tp, head, ep = setup
  both = _run(setup, _choice(setup, samp), samp, policy=CostAwareLength(K),
              policy_params=_params(0.0))
  alone = spec.speculative_generate(
      target, tp, EagleDrafter(num_draft=K, sampling=samp, head=head), ep,
      verifiers.get("lossless"), PROMPTS, max_new_tokens=16, sampling=samp,
      key=jax.random.key(5), eos_token_id=None, policy=CostAwareLength(K),
      policy_params=cost_aware.make_params(acceptance.constant_table([0.6] * K),
                                           [c + 0.1 for c in CPU]))
  assert both.to_lists() == alone.to_lists()


def test_bad_input_is_refused_naming_it(setup):
  target, tp, head, ep = setup
  v = target.config.vocab_size
  eagle = EagleDrafter(num_draft=K, sampling=GREEDY, head=head)
  with pytest.raises(ArgumentTypeError, match="first=PromptLookupDrafter"):
    SourceChoiceDrafter(eagle, eagle)
  with pytest.raises(ArgumentTypeError, match="follows_committed=False"):
    SourceChoiceDrafter(PromptLookupDrafter(K, vocab=v), LMDrafter(K, GREEDY, target))
  with pytest.raises(ValueError, match="different K"):
    SourceChoiceDrafter(PromptLookupDrafter(K + 1, vocab=v), eagle)
  with pytest.raises(ValueError, match="different vocabularies"):
    SourceChoiceDrafter(PromptLookupDrafter(K, vocab=v + 1), eagle)
  single = cost_aware.make_params(acceptance.constant_table([0.5] * K), CPU)
  with pytest.raises(ValueError, match="make_source_params"):
    _run(setup, _choice(setup), policy=CostAwareLength(K), policy_params=single)
  with pytest.raises(ValueError, match="share one lambda"):
    cost_aware.make_source_params(single, cost_aware.make_params(
        acceptance.constant_table([0.5] * K), CPU, forget=0.5))
  with pytest.raises(ValueError, match="two cost_aware.make_params"):
    cost_aware.make_source_params(single)
  samp = SamplingConfig(temperature=1.0)
  with pytest.raises(ValueError, match="supplies_node_dist=False"):
    spec.speculative_generate(target, tp, _choice(setup, samp),
                              SourceChoiceDrafter.make_params(ep), verifiers.get("cos"),
                              PROMPTS, max_new_tokens=4, sampling=samp,
                              key=jax.random.key(0))


def test_best_offer_by_hand():
  """``max_n 1 + sum_{i<=n} a_1..a_i - lambda c(n)`` over the offers allowed, and its n."""
  a = jnp.asarray([[0.9, 0.5], [0.9, 0.5], [0.1, 0.1]])
  cost = jnp.asarray([1.0, 1.2, 1.7])
  value, n = cost_aware.best_offer(a, cost, jnp.ones((3,)), jnp.asarray([2, 0, 2]))
  # row 0: n = 0: 0; n = 1: 1.9 - 1.2 = 0.7; n = 2: 2.35 - 1.7 = 0.65 -> 0.7 at n = 1;
  # row 1 offers nothing -> 0 at n = 0; row 2: 1.1 - 1.2 < 0 -> 0 at n = 0
  np.testing.assert_allclose(np.asarray(value), [0.7, 0.0, 0.0], atol=1e-6)
  assert n.tolist() == [1, 0, 0]
