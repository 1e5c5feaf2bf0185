"""Traced hyperparameters: one compilation serves a sweep.

Rules, sampling configs and drafters are pytrees (specjax.hyperparams): their
continuous hyperparameters are traced leaves, their static part (rule kind,
gate, K, greedy, ...) is the treedef.  Compilations are counted with the jitted
functions' ``_cache_size()`` (as tests/decoding/test_generate.py does for buckets);
each test uses a ``max_new_tokens`` no other test uses, so its first call is
a fresh compilation.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.analysis import induced
from specjax.decoding import autoregressive as ar
from specjax.decoding import parallel
from specjax.decoding import speculative as spec
from specjax.decoding.drafters import LMDrafter
from specjax.distributions import SamplingConfig
from specjax.hyperparams import static_key
from specjax.verifiers import CoS, Lenience, Mars, SpecCascade, Typical
from tests.helpers import independent_draft, tiny_pair

GREEDY = SamplingConfig(temperature=0.0)
PROMPTS = [[5, 6, 7], [9, 3], [4, 4, 8, 1]]


@pytest.fixture(scope="module")
def models():
  target, tp, _, _ = tiny_pair(vocab=32, seed=3)
  draft, dp = independent_draft(vocab=32)
  return target, tp, draft, dp


def _spec(models, rule, *, k=2, sampling=GREEDY, draft_sampling=None, n=7, **kw):
  target, tp, draft, dp = models
  d = LMDrafter(k, sampling if draft_sampling is None else draft_sampling, draft)
  return spec.speculative_generate(target, tp, d, dp, rule, PROMPTS, max_new_tokens=n,
                                   sampling=sampling, key=jax.random.key(1),
                                   eos_token_id=None, **kw)


# --- the pytree split ------------------------------------------------------------------


def test_leaves_are_the_continuous_hyperparameters():
  assert jax.tree.leaves(Mars(theta=0.8)) == [0.8, 1.0]  # theta, delta
  assert jax.tree.leaves(Mars(theta=0.8, base=CoS(lam=0.3))) == [0.8, 1.0, 0.3]
  assert jax.tree.leaves(Typical(eps=0.05)) == [0.05]  # delta=None stays static
  assert jax.tree.leaves(Typical(eps=0.05, delta=0.2, gate="soft")) == [0.05, 0.2]
  assert jax.tree.leaves(Lenience(l=1)) == [1.0]  # an int in a float field travels as float
  assert jax.tree.leaves(verifiers.get("mars", theta="0.85")) == [0.85, 1.0]
  samp = SamplingConfig(temperature=0.7, top_k=5, top_p=0.9)
  assert jax.tree.leaves(samp) == [0.7, 0.9, 0.0, 0.0]
  # Static parts: equal treedefs for different values, different for a new kind / gate.
  assert static_key(Mars(theta=0.5)) == static_key(Mars(theta=0.9))
  assert static_key(Mars(base=CoS(lam=0.1))) == static_key(Mars(base=CoS(lam=0.9)))
  assert static_key(Mars()) != static_key(Mars(margin="difference"))
  assert static_key(Mars()) != static_key(Mars(base="cos"))
  assert static_key(SpecCascade()) != static_key(SpecCascade(gate="soft"))
  assert static_key(SamplingConfig(temperature=0.5)) == static_key(SamplingConfig(temperature=2.))
  assert static_key(SamplingConfig(temperature=0.5)) != static_key(GREEDY)
  assert static_key(SamplingConfig(top_p=0.9)) != static_key(SamplingConfig())
  assert static_key(SamplingConfig(top_p=0.9)) == static_key(SamplingConfig(top_p=0.5))


def test_roundtrip_keeps_equality_and_hash_and_skips_validation():
  for rule in (Mars(), Mars(base=CoS(lam=0.4), sampled_mode="strict_ablation"),
               Typical(delta=0.3), SpecCascade(gate="soft"), verifiers.Greedy()):
    leaves, tree = jax.tree.flatten(rule)
    back = jax.tree.unflatten(tree, leaves)
    assert back == rule and hash(back) == hash(rule) and repr(back) == repr(rule)
  # Construction validates (same errors as before) ...
  with pytest.raises(ValueError, match="theta"):
    Mars(theta=-1.0)
  with pytest.raises(ValueError, match="temperature"):
    SamplingConfig(temperature=-0.5)
  # ... rebuilding from leaves does not: JAX does it with tracers and placeholders.
  tree = jax.tree.structure(Mars())
  odd = jax.tree.unflatten(tree, [object(), object()])
  assert odd.margin == "ratio" and odd.base_rule == verifiers.Lossless()
  samp = jax.tree.unflatten(jax.tree.structure(SamplingConfig(temperature=0.5)),
                            [object()] * 4)
  assert samp.greedy is False and samp.top_k == 0


def test_user_rule_declares_static_fields():
  """The README recipe: floats are traced unless named in ``static_fields``."""

  @dataclasses.dataclass(frozen=True)
  class Scaled(verifiers.Lossless):
    factor: float = 2.0
    width: float = 3.0
    mode: str = "a"
    static_fields = ("width",)

    def accept_prob(self, state, q, x):
      return jnp.minimum(1.0, self.factor * state.p_cur[x] / q[x])

  r = Scaled(factor=1.5, width=4.0)
  leaves, tree = jax.tree.flatten(r)
  assert leaves == [1.5] and r.traced_fields == ("factor",)
  assert static_key(Scaled(factor=1.1, width=4.0)) == tree
  assert static_key(Scaled(factor=1.5, width=5.0)) != tree
  assert static_key(Scaled(mode="b")) != static_key(Scaled())


def test_analysis_sweep_compiles_once_and_vmaps_over_stacked_rules():
  rs = np.random.RandomState(0)
  z = jnp.asarray(rs.normal(size=(4, 12)) * 3, jnp.float32)
  p, q = jax.nn.softmax(z), jax.nn.softmax(z + jnp.asarray(rs.normal(size=(4, 12)), jnp.float32))
  fn = induced._induced_parts_jit
  kw = dict(chunk_size=5)  # a chunk size no other test uses: a fresh cache entry
  thetas = (0.2, 0.5, 0.8, 0.95)
  before = fn._cache_size()
  dists = [induced.induced_distribution(Mars(theta=t, guard=False), z, p, q, **kw)
           for t in thetas]
  assert fn._cache_size() == before + 1
  assert not np.allclose(dists[0], dists[-1])  # theta really reaches the program
  stacked = jax.tree.map(lambda *a: jnp.stack(a), *[Mars(theta=t, guard=False) for t in thetas])
  vm = jax.vmap(lambda r: induced.induced_distribution(r, z, p, q, **kw))(stacked)
  np.testing.assert_allclose(vm, np.stack(dists), atol=1e-6)
  # Nested base rule: MARS over CoS, lam traced.
  for lam in (0.2, 0.6):
    induced.induced_distribution(Mars(base=CoS(lam=lam)), z, p, q, **kw)
  assert fn._cache_size() == before + 2


# --- the loop --------------------------------------------------------------------------


# In the slow step (the default suite's 8-minute budget).
@pytest.mark.slow
def test_theta_sweep_compiles_the_speculative_loop_once(models):
  fn = spec._speculative
  before = fn._cache_size()
  relaxed = {}
  for theta in (0.3, 0.5, 0.7, 0.9, 5.0):
    relaxed[theta] = _spec(models, Mars(theta=theta), n=11).stats.summary()["relaxed"]
  assert fn._cache_size() == before + 1
  # The traced value really reaches the program: with the guard, theta >= 1
  # never relaxes; a small theta does (counted over every step and row).
  assert relaxed[5.0] == 0 and relaxed[0.3] > 0
  # Sanity: the rule kind and K do recompile (static fields: see static_key above).
  _spec(models, Lenience(l=0.5), n=11)
  assert fn._cache_size() == before + 2
  _spec(models, Mars(theta=0.5), k=3, n=11)
  assert fn._cache_size() == before + 3


def test_difference_margin_sweep_changes_results_without_recompiling(models):
  fn = spec._speculative
  before = fn._cache_size()
  relaxed = [_spec(models, Mars(margin="difference", delta=d), n=13).stats.summary()["relaxed"]
             for d in (0.0, 1.0, 100.0)]
  assert fn._cache_size() == before + 1
  assert relaxed[0] == 0 and relaxed[2] > 0


@pytest.mark.slow  # the same traced-hyperparameter mechanism as the theta sweep above
def test_temperature_sweep_compiles_once(models):
  fn = spec._speculative
  before = fn._cache_size()
  outs = [_spec(models, verifiers.get("lossless"), sampling=SamplingConfig(temperature=t),
                n=9).to_lists() for t in (0.5, 1.0, 1.7)]
  assert fn._cache_size() == before + 1
  assert outs[0] != outs[2]  # same key, different temperature: different samples
  # Lossy rules with a sampled drafter: lam and the temperature in one program.
  for t, lam in ((0.6, 0.3), (1.3, 0.8)):
    _spec(models, CoS(lam=lam), sampling=SamplingConfig(temperature=t), n=9)
  assert fn._cache_size() == before + 2
  _spec(models, verifiers.get("lossless"), sampling=GREEDY, n=9)  # greedy: a new program
  assert fn._cache_size() == before + 3


@pytest.mark.slow  # the traced-hyperparameter mechanism of the theta sweep, on generate
def test_generate_temperature_and_top_p_sweeps_compile_once(models):
  target, tp, _, _ = models
  fn = ar._generate
  run = lambda samp: ar.generate(target, tp, PROMPTS, max_new_tokens=6, sampling=samp,
                                 key=jax.random.key(0), eos_token_id=None).to_lists()
  before = fn._cache_size()
  outs = [run(SamplingConfig(temperature=t)) for t in (0.4, 1.0, 2.5)]
  assert fn._cache_size() == before + 1 and outs[0] != outs[2]
  for top_p in (0.5, 0.8, 0.95):
    run(SamplingConfig(temperature=1.0, top_p=top_p))
  assert fn._cache_size() == before + 2
  run(SamplingConfig(temperature=1.0, top_k=4))  # top_k fixes a shape: recompiles
  assert fn._cache_size() == before + 3


@pytest.mark.slow  # the single-device sweeps' compile-once tests stay
def test_sharded_sweep_compiles_once(models, monkeypatch):
  """The mesh path (parallel.run_sharded) traces the loop once for a sweep of
  temperature (target and drafter) and theta; results match one device."""
  target, tp, draft, dp = models
  traces, core = [], spec.speculative_core

  def counting_core(*args, **kw):
    traces.append(1)  # Python side effect: runs once per trace
    return core(*args, **kw)

  monkeypatch.setattr(spec, "speculative_core", counting_core)
  mesh = parallel.make_mesh(2)
  for t in (0.5, 1.0, 1.5):
    samp = SamplingConfig(temperature=t)
    kw = dict(max_new_tokens=5, sampling=samp, key=jax.random.key(2), eos_token_id=None)
    d = LMDrafter(2, samp, draft)
    one = spec.speculative_generate(target, tp, d, dp, Mars(theta=t / 2), PROMPTS, **kw)
    two = spec.speculative_generate(target, tp, d, dp, Mars(theta=t / 2), PROMPTS, mesh=mesh,
                                    **kw)
    assert one.to_lists() == two.to_lists()
  assert len(traces) == 1


def test_sv_collection_sweep_compiles_each_step_once(models):
  """SV calibration records (policies.sv_collect) run the loop's own jitted
  step: drafter and target temperature and the verifier's theta are traced
  arguments of it, so the sweep compiles the step (and the prefill) once."""
  from specjax.policies import sv_collect
  from specjax.policies.sv import SpeculativeVerification, uninformative_table
  target, tp, draft, dp = models
  pol = SpeculativeVerification(2, companion=draft)
  params = pol.make_params(dp, uninformative_table(0.7), np.array([1.0, 1.1, 1.2]), 3)
  before = spec.jit_step._cache_size(), spec.jit_init._cache_size()
  for t, theta in ((0.5, 0.3), (1.2, 0.9), (2.0, 0.6)):
    samp = SamplingConfig(temperature=t)
    rec = sv_collect.collect_records(target, tp, LMDrafter(2, samp, draft), dp, pol, params,
                                     Mars(theta=theta), PROMPTS, max_new_tokens=4,
                                     sampling=samp, key=jax.random.key(0), eos_token_id=None)
    assert len(rec["S"]) > 0
  assert (spec.jit_step._cache_size(), spec.jit_init._cache_size()) == (before[0] + 1,
                                                                       before[1] + 1)
