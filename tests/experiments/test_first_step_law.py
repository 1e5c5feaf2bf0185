"""experiments.propositions.first_step_law: the exact law of the loop's first speculative token on the
loop's own contexts, checked against the real jitted loop.

Setup per case: one prompt, N rows, the same key for ``speculative_generate``
(``max_new_tokens = 2``) and :func:`first_step_laws`. Row i's context is
``prompt + t1_i``; the loop's second token y2_i is drawn from ``law_i`` given that
context, independently over rows, so the empirical histogram of y2 estimates the
mean of the laws. Tolerance: TV(empirical, mean law) < 0.5 sqrt(V / N) + 0.024:
the first term bounds E[TV] (Cauchy-Schwarz over V cells), and TV is
1/N-Lipschitz in each row, so by McDiarmid the excess exceeds 0.024 with
probability <= exp(-2 N 0.024^2) ~ 1e-3 at N = 6000. Broken variant caught per
case: the same samples against the law a loop that ignored the rule would have
(lossless: the target's p at each context) fail the same bound.
"""

import jax
import numpy as np
import pytest

from experiments.propositions.first_step_law import first_step_laws, first_token_divergence
from specjax import verifiers
from specjax.decoding.drafters import LMDrafter, LMTreeDrafter
from specjax.decoding.eagle_drafter import EagleDrafter
from specjax.decoding.eagle_trees import EagleTreeDrafter
from specjax.decoding.speculative import speculative_generate
from specjax.distributions import SamplingConfig
from tests.helpers import tiny_pair

N = 6000
T1 = SamplingConfig(temperature=1.0)
GREEDY = SamplingConfig(temperature=0.0)
PROMPT = [3, 7, 1]
TREE_PATHS = ((0,), (1,), (2,), (0, 0), (1, 0))


@pytest.fixture(scope="module")
def lm_models():
  return tiny_pair(vocab=16, scale=5.0, noise=0.05, seed=1)


def _eagle_case():
  from tests.helpers import eagle_head, eagle_target
  target, tp = eagle_target()
  head, hp, d2t = eagle_head("eagle3", reduced=True)
  # top_k 3 and 4 nodes: the dynamic tree keeps 2 of the 3 root children here (a deeper
  # node outscores the third), so the law reads 2 candidates and skips 2 slots (-1)
  drafter = EagleTreeDrafter(depth=3, sampling=T1, head=head, top_k=3,
                         total_tokens=4)
  return target, tp, drafter, EagleDrafter.make_params(hp, target, tp, d2t)


def _case(name, lm_models):
  target, tp, draft, dp = lm_models
  if name == "sampled_chain":
    return target, tp, LMDrafter(2, T1, draft), dp
  if name == "greedy_chain":  # deterministic x_1 with the drafter's node distribution (CoS)
    return target, tp, LMDrafter(2, GREEDY, draft), dp
  if name == "static_tree":
    return target, tp, LMTreeDrafter(model=draft, paths=TREE_PATHS, sampling=T1), dp
  return _eagle_case()


RULES = {"sampled_chain": ("mars", dict(theta=0.5)), "greedy_chain": ("cos", dict(lam=0.4)),
         "static_tree": ("mars", dict(theta=0.5)), "eagle_tree": ("typical", dict(eps=0.2))}


def _loop_and_laws(case, lm_models, rule):
  target, tp, drafter, dp = _case(case, lm_models)
  key = jax.random.key(5)
  out = speculative_generate(target, tp, drafter, dp, rule, [PROMPT] * N, max_new_tokens=2,
                             sampling=T1, key=key, eos_token_id=None)
  toks = np.asarray(out.tokens)
  assert (np.asarray(out.lengths) == 2).all()
  laws = first_step_laws(target, tp, drafter, dp, rule, T1, [PROMPT] * N, key=key)
  return toks, laws, target.config.vocab_size


# CI's slow step (19 s for the sampled chain alone); the default suite keeps the loop
# against the exact law in tests/analysis/test_loop_matches_analysis.py (MARS, sampled drafts).
@pytest.mark.slow
@pytest.mark.parametrize("case", ["sampled_chain", "eagle_tree", "greedy_chain", "static_tree"])
def test_laws_match_the_loop(lm_models, case):
  name, kw = RULES[case]
  rule = verifiers.get(name, **kw)
  toks, laws, v = _loop_and_laws(case, lm_models, rule)
  np.testing.assert_array_equal(laws.first, toks[:, 0])  # the loop's own contexts
  np.testing.assert_allclose(laws.law.sum(-1), 1.0, atol=1e-4)
  tol = 0.5 * np.sqrt(v / N) + 0.024
  emp = np.bincount(toks[:, 1], minlength=v) / N
  tv = 0.5 * np.abs(emp - laws.law.mean(0)).sum()
  assert tv < tol, (case, tv, tol)
  # power: the target's law at the same contexts (a loop that ignored the rule) is refused
  lossless = first_step_laws(*_case(case, lm_models)[:4], verifiers.get("lossless"), T1,
                             [PROMPT] * N, key=jax.random.key(5))
  assert 0.5 * np.abs(emp - lossless.law.mean(0)).sum() > tol, case


# typical's eps per case: on the EAGLE test set-up eps 0.2 and 0.05 give a law equal to
# p_A up to float noise at these contexts (KL 1.6e-8 and 2.8e-8, which a `kl > 0` check
# accepted); eps 0.01 gives KL 0.004
TYPICAL_EPS = {"sampled_chain": 0.2, "greedy_chain": 0.2, "static_tree": 0.2, "eagle_tree": 0.01}


# The trees run in CI's slow step (tests/verifiers/test_tree.py enumerates static trees'
# laws in the default suite).
@pytest.mark.parametrize("case", ["sampled_chain", "greedy_chain",
                                  pytest.param("static_tree", marks=pytest.mark.slow),
                                  pytest.param("eagle_tree", marks=pytest.mark.slow)])
def test_lossless_law_is_the_target_and_truncation_keeps_its_baseline_support(lm_models, case):
  """Lossless: law == p (its baseline) at every context, for every drafter kind; the
  hard-gate truncation rules put no mass outside A, so their KL to p_A is finite."""
  target, tp, drafter, dp = _case(case, lm_models)
  key = jax.random.key(2)
  ll = first_step_laws(target, tp, drafter, dp, verifiers.get("lossless"), T1, [PROMPT] * 64,
                       key=key)
  np.testing.assert_allclose(ll.law, ll.baseline, atol=1e-5)
  typical = verifiers.get("typical", eps=TYPICAL_EPS[case])
  d = first_token_divergence(target, tp, drafter, dp, typical, T1, [PROMPT, [5, 2]],
                             contexts_per_prompt=16, key=key)
  # float32 noise is ~1e-8 (above), so a law that differs from p_A must clear 1e-3
  # (measured: >= 0.004 for every case here)
  assert np.isfinite(d["kl"]) and d["kl"] > 1e-3 and 0 < d["tv"] < 1 and d["contexts"] == 32
  assert d["kl_ci"][0] <= d["kl"] <= d["kl_ci"][1]


def test_matched_baseline_row_has_zero_distance(lm_models):
  """A baseline row (lossless verification under the truncation processor) is its own
  baseline: KL 0 -- the check that the two sides use the same p_A."""
  from specjax.verifiers import matched_baseline
  target, tp, draft, dp = lm_models
  base = matched_baseline(verifiers.get("spec_cascade", p_base=0.3), T1)
  d = first_token_divergence(target, tp, LMDrafter(2, T1, draft), dp, base.verifier,
                             base.sampling, [PROMPT], contexts_per_prompt=32,
                             key=jax.random.key(0))
  assert d["kl"] < 1e-6 and d["tv"] < 1e-5 and d["kl_ci"] is None  # one prompt: no interval


def test_bad_arguments_are_named(lm_models):
  target, tp, draft, dp = lm_models
  drafter = LMDrafter(2, T1, draft)
  with pytest.raises(TypeError, match="key"):
    first_step_laws(target, tp, drafter, dp, verifiers.get("lossless"), T1, [PROMPT], key=0)
  with pytest.raises(TypeError, match="sampling"):
    first_step_laws(target, tp, drafter, dp, verifiers.get("lossless"), "T1", [PROMPT],
                    key=jax.random.key(0))
  with pytest.raises(ValueError, match="contexts_per_prompt"):
    first_token_divergence(target, tp, drafter, dp, verifiers.get("lossless"), T1, [PROMPT],
                           contexts_per_prompt=0, key=jax.random.key(0))
