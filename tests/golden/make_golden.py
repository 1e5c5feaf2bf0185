"""Golden outputs of the decoding loop, the verifiers and the analysis.

:func:`golden_outputs` runs a fixed set of small calls on the tiny random
models of :mod:`tests.helpers` (and the EAGLE / SV set-ups of
``tests/decoding/test_eagle.py`` / ``tests/policies/test_sv.py``): greedy and sampled chains
(``LMDrafter``), static trees (``LMTreeDrafter``), EAGLE chains and dynamic
trees, the lossless, MARS, CoS, typical, SpecCascade and lenience rules, an SV
policy run, the logits processors and the exact analysis.  It returns a flat
``{name: ndarray}`` dict of plain numeric arrays (tokens, lengths, every
statistic, probabilities).

``tests/docs/test_golden.py`` asserts that the current code reproduces
``tests/golden/outputs.npz`` bit for bit; the file was written *before* the
distributions refactor, so the refactor is checked to be a pure move.

Regenerate (only when a behaviour change is intended, and say so in the
commit message)::

    JAX_PLATFORMS=cpu python -m tests.golden.make_golden

The outputs are CPU float32 results; other backends may differ in the last
bit, so the test runs on the CPU backend only.
"""

from __future__ import annotations

import os

import numpy as np

GOLDEN_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "outputs.npz")

TREE_PATHS = ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0))


def _ragged_prompts(n, vocab, seed, max_len=11):
  rs = np.random.RandomState(seed)
  return [rs.randint(4, vocab, size=rs.randint(2, max_len)).tolist() for _ in range(n)]


def _result_arrays(prefix: str, out) -> dict:
  """tokens, lengths, finish reasons and every statistic of a generation result."""
  import dataclasses
  d = {f"{prefix}/tokens": out.tokens, f"{prefix}/lengths": out.lengths,
       f"{prefix}/finish_reason": out.finish_reason}
  for f in dataclasses.fields(out.stats):
    d[f"{prefix}/stats/{f.name}"] = getattr(out.stats, f.name)
  return d


def _loop_outputs() -> dict:
  import jax

  from specjax import verifiers
  from specjax.decoding.drafters import LMDrafter, LMTreeDrafter
  from specjax.distributions import SamplingConfig
  from specjax.decoding.speculative import speculative_generate
  from tests.helpers import tiny_pair

  target, tp, draft, dp = tiny_pair(vocab=32)
  greedy = SamplingConfig(temperature=0.0)
  hot = SamplingConfig(temperature=1.0)
  procs = SamplingConfig(temperature=0.8, top_k=12, top_p=0.95)
  prompts = _ragged_prompts(4, 32, seed=0)
  out = {}

  def run(name, drafter, rule, sampling, seed=None):
    key = None if seed is None else jax.random.key(seed)
    res = speculative_generate(target, tp, drafter, dp, rule, prompts, max_new_tokens=12,
                               sampling=sampling, key=key, eos_token_id=None)
    out.update(_result_arrays(name, res))

  chain = lambda s: LMDrafter(3, s, draft)
  tree = lambda s: LMTreeDrafter(model=draft, paths=TREE_PATHS, sampling=s)
  run("chain_greedy_lossless", chain(greedy), verifiers.get("lossless"), greedy)
  run("chain_greedy_mars", chain(greedy), verifiers.get("mars", theta=0.5), greedy)
  run("chain_sampled_lossless", chain(hot), verifiers.get("lossless"), hot, seed=1)
  run("chain_sampled_mars", chain(hot), verifiers.get("mars", theta=0.5), hot, seed=2)
  run("chain_sampled_cos", chain(hot), verifiers.get("cos", lam=0.5), hot, seed=3)
  run("chain_sampled_typical", chain(hot), verifiers.get("typical", eps=0.09), hot, seed=4)
  run("chain_procs_spec_cascade", chain(procs), verifiers.get("spec_cascade", p_base=0.1),
      procs, seed=5)
  run("tree_greedy_mars", tree(greedy), verifiers.get("mars", theta=0.5), greedy)
  run("tree_sampled_lenience", tree(hot), verifiers.get("lenience", l=0.5), hot, seed=6)
  return out


def _eagle_outputs() -> dict:
  import jax

  from specjax import verifiers
  from specjax.decoding.eagle_drafter import EagleDrafter
  from specjax.decoding.eagle_trees import EagleTreeDrafter
  from specjax.distributions import SamplingConfig
  from specjax.decoding.speculative import speculative_generate
  from specjax.models import eagle
  from specjax.models.config import ModelConfig
  from specjax.models.transformer import Model
  from tests.helpers import scaled_params

  v = 32
  cfg = ModelConfig(vocab_size=v, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8)
  target = Model(cfg)
  tp = scaled_params(target, 0, 6.0)
  out = {}
  for kind, reduced in (("eagle1", False), ("eagle3", True)):
    hcfg = eagle.EagleConfig.for_target(cfg, kind, draft_vocab_size=16 if reduced else None)
    head = eagle.EagleHead(hcfg)
    hp = jax.tree.map(lambda x: x * 3.0 if x.ndim > 1 else x, head.init_params(jax.random.key(1)))
    d2t = eagle.vocab_maps(np.arange(0, v, 2), v)[0] if reduced else None
    params = EagleDrafter.make_params(hp, target, tp, d2t)
    prompts = [[1, 2, 3, 4, 5], [7, 8], [3, 3, 3, 9, 10, 11, 12]]
    if kind == "eagle1":  # greedy chain, lossless
      s = SamplingConfig(temperature=0.0)
      drafter = EagleDrafter(num_draft=3, sampling=s, head=head)
      rule, key = verifiers.get("lossless"), None
    else:  # sampled EAGLE-2 dynamic tree, CoS (needs the node distribution)
      s = SamplingConfig(temperature=1.0)
      drafter = EagleTreeDrafter(depth=3, sampling=s, head=head, top_k=3,
                             total_tokens=8)
      rule, key = verifiers.get("cos", lam=0.5), jax.random.key(7)
    res = speculative_generate(target, tp, drafter, params, rule, prompts, max_new_tokens=12,
                               sampling=s, key=key, eos_token_id=None)
    out.update(_result_arrays(f"{kind}_{drafter.tree_kind}_{rule.name}", res))
  return out


def _sv_outputs() -> dict:
  import jax
  import jax.numpy as jnp

  from specjax import verifiers
  from specjax.decoding.drafters import LMDrafter
  from specjax.distributions import SamplingConfig
  from specjax.decoding.speculative import speculative_generate
  from specjax.policies import SpeculativeVerification
  from specjax.policies.calibration import CalibrationTable
  from tests.helpers import independent_draft

  def perturbed(params, seed, noise):
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree.unflatten(tree, [l + noise * jax.random.normal(kk, l.shape) if l.ndim > 1
                                     else l for l, kk in zip(leaves, keys)])

  model, tp = independent_draft(vocab=32, seed=7)
  tp = jax.tree.map(lambda x: x * 1.5 if x.ndim > 1 else x, tp)
  dp, cp = perturbed(tp, 1, 0.02), perturbed(tp, 2, 0.01)
  k = 4
  table = CalibrationTable(jnp.asarray([0.0, 1.0]), jnp.asarray([0.0, 0.3, 0.7, 1.0]),
                           jnp.asarray([[0.05, 0.5, 0.95]]))
  prompts = _ragged_prompts(4, 32, seed=5)
  pol = SpeculativeVerification(k, companion=model)
  params = pol.make_params(cp, table, np.array([1.0, 1.3, 1.6, 1.9, 2.2]), len(prompts))
  greedy = SamplingConfig(temperature=0.0)
  res = speculative_generate(model, tp, LMDrafter(k, greedy, model), dp,
                             verifiers.get("mars", theta=0.3), prompts, max_new_tokens=12,
                             eos_token_id=None, policy=pol, policy_params=params)
  return _result_arrays("sv_greedy_mars", res)


def _math_outputs() -> dict:
  """Processors, sampling, entropy and the exact analysis on synthetic contexts."""
  import jax
  import jax.numpy as jnp

  from specjax import analysis, verifiers
  from specjax.analysis import margins, propositions
  from specjax import distributions as sampling

  out = {}
  z, p = propositions.gaussian_logit_contexts(jax.random.key(0), 6, 24, scale=2.0, shift=3.0)
  zq = z + jax.random.normal(jax.random.key(1), z.shape)
  configs = {"t07": sampling.SamplingConfig(temperature=0.7),
             "topk": sampling.SamplingConfig(temperature=1.0, top_k=5),
             "topp": sampling.SamplingConfig(temperature=1.2, top_p=0.8),
             "minp": sampling.SamplingConfig(temperature=1.0, min_p=0.1),
             "eta": sampling.SamplingConfig(temperature=1.0, eta=0.05),
             "greedy": sampling.SamplingConfig(temperature=0.0)}
  for name, cfg in configs.items():
    probs = sampling.probs_from_logits(z, cfg)
    out[f"probs/{name}"] = probs
    out[f"sample/{name}"] = sampling.sample_logits(jax.random.key(2), z, cfg)[0]
    out[f"entropy/{name}"] = sampling.entropy_nats(probs)
  q = sampling.probs_from_logits(zq, configs["t07"])
  p = sampling.probs_from_logits(z, configs["t07"])
  rules = {"lossless": verifiers.get("lossless"),
           "mars": verifiers.get("mars", theta=0.8),
           "mars_entropy": verifiers.get("mars", theta=0.8, adaptive="entropy"),
           "mars_diff": verifiers.get("mars", margin="difference", delta=1.0),
           "cos": verifiers.get("cos", lam=0.5),
           "typical_soft": verifiers.get("typical", eps=0.09, gate="soft"),
           "spec_cascade": verifiers.get("spec_cascade", p_base=0.2),
           "lenience": verifiers.get("lenience", l=0.5)}
  for name, rule in rules.items():
    out[f"induced/sampled/{name}"] = analysis.induced_distribution(rule, z, p, q)
    out[f"induced/top2/{name}"] = analysis.induced_distribution(rule, z, p, q, draft="topk",
                                                                top_k=2)
    out[f"bonus/{name}"] = analysis.bonus_distribution(rule, z, p)
  out["kl"] = analysis.kl(p, q)
  out["tv"] = analysis.tv(p, q)
  out["min_p_baseline"] = analysis.min_p_baseline(p, 0.2)
  out["eta_baseline"] = analysis.eta_baseline(p, 0.09)
  out["margins/relaxed"] = margins.relaxed_mask(np.asarray(z), 0.8)
  out["margins/relaxed_noguard"] = margins.relaxed_mask(np.asarray(z) - 3.0, 0.8, guard=False)
  out["margins/frac_curve"] = margins.relaxed_fraction_curve(np.asarray(z))
  return out


PARTS = {"math": _math_outputs, "loop": _loop_outputs, "eagle": _eagle_outputs,
         "sv": _sv_outputs}


def golden_outputs(parts=tuple(PARTS)) -> dict[str, np.ndarray]:
  """``{name: ndarray}`` of the golden outputs of ``parts`` (see the module docstring)."""
  out = {}
  for part in parts:
    out.update(PARTS[part]())
  return {k: np.asarray(v) for k, v in sorted(out.items())}


def load(path: str = GOLDEN_PATH) -> dict[str, np.ndarray]:
  """The stored golden arrays (plain arrays only: never unpickled)."""
  with np.load(path, allow_pickle=False) as f:
    return {k: f[k] for k in f.files}


def write(path: str = GOLDEN_PATH) -> None:
  arrays = golden_outputs()
  for k, v in arrays.items():
    if v.dtype == object:
      raise TypeError(f"{k}: object arrays would need pickle")
  np.savez_compressed(path, **arrays)
  print(f"wrote {len(arrays)} arrays to {path}")


if __name__ == "__main__":
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  write()
