"""Invariants, hand-worked examples and a Monte Carlo check of the lossy node rules.

Rules: MARS (mars.py), SpecCascade / typical acceptance (truncation.py), CoS /
contrastive CoS / lenience (collaborative.py), matched baselines (baselines.py).
Small vocabularies, float32, CPU; ~20 s of CPU time, most of it XLA compilation (the
Monte Carlo cases share one compiled program).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from tests import helpers
from specjax import distributions as sampling
from specjax.verifiers import (CoS, CoSContrastive, Greedy, Lenience, Lossless, Mars,
                               SpecCascade, Typical)

V = 8


def _target(z, temperature):
  """``p`` as the loop builds it: one-hot argmax at T = 0, else softmax(z / T)."""
  return sampling.probs_from_logits(z, sampling.SamplingConfig(temperature=temperature))


def _random_ctx(seed, temperature=1.0, v=V):
  """Random untied logits with positive top logits, the target p and a full-support q."""
  kz, kq = jax.random.split(jax.random.PRNGKey(seed))
  z = 2.0 * jax.random.normal(kz, (v,)) + 4.0
  q = jax.nn.softmax(jax.random.normal(kq, (v,)))
  return z, _target(z, temperature), q


def _table_impl(rule, z, p, q, siblings=True):
  """Per candidate x in 0..V-1: a(x) [V], strict(x) [V], correction after rejecting x [V, V],
  the bonus distribution [V] and, if ``siblings``, for a second sibling (drawn from
  q2 = q reversed) tried after rejecting x: a2 [V, V] and the correction after rejecting
  both [V, V, V]."""
  v = z.shape[-1]
  xs = jnp.arange(v)
  q2 = q[::-1]
  s0 = rule.init_node(z, p, q) if rule.needs_node_dist else rule.init(z, p)  # q_node = q
  a = jax.vmap(lambda x: rule.accept_prob(s0, q, x))(xs)
  strict = jax.vmap(lambda x: rule.strict_accept_prob(s0, q, x))(xs)
  out = dict(a=a, strict=strict, bonus=rule.correction(rule.init(z, p)))
  if not siblings:
    out["r"] = jax.vmap(lambda x: rule.correction(rule.on_reject(s0, q, x)))(xs)
    return out

  def after(x):
    s1 = rule.on_reject(s0, q, x)
    a2 = jax.vmap(lambda y: rule.accept_prob(s1, q2, y))(xs)
    r2 = jax.vmap(lambda y: rule.correction(rule.on_reject(s1, q2, y)))(xs)
    return rule.correction(s1), a2, r2

  out["r"], out["a2"], out["r2"] = jax.vmap(after)(xs)
  return out


_table = jax.jit(_table_impl, static_argnums=(0, 4))


def _assert_same_rule(rule_a, rule_b, z, p, q, exact=True, keys=("a", "r", "a2", "r2", "bonus")):
  ta, tb = _table(rule_a, z, p, q, True), _table(rule_b, z, p, q, True)
  for k in keys:
    if exact:
      np.testing.assert_array_equal(np.asarray(ta[k]), np.asarray(tb[k]), err_msg=k)
    else:
      np.testing.assert_allclose(np.asarray(ta[k]), np.asarray(tb[k]), atol=2e-6, err_msg=k)


def induced_distribution(rule, z, p, q, table=_table):
  """docs/spec.md §6 one-node induced distribution for a sampled draft, by enumeration:
  ``P(y) = sum_x q(x) [a(x) 1[x = y] + (1 - a(x)) correction(on_reject(state, q, x))(y)]``."""
  t = table(rule, z, p, q, False)
  return q * t["a"] + jnp.einsum("x,xy->y", q * (1.0 - t["a"]), t["r"])


# --- reductions to lossless / greedy ---------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_lenience_1_and_cos_1_are_exactly_lossless(seed, temperature):
  z, p, q = _random_ctx(seed, temperature)
  for rule in (Lenience(l=1.0), CoS(lam=1.0)):
    assert rule.is_lossless
    _assert_same_rule(rule, Lossless(), z, p, q, exact=True)
  assert CoSContrastive(mu=0.0).is_lossless
  _assert_same_rule(CoSContrastive(mu=0.0), Lossless(), z, p, q, exact=False)
  assert not Lenience(l=0.5).is_lossless and not CoS(lam=0.5).is_lossless


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_spec_cascade_p_base_extremes(seed, temperature):
  z, p, q = _random_ctx(seed, temperature)
  # p_base = 1: A = {argmax p}: greedy verification (random normal logits are untied).
  _assert_same_rule(SpecCascade(p_base=1.0), Greedy(), z, p, q, exact=True, keys=("a",))
  _assert_same_rule(SpecCascade(p_base=1.0), Greedy(), z, p, q, exact=False)
  # p_base = 0: everything is allowed, every draft is accepted, correction = p.
  t = _table(SpecCascade(p_base=0.0), z, p, q, False)
  np.testing.assert_array_equal(np.asarray(t["a"]), np.ones(V))
  np.testing.assert_allclose(np.asarray(t["bonus"]), np.asarray(p), rtol=1e-6)


def _close_top2(z1=3.0, ratio=0.95, v=V, seed=0):
  """Logits with top1 = 2, top2 = 5, top3 = 0, z2 = ratio * z1, z3 = z2 - 0.03 |z2|, the
  rest in [z3 - 3, z3 - 0.2]."""
  z2 = z1 * ratio
  z3 = z2 - 0.03 * abs(z2)
  z = np.array(jax.random.uniform(jax.random.PRNGKey(seed), (v,), minval=z3 - 3.0,
                                   maxval=z3 - 0.2))
  z[2], z[5], z[0] = z1, z2, z3
  return jnp.asarray(z, jnp.float32)


@pytest.mark.parametrize("theta", [1.0, 1.5])
@pytest.mark.parametrize("ratio", [0.99, 0.9, 0.5])
def test_mars_theta_ge_1_is_greedy_at_t0_and_lossless_at_t1(theta, ratio):
  z = _close_top2(ratio=ratio)
  q = jax.nn.softmax(jax.random.normal(jax.random.PRNGKey(7), (V,)))
  rule = Mars(theta=theta)
  assert rule.never_relaxes and rule.is_lossless
  _assert_same_rule(rule, Greedy(), z, _target(z, 0.0), q, exact=True)
  _assert_same_rule(rule, Lossless(), z, _target(z, 1.0), q, exact=True)
  # strict probabilities too (nothing is ever counted as relaxed).
  for t in (0.0, 1.0):
    tab = _table(rule, z, _target(z, t), q, False)
    np.testing.assert_array_equal(np.asarray(tab["a"]), np.asarray(tab["strict"]))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_mars_never_relaxes_top3(temperature):
  """Top-3 is never relaxed: it gets exactly the strict (base) rule's probability -- 0 in
  greedy form, lossless ``min(1, p/q) = 1`` here at T = 1 (relax-only, docs/spec.md §3).  The
  strict ablation rejects it outright while relaxation is active (the old, wrong default)."""
  z = _close_top2(ratio=0.99)  # z3 / z1 = 0.96 > theta as well
  assert float(z[0] / z[2]) > 0.9
  p = _target(z, temperature)
  q = jnp.full((V,), 1.0 / V)
  rule = Mars(theta=0.9)
  st = rule.init(z, p)
  assert bool(st.active) and int(st.top1) == 2 and int(st.top2) == 5
  a3 = float(rule.accept_prob(st, q, 0))
  assert a3 == float(rule.strict_accept_prob(st, q, 0))  # never a relaxed acceptance
  assert float(rule.relaxed_fallback(st, 0)) == 0.0
  assert float(rule.accept_prob(st, q, 5)) == 1.0  # top-2: accepted
  assert float(rule.accept_prob(st, q, 2)) == 1.0  # top-1
  ablation = Mars(theta=0.9, sampled_mode="strict_ablation")
  assert float(ablation.accept_prob(ablation.init(z, p), q, 0)) == 0.0
  if temperature == 0:
    assert a3 == 0.0
  else:
    assert a3 == float(Lossless().accept_prob(Lossless().init(z, p), q, 0)) == 1.0


def test_mars_guard_on_nonpositive_top_logit():
  z = _close_top2(z1=-1.0, ratio=1.05)  # z1 = -1, z2 = -1.05: r = 1.05 > theta
  p = _target(z, 0.0)
  q = jnp.full((V,), 1.0 / V)
  on, off = Mars(), Mars(guard=False)
  assert not bool(on.init(z, p).active) and bool(off.init(z, p).active)
  assert float(on.accept_prob(on.init(z, p), q, 5)) == 0.0
  assert float(off.accept_prob(off.init(z, p), q, 5)) == 1.0
  # z1 = 0: undefined ratio; with z2 < 0 it never relaxes, even without the guard.
  z0 = z.at[2].set(0.0)
  assert not bool(off.init(z0, _target(z0, 0.0)).active)


# --- MARS: hand-worked examples ------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_mars_top2_above_and_below_theta(temperature):
  rule = Mars(theta=0.9)
  q = jax.nn.one_hot(5, V)  # deterministic draft of top2
  # Above theta: z2 / z1 = 0.95 -> top2 accepted, and the acceptance is a relaxed one.
  z = _close_top2(ratio=0.95)
  st = rule.init(z, _target(z, temperature))
  assert float(rule.accept_prob(st, q, 5)) == 1.0
  assert float(rule.strict_accept_prob(st, q, 5)) < 1.0
  # Below theta: z2 / z1 = 0.8 -> strict rule.
  z = _close_top2(ratio=0.8)
  p = _target(z, temperature)
  st = rule.init(z, p)
  assert not bool(st.active)
  a = float(rule.accept_prob(st, q, 5))
  emit = rule.correction(rule.on_reject(st, q, 5))
  if temperature == 0:  # Algorithm 1: reject, emit top1
    assert a == 0.0
    np.testing.assert_array_equal(np.asarray(emit), np.asarray(jax.nn.one_hot(2, V)))
  else:  # lossless with q = onehot(top2): accept w.p. p(top2), else p with top2 zeroed
    np.testing.assert_allclose(a, float(p[5]), rtol=1e-6)
    assert float(emit[5]) == 0.0


def test_mars_chain_example_four_tokens():
  """K = 4 chain (cf. the paper's "lovely, so, I, will" example): drafts 1 and 2 are top-2
  tokens at low-margin positions, draft 3 is top-1, draft 4 is a top-2 token at a decisive
  position.  MARS accepts 3 and emits top1 at position 4: 4 tokens; greedy: 1 token."""
  k = 4
  z = np.full((k + 1, V), -2.0, np.float32)
  # position: (top1, z1), (top2, z2)
  z[0, 1], z[0, 3] = 10.0, 9.5   # r = 0.95 > 0.9, draft 3 (top-2): relaxed
  z[1, 4], z[1, 6] = 8.0, 7.6    # r = 0.95,      draft 6 (top-2): relaxed
  z[2, 0], z[2, 7] = 12.0, 6.0   # r = 0.5,       draft 0 (top-1): strict accept
  z[3, 2], z[3, 5] = 20.0, 10.0  # r = 0.5,       draft 5 (top-2): rejected -> emit 2
  z[4, 7] = 5.0
  z = jnp.asarray(z)
  x = jnp.asarray([3, 6, 0, 5], jnp.int32)
  p = _target(z, 0.0)
  q = jax.nn.one_hot(x, V)
  u = jnp.full((k,), 0.5)
  chain = jax.jit(helpers.verify_chain, static_argnums=0)
  mars = chain(Mars(theta=0.9), z, p, q, x, u, jax.random.PRNGKey(0))
  greedy = chain(Greedy(), z, p, q, x, u, jax.random.PRNGKey(0))
  assert int(mars.num_accepted) + 1 == 4
  assert int(mars.token) == 2
  np.testing.assert_array_equal(np.asarray(mars.accepted), [True, True, True, False])
  assert int(mars.num_relaxed) == 2  # positions 0 and 1, the top-2 drafts
  assert int(greedy.num_accepted) + 1 == 1 and int(greedy.token) == 1
  # Same chain sampled (T = 1): relaxed positions accept deterministically, whatever u is.
  p1 = _target(z, 1.0)
  res = chain(Mars(theta=0.9), z, p1, q, x, jnp.full((k,), 0.999), jax.random.PRNGKey(0))
  assert int(res.num_accepted) >= 2
  assert int(res.num_relaxed) >= 2  # the two low-margin top-2 drafts


def test_mars_tree_siblings():
  """Root with children [top-3, top-2] at a low-margin node: top-3 is rejected (never relaxed),
  its sibling top-2 is accepted as a relaxed acceptance; the leaf emits its top1."""
  z = np.full((3, V), -1.0, np.float32)
  z[0, 2], z[0, 5], z[0, 0] = 10.0, 9.6, 9.4
  z[2, 4] = 3.0
  z = jnp.asarray(z)
  x = jnp.asarray([0, 0, 5], jnp.int32)
  parent = jnp.asarray([0, 0, 0], jnp.int32)
  q = jax.nn.one_hot(x, V)
  res = jax.jit(helpers.verify_tree, static_argnums=0)(
      Mars(), z, _target(z, 0.0), q, x, parent, jnp.full((3,), 0.5), jax.random.PRNGKey(0))
  assert int(res.num_accepted) == 1 and int(res.path[0]) == 2
  assert int(res.num_relaxed) == 1 and int(res.token) == 4


_MARS_VARIANTS = [Mars(), Mars(sampled_mode="strict_ablation"), Mars(base="typical"),
                  Mars(base=CoS(lam=0.4)), Mars(margin="difference", delta=0.5)]


@pytest.mark.parametrize("rule", _MARS_VARIANTS, ids=lambda r: f"{r.sampled_mode}-{r.base}")
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("ratio", [0.95, 0.5])
def test_mars_accept_prob_is_strict_then_fallback(rule, temperature, ratio):
  """One child: trying it strictly and then by ``relaxed_fallback`` (the tree form) has the
  acceptance probability ``accept_prob`` (the chain form), for every token, before and after a
  rejected sibling -- the identity that makes chains, trees and the analysis one rule."""
  z = _close_top2(ratio=ratio, seed=4)
  p = _target(z, temperature)
  q = jax.nn.softmax(jax.random.normal(jax.random.PRNGKey(5), (V,)))
  xs = jnp.arange(V)

  def check(st):
    a = jax.vmap(lambda x: rule.accept_prob(st, q, x))(xs)
    strict = jax.vmap(lambda x: rule.strict_accept_prob(st, q, x))(xs)
    fb = jax.vmap(lambda x: rule.relaxed_fallback(st, x))(xs) > 0
    np.testing.assert_allclose(np.asarray(a), np.asarray(strict + (1 - strict) * fb), atol=1e-7)
    return np.asarray(fb)

  fb = check(rule.init(z, p))
  check(rule.on_reject(rule.init(z, p), q, 3))  # after a rejected sibling
  # Only the top-2 tokens (2 and 5) are ever relaxable, and only where relaxation is active.
  expect = np.isin(np.arange(V), [2, 5]) & bool(rule.init(z, p).active)
  np.testing.assert_array_equal(fb, expect)


def test_mars_relax_only_accepts_everything_lossless_accepts():
  """Relax-only MARS at T = 1 never tightens lossless (docs/spec.md §3): with shared draws (x ~ q, u)
  every K = 4 chain accepts at least as many drafts under MARS as under lossless, so tau(MARS)
  >= tau(lossless); and the exact first-draft acceptance rate is >= lossless's for sampled and
  top-k drafts.  The strict ablation (the earlier default) is caught: it accepts fewer on some
  chains."""
  k, n = 4, 2000
  kz, kq, kx, ku = jax.random.split(jax.random.PRNGKey(17), 4)
  z = 5.0 + 0.5 * jax.random.normal(kz, (n, k + 1, V))  # near ties: relaxation often active
  p = _target(z, 1.0)
  q = jax.nn.softmax(jax.random.normal(kq, (n, k, V)), -1)
  x = jax.random.categorical(kx, jnp.log(q)).astype(jnp.int32)  # [n, k]
  u = jax.random.uniform(ku, (n, k))
  keys = jax.random.split(jax.random.PRNGKey(0), n)

  @functools.partial(jax.jit, static_argnums=0)
  def accepted(rule):
    return jax.vmap(lambda *a: helpers.verify_chain(rule, *a).num_accepted)(z, p, q, x, u, keys)

  n_lossless = np.asarray(accepted(Lossless()))
  n_mars = np.asarray(accepted(Mars()))
  n_ablation = np.asarray(accepted(Mars(sampled_mode="strict_ablation")))
  assert np.all(n_mars >= n_lossless)
  assert n_mars.mean() > n_lossless.mean()  # and the relaxation does bite here
  assert np.any(n_ablation < n_lossless)
  # Exact first-token acceptance rates (one node, every context).
  from specjax.analysis.induced import induced_parts
  for kw in (dict(draft="sampled"), dict(draft="topk", top_k=3)):
    rate = {r: np.asarray(induced_parts(r, z[:, 0], p[:, 0], q[:, 0], **kw).accept_rate)
            for r in (Lossless(), Mars())}
    assert np.all(rate[Mars()] >= rate[Lossless()] - 1e-6), kw


def _tree_root(children, temperature, z_root, rule, u, parent=None):
  """The tree driver on a root whose children are ``children`` (one-hot q); every child is a leaf
  whose logits put argmax on token 7.  Returns (path node, num_accepted, num_relaxed, token)."""
  c = len(children)
  z = jnp.concatenate([z_root[None], jnp.tile(jnp.zeros((V,)).at[7].set(5.0), (c, 1))])
  x = jnp.asarray([0] + list(children), jnp.int32)
  par = jnp.zeros((c + 1,), jnp.int32) if parent is None else jnp.asarray(parent, jnp.int32)
  res = jax.jit(helpers.verify_tree, static_argnums=0)(
      rule, z, _target(z, temperature), jax.nn.one_hot(x, V), x, par, jnp.asarray(u, jnp.float32),
      jax.random.PRNGKey(0))
  return int(res.path[0]), int(res.num_accepted), int(res.num_relaxed), int(res.token)


def test_mars_tree_strict_before_relaxed():
  """docs/spec.md §3 trees.  Root (active: z2/z1 = 0.95, top1 = 2, top2 = 5) with children
  [top-2, top-1]: MARS takes the exactly matching top-1 sibling, not the earlier top-2 child
  (the old first-accepted-in-order driver took node 1 -- the broken variant this catches)."""
  z = _close_top2(ratio=0.95)
  u0 = [0.5, 0.5, 0.5]
  # T = 0: the argmax child wins, strictly (no relaxation needed).
  assert _tree_root([5, 2], 0.0, z, Mars(), u0) == (2, 1, 0, 7)
  # Only top-3 and top-2 drafted: the top-2 child by relaxation; none of them: top1 emitted.
  assert _tree_root([0, 5], 0.0, z, Mars(), u0) == (2, 1, 1, 7)
  assert _tree_root([0, 4], 0.0, z, Mars(), u0)[1:] == (0, 0, 2)
  # Inactive node (z2/z1 = 0.5): the top-2 child is rejected, top1 is emitted.
  assert _tree_root([5, 0], 0.0, _close_top2(ratio=0.5), Mars(), u0)[1:] == (0, 0, 2)
  # T = 1, lossless base, children [top-2, top-1] with q one-hot: the base rule first, in
  # order with its residual: u = 0 accepts top-2 strictly (it is a lossless acceptance) ...
  assert _tree_root([5, 2], 1.0, z, Mars(), [0.5, 0.0, 0.0]) == (1, 1, 0, 7)
  # ... u close to 1 rejects both strictly; the fallback then prefers top-1 over top-2.
  assert _tree_root([5, 2], 1.0, z, Mars(), [0.5, 0.999, 0.999]) == (2, 1, 1, 7)
  assert _tree_root([2, 5], 1.0, z, Mars(), [0.5, 0.999, 0.999]) == (1, 1, 1, 7)
  # The strict ablation also tries top-1 before relaxing (top-2 needs the fallback).
  abl = Mars(sampled_mode="strict_ablation")
  assert _tree_root([5, 2], 1.0, z, abl, [0.5, 0.0, 0.0]) == (2, 1, 0, 7)
  assert _tree_root([0, 5], 1.0, z, abl, [0.5, 0.0, 0.0]) == (2, 1, 1, 7)
  # Other lossy rules keep the sequential order: typical with eps small accepts both children,
  # so the first one (top-2) is taken.
  assert _tree_root([5, 2], 1.0, z, Typical(eps=0.01), u0)[0] == 1


def test_mars_tree_fallback_descends_and_continues():
  """After a relaxed acceptance the driver continues below the relaxed child: root children
  [top-3 (node 1), top-2 (node 2)], node 3 = child of node 2 drafting node 2's argmax 7."""
  z = _close_top2(ratio=0.95)
  zz = jnp.stack([z, jnp.zeros((V,)).at[7].set(5.0), jnp.zeros((V,)).at[7].set(5.0),
                  jnp.zeros((V,)).at[1].set(5.0)])
  x = jnp.asarray([0, 0, 5, 7], jnp.int32)
  res = jax.jit(helpers.verify_tree, static_argnums=0)(
      Mars(), zz, _target(zz, 0.0), jax.nn.one_hot(x, V), x, jnp.asarray([0, 0, 0, 2]),
      jnp.full((4,), 0.5), jax.random.PRNGKey(0))
  assert int(res.num_accepted) == 2 and res.path[:2].tolist() == [2, 3]
  assert int(res.num_relaxed) == 1 and int(res.token) == 1


def test_mars_topk_analysis_hand_cases():
  """The exact analysis uses the same strict-before-relaxed steps (T = 0, explicit candidates)."""
  from specjax.analysis.induced import induced_parts
  z = _close_top2(ratio=0.95)
  p = _target(z, 0.0)
  q = jnp.full((V,), 1.0 / V)

  def parts(cands, rule=Mars(), zz=z, pp=p):
    return induced_parts(rule, zz, pp, q, draft="topk", candidates=jnp.asarray(cands))

  one = lambda i: np.eye(V)[i]
  r = parts([5, 2])  # top-2 before top-1: top-1 is emitted, strictly
  np.testing.assert_allclose(np.asarray(r.accepted), one(2), atol=1e-7)
  assert float(r.relaxed_rate) == 0.0
  r = parts([0, 5])  # no top-1: top-2 by relaxation
  np.testing.assert_allclose(np.asarray(r.accepted), one(5), atol=1e-7)
  assert float(r.relaxed_rate) == pytest.approx(1.0)
  r = parts([0, 4])  # nothing relaxable: the correction emits top1
  np.testing.assert_allclose(np.asarray(r.corrected), one(2), atol=1e-7)
  zi = _close_top2(ratio=0.5)
  r = parts([5, 0], zz=zi, pp=_target(zi, 0.0))  # inactive
  np.testing.assert_allclose(np.asarray(r.dist), one(2), atol=1e-7)


def test_mars_difference_margin_and_adaptive_hook():
  z = _close_top2(z1=3.0, ratio=0.95)  # z1 - z2 = 0.15
  p = _target(z, 0.0)
  assert bool(Mars(margin="difference", delta=0.2).init(z, p).active)
  assert not bool(Mars(margin="difference", delta=0.1).init(z, p).active)
  # Built-in entropy hook: a flat raw distribution keeps theta, a peaked one switches off.
  flat = jnp.full((V,), 1.0).at[2].set(1.01)
  assert bool(Mars(theta=0.9, adaptive="entropy").init(flat, _target(flat, 0.0)).active)
  peaked = _close_top2(z1=40.0, ratio=0.95)
  st = Mars(theta=0.9, adaptive="entropy").init(peaked, _target(peaked, 0.0))
  assert float(st.margin) == pytest.approx(0.95) and not bool(st.active)

  @verifiers.register_threshold_hook("_test_halve_theta")
  def _halve(threshold, margin, z, p):
    return 0.5 * threshold

  z8 = _close_top2(ratio=0.8)
  assert not bool(Mars(theta=0.9).init(z8, p).active)
  assert bool(Mars(theta=0.9, adaptive="_test_halve_theta").init(z8, p).active)
  hash(Mars(adaptive="_test_halve_theta"))  # stays hashable (static under jit)


# --- CoS: pi formed once per node from the drafter's full distribution (docs/spec.md §3) ---


@pytest.mark.parametrize("rule", [CoS(lam=0.3), CoSContrastive(mu=0.7)], ids=lambda r: r.name)
def test_cos_tree_node_emits_pi_with_onehot_candidates(rule):
  """Root with deterministic children [c1, c2] (q = one-hot) and the drafter's node distribution
  q_node: pi = combine(p, q_node) is formed once, then verified losslessly, by hand:
  u_1 < pi(c1) accepts c1; else u_2 < pi(c2) / (1 - pi(c1)) accepts c2; else the emitted law is
  pi with c1, c2 zeroed and renormalised.  The old per-sibling re-mix with onehot(x)
  (``lam p + (1 - lam) onehot(x)``: c1 accepted w.p. lam p(c1) + 1 - lam) is caught by u_1."""
  z, p, q_node = _random_ctx(3)
  pi = np.asarray(rule.combine(p, q_node), np.float64)
  c1, c2 = 4, 1
  zz, pp = jnp.stack([z] * 3), jnp.stack([p] * 3)
  x = jnp.asarray([0, c1, c2], jnp.int32)
  qq = jax.nn.one_hot(x, V)
  qn = jnp.stack([q_node, jnp.zeros(V), jnp.zeros(V)])  # leaves: rows never read
  tree = jax.jit(helpers.verify_tree, static_argnums=0)

  def run(u1, u2):
    return tree(rule, zz, pp, qq, x, jnp.zeros(3, jnp.int32), jnp.asarray([0.0, u1, u2]),
                jax.random.PRNGKey(0), None, qn)

  eps = 1e-4
  assert int(run(pi[c1] - eps, 0.999).path[0]) == 1
  a2 = pi[c2] / (1 - pi[c1])
  res = run(pi[c1] + eps, a2 - eps)
  assert int(res.num_accepted) == 1 and int(res.path[0]) == 2
  res = run(pi[c1] + eps, a2 + eps)
  assert int(res.num_accepted) == 0
  expect = pi.copy()
  expect[[c1, c2]] = 0
  np.testing.assert_allclose(np.asarray(res.emit_probs), expect / expect.sum(), atol=1e-6)
  # An accepted leaf emits the bonus, the target's p (no drafter distribution there).
  res = run(pi[c1] - eps, 0.5)
  np.testing.assert_allclose(np.asarray(res.emit_probs), np.asarray(p), atol=1e-6)
  # The tree driver refuses to run CoS without the node distribution.
  with pytest.raises(ValueError, match=rf"{type(rule).__name__}.*{rule.name}.*q_node"):
    helpers.verify_tree(rule, zz, pp, qq, x, jnp.zeros(3, jnp.int32), jnp.zeros(3),
                        jax.random.PRNGKey(0))


def test_cos_greedy_chain_uses_the_node_distribution():
  """A greedy draft x (q = one-hot) verified by CoS with q_node: the acceptance probability is
  pi(x) = lam p(x) + (1 - lam) q_node(x), not lam p(x) + 1 - lam (the one-hot re-mix)."""
  z, p, q_node = _random_ctx(4)
  x = jnp.argmax(q_node)[None].astype(jnp.int32)
  rule = CoS(lam=0.3)
  pi_x = 0.3 * float(p[x[0]]) + 0.7 * float(q_node[x[0]])
  chain = jax.jit(helpers.verify_chain, static_argnums=0)
  zz, pp, q1 = jnp.stack([z, z]), jnp.stack([p, p]), jax.nn.one_hot(x, V)
  for u, n in ((pi_x - 1e-4, 1), (pi_x + 1e-4, 0)):
    res = chain(rule, zz, pp, q1, x, jnp.asarray([u]), jax.random.PRNGKey(0), None, q_node[None])
    assert int(res.num_accepted) == n
  assert pi_x < 0.3 * float(p[x[0]]) + 0.7 - 0.05  # the re-mix would accept far more often


def test_drafter_without_node_distribution_is_refused_for_cos():
  """validate_pair: CoS needs the drafter's node distribution for one-hot (tree / greedy)
  drafts; a drafter that cannot supply it gets a ValueError naming drafter and rule.  A
  sampled chain drafter's q is its node distribution, so it is accepted."""
  import dataclasses as dc
  from specjax.decoding.drafters import LMDrafter, LMTreeDrafter
  from specjax.decoding.speculative import validate_pair
  from tests.helpers import tiny_pair
  target, _, draft, _ = tiny_pair(vocab=16)

  @dc.dataclass(frozen=True)
  class BlindTreeDrafter(LMTreeDrafter):
    supplies_node_dist = False

  @dc.dataclass(frozen=True)
  class BlindChainDrafter(LMDrafter):
    supplies_node_dist = False

  greedy, sampled = sampling.SamplingConfig(temperature=0.0), sampling.SamplingConfig()
  for d in (BlindTreeDrafter(draft, ((0,), (0, 0)), sampled),
            BlindChainDrafter(2, greedy, draft)):
    for rule in (CoS(), CoSContrastive(), Mars(base="cos")):
      with pytest.raises(ValueError, match=rf"{type(rule).__name__}.*{type(d).__name__}"):
        validate_pair(target, d, rule)
    validate_pair(target, d, Lossless())
  validate_pair(target, BlindChainDrafter(2, sampled, draft), CoS())
  validate_pair(target, LMTreeDrafter(draft, ((0,), (0, 0)), sampled), CoS())


# --- hyperparameters and the registry -----------------------------------------------------


@pytest.mark.parametrize("name,kwargs,fragment", [
    ("mars", dict(theta=0.0), "theta=0.0"),
    ("mars", dict(theta=-1.0), "theta=-1.0"),
    ("mars", dict(theta=float("nan")), "theta=nan"),
    ("mars", dict(theta="big"), "theta='big'"),
    ("mars", dict(delta=-0.5), "delta=-0.5"),
    ("mars", dict(margin="log"), "margin='log'"),
    ("mars", dict(adaptive="nope"), "adaptive='nope'"),
    ("mars", dict(base="nope"), "base='nope'"),
    ("mars", dict(base=3), "base=3"),
    ("mars", dict(base="mars"), "base='mars'"),
    ("spec_cascade", dict(p_base=1.5), "p_base=1.5"),
    ("spec_cascade", dict(gate="medium"), "gate='medium'"),
    ("typical", dict(eps=0.0), "eps=0.0"),
    ("typical", dict(eps=1.0), "eps=1.0"),
    ("typical", dict(delta=0.0), "delta=0.0"),
    ("cos", dict(lam=1.5), "lam=1.5"),
    ("cos", dict(lam=-0.1), "lam=-0.1"),
    ("cos_contrastive", dict(mu=-1.0), "mu=-1.0"),
    ("cos_contrastive", dict(q_floor=0.0), "q_floor=0.0"),
    ("lenience", dict(l=0.0), "l=0.0"),
    ("lenience", dict(l=1.5), "l=1.5"),
])
def test_bad_hyperparameters_raise(name, kwargs, fragment):
  with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(".", r"\.")):
    verifiers.get(name, **kwargs)


def test_range_errors_state_the_allowed_range():
  with pytest.raises(ValueError, match=r"theta=0.*\(0\.0, inf\)"):
    Mars(theta=0)
  with pytest.raises(ValueError, match=r"l=2.*\(0\.0, 1\.0\]"):
    Lenience(l=2)


def test_registry():
  for name in ("mars", "spec_cascade", "typical", "cos", "cos_contrastive", "lenience"):
    assert name in verifiers.available()
    rule = verifiers.get(name)
    assert hash(rule) == hash(verifiers.get(name)) and rule == verifiers.get(name)
  assert verifiers.get("mars", theta=0.9) == Mars(theta=0.9)
  assert verifiers.get("MARS", theta=0.8).theta == 0.8
  assert isinstance(verifiers.get("mars", base="typical").base_rule, Typical)
  with pytest.raises(ValueError, match="unknown verifier"):
    verifiers.get("marz")
  with pytest.raises(ValueError, match="no hyperparameter"):
    verifiers.get("mars", tehta=0.9)


def test_one_registry_for_rules_and_threshold_hooks():
  """Rule names and MARS threshold hooks live in verifiers/registry.py; a name is
  never silently re-bound to something else."""
  from specjax.verifiers import mars, registry
  assert verifiers.register is registry.register
  assert verifiers.register_threshold_hook is registry.register_threshold_hook
  assert registry.threshold_hook("entropy") is mars.entropy_threshold
  assert "entropy" in verifiers.threshold_hooks()
  with pytest.raises(ValueError, match="verifier name 'mars' is already registered"):
    verifiers.register("mars")(Lenience)
  with pytest.raises(ValueError, match="threshold hook 'entropy' is already registered"):
    verifiers.register_threshold_hook("entropy")(lambda threshold, margin, z, p: threshold)
  verifiers.register("mars")(Mars)  # the same object again: a no-op
  assert verifiers.get("mars") == Mars()
  assert registry.default_rule("lossless") is registry.default_rule("lossless")


# --- truncation helpers and matched baselines -----------------------------------------------


def test_allowed_sets_and_truncate():
  p = jnp.asarray([0.5, 0.25, 0.15, 0.1, 0.0])
  np.testing.assert_array_equal(np.asarray(verifiers.allowed_set_min_p(p, 0.3)),
                                [True, True, True, False, False])
  h = -sum(v * math.log(v) for v in (0.5, 0.25, 0.15, 0.1))
  thr = min(0.2, math.sqrt(0.2) * math.exp(-h))
  np.testing.assert_array_equal(np.asarray(verifiers.allowed_set_eta(p, 0.2)),
                                np.asarray(p) >= thr)
  np.testing.assert_allclose(np.asarray(verifiers.truncate(p, p >= 0.25)),
                             [2 / 3, 1 / 3, 0, 0, 0], rtol=1e-6)
  # Empty allowed mass: p returned unchanged; batched [..., V] works.
  pp = jnp.stack([p, p])
  out = verifiers.truncate(pp, jnp.zeros_like(pp, bool).at[0, 0].set(True))
  np.testing.assert_allclose(np.asarray(out), np.stack([np.eye(5)[0], np.asarray(p)]))


def test_eta_threshold_above_max_p_keeps_the_argmax():
  """docs/spec.md §3: A(p) always holds argmax p.  p = [0.4, 0.35, 0.25]: H = 1.0805 nats, so with
  eps = 0.5, delta = 5 the threshold is min(0.5, 5 e^-H = 1.70) = 0.5 > max p = 0.4 -- the
  bare set {v : p(v) >= 0.5} would be empty (the broken variant); A = {0}.  Typical then
  accepts only token 0 and emits onehot(0); the induced law is onehot(0)."""
  p = jnp.asarray([0.4, 0.35, 0.25])
  z = jnp.log(p)
  h = -sum(v * math.log(v) for v in (0.4, 0.35, 0.25))
  assert min(0.5, 5 * math.exp(-h)) == 0.5 and not bool(jnp.any(p >= 0.5))
  np.testing.assert_array_equal(np.asarray(verifiers.allowed_set_eta(p, 0.5, 5.0)),
                                [True, False, False])
  rule = Typical(eps=0.5, delta=5.0)
  st = rule.init(z, p)
  q = jnp.full((3,), 1 / 3)
  assert [float(rule.accept_prob(st, q, x)) for x in range(3)] == [1.0, 0.0, 0.0]
  np.testing.assert_allclose(np.asarray(rule.correction(rule.on_reject(st, q, 1))), [1, 0, 0])
  from specjax.analysis.induced import induced_distribution as exact
  np.testing.assert_allclose(np.asarray(exact(rule, z, p, q)), [1, 0, 0], atol=1e-7)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_matched_baseline_produces_p_A(seed):
  z, _, _ = _random_ctx(seed, v=16)
  base_cfg = sampling.SamplingConfig(temperature=0.7, top_k=12)
  p = sampling.probs_from_logits(z, base_cfg)
  for rule in (SpecCascade(p_base=0.2), Typical(eps=0.05), Mars(base=SpecCascade(p_base=0.4))):
    cfg, ver = verifiers.matched_baseline(rule, base_cfg)
    assert isinstance(ver, Lossless) and cfg.temperature == 0.7 and cfg.top_k == 12
    trunc = rule.base_rule if isinstance(rule, Mars) else rule
    expected = verifiers.truncate(p, trunc.allowed_set(p))
    np.testing.assert_allclose(np.asarray(sampling.probs_from_logits(z, cfg)),
                               np.asarray(expected), atol=1e-6)
    # ... and it is the rule's bonus distribution (correction with no candidate).
    np.testing.assert_allclose(np.asarray(trunc.correction(trunc.init(z, p))),
                               np.asarray(expected), atol=1e-6)
  assert verifiers.matched_baseline(SpecCascade(p_base=0.2)).sampling.min_p == 0.2
  assert verifiers.matched_baseline(Typical(eps=0.09, delta=0.3)).sampling.eta == 0.09
  for rule in (CoS(), Lenience(), Mars(), Lossless(), Greedy()):
    cfg, ver = verifiers.matched_baseline(rule, base_cfg)
    assert cfg == base_cfg and isinstance(ver, Lossless)
  with pytest.raises(ValueError, match="delta=0.5"):
    verifiers.matched_baseline(Typical(eps=0.09, delta=0.5))
  with pytest.raises(ValueError, match="min_p"):
    verifiers.matched_baseline(SpecCascade(), sampling.SamplingConfig(min_p=0.1))


# --- closed forms (docs/spec.md §6) ----------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_induced_closed_forms(seed):
  z, p, q = _random_ctx(seed)
  ind = functools.partial(induced_distribution, z=z, p=p, q=q)
  close = functools.partial(np.testing.assert_allclose, atol=2e-6)
  close(ind(Lossless()), p)
  close(ind(CoS(lam=0.3)), 0.3 * p + 0.7 * q)
  w = p / jnp.maximum(q, 1e-4) ** 0.7
  close(ind(CoSContrastive(mu=0.7)), w / w.sum())
  l = 0.4
  m = jnp.minimum(q, p / l)
  close(ind(Lenience(l=l)), m + (1 - m.sum()) * verifiers.residual(p, q))
  for rule in (SpecCascade(p_base=0.3), Typical(eps=0.2)):
    a = rule.allowed_set(p)
    close(ind(rule), jnp.where(a, q, 0) + (1 - jnp.sum(jnp.where(a, q, 0)))
          * verifiers.truncate(p, a))
  # MARS relax-only at T > 0 (mars.py): p + 1_T (q - p)^+ - (sum_T (q - p)^+) norm((p - q)^+).
  zm = _close_top2(ratio=0.95)
  pm = _target(zm, 1.0)
  top = jnp.zeros((V,), bool).at[jnp.asarray([2, 5])].set(True)
  over = jnp.where(top, jnp.maximum(q - pm, 0.0), 0.0)
  close(induced_distribution(Mars(), zm, pm, q),
        pm + over - over.sum() * verifiers.residual(pm, q))
  # The strict ablation (earlier form): q on the top-2, the rest of the mass from p.
  qt = jnp.sum(jnp.where(top, q, 0))
  close(induced_distribution(Mars(sampled_mode="strict_ablation"), zm, pm, q),
        jnp.where(top, q, 0) + (1 - qt) * pm)


# --- Monte Carlo: the chain driver (K = 1) against the exact enumeration ---------------------

N_MC = 100_000
# TV(empirical, P) over V outcomes: E[TV] <= 0.5 * sum_y sqrt(P(y)(1 - P(y)) / N) <=
# 0.5 * sqrt(V / N) (Cauchy-Schwarz), and TV changes by at most 1/N when one sample changes,
# so by McDiarmid P(TV > E[TV] + t) <= exp(-2 N t^2); t = sqrt(ln(1e9) / (2N)) makes a
# false failure a 1e-9 event.  V = 8, N = 1e5: tolerance ~0.0147.
TV_TOL = 0.5 * math.sqrt(V / N_MC) + math.sqrt(math.log(1e9) / (2 * N_MC))


_MC_CASES = ([(name, None, 1.0) for name in verifiers.available()] + [
    ("mars", dict(theta=0.97), 1.0),            # relaxation inactive -> the base rule
    ("mars", dict(sampled_mode="strict_ablation"), 1.0),
    ("mars", None, 0.0),                         # greedy form (Algorithm 1), p one-hot
    ("mars", dict(base="cos"), 0.0),             # greedy form with a non-argmax base
    ("spec_cascade", dict(p_base=0.3, gate="soft"), 1.0),
    ("typical", dict(eps=0.2, gate="soft"), 1.0),
])


@functools.partial(jax.jit, static_argnums=0)
def _mc_exact_and_empirical(rules, z, ps, q, key):
  """For each rule r (target ps[r]): the exact induced distribution [R, V] and the frequencies
  [R, V] of the first emitted token of a K = 1 chain (``helpers.verify_chain``) over N_MC
  runs (the same draws x ~ q, u and emission keys for every rule).  One compilation for all cases."""
  kx, ku, ke = jax.random.split(key, 3)
  xs = jax.random.categorical(kx, jnp.log(q), shape=(N_MC,)).astype(jnp.int32)
  us = jax.random.uniform(ku, (N_MC,))
  keys = jax.random.split(ke, N_MC)
  exact, emp = [], []
  for rule, p in zip(rules, ps):
    zz, pp = jnp.stack([z, z]), jnp.stack([p, p])

    def first_token(x, u, k, rule=rule, zz=zz, pp=pp):
      res = helpers.verify_chain(rule, zz, pp, q[None], x[None], u[None], k)
      return jnp.where(res.num_accepted == 1, x, res.token)

    first = jax.vmap(first_token)(xs, us, keys)
    emp.append(jnp.bincount(first, length=z.shape[-1]) / N_MC)
    exact.append(induced_distribution(rule, z, p, q, table=_table_impl))
  return jnp.stack(exact), jnp.stack(emp)


@functools.cache
def _mc_results():
  rules = tuple(verifiers.get(name, **(kw or {})) for name, kw, _ in _MC_CASES)
  z = _close_top2(ratio=0.95, seed=3)  # MARS active at theta = 0.9, not at 0.97
  ps = jnp.stack([_target(z, t) for _, _, t in _MC_CASES])
  # q over-weights top-2 (token 5): relax-only MARS differs from lossless only where
  # q(t) > p(t) on the top-2 (closed form in mars.py).
  q = jax.nn.softmax(0.7 * jax.random.normal(jax.random.PRNGKey(11), (V,)) +
                     1.5 * jax.nn.one_hot(5, V))
  exact, emp = _mc_exact_and_empirical(rules, z, ps, q, jax.random.PRNGKey(2026))
  return rules, np.asarray(exact), np.asarray(emp)


@pytest.mark.parametrize("case", range(len(_MC_CASES)),
                         ids=[f"{n}-{kw}-T{t}" for n, kw, t in _MC_CASES])
def test_monte_carlo_matches_induced_distribution(case):
  rules, exact, emp = _mc_results()
  np.testing.assert_allclose(exact[case].sum(), 1.0, atol=1e-5)
  assert exact[case].min() >= -1e-7
  tv = 0.5 * np.abs(emp[case] - exact[case]).sum()
  assert tv < TV_TOL, (rules[case], tv, exact[case], emp[case])


def test_monte_carlo_cases_are_distinct():
  """The MC cases exercise genuinely different output distributions (no vacuous passes)."""
  _, exact, _ = _mc_results()
  lossless = exact[[n for n, _, _ in _MC_CASES].index("lossless")]
  mars = exact[[n for n, _, _ in _MC_CASES].index("mars")]
  ablation = exact[[kw for _, kw, _ in _MC_CASES].index(dict(sampled_mode="strict_ablation"))]
  assert 0.5 * np.abs(mars - lossless).sum() > 0.05
  assert 0.5 * np.abs(mars - ablation).sum() > 0.05
