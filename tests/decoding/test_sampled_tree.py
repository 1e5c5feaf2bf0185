"""Sampled draft trees: children drawn without replacement, verified by recursive
rejection sampling (docs/spec.md §4, §6; Jeon et al. 2024).

Fast: the Gumbel-top-k sampler draws from the without-replacement law (Monte Carlo,
with a broken sampler caught); the per-sibling q; exact losslessness by enumeration
(random contexts with zeros and one-hot rows, several trees, top-k and sampled
children) with two broken variants caught (with-replacement verification of
without-replacement drafts, a wrong residual); a one-child tree equals the chain
analysis; E[tau] against an independent closed form; the drafters' proposals and
argument errors; greedy identity through the real loop.  Slow: the martingale test
on the real loop at T = 1, with the with-replacement control caught at the same N.
"""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.analysis.path_law import ChainTables, chain_law
from specjax.analysis.tree_law import static_tree_law
from specjax.decoding.autoregressive import generate
from specjax.decoding.drafters import LMTreeDrafter
from specjax.decoding.sampled_tree import constant_branching
from specjax.decoding.speculative import speculative_generate
from specjax.distributions import (SamplingConfig, residual, sample_without_replacement,
                                   without_replacement_q)
from tests.helpers import ragged_prompts, teacher_forced_probs, tiny_pair

T1 = SamplingConfig(temperature=1.0)
LOSSLESS = verifiers.get("lossless")


def _with_replacement_q(q_node, draws):
  """BROKEN on purpose: every sibling verified with its parent's q_node."""
  return jnp.broadcast_to(q_node, (draws.shape[0], q_node.shape[-1]))


# ------------------------------------------------------------------- the sampler


def _perm_law(q, k):
  """Exact law of the ordered k draws without replacement (sequential definition)."""
  v = len(q)
  out = {}
  for seq in itertools.permutations(range(v), k):
    pr, rest = 1.0, np.array(q, np.float64)
    for x in seq:
      if rest.sum() > 0:
        pr *= rest[x] / rest.sum()
      else:  # support used up: the lowest-index unused token
        pr *= float(x == min(set(range(v)) - set(seq[:seq.index(x)])))
      rest[x] = 0.0
    if pr > 0:
      out[seq] = pr
  return out


def _empirical_tv(sampler, q, k, n):
  keys = jax.random.split(jax.random.key(3), n)
  draws = np.asarray(jax.jit(jax.vmap(lambda kk: sampler(kk, jnp.asarray(q), k)))(keys))
  law = _perm_law(q, k)
  seqs, counts = np.unique(draws, axis=0, return_counts=True)
  emp = {tuple(s): c / n for s, c in zip(seqs.tolist(), counts)}
  return 0.5 * sum(abs(emp.get(s, 0.0) - law.get(s, 0.0)) for s in set(emp) | set(law))


# N = 40,000 draws of 3 ordered tokens (at most 24 outcomes): E[TV] <= 0.5 sqrt(24 / N)
# = 0.0122 (Cauchy-Schwarz over the cells) and TV is 1/N-Lipschitz in each draw, so by
# McDiarmid it exceeds that by 0.0161 with probability <= 1e-9: tolerance 0.0283.
def test_gumbel_top_k_draws_without_replacement_and_a_broken_sampler_is_caught():
  n, tol = 40_000, 0.0283
  for q in ([0.5, 0.3, 0.2, 0.0], [0.05, 0.9, 0.0, 0.05], [0.0, 1.0, 0.0, 0.0]):
    assert _empirical_tv(sample_without_replacement, q, 3, n) < tol, q

  def noise_on_probs(key, probs, k):  # BROKEN: Gumbel noise added to p, not log p
    return jax.lax.top_k(probs + jax.random.gumbel(key, probs.shape), k)[1]

  assert _empirical_tv(noise_on_probs, [0.5, 0.3, 0.2, 0.0], 3, n) > 3 * tol


def test_without_replacement_q_rows():
  q = jnp.array([0.5, 0.0, 0.3, 0.2])
  rows = np.asarray(without_replacement_q(q, jnp.array([2, 0, 3, 1])))
  np.testing.assert_allclose(rows[0], [0.5, 0.0, 0.3, 0.2])
  np.testing.assert_allclose(rows[1], [0.5 / 0.7, 0.0, 0.0, 0.2 / 0.7], rtol=1e-6)
  np.testing.assert_allclose(rows[2], [0.0, 0.0, 0.0, 1.0])
  np.testing.assert_allclose(rows[3], [0.0, 1.0, 0.0, 0.0])  # no mass left: lowest unused


# ------------------------------------------------------------- exact analysis


def _random_tables(seed, contexts, v, depth):
  """Random target / node-distribution tables by prefix, with zeros and one-hot rows."""
  rs = np.random.RandomState(seed)

  def table(i):
    x = rs.dirichlet(np.full(v, 0.6), size=(contexts,) + (v,) * i)
    flat = x.reshape(-1, v)
    for row in flat:
      u = rs.rand()
      if u < 0.15:
        row[:] = np.eye(v)[rs.randint(v)]
      elif u < 0.45:
        row[rs.randint(v)] = 0.0
        row /= row.sum()
    return jnp.asarray(flat.reshape(x.shape), jnp.float32)

  return ChainTables(p=tuple(table(i) for i in range(depth + 1)),
                     q=tuple(table(i) for i in range(depth)))


TREES = [constant_branching((2, 2)),
         pytest.param(((0,), (2,), (0, 1)),  # draw 1 of the root is skipped: still lossless
                      marks=pytest.mark.slow),
         pytest.param(((0,), (1,), (2,)), marks=pytest.mark.slow),
         pytest.param(((0,), (1,), (0, 0), (0, 0, 0)), marks=pytest.mark.slow)]


@pytest.mark.parametrize("paths", TREES)
def test_sampled_and_topk_trees_are_lossless_and_broken_variants_are_caught(paths):
  depth = max(map(len, paths))
  v = 3 if depth == 3 else 4
  tables = _random_tables(depth * 10 + len(paths), 12, v, depth)
  for children in ("sampled", "topk"):
    law = static_tree_law(LOSSLESS, tables, paths, children)
    assert float(jnp.max(law.lossless_gap)) < 2e-5, children
    np.testing.assert_allclose(np.asarray(law.accept_length).sum(-1), 1.0, atol=1e-5)
  if len(paths) == max(map(len, paths)):
    return  # one child per node: nothing is sampled without replacement
  broken = static_tree_law(LOSSLESS, tables, paths, "sampled", sibling_q=_with_replacement_q)
  assert float(jnp.max(broken.lossless_gap)) > 1e-2

  @dataclasses.dataclass(frozen=True)
  class ZeroOnlyX(verifiers.Lossless):  # BROKEN: the one-hot draft's residual (zero x)
    def on_reject(self, state, q, x):
      return dataclasses.replace(state, p_cur=residual(state.p_cur, jax.nn.one_hot(x, q.shape[-1])))

  wrong = static_tree_law(ZeroOnlyX(), tables, paths, "sampled")
  assert float(jnp.max(wrong.lossless_gap)) > 1e-2


def test_one_child_per_node_is_the_chain_and_expected_length_matches_a_closed_form():
  tables = _random_tables(5, 8, 4, 2)
  tree = static_tree_law(LOSSLESS, tables, ((0,), (0, 0)), "sampled")
  chain = chain_law(LOSSLESS, tables)
  np.testing.assert_allclose(tree.expected_accepted, chain.expected_accepted, atol=1e-6)
  np.testing.assert_allclose(tree.first_tokens, chain.first_tokens, atol=1e-6)
  # Depth 1, two sampled children: P(accept) = sum_x1 q(x1) [a1 + (1 - a1) sum_y
  # min(r(y), q2(y | x1))], r = norm(max(0, p - q)), q2 = q without x1 (renormalised).
  t1 = _random_tables(6, 8, 4, 1)
  law = static_tree_law(LOSSLESS, t1, ((0,), (1,)), "sampled")
  p, q = np.asarray(t1.p[0], np.float64), np.asarray(t1.q[0], np.float64)
  for c in range(p.shape[0]):
    r = np.maximum(p[c] - q[c], 0)
    r = r / r.sum() if r.sum() > 0 else p[c]
    want = 0.0
    for x1 in np.nonzero(q[c])[0]:
      a1 = min(1.0, p[c, x1] / q[c, x1])
      q2 = q[c].copy()
      q2[x1] = 0
      q2 = q2 / q2.sum() if q2.sum() > 0 else np.eye(4)[min(set(range(4)) - {x1})]
      want += q[c, x1] * (a1 + (1 - a1) * np.minimum(r, q2).sum())
    assert float(law.expected_accepted[c]) == pytest.approx(want, abs=1e-5)
  # All V children of a depth-1 tree: recursive rejection sampling always accepts one.
  full = static_tree_law(LOSSLESS, t1, ((0,), (1,), (2,), (3,)), "sampled")
  np.testing.assert_allclose(full.expected_accepted, 1.0, atol=1e-5)


def test_tree_law_argument_errors():
  tables = _random_tables(1, 2, 3, 1)
  with pytest.raises(ValueError, match="children='beam'"):
    static_tree_law(LOSSLESS, tables, ((0,),), "beam")
  with pytest.raises(ValueError, match="depth 2 must equal"):
    static_tree_law(LOSSLESS, tables, ((0,), (0, 0)))
  with pytest.raises(ValueError, match="needs 4 distinct children but V = 3"):
    static_tree_law(LOSSLESS, tables, ((0,), (3,)))
  with pytest.raises(ValueError, match="node rule"):
    static_tree_law(verifiers.get("block"), tables, ((0,),))


# ---------------------------------------------------------------------- drafters


@pytest.fixture(scope="module")
def pair():
  return tiny_pair(vocab=32)


def test_constant_branching_and_drafter_arguments(pair):
  assert constant_branching((2, 2)) == ((0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1))
  assert len(constant_branching((3, 2, 1))) == 3 + 6 + 6
  for bad in ((), (2, 0), (1.5,)):
    with pytest.raises(ValueError, match="branching="):
      constant_branching(bad)
  _, _, draft, _ = pair
  with pytest.raises(ValueError, match="children='iid'"):
    LMTreeDrafter(draft, paths=((0,),), children="iid")
  # Sampled children exist only for static trees (a chain samples its drafts under
  # ``sampling``; the dynamic tree keeps the most likely candidates, which would no longer
  # follow q): the chain and dynamic-tree drafters have no ``children`` to set.
  from specjax.decoding.eagle_drafter import EagleDrafter
  from specjax.decoding.eagle_trees import EagleStaticTreeDrafter, EagleTreeDrafter
  from specjax.models import eagle
  from tests.helpers import TC
  head = eagle.EagleHead(eagle.EagleConfig.for_target(TC, "eagle3"))
  for make in (lambda: EagleTreeDrafter(depth=2, head=head, top_k=2, total_tokens=4,
                                        children="sampled"),
               lambda: EagleDrafter(2, T1, head=head, children="sampled")):
    with pytest.raises(TypeError, match="children"):
      make()
  with pytest.raises(ValueError, match="children='iid'"):
    EagleStaticTreeDrafter(head=head, tree_paths=((0,),), children="iid")


def test_sampled_proposal_carries_each_siblings_law(pair):
  """Distinct siblings; node q = its parent's q_node without the earlier draws."""
  target, tp, draft, dp = pair
  paths = constant_branching((3, 2))
  d = LMTreeDrafter(draft, paths=paths, sampling=T1, children="sampled")
  prompts = jnp.array([[5, 9, 11, 4], [7, 7, 2, 0]])
  lengths = jnp.array([4, 3])
  state = d.prefill(dp, prompts, lengths, 32)
  keys = jax.random.split(jax.random.key(0), 2)
  prop, _ = jax.jit(d.propose)(dp, state, prompts[:, 0], jnp.array([6, 8]), keys)
  tok, q, qn = np.asarray(prop.tokens), np.asarray(prop.q), np.asarray(prop.q_node)
  par = np.asarray(prop.parents)
  for b in range(2):
    for s in np.unique(par[b]):
      kids = np.nonzero(par[b] == s)[0]  # in draw order
      assert len(set(tok[b, kids])) == len(kids)
      want = np.asarray(without_replacement_q(jnp.asarray(qn[b, s]), jnp.asarray(tok[b, kids])))
      # rtol: renormalising by 1 - (mass already drawn), e.g. 1 - 0.899, multiplies the
      # float32 rounding of the jitted and the eager computation by ~10 (seen: 2.6e-6)
      np.testing.assert_allclose(q[b, kids], want, rtol=1e-5, atol=1e-6)
      assert (q[b, kids, tok[b, kids]] > 0).all()


@pytest.mark.slow  # tree greedy identity stays in the default suite: test_speculative, test_eagle
def test_sampled_trees_keep_greedy_identity_in_the_loop(pair):
  """T = 0 target: sampled children (LM static tree, batch of ragged prompts) still give
  the target's greedy tokens."""
  target, tp, draft, dp = pair
  prompts = ragged_prompts(5, 32)
  ref = generate(target, tp, prompts, max_new_tokens=12, eos_token_id=None).to_lists()
  d = LMTreeDrafter(draft, paths=constant_branching((2, 2)), sampling=T1, children="sampled")
  out = speculative_generate(target, tp, d, dp, LOSSLESS, prompts, max_new_tokens=12,
                             eos_token_id=None, key=jax.random.key(1))
  assert out.to_lists() == ref


@pytest.mark.slow  # ~20 s: one EAGLE loop compile
def test_sampled_eagle_static_tree_keeps_greedy_identity():
  from specjax.decoding.eagle_drafter import EagleDrafter
  from specjax.decoding.eagle_trees import EagleStaticTreeDrafter
  from tests.helpers import eagle_head, eagle_target
  target, tp = eagle_target()
  head, hp, d2t = eagle_head("eagle3", reduced=True)
  params = EagleDrafter.make_params(hp, target, tp, d2t)
  prompts = ragged_prompts(4, 32, seed=2)
  ref = generate(target, tp, prompts, max_new_tokens=12, eos_token_id=None).to_lists()
  d = EagleStaticTreeDrafter(sampling=T1, head=head, tree_paths=constant_branching((3, 2)),
                             children="sampled")
  out = speculative_generate(target, tp, d, params, LOSSLESS, prompts, max_new_tokens=12,
                             eos_token_id=None, key=jax.random.key(2))
  assert out.to_lists() == ref


# ------------------------------------------------------------------ the loop, T = 1


@dataclasses.dataclass(frozen=True)
class _WithReplacementQ(LMTreeDrafter):
  """BROKEN on purpose: sampled children, each recorded with its parent's full q_node."""

  def propose(self, params, state, prev, last, keys, gate=None):
    prop, state = super().propose(params, state, prev, last, keys)
    q = jax.vmap(lambda qn, par: qn[par])(prop.q_node, prop.parents)
    return dataclasses.replace(prop, q=q), state


def _lumped_z(tokens, probs, lengths, min_expected=20.0):
  """Martingale z-scores (tests/decoding/test_speculative.py) per vocab entry whose expected
  count is >= ``min_expected``, plus one cell lumping the rest: a rare token's z is far
  from normal (expected count 0.1, one hit: z ~ 3), which the lumping avoids."""
  v = probs.shape[-1]
  valid = (np.arange(tokens.shape[1])[None, :] < lengths[:, None])[..., None]
  onehot = np.eye(v)[tokens] * valid
  p = np.asarray(probs, np.float64) * valid
  big = p.sum((0, 1)) >= min_expected
  oh = np.concatenate([onehot[..., big], onehot[..., ~big].sum(-1, keepdims=True)], -1)
  pp = np.concatenate([p[..., big], p[..., ~big].sum(-1, keepdims=True)], -1)
  num, var = (oh - pp).sum((0, 1)), (pp * (1 - pp)).sum((0, 1))
  return np.where(var > 1e-9, num / np.sqrt(np.maximum(var, 1e-12)), 0.0)


def _max_z(drafter_cls):
  # A draft further from the target (noise 0.3) so that rejections, and hence the
  # recursion over siblings, happen often.
  target, tp, draft, dp = tiny_pair(vocab=32, noise=0.3)
  prompt, n_new = [5, 9, 11], 7
  d = drafter_cls(draft, paths=constant_branching((3, 2)), sampling=T1, children="sampled")
  out = speculative_generate(target, tp, d, dp, LOSSLESS, [prompt] * 1500,
                             max_new_tokens=n_new, sampling=T1, key=jax.random.key(11),
                             eos_token_id=None)
  probs = np.asarray(teacher_forced_probs(target, tp, prompt, out.tokens, T1))
  toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
  return max(np.abs(_lumped_z(toks[:, sl], probs[:, sl], lens - sl.start)).max()
             for sl in (slice(1, 2), slice(2, n_new)))


# N = 1500 rows x 7 tokens, at most 33 cells per group: under H0 P(max |z| > 4.5) <
# 33 * 6.8e-6 ~ 2e-4 per group.  Measured: 1.4 / 2.0 (RRS) vs 14.8 / 231 (control).
@pytest.mark.slow
def test_recursive_rejection_sampling_reproduces_the_target_in_the_loop():
  assert _max_z(LMTreeDrafter) < 4.5


@pytest.mark.slow
def test_the_loop_check_catches_with_replacement_verification():
  assert _max_z(_WithReplacementQ) > 10
