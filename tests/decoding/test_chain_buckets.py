"""A verify-length bucket decides exactly as the full chain does.

``ChainStrategy.verify`` with buckets runs the target forward, the target's
distributions and the rule over the smallest bucket ``n`` covering every row's
``gamma`` (the rule over the first ``max(n, 1)`` drafts), slicing the uniforms
rather than redrawing them.  Since every rule stops at ``gamma``, the verdict
must equal the one over all K drafts: the same accepted counts, emitted
tokens, acceptance masks, relaxed counts, committed cache lengths and hidden
states along the kept path -- for every node and path rule, greedy and
sampled.  A bucket that drops a draft the rule reads (the rule over ``n - 1``
drafts) fails every case here.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.decoding.proposal import Proposal
from specjax.decoding.loop_state import SpecInputs, SpecLoop
from specjax.decoding.strategies import CHAIN, Round
from specjax.distributions import SamplingConfig
from specjax.models import kv_cache as kvc
from specjax.models.config import ModelConfig
from specjax.models.transformer import Model
from tests.helpers import scaled_params

V, K, B, PREFIX = 32, 4, 6, 5
BUCKETS = (0, 1, 2, 4)
GAMMAS = [  # every row's gamma: max 0, 1, 2, 3 (bucket 4 with a row short of it) and 4
    [0] * B, [1, 0, 1, 0, 0, 1], [2, 0, 1, 2, 1, 0], [3, 1, 0, 2, 3, 1], [4, 2, 0, 4, 1, 3]]


@pytest.fixture(scope="module")
def setup():
  cfg = ModelConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                    hidden_layers=(0, 1))
  target = Model(cfg)
  params = scaled_params(target, 0, 2.0)
  cache = target.init_cache(B, 16)
  prefix = jax.random.randint(jax.random.key(1), (B, PREFIX), 0, V)
  o = target.apply(params, prefix, jnp.broadcast_to(jnp.arange(PREFIX), (B, PREFIX)), cache)
  cache = kvc.commit(o.cache, jnp.full((B,), PREFIX, jnp.int32))
  ks = jax.random.split(jax.random.key(2), K + 4)
  last = jax.random.randint(ks[0], (B,), 0, V)
  # Drafts drawn from q = 0.7 * the target's own next-token law + 0.3 * noise, so that
  # every rule accepts some of them (the comparison would be vacuous otherwise).
  toks, qs, c = last[:, None], [], cache
  for i in range(K):
    pos = PREFIX + jnp.arange(toks.shape[1])
    z = target.apply(params, toks, jnp.broadcast_to(pos, toks.shape), c).logits[:, -1]
    noise = jax.nn.softmax(2.0 * jax.random.normal(ks[i + 1], (B, V)), -1)
    qs.append(0.7 * jax.nn.softmax(z, -1) + 0.3 * noise)
    toks = jnp.concatenate([toks, jax.random.categorical(ks[i + 1], jnp.log(qs[-1]))[:, None]
                            .astype(jnp.int32)], 1)
  q = jnp.stack(qs, 1)  # [B, K, V]
  proposal = Proposal(toks[:, 1:], q, q_node=q)
  u_keys, v_keys = jax.random.split(ks[K + 1], B), jax.random.split(ks[K + 2], B)
  verify = jax.jit(CHAIN.verify, static_argnums=0)

  def run(rule, sampling, gamma, buckets):
    loop = SpecLoop(target, None, 8, (), 16, CHAIN, K, buckets)
    inputs = SpecInputs(None, rule, sampling, params, None, None, jax.random.key(0),
                        jnp.arange(B, dtype=jnp.int32))
    rnd = Round(last, proposal, jnp.asarray(gamma, jnp.int32), jnp.ones(B, bool), u_keys,
                v_keys)
    return verify(loop, inputs, cache, rnd)

  return run


# The default suite runs one rule of each kind: lossless, a relaxed node rule (MARS),
# a rule that reads the drafter's node distribution (CoS) and a path rule (block) --
# at T = 0 all four, at T = 1 lossless and block (the default suite's budget).
FAST = {0.0: ("lossless", "mars", "cos", "block"), 1.0: ("lossless", "block")}
CASES = [(name, t) if name in FAST[t] else pytest.param(name, t, marks=pytest.mark.slow)
         for t in FAST for name in verifiers.available("node") + verifiers.available("path")]


@pytest.mark.parametrize("name,temperature", CASES)
def test_bucketed_verdict_equals_the_full_chain(setup, name, temperature):
  rule = verifiers.get(name)
  sampling = SamplingConfig(temperature=temperature)
  accepted_any = 0
  for gamma in GAMMAS:
    full = setup(rule, sampling, gamma, None)
    bucketed = setup(rule, sampling, gamma, BUCKETS)
    n = next(b for b in BUCKETS if b >= max(gamma))
    assert int(bucketed.processed) == n + 1 and int(full.processed) == K + 1
    for field in ("num_accepted", "token", "accepted", "num_relaxed", "path_drafts"):
      np.testing.assert_array_equal(getattr(bucketed, field), getattr(full, field),
                                    err_msg=f"{name} T={temperature} gamma={gamma}: {field}")
    np.testing.assert_array_equal(bucketed.cache.lengths, full.cache.lengths)
    nacc = np.asarray(full.num_accepted)
    assert np.all(nacc <= np.asarray(gamma))
    accepted_any += int(nacc.sum())
    for row in range(B):  # hidden states at last and the kept drafts
      np.testing.assert_allclose(bucketed.hidden[:, row, :nacc[row] + 1],
                                 full.hidden[:, row, :nacc[row] + 1], rtol=1e-5, atol=1e-5)
  assert accepted_any > 0, f"{name}: no draft accepted, the comparison is vacuous"
