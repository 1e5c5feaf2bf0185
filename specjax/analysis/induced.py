"""Exact induced distribution of the first emitted token(s) for any node rule.

docs/spec.md §6.  For a rule R (the four node functions of docs/spec.md §2 /
:mod:`specjax.verifiers.base`), target logits ``z``, target distribution ``p``
and draft distribution ``q`` at one position, the distribution of the first
emitted token is computed by enumeration -- from the rule's four functions
only, exactly as the chain / tree drivers use them:

* sampled drafts (standard SD, one chain node), ``x ~ q``::

    P(y) = sum_x q(x) [ a(x) 1[x = y] + (1 - a(x)) correction(on_reject(s0, q, x))(y) ]

  with ``s0 = init(z, p)`` and ``a(x) = accept_prob(s0, q, x)``.  This is V
  corrections of size V (V^2 work).  The sum runs over candidate chunks in
  decreasing order of ``q`` inside a ``lax.while_loop`` that stops at the
  first chunk whose largest ``q`` is 0, so a sparse (top-k / top-p truncated)
  drafter costs ``support x V`` instead of ``V^2``; ``max_support`` makes that
  static (only the ``max_support`` largest entries of ``q`` are enumerated).

  ``sampled_form="closed"`` computes the same sum in O(V) for the rules whose
  correction after a rejection does not depend on the rejected token
  (:func:`rejection_invariant`: lossless, greedy, lenience, CoS, the truncation
  rules -- every rejected token lies outside A, so the correction is ``p_A`` --
  Fuzzy speculative decoding, and MARS over any of them)::

    P(y) = q(y) a(y) + (sum_x q(x) (1 - a(x))) correction(on_reject(s0, q, x*))(y)

  with ``x*`` any candidate that can be rejected (the one with the largest
  ``q (1 - a)``).  Exact, not an approximation; other rules raise.  This is
  what makes sampled drafts affordable at a real vocabulary (V = 49,152:
  V^2 = 2.4e9 per context).

* deterministic top-k candidates (EAGLE trees): candidates ``c_1..c_k`` = top-k
  of ``q``, tried in order with ``q = onehot(c_j)`` and ``on_reject`` between
  them; if all are rejected the token is drawn from ``correction``::

    P(y) = sum_j reach_j a_j 1[c_j = y] + reach_{k+1} correction(s_k)(y),
    reach_1 = 1, reach_{j+1} = reach_j (1 - a_j),  s_j = on_reject(s_{j-1}, onehot(c_j), c_j).

  For rules with ``has_relaxed_fallback`` (MARS: strict before relaxed, docs/spec.md
  §3) ``a_j`` is ``strict_accept_prob`` and the mass ``reach_{k+1}`` goes to
  the candidate with the highest positive ``relaxed_fallback(s_k, c)`` (a
  relaxed acceptance) when there is one, else to ``correction(s_k)`` -- the
  same steps as the walk of :class:`specjax.verifiers.tree_rule.NodeTreeRule`.

In both cases the node state is ``init_node(z, p, q)`` for rules with
``needs_node_dist`` (CoS: ``pi`` is formed once from the drafter's full
distribution ``q`` at the node, docs/spec.md §3), else ``init(z, p)``.

Results are split into the part emitted by accepting a draft, the part emitted
by the correction, and the accepted part that only the relaxation allowed
(``strict_accept_prob <= u < accept_prob``, the statistic MARS reports).

All functions take leading batch axes (contexts) and are jitted with the rule
as a traced pytree argument (:mod:`specjax.hyperparams`): a sweep over a
rule's float hyperparameters (MARS theta, CoS lam, ...) compiles once; its
static part (kind, gate, margin, ...) selects the program.  A rule whose
floats are stacked arrays (``jax.tree.map(lambda *a: jnp.stack(a), *rules)``)
can be ``jax.vmap``-ed over directly.

Two tokens (:func:`induced_two_tokens`): for small vocabularies, the joint
distribution of the first two emitted tokens, starting at a round boundary,
with target / draft inputs at step 2 given as a function of the first token
(``z2[y1]``, ``p2[y1]``, ``q2[y1]``), to study cumulative drift.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from specjax.verifiers.base import NodeRule, relaxed_fallback_choice

DRAFT_KINDS = ("sampled", "topk")
SAMPLED_FORMS = ("enumerate", "closed")


class InducedParts(NamedTuple):
  """The induced first-token distribution, split by how the token was emitted.

  ``accepted + corrected`` is the induced distribution ``P``; it sums to 1
  (up to float error) unless ``max_support`` left out candidates with
  ``q > 0``, in which case the missing mass is exactly the left-out ``q`` mass.

  Attributes:
    accepted: [..., V] P(first token = y and it was an accepted draft).
    corrected: [..., V] P(first token = y and it came from ``correction``).
    relaxed: [..., V] the part of ``accepted`` that only the relaxation allowed
      (``u`` in ``[strict_accept_prob, accept_prob)``); 0 for strict rules.
  """

  accepted: jax.Array
  corrected: jax.Array
  relaxed: jax.Array

  @property
  def dist(self) -> jax.Array:
    """[..., V] the induced distribution P = accepted + corrected."""
    return self.accepted + self.corrected

  @property
  def accept_rate(self) -> jax.Array:
    """[...] probability that the first token is an accepted draft."""
    return jnp.sum(self.accepted, axis=-1)

  @property
  def relaxed_rate(self) -> jax.Array:
    """[...] probability of a relaxed acceptance."""
    return jnp.sum(self.relaxed, axis=-1)


def rejection_invariant(rule: NodeRule) -> bool:
  """Whether ``correction(on_reject(init, q, x))`` is the same for every rejectable x.

  True for exactly these rule types (not subclasses, which may override a node
  function): Lossless, Lenience, CoS and CoSContrastive (``on_reject`` is the
  residual ``norm(max(0, p_cur - q))``, which does not read x), Greedy (the state
  is kept), SpecCascade and Typical (a rejected x lies outside A, so zeroing it
  leaves the correction ``p_A``), Fuzzy (a close node rejects nothing; a far one
  keeps p or takes the residual), and MARS over any of them.  The tests check
  each against the V^2 enumeration.
  """
  from specjax import verifiers as vf
  if type(rule) is vf.Mars:
    return rejection_invariant(rule.base_rule)
  return type(rule) in (vf.Lossless, vf.Greedy, vf.Lenience, vf.CoS, vf.CoSContrastive,
                        vf.SpecCascade, vf.Typical, vf.Fuzzy)


def _validate(rule, draft, top_k, chunk_size, max_support, sampled_form="enumerate"):
  if not isinstance(rule, NodeRule):
    raise ValueError(f"rule={rule!r} is not a NodeRule (see specjax.verifiers.base)")
  if draft not in DRAFT_KINDS:
    raise ValueError(f"draft={draft!r}; allowed: {DRAFT_KINDS}")
  if sampled_form not in SAMPLED_FORMS:
    raise ValueError(f"sampled_form={sampled_form!r}; allowed: {SAMPLED_FORMS}")
  if draft == "sampled" and sampled_form == "closed" and not rejection_invariant(rule):
    raise ValueError(f"sampled_form='closed' needs a rule whose correction does not depend on "
                     f"the rejected token; {type(rule).__name__} is not known to be one "
                     f"(use sampled_form='enumerate', V^2 per context)")
  if not (isinstance(top_k, int) and top_k >= 1):
    raise ValueError(f"top_k={top_k!r} must be an integer >= 1")
  if chunk_size is not None and not (isinstance(chunk_size, int) and chunk_size >= 1):
    raise ValueError(f"chunk_size={chunk_size!r} must be an integer >= 1 or None (unchunked)")
  if max_support is not None and not (isinstance(max_support, int) and max_support >= 1):
    raise ValueError(f"max_support={max_support!r} must be an integer >= 1 or None (all of V)")


# --- single context ------------------------------------------------------------------


def _sampled_parts(rule: NodeRule, z, p, q, chunk_size, max_support) -> InducedParts:
  """Sampled-draft enumeration for one context. z, p, q: [V]."""
  v = q.shape[-1]
  state = _init(rule, z, p, q)
  m = v if max_support is None else min(max_support, v)
  # Candidates in decreasing order of q; zero-q candidates come last.
  w, xs = jax.lax.top_k(q, m)  # [M], [M]
  c = m if chunk_size is None else min(chunk_size, m)
  n_chunks = -(-m // c)
  pad = n_chunks * c - m
  w = jnp.pad(w, (0, pad))  # padded candidates get weight 0
  xs = jnp.pad(xs, (0, pad))
  w = w.reshape(n_chunks, c)  # [n_chunks, C]
  xs = xs.reshape(n_chunks, c)

  def chunk_terms(xc, wc):  # xc, wc: [C] -> three [V]
    a = jax.vmap(lambda x: rule.accept_prob(state, q, x))(xc)  # [C]
    a_strict = jax.vmap(lambda x: rule.strict_accept_prob(state, q, x))(xc)  # [C]
    r = jax.vmap(lambda x: rule.correction(rule.on_reject(state, q, x)))(xc)  # [C, V]
    live = wc > 0
    a = jnp.where(live, a, 0.0)
    cw = jnp.where(live, wc * (1.0 - a), 0.0)  # [C]
    r = jnp.where(cw[:, None] > 0, r, 0.0)  # guard: NaN corrections of never-drawn x
    acc = jnp.zeros((v,), p.dtype).at[xc].add(wc * a)
    rel = jnp.zeros((v,), p.dtype).at[xc].add(
        jnp.where(live, wc * jnp.maximum(a - a_strict, 0.0), 0.0))
    cor = jnp.einsum("c,cv->v", cw, r, precision=jax.lax.Precision.HIGHEST)
    return acc, cor, rel

  if n_chunks == 1:
    return InducedParts(*chunk_terms(xs[0], w[0]))

  def cond(carry):
    i = carry[0]
    return (i < n_chunks) & (w[jnp.minimum(i, n_chunks - 1), 0] > 0)

  def body(carry):
    i, acc, cor, rel = carry
    da, dc, dr = chunk_terms(xs[i], w[i])
    return i + 1, acc + da, cor + dc, rel + dr

  zero = jnp.zeros((v,), p.dtype)
  _, acc, cor, rel = jax.lax.while_loop(cond, body, (jnp.int32(0), zero, zero, zero))
  return InducedParts(acc, cor, rel)


def _sampled_parts_closed(rule: NodeRule, z, p, q) -> InducedParts:
  """O(V) sampled-draft distribution for one context (module docstring; needs
  :func:`rejection_invariant`). z, p, q: [V]."""
  state = _init(rule, z, p, q)
  xs = jnp.arange(q.shape[-1])
  live = q > 0
  a = jnp.where(live, jax.vmap(lambda x: rule.accept_prob(state, q, x))(xs), 0.0)
  a_strict = jax.vmap(lambda x: rule.strict_accept_prob(state, q, x))(xs)
  acc = jnp.where(live, q * a, 0.0)
  rel = jnp.where(live, q * jnp.maximum(a - a_strict, 0.0), 0.0)
  w = jnp.where(live, q * (1.0 - a), 0.0)  # [V] rejection mass of each candidate
  reject = jnp.sum(w)
  x_star = jnp.argmax(w)
  r = rule.correction(rule.on_reject(state, q, x_star))
  cor = jnp.where(reject > 0, reject * r, 0.0)
  return InducedParts(acc.astype(p.dtype), cor.astype(p.dtype), rel.astype(p.dtype))


def _init(rule: NodeRule, z, p, q):
  """The node state: ``init_node(z, p, q)`` if the rule reads the drafter's distribution."""
  return rule.init_node(z, p, q) if rule.needs_node_dist else rule.init(z, p)


def _topk_parts(rule: NodeRule, z, p, q, top_k, candidates) -> InducedParts:
  """Deterministic-candidate enumeration for one context. z, p, q: [V]; candidates [k] or None."""
  v = q.shape[-1]
  if candidates is None:
    candidates = jax.lax.top_k(q, min(top_k, v))[1]  # [k], decreasing q (ties: lower index)
  candidates = candidates.astype(jnp.int32)
  present = candidates >= 0  # [k]; -1 = no candidate in this slot (skipped)
  safe = jnp.where(present, candidates, 0)
  state0 = _init(rule, z, p, q)
  fallback = rule.has_relaxed_fallback
  stage_prob = rule.strict_accept_prob if fallback else rule.accept_prob

  def step(carry, inp):
    state, reach, acc, rel = carry
    cj, here = inp
    qj = jax.nn.one_hot(cj, v, dtype=p.dtype)  # [V]
    a = jnp.where(here, stage_prob(state, qj, cj), 0.0)
    a_strict = rule.strict_accept_prob(state, qj, cj)
    acc = acc.at[cj].add(reach * a)
    rel = rel.at[cj].add(jnp.where(here, reach * jnp.maximum(a - a_strict, 0.0), 0.0))
    new_state = rule.on_reject(state, qj, cj)
    state = jax.tree.map(lambda n, o: jnp.where(here, n, o), new_state, state)
    return (state, reach * (1.0 - a), acc, rel), None

  zero = jnp.zeros((v,), p.dtype)
  (state, reach, acc, rel), _ = jax.lax.scan(
      step, (state0, jnp.ones((), p.dtype), zero, zero), (safe, present))
  if fallback:  # every candidate strictly rejected: the best relaxable one, if any
    best, take = relaxed_fallback_choice(rule, state, safe, present)
    got = jnp.where(take, reach, 0.0)
    acc = acc.at[safe[best]].add(got)
    rel = rel.at[safe[best]].add(got)
    reach = reach - got
  cor = reach * rule.correction(state)
  return InducedParts(acc, cor, rel)


def _single_parts(rule, draft, top_k, chunk_size, max_support, z, p, q, candidates=None,
                  sampled_form="enumerate"):
  if draft == "sampled" and sampled_form == "closed":
    return _sampled_parts_closed(rule, z, p, q)
  if draft == "sampled":
    return _sampled_parts(rule, z, p, q, chunk_size, max_support)
  return _topk_parts(rule, z, p, q, top_k, candidates)


def _map_contexts(fn, args, context_batch):
  """Apply ``fn`` (one context) over the flattened leading axes of ``args`` [..., V]."""
  lead = args[0].shape[:-1]
  n = math.prod(lead)
  flat = [a.reshape((n,) + a.shape[len(lead):]) for a in args]
  if context_batch is None:
    out = jax.vmap(fn)(*flat)
  else:
    out = jax.lax.map(lambda xs: fn(*xs), tuple(flat), batch_size=min(context_batch, max(n, 1)))
  return jax.tree.map(lambda o: o.reshape(lead + o.shape[1:]), out)


@functools.partial(jax.jit, static_argnames=("draft", "top_k", "chunk_size", "max_support",
                                             "context_batch", "sampled_form"))
def _induced_parts_jit(rule, z, p, q, candidates, *, draft, top_k, chunk_size, max_support,
                       context_batch, sampled_form="enumerate"):
  if candidates is None:
    fn = lambda zz, pp, qq: _single_parts(rule, draft, top_k, chunk_size, max_support, zz, pp, qq,
                                          sampled_form=sampled_form)
    return _map_contexts(fn, (z, p, q), context_batch)
  fn = lambda zz, pp, qq, cc: _single_parts(rule, draft, top_k, chunk_size, max_support, zz, pp,
                                            qq, cc)
  return _map_contexts(fn, (z, p, q, candidates), context_batch)


def induced_parts(rule: NodeRule, z: jax.Array, p: jax.Array, q: jax.Array, *,
                  draft: str = "sampled", top_k: int = 1, candidates: jax.Array | None = None,
                  chunk_size: int | None = 32, max_support: int | None = None,
                  context_batch: int | None = None, sampled_form: str = "enumerate"
                  ) -> InducedParts:
  """Exact first-token distribution of ``rule``, split by emission route (docs/spec.md §6).

  Args:
    rule: a node rule (``specjax.verifiers.get(name, ...)``).
    z: [..., V] raw target logits.
    p: [..., V] target distribution after temperature / processors.
    q: [..., V] draft distribution (the drafter's, after its processors).
    draft: ``"sampled"`` (x ~ q, one chain node: standard SD) or ``"topk"``
      (deterministic candidates top-k of q, tried in order with onehot q:
      EAGLE trees; ``top_k=1`` is a greedy-drafted chain).
    top_k: number of deterministic candidates (``draft="topk"`` only).
    candidates: optional [..., k] int explicit candidate tokens (``"topk"``
      only), tried in the order given, overriding top-k of q (e.g. an EAGLE-2
      tree's root children); ``-1`` marks an absent slot (skipped), so contexts
      with different numbers of candidates share one array.
    chunk_size: candidates x processed per step for sampled drafts (memory
      ``chunk_size * V`` per context); ``None`` enumerates all at once.
    max_support: enumerate only the ``max_support`` largest entries of q
      (sampled drafts).  Exact when q has at most that many non-zeros (a
      top-k-truncated drafter); otherwise ``sum(P) = 1 - left-out q mass``.
    context_batch: contexts processed together (``lax.map`` batch size);
      ``None`` vmaps all contexts at once.
    sampled_form: ``"enumerate"`` (the V^2 sum over x, any rule) or ``"closed"``
      (the same sum in O(V); only for :func:`rejection_invariant` rules, others
      raise; ``chunk_size`` / ``max_support`` are then unused).  Sampled drafts only.

  Returns:
    :class:`InducedParts` with [..., V] fields.
  """
  _validate(rule, draft, top_k, chunk_size, max_support, sampled_form)
  z, p, q = (jnp.asarray(a, jnp.float32) for a in (z, p, q))
  if not (z.shape == p.shape == q.shape) or z.ndim < 1:
    raise ValueError(f"z, p, q must share one shape [..., V]; got {z.shape}, {p.shape}, {q.shape}")
  if candidates is not None:
    if draft != "topk":
      raise ValueError("candidates= is only meaningful with draft='topk'")
    candidates = jnp.asarray(candidates, jnp.int32)
    if candidates.shape[:-1] != z.shape[:-1]:
      raise ValueError(f"candidates must be [..., k] with leading axes {z.shape[:-1]}; "
                       f"got {candidates.shape}")
    top_k = candidates.shape[-1]
  if z.ndim == 1:
    parts = _induced_parts_jit(rule, z[None], p[None], q[None],
                               None if candidates is None else candidates[None], draft=draft,
                               top_k=top_k, chunk_size=chunk_size, max_support=max_support,
                               context_batch=context_batch, sampled_form=sampled_form)
    return jax.tree.map(lambda a: a[0], parts)
  return _induced_parts_jit(rule, z, p, q, candidates, draft=draft, top_k=top_k,
                            chunk_size=chunk_size, max_support=max_support,
                            context_batch=context_batch, sampled_form=sampled_form)


def induced_distribution(rule: NodeRule, z: jax.Array, p: jax.Array, q: jax.Array,
                         **kwargs) -> jax.Array:
  """[..., V] exact induced first-token distribution P (docs/spec.md §6); see :func:`induced_parts`."""
  return induced_parts(rule, z, p, q, **kwargs).dist


def bonus_distribution(rule: NodeRule, z: jax.Array, p: jax.Array) -> jax.Array:
  """[..., V] ``correction(init(z, p))``: the bonus token after a fully accepted block."""
  z, p = jnp.asarray(z, jnp.float32), jnp.asarray(p, jnp.float32)
  fn = lambda zz, pp: rule.correction(rule.init(zz, pp))
  for _ in range(z.ndim - 1):
    fn = jax.vmap(fn)
  return fn(z, p)


# --- two tokens ----------------------------------------------------------------------


def induced_two_tokens(rule: NodeRule, z1: jax.Array, p1: jax.Array, q1: jax.Array,
                       z2: jax.Array, p2: jax.Array, q2: jax.Array, *, draft: str = "sampled",
                       top_k: int = 1, top_k2: int | None = None, draft_length: int = 2,
                       chunk_size: int | None = 32, max_support: int | None = None
                       ) -> jax.Array:
  """Exact joint distribution of the first two emitted tokens (cumulative drift).

  Starts at a round boundary.  Step 2's inputs are functions of the first
  token y1: ``z2[y1]``, ``p2[y1]``, ``q2[y1]`` (the target's logits /
  distribution and the drafter's distribution after appending y1).  Then::

    P(y1, y2) = A1(y1) N_acc(y2 | y1) + R1(y1) N_fresh(y2 | y1)

  where ``A1`` / ``R1`` are the accepted / corrected parts of the first-token
  law, ``N_fresh`` is the induced law at step 2 (a new round: its draft is
  verified against ``z2[y1]``), and ``N_acc`` is what follows an accepted
  first draft: the bonus ``correction(init(z2[y1], p2[y1]))`` when
  ``draft_length == 1`` (the block is used up), otherwise the induced law of
  the block's next node (``top_k2`` candidates for trees; same as ``N_fresh``
  for chains).  Costs V times one single-token enumeration (V^3 for sampled
  drafts): meant for small vocabularies.

  Args:
    z1, p1, q1: [V] step-1 target logits, target distribution, draft distribution.
    z2, p2, q2: [V, V] step-2 inputs; row y1 conditions on first token y1.
    draft, top_k, chunk_size, max_support: as in :func:`induced_parts`.
    top_k2: candidates per depth-1 tree node (default ``top_k``).
    draft_length: K (chain) or tree depth; 1 means the second token after an
      accepted first draft is the bonus token.

  Returns:
    [V, V] joint P(y1, y2); ``.sum(1)`` is the first-token law.
  """
  if not (isinstance(draft_length, int) and draft_length >= 1):
    raise ValueError(f"draft_length={draft_length!r} must be an integer >= 1")
  top_k2 = top_k if top_k2 is None else top_k2
  v = p1.shape[-1]
  if z2.shape != (v, v) or p2.shape != (v, v) or q2.shape != (v, v):
    raise ValueError(f"z2, p2, q2 must be [V, V] = {(v, v)}; got {z2.shape}, {p2.shape}, "
                     f"{q2.shape}")
  kw = dict(draft=draft, chunk_size=chunk_size, max_support=max_support)
  first = induced_parts(rule, z1, p1, q1, top_k=top_k, **kw)
  fresh = induced_parts(rule, z2, p2, q2, top_k=top_k, **kw).dist  # [V, V]
  if draft_length == 1:
    after_acc = bonus_distribution(rule, z2, p2)
  elif draft == "topk" and top_k2 != top_k:
    after_acc = induced_parts(rule, z2, p2, q2, top_k=top_k2, **kw).dist
  else:
    after_acc = fresh
  return first.accepted[:, None] * after_acc + first.corrected[:, None] * fresh
