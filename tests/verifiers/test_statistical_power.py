"""Statistical tests with proven power.

Each family -- chain, tree, SV verify-length policy -- runs the real driver
(a node rule on chains and trees through ``NodePathRule`` / ``NodeTreeRule``, the SV policy's own ``companion_signals``
and ``choose_row``) N times on a synthetic Markov target and draft over V
tokens and compares the law of the first emitted tokens with an INDEPENDENT
reference: the target's own law ``p(y1) p(y2 | y1)`` for lossless rules, the
docs/spec.md §6 closed form for lenience.  (The Monte Carlo tests elsewhere compare
the drivers with :func:`induced_distribution`, which calls the same four rule
functions -- a wrong rule passes those; here it cannot.)

**Test.** Reject when ``TV(empirical, reference) > tol`` with
``tol = 0.5 sqrt(M / N) + sqrt(ln(1 / delta) / (2 N))`` for M cells:
``E[TV] <= 0.5 sqrt(M / N)`` (Cauchy-Schwarz on the multinomial) and TV moves
by at most 1/N per sample, so by McDiarmid the **false-alarm rate** is at
most ``delta = 1e-9`` per test.  **Power:** if the true law is at TV ``d``
from the reference, ``TV(emp, ref) >= d - TV(emp, true)``, so every law with
``d >= 2 tol`` (the **smallest detectable TV**) fails with probability at
least ``1 - delta``.  N = 200 000: M = 36 cells (pairs) -> tol 0.0139,
detectable 0.028; M = 6 (first token) -> tol 0.0099, detectable 0.020.

**Broken variants** (each must FAIL the same test at the same N, while the
real rule passes; their measured TVs are asserted to exceed ``tol``):

* ``UnnormalisedResidual``: ``on_reject -> max(0, p_cur - q)`` without
  renormalising.  In a chain this is harmless by construction (the emitted
  token is drawn by ``categorical(log r)``, which renormalises), so it is
  tested where it matters: tree siblings (the next sibling's ``p_cur(x)`` is
  too small).
* ``StaleSibling``: ``on_reject`` keeps the state, so the next sibling is
  tried against the probabilities the rejected sibling already used (and the
  correction can re-emit rejected candidates).
* ``ScaledResidualLenience``: the lenience residual built with ``l q`` instead
  of the unscaled ``q`` (docs/spec.md §3).
* off-by-one bonus position: after a fully accepted chain (or an accepted
  tree leaf / all SV-verified drafts) the bonus is drawn from the target's
  distribution one position too early (the last accepted node's parent).
* AdaEDL entropy off by one: whether draft k is offered is decided from
  ``H(q_{k+1})`` instead of ``H(q_k)``; ``q_{k+1}`` depends on ``x_k`` itself,
  so the offered drafts are biased (exact TV 0.177, :func:`chain_law_exact`).
* Cost-aware length peeking at the target: the stopping rule of
  ``specjax.policies.cost_aware`` fed the target's acceptance probability of
  each draft (``min(1, p(x_k) / q(x_k))``, this round's target output) instead
  of the calibrated estimate from the drafter's confidence (exact TV 0.057); the
  same for two rows choosing one length together (exact TV 0.023, by enumeration
  only: :func:`test_group_cost_aware_laws_by_enumeration`).
* Source choice peeking at the draft: a row takes the sampled source only when its
  first draft came out as the source's own most likely token (a choice that reads
  the draft it offers), else the copy draft -- against the real choice, made from
  the copy's match and score before the sampled source draws (measured TV 0.085, against
  0.002 for the real choice, at N = 200,000).
"""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.distributions import sample_from_probs
from specjax.policies.acceptance import AcceptanceTable, draft_confidence
from specjax.policies.adaedl import acceptance_bound, draft_entropy, stop_lengths
from specjax.policies.cost_aware import DraftGate, SourceGate, continuation_tables, offer_lengths
from specjax.policies.sv import choose_row, companion_signals
from specjax.verifiers import Lenience, Lossless, residual
from tests.helpers import verify_chain, verify_tree

V = 6
N = 200_000
DELTA = 1e-9


def tolerance(cells: int, n: int = N, delta: float = DELTA) -> float:
  """Rejection threshold on TV(empirical, reference) (module docstring)."""
  return 0.5 * math.sqrt(cells / n) + math.sqrt(math.log(1 / delta) / (2 * n))


# --- synthetic Markov models ------------------------------------------------------------------


def _markov(key, scale):
  k0, k1 = jax.random.split(key)
  return scale * jax.random.normal(k0, (V,)), scale * jax.random.normal(k1, (V, V))


_ZT0, _ZTT = _markov(jax.random.key(0), 1.5)  # target logits: root [V], transitions [V, V]
_n0, _nT = _markov(jax.random.key(1), 1.0)
_c0, _cT = _markov(jax.random.key(2), 0.7)
P0, PT = jax.nn.softmax(_ZT0), jax.nn.softmax(_ZTT, -1)  # target p(y1), p(y2 | y1)
Q0, QT = jax.nn.softmax(_ZT0 + _n0), jax.nn.softmax(_ZTT + _nT, -1)  # draft
C0, CT = jax.nn.softmax(_ZT0 + _c0), jax.nn.softmax(_ZTT + _cT, -1)  # SV companion
REF_PAIR = np.asarray(P0[:, None] * PT, np.float64).reshape(-1)  # [V*V]
# A draft far enough from p that lenience (l = 0.5) rejects (46% of drafts).
QL = jax.nn.softmax(_ZT0 + 1.5 * jax.random.normal(jax.random.key(3), (V,)))
L = 0.5


def lenience_closed_form(p, q, l):
  """docs/spec.md §6: ``min(q, p/l) + (1 - sum min(q, p/l)) norm(max(0, p - q))``."""
  m = np.minimum(q, p / l)
  r = np.maximum(p - q, 0)
  return m + (1 - m.sum()) * r / r.sum()


# --- broken rules and drivers -----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class UnnormalisedResidual(Lossless):
  def on_reject(self, state, q, x):
    return dataclasses.replace(state, p_cur=jnp.maximum(state.p_cur - q, 0.0))


@dataclasses.dataclass(frozen=True)
class StaleSibling(Lossless):
  def on_reject(self, state, q, x):
    return state


@dataclasses.dataclass(frozen=True)
class ScaledResidualLenience(Lenience):
  def on_reject(self, state, q, x):
    return dataclasses.replace(state, p_cur=residual(state.p_cur, self.l * q))


def chain_driver(rule, z, p, q, x, u, key, num_valid):
  res = verify_chain(rule, z, p, q, x, u, key, num_valid=num_valid)
  return res.num_accepted, res.token


def chain_off_by_one_bonus(rule, z, p, q, x, u, key, num_valid):
  """The chain driver, but a bonus token comes from position n - 1 instead of n."""
  n, tok = chain_driver(rule, z, p, q, x, u, key, num_valid)
  j = jnp.maximum(n - 1, 0)
  early = sample_from_probs(key, rule.correction(rule.init(z[j], p[j])))
  return n, jnp.where((n >= num_valid) & (n > 0), early, tok)


def tree_driver(rule, z, p, q, x, parent, u, key):
  res = verify_tree(rule, z, p, q, x, parent, u, key)
  return res.path, res.num_accepted, res.token


def tree_off_by_one_bonus(rule, z, p, q, x, parent, u, key):
  """The tree driver, but at an accepted leaf the bonus comes from the leaf's parent."""
  path, depth, tok = tree_driver(rule, z, p, q, x, parent, u, key)
  last = jnp.where(depth > 0, path[jnp.maximum(depth - 1, 0)], 0)
  leaf = (depth > 0) & ~jnp.any((parent == last) & (jnp.arange(x.shape[0]) > 0))
  j = parent[last]
  early = sample_from_probs(key, rule.correction(rule.init(z[j], p[j])))
  return path, depth, jnp.where(leaf, early, tok)


# --- samplers: the first two emitted tokens, N times ------------------------------------------


def _first_two(x, n, tok, key):
  """Emitted sequence ``x[:n], tok`` -> (y1, y2); when only one token was emitted
  y2 is the next step's exact target draw ``p(. | y1)``."""
  fresh = jax.random.categorical(key, jnp.log(PT[tok]))
  y1 = jnp.where(n >= 1, x[0], tok)
  y2 = jnp.where(n >= 2, x[1], jnp.where(n == 1, tok, fresh))
  return y1 * V + y2


GAMMA_MODES = ("fixed", "sv_S", "sv_A", "adaedl", "adaedl_off_by_one", "cost_aware",
               "cost_aware_peek", "source_choice", "source_choice_peek")
# AdaEDL (docs/spec.md §5) with the paper's gamma = 0.2 and a fixed lambda between the
# bounds of the draft's rows, min_draft = 0: draft 1 always passes (bound 0.575), draft 2
# passes for x1 in {1, 3, 4, 5} (gamma = 2 on 55% of samples).
ADAEDL_GAMMA, ADAEDL_LAM = 0.2, 0.52


def adaedl_gamma(rows, active=jnp.asarray([True])):
  """The AdaEDL policy's own stopping functions on one sample's draft rows ``[K, V]``."""
  bound = acceptance_bound(draft_entropy(rows), ADAEDL_GAMMA)
  return stop_lengths(bound[None], jnp.full((1,), ADAEDL_LAM), active, min_draft=0)[0]


# Cost-aware length (docs/spec.md §5) with a two-bin confidence table: draft 1 is
# always worth its cost; draft 2 is offered when the draft is confident after x1
# (max QT[x1] >= 0.6: x1 in {3, 4, 5}), so gamma is 1 or 2 by x1.
CA_TABLE = AcceptanceTable(jnp.asarray([0.0, 0.6, 1.0]), jnp.asarray([[0.9, 0.9], [0.05, 0.9]]),
                           jnp.asarray([0.8, 0.5]))
CA_COST = jnp.asarray([1.0, 1.2, 1.7])


def cost_aware_gamma(a, active=jnp.asarray([True])):
  """The cost-aware policy's own stopping rule on one sample's estimates ``a [K]``
  (lambda = 1)."""
  return offer_lengths(a[None], CA_TABLE.prior, CA_COST, jnp.ones((1,)), active)[0]


# Source choice (specjax.decoding.source_choice): source 0 is a copy draft LOOKUP
# (deterministic, one-hot q) that "matches" on half the contexts (a coin drawn before
# anything else; its score 1 when it does), source 1 the sampled draft above.  The
# policy's own SourceGate takes the copy where it matched (its value 1.01 beats the
# sampled source's 0.5 at these tables and costs), so both sources serve ~half the
# samples, each under its own table and stopping rule.
LOOKUP = jnp.asarray([int(jnp.argmin(Q0)), int(jnp.argmax(QT[jnp.argmin(Q0)]))])
SC_TABLE0 = AcceptanceTable(jnp.asarray([0.0, 0.5, 1.0]), jnp.asarray([[0.2, 0.9], [0.2, 0.9]]),
                            jnp.asarray([0.5, 0.5]))
SC_COST0, SC_COST1 = jnp.asarray([1.0, 1.2, 1.7]), jnp.asarray([1.1, 1.3, 1.9])


def source_choice(matched, x, q, peek: bool):
  """``(x, q, gamma)`` of the row's chosen source: the library's SourceGate and
  stopping rule; ``peek`` is the broken variant that takes the sampled source only
  when its first draft came out as its own favourite token (it reads the draft)."""
  one = jnp.ones((1,))
  gates = (DraftGate(SC_TABLE0, *continuation_tables(SC_TABLE0.prior, SC_COST0), one),
           DraftGate(CA_TABLE, *continuation_tables(CA_TABLE.prior, SC_COST1), one))
  score = jnp.where(matched, 1.0, 0.0) * jnp.ones((1, 2))
  offers = jnp.where(matched, 2, 0)[None]
  first = SourceGate(gates, (SC_COST0, SC_COST1)).prefer_first(score, offers)[0]
  if peek:
    first = matched & (x[0] != jnp.argmax(Q0))
  a0 = SC_TABLE0.lookup(score)
  n0 = offer_lengths(a0, SC_TABLE0.prior, SC_COST0, one, jnp.asarray([True]))[0]
  n1 = offer_lengths(cost_aware_estimates(q)[None], CA_TABLE.prior, SC_COST1, one,
                     jnp.asarray([True]))[0]
  qx = jax.nn.one_hot(LOOKUP, V)
  return (jnp.where(first, LOOKUP, x), jnp.where(first, qx, q), jnp.where(first, n0, n1))


def cost_aware_estimates(q_rows):
  """Calibrated estimates from the drafter's rows ``[K, V]`` (its confidence)."""
  return CA_TABLE.lookup(draft_confidence(q_rows)[None])[0]


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def chain_pairs(rule, driver, gamma_mode: str, key):
  """Pair counts [V*V] of a K = 2 sampled chain and the verify lengths used.

  ``gamma_mode``: "fixed" verifies one draft (K = 1 in effect, so the bonus
  token is the observed y2); "sv_S" / "sv_A" let the SV policy's pure functions
  (``companion_signals`` + ``choose_row``, latency (1, 1.3, 1.6)) pick gamma
  per sample with ``P_hat`` = the companion's S signal / A signal; "adaedl" lets
  AdaEDL's stopping functions pick it from ``H(q_1), H(q_2)`` and
  "adaedl_off_by_one" from ``H(q_2), H(q_3)`` (the broken variant).
  """

  def one(kk):
    kx1, kx2, ku, ke, kf = jax.random.split(kk, 5)
    x1 = jax.random.categorical(kx1, jnp.log(Q0))
    x2 = jax.random.categorical(kx2, jnp.log(QT[x1]))
    x = jnp.stack([x1, x2])
    z = jnp.stack([_ZT0, _ZTT[x1], _ZTT[x2]])
    p = jnp.stack([P0, PT[x1], PT[x2]])
    q = jnp.stack([Q0, QT[x1]])
    if gamma_mode == "fixed":
      gamma = jnp.int32(1)
    elif gamma_mode == "adaedl":
      gamma = adaedl_gamma(q)
    elif gamma_mode == "adaedl_off_by_one":
      gamma = adaedl_gamma(jnp.stack([QT[x1], QT[x2]]))
    elif gamma_mode == "cost_aware":
      gamma = cost_aware_gamma(cost_aware_estimates(q))
    elif gamma_mode == "cost_aware_peek":
      gamma = cost_aware_gamma(jnp.minimum(1.0, p[jnp.arange(2), x] / q[jnp.arange(2), x]))
    elif gamma_mode in ("source_choice", "source_choice_peek"):
      matched = jax.random.bernoulli(jax.random.fold_in(kk, 7))  # the context, drawn first
      x, q, gamma = source_choice(matched, x, q, gamma_mode == "source_choice_peek")
      z = jnp.stack([_ZT0, _ZTT[x[0]], _ZTT[x[1]]])
      p = jnp.stack([P0, PT[x[0]], PT[x[1]]])
    else:
      s_sig, a_sig = companion_signals(q, jnp.stack([C0, CT[x1]]), x)
      p_hat = s_sig if gamma_mode == "sv_S" else a_sig
      gamma = choose_row(p_hat[None], jnp.asarray([1.0, 1.3, 1.6]), jnp.asarray([True]))[0]
    n, tok = driver(rule, z, p, q, x, jax.random.uniform(ku, (2,)), ke, gamma)
    return _first_two(x, n, tok, kf), gamma

  cells, gamma = jax.vmap(one)(jax.random.split(key, N))
  return jnp.bincount(cells, length=V * V), jnp.bincount(gamma, length=3)


@functools.partial(jax.jit, static_argnums=(0,))
def lenience_first_tokens(rule, key):
  """First-token counts [V] of a K = 1 chain."""

  def one(kk):
    kx, ku, ke = jax.random.split(kk, 3)
    x = jax.random.categorical(kx, jnp.log(QL))[None]
    z = jnp.stack([_ZT0, _ZTT[x[0]]])
    p = jnp.stack([P0, PT[x[0]]])
    res = verify_chain(rule, z, p, QL[None], x, jax.random.uniform(ku, (1,)), ke)
    return jnp.where(res.num_accepted == 1, x[0], res.token)

  return jnp.bincount(jax.vmap(one)(jax.random.split(key, N)), length=V)


# Static top-k tree: root children c1, c2, c3 = the draft's top 3; c1 has one child
# g1 = the draft's argmax after c1.  Nodes [root, c1, c2, c3, g1].
TREE_PARENTS = jnp.asarray([0, 0, 0, 0, 1])


@functools.partial(jax.jit, static_argnums=(0, 1))
def tree_pairs(rule, driver, key):
  c = jnp.argsort(-Q0)[:3]
  g1 = jnp.argmax(QT[c[0]])
  x = jnp.concatenate([jnp.zeros((1,), c.dtype), c, g1[None]])
  z = jnp.stack([_ZT0, _ZTT[c[0]], _ZTT[c[1]], _ZTT[c[2]], _ZTT[g1]])
  p = jax.nn.softmax(z, -1)
  q = jax.nn.one_hot(x, V).at[0].set(0.0)

  def one(kk):
    ku, ke, kf = jax.random.split(kk, 3)
    path, depth, tok = driver(rule, z, p, q, x, TREE_PARENTS, jax.random.uniform(ku, (5,)), ke)
    return _first_two(x[path], depth, tok, kf)

  return jnp.bincount(jax.vmap(one)(jax.random.split(key, N)), length=V * V)


# --- the tests ------------------------------------------------------------------------------------


def _tv(counts, ref):
  return 0.5 * np.abs(np.asarray(counts, np.float64) / N - ref).sum()


KEY = jax.random.key(2026)
PAIR_TOL = tolerance(V * V)
TOKEN_TOL = tolerance(V)


def test_tolerances_are_as_documented():
  assert abs(PAIR_TOL - 0.0139) < 5e-4 and abs(TOKEN_TOL - 0.0099) < 5e-4


CHAIN_CASES = [  # (id, rule, driver, gamma_mode, must_pass)
    ("chain-lossless", Lossless(), chain_driver, "fixed", True),
    ("chain-off-by-one-bonus", Lossless(), chain_off_by_one_bonus, "fixed", False),
    ("chain-residual-not-applied", StaleSibling(), chain_driver, "fixed", False),
    ("sv-lossless", Lossless(), chain_driver, "sv_S", True),
    ("sv-off-by-one-bonus", Lossless(), chain_off_by_one_bonus, "sv_S", False),
    ("sv-residual-not-applied", StaleSibling(), chain_driver, "sv_S", False),
    ("adaedl-lossless", Lossless(), chain_driver, "adaedl", True),
    ("adaedl-entropy-off-by-one", Lossless(), chain_driver, "adaedl_off_by_one", False),
    ("cost-aware-lossless", Lossless(), chain_driver, "cost_aware", True),
    ("cost-aware-peeks-at-target", Lossless(), chain_driver, "cost_aware_peek", False),
    ("source-choice-lossless", Lossless(), chain_driver, "source_choice", True),
    ("source-choice-peeks-at-draft", Lossless(), chain_driver, "source_choice_peek", False),
]


def _cases(cases):
  """Parametrize ``cases``; the must-fail variants run in CI's slow step (each is
  a 200,000-sample run; the default suite keeps the well-powered test that the
  real rule passes, one per family)."""
  return [pytest.param(*c[1:], id=c[0], marks=() if c[-1] else pytest.mark.slow) for c in cases]


@pytest.mark.parametrize("rule,driver,gamma_mode,must_pass", _cases(CHAIN_CASES))
def test_chain_and_sv_families(rule, driver, gamma_mode, must_pass):
  counts, gammas = chain_pairs(rule, driver, gamma_mode, KEY)
  tv = _tv(counts, REF_PAIR)
  if gamma_mode != "fixed":  # the policy really varies the verify length
    assert (np.asarray(gammas) > N // 20).sum() >= 2, gammas
  assert (tv <= PAIR_TOL) == must_pass, (tv, PAIR_TOL)


@pytest.mark.slow
def test_sv_gamma_from_the_A_signal_is_caught_as_lossy():
  """The paper's table P_hat(S, A): A_i = min(1, P_c(x_i) / P_d(x_i)) looks at the
  drafted token x_i itself, so the verified drafts are no longer distributed as q
  and lossless + SV is biased towards tokens the companion likes (exact TV of this
  setup 0.074, > 5x PAIR_TOL). The test is the broken variant of "sv-lossless"
  above (P_hat from S only, a function of x_<i, exact): same N, same tolerance.
  ``SpeculativeVerification(table_signals="S")`` is the exact form."""
  counts, _ = chain_pairs(Lossless(), chain_driver, "sv_A", KEY)
  tv = _tv(counts, REF_PAIR)
  assert tv > PAIR_TOL and abs(tv - 0.074) < 0.02, tv


TREE_CASES = [
    ("tree-lossless", Lossless(), tree_driver, True),
    ("tree-unnormalised-residual", UnnormalisedResidual(), tree_driver, False),
    ("tree-stale-sibling", StaleSibling(), tree_driver, False),
    ("tree-off-by-one-bonus", Lossless(), tree_off_by_one_bonus, False),
]


@pytest.mark.parametrize("rule,driver,must_pass", _cases(TREE_CASES))
def test_tree_family(rule, driver, must_pass):
  tv = _tv(tree_pairs(rule, driver, KEY), REF_PAIR)
  assert (tv <= PAIR_TOL) == must_pass, (tv, PAIR_TOL)


LENIENCE_REF = lenience_closed_form(np.asarray(P0, np.float64), np.asarray(QL, np.float64), L)


@pytest.mark.parametrize("rule,must_pass", _cases([("lenience", Lenience(l=L), True),
                                                   ("lenience-scaled-q-residual",
                                                    ScaledResidualLenience(l=L), False)]))
def test_lenience_against_closed_form(rule, must_pass):
  tv = _tv(lenience_first_tokens(rule, KEY), LENIENCE_REF)
  assert (tv <= TOKEN_TOL) == must_pass, (tv, TOKEN_TOL)


@pytest.mark.slow
def test_broken_variants_are_beyond_the_detectable_tv():
  """Power is guaranteed, not lucky: each broken variant's law is at least the
  smallest detectable TV (2 tol) from the reference, measured with 5 more
  independent keys: each key's ``TV(emp, ref) - tol`` bounds the true TV from
  below with probability >= 1 - delta, so ``min >= 3 tol`` shows ``d >= 2 tol``."""
  keys = jax.random.split(jax.random.key(7), 5)
  chain = [(c[1], c[2], c[3]) for c in CHAIN_CASES if not c[4]]
  for rule, driver, mode in chain:
    tvs = [_tv(chain_pairs(rule, driver, mode, k)[0], REF_PAIR) for k in keys]
    assert min(tvs) >= 3 * PAIR_TOL, (rule, driver, tvs)
  for rule, driver in [(c[1], c[2]) for c in TREE_CASES if not c[3]]:
    tvs = [_tv(tree_pairs(rule, driver, k), REF_PAIR) for k in keys]
    assert min(tvs) >= 3 * PAIR_TOL, (rule, driver, tvs)
  tvs = [_tv(lenience_first_tokens(ScaledResidualLenience(l=L), k), LENIENCE_REF) for k in keys]
  assert min(tvs) >= 3 * TOKEN_TOL, tvs


def chain_law_exact(gamma_of) -> np.ndarray:
  """Exact law [V*V] of (y1, y2) from the K = 2 lossless chain of :func:`chain_pairs`
  when ``gamma_of(x1, x2)`` drafts are verified, by enumerating the drafts."""
  p0, pt = np.asarray(P0, np.float64), np.asarray(PT, np.float64)
  q0, qt = np.asarray(Q0, np.float64), np.asarray(QT, np.float64)
  res = lambda p, q: np.maximum(p - q, 0) / np.maximum(p - q, 0).sum()
  ref = p0[:, None] * pt
  out = np.zeros((V, V))
  for x1 in range(V):
    for x2 in range(V):
      w, g = q0[x1] * qt[x1, x2], int(gamma_of(x1, x2))
      if g == 0:  # nothing offered: the target draws both tokens
        out += w * ref
        continue
      a1 = min(1.0, p0[x1] / q0[x1])
      out += w * (1 - a1) * res(p0, q0)[:, None] * pt  # x1 rejected: correction, then p
      if g == 1:
        out[x1] += w * a1 * pt[x1]  # bonus after x1
      else:
        a2 = min(1.0, pt[x1, x2] / qt[x1, x2])
        out[x1, x2] += w * a1 * a2
        out[x1] += w * a1 * (1 - a2) * res(pt[x1], qt[x1])
  return out.reshape(-1)


def test_adaedl_laws_by_enumeration():
  """AdaEDL's stop is a function of the drafts before the stopped position, so the
  exact law is the target's; the off-by-one variant (H(q_{k+1}) decides draft k) is
  0.177 away, beyond the smallest detectable TV (2 PAIR_TOL) of the Monte Carlo test."""
  real = chain_law_exact(lambda a, b: adaedl_gamma(jnp.stack([Q0, QT[a]])))
  broken = chain_law_exact(lambda a, b: adaedl_gamma(jnp.stack([QT[a], QT[b]])))
  assert 0.5 * np.abs(real - REF_PAIR).sum() < 1e-6
  tv = 0.5 * np.abs(broken - REF_PAIR).sum()
  assert abs(tv - 0.177) < 2e-3 and tv >= 2 * PAIR_TOL, tv


def test_cost_aware_laws_by_enumeration():
  """The cost-aware stop reads the drafter's confidence at positions up to k (a
  function of the drafts before k), so the exact law is the target's; fed the
  target's acceptance of each draft (this round's target output) it is 0.057
  away, beyond the smallest detectable TV (2 PAIR_TOL) of the Monte Carlo test."""
  p0, pt = np.asarray(P0, np.float64), np.asarray(PT, np.float64)
  q0, qt = np.asarray(Q0, np.float64), np.asarray(QT, np.float64)
  real = chain_law_exact(lambda a, b: cost_aware_gamma(
      cost_aware_estimates(jnp.stack([Q0, QT[a]]))))
  broken = chain_law_exact(lambda a, b: cost_aware_gamma(jnp.asarray(
      [min(1.0, p0[a] / q0[a]), min(1.0, pt[a, b] / qt[a, b])], jnp.float32)))
  assert 0.5 * np.abs(real - REF_PAIR).sum() < 1e-6
  tv = 0.5 * np.abs(broken - REF_PAIR).sum()
  assert abs(tv - 0.057) < 2e-3 and tv >= 2 * PAIR_TOL, tv


def _group_gammas(row0_estimates: np.ndarray) -> np.ndarray:
  """``[V*V, V*V]``: the drafts verified for row 0 when it drafted pair i (its
  estimates ``row0_estimates[i]``) and row 1 of its group drafted pair j (its
  estimates from its own drafts), by the library's group rule (``group_size=2``)."""
  pairs = np.array([(a, b) for a in range(V) for b in range(V)])
  own = np.stack([np.asarray(cost_aware_estimates(jnp.stack([Q0, QT[x]]))) for x in range(V)])
  a = np.empty((V * V, V * V, 2, 2), np.float32)
  a[:, :, 0], a[:, :, 1] = row0_estimates[:, None], own[pairs[:, 0]][None]
  rows = a.size // 2
  n = offer_lengths(jnp.asarray(a.reshape(rows, 2)), CA_TABLE.prior, CA_COST, jnp.ones((rows,)),
                    jnp.ones((rows,), bool), group_size=2)
  return np.asarray(n).reshape(V * V, V * V, 2)[..., 0]


def test_group_cost_aware_laws_by_enumeration():
  """Two rows choosing one length together (``CostAwareLength(group_size=2)``):
  row 0's length depends on row 1's drafts (independent of row 0's verification)
  and on its own estimates before each position, so row 0's exact law, mixed over
  row 1's drafts, is the target's (TV < 1e-6); fed row 0's target acceptance of
  each draft instead (peeking at this round's target output) it is 0.023 away.
  Exact enumeration over both rows' drafts (36 x 36 cases); the group's length
  does depend on row 1 (checked)."""
  p0, pt = np.asarray(P0, np.float64), np.asarray(PT, np.float64)
  q0, qt = np.asarray(Q0, np.float64), np.asarray(QT, np.float64)
  pairs = [(a, b) for a in range(V) for b in range(V)]
  w = np.array([q0[a] * qt[a, b] for a, b in pairs])
  real = _group_gammas(np.stack([np.asarray(cost_aware_estimates(jnp.stack([Q0, QT[a]])))
                                 for a, _ in pairs]))
  peek = _group_gammas(np.array([[min(1.0, p0[a] / q0[a]), min(1.0, pt[a, b] / qt[a, b])]
                                 for a, b in pairs], np.float32))
  assert any(len(set(real[i])) > 1 for i in range(V * V))  # row 1 moves row 0's length

  def law(g):
    return sum(w[j] * chain_law_exact(lambda a, b: g[a * V + b, j]) for j in range(V * V))

  assert 0.5 * np.abs(law(real) - REF_PAIR).sum() < 1e-6
  tv = 0.5 * np.abs(law(peek) - REF_PAIR).sum()
  assert abs(tv - 0.023) < 2e-3, tv
