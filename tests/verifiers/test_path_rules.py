"""Path rules (specjax.verifiers.path, block.py) and their exact analysis (analysis/path_law.py).

What each test catches is in its docstring.  Random cases use small vocabularies
(V = 3..5), chains K = 2..4 with ragged lengths, and distributions with zeros and
one-hot rows; each group of cases is vmapped through ONE compiled program.  A
deliberately broken block rule (``_FirstFailureBlock``: "first failure" instead of
"largest success") must fail both the exact lossless check and the Monte Carlo check.
Default-suite time on 2 CPU cores: ~30 s, most of it XLA compilation (slow step: ~8 s more).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import compiled_code, verifiers
from specjax import distributions as sampling
from specjax.analysis import path_law as pl
from specjax.verifiers.block import Block, block_terms
from specjax.verifiers.path import (NodePathRule, PathDecision, first_failure_law,
                                    first_failure_sample, verify_path_batch)
from tests.helpers import rand_dists, rand_tables

ATOL = 2e-6  # float32 enumeration error on laws of V^(K+1) <= 3125 outcomes


@dataclasses.dataclass(frozen=True)
class _FirstFailureBlock(Block):
  """BROKEN on purpose: block verification with tau = the FIRST failure of u_i < h_i
  (token-level stopping on block's h) instead of the LARGEST success.  Same
  residuals and bonus as block.  Not lossless for K >= 2 (for K = 1 it is block)."""

  name = "block_first_failure"

  def accept_length_law(self, z, p, q, x, length=None, q_node=None):
    return first_failure_law(block_terms(p, q, x, length).h)

  def verify_path(self, z, p, q, x, u, length=None, q_node=None):
    k = x.shape[0]
    n = k if length is None else length
    terms = block_terms(p, q, x, length)
    tau = first_failure_sample(terms.h, u)
    i = jnp.minimum(tau, k - 1)
    resid = sampling.safe_normalize(terms.r[i], p[i])
    return PathDecision(tau, jnp.where(tau < n, resid, p[tau]))

  @property
  def is_lossless(self):
    return False


BLOCK = verifiers.get("block")
TOKEN = NodePathRule(verifiers.get("lossless"))
BROKEN = _FirstFailureBlock()


# --- random cases (numpy: no per-shape compile of jax's samplers) ------------------------


def _rand_rows(seed, batch, v, k, smooth=False):
  """Rows (z [B,K+1,V], p, q [B,K,V], x [B,K] drawn from q, length [B] in 0..K).

  ``smooth``: no zeros or one-hot rows, and q = (p + Dirichlet(1)) / 2 at each position,
  so acceptances are likely and block's h_i are rarely 0 or 1."""
  rng = np.random.default_rng(seed)
  z = (2.0 * rng.standard_normal((batch, k + 1, v)) + 4.0).astype(np.float32)
  if smooth:
    p = rng.dirichlet(np.ones(v), size=(batch, k + 1)).astype(np.float32)
    q = (0.5 * p[:, :k] + 0.5 * rng.dirichlet(np.ones(v), size=(batch, k))).astype(np.float32)
  else:
    p = rand_dists(rng, (batch, k + 1), v)
    q = rand_dists(rng, (batch, k), v)
  x = np.array([[rng.choice(v, p=q[b, i] / q[b, i].sum()) for i in range(k)]
                for b in range(batch)], np.int32)
  length = rng.integers(0, k + 1, size=batch).astype(np.int32)
  return tuple(jnp.asarray(a) for a in (z, p, q, x, length))


@jax.jit
def _laws(rules, tables, length):
  """ChainLaw of each rule: one compiled program per (rules, shapes)."""
  return tuple(pl.chain_law(r, tables, length) for r in rules)


def _binary_example():
  """Sun et al.'s example: target (1/3, 2/3), draft (2/3, 1/3) at every position, K = 2."""
  return pl.chain_tables(lambda pre: [1 / 3, 2 / 3], lambda pre: [2 / 3, 1 / 3], 2, 2)


# --- the paper's example -------------------------------------------------------------------


def test_paper_binary_example_10_9_vs_11_9():
  """Exact E[tau] = 10/9 token-level and 11/9 block (Sun et al.'s binary example), the
  laws of tau behind them, and both lossless; the broken variant loses the law."""
  block, token, broken = _laws((BLOCK, TOKEN, BROKEN), _binary_example(), None)
  np.testing.assert_allclose(float(token.expected_accepted), 10 / 9, atol=1e-6)
  np.testing.assert_allclose(float(block.expected_accepted), 11 / 9, atol=1e-6)
  np.testing.assert_allclose(np.asarray(token.accept_length), [1 / 3, 2 / 9, 4 / 9], atol=1e-6)
  np.testing.assert_allclose(np.asarray(block.accept_length), [1 / 3, 1 / 9, 5 / 9], atol=1e-6)
  assert float(block.lossless_gap) < ATOL and float(token.lossless_gap) < ATOL
  assert float(broken.lossless_gap) > 0.02
  # The emitted block's law sums to 1 over all blocks.
  assert abs(sum(float(b.sum()) for b in block.block) - 1.0) < 1e-6


# --- exact, on random contexts -------------------------------------------------------------


@pytest.mark.parametrize("v,k,seed", [(3, 2, 0), (4, 3, 1), (5, 4, 2)])
def test_block_lossless_and_never_below_token_level(v, k, seed):
  """On 48 random contexts (zeros, one-hot rows, ragged lengths): block and lossless
  token-level reproduce the target's joint law of K+1 tokens exactly; block's exact
  E[tau] >= token-level's on EVERY context (Sun et al.: block is optimal); the broken
  "first failure" block is caught by the same lossless check."""
  tables, length = rand_tables(seed, 48, v, k)
  block, token, broken = _laws((BLOCK, TOKEN, BROKEN), tables, length)
  assert float(jnp.max(block.lossless_gap)) < ATOL
  assert float(jnp.max(token.lossless_gap)) < ATOL
  gain = np.asarray(block.expected_accepted - token.expected_accepted)
  assert gain.min() > -1e-5, gain.min()
  assert gain.max() > 0.05  # the comparison has teeth on these cases
  assert float(jnp.max(broken.lossless_gap)) > 0.01  # caught
  # Laws are distributions.
  np.testing.assert_allclose(np.asarray(block.accept_length.sum(-1)), 1.0, atol=1e-5)
  np.testing.assert_allclose(np.asarray(block.first_tokens.reshape(48, -1).sum(-1)), 1.0,
                             atol=1e-5)


def test_block_with_one_draft_is_token_level():
  """K = 1: block verification is the ordinary lossless rule (same law of tau, same block)."""
  tables, length = rand_tables(3, 32, 4, 1)
  block, token = _laws((BLOCK, TOKEN), tables, length)
  np.testing.assert_allclose(np.asarray(block.accept_length), np.asarray(token.accept_length),
                             atol=ATOL)
  for b, t in zip(block.block, token.block):
    np.testing.assert_allclose(np.asarray(b), np.asarray(t), atol=ATOL)


# --- sampled decisions against the exact law --------------------------------------------------

N_MC = 40_000
K_MC, V_MC = 4, 5
# TV(empirical, law) over K+1 outcomes: E[TV] <= 0.5 sqrt((K+1) / N) (Cauchy-Schwarz), and
# one changed sample moves TV by <= 1/N, so P(TV > E[TV] + t) <= exp(-2 N t^2) (McDiarmid);
# t = sqrt(ln(1e9) / (2N)) makes a false failure (per row) a 1e-9 event.  N = 4e4: 0.0217.
TV_TOL = 0.5 * math.sqrt((K_MC + 1) / N_MC) + math.sqrt(math.log(1e9) / (2 * N_MC))


@functools.partial(jax.jit, static_argnums=0)
def _mc(rules, z, p, q, x, length, key):
  """Per rule and row: empirical frequencies of verify_path's num_accepted over N_MC uniform
  draws [R, B, K+1], the rule's exact law [R, B, K+1], and the largest mismatch between
  verify_path's emit_dist and emit_dists[num_accepted]."""
  b, k = x.shape
  u = jax.random.uniform(key, (b, N_MC, k))
  out = []
  for rule in rules:
    def row(zz, pp, qq, xx, n, uu, rule=rule):
      dec = jax.vmap(lambda ui: rule.verify_path(zz, pp, qq, xx, ui, n))(uu)
      freq = jnp.bincount(dec.num_accepted, length=k + 1) / N_MC
      emits = rule.emit_dists(zz, pp, qq, xx, n)
      mism = jnp.max(jnp.abs(dec.emit_dist - emits[dec.num_accepted]))
      return freq, rule.accept_length_law(zz, pp, qq, xx, n), mism
    out.append(jax.vmap(row)(z, p, q, x, length, u))
  return tuple(jnp.stack(a) for a in zip(*out))


def test_verify_path_draws_tau_from_accept_length_law():
  """Monte Carlo, N = 40,000 uniform vectors per row, 12 random rows (V = 5, K = 4, ragged;
  6 with zeros / one-hot rows, 6 smooth): the TV between verify_path's num_accepted frequencies and the
  rule's exact accept_length_law is below TV_TOL (0.0217; false-failure odds 1e-9 per row,
  derivation above) for block and token-level, and the emitted distribution is exactly
  emit_dists[num_accepted].  The broken sampler (first failure on block's h) is compared
  with BLOCK's law and must exceed TV_TOL on the rows where the two laws are > 3 TV_TOL
  apart."""
  rough = _rand_rows(7, 6, V_MC, K_MC)
  smooth = _rand_rows(8, 6, V_MC, K_MC, smooth=True)
  z, p, q, x, length = (jnp.concatenate(ab) for ab in zip(rough, smooth))
  length = length.at[6:].set(jnp.array([4, 4, 4, 4, 3, 2]))
  freq, law, mism = _mc((BLOCK, TOKEN, BROKEN), z, p, q, x, length, jax.random.PRNGKey(0))
  tv = 0.5 * np.abs(np.asarray(freq) - np.asarray(law)).sum(-1)  # [R, B]
  assert tv[0].max() < TV_TOL, tv[0]
  assert tv[1].max() < TV_TOL, tv[1]
  assert float(mism.max()) < 1e-6
  np.testing.assert_allclose(np.asarray(law.sum(-1)), 1.0, atol=1e-5)
  # The broken sampler against the correct block law.
  gap = 0.5 * np.abs(np.asarray(law[2]) - np.asarray(law[0])).sum(-1)  # exact TV of the laws
  far = gap > 3 * TV_TOL
  assert far.sum() >= 3, gap  # the check has rows where the variants differ
  broken_tv = 0.5 * np.abs(np.asarray(freq[2]) - np.asarray(law[0])).sum(-1)
  assert (broken_tv[far] > TV_TOL).all(), (broken_tv, gap)


# --- greedy identity, adapter, ragged, corner cases -------------------------------------------


def _greedy_rows(seed, batch, v, k):
  """T = 0 rows: p one-hot at argmax z; the drafts match the argmax for the first m
  positions (m = 0..K cycling), then differ; q one-hot at x (greedy drafts) for half the
  rows, a full-support random q for the rest."""
  rng = np.random.default_rng(seed)
  z = rng.standard_normal((batch, k + 1, v)).astype(np.float32)
  top = z.argmax(-1)
  p = np.eye(v, dtype=np.float32)[top]
  m = np.arange(batch) % (k + 1)
  x = rng.integers(0, v, size=(batch, k))
  for b in range(batch):
    x[b, :m[b]] = top[b, :m[b]]
    if m[b] < k:
      x[b, m[b]] = (top[b, m[b]] + 1 + rng.integers(0, v - 1)) % v
  q = np.where((np.arange(batch) % 2 == 0)[:, None, None], np.eye(v)[x],
               rng.dirichlet(np.ones(v), size=(batch, k))).astype(np.float32)
  return tuple(jnp.asarray(a) for a in (z, p, q, x.astype(np.int32), m))


@jax.jit
def _law_emit(rules, z, p, q, x):
  return tuple((jax.vmap(r.accept_length_law)(z, p, q, x), jax.vmap(r.emit_dists)(z, p, q, x))
               for r in rules)


def test_greedy_block_is_accept_while_argmax():
  """At T = 0 (p one-hot), block accepts exactly the drafts that match the target's argmax
  up to the first mismatch (law = point mass at m) and emits the argmax there (or the
  bonus argmax); identical to token-level greedy and lossless, with greedy (one-hot) and
  sampled drafts."""
  z, p, q, x, m = _greedy_rows(4, 20, 5, 4)
  (bl, be), (gl, ge), (ll, le) = _law_emit(
      (BLOCK, NodePathRule(verifiers.get("greedy")), TOKEN), z, p, q, x)
  want = jax.nn.one_hot(m, 5)
  np.testing.assert_array_equal(np.asarray(bl), np.asarray(want))
  np.testing.assert_array_equal(np.asarray(gl), np.asarray(want))
  np.testing.assert_array_equal(np.asarray(ll), np.asarray(want))
  rows = jnp.arange(20)
  argmax_at_m = jax.nn.one_hot(jnp.argmax(z[rows, m], -1), 5)
  for e in (be, ge, le):
    np.testing.assert_allclose(np.asarray(e[rows, m]), np.asarray(argmax_at_m), atol=1e-7)


_ADAPTER_RULES = (("lossless", {}), ("greedy", {}), ("mars", {"theta": 0.5}), ("typical", {}),
                  ("spec_cascade", {"p_base": 0.3}), ("lenience", {"l": 0.5}), ("cos", {}),
                  ("cos_contrastive", {}))


@functools.partial(jax.jit, static_argnums=0)
def _adapter(rule, z, p, q, x, u, length):
  path = NodePathRule(rule)
  return jax.vmap(lambda *a: path.verify_path(*a[:6], q_node=a[6]))(z, p, q, x, u, length, q)


def _by_hand(rule, z, p, q, x, u, n_valid: int):
  """Token-level verification of one row written out position by position from the node
  rule's own functions (docs/spec.md §2): ``(num_accepted, emitted distribution,
  relaxed acceptances)``; ``q`` doubles as the node distribution (CoS)."""
  relaxed = 0
  for i in range(n_valid):
    state = (rule.init_node(z[i], p[i], q[i]) if rule.needs_node_dist
             else rule.init(z[i], p[i]))
    if not float(u[i]) < float(rule.accept_prob(state, q[i], x[i])):
      return i, rule.correction(rule.on_reject(state, q[i], x[i])), relaxed
    relaxed += int(float(u[i]) >= float(rule.strict_accept_prob(state, q[i], x[i])))
  return n_valid, rule.correction(rule.init(z[n_valid], p[n_valid])), relaxed


def test_node_adapter_decides_as_written_by_hand():
  """NodePathRule(rule).verify_path -- the one chain driver of every node rule -- takes
  the decision written out by hand from the rule's four functions (the first rejection,
  its correction, the bonus after every offered draft, the relaxed count) for every node
  rule kind, with ragged lengths (incl. 0) and the drafter's node distribution (CoS).
  Broken variant caught: a driver that emits the bonus of position n - 1."""
  z, p, q, x, length = _rand_rows(5, 8, 6, 3)
  p = jax.nn.softmax(z, -1)  # MARS / truncation rules read z and p together
  u = jax.random.uniform(jax.random.PRNGKey(1), x.shape)
  for name, kw in _ADAPTER_RULES:
    rule = verifiers.get(name, **kw)
    dec = _adapter(rule, z, p, q, x, u, length)
    for b in range(x.shape[0]):
      n, emit, relaxed = _by_hand(rule, z[b], p[b], q[b], x[b], u[b], int(length[b]))
      assert int(dec.num_accepted[b]) == n, (name, b)
      assert int(dec.num_relaxed[b]) == relaxed, (name, b)
      np.testing.assert_allclose(np.asarray(dec.emit_dist[b]), np.asarray(emit), atol=1e-6,
                                 err_msg=f"{name} row {b}")


@functools.partial(jax.jit, static_argnums=5)
def _block_law_emit(z, p, q, x, length, k_cut):
  law = jax.vmap(lambda *a: BLOCK.accept_length_law(*a))(z, p, q, x, length)
  emit = jax.vmap(lambda *a: BLOCK.emit_dists(*a))(z, p, q, x, length)
  cut = (z[:, :k_cut + 1], p[:, :k_cut + 1], q[:, :k_cut], x[:, :k_cut])
  return law, emit, jax.vmap(BLOCK.accept_length_law)(*cut), jax.vmap(BLOCK.emit_dists)(*cut)


def test_ragged_length_is_the_shorter_chain():
  """A chain of K = 4 with length L offered is exactly block verification of its first L
  drafts (law of tau and emitted distributions; nothing past L is read), for L = 1..3."""
  z, p, q, x, _ = _rand_rows(6, 10, 4, 4)
  for cut in (1, 2, 3):
    garbage_q = q.at[:, cut:].set(jnp.flip(q[:, cut:], -1))  # past L: never read
    law, emit, law_c, emit_c = _block_law_emit(z, p, garbage_q, x, jnp.full((10,), cut), cut)
    np.testing.assert_allclose(np.asarray(law[:, :cut + 1]), np.asarray(law_c), atol=1e-7)
    np.testing.assert_array_equal(np.asarray(law[:, cut + 1:]), 0.0)
    np.testing.assert_allclose(np.asarray(emit[:, :cut + 1]), np.asarray(emit_c), atol=1e-7)


def test_zero_corner_cases():
  """Zeros: s_i = 0 (P_{i+1} = Q_{i+1} after a sure acceptance), Q(x) = 0 for a drafted x,
  P(x) = Q(x) = 0, and one-hot p = q: the law is finite and sums to 1, every reachable
  emitted distribution is a distribution, and tau = K when the draft IS the target."""
  v, k = 3, 3
  oh = lambda i: jnp.eye(v)[i]
  uni = jnp.full((v,), 1 / 3)
  cases = [
      # P = Q everywhere and x drawn from it: s_i = 0 at every i, tau = K surely.
      (jnp.stack([uni] * 4), jnp.stack([uni] * 3), jnp.array([0, 1, 2]), k),
      # one-hot target = one-hot draft: tau = K surely.
      (jnp.stack([oh(1)] * 4), jnp.stack([oh(1)] * 3), jnp.array([1, 1, 1]), k),
      # Q_1(x_1) = 0 < P_1(x_1) (a draft q could not have made): w_1 = 1.
      (jnp.stack([uni] * 4), jnp.stack([oh(0), uni, uni]), jnp.array([2, 0, 0]), None),
      # P_2(x_2) = Q_2(x_2) = 0: w_2 = 0, later h = 0.
      (jnp.stack([uni, oh(0), uni, uni]), jnp.stack([uni, oh(1), uni]), jnp.array([0, 2, 1]),
       None),
  ]
  p, q, x = (jnp.stack(c) for c in list(zip(*cases))[:3])
  ((laws, emits),) = _law_emit((BLOCK,), jnp.log(p), p, q, x)
  for law, emit, (_, _, _, sure) in zip(laws, emits, cases):
    assert np.isfinite(np.asarray(law)).all() and np.isfinite(np.asarray(emit)).all()
    np.testing.assert_allclose(float(law.sum()), 1.0, atol=1e-6)
    reach = np.asarray(law) > 0
    np.testing.assert_allclose(np.asarray(emit.sum(-1))[reach], 1.0, atol=1e-6)
    if sure is not None:
      np.testing.assert_allclose(np.asarray(law), np.eye(k + 1)[sure], atol=1e-7)


# --- API: registry, traced hyperparameters, batch, errors ------------------------------------


def test_registry_batch_and_traced_hyperparameters():
  """"block" is in the one registry (kind "path", not among the node rules the loop
  takes); verify_path_batch jits and vmaps over rows with a traced ragged length; a node
  rule's float hyperparameter stays traced through the adapter and the analysis (a sweep
  of lenience l reuses the compiled program)."""
  assert isinstance(verifiers.get("block"), Block)
  assert "block" in verifiers.available("path") and "block" not in verifiers.available()
  assert "block" in verifiers.available(None)
  z, p, q, x, length = _rand_rows(8, 6, 4, 3)
  u = jax.random.uniform(jax.random.PRNGKey(3), x.shape)
  dec = jax.jit(verify_path_batch)(BLOCK, z, p, q, x, u, length)
  assert dec.num_accepted.shape == (6,) and dec.emit_dist.shape == (6, 4)
  assert (np.asarray(dec.num_accepted) <= np.asarray(length)).all()
  tables = _binary_example()
  e1 = pl.expected_accepted(verifiers.get("lenience", l=0.5), tables)
  with compiled_code.count_lowerings() as c:
    e2 = pl.expected_accepted(verifiers.get("lenience", l=0.8), tables)
  assert c.count == 0
  assert float(e1) > float(e2) > 10 / 9 - 1e-6  # more lenient accepts more


def test_bad_arguments_name_the_argument():
  """Wrong shapes, lengths and rule types raise ValueError naming what is wrong."""
  z, p, q, x, _ = _rand_rows(9, 1, 4, 3)
  z, p, q, x = z[0], p[0], q[0], x[0]
  with pytest.raises(ValueError, match=r"p must be \[K\+1, V\]"):
    BLOCK.accept_length_law(z, p[:3], q, x)
  with pytest.raises(ValueError, match=r"q must be \[K, V\]"):
    BLOCK.emit_dists(z, p, q[:2], x)
  with pytest.raises(ValueError, match=r"uniforms must be \[K\]"):
    BLOCK.verify_path(z, p, q, x, jnp.zeros(2))
  with pytest.raises(ValueError, match=r"length=5 must be in 0\.\.K = 0\.\.3"):
    BLOCK.accept_length_law(z, p, q, x, 5)
  with pytest.raises(ValueError, match="must be a NodeRule"):
    NodePathRule(BLOCK)
  with pytest.raises(ValueError, match="no hyperparameter"):
    verifiers.get("block", theta=0.9)
  with pytest.raises(ValueError, match=r"kind='forest'"):
    verifiers.available("forest")
  tables = _binary_example()
  with pytest.raises(ValueError, match=r"ChainTables.q\[1\] must have shape"):
    pl.chain_law(BLOCK, dataclasses.replace(tables, q=(tables.q[0], tables.q[0])))
  with pytest.raises(ValueError, match=r"length=3 must be integers in 0\.\.K = 0\.\.2"):
    pl.chain_law(BLOCK, tables, 3)


# --- slow: the emitted block, sampled end to end -----------------------------------------------

N_SLOW = 400_000


@pytest.mark.slow
def test_sampled_blocks_match_the_exact_block_law():
  """End to end on one context (V = 3, K = 2): draw x ~ Q by prefix, u, and the emitted
  token from verify_path's emit_dist, N = 400,000 times; the empirical law of the emitted
  block (t accepted drafts + the token; 3 + 9 + 27 = 39 outcomes) matches chain_law.block
  within TV 0.5 sqrt(39 / N) + sqrt(ln(1e9) / 2N) = 0.0153 for block and token-level, and
  the broken rule's samples are further than that from BLOCK's exact law."""
  tables, _ = rand_tables(11, 1, 3, 2)
  tables = jax.tree.map(lambda a: a[0], tables)
  tol = 0.5 * math.sqrt(39 / N_SLOW) + math.sqrt(math.log(1e9) / (2 * N_SLOW))

  def flat(block):
    return jnp.concatenate([b.reshape(-1) for b in block])

  def sampled(rule, key):
    kx, ku, ky = jax.random.split(key, 3)

    def one(kx, ku, ky):
      x = []
      for i in range(2):
        qi = tables.q[i][tuple(x)]
        x.append(jax.random.categorical(jax.random.fold_in(kx, i), jnp.log(qi)))
      x = jnp.stack(x)
      p = jnp.stack([tables.p[0], tables.p[1][x[0]], tables.p[2][x[0], x[1]]])
      q = jnp.stack([tables.q[0], tables.q[1][x[0]]])
      dec = rule.verify_path(jnp.log(p), p, q, x, jax.random.uniform(ku, (2,)))
      y = sampling.sample_from_probs(ky, dec.emit_dist)
      # index of the block (x_1..x_t, y) in flat(): offsets 0, 3, 12.
      t = dec.num_accepted
      return jnp.where(t == 0, y, jnp.where(t == 1, 3 + 3 * x[0] + y,
                                            12 + 9 * x[0] + 3 * x[1] + y))

    ks = [jax.random.split(k, N_SLOW) for k in (kx, ku, ky)]
    idx = jax.jit(jax.vmap(one))(*ks)
    return np.bincount(np.asarray(idx), minlength=39) / N_SLOW

  exact_block = np.asarray(flat(pl.chain_law(BLOCK, tables).block))
  exact_token = np.asarray(flat(pl.chain_law(TOKEN, tables).block))
  tv = lambda a, b: 0.5 * np.abs(a - b).sum()
  assert tv(sampled(BLOCK, jax.random.PRNGKey(0)), exact_block) < tol
  assert tv(sampled(TOKEN, jax.random.PRNGKey(1)), exact_token) < tol
  assert tv(np.asarray(flat(pl.chain_law(BROKEN, tables).block)), exact_block) > 3 * tol
  assert tv(sampled(BROKEN, jax.random.PRNGKey(2)), exact_block) > tol
