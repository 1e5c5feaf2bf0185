"""The one exact-analysis entry point (specjax.analysis.expected_accepted /
round_law, analysis/accepted.py) and the merged tree analysis (analysis/tree_law.py).

Fast, exact: the paper's binary example through the entry point; it dispatches
node, path and tree rules on chains and static trees to the same laws as the
modules behind it; block >= token-level and traversal >= token-level E[tau] on
every random context through it; the tree analysis against an independent
brute force (every token assignment, each sibling's law computed sequentially
with the loop's fill convention) for i.i.d., without-replacement and top-k
children, and against analysis/induced.py on one-level trees (incl. MARS's
strict-before-relaxed fallback, which NodeTreeRule now covers).  Slow: the real
decoding loop's accepted drafts in one round against the exact E[tau], one rule
per kind.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import analysis, verifiers
from specjax.analysis import path_law as pl
from specjax.analysis import tree_law as tl
from specjax.analysis.induced import induced_distribution
from specjax.decoding.drafters import LMDrafter, LMTreeDrafter
from specjax.decoding.speculative import speculative_generate
from specjax.distributions import SamplingConfig, probs_from_logits
from specjax.tree_layout import static_tree
from specjax.verifiers.registry import kind_of
from specjax.verifiers.tree_rule import as_tree_rule
from tests.helpers import rand_dists, rand_tables, tiny_pair

ATOL = 2e-6
LOSSLESS = verifiers.get("lossless")
BLOCK = verifiers.get("block")
TRAVERSAL = verifiers.get("traversal")
MARS = verifiers.get("mars", theta=0.5)


def _binary_example():
  """Sun et al.'s example: target (1/3, 2/3), draft (2/3, 1/3) at every position, K = 2."""
  return pl.chain_tables(lambda pre: [1 / 3, 2 / 3], lambda pre: [2 / 3, 1 / 3], 2, 2)


def test_entry_point_paper_binary_example_10_9_vs_11_9():
  """expected_accepted(rule, tables) on the chain: 10/9 token-level (the node rule),
  11/9 block (the path rule) and 11/9 traversal (the tree rule on a chain is block)."""
  t = _binary_example()
  assert float(analysis.expected_accepted(LOSSLESS, t)) == pytest.approx(10 / 9, abs=1e-6)
  assert float(analysis.expected_accepted(BLOCK, t)) == pytest.approx(11 / 9, abs=1e-6)
  assert float(analysis.expected_accepted(TRAVERSAL, t)) == pytest.approx(11 / 9, abs=1e-6)
  assert [kind_of(r) for r in (LOSSLESS, BLOCK, TRAVERSAL)] == ["node", "path", "tree"]


def test_entry_point_dispatch_and_errors():
  """Chains go to path_law.chain_law, static trees to tree_law.static_tree_law (same
  numbers); a path rule on a tree, ``length`` on a tree, a bad ``children`` and a
  non-rule are refused with a ValueError naming them."""
  tables, length = rand_tables(3, 4, 3, 2)
  for rule in (LOSSLESS, BLOCK, TRAVERSAL):
    np.testing.assert_allclose(analysis.expected_accepted(rule, tables, length=length),
                               pl.expected_accepted(rule, tables, length), atol=ATOL)
  paths = ((0,), (1,), (0, 0))
  for rule, children in ((LOSSLESS, "sampled"), (TRAVERSAL, "topk"), (MARS, "sampled")):
    np.testing.assert_allclose(
        analysis.expected_accepted(rule, tables, paths, children),
        tl.static_tree_law(rule, tables, paths, children).expected_accepted, atol=ATOL)
  with pytest.raises(ValueError, match="path rule.*chains only"):
    analysis.round_law(BLOCK, tables, paths)
  with pytest.raises(ValueError, match="length=2 is read only for chains"):
    analysis.round_law(LOSSLESS, tables, paths, length=2)
  with pytest.raises(ValueError, match="children='iid'"):
    analysis.round_law(LOSSLESS, tables, paths, children="iid")
  with pytest.raises(ValueError, match="not a verification rule"):
    analysis.round_law("lossless", tables)


@jax.jit
def _chain_pair(tables, length):
  return (analysis.expected_accepted(BLOCK, tables, length=length),
          analysis.expected_accepted(LOSSLESS, tables, length=length))


@pytest.mark.parametrize("v,k,seed", [(3, 3, 11), (4, 2, 12)])
def test_block_never_below_token_level_through_the_entry_point(v, k, seed):
  """Exact E[tau] on 64 random contexts (zeros, one-hot rows, ragged lengths): block
  >= token-level on EVERY context (Sun et al., Theorem 2: block is optimal), > by
  0.05 on some.  A rule that read the wrong tables would break the inequality."""
  tables, length = rand_tables(seed, 64, v, k)
  block, token = _chain_pair(tables, length)
  gain = np.asarray(block - token)
  assert gain.min() > -1e-5, gain.min()
  assert gain.max() > 0.05


def test_traversal_never_below_token_level_on_random_trees_through_the_entry_point():
  """Exact E[tau] on 32 random contexts (V = 3, zeros and one-hot rows) of a sampled
  (without replacement) 2-level tree: traversal >= token-level tree verification
  (recursive rejection sampling) on EVERY context, > by 0.01 on some; equal on the
  top-k tree (deterministic distinct children: both accept each path with its target
  probability)."""
  rng = np.random.default_rng(21)
  p = tuple(jnp.asarray(rand_dists(rng, (32,) + (3,) * i, 3)) for i in range(3))
  q = tuple(jnp.asarray(rand_dists(rng, (32,) + (3,) * i, 3)) for i in range(2))
  tables = pl.ChainTables(p=p, q=q)
  paths = ((0,), (1,), (0, 0), (0, 1), (1, 0))
  trav = np.asarray(analysis.expected_accepted(TRAVERSAL, tables, paths, "sampled"))
  token = np.asarray(analysis.expected_accepted(LOSSLESS, tables, paths, "sampled"))
  assert (trav - token).min() > -1e-6 and (trav - token).max() > 0.01
  trav_k = analysis.expected_accepted(TRAVERSAL, tables, paths, "topk")
  token_k = analysis.expected_accepted(LOSSLESS, tables, paths, "topk")
  np.testing.assert_allclose(trav_k, token_k, atol=1e-5)


# --- the merged tree analysis against independent references ---------------------------


def _sibling_laws(q_s, tokens, drafting):
  """Sequential definition: (probability of the children's tokens, their q rows)."""
  v = q_s.shape[0]
  if drafting == "iid":
    return float(np.prod(q_s[list(tokens)])), [q_s] * len(tokens)
  if drafting == "top_k":
    order = list(np.argsort(-q_s, kind="stable"))
    return float(list(tokens) == order[:len(tokens)]), [np.eye(v)[t] for t in tokens]
  rest, prob, rows = q_s.astype(np.float64).copy(), 1.0, []
  for t in tokens:  # draw by draw; no mass left: the lowest-index unused token
    used = [u for u in tokens[:len(rows)]]
    row = rest / rest.sum() if rest.sum() > 0 else np.eye(v)[min(set(range(v)) - set(used))]
    prob *= row[t]
    rows.append(row)
    rest[t] = 0.0
  return prob, rows


def _brute_force(rule, tables, paths, drafting):
  """accept_length [B, D+1] and block laws by enumerating all V^N token assignments,
  each sibling's law computed sequentially (children drawn in rank order)."""
  rule = as_tree_rule(rule)
  parents, depths, _ = static_tree(paths)
  par = np.concatenate([[0], parents])
  dep = np.concatenate([[0], depths])
  n1, v, d = par.shape[0], tables.vocab, tables.num_draft
  path = [[]]
  for j in range(1, n1):
    path.append(path[par[j]] + [j])
  p_t = [np.asarray(a, np.float64) for a in tables.p]
  q_t = [np.asarray(a, np.float64) for a in tables.q]
  rows = []  # (context, prob, x, z, p, q) per live assignment
  for b in range(p_t[0].shape[0]):
    for assign in itertools.product(range(v), repeat=n1 - 1):
      x = np.array((0,) + assign)
      prob, q = 1.0, np.zeros((n1, v))
      for s in range(n1):
        kids = [c for c in range(1, n1) if par[c] == s]
        if kids:
          q_s = q_t[dep[s]][(b,) + tuple(x[path[s]])]
          pr, qrows = _sibling_laws(q_s, [int(x[c]) for c in kids], drafting)
          prob *= pr
          q[kids] = qrows
      if prob > 0:
        p = np.stack([p_t[dep[j]][(b,) + tuple(x[path[j]])] for j in range(n1)])
        rows.append((b, prob, x, p, q))
  b_idx, prob, x, p, q = (np.array(a) for a in zip(*rows))
  z = np.log(np.maximum(p, 1e-30))
  pj = jnp.asarray(np.broadcast_to(par, x.shape).astype(np.int32))
  cast = lambda a: jnp.asarray(a, jnp.float32)
  law, emit = jax.jit(jax.vmap(lambda *a: (rule.end_node_law(*a), rule.end_node_emit(*a))))(
      cast(z), cast(p), cast(q), jnp.asarray(x, jnp.int32), pj)
  w = prob[:, None, None] * np.asarray(law, np.float64)[:, :, None] * np.asarray(emit)
  nb = p_t[0].shape[0]
  block = [np.zeros((nb,) + (v,) * (t + 1)) for t in range(d + 1)]
  for j in range(n1):
    np.add.at(block[dep[j]], (b_idx,) + tuple(x[:, a] for a in path[j]), w[:, j])
  accept = np.stack([blk.reshape(nb, -1).sum(-1) for blk in block], -1)
  return accept, block


@pytest.mark.parametrize("drafting", ["without_replacement", "iid", "top_k"])
def test_tree_law_matches_a_brute_force_over_token_assignments(drafting):
  """8 random contexts (V = 3, zeros and one-hot rows, so supports run out and the fill
  convention matters), a 4-node 2-level tree: tree_law's law of tau and of the emitted
  block equal an independent enumeration of all 81 token assignments, for traversal
  and the lossless node rule.  Catches a wrong filling probability, a wrong sibling q
  or the old "absent sibling" convention (it differs on these contexts)."""
  paths = ((0,), (1,), (0, 0), (0, 1))
  rng = np.random.default_rng(31)
  tables = pl.ChainTables(p=tuple(jnp.asarray(rand_dists(rng, (8,) + (3,) * i, 3))
                                  for i in range(3)),
                          q=tuple(jnp.asarray(rand_dists(rng, (8,) + (3,) * i, 3))
                                  for i in range(2)))
  parents, _, ranks = static_tree(paths)
  for rule in (TRAVERSAL, LOSSLESS):
    law = tl.tree_law(rule, tables, parents, drafting, ranks)
    accept, block = _brute_force(rule, tables, paths, drafting)
    np.testing.assert_allclose(np.asarray(law.accept_length), accept, atol=ATOL)
    for got, want in zip(law.block, block):
      np.testing.assert_allclose(np.asarray(got), want, atol=ATOL)
    assert float(jnp.max(law.lossless_gap)) < ATOL


@pytest.mark.slow  # ~40 s of compiles; tree_law stays checked by default against the brute force
def test_one_level_trees_match_the_induced_distribution():
  """A depth-1 tree's first emitted token (block[0] + block[1] summed over the bonus)
  equals analysis/induced.py's exact induced distribution, on 16 random contexts
  (V = 4): top-k candidates (2 children) for lossless, CoS and MARS -- whose
  strict-before-relaxed fallback NodeTreeRule's walk follows -- and one
  sampled child for the same rules."""
  rng = np.random.default_rng(41)
  p = jnp.asarray(rand_dists(rng, (16,), 4))
  q = jnp.asarray(rand_dists(rng, (16,), 4))
  qb = jnp.asarray(rand_dists(rng, (16, 4), 4))
  tables = pl.ChainTables(p=(p, jnp.asarray(rand_dists(rng, (16, 4), 4))), q=(q,))
  z = jnp.where(p > 0, jnp.log(jnp.where(p > 0, p, 1.0)), -jnp.inf)
  del qb
  for rule in (LOSSLESS, verifiers.get("cos"), MARS):
    for paths, children, kw in ((((0,), (1,)), "topk", dict(draft="topk", top_k=2)),
                                (((0,),), "sampled", dict(draft="sampled"))):
      law = tl.static_tree_law(rule, tables, paths, children)
      first = law.block[0] + law.block[1].sum(-1)
      want = induced_distribution(rule, z, p, q, **kw)
      np.testing.assert_allclose(np.asarray(first), np.asarray(want), atol=1e-5,
                                 err_msg=f"{rule.name} {children}")


# --- the real decoding loop, one round, against the exact E[tau] -------------------------

V_LOOP, D_LOOP, N_LOOP = 16, 2, 6000
PROMPT = [5, 9, 11]
TREE_LOOP = ((0,), (1,), (0, 0))
T1 = SamplingConfig(temperature=1.0)


@functools.lru_cache(maxsize=None)
def _loop_pair():
  # Flatter distributions (scale 2) than tiny_pair's default, so E[tau] is ~0.5-0.7.
  return tiny_pair(vocab=V_LOOP, noise=0.02, scale=2.0)


def _tables_after(model, params):
  """(law of the first token [V], tables [V, ...]): the model's distributions at T = 1
  after PROMPT + y0 + x_1..x_i, every y0 (the token prefill emits) a context."""
  seqs = np.array([PROMPT + list(s) for s in
                   itertools.product(range(V_LOOP), repeat=D_LOOP + 1)], np.int32)
  b, t = seqs.shape
  pos = jnp.broadcast_to(jnp.arange(t), (b, t))
  logits = model.apply(params, jnp.asarray(seqs), pos, model.init_cache(b, t)).logits
  probs = probs_from_logits(logits, T1).reshape((V_LOOP,) * (D_LOOP + 1) + (t, V_LOOP))
  tabs = [probs[(slice(None),) * (i + 1) + (0,) * (D_LOOP - i)][..., len(PROMPT) + i, :]
          for i in range(D_LOOP + 1)]
  return probs_from_logits(logits[0, len(PROMPT) - 1], T1), tabs


@functools.lru_cache(maxsize=None)
def _loop_tables():
  target, tp, draft, dp = _loop_pair()
  first, p = _tables_after(target, tp)
  _, q = _tables_after(draft, dp)
  return np.asarray(first, np.float64), pl.ChainTables(p=tuple(p), q=tuple(q[:D_LOOP]))


def _exact_mean_sd(rule, tree, children, greedy=False):
  """E[tau] and sd(tau) of the loop's first round: contexts PROMPT + y0 weighted by the
  target's law of y0, from round_law's law of tau (``greedy``: drafts = argmax q)."""
  first, tables = _loop_tables()
  if greedy:
    tables = pl.ChainTables(p=tables.p, q=tuple(jax.nn.one_hot(jnp.argmax(a, -1), V_LOOP)
                                                for a in tables.q))
  law = np.asarray(analysis.round_law(rule, tables, tree, children).accept_length, np.float64)
  t = np.arange(D_LOOP + 1)
  m1, m2 = (first[:, None] * law * t).sum(), (first[:, None] * law * t ** 2).sum()
  return m1, np.sqrt(m2 - m1 ** 2)


def _loop_first_round(rule, drafter, per_step):
  """Accepted drafts of N_LOOP rows' first round: a cache of PROMPT + one step's slots
  stops every row (CACHE_FULL) after it."""
  target, tp, _, dp = _loop_pair()
  out = speculative_generate(target, tp, drafter, dp, rule, [PROMPT] * N_LOOP,
                             max_new_tokens=8, sampling=T1, key=jax.random.key(7),
                             eos_token_id=None, cache_length=len(PROMPT) + per_step)
  assert (np.asarray(out.stats.target_calls) == 1).all()
  return float(np.mean(np.asarray(out.stats.accepted)))


# N = 6000 rows; tau in [0, 2], sd ~0.75: by Bernstein, P(|mean - E| >= 4.5 sd / sqrt(N))
# <= 2 exp(-N t^2 / (2 sd^2 + 2 * 2 t / 3)) ~ 1.3e-4 per rule (t = 4.5 sd / sqrt(N) ~ 0.044).
# Broken variant: the exact value for the wrong draft shape (greedy drafts: the chain of
# argmaxes, the tree filled top-k) is 0.3-0.45 lower and must be rejected at z > 10.
@pytest.mark.slow  # ~2 min: four loop compiles and 6,000-row rounds
@pytest.mark.parametrize("name,shape", [("lossless", "chain"), ("block", "chain"),
                                        ("traversal", "tree"), ("lossless", "tree")])
def test_the_loop_accepts_the_exact_expected_number(name, shape):
  """One rule per kind (node: lossless; path: block; tree: traversal; and the node rule
  on the sampled tree, recursive rejection sampling): the real loop's mean accepted
  drafts in its first round (T = 1, LMDrafter chain of 2 / LMTreeDrafter 3-node tree
  with children sampled without replacement) is within 4.5 standard errors of
  expected_accepted; the wrong draft shape's exact value is not."""
  rule = verifiers.get(name)
  _, _, draft, _ = _loop_pair()
  if shape == "chain":
    drafter, tree, per_step = LMDrafter(D_LOOP, T1, draft), None, D_LOOP + 1
  else:
    drafter = LMTreeDrafter(draft, paths=TREE_LOOP, sampling=T1, children="sampled")
    tree, per_step = TREE_LOOP, len(TREE_LOOP) + 1
  mean = _loop_first_round(rule, drafter, per_step)
  exact, sd = _exact_mean_sd(rule, tree, "sampled")
  se = sd / np.sqrt(N_LOOP)
  assert abs(mean - exact) < 4.5 * se, (mean, exact, se)
  # The wrong draft shape: greedy drafts (a chain of argmaxes; the tree filled top-k).
  broken, _ = _exact_mean_sd(rule, tree, "topk", greedy=tree is None)
  assert abs(mean - broken) > 10 * se, (mean, broken, se)
