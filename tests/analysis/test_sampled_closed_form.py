"""The O(V) sampled-draft form of the induced distribution (``sampled_form="closed"``,
specjax.analysis.induced) against the V^2 enumeration, and the Lemma 1 / alignment sweep
(specjax.analysis.propositions) against brute force -- each with a broken variant that the
comparison catches."""

import dataclasses
import itertools

import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.analysis import divergences as dv
from specjax.analysis import propositions as props
from specjax.analysis.induced import (_sampled_parts_closed, induced_parts,
                                      rejection_invariant)

B, V = 5, 24


def _ctx(seed=0, batch=B, vocab=V, shift=3.0):
  """(z, p, q): LM-like logits (positive offset, so MARS relaxes somewhere) and a noisy q."""
  rng = np.random.default_rng(seed)
  z = shift + 2.0 * rng.standard_normal((batch, vocab))
  z[:, 1] = z[:, 0] * 0.95  # near-ties of the top two in some rows
  p = np.exp(z - z.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  zq = np.log(p) + rng.standard_normal((batch, vocab))
  q = np.exp(zq - zq.max(-1, keepdims=True))
  q /= q.sum(-1, keepdims=True)
  return (jnp.asarray(a, jnp.float32) for a in (z, p, q))


RULES = [
    ("lossless", {}), ("greedy", {}), ("lenience", {"l": 0.4}), ("cos", {"lam": 0.6}),
    ("spec_cascade", {"p_base": 0.3}), ("spec_cascade", {"p_base": 0.3, "gate": "soft"}),
    ("typical", {"eps": 0.09}), ("typical", {"eps": 0.2, "gate": "soft"}),
    ("mars", {"theta": 0.9}), ("mars", {"theta": 0.5, "guard": False}),
]


def _close(a, b, atol=2e-6):
  return all(np.allclose(np.asarray(x), np.asarray(y), atol=atol) for x, y in zip(a, b))


@pytest.mark.parametrize("name,kw", RULES)
def test_closed_equals_enumeration(name, kw):
  z, p, q = _ctx()
  if name == "greedy":
    p = jnp.asarray(np.eye(V)[np.argmax(np.asarray(z), -1)], jnp.float32)
  rule = verifiers.get(name, **kw)
  assert rejection_invariant(rule)
  full = induced_parts(rule, z, p, q, draft="sampled", chunk_size=None)
  fast = induced_parts(rule, z, p, q, draft="sampled", sampled_form="closed")
  assert _close(full, fast), name
  np.testing.assert_allclose(np.asarray(fast.dist).sum(-1), 1.0, atol=1e-5)


def test_closed_with_zeros_in_q_and_mars_base():
  z, p, q = _ctx(1)
  q = np.asarray(q).copy()
  q[:, V // 2:] = 0.0  # a top-k drafter: candidates with q = 0 are never drawn
  q = jnp.asarray(q / q.sum(-1, keepdims=True))
  rule = verifiers.get("mars", theta=0.8, base=verifiers.get("typical", eps=0.1))
  assert rejection_invariant(rule)
  full = induced_parts(rule, z, p, q, draft="sampled", chunk_size=7)
  fast = induced_parts(rule, z, p, q, draft="sampled", sampled_form="closed")
  assert _close(full, fast)


@dataclasses.dataclass(frozen=True)
class _ZeroingLossless(verifiers.Lossless):
  """A made-up rule whose correction depends on the rejected token (zeroes it)."""

  def on_reject(self, state, q, x):
    cur = state.p_cur.at[x].set(0.0)
    return dataclasses.replace(state, p_cur=cur / jnp.sum(cur))


def test_closed_form_refuses_and_would_be_wrong_for_x_dependent_rules():
  z, p, q = _ctx(2)
  rule = _ZeroingLossless()
  assert not rejection_invariant(rule)  # a subclass is never assumed invariant
  with pytest.raises(ValueError, match="rejected token"):
    induced_parts(rule, z, p, q, draft="sampled", sampled_form="closed")
  # The refusal matters: forced through, the O(V) form differs from the enumeration.
  full = induced_parts(rule, z, p, q, draft="sampled", chunk_size=None)
  forced = [_sampled_parts_closed(rule, *(a[i] for a in (z, p, q))) for i in range(B)]
  forced = tuple(jnp.stack([f[k] for f in forced]) for k in range(3))
  assert not _close(full, forced)


def _broken_closed(rule, z, p, q):
  """A wrong O(V) form: the correction taken before the rejection (``correction(init)``)."""
  s = rule.init(z, p)
  a = jnp.stack([rule.accept_prob(s, q, x) for x in range(V)])
  return q * a + (1.0 - jnp.sum(q * a)) * rule.correction(s)


def test_enumeration_catches_a_broken_closed_form():
  z, p, q = _ctx(3)
  rule = verifiers.get("lossless")
  full = induced_parts(rule, z, p, q, draft="sampled", chunk_size=None).dist
  broken = jnp.stack([_broken_closed(rule, z[i], p[i], q[i]) for i in range(B)])
  assert not np.allclose(np.asarray(full), np.asarray(broken), atol=1e-4)
  np.testing.assert_allclose(np.asarray(full), np.asarray(p), atol=2e-6)  # lossless -> p


# --- Lemma 1 / alignment sweep -----------------------------------------------------------


def _allowed_brute(kind, p, value):
  """Allowed set by hand (min-p / eta with delta = sqrt(eps), argmax always kept)."""
  if kind == "min_p":
    keep = p >= value * p.max()
  else:
    h = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0))
    keep = p >= min(value, np.sqrt(value) * np.exp(-h))
  keep[np.argmax(p)] = True
  return keep


def _brute_alignment(p, q_ref, kind, values, rhos, gamma, truncate_draft,
                     draft_set_from_target=False):
  """Loops: alpha of the truncated pair per context, mean, block efficiency.
  ``draft_set_from_target`` is a broken variant (q cut by A(p) instead of its own A(q))."""
  p, q_ref = np.asarray(p, np.float64), np.asarray(q_ref, np.float64)
  out = np.zeros((len(rhos), len(values)))
  base = np.zeros(len(rhos))
  for (j, rho), (i, v) in itertools.product(enumerate(rhos), enumerate(values)):
    a_tr, a_pq = [], []
    for b in range(p.shape[0]):
      pb, qb = p[b], rho * p[b] + (1 - rho) * q_ref[b]
      ka = _allowed_brute(kind, pb, v)
      pa = np.where(ka, pb, 0.0) / pb[ka].sum()
      if truncate_draft:
        kb = ka if draft_set_from_target else _allowed_brute(kind, qb, v)
        qa = np.where(kb, qb, 0.0) / qb[kb].sum()
      else:
        qa = qb
      a_tr.append(sum(min(x, y) for x, y in zip(pa, qa)))
      a_pq.append(sum(min(x, y) for x, y in zip(pb, qb)))
    be = lambda a: sum(a ** k for k in range(gamma + 1))
    out[j, i] = be(np.mean(a_tr)) - be(np.mean(a_pq))
    base[j] = np.mean(a_pq)
  return out, base


@pytest.mark.parametrize("kind,values", [("min_p", (0.1, 0.5, 0.9)), ("eta", (0.05, 0.2))])
@pytest.mark.parametrize("truncate_draft", [True, False])
def test_alignment_sweep_matches_brute_force(kind, values, truncate_draft):
  _, p, q = _ctx(4)
  rhos = (0.0, 0.5, 1.0)
  sw = props.alignment_sweep(p, q, kind, values, rhos, gamma=4, truncate_draft=truncate_draft)
  want, alpha = _brute_alignment(p, q, kind, values, rhos, 4, truncate_draft)
  np.testing.assert_allclose(np.asarray(sw.delta_be), want, atol=2e-4)
  np.testing.assert_allclose(np.asarray(sw.alpha_pq), alpha, atol=1e-5)
  # Lemma 1's split is an identity: alpha_trunc - alpha = gain - loss, both terms >= 0.
  np.testing.assert_allclose(np.asarray(sw.alpha_trunc - sw.alpha_pq[:, None]),
                             np.asarray(sw.gain - sw.loss), atol=1e-5)
  assert (np.asarray(sw.gain) >= -1e-6).all() and (np.asarray(sw.loss) >= -1e-6).all()
  if truncate_draft:  # rho = 1 (q = p): both truncate to p_A, alpha = 1 >= alpha(p, p) = 1
    np.testing.assert_allclose(np.asarray(sw.delta_be)[-1], 0.0, atol=1e-4)
    # The brute force tells the draft's own allowed set from the target's (a plausible bug).
    broken, _ = _brute_alignment(p, q, kind, values, rhos, 4, True, draft_set_from_target=True)
    assert not np.allclose(np.asarray(sw.delta_be)[:-1], broken[:-1], atol=1e-3)
  else:  # q = p untruncated: alpha(p_A, p) = Z_A <= 1, so truncation can only lose
    assert (np.asarray(sw.delta_be)[-1] <= 1e-5).all()


def test_lemma1_terms_by_hand():
  p = jnp.asarray([[0.5, 0.3, 0.15, 0.05]])
  q = jnp.asarray([[0.2, 0.2, 0.2, 0.4]])
  mask = jnp.asarray([[True, True, False, False]])
  t = props.lemma1_terms(p, q, mask)  # untruncated draft
  # p_A = (0.625, 0.375, 0, 0); alpha(p_A, q) = 0.2 + 0.2 = 0.4; alpha(p, q) = 0.6
  np.testing.assert_allclose(float(t.alpha[0]), 0.6, atol=1e-6)
  np.testing.assert_allclose(float(t.alpha_trunc[0]), 0.4, atol=1e-6)
  np.testing.assert_allclose(float(t.gain[0]), 0.0, atol=1e-6)  # min(p_A, q) = q = min(p, q)
  np.testing.assert_allclose(float(t.loss[0]), 0.15 + 0.05, atol=1e-6)
  np.testing.assert_allclose(float(dv.acceptance_rate(dv.truncate(p, mask), q)[0]), 0.4,
                             atol=1e-6)
