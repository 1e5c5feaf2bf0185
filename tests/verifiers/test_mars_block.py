"""MARS over block verification (verifiers/mars_block.py; docs/lossy_path_rules.md,
"MARS over block verification"): block verification run against MARS's one-node law.

What each test catches is in its docstring.  The exact checks enumerate every drafted
chain (analysis/path_law.py) on random small tables (V = 4, K = 3; zeros and one-hot
rows; raw logits shifted positive so that MARS's ratio test relaxes at about half the
nodes); MARS's one-node law there comes from the generic enumeration of
analysis/induced.py, not from the closed form under test.  Broken variant: plain block
verification's sampler checked against MARS + block's law must fail the Monte Carlo
check at the same N.  Default-suite time on 2 CPU cores: ~12 s, most of it compilation
(slow step: ~35 s more).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import compiled_code, verifiers
from specjax.analysis import path_law as pl
from specjax.analysis.induced import induced_distribution
from specjax.verifiers.mars import Mars, node_activation, relaxed_law
from specjax.verifiers.mars_block import MarsBlock
from specjax.verifiers.path import verify_path_batch
from tests.helpers import path_decision_frequencies

THETA = 0.6
V_MC, K_MC, N_MC = 5, 4, 40_000
# Per row, TV(empirical, law) over K+1 outcomes: E[TV] <= 0.5 sqrt((K+1)/N) (Cauchy-Schwarz)
# and one changed sample moves TV by <= 1/N, so by McDiarmid TV > E[TV] + sqrt(ln(1e9)/(2N))
# is a 1e-9 event per row.  N = 4e4: 0.0217.
TV_TOL = 0.5 * math.sqrt((K_MC + 1) / N_MC) + math.sqrt(math.log(1e9) / (2 * N_MC))


def _dist(rng, shape, v, zero_frac=0.2, onehot_frac=0.15):
  d = rng.dirichlet(np.full(v, 0.5), size=shape)
  d = np.where(rng.random(d.shape) < zero_frac, 0.0, d)
  d[..., 0] += d.sum(-1) == 0
  d = d / d.sum(-1, keepdims=True)
  onehot = np.eye(v)[rng.integers(0, v, size=shape)]
  return np.where((rng.random(shape) < onehot_frac)[..., None], onehot, d)


def _target(rng, shape, v, temperature):
  """(z, p): raw logits 2 + 1.2 N(0, 1) (z1 > 0 nearly always, ratios near 1 often) and
  p = softmax(z / T) with some entries zeroed (a truncating processor) and renormalised."""
  z = 2.0 + 1.2 * rng.standard_normal(shape + (v,))
  p = np.exp(z / temperature)
  p = np.where(rng.random(p.shape) < 0.15, 0.0, p)
  top = np.argmax(z, -1)[..., None]
  np.put_along_axis(p, top, np.take_along_axis(np.exp(z / temperature), top, -1), -1)
  return z.astype(np.float32), (p / p.sum(-1, keepdims=True)).astype(np.float32)


def _tables(seed, batch, v, k, temperature=1.0):
  rng = np.random.default_rng(seed)
  zs, ps = zip(*(_target(rng, (batch,) + (v,) * i, v, temperature) for i in range(k + 1)))
  qs = tuple(_dist(rng, (batch,) + (v,) * i, v).astype(np.float32) for i in range(k))
  as_j = lambda t: tuple(jnp.asarray(a) for a in t)
  return pl.ChainTables(p=as_j(ps), q=as_j(qs), z=as_j(zs))


def _greedy_tables(seed, batch, v, k):
  """T = 0: p = onehot(argmax z), q = onehot(a drafted token) at every prefix."""
  t = _tables(seed, batch, v, k)
  rng = np.random.default_rng(seed + 100)
  p = tuple(jax.nn.one_hot(jnp.argmax(z, -1), v) for z in t.z)
  # drafts: the target's top-1 (45%) or top-2 (35%), else a random token
  q = []
  for z in t.z[:k]:
    order = np.argsort(-np.asarray(z), -1)
    pick = rng.choice(3, size=order.shape[:-1], p=[0.45, 0.35, 0.2])
    tok = np.where(pick < 2, np.take_along_axis(order, pick[..., None], -1)[..., 0],
                   rng.integers(0, v, size=pick.shape))
    q.append(jax.nn.one_hot(jnp.asarray(tok), v))
  return pl.ChainTables(p=p, q=tuple(q), z=t.z)


def _mars_law_tables(tables, theta):
  """The tables with p_i replaced by MARS's one-node law for a sampled draft
  (analysis.induced's enumeration of Mars's own node functions), i < K; p_K kept."""
  k = tables.num_draft
  rule = Mars(theta=theta)
  relaxed = tuple(induced_distribution(rule, tables.z[i], tables.p[i], tables.q[i],
                                       draft="sampled", chunk_size=None)
                  for i in range(k))
  return pl.ChainTables(p=relaxed + (tables.p[k],), q=tables.q, z=tables.z)


@functools.partial(jax.jit, static_argnames="length")
def _laws(rules, tables, length=None):
  return tuple(pl.chain_law(r, tables, length) for r in rules)


def _close(a, b, atol=2e-6, msg=""):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=atol, err_msg=msg)


# --- the one-node law -------------------------------------------------------------------------


def test_relaxed_law_is_the_mars_node_law():
  """relaxed_law (the closed form MARS + block runs block verification against) equals the
  enumeration of token-level MARS's node functions for a sampled draft, on 40 random
  contexts (V = 6; zeros, one-hot q, one-hot p with q one-hot = the greedy form), for the
  ratio test at two thetas, the difference test and the entropy-adaptive threshold."""
  rng = np.random.default_rng(0)
  n, v = 40, 6
  z, p = _target(rng, (n,), v, 0.8)
  q = _dist(rng, (n,), v).astype(np.float32)
  greedy = np.arange(n) >= 30  # T = 0 rows: p one-hot, q = onehot(draft)
  p[greedy] = np.eye(v)[np.argmax(z[greedy], -1)]
  order = np.argsort(-z[greedy], -1)  # drafts: the top-1, top-2 or top-3 token
  q[greedy] = np.eye(v)[order[np.arange(greedy.sum()), rng.integers(0, 3, size=greedy.sum())]]
  z, p, q = jnp.asarray(z), jnp.asarray(p), jnp.asarray(q)
  for rule in (Mars(theta=0.6), Mars(theta=0.9), Mars(margin="difference", delta=0.7),
               Mars(theta=0.5, adaptive="entropy")):
    want = induced_distribution(rule, z, p, q, draft="sampled", chunk_size=None)
    top1, top2, _, active = jax.vmap(lambda zz, pp: node_activation(
        zz, pp, theta=rule.theta, delta=rule.delta, margin=rule.margin, guard=rule.guard,
        adaptive=rule.adaptive))(z, p)
    assert 5 < int(active.sum()) < n, (rule, int(active.sum()))  # both branches exercised
    got = relaxed_law(p, q, top1, top2, active)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-6, err_msg=str(rule))


# --- one round, exact -------------------------------------------------------------------------


def test_exact_round_laws():
  """Exact (chain_law, 10 random contexts, V = 4, K = 3, full and ragged length 2):
  (a) MARS + block's law of (tau, emitted block) IS block verification's on the tables
  whose targets are MARS's one-node laws (the definition, checked through the enumeration);
  (b) followed by sampling from those laws, both MARS + block and token-level MARS give
  the product of MARS's one-node laws: every emitted token has MARS's per-token law
  (the same continuation with the unrelaxed target must NOT match: the check can fail);
  (c) E[tau] of MARS + block >= token-level MARS's at every context, > at some;
  (d) theta = 1 (never relaxes) is block verification exactly."""
  tables = _tables(1, 10, 4, 3)
  relaxed = _mars_law_tables(tables, THETA)
  mb, mars = MarsBlock(theta=THETA), Mars(theta=THETA)
  for length in (None, 2):
    got_mb, got_mars, got_never, block_p = _laws(
        (mb, mars, MarsBlock(theta=1.0), verifiers.Block()), tables, length)
    n_rel = 3 if length is None else 2  # MARS's law at drafted positions 1..L, then P
    cont = relaxed.p[:n_rel] + tables.p[n_rel:]
    want = pl.chain_law(verifiers.Block(), pl.ChainTables(p=cont, q=tables.q, z=tables.z),
                        length)
    _close((got_mb.accept_length, got_mb.block), (want.accept_length, want.block),
           msg=f"(a) length={length}")
    # (b) continuation by those laws
    for name, law in (("mars_block", got_mb), ("mars", got_mars)):
      first, target = jax.vmap(pl.continued_law)(law.block, cont)
      np.testing.assert_allclose(np.asarray(first), np.asarray(target), atol=3e-6,
                                 err_msg=f"(b) {name} length={length}")
      plain_first, plain_target = jax.vmap(pl.continued_law)(law.block, tables.p)
      gap = np.abs(np.asarray(plain_first) - np.asarray(plain_target)).reshape(10, -1).max(-1)
      assert gap.max() > 1e-3, (name, length, gap)
    e_mb, e_mars = np.asarray(got_mb.expected_accepted), np.asarray(got_mars.expected_accepted)
    assert (e_mb >= e_mars - 2e-6).all(), (length, e_mb, e_mars)
    assert (e_mb > e_mars + 1e-3).any(), (length, e_mb, e_mars)
    _close((got_never.accept_length, got_never.block), (block_p.accept_length, block_p.block),
           msg=f"(d) length={length}")


def test_greedy_and_one_draft_are_token_level_mars():
  """Exact round laws equal token-level MARS's (10 contexts each): at T = 0 (one-hot p,
  drafts one-hot: the target's top-1, top-2 or a random token; MARS's greedy form), and
  with K = 1 sampled drafts (block of one draft is min(1, P~(x)/Q(x)), which is MARS's
  own acceptance draft by draft).  Neither table is trivial: E[tau] varies by context."""
  for tables in (_greedy_tables(2, 10, 4, 3), _tables(6, 10, 5, 1)):
    got_mb, got_mars = _laws((MarsBlock(theta=THETA), Mars(theta=THETA)), tables)
    _close((got_mb.accept_length, got_mb.block), (got_mars.accept_length, got_mars.block))
    lengths = np.asarray(got_mars.expected_accepted)
    assert lengths.min() < lengths.max() - 0.1, lengths


# --- the sampler ------------------------------------------------------------------------------


def test_verify_path_draws_from_the_exact_law():
  """Monte Carlo, N = 40,000 uniform vectors per row, 12 random rows (V = 5, K = 4, ragged
  lengths): MARS + block's verify_path draws tau from its accept_length_law (TV < TV_TOL =
  0.0217, a 1e-9 false-failure event per row) and emits exactly emit_dists[tau].  Broken
  variant: plain block verification's sampler checked against MARS + block's law exceeds
  TV_TOL on every row where the two exact laws are > 3 TV_TOL apart (>= 2 such rows)."""
  rng = np.random.default_rng(3)
  b = 12
  z, p = _target(rng, (b, K_MC + 1), V_MC, 1.0)
  q = (0.3 * p[:, :K_MC] + 0.7 * _dist(rng, (b, K_MC), V_MC, onehot_frac=0.0)).astype(np.float32)
  x = np.array([[rng.choice(V_MC, p=q[i, j] / q[i, j].sum()) for j in range(K_MC)]
                for i in range(b)], np.int32)
  length = np.where(np.arange(b) < b // 2, K_MC, rng.integers(1, K_MC + 1, size=b)).astype(np.int32)
  args = tuple(jnp.asarray(a) for a in (z, p, q, x, length))
  mb = MarsBlock(theta=THETA)
  freq, law, mism = path_decision_frequencies(((mb, mb), (verifiers.Block(), mb)), *args,
                                              jax.random.PRNGKey(0), N_MC)
  tv = 0.5 * np.abs(np.asarray(freq) - np.asarray(law)).sum(-1)  # [pairs, rows]
  assert tv[0].max() < TV_TOL, tv[0]
  assert float(mism[0].max()) < 1e-6
  np.testing.assert_allclose(np.asarray(law.sum(-1)), 1.0, atol=1e-5)
  block_law = jax.vmap(verifiers.Block().accept_length_law)(*args[:4], args[4])
  gap = 0.5 * np.abs(np.asarray(block_law) - np.asarray(law[0])).sum(-1)
  far = gap > 3 * TV_TOL
  assert far.sum() >= 2, gap
  assert (tv[1][far] > TV_TOL).all(), (tv[1], gap)


# --- API ------------------------------------------------------------------------------------------


def test_registry_cli_traced_theta_and_errors():
  """"mars_block" is a path rule in the one registry, built from CLI strings (the sweeps'
  c.rules parser) and refused with a tree drafter before any model loads; a theta sweep
  reuses the compiled verify_path_batch; lossless exactly when relaxation can never
  activate; bad hyperparameters raise ValueError naming the argument and its value."""
  assert "mars_block" in verifiers.available("path") and "mars_block" not in verifiers.available()
  assert verifiers.get("mars_block", theta="0.8", margin="ratio") == MarsBlock(theta=0.8)
  from experiments.common import rows
  parsed = rows.parse_rules("mars:theta=0.9, mars_block:theta=0.9")
  assert parsed == [("mars", {"theta": 0.9}), ("mars_block", {"theta": 0.9})]
  with pytest.raises(ValueError, match=r"rules=\['mars_block'\] are path rules for chain"):
    rows.check_path_rules_on_trees(parsed, ["chain", "tree"])
  assert MarsBlock(theta=1.0).is_lossless and not MarsBlock(theta=0.9).is_lossless
  assert not MarsBlock(margin="difference", delta=0.5).is_lossless
  rng = np.random.default_rng(5)
  z, p = _target(rng, (3, 4), 5, 1.0)
  q = _dist(rng, (3, 3), 5).astype(np.float32)
  x = jnp.asarray(rng.integers(0, 5, size=(3, 3)), jnp.int32)
  u = jax.random.uniform(jax.random.PRNGKey(1), x.shape)
  fn = jax.jit(verify_path_batch)
  fn(MarsBlock(theta=0.5), z, p, q, x, u, jnp.array([3, 2, 0]))
  with compiled_code.count_lowerings() as c:
    dec = fn(MarsBlock(theta=0.95), z, p, q, x, u, jnp.array([3, 2, 0]))
  assert c.count == 0
  assert int(dec.num_accepted[2]) == 0
  for kwargs, fragment in ((dict(theta=0.0), "theta=0.0"), (dict(margin="log"), "margin='log'"),
                           (dict(adaptive="nope"), "adaptive='nope'")):
    with pytest.raises(ValueError, match=fragment):
      verifiers.get("mars_block", **kwargs)


@pytest.mark.slow  # ~6 compiles of chain_law: ~15 s on 2 cores
def test_loop_laws_equal_for_one_draft_and_differ_for_two():
  """analysis.loop_law (V = 3, 3 tokens, theta 0.6, raw logits 2 + 1.2 N(0, 1)): with K = 1
  the loop laws of MARS + block and token-level MARS are equal (the rules are equal in law),
  with K = 2 they differ (the bonus token falls at different places) and MARS + block needs
  fewer rounds and is closer to the target on this example (the numbers in
  docs/lossy_path_rules.md)."""
  from specjax.analysis import loop_law as ll

  def z_fn(seq):
    return 2.0 + 1.2 * np.random.default_rng([7] + list(seq)).standard_normal(3)

  def p_fn(seq):
    w = np.exp(z_fn(seq))
    return w / w.sum()

  def q_fn(seq):
    return np.random.default_rng([99] + list(seq)).dirichlet(np.ones(3))

  laws = {(k, name): ll.loop_law(rule, p_fn, q_fn, k, 3, 3, z_fn=z_fn)
          for k in (1, 2) for name, rule in (("mars", Mars(theta=0.6)),
                                             ("mars_block", MarsBlock(theta=0.6)))}
  np.testing.assert_allclose(laws[1, "mars_block"].law, laws[1, "mars"].law, atol=1e-7)
  gap = np.abs(laws[2, "mars_block"].law - laws[2, "mars"].law).max()
  assert 5e-3 < gap < 2e-2, gap
  assert laws[2, "mars_block"].expected_rounds < laws[2, "mars"].expected_rounds - 0.03
  assert ll.loop_kl(laws[2, "mars_block"]) < ll.loop_kl(laws[2, "mars"]) - 0.005


# --- the decoding loop ----------------------------------------------------------------------------


@pytest.mark.slow  # three compiles of the loop: ~60 s on 2 cores
def test_in_the_loop_greedy_identity_and_a_sampled_run():
  """The real loop (tiny models, 6 ragged prompts, K = 3): at T = 0 MARS + block emits
  exactly token-level MARS's tokens (theta 0.5: relaxation active at some nodes, so the
  tokens differ from the target's greedy ones) and at theta = 1 the target's greedy
  tokens (another theta reuses the compiled loop); at T = 1 every row keeps its length.
  Its sampled law is checked exactly above: the loop calls the same verify_path."""
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.drafters import LMDrafter
  from specjax.decoding.speculative import speculative_generate
  from specjax.distributions import SamplingConfig
  from tests.helpers import ragged_prompts, tiny_pair
  target, tp, draft, dp = tiny_pair(vocab=32, noise=0.05)
  prompts = ragged_prompts(6, 32)
  greedy = SamplingConfig(temperature=0.0)
  ref = generate(target, tp, prompts, max_new_tokens=12, eos_token_id=None).to_lists()

  def run(rule, sampling, n=12):
    out = speculative_generate(target, tp, LMDrafter(3, sampling, draft), dp, rule, prompts,
                               max_new_tokens=n, eos_token_id=None, sampling=sampling,
                               key=jax.random.key(0))
    return out.to_lists()

  assert run(MarsBlock(theta=1.0), greedy) == ref
  with compiled_code.count_lowerings() as c:
    toks_mb = run(MarsBlock(theta=0.5), greedy)
  assert c.count == 0
  assert toks_mb == run(Mars(theta=0.5), greedy)
  assert toks_mb != ref  # relaxation changed some token: the identity is not trivial
  toks = run(MarsBlock(theta=0.5), SamplingConfig(temperature=1.0), n=24)
  assert [len(t) for t in toks] == [24] * 6
