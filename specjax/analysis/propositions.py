"""The lossy-verification propositions of docs/spec.md §6 as functions.

"Revisiting Lossy Verification in Speculative Decoding" (Wang et al. 2026),
Lemma 1, Lemma 2 and Proposition 1, and the MARS margin analysis (Song et al.
2026), reproduced numerically from the exact induced distributions of
:mod:`specjax.analysis.induced`.

Every function takes arrays of contexts -- raw logits ``z [B, V]``, target
distributions ``p [B, V]`` and draft distributions ``q [B, V]`` (or a
reference draft ``q_ref`` that is interpolated towards p) -- so the same code
runs on the synthetic families below and on contexts logged from real models.
Per-context results are returned with the context axis last; the paper's
expectations over contexts are means over that axis.

(a) Standard SD + truncation rule: ``KL(P_SD || p_A) -> 0`` as ``q -> p``
    (:func:`sd_kl_curve`).
(b) EAGLE-style deterministic drafts: ``KL(P_EAGLE || p_A) ->
    E[log(Z_A(p) / p(argmax p))] > 0`` (:func:`eagle_kl_curve`,
    :func:`eagle_kl_limit`).
(c) Truncation changes the acceptance rate and block efficiency: alpha for
    ``(p, q)``, ``(p_A, q)``, ``(p_A, q_A)`` over eta / p_base sweeps
    (:func:`truncation_sweep`).
(c') Lemma 1 against the alignment ratio (Fig. 4): ``alpha(p_A, q_B) - alpha(p, q) =
    gain - loss`` and the net block-efficiency change as the draft moves towards
    the target (:func:`lemma1_terms`, :func:`alignment_sweep`).
(d) MARS: ``KL(P_MARS || p)`` as theta varies, the strict rejection rate in
    the relaxation region ``P(strict reject | r > theta)`` (the paper's Fig. 1d)
    and the share of strict rejections that fall there (:func:`mars_sweep`).

Drift towards the target is modelled by the mixture
``q_t = (1 - t) p + t q_ref`` (:func:`interpolate`): ``q_ref`` uniform gives
the synthetic family ``(1 - t) p + t u``; ``q_ref`` a real drafter's
distribution gives the path from that drafter (t = 1) to a perfect one (t = 0).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp

from specjax.analysis import divergences as dv
from specjax.analysis.induced import induced_parts
from specjax.verifiers.base import NodeRule
from specjax.verifiers.lossless import Lossless

TRUNCATION_KINDS = ("min_p", "eta")


# --- synthetic context families -----------------------------------------------------


def dirichlet_contexts(key: jax.Array, batch: int, vocab: int, concentration: float = 0.5
                       ) -> tuple[jax.Array, jax.Array]:
  """Contexts with ``p ~ Dirichlet(concentration * 1_V)``.

  Sampled as ``z = log Gamma(concentration)`` (``jax.random.loggamma``), so
  the logits are finite even when p has entries below float32's range.

  Returns:
    (z [batch, vocab] logits, p [batch, vocab] = softmax(z)).
  """
  z = jax.random.loggamma(key, concentration, (batch, vocab), jnp.float32)
  return z, jax.nn.softmax(z, axis=-1)


def gaussian_logit_contexts(key: jax.Array, batch: int, vocab: int, *, scale: float = 2.0,
                            shift: float = 5.0, temperature: float = 1.0
                            ) -> tuple[jax.Array, jax.Array]:
  """Contexts with raw logits ``z = shift + scale * N(0, 1)`` and ``p = softmax(z / T)``.

  Unlike :func:`dirichlet_contexts` the logits have an LM-like positive
  offset, which the MARS ratio ``z2 / z1`` depends on (it is not shift
  invariant).

  Returns:
    (z [batch, vocab], p [batch, vocab]).
  """
  z = shift + scale * jax.random.normal(key, (batch, vocab), jnp.float32)
  return z, jax.nn.softmax(z / temperature, axis=-1)


def uniform_like(p: jax.Array) -> jax.Array:
  """[..., V] the uniform distribution u."""
  return jnp.full_like(p, 1.0 / p.shape[-1])


def interpolate(p: jax.Array, q_ref: jax.Array, t) -> jax.Array:
  """``q_t = (1 - t) p + t q_ref`` [..., V]: ``t = 0`` is a perfect drafter."""
  return (1.0 - t) * p + t * q_ref


# --- (a), (b): KL to the matched baseline as q -> p ----------------------------------


class DriftCurve(NamedTuple):
  """Induced-distribution divergences along ``q_t = (1 - t) p + t q_ref``.

  Attributes:
    ts: [T] the interpolation weights.
    kl: [T, B] ``KL(P_t || p_A)`` (the paper's KL_SD / KL_EAGLE).
    kl_reverse: [T, B] ``KL(p_A || P_t)``.
    tv: [T, B] total variation between P_t and p_A.
    accept_rate: [T, B] probability that the first token is an accepted draft.
  """

  ts: jax.Array
  kl: jax.Array
  kl_reverse: jax.Array
  tv: jax.Array
  accept_rate: jax.Array


def _drift_curve(rule, z, p, q_ref, ts, p_a, **kwargs) -> DriftCurve:
  z, p, q_ref = (jnp.asarray(a, jnp.float32) for a in (z, p, q_ref))
  p_a = dv.matched_baseline_probs(rule, p) if p_a is None else jnp.asarray(p_a, jnp.float32)
  ts = jnp.asarray(ts, jnp.float32).reshape(-1)
  rows = []
  for t in ts:  # one compilation: t enters only through q's values
    parts = induced_parts(rule, z, p, interpolate(p, q_ref, t), **kwargs)
    big_p = parts.dist
    rows.append((dv.kl(big_p, p_a), dv.kl(p_a, big_p), dv.tv(big_p, p_a), parts.accept_rate))
  kl, klr, tv, acc = (jnp.stack(c) for c in zip(*rows))
  return DriftCurve(ts, kl, klr, tv, acc)


def sd_kl_curve(rule: NodeRule, z: jax.Array, p: jax.Array, q_ref: jax.Array, ts, *,
                p_a: jax.Array | None = None, chunk_size: int | None = 32,
                max_support: int | None = None, context_batch: int | None = None,
                sampled_form: str = "enumerate") -> DriftCurve:
  """Proposition 1 / Lemma 2, standard SD: ``KL(P_SD || p_A) -> 0`` as ``q -> p``.

  For a truncation rule with a sampled draft the one-node induced distribution
  is ``q 1_A + (1 - q(A)) p_A``, which tends to ``p 1_A + (1 - Z_A) p_A = p_A``.

  Args:
    rule: the verification rule (a truncation rule for the proposition; any rule works).
    z: [B, V] raw target logits; p: [B, V] target distributions.
    q_ref: [B, V] reference draft (uniform for the synthetic family).
    ts: [T] interpolation weights (``q_t = (1 - t) p + t q_ref``).
    p_a: [B, V] baseline; default the rule's matched truncation baseline.
    chunk_size, max_support, context_batch, sampled_form: see
      :func:`~specjax.analysis.induced.induced_parts` (``sampled_form="closed"`` is the
      O(V) exact sum, for real vocabularies).
  """
  return _drift_curve(rule, z, p, q_ref, ts, p_a, draft="sampled", chunk_size=chunk_size,
                      max_support=max_support, context_batch=context_batch,
                      sampled_form=sampled_form)


def eagle_kl_curve(rule: NodeRule, z: jax.Array, p: jax.Array, q_ref: jax.Array, ts, *,
                   top_k: int = 1, p_a: jax.Array | None = None,
                   context_batch: int | None = None) -> DriftCurve:
  """Proposition 1, EAGLE-style deterministic drafts (top-k candidates of q_t, onehot q).

  As ``q -> p`` the first candidate is ``argmax p``, which every truncation
  set contains and both gates accept with probability 1, so ``P -> onehot(argmax p)``
  and ``KL(P_EAGLE || p_A) -> log(Z_A(p) / p(argmax p))`` per context
  (:func:`eagle_kl_limit`).  Arguments as in :func:`sd_kl_curve`.
  """
  return _drift_curve(rule, z, p, q_ref, ts, p_a, draft="topk", top_k=top_k,
                      context_batch=context_batch)


def eagle_kl_limit(p: jax.Array, mask: jax.Array) -> jax.Array:
  """Proposition 1's limit per context: ``log(Z_A(p) / p(argmax p))`` [B] (>= 0).

  Mean over contexts = ``E[log(Z_A(p) / p(argmax p))]``; strictly positive as
  soon as one context's allowed set holds more than the argmax.  Assumes the
  argmax is in A (true for min-p and eta sets).

  Args:
    p: [..., V] target distributions.
    mask: bool [..., V] allowed sets A(p) (e.g. ``divergences.matched_allowed_set``).
  """
  p = jnp.asarray(p, jnp.float32)
  return jnp.maximum(jnp.log(dv.allowed_mass(p, mask)) - jnp.log(jnp.max(p, axis=-1)), 0.0)


# --- (c): acceptance rate / block efficiency under truncation -----------------------


class TruncationSweep(NamedTuple):
  """Acceptance and block efficiency with and without truncation (Lemma 1, Fig. 4/5).

  ``alpha(x, y) = sum min(x, y)``; block efficiencies use the mean alpha over
  contexts (Leviathan et al.'s i.i.d. model) at draft length ``gamma``.

  Attributes:
    values: [n] the swept hyperparameter (p_base for min-p, eps for eta).
    alpha_pq: [B] untruncated target and draft (lossless SD).
    alpha_paq: [n, B] truncated target p_A, untruncated draft q.
    alpha_paqa: [n, B] both truncated (q_A = q truncated by its own allowed set A(q)).
    alpha_gate: [n, B] ``q(A(p))``: acceptance of the hard-gate truncation rule.
    be_pq: [] block efficiency of alpha_pq.
    be_paq, be_paqa, be_gate: [n] block efficiencies of the above.
    delta_be_paq: [n] ``be_paq - be_pq``; its sign is the paper's Delta BE.
    delta_be_paqa: [n] ``be_paqa - be_pq``.
  """

  values: jax.Array
  alpha_pq: jax.Array
  alpha_paq: jax.Array
  alpha_paqa: jax.Array
  alpha_gate: jax.Array
  be_pq: jax.Array
  be_paq: jax.Array
  be_paqa: jax.Array
  be_gate: jax.Array
  delta_be_paq: jax.Array
  delta_be_paqa: jax.Array


def allowed_set(kind: str, p: jax.Array, value, delta=None) -> jax.Array:
  """bool [..., V] the allowed set of ``kind`` ("min_p": p_base=value; "eta": eps=value)."""
  if kind == "min_p":
    return dv.allowed_set_min_p(p, value)
  if kind == "eta":
    return dv.allowed_set_eta(p, value, delta)
  raise ValueError(f"kind={kind!r}; allowed: {TRUNCATION_KINDS}")


@functools.partial(jax.jit, static_argnames=("kind", "delta"))
def _truncation_alphas(p, q, value, *, kind, delta):
  mask_p = allowed_set(kind, p, value, delta)
  p_a = dv.truncate(p, mask_p)
  q_a = dv.truncate(q, allowed_set(kind, q, value, delta))
  return (dv.acceptance_rate(p_a, q), dv.acceptance_rate(p_a, q_a),
          dv.allowed_mass(q, mask_p))


def truncation_sweep(p: jax.Array, q: jax.Array, kind: str, values: Sequence[float], *,
                     gamma: int = 5, delta: float | None = None) -> TruncationSweep:
  """Lemma 1 / Fig. 4-5: how truncation changes alpha and block efficiency.

  Args:
    p: [B, V] target distributions; q: [B, V] draft distributions.
    kind: "min_p" (SpecCascade's set, values = p_base) or "eta" (typical
      acceptance's set, values = eps; ``delta`` default sqrt(eps)).
    values: the sweep.
    gamma: draft length for the block efficiency.
  """
  if kind not in TRUNCATION_KINDS:
    raise ValueError(f"kind={kind!r}; allowed: {TRUNCATION_KINDS}")
  p = jnp.asarray(p, jnp.float32)
  q = jnp.asarray(q, jnp.float32)
  values = jnp.asarray(values, jnp.float32).reshape(-1)
  rows = [_truncation_alphas(p, q, v, kind=kind, delta=delta) for v in values]
  a_paq, a_paqa, a_gate = (jnp.stack(c) for c in zip(*rows))
  a_pq = dv.acceptance_rate(p, q)
  be = lambda a: dv.block_efficiency(jnp.mean(a, axis=-1), gamma)
  be_pq, be_paq, be_paqa = be(a_pq), be(a_paq), be(a_paqa)
  return TruncationSweep(values, a_pq, a_paq, a_paqa, a_gate, be_pq, be_paq, be_paqa,
                         be(a_gate), be_paq - be_pq, be_paqa - be_pq)


# --- (c'): Lemma 1 against the draft-target alignment (Fig. 4) ---------------------


class Lemma1Terms(NamedTuple):
  """The change of the acceptance rate under truncation, split in two (per context).

  With allowed sets A (target) and B (draft; B = V for an untruncated draft),
  ``Z_A = p(A)``, ``Z_B = q(B)``::

    alpha(p_A, q_B) - alpha(p, q) = gain - loss,
    gain = sum_{x in A & B} [min(p(x) / Z_A, q(x) / Z_B) - min(p(x), q(x))]  >= 0,
    loss = sum_{x not in A & B} min(p(x), q(x))                                >= 0:

  renormalising the kept tokens raises their overlap (gain); the tokens cut
  away take their overlap with them (loss).  The sign of ``gain - loss`` is the
  sign of the block-efficiency change (block efficiency rises with alpha).

  Attributes (each [...]):
    alpha: ``alpha(p, q)``; alpha_trunc: ``alpha(p_A, q_B)``; gain; loss.
  """

  alpha: jax.Array
  alpha_trunc: jax.Array
  gain: jax.Array
  loss: jax.Array


def lemma1_terms(p: jax.Array, q: jax.Array, mask_p: jax.Array, mask_q: jax.Array | None = None
                 ) -> Lemma1Terms:
  """:class:`Lemma1Terms` for ``p, q [..., V]`` and allowed sets ``mask_p`` (A) and
  ``mask_q`` (B; None = the whole vocabulary, an untruncated draft)."""
  p = jnp.asarray(p, jnp.float32)
  q = jnp.asarray(q, jnp.float32)
  mask_q = jnp.ones(q.shape, bool) if mask_q is None else mask_q
  both = mask_p & mask_q
  p_a = dv.truncate(p, mask_p)
  q_b = dv.truncate(q, mask_q)
  overlap = jnp.minimum(p, q)
  gain = jnp.sum(jnp.where(both, jnp.minimum(p_a, q_b) - overlap, 0.0), axis=-1)
  loss = jnp.sum(jnp.where(both, 0.0, overlap), axis=-1)
  return Lemma1Terms(jnp.sum(overlap, -1), jnp.sum(jnp.where(both, jnp.minimum(p_a, q_b), 0.0),
                                                   -1), gain, loss)


class AlignmentSweep(NamedTuple):
  """Truncation's block-efficiency change against the draft-target alignment.

  The draft is moved towards the target, ``q_rho = rho p + (1 - rho) q_ref``
  (``rho`` = the alignment ratio: 0 the reference draft, 1 a perfect one), and
  for every truncation value the matched truncation-sampling baseline's
  acceptance is compared with plain SD's.  Means over contexts; block
  efficiencies from the mean alpha (Leviathan et al.'s i.i.d. model).

  Attributes:
    rhos: [R]; values: [n] (p_base for min-p, eps for eta).
    alpha_pq: [R] ``alpha(p, q_rho)``.
    alpha_trunc: [R, n] ``alpha(p_A, q_rho,B)``.
    gain, loss: [R, n] the :class:`Lemma1Terms` (``alpha_trunc - alpha_pq = gain - loss``).
    be_pq: [R]; be_trunc: [R, n]; delta_be: [R, n] ``be_trunc - be_pq`` (the net change).
  """

  rhos: jax.Array
  values: jax.Array
  alpha_pq: jax.Array
  alpha_trunc: jax.Array
  gain: jax.Array
  loss: jax.Array
  be_pq: jax.Array
  be_trunc: jax.Array
  delta_be: jax.Array


@functools.partial(jax.jit, static_argnames=("kind", "delta", "truncate_draft"))
def _alignment_point(p, q_ref, rho, value, *, kind, delta, truncate_draft):
  q = interpolate(p, q_ref, 1.0 - rho)
  mask_q = allowed_set(kind, q, value, delta) if truncate_draft else None
  t = lemma1_terms(p, q, allowed_set(kind, p, value, delta), mask_q)
  return tuple(jnp.mean(a, axis=-1) for a in t)


def alignment_sweep(p: jax.Array, q_ref: jax.Array, kind: str, values: Sequence[float],
                    rhos: Sequence[float], *, gamma: int = 10, delta: float | None = None,
                    truncate_draft: bool = True) -> AlignmentSweep:
  """Lemma 1 / Fig. 4: net block-efficiency change of truncation vs the alignment ratio.

  Args:
    p: [B, V] target distributions; q_ref: [B, V] the reference draft (rho = 0).
    kind: "min_p" or "eta" (as :func:`truncation_sweep`).
    values: the truncation hyperparameters.
    rhos: alignment ratios in [0, 1].
    gamma: draft length for the block efficiency.
    delta: eta's delta (default sqrt(eps)).
    truncate_draft: the draft is truncated by its own allowed set too (``q_B``, as
      when the truncation runs as a logits processor of both models); False
      keeps q whole (``B = V``).
  """
  if kind not in TRUNCATION_KINDS:
    raise ValueError(f"kind={kind!r}; allowed: {TRUNCATION_KINDS}")
  p = jnp.asarray(p, jnp.float32)
  q_ref = jnp.asarray(q_ref, jnp.float32)
  rows = [[_alignment_point(p, q_ref, jnp.float32(r), jnp.float32(v), kind=kind, delta=delta,
                            truncate_draft=truncate_draft) for v in values] for r in rhos]
  alpha, alpha_trunc, gain, loss = (jnp.asarray([[c[i] for c in row] for row in rows])
                                    for i in range(4))
  alpha_pq = alpha[:, 0]
  be_pq = dv.block_efficiency(alpha_pq, gamma)
  be_trunc = dv.block_efficiency(alpha_trunc, gamma)
  return AlignmentSweep(jnp.asarray(rhos, jnp.float32), jnp.asarray(values, jnp.float32),
                        alpha_pq, alpha_trunc, gain, loss, be_pq, be_trunc,
                        be_trunc - be_pq[:, None])


# --- (d): MARS ----------------------------------------------------------------------


class MarsSweep(NamedTuple):
  """MARS's distribution shift and where strict rejections fall, per theta.

  Attributes:
    thetas: [n].
    kl: [n, B] ``KL(P_MARS || p)``.
    tv: [n, B] total variation to p.
    accept_rate: [n, B] first-token acceptance probability under MARS.
    relaxed_rate: [n, B] probability of a relaxed acceptance (accepted only
      because of MARS).
    active: [n, B] bool, relaxation active (``r = z2 / z1 > theta``, guard
      per the rule) -- from the rule's own ``init``.
    strict_reject: [B] rejection probability of the strict (base) rule.
    reject_share: [n] share of strict rejections in the relaxation region,
      ``P(active | strict reject) = sum_B strict_reject * active / sum_B strict_reject``.
    reject_given_active: [n] ``P(strict reject | active) = sum_B strict_reject * active /
      sum_B active`` -- the MARS paper's Fig. 1d quantity (53.5% at theta = 0.9); nan
      where no context is active.
  """

  thetas: jax.Array
  kl: jax.Array
  tv: jax.Array
  accept_rate: jax.Array
  relaxed_rate: jax.Array
  active: jax.Array
  strict_reject: jax.Array
  reject_share: jax.Array
  reject_given_active: jax.Array


@jax.jit
def _strict_accept_sampled(rule, z, p, q):
  """[B] ``E_{x~q}[strict_accept_prob(init(z, p), q, x)]`` -- O(V) per context
  (``rule`` traced: one compilation per rule kind)."""

  def one(zz, pp, qq):
    s = rule.init(zz, pp)
    xs = jnp.arange(qq.shape[-1])
    a = jax.vmap(lambda x: rule.strict_accept_prob(s, qq, x))(xs)
    return jnp.sum(jnp.where(qq > 0, qq * a, 0.0))

  return jax.vmap(one)(z, p, q)


def mars_sweep(z: jax.Array, p: jax.Array, q: jax.Array, thetas: Sequence[float], *,
               draft: str = "sampled", top_k: int = 1, chunk_size: int | None = 32,
               max_support: int | None = None, context_batch: int | None = None,
               sampled_form: str = "enumerate", **mars_kwargs) -> MarsSweep:
  """MARS (docs/spec.md §3) as theta varies: KL to the target and the relaxable rejections.

  Args:
    z: [B, V] raw target logits (the ratio ``z2 / z1`` uses them);
    p: [B, V] target distributions; q: [B, V] draft distributions.
    thetas: the ratio thresholds to sweep.
    draft, top_k, chunk_size, max_support, context_batch, sampled_form: see
      :func:`~specjax.analysis.induced.induced_parts`.
    **mars_kwargs: further ``Mars`` hyperparameters (``guard``, ``base``, ...).
  """
  from specjax.verifiers import get
  from specjax.verifiers import mars as _mars  # noqa: F401  (registers "mars")

  z, p, q = (jnp.asarray(a, jnp.float32) for a in (z, p, q))
  thetas = [float(t) for t in thetas]
  kw = dict(draft=draft, top_k=top_k, chunk_size=chunk_size, max_support=max_support,
            context_batch=context_batch,
            **({"sampled_form": sampled_form} if draft == "sampled" else {}))
  rows = []
  strict_reject = None
  for theta in thetas:
    rule = get("mars", theta=theta, **mars_kwargs)
    parts = induced_parts(rule, z, p, q, **kw)
    big_p = parts.dist
    active = jax.vmap(rule.init)(z, p).active
    if strict_reject is None:  # the strict rule does not depend on theta
      if draft == "sampled":
        strict_reject = 1.0 - _strict_accept_sampled(rule, z, p, q)
      else:
        base = getattr(rule, "base_rule", Lossless())
        strict_reject = 1.0 - induced_parts(base, z, p, q, **kw).accept_rate
    share = (jnp.sum(strict_reject * active) /
             jnp.maximum(jnp.sum(strict_reject), jnp.finfo(jnp.float32).tiny))
    n_active = jnp.sum(active)
    given = jnp.where(n_active > 0, jnp.sum(strict_reject * active) /
                      jnp.maximum(n_active, 1), jnp.nan)
    rows.append((dv.kl(big_p, p), dv.tv(big_p, p), parts.accept_rate, parts.relaxed_rate,
                 active, share, given))
  kl, tv, acc, rel, active, share, given = (jnp.stack(c) for c in zip(*rows))
  return MarsSweep(jnp.asarray(thetas, jnp.float32), kl, tv, acc, rel, active, strict_reject,
                   share, given)
