"""specjax.analysis: the generic enumerator against closed forms (docs/spec.md §6), the drivers'
empirical output, chunking, and the propositions on synthetic families."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.analysis import divergences as dv
from specjax.analysis import propositions as props
from specjax.analysis.induced import (bonus_distribution, induced_distribution, induced_parts,
                                      induced_two_tokens)
from specjax.distributions import residual
from specjax.verifiers import collaborative, mars, truncation  # noqa: F401  (register)
from tests import helpers

B, V = 6, 48
ATOL = 1e-6


def _dirichlet(seed, batch, vocab, concentration):
  """(z, p) with p ~ Dirichlet (numpy: no per-shape compile of jax's gamma sampler)."""
  p = np.random.default_rng(seed).dirichlet(np.full(vocab, concentration), size=batch)
  p = np.maximum(p, 1e-30)
  p = jnp.asarray(p / p.sum(-1, keepdims=True), jnp.float32)
  return jnp.log(p), p


def _rule(name, **kw):
  """A registered rule; a renamed rule fails here (it used to skip silently)."""
  return verifiers.get(name, **kw)


@pytest.fixture(scope="module")
def ctx():
  z, p = _dirichlet(0, B, V, 0.3)
  _, q = _dirichlet(1, B, V, 0.3)
  return z, p, q


def _close(a, b, atol=ATOL):
  np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=atol, rtol=0)


# --- closed forms ---------------------------------------------------------------------


@pytest.mark.parametrize("draft,top_k", [("sampled", 1), ("topk", 1), ("topk", 4)])
def test_lossless_reproduces_p(ctx, draft, top_k):
  z, p, q = ctx
  _close(induced_distribution(verifiers.get("lossless"), z, p, q, draft=draft, top_k=top_k), p)


def test_greedy_is_onehot_argmax(ctx):
  z, p, q = ctx
  onehot = jax.nn.one_hot(jnp.argmax(z, -1), V)
  for draft in ("sampled", "topk"):
    _close(induced_distribution(verifiers.get("greedy"), z, p, q, draft=draft, top_k=3), onehot)


def test_cos_is_mixture(ctx):
  z, p, q = ctx
  lam = 0.3
  _close(induced_distribution(_rule("cos", lam=lam), z, p, q), lam * p + (1 - lam) * q)


def test_cos_contrastive_is_pi(ctx):
  z, p, q = ctx
  rule = _rule("cos_contrastive", mu=0.7, q_floor=1e-3)
  logw = jnp.log(p) - 0.7 * jnp.log(jnp.maximum(q, 1e-3))
  _close(induced_distribution(rule, z, p, q), jax.nn.softmax(logw, -1))


@pytest.mark.parametrize("top_k", [1, 3])
def test_cos_deterministic_candidates_emit_pi(ctx, top_k):
  """CoS on EAGLE-style top-k candidates (q = one-hot) with the drafter's node distribution q:
  pi is formed once from q and the candidates are verified losslessly against it, so the
  node emits exactly pi (docs/spec.md §3).  The old one-hot re-mix puts far more mass on c_1."""
  z, p, q = ctx
  for rule, pi in ((_rule("cos", lam=0.3), 0.3 * p + 0.7 * q),
                   (_rule("cos_contrastive", mu=0.7, q_floor=1e-3),
                    jax.nn.softmax(jnp.log(p) - 0.7 * jnp.log(jnp.maximum(q, 1e-3)), -1))):
    parts = induced_parts(rule, z, p, q, draft="topk", top_k=top_k)
    _close(parts.dist, pi, atol=2e-6)
  c1 = jnp.argmax(q, -1)
  remix = 0.3 * jnp.take_along_axis(p, c1[:, None], -1)[:, 0] + 0.7  # P(accept c_1), re-mix
  pi_c1 = jnp.take_along_axis(0.3 * p + 0.7 * q, c1[:, None], -1)[:, 0]
  assert float(jnp.min(remix - pi_c1)) > 0.05


@pytest.mark.parametrize("l", [0.3, 1.0])
def test_lenience_closed_form(ctx, l):
  z, p, q = ctx
  m = jnp.minimum(q, p / l)
  expect = m + (1 - m.sum(-1, keepdims=True)) * residual(p, q)
  _close(induced_distribution(_rule("lenience", l=l), z, p, q), expect)


def _truncation_rules():
  return [("spec_cascade", dict(p_base=0.2)), ("typical", dict(eps=0.05))]


@pytest.mark.parametrize("name,kw", _truncation_rules())
def test_truncation_sampled_closed_form(ctx, name, kw):
  """Hard gate: q 1_A + (1 - q(A)) p_A (docs/spec.md §3); soft gate adds q p/thr outside A."""
  z, p, q = ctx
  hard = _rule(name, gate="hard", **kw)
  mask = dv.matched_allowed_set(hard, p)
  p_a = dv.truncate(p, mask)
  q_in = jnp.where(mask, q, 0.0)
  _close(induced_distribution(hard, z, p, q), q_in + (1 - q_in.sum(-1, keepdims=True)) * p_a)
  soft = _rule(name, gate="soft", **kw)
  thr = jax.vmap(soft.threshold)(p)[:, None]
  a_out = jnp.where(mask, 0.0, jnp.minimum(1.0, p / thr))
  acc = q_in + q * a_out
  rej = jnp.sum(jnp.where(mask, 0.0, q * (1 - a_out)), -1, keepdims=True)
  _close(induced_distribution(soft, z, p, q), acc + rej * p_a)


@pytest.mark.parametrize("name,kw", _truncation_rules())
def test_truncation_topk_closed_form(ctx, name, kw):
  """Hard gate, deterministic candidates: the first candidate in A is emitted, else p_A."""
  z, p, q = ctx
  rule = _rule(name, **kw)
  k = 3
  mask = np.asarray(dv.matched_allowed_set(rule, p))
  cands = np.asarray(jax.lax.top_k(q, k)[1])
  p_a = np.asarray(dv.truncate(p, mask))
  expect = np.zeros((B, V))
  for b in range(B):
    inside = [c for c in cands[b] if mask[b, c]]
    expect[b] = np.eye(V)[inside[0]] if inside else p_a[b]
  _close(induced_distribution(rule, z, p, q, draft="topk", top_k=k), expect)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_mars_sampled_closed_form(temperature):
  """Relax-only MARS at T > 0 (docs/spec.md §3; derivation in ``verifiers/mars.py``), T = top-2::

    P = p + 1_T (q - p)^+ - (sum_T (q - p)^+) norm((p - q)^+)   where relaxation is active,
    P = p                                                      elsewhere.

  The broken variant caught: the strict ablation's law ``q 1_T + (1 - q(T)) p`` differs."""
  z, _ = props.gaussian_logit_contexts(jax.random.PRNGKey(3), B, V)
  p = jax.nn.softmax(z / temperature, -1)
  q = jax.nn.softmax(z + jax.random.normal(jax.random.PRNGKey(4), z.shape), -1)
  rule = _rule("mars", theta=0.8)
  top2 = jax.lax.top_k(z, 2)[1]
  ratio = jnp.take_along_axis(z, top2, -1)
  active = (ratio[:, 1] / ratio[:, 0] > 0.8) & (ratio[:, 0] > 0)
  assert 0 < int(active.sum()) < B  # both branches exercised
  in2 = jnp.zeros_like(p).at[jnp.arange(B)[:, None], top2].set(1.0)
  over = in2 * jnp.maximum(q - p, 0.0)  # (q - p)^+ on the top-2
  relaxed = p + over - over.sum(-1, keepdims=True) * residual(p, q)
  expect = jnp.where(active[:, None], relaxed, p)
  parts = induced_parts(rule, z, p, q)
  _close(parts.dist, expect)
  assert float(jnp.abs(over.sum(-1) * active).max()) > 1e-2  # the relaxation moves mass here
  # Relaxed acceptances: q(x) (1 - min(1, p/q)) = (q - p)^+ on {top1, top2} where active.
  _close(parts.relaxed_rate, jnp.where(active, over.sum(-1), 0.0))
  ablation = induced_distribution(_rule("mars", theta=0.8, sampled_mode="strict_ablation"),
                                  z, p, q)
  qt = (q * in2).sum(-1, keepdims=True)
  _close(ablation, jnp.where(active[:, None], q * in2 + (1 - qt) * p, p))
  assert float(dv.tv(ablation, expect).max()) > 1e-2


# --- enumerator mechanics ---------------------------------------------------------------


def test_chunked_equals_unchunked(ctx):
  z, p, q = ctx
  rule = _rule("typical", eps=0.05)  # on_reject depends on x: V distinct corrections
  full = induced_parts(rule, z, p, q, chunk_size=None)
  for chunk, cb in [(7, None), (16, 4)]:
    got = induced_parts(rule, z, p, q, chunk_size=chunk, context_batch=cb)
    for a, b in zip(got, full):
      _close(a, b)


def test_sparse_draft_support(ctx):
  """A top-k-truncated drafter: skipping q = 0 (early exit or max_support) is exact."""
  z, p, q = ctx
  kth = jax.lax.top_k(q, 5)[0][:, -1:]
  qs = jnp.where(q >= kth, q, 0.0)
  qs = qs / qs.sum(-1, keepdims=True)
  rule = _rule("lenience", l=0.5)
  full = induced_distribution(rule, z, p, qs, chunk_size=None)
  _close(induced_distribution(rule, z, p, qs, chunk_size=2), full)
  _close(induced_distribution(rule, z, p, qs, max_support=5, chunk_size=2), full)
  # Left-out q mass is missing mass: max_support=3 on a 5-sparse q.
  top3 = jax.lax.top_k(qs, 3)[0].sum(-1)
  _close(induced_distribution(rule, z, p, qs, max_support=3).sum(-1), top3)


def test_explicit_candidates_match_topk(ctx):
  z, p, q = ctx
  rule = _rule("typical", eps=0.05)
  cands = jax.lax.top_k(q, 3)[1]
  _close(induced_distribution(rule, z, p, q, draft="topk", candidates=cands),
         induced_distribution(rule, z, p, q, draft="topk", top_k=3))


@pytest.mark.parametrize("name, kw", [("typical", dict(eps=0.05)), ("lossless", {}),
                                      ("mars", dict(theta=0.5)), ("cos", dict(lam=0.4)),
                                      ("spec_cascade", dict(p_base=0.3))])
def test_absent_candidates_are_skipped(ctx, name, kw):
  """-1 slots (a tree root with fewer children than others) change nothing: the law with
  padding anywhere equals the law of the present candidates alone. Broken variant caught
  for the truncation rules, whose law depends on the candidates: treating -1 as token 0
  changes it (lossless gives p whatever the candidates, so it cannot tell)."""
  z, p, q = ctx
  rule = _rule(name, **kw)
  cands = np.asarray(jax.lax.top_k(q, 3)[1])  # [B, 3]
  want = induced_distribution(rule, z, p, q, draft="topk", candidates=cands)
  pad = np.full((B, 5), -1, np.int32)
  pad[:, [0, 2, 4]] = cands  # absent before, between and after
  _close(induced_distribution(rule, z, p, q, draft="topk", candidates=pad), want)
  if name in ("typical", "spec_cascade"):
    as_token0 = np.where(pad < 0, 0, pad)
    wrong = induced_distribution(rule, z, p, q, draft="topk", candidates=as_token0)
    assert float(jnp.abs(wrong - want).sum(-1).max()) > 1e-3
  if name == "lossless":
    _close(want, p)


def test_single_context_and_validation(ctx):
  z, p, q = ctx
  rule = verifiers.get("lossless")
  _close(induced_distribution(rule, z[0], p[0], q[0]), p[0])
  with pytest.raises(ValueError, match="draft"):
    induced_distribution(rule, z, p, q, draft="beam")
  with pytest.raises(ValueError, match="chunk_size"):
    induced_distribution(rule, z, p, q, chunk_size=0)
  with pytest.raises(ValueError, match="shape"):
    induced_distribution(rule, z, p, q[:, :3])


@pytest.mark.slow
def test_matches_chain_and_tree_drivers():
  """The enumerator is the drivers' law: Monte Carlo through the chain and tree drivers."""
  v, n = 8, 20_000
  z, p = _dirichlet(2, 1, v, 0.7)
  _, q = _dirichlet(3, 1, v, 0.7)
  z, p, q = z[0], p[0], q[0]
  keys = jax.random.split(jax.random.PRNGKey(7), n)

  def chain_token(rule, key):
    kx, ku, ke = jax.random.split(key, 3)
    x = jax.random.categorical(kx, jnp.log(q))[None]
    zz, pp = jnp.stack([z, z]), jnp.stack([p, p])  # bonus row unused when K = 1 is rejected
    res = helpers.verify_chain(rule, zz, pp, q[None], x, jax.random.uniform(ku, (1,)), ke)
    return jnp.where(res.num_accepted > 0, x[0], res.token)

  def tree_token(rule, key):  # root with 3 deterministic children = top-3 of q
    ku, ke = jax.random.split(key)
    c = jax.lax.top_k(q, 3)[1]
    x = jnp.concatenate([jnp.zeros((1,), jnp.int32), c])
    qq = jax.nn.one_hot(x, v)
    res = helpers.verify_tree(rule, jnp.tile(z, (4, 1)), jnp.tile(p, (4, 1)), qq, x,
                           jnp.array([0, 0, 0, 0]), jax.random.uniform(ku, (4,)), ke)
    return jnp.where(res.num_accepted > 0, x[res.path[0]], res.token)

  for rule, fn, kw in ((_rule("lenience", l=0.4), chain_token, {}),
                       (_rule("typical", eps=0.1), chain_token, {}),
                       (_rule("typical", eps=0.1), tree_token, dict(draft="topk", top_k=3))):
    toks = jax.jit(jax.vmap(lambda k: fn(rule, k)))(keys)
    emp = jnp.bincount(toks, length=v) / n
    exact = induced_distribution(rule, z, p, q, **kw)
    assert float(dv.tv(emp, exact)) < 0.02, (rule, fn.__name__)


def test_two_tokens():
  v = 12
  z1, p1 = _dirichlet(4, 1, v, 0.5)
  _, q1 = _dirichlet(5, 1, v, 0.5)
  z2, p2 = _dirichlet(6, v, v, 0.5)
  _, q2 = _dirichlet(7, v, v, 0.5)
  z1, p1, q1 = z1[0], p1[0], q1[0]
  lossless = verifiers.get("lossless")
  for draft, k in (("sampled", 1), ("topk", 2)):
    j = induced_two_tokens(lossless, z1, p1, q1, z2, p2, q2, draft=draft, top_k=2,
                           draft_length=k)
    _close(j, dv.joint(p1, p2))
  rule = _rule("spec_cascade", p_base=0.3)
  first = induced_parts(rule, z1, p1, q1)
  second = induced_distribution(rule, z2, p2, q2)
  # K >= 2: the second token is always a verified draft.
  _close(induced_two_tokens(rule, z1, p1, q1, z2, p2, q2, draft_length=2),
         dv.joint(first.dist, second))
  # K = 1: after an accepted draft the second token is the bonus, p_A.
  expect = (first.accepted[:, None] * dv.truncate(p2, dv.matched_allowed_set(rule, p2)) +
            first.corrected[:, None] * second)
  _close(induced_two_tokens(rule, z1, p1, q1, z2, p2, q2, draft_length=1), expect)
  _close(bonus_distribution(rule, z2, p2), dv.matched_baseline_probs(rule, p2))


# --- divergences --------------------------------------------------------------------------


def test_divergences_basics():
  p = jnp.array([0.5, 0.5, 0.0])
  q = jnp.array([0.25, 0.25, 0.5])
  _close(dv.kl(p, q), np.log(2.0))
  assert np.isinf(float(dv.kl(q, p)))
  _close(dv.tv(p, q), 0.5)
  _close(dv.acceptance_rate(p, q), 0.5)
  _close(dv.entropy(p), np.log(2.0))
  for alpha in (0.0, 0.3, 0.999999, 1.0):
    geo = sum(alpha ** i for i in range(6))
    _close(dv.block_efficiency(alpha, 5), geo, atol=1e-5)
    _close(dv.block_efficiency(jnp.float32(alpha), jnp.float32(5)), geo, atol=1e-4)
  p2 = jnp.array([0.6, 0.3, 0.08, 0.02])
  _close(dv.min_p_baseline(p2, 0.2), jnp.array([2 / 3, 1 / 3, 0, 0]))
  assert dv.eta_baseline(p2, 0.05).shape == (4,)
  _close(dv.matched_baseline_probs(verifiers.get("lossless"), p2), p2)
  _close(dv.matched_baseline_probs(_rule("mars", base=_rule("spec_cascade", p_base=0.2)), p2),
         dv.min_p_baseline(p2, 0.2))
  with pytest.raises(ValueError, match="allowed set"):
    dv.matched_allowed_set(verifiers.get("lossless"), p2)


# --- propositions -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synth():
  z, p = _dirichlet(8, 32, 64, 0.2)
  _, q_ref = _dirichlet(9, 32, 64, 0.2)
  return z, p, q_ref


def test_synthetic_families():
  z, p = props.dirichlet_contexts(jax.random.PRNGKey(0), 3, 16, 0.5)
  assert p.shape == (3, 16) and bool(jnp.all(jnp.isfinite(z)))
  _close(p.sum(-1), 1.0)
  _close(props.interpolate(p, props.uniform_like(p), 1.0), 1 / 16)


TS = [1.0, 0.5, 0.2, 0.1, 0.01, 1e-3, 0.0]


@pytest.mark.parametrize("name,kw", [("spec_cascade", dict(p_base=0.1)),
                                     ("typical", dict(eps=0.09))])
def test_prop_sd_kl_vanishes(synth, name, kw):
  z, p, _ = synth
  curve = props.sd_kl_curve(_rule(name, **kw), z, p, props.uniform_like(p), TS)
  kl = np.asarray(curve.kl.mean(-1))
  assert kl[0] > 1e-2
  assert np.all(np.diff(kl) <= 1e-7), kl
  assert kl[-2] < 1e-5 and kl[-1] < 1e-6, kl


@pytest.mark.parametrize("name,kw", [("spec_cascade", dict(p_base=0.1)),
                                     ("typical", dict(eps=0.09, gate="soft"))])
def test_prop_eagle_kl_limit(synth, name, kw):
  z, p, q_ref = synth
  rule = _rule(name, **kw)
  limit = float(props.eagle_kl_limit(p, dv.matched_allowed_set(rule, p)).mean())
  assert limit > 0.05
  for q_ref_ in (props.uniform_like(p), q_ref):
    curve = props.eagle_kl_curve(rule, z, p, q_ref_, TS, top_k=3)
    kl = np.asarray(curve.kl.mean(-1))
    assert abs(kl[-2] - limit) < 1e-3 and abs(kl[-1] - limit) < 1e-3, (kl, limit)
  # The lossless rule has no such gap.
  curve = props.eagle_kl_curve(verifiers.get("lossless"), z, p, q_ref, TS, top_k=3, p_a=p)
  assert float(curve.kl.max()) < 1e-5


def test_prop_truncation_sweep(synth):
  _, p, q_ref = synth
  q = props.interpolate(p, q_ref, 0.5)
  for kind, values in (("min_p", [0.0, 0.05, 0.3, 0.9]), ("eta", [1e-4, 0.01, 0.1])):
    sw = props.truncation_sweep(p, q, kind, values, gamma=5)
    assert sw.alpha_paq.shape == (len(values), p.shape[0])
    assert np.all(np.isfinite(np.asarray(sw.delta_be_paq)))
    _close(sw.be_pq, dv.block_efficiency(sw.alpha_pq.mean(), 5))
    if kind == "min_p":  # p_base = 0 keeps everything: no change
      _close(sw.alpha_paq[0], sw.alpha_pq)
      _close(sw.alpha_gate[0], 1.0)
  with pytest.raises(ValueError, match="kind"):
    props.truncation_sweep(p, q, "top_p", [0.5])


def test_truncation_sweep_by_hand():
  """Values RESULTS.md relies on (alphas, block efficiencies, the sign of Delta BE),
  against a hand computation for one context.

  p = (.5, .3, .15, .05), q uniform over 4, min-p p_base = 0.5: A(p) = {p >= .25} =
  {0, 1}, p_A = (.625, .375, 0, 0); A(q) = all, q_A = q.  alpha(p, q) = .25 + .25 +
  .15 + .05 = .70; alpha(p_A, q) = alpha(p_A, q_A) = .5; q(A(p)) = .5.  Block
  efficiency at gamma = 5: (1 - a^6) / (1 - a) -> 2.941170 and 1.96875, so
  Delta BE = -0.972420 (truncation lowers it here).
  """
  p = jnp.asarray([[0.5, 0.3, 0.15, 0.05]])
  q = jnp.full((1, 4), 0.25)
  sw = props.truncation_sweep(p, q, "min_p", [0.5], gamma=5)
  _close(sw.alpha_pq, [0.70], atol=1e-6)
  _close(sw.alpha_paq, [[0.5]], atol=1e-6)
  _close(sw.alpha_paqa, [[0.5]], atol=1e-6)
  _close(sw.alpha_gate, [[0.5]], atol=1e-6)
  _close(sw.be_pq, (1 - 0.7 ** 6) / 0.3, atol=1e-5)
  _close(sw.be_paq, [1.96875], atol=1e-5)
  _close(sw.delta_be_paq, [1.96875 - (1 - 0.7 ** 6) / 0.3], atol=1e-5)
  assert float(sw.delta_be_paq[0]) < 0


def test_prop_mars_sweep():
  z, p = props.gaussian_logit_contexts(jax.random.PRNGKey(5), 32, 64)
  q = jax.nn.softmax(z + 1.5 * jax.random.normal(jax.random.PRNGKey(6), z.shape), -1)
  thetas = [1.0, 0.9, 0.8]
  sw = props.mars_sweep(z, p, q, thetas)
  kl = np.asarray(sw.kl.mean(-1))
  share = np.asarray(sw.reject_share)
  assert kl[0] < 1e-6 and share[0] == 0.0  # theta >= 1 with the guard: lossless
  assert np.all(np.diff(share) >= 0) and share[-1] > 0
  assert np.all(np.diff(np.asarray(sw.active.sum(-1))) >= 0)
  _close(sw.strict_reject, 1 - dv.acceptance_rate(p, q))
  # Fig. 1d: P(strict reject | active), not the share P(active | strict reject).
  act = np.asarray(sw.active[-1])
  rej = np.asarray(sw.strict_reject)
  np.testing.assert_allclose(float(sw.reject_given_active[-1]), rej[act].mean(), rtol=1e-5)
  np.testing.assert_allclose(float(sw.reject_share[-1]), rej[act].sum() / rej.sum(), rtol=1e-5)
  assert np.isnan(float(sw.reject_given_active[0]))  # theta = 1: nothing active
  assert float(sw.relaxed_rate[-1].sum()) > 0
  sw_t = props.mars_sweep(z, p, q, [0.9], draft="topk", top_k=2)
  assert sw_t.kl.shape == (1, 32)
