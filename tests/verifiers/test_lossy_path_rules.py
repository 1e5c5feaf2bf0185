"""Lossy rules that look along the path or at the two distributions: FLy (path rule,
verifiers/fly.py) and Fuzzy speculative decoding (node rule, verifiers/fuzzy.py), with
their exact analysis (analysis/path_law.py for one round, analysis/loop_law.py for the
loop).  Definitions: docs/lossy_path_rules.md.

What each test catches is in its docstring.  Random rows use V = 5, K = 4 (ragged);
each group of cases goes through ONE compiled program.  Broken variants: FLy that
forgives every eligible failure without its window (the authors' "no window" ablation)
and Fuzzy run with the other fallback must fail the Monte Carlo checks at the same N.
Default-suite time on 2 CPU cores: ~55 s, most of it XLA compilation (slow step: ~65 s more).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import compiled_code, verifiers
from specjax.analysis import loop_law as ll
from specjax.analysis import path_law as pl
from specjax.distributions import safe_normalize
from specjax.verifiers.fly import Fly, fly_accepted, fly_reach, top_k_entropy
from specjax.verifiers.fuzzy import Fuzzy, divergence
from specjax.verifiers.path import NodePathRule, PathDecision, verify_path_batch
from tests.helpers import path_decision_frequencies

ATOL = 2e-6  # float32 enumeration error
V_MC, K_MC, N_MC = 5, 4, 40_000
# Per row, TV(empirical, law) over K+1 outcomes: E[TV] <= 0.5 sqrt((K+1)/N) (Cauchy-Schwarz)
# and one changed sample moves TV by <= 1/N, so by McDiarmid TV > E[TV] + sqrt(ln(1e9)/(2N))
# is a 1e-9 event per row.  N = 4e4: 0.0217.
TV_TOL = 0.5 * math.sqrt((K_MC + 1) / N_MC) + math.sqrt(math.log(1e9) / (2 * N_MC))
FLY = Fly(entropy_threshold=0.6, window=2)
TOKEN = NodePathRule(verifiers.get("lossless"))


@dataclasses.dataclass(frozen=True)
class _NoWindowFly(Fly):
  """BROKEN on purpose: forgives every eligible failure without asking the W-1 drafts
  after it to pass (the authors' code's "no window" ablation, as a sampler)."""

  name = "fly_no_window"

  def verify_path(self, z, p, q, x, u, length=None, q_node=None):
    t = self.terms(z, p, q, x, length)
    k = x.shape[0]
    n = k if length is None else length
    acc = (u < t.a) | t.eligible
    tau = jnp.sum(jnp.cumprod(acc.astype(jnp.int32))).astype(jnp.int32)
    i = jnp.minimum(tau, k - 1)
    resid = safe_normalize(jnp.maximum(p[i] - q[i], 0.0), p[i])
    return PathDecision(tau, jnp.where(tau < n, resid, p[tau]))


def _rand_rows(seed, batch, v, k, zero_frac=0.0):
  """(z [B,K+1,V], p = softmax(z), q [B,K,V] = 0.2 p + 0.8 Dirichlet(1), x ~ q, length [B] in 1..K)."""
  rng = np.random.default_rng(seed)
  z = (1.5 * rng.standard_normal((batch, k + 1, v))).astype(np.float32)
  p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
  p = np.where(rng.random(p.shape) < zero_frac, 0.0, p)
  p[..., 0] += p.sum(-1) == 0
  p = (p / p.sum(-1, keepdims=True)).astype(np.float32)
  q = (0.2 * p[:, :k] + 0.8 * rng.dirichlet(np.ones(v), size=(batch, k))).astype(np.float32)
  x = np.array([[rng.choice(v, p=q[b, i] / q[b, i].sum()) for i in range(k)]
                for b in range(batch)], np.int32)
  length = rng.integers(1, k + 1, size=batch).astype(np.int32)
  length[: batch // 2] = k
  return tuple(jnp.asarray(a) for a in (z, p, q, x, length))


def _rand_tables(seed, batch, v, k):
  rng = np.random.default_rng(seed)

  def dists(i):
    d = rng.dirichlet(np.full(v, 0.5), size=(batch,) + (v,) * i)
    d = np.where(rng.random(d.shape) < 0.2, 0.0, d)
    d[..., 0] += d.sum(-1) == 0
    d = d / d.sum(-1, keepdims=True)
    onehot = np.eye(v)[rng.integers(0, v, size=d.shape[:-1])]
    return jnp.asarray(np.where((rng.random(d.shape[:-1]) < 0.15)[..., None], onehot, d),
                       jnp.float32)

  return pl.ChainTables(p=tuple(dists(i) for i in range(k + 1)),
                        q=tuple(dists(i) for i in range(k)))


@jax.jit
def _laws(rules, tables):
  return tuple(pl.chain_law(r, tables) for r in rules)


# --- FLy: the exact law ----------------------------------------------------------------------


def _enumerated_reach(a, eligible, window):
  """P(tau >= t) by enumerating the 2^K pass patterns (numpy, float64)."""
  k = len(a)
  reach = np.zeros(k + 1)
  for bits in itertools.product((0, 1), repeat=k):
    b = np.array(bits, bool)
    w = np.prod(np.where(b, a, 1.0 - a))
    acc = np.asarray(fly_accepted(jnp.asarray(b), jnp.asarray(eligible), window))
    tau = int(np.cumprod(acc).sum())
    reach[:tau + 1] += w
  return reach


def test_fly_law_is_the_enumeration_of_pass_patterns():
  """fly_reach (the O(K W) forward pass) equals P(tau >= t) summed over all 2^K pass
  patterns with the sampler's own acceptance function, for windows 1..5 (5 > K: nothing
  forgiven), random pass probabilities (including 0 and 1) and eligibility masks."""
  rng = np.random.default_rng(0)
  for window in range(1, 6):
    for _ in range(4):
      a = rng.choice([0.0, 1.0, 0.3, 0.55, 0.8, 0.95], size=4)
      elig = rng.random(4) < 0.6
      got = np.asarray(jax.jit(fly_reach, static_argnums=2)(
          jnp.asarray(a, jnp.float32), jnp.asarray(elig), window))
      np.testing.assert_allclose(got, _enumerated_reach(a, elig, window), atol=1e-6,
                                 err_msg=f"window={window} a={a} eligible={elig}")


def _tv(a, b):
  return 0.5 * np.abs(np.asarray(a) - np.asarray(b)).sum(-1)


def test_loop_decisions_draw_from_the_exact_laws():
  """Monte Carlo, N = 40,000 uniform vectors per row, 12 random rows (V = 5, K = 4,
  ragged): FLy's verify_path and Fuzzy's chain decisions (both fallbacks, through the
  node adapter, the one chain driver of a node rule) draw tau from their exact
  accept_length_law (TV < TV_TOL = 0.0217, 1e-9 false-failure odds per row) and emit
  exactly emit_dists[tau].  Broken variants, compared with the right law, must exceed
  TV_TOL on every row where the two laws are > 3 TV_TOL apart: FLy without its window,
  and Fuzzy sampled with fallback "sd" but checked against fallback "target"."""
  z, p, q, x, length = _rand_rows(1, 12, V_MC, K_MC)
  fz_t = NodePathRule(Fuzzy(threshold=0.05))
  fz_s = NodePathRule(Fuzzy(threshold=0.05, fallback="sd"))
  broken = _NoWindowFly(entropy_threshold=0.6, window=2)
  pairs = ((FLY, FLY), (fz_t, fz_t), (fz_s, fz_s), (broken, FLY), (fz_s, fz_t))
  freq, law, mism = path_decision_frequencies(pairs, z, p, q, x, length,
                                              jax.random.PRNGKey(0), N_MC)
  tv = _tv(freq, law)  # [pairs, rows]
  assert tv[:3].max() < TV_TOL, tv[:3]
  assert float(mism[:3].max()) < 1e-6
  np.testing.assert_allclose(np.asarray(law.sum(-1)), 1.0, atol=1e-5)
  true_broken = (_laws_of(broken, z, p, q, x, length), np.asarray(law[2]))
  for j, right, truth in ((3, 0, true_broken[0]), (4, 1, true_broken[1])):
    gap = _tv(truth, law[right])  # exact TV between the broken sampler's law and the right one
    far = gap > 3 * TV_TOL
    assert far.sum() >= 2, (j, gap)  # the check has rows where the variants differ
    assert (tv[j][far] > TV_TOL).all(), (j, tv[j], gap)


def _laws_of(rule, z, p, q, x, length):
  """The broken FLy's true law: the no-window acceptance enumerated over pass patterns."""
  out = []
  for b in range(x.shape[0]):
    t = rule.terms(z[b], p[b], q[b], x[b], length[b])
    a, e = np.asarray(t.a, np.float64), np.asarray(t.eligible)
    reach = np.zeros(x.shape[1] + 1)
    for bits in itertools.product((0, 1), repeat=x.shape[1]):
      bb = np.array(bits, bool)
      tau = int(np.cumprod(bb | e).sum())
      reach[tau] += np.prod(np.where(bb, a, 1.0 - a))
    out.append(reach)
  return np.stack(out)


# --- limits, by exact enumeration --------------------------------------------------------------


def test_threshold_zero_is_lossless_and_large_accepts_the_draft():
  """Exact (chain_law on 6 random contexts, V = 4, K = 3, zeros and one-hot rows):
  Fuzzy with threshold 0 (both fallbacks, all three divergences) reproduces the target's
  joint law of K+1 tokens; FLy with entropy_threshold = inf, and FLy whose window is
  longer than the chain, are token-level lossless verification exactly (same law of tau).
  Fuzzy with a threshold above the divergence's range (JS <= ln 2, TV <= 1) accepts every
  draft (tau = K); FLy with threshold 0 and window 1 forgives every failure but the last
  (tau >= K-1); Fuzzy at threshold 0.3 is not lossless on these contexts."""
  tables = _rand_tables(3, 6, 4, 3)
  zero = tuple(Fuzzy(threshold=0.0, divergence=d, fallback=f)
               for d in ("js", "kl", "tv") for f in ("target", "sd"))
  rules = zero + (TOKEN, Fly(entropy_threshold=float("inf")), Fly(entropy_threshold=0.0,
                                                                  window=4),
                  Fuzzy(threshold=1.0), Fuzzy(threshold=1.5, divergence="tv", fallback="sd"),
                  Fly(entropy_threshold=0.0, window=1), Fuzzy(threshold=0.3))
  laws = _laws(rules, tables)
  for rule, law in zip(zero, laws[:6]):
    assert float(law.lossless_gap.max()) < ATOL, rule
  for law in laws[7:9]:
    np.testing.assert_allclose(np.asarray(law.accept_length), np.asarray(laws[6].accept_length),
                               atol=ATOL)
    assert float(law.lossless_gap.max()) < ATOL
  for law in laws[9:11]:
    np.testing.assert_allclose(np.asarray(law.accept_length[:, 3]), 1.0, atol=ATOL)
  np.testing.assert_allclose(np.asarray(laws[11].accept_length[:, 2:].sum(-1)), 1.0, atol=ATOL)
  assert float(laws[12].lossless_gap.max()) > 0.05


# --- greedy -----------------------------------------------------------------------------------


def _reference_fly_greedy(z, x, threshold, window, top_k):
  """The authors' released greedy steps, re-stated in numpy for one full row: exact
  match with the argmax; a mismatch whose next W-1 drafts match is forgiven (windows
  that fit in the chain, none starting in the last W positions); a mismatch where the
  target's top-k entropy is below the threshold is never forgiven.  Returns (tau, token)."""
  k = len(x)
  match = x == z[:k].argmax(-1)
  ent = np.asarray(top_k_entropy(jnp.asarray(z[:k]), top_k))
  acc = match.copy()
  if k >= window:
    for j in range(k - window + 1):
      if not match[j] and match[j + 1:j + window].all():
        acc[j] = True
    acc[k - window:] &= match[k - window:]
  acc &= ~((ent < threshold) & ~match)
  tau = int(np.cumprod(acc).sum())
  return tau, int(z[tau].argmax())


def test_fly_greedy_is_the_authors_rule_and_fuzzy_zero_is_greedy():
  """At T = 0 (p one-hot at argmax z, greedy drafts q = onehot(x)) FLy's law of tau is a
  point mass at the authors' rule's tau and it emits the argmax there, for 64 random rows
  (K = 6, V = 4, drafts matching the argmax with probability 0.7) and windows 1..4;
  Fuzzy at threshold 0 with the "sd" fallback accepts exactly the leading matches (the
  greedy rule); with the "target" fallback it accepts nothing and emits the argmax."""
  rng = np.random.default_rng(5)
  b, k, v = 64, 6, 4
  z = (1.2 * rng.standard_normal((b, k + 1, v))).astype(np.float32)
  top = z.argmax(-1)
  x = np.where(rng.random((b, k)) < 0.7, top[:, :k], rng.integers(0, v, (b, k))).astype(np.int32)
  p, q = np.eye(v, dtype=np.float32)[top], np.eye(v, dtype=np.float32)[x]
  thr = float(np.median(np.asarray(top_k_entropy(jnp.asarray(z), 3))))
  rules = tuple(Fly(entropy_threshold=thr, window=w) for w in (1, 2, 3, 4))
  rules += (NodePathRule(Fuzzy(threshold=0.0, fallback="sd")),
            NodePathRule(verifiers.get("greedy")), NodePathRule(Fuzzy(threshold=0.0)))
  out = jax.jit(lambda rs, *a: tuple((jax.vmap(r.accept_length_law)(*a),
                                      jax.vmap(r.emit_dists)(*a)) for r in rs))(
                                          rules, *(jnp.asarray(a) for a in (z, p, q, x)))
  for rule, (law, emit) in zip(rules[:4], out[:4]):
    for r in range(b):
      tau, tok = _reference_fly_greedy(z[r], x[r], thr, rule.window, 3)
      assert np.asarray(law[r]).argmax() == tau and float(law[r, tau]) == 1.0, (rule, r)
      assert int(np.asarray(emit[r, tau]).argmax()) == tok and float(emit[r, tau, tok]) == 1.0
  forgave = sum(int(np.asarray(out[0][0][r]).argmax()) > int(np.asarray(out[5][0][r]).argmax())
                for r in range(b))
  assert forgave > 5  # the case has deferred rejections
  np.testing.assert_array_equal(np.asarray(out[4][0]), np.asarray(out[5][0]))
  np.testing.assert_array_equal(np.asarray(out[6][0])[:, 0], 1.0)  # accepts nothing
  np.testing.assert_array_equal(np.asarray(out[6][1])[:, 0], p[:, 0])  # emits the argmax


def test_fuzzy_on_trees_by_exact_enumeration():
  """Fuzzy is a node rule, so trees come for free (analysis.tree_law, the loop's
  NodeTreeRule): on a 4-node static tree with sampled (without replacement) and top-k
  children, threshold 0 is lossless for both fallbacks and threshold 1 (> ln 2) accepts
  a full-depth path on every context."""
  from specjax.analysis import tree_law as tl
  tables = _rand_tables(3, 4, 3, 2)
  paths = ((0,), (1,), (0, 0), (1, 0))
  for children in ("sampled", "topk"):
    for rule in (Fuzzy(threshold=0.0), Fuzzy(threshold=0.0, fallback="sd")):
      law = tl.static_tree_law(rule, tables, paths, children=children)
      assert float(law.lossless_gap.max()) < ATOL, (children, rule)
    law = tl.static_tree_law(Fuzzy(threshold=1.0), tables, paths, children=children)
    np.testing.assert_allclose(np.asarray(law.accept_length[:, 2]), 1.0, atol=ATOL)


# --- the first emitted token on real-size contexts (analysis/induced.py) ------------------------


def test_fuzzy_first_token_closed_form_equals_enumeration():
  """Fuzzy's correction after a rejection does not depend on the rejected token (a
  close node rejects nothing; a far one keeps p or takes the residual), so the O(V)
  closed form of the first emitted token's law (what the main job's first-token KL uses)
  equals the V^2 enumeration, for both fallbacks on 6 contexts (V = 24) of which some are
  close and some far; the law is q on the close contexts and p on the far ones."""
  from specjax.analysis.induced import induced_parts, rejection_invariant
  rng = np.random.default_rng(6)
  z = (2.0 * rng.standard_normal((6, 24))).astype(np.float32)
  p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
  noise = np.array([0.1, 0.3, 0.5, 1.0, 2.0, 3.0])[:, None] * rng.standard_normal((6, 24))
  q = np.exp(np.log(p) + noise)
  q = (q / q.sum(-1, keepdims=True)).astype(np.float32)
  z, p, q = jnp.asarray(z), jnp.asarray(p), jnp.asarray(q)
  close = np.asarray(divergence("js", p, q)) < 0.05
  assert 0 < close.sum() < 6
  for fallback in ("target", "sd"):
    rule = Fuzzy(threshold=0.05, fallback=fallback)
    assert rejection_invariant(rule)
    full = induced_parts(rule, z, p, q, draft="sampled", chunk_size=None)
    fast = induced_parts(rule, z, p, q, draft="sampled", sampled_form="closed")
    for a, b in zip(full, fast):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6)
    want = np.where(close[:, None], np.asarray(q), np.asarray(p))
    np.testing.assert_allclose(np.asarray(fast.dist), want, atol=2e-6)


# --- the loop's law -----------------------------------------------------------------------------


def _ctx(seed):
  def dist(seq):
    r = np.random.default_rng([seed] + list(seq))
    w = np.exp(1.5 * r.standard_normal(3))
    return w / w.sum()
  return dist


def test_loop_law_lossless_is_the_target_and_fuzzy_is_not():
  """analysis.loop_law composes rounds exactly (V = 3, K = 2, 3 tokens): lossless
  verification's loop law is the target's joint law; Fuzzy at threshold 0 too (KL 0);
  at thresholds 0.1 and 0.3 its KL to the target (its matched baseline) is positive,
  and the sweep reuses the compiled rounds (the threshold is traced)."""
  pf, qf = _ctx(1), _ctx(2)
  lossless = ll.loop_law(verifiers.get("lossless"), pf, qf, 2, 3, 3)
  np.testing.assert_allclose(lossless.law, lossless.target, atol=1e-6)
  kls = []
  for i, thr in enumerate((0.0, 0.1, 0.3)):
    with compiled_code.count_lowerings() as c:
      kls.append(ll.loop_kl(ll.loop_law(Fuzzy(threshold=thr), pf, qf, 2, 3, 3)))
    assert i == 0 or c.count == 0, thr
  assert kls[0] < 1e-6 < min(kls[1:]), kls


@pytest.mark.slow  # ~8 compiles of chain_law: ~35 s on 2 cores
def test_loop_law_fly_and_the_two_fuzzy_fallbacks():
  """Loop laws (V = 3, 3 tokens): with K = 3 block is the target, FLy at entropy_threshold
  = inf is the target and at 0 (window 2) is not, and the two Fuzzy fallbacks give the
  same law (no bonus token among the first 3; before the first bonus every token's law
  is q or p by the divergence test alone) with fewer rounds for "sd"; with K = 2 the
  fallbacks differ (the bonus token, always drawn from p, falls at different places).
  With divergence "kl" the loop's KL to the target over n tokens is below n * threshold
  (docs/lossy_path_rules.md, "Matched baseline")."""
  pf, qf = _ctx(3), _ctx(4)
  for rule in (verifiers.get("block"), Fly(entropy_threshold=float("inf"), window=2)):
    law = ll.loop_law(rule, pf, qf, 3, 3, 3)
    np.testing.assert_allclose(law.law, law.target, atol=1e-6, err_msg=str(rule))
  assert ll.loop_kl(ll.loop_law(Fly(entropy_threshold=0.0, window=2), pf, qf, 3, 3, 3)) > 1e-4
  t3 = ll.loop_law(Fuzzy(threshold=0.2), pf, qf, 3, 3, 3)
  s3 = ll.loop_law(Fuzzy(threshold=0.2, fallback="sd"), pf, qf, 3, 3, 3)
  np.testing.assert_allclose(t3.law, s3.law, atol=1e-6)  # K >= n: no bonus among the 3
  assert s3.expected_rounds < t3.expected_rounds
  t2 = ll.loop_law(Fuzzy(threshold=0.2), pf, qf, 2, 3, 3)
  s2 = ll.loop_law(Fuzzy(threshold=0.2, fallback="sd"), pf, qf, 2, 3, 3)
  assert np.abs(t2.law - s2.law).max() > 1e-4  # K = 2: a bonus token can be the third
  kl = ll.loop_kl(ll.loop_law(Fuzzy(threshold=0.3, divergence="kl"), pf, qf, 2, 3, 3))
  assert 0.0 < kl < 3 * 0.3  # divergence "kl", sampled drafts: below n * threshold


# --- the decoding loop ------------------------------------------------------------------------


@pytest.mark.slow  # three compiles of the loop: ~90 s on 2 cores
def test_in_the_loop_greedy_limits_and_a_lossy_run():
  """The real loop (tiny models, 6 ragged prompts, K = 3, T = 0): FLy at entropy_threshold
  = inf and Fuzzy at threshold 0 with the "sd" fallback emit the target's greedy tokens;
  FLy at threshold 0 and Fuzzy at threshold 0.6 (JS against the drafter's T = 1
  softmax; each the same compiled program as its exact run: thresholds are traced) run
  on the same prompts, keep every row's length and accept more drafts per target call."""
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.drafters import LMDrafter
  from specjax.decoding.speculative import speculative_generate
  from specjax.distributions import SamplingConfig
  from tests.helpers import ragged_prompts, tiny_pair
  target, tp, draft, dp = tiny_pair(vocab=32, noise=0.05)
  prompts = ragged_prompts(6, 32)
  greedy = SamplingConfig(temperature=0.0)
  ref = generate(target, tp, prompts, max_new_tokens=12, eos_token_id=None).to_lists()
  drafter = LMDrafter(3, greedy, draft)

  def run(rule):
    out = speculative_generate(target, tp, drafter, dp, rule, prompts, max_new_tokens=12,
                               eos_token_id=None)
    return out.to_lists(), out.stats.summary()["tau"]

  pairs = ((Fly(entropy_threshold=float("inf"), window=2), Fly(entropy_threshold=0.0, window=2)),
           (Fuzzy(threshold=0.0, fallback="sd"), Fuzzy(threshold=0.6, fallback="sd")))
  for exact_rule, lossy_rule in pairs:
    toks, tau_exact = run(exact_rule)
    assert toks == ref, exact_rule
    with compiled_code.count_lowerings() as c:
      toks, tau = run(lossy_rule)
    assert c.count == 0
    assert [len(t) for t in toks] == [len(t) for t in ref]
    assert tau > tau_exact, (lossy_rule, tau, tau_exact)


# --- API: registry, traced hyperparameters, ragged rows, errors ----------------------------------


def test_registry_traced_thresholds_and_ragged_rows():
  """"fly" is a path rule and "fuzzy" a node rule in the one registry, built from CLI
  strings (the main job's and the sweeps' --verifiers / c.rules parser; fly refused with
  a tree drafter before any model loads); a sweep of either threshold reuses the compiled program (verify_path_batch
  and chain_law); FLy with length L < K never reads positions >= L (garbage there
  changes nothing)."""
  assert "fly" in verifiers.available("path") and "fly" not in verifiers.available()
  assert "fuzzy" in verifiers.available()
  assert verifiers.get("fly", entropy_threshold="0.5", window="4") == Fly(0.5, 4)
  assert verifiers.get("fuzzy", threshold="0.1", fallback="sd") == Fuzzy(0.1, fallback="sd")
  from experiments.common import rows
  parsed = rows.parse_rules("lossless, fly:window=2, fuzzy:threshold=0.1:fallback=sd")
  assert parsed == [("lossless", {}), ("fly", {"window": 2}),
                    ("fuzzy", {"threshold": 0.1, "fallback": "sd"})]
  rows.check_path_rules_on_trees(parsed, ["chain"])
  with pytest.raises(ValueError, match=r"rules=\['fly'\] are path rules for chain drafters"):
    rows.check_path_rules_on_trees(parsed, ["chain", "tree"])
  z, p, q, x, length = _rand_rows(2, 6, 4, 3)
  u = jax.random.uniform(jax.random.PRNGKey(3), x.shape)
  fn = jax.jit(verify_path_batch)
  fn(Fly(entropy_threshold=0.3), z, p, q, x, u, length)
  tables = _rand_tables(4, 2, 3, 2)
  pl.expected_accepted(Fuzzy(threshold=0.1), tables)
  with compiled_code.count_lowerings() as c:
    dec = fn(Fly(entropy_threshold=0.9), z, p, q, x, u, length)
    pl.expected_accepted(Fuzzy(threshold=0.5), tables)
  assert c.count == 0
  assert (np.asarray(dec.num_accepted) <= np.asarray(length)).all()
  rule, n = Fly(entropy_threshold=0.0, window=1), 2
  garbage = (z.at[:, n + 1:].set(9.0), p.at[:, n + 1:].set(0.25), q.at[:, n:].set(0.25),
             x.at[:, n:].set(0))
  law = jax.vmap(rule.accept_length_law, (0, 0, 0, 0, None))
  emit = jax.vmap(rule.emit_dists, (0, 0, 0, 0, None))
  np.testing.assert_array_equal(np.asarray(law(z, p, q, x, n)), np.asarray(law(*garbage, n)))
  np.testing.assert_array_equal(np.asarray(emit(z, p, q, x, n)), np.asarray(emit(*garbage, n)))


@pytest.mark.parametrize("name,kwargs,fragment", [
    ("fly", dict(entropy_threshold=-0.1), "entropy_threshold=-0.1"),
    ("fly", dict(window=0), "window=0"),
    ("fly", dict(top_k=0), "top_k=0"),
    ("fuzzy", dict(threshold=-1.0), "threshold=-1.0"),
    ("fuzzy", dict(divergence="hellinger"), "divergence='hellinger'"),
    ("fuzzy", dict(fallback="residual"), "fallback='residual'"),
])
def test_bad_hyperparameters_raise(name, kwargs, fragment):
  """Out-of-range hyperparameters raise ValueError naming the argument and its value."""
  with pytest.raises(ValueError, match=fragment.replace(".", r"\.")):
    verifiers.get(name, **kwargs)


def test_divergences():
  """The three divergences at known values: 0 for equal distributions; JS of disjoint
  one-hots is ln 2, TV 1, KL(q || p) inf; KL(q || p) of (1/2, 1/2) vs (1/4, 3/4)."""
  a, b = jnp.array([1.0, 0.0]), jnp.array([0.0, 1.0])
  for kind in ("js", "kl", "tv"):
    assert float(divergence(kind, a, a)) == 0.0
  assert abs(float(divergence("js", a, b)) - math.log(2)) < 1e-6
  assert float(divergence("tv", a, b)) == 1.0 and float(divergence("kl", a, b)) == math.inf
  want = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
  got = float(divergence("kl", jnp.array([0.25, 0.75]), jnp.array([0.5, 0.5])))
  assert abs(got - want) < 1e-6
