"""Sequoia's optimal trees and the shape a cost profile affords
(specjax/policies/tree_budget.py): the dynamic program against brute force over every
tree, chains as the rank-1 special case, the choice under flat and steep verify costs,
and bad input."""

import itertools

import numpy as np
import pytest

from specjax.policies import tree_budget as tb

# Depth-dependent positional acceptance (rows: depth 1..3, columns: rank 1..3).
P = np.array([[0.6, 0.2, 0.1], [0.5, 0.2, 0.05], [0.4, 0.15, 0.1]])


def _children(m, rank, level, p):
  """Every way to hang m nodes under one node at ``level`` on children of rank >= rank:
  lists of (rank, subtree), a subtree being such a list."""
  if m == 0:
    yield []
    return
  if rank == p.shape[1] or level == p.shape[0]:
    return
  yield from _children(m, rank + 1, level, p)  # rank skipped
  for j in range(1, m + 1):
    for sub in _children(j - 1, 0, level + 1, p):
      for rest in _children(m - j, rank + 1, level, p):
        yield [(rank, sub)] + rest


def _value(kids, level, p):
  return 1.0 + sum(p[level, r] * _value(sub, level + 1, p) for r, sub in kids)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_dynamic_program_matches_brute_force(depth):
  """For every budget up to 7 nodes, the DP's best value equals the best over every
  tree of at most that many nodes (brute force), and its plan's own value (computed
  from the explicit tree) is that value -- a DP that gave larger subtrees to lower
  ranks, or ignored the depth limit, would differ."""
  p = P[:depth]
  plans = tb.optimal_trees(p, 7)
  for n, plan in enumerate(plans, 1):
    brute = max(_value(k, 0, p) for m in range(n) for k in _children(m, 0, 0, p))
    assert plan.value == pytest.approx(brute, abs=1e-12)
    assert tb.tree_value(p, plan.parents, plan.ranks) == pytest.approx(plan.value, abs=1e-12)
    assert plan.nodes <= n and plan.depth <= depth


def test_a_chain_is_the_rank_one_tree():
  """With one rank per node the best tree of n nodes is the chain of n - 1 drafts, whose
  value is the cost-aware policy's chain formula ``1 + sum_i prod_{j<=i} a_j``."""
  a = P[:, :1]
  for k in range(4):
    chain = tb.chain_plan(a, k)
    assert chain.value == pytest.approx(1 + np.cumprod(a[:k, 0]).sum())
    assert tb.optimal_trees(a, k + 1)[k].parents == chain.parents
  assert tb.chain_plan(P, 3).widths == (1, 1, 1)


def test_flat_verify_cost_affords_the_largest_tree_and_steep_cost_a_chain():
  """Accelerator-like (every size up to 64 costs one step, drafting a level 0.05 step):
  the best shape uses more than half of the 64-node budget and is wider than a chain.
  CPU-like (cost grows with the tokens: 1.4 steps for 2-5, 2 for 8, 3.5 for 16, 7 for
  32, 14 for 64; drafting a level 0.2): the best stays within the cheap 5-token verify,
  and is shallower than the flat profile's."""
  p = np.array([[0.7, 0.15, 0.05, 0.03]] * 5)
  flat = tb.VerifyCost((1, 2, 4, 8, 16, 32, 64), (1.0,) * 7)
  best, cands = tb.choose_shape(p, flat, 0.05, max_nodes=64)
  assert best.plan.nodes > 32 and max(best.plan.widths) > 1
  assert best.rate == max(c.rate for c in cands)
  steep = tb.VerifyCost((1, 2, 5, 8, 16, 32, 64), (1.0, 1.4, 1.4, 2.0, 3.5, 7.0, 14.0))
  deep = best.plan.depth
  best, _ = tb.choose_shape(p, steep, 0.2, max_nodes=64)
  assert 1 < best.plan.nodes <= 5 and best.plan.depth < deep
  # Nothing worth drafting: the plain decode step.
  best, _ = tb.choose_shape(np.zeros((3, 2)), steep, 0.2, max_nodes=8)
  assert best.plan.nodes == 1 and best.rate == 1.0


@pytest.mark.parametrize("call, match", [
    (lambda: tb.optimal_trees([[0.7, 0.4]], 4), r"summing to <= 1"),
    (lambda: tb.optimal_trees([[-0.1]], 4), r"must be in \[0, 1\]"),
    (lambda: tb.optimal_trees(np.zeros((0, 2)), 4), r"\[depth, rank\]"),
    (lambda: tb.optimal_trees(P, 0), r"max_nodes=0"),
    (lambda: tb.chain_plan(P, 4), r"k=4: the acceptance model has 3 depths"),
    (lambda: tb.VerifyCost((2, 4), (1.0, 1.2)), r"must increase from 1"),
    (lambda: tb.VerifyCost((1, 4), (1.0, 0.9)), r"non-decreasing"),
    (lambda: tb.VerifyCost((1, 4), (1.0, 1.2)).at(5), r"n=5 .* largest measured size 4"),
    (lambda: tb.choose_shape(P, tb.VerifyCost((1, 4), (1.0, 1.2)), 0.1, max_nodes=8),
     r"max_nodes=8 is beyond"),
    (lambda: tb.choose_shape(P, tb.VerifyCost((1, 4), (1.0, 1.2)), -1.0, max_nodes=4),
     r"draft_level=-1.0"),
    (lambda: tb.tree_value(P, (0, 0), (0, 0)), r"must start with the root"),
])
def test_bad_input_is_refused_naming_it(call, match):
  with pytest.raises(ValueError, match=match):
    call()


@pytest.mark.slow  # compiles the probe loop (~25 s on one core; the default suite's budget)
def test_rank_counts_of_a_greedy_chain_run():
  """The rank probe on a real (tiny) greedy chain run: rank 1 at a depth is exactly an
  accepted draft there (the loop's own per-position acceptance counts), every reached
  position is counted once, and the ranks of the mismatches are >= 2 (a rejected
  greedy draft is the drafter's top token, so the target's token is not).  Reading the
  emitted tokens one place off (a broken variant) breaks the first equality."""
  from specjax import verifiers
  from specjax.decoding.drafters import LMDrafter
  from specjax.distributions import SamplingConfig
  from specjax.policies import rank_acceptance as ra
  from specjax.policies.probe import run_probe
  from tests.helpers import sharpened_noisy_pair

  target, tp, dp = sharpened_noisy_pair()
  greedy, k, r = SamplingConfig(temperature=0.0), 3, 4
  rs = np.random.RandomState(5)
  prompts = [rs.randint(0, 32, size=n).tolist() for n in (4, 7, 5)]
  drafter = LMDrafter(k, greedy, target)
  run = run_probe(target, tp, drafter, dp, ra.RankProbe(k, r), None, verifiers.get("lossless"),
                  prompts, max_new_tokens=20, sampling=greedy, eos_token_id=None)
  counts = ra.rank_counts(run, r)
  accepted = sum(np.asarray(s.accepted)[np.asarray(s.active)].sum(0) for s in run.steps)
  reached = sum(np.minimum(np.asarray(s.num_accepted) + 1, np.asarray(s.gamma))[
      np.asarray(s.active)].sum() for s in run.steps)
  assert counts.shape == (k, r + 1)
  np.testing.assert_array_equal(counts[:, 0], accepted)
  assert counts.sum() == reached and counts[:, 1:].sum() > 0
  p = ra.positional_acceptance(counts)
  assert p.shape == (k, r) and np.all(p.sum(1) <= 1)
  shifted = ra.ProbeRun(run.steps, run.stats, np.roll(run.tokens, 1, axis=1), run.num_tokens)
  assert not np.array_equal(ra.rank_counts(shifted, r)[:, 0], accepted)
  same = ra.collect_ranks(target, tp, drafter, dp, verifiers.get("lossless"), prompts,
                          max_new_tokens=20, sampling=greedy, ranks=r, eos_token_id=None)
  np.testing.assert_array_equal(same, counts)
  with pytest.raises(ValueError, match=r"sampling.temperature=1.0: rank acceptance"):
    ra.collect_ranks(target, tp, drafter, dp, verifiers.get("lossless"), prompts,
                     max_new_tokens=4, sampling=SamplingConfig(temperature=1.0))


def test_sparse_depths_are_pooled_with_the_deepest_well_measured_one():
  """Depths reached fewer than ``min_reached`` times take the counts pooled from the
  deepest well-measured depth down; with no threshold every depth keeps its own row;
  with none well measured all depths are pooled."""
  from specjax.policies.rank_acceptance import positional_acceptance
  c = np.array([[50, 20, 30], [20, 10, 20], [2, 1, 2], [1, 0, 1]])  # reached 100, 50, 5, 2
  p = positional_acceptance(c, min_reached=40)
  np.testing.assert_allclose(p[:2], [[0.5, 0.2], [0.4, 0.2]])
  np.testing.assert_allclose(p[2:], [[23 / 57, 11 / 57]] * 2)
  np.testing.assert_allclose(positional_acceptance(c, min_reached=0)[3], [0.5, 0.0])
  np.testing.assert_allclose(positional_acceptance(c, min_reached=1000),
                             [c[:, :2].sum(0) / c.sum()] * 4)


def test_benchmark_profiles_and_shapes():
  """benchmarks/tree_budget.py's pure steps: the accelerator-like profile keeps this
  machine's drafting and flattens every forward; under it the best tree is larger than
  under a steep CPU curve, each budget's tree fits its budget, and the best chain is a
  chain; a bad --max_nodes is refused naming it."""
  from benchmarks import tree_budget as bench
  from experiments.common import knobs
  from specjax.policies.cost_profile import RoundCostProfile

  prof = RoundCostProfile(4, 100, 200, 0.01, (1.0, 1.3, 1.3, 1.3, 1.4),
                          {"lookup_chain": 0.0, "eagle_chain": 0.2},
                          {"lookup_chain": False, "eagle_chain": True}, "cpu")
  sizes, steps = (1, 2, 4, 8, 16), (1.0, 1.3, 1.3, 2.0, 3.5)
  got = bench.profiles(sizes, steps, prof)
  flat_steps, flat = got["accelerator_like"]
  assert flat_steps == (1.0,) * 5 and flat.forward == (1.0,) * 5
  assert flat.drafting == prof.drafting and got["this_cpu"] == (steps, prof)
  np.testing.assert_allclose(flat.round_cost("eagle_chain"), [1.05, 1.05, 1.1, 1.15, 1.2])
  p = np.array([[0.7, 0.15, 0.05]] * 4)
  cpu = bench.shapes(p, sizes, steps, 0.05, 16)
  acc = bench.shapes(p, sizes, flat_steps, 0.05, 16)
  assert acc["best"]["nodes"] > cpu["best"]["nodes"]
  assert all(s["nodes"] <= s["budget"] for s in acc["per_budget"])
  assert set(cpu["best_chain"]["widths"]) == {1}
  # one timer set: the forwards up to K + 1 tokens and the wider ones of one profile
  wide = RoundCostProfile(**{**prof.to_json(), "forward_wide": {"8": 1.9, "16": 1.8}})
  assert bench.wide_steps(wide, sizes) == (1.0, 1.3, 1.3, 1.9, 1.9)
  assert bench.profiles(sizes, steps, wide)["accelerator_like"][1].forward_wide == {8: 1.0,
                                                                                      16: 1.0}
  with pytest.raises(ValueError, match=r"no forward over \[32\] tokens"):
    bench.wide_steps(wide, sizes + (32,))
  with pytest.raises(knobs.KnobError, match="max_nodes"):
    bench.TreeBudgetSpec(max_nodes=48)
