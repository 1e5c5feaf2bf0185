"""Path rules: verification that decides over a whole drafted chain at once.

A node rule (:mod:`specjax.verifiers.base`) decides one position at a time.
A *path rule* sees the whole drafted chain of one row -- the drafts
``x_1..x_K``, the draft distributions ``Q_1..Q_K``, the target's
``P_1..P_{K+1}`` (and raw logits) along the path and ``K`` uniforms -- and
returns how many drafts it accepts and the distribution of the token emitted
after them (docs/path_rules.md, "The path-rule protocol").  Block
verification (:mod:`specjax.verifiers.block`) is the first one; a node rule
used on a chain is the special case, through :class:`NodePathRule`.

Indexing (one row, 0-based arrays, the papers' 1-based names)::

    z, p  [K+1, V]   row i is the target at draft position i+1 (given x_1..x_i):
                     p[i] = P_{i+1}; p[K] = P_{K+1} is the bonus position
    q     [K, V]     q[i] = Q_{i+1}, the distribution x[i] = x_{i+1} was drawn from
    x     [K] int    the drafts
    u     [K]        uniforms in [0, 1), u[i] belongs to draft x_{i+1}
    length  [] int   drafts actually offered, 0..K (ragged chains: EOS, budget);
                     positions >= length are not drafted and never read

A path rule is a frozen dataclass and a pytree (:mod:`specjax.hyperparams`:
float fields are traced, so one compiled program serves a sweep) with three
pure methods over one row:

* ``verify_path(z, p, q, x, u, length=None, q_node=None) -> PathDecision`` --
  the sampled decision; ``num_accepted`` in ``0..length``, ``emit_dist`` [V].
* ``accept_length_law(z, p, q, x, length=None, q_node=None) -> [K+1]`` --
  the exact law of ``num_accepted`` given the drafts, the uniforms integrated
  out analytically (no sampling).  ``verify_path`` draws from exactly this
  law (tests/verifiers/test_path_rules.py checks it by Monte Carlo).
* ``emit_dists(z, p, q, x, length=None, q_node=None) -> [K+1, V]`` -- row
  ``t`` is the distribution of the emitted token given ``num_accepted = t``
  (zeros for ``t > length``, which has probability 0).

The exact analysis (:mod:`specjax.analysis.path_law`) is built from the last
two; the decoding loop calls the first on chains
(:mod:`specjax.decoding.strategies`).  ``q_node [K, V]`` is the drafter's full
distribution at each position: only node rules with ``needs_node_dist``
(CoS) read it, and it defaults to ``q`` (right for sampled drafts).

All three are jittable and ``jax.vmap``-able over rows (``length`` may be a
traced [B] array); :func:`verify_path_batch` is that vmap.

The two acceptance-length laws used so far, as functions of per-position
probabilities ``g [K]`` (0 beyond ``length``):

* *first failure* (node rules; ``g = a``, the acceptance probabilities):
  ``tau`` = number of leading ``u_i < a_i``;
  ``P(tau = t) = prod_{j<=t} a_j (1 - a_{t+1})`` with ``a_{K+1} = 0``.
* *largest success* (block verification; ``g = h``): ``tau`` = the largest
  ``i`` with ``u_i < h_i`` (0 if none);
  ``P(tau = t) = h_t prod_{j>t} (1 - h_j)`` with ``h_0 = 1``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from specjax.hyperparams import Hyperparams
from specjax.verifiers.base import NodeRule, _node_states


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PathDecision:
  """What a path rule decides for one row.

  Attributes:
    num_accepted: [] int32, the number ``tau`` of leading drafts accepted
      (``0..length``); the row emits ``x_1..x_tau`` and then one more token.
    emit_dist: [V] the distribution of that next token (a residual after a
      rejection, or the bonus distribution when every offered draft was
      accepted).  The caller draws the token.
    num_relaxed: [] int32 of the accepted drafts, those only a lossy relaxation
      accepted (the uniform fell between the strict rule's acceptance
      probability and the relaxed one), or None: the rule does not count them
      (the loop then counts 0).
  """

  num_accepted: jax.Array
  emit_dist: jax.Array
  num_relaxed: Optional[jax.Array] = None


# --- the two acceptance-length laws ------------------------------------------------------


def position_mask(k: int, length) -> jax.Array:
  """[K] bool: draft position i (0-based) is offered, i.e. ``i < length``."""
  return jnp.arange(k) < (k if length is None else length)


def first_failure_law(a: jax.Array) -> jax.Array:
  """[K+1] ``P(tau = t) = prod_{j<=t} a_j (1 - a_{t+1})`` (``a_{K+1} = 0``).

  ``a [K]``: acceptance probabilities, 0 at positions not offered.
  """
  reach = jnp.concatenate([jnp.ones((1,), a.dtype), jnp.cumprod(a)])  # P(tau >= t)
  stop = jnp.concatenate([1.0 - a, jnp.ones((1,), a.dtype)])
  return reach * stop


def first_failure_sample(a: jax.Array, u: jax.Array) -> jax.Array:
  """[] int32 number of leading ``u_i < a_i``: a draw from :func:`first_failure_law`."""
  return jnp.sum(jnp.cumprod((u < a).astype(jnp.int32))).astype(jnp.int32)


def largest_success_law(h: jax.Array) -> jax.Array:
  """[K+1] ``P(tau = t) = h_t prod_{j>t} (1 - h_j)`` (``h_0 = 1``).

  ``h [K]``: per-position success probabilities, 0 at positions not offered.
  """
  one = jnp.ones((1,), h.dtype)
  # after[t] = prod_{j > t} (1 - h_j), t = 0..K (after[K] = 1).
  after = jnp.concatenate([jnp.cumprod((1.0 - h)[::-1])[::-1], one])
  return jnp.concatenate([one, h]) * after


def largest_success_sample(h: jax.Array, u: jax.Array) -> jax.Array:
  """[] int32 the largest ``i`` (1-based) with ``u_i < h_i``, 0 if none: a draw from
  :func:`largest_success_law`."""
  idx = jnp.arange(1, h.shape[0] + 1, dtype=jnp.int32)
  return jnp.max(jnp.where(u < h, idx, 0), initial=0).astype(jnp.int32)


# --- the protocol ---------------------------------------------------------------------------


def residual_emit_dists(resid: jax.Array, p: jax.Array, length=None) -> jax.Array:
  """``[K+1, V]`` emitted-token distributions of a chain rule whose stop after
  ``t < length`` accepted drafts emits ``resid[t]`` normalised (``p[t]`` where it
  has no mass) and whose full acceptance emits the bonus ``p[length]``; rows past
  ``length`` are 0.  ``resid`` ``[K, V]`` unnormalised, ``p`` ``[K+1, V]``."""
  from specjax.distributions import safe_normalize
  k = resid.shape[0]
  n = k if length is None else length
  out = safe_normalize(resid, p[:k])  # [K, V]
  out = jnp.concatenate([out, jnp.zeros_like(out[:1])])  # [K+1, V]
  t = jnp.arange(k + 1)[:, None]
  return jnp.where(t < n, out, jnp.where(t == n, p, 0.0))


def check_path_shapes(z, p, q, x, u=None) -> tuple[int, int]:
  """``(K, V)`` from one row's arrays; ``ValueError`` naming the first bad shape."""
  if x.ndim != 1:
    raise ValueError(f"x must be [K] int drafts of one row; got shape {x.shape} "
                     "(use verify_path_batch for [B, K])")
  k = x.shape[0]
  if k < 1:
    raise ValueError("x must hold K >= 1 draft positions (pass length=0 for a row with no "
                     "drafts offered)")
  if q.ndim != 2 or q.shape[0] != k:
    raise ValueError(f"q must be [K, V] = [{k}, V]; got shape {q.shape}")
  v = q.shape[1]
  for name, arr in (("p", p), ("z", z)):
    if arr.shape != (k + 1, v):
      raise ValueError(f"{name} must be [K+1, V] = {(k + 1, v)}; got shape {arr.shape}")
  if u is not None and u.shape != (k,):
    raise ValueError(f"uniforms must be [K] = ({k},); got shape {u.shape}")
  return k, v


def _check_length(length, k: int):
  """A concrete ``length`` must lie in 0..K (a traced one is the caller's contract)."""
  if length is None:
    return
  try:
    n = int(length)
  except (TypeError, jax.errors.ConcretizationTypeError):  # traced: checked by the caller
    return
  if not 0 <= n <= k:
    raise ValueError(f"length={n} must be in 0..K = 0..{k}")


@dataclasses.dataclass(frozen=True)
class PathRule(Hyperparams):
  """Base class of path rules (module docstring; docs/path_rules.md).

  Subclasses implement :meth:`accept_length_law`, :meth:`emit_dists` and
  :meth:`verify_path`.  ``validate`` runs once at construction on concrete
  values and raises ``ValueError`` naming a bad hyperparameter.
  """

  name = "path"

  def __post_init__(self):
    self.validate()

  def validate(self) -> None:
    pass

  def verify_path(self, z: jax.Array, p: jax.Array, q: jax.Array, x: jax.Array,
                  u: jax.Array, length=None, q_node=None) -> PathDecision:
    """The sampled decision for one row (shapes in the module docstring)."""
    raise NotImplementedError(f"{type(self).__name__} must define verify_path")

  def accept_length_law(self, z: jax.Array, p: jax.Array, q: jax.Array, x: jax.Array,
                        length=None, q_node=None) -> jax.Array:
    """[K+1] exact ``P(num_accepted = t | drafts)``, t = 0..K; 0 for t > length."""
    raise NotImplementedError(f"{type(self).__name__} must define accept_length_law")

  def emit_dists(self, z: jax.Array, p: jax.Array, q: jax.Array, x: jax.Array,
                 length=None, q_node=None) -> jax.Array:
    """[K+1, V] row t: the emitted token's distribution given ``num_accepted = t``."""
    raise NotImplementedError(f"{type(self).__name__} must define emit_dists")

  @property
  def is_lossless(self) -> bool:
    """True when the rule provably reproduces the target distribution."""
    return False


@dataclasses.dataclass(frozen=True)
class NodePathRule(PathRule):
  """A node rule on a chain, as a path rule: token-level verification.

  Draft ``x_{i+1}`` is accepted iff ``u[i] < accept_prob(init(z[i], p[i]), q[i], x[i])``;
  the first rejection at position ``t`` emits from
  ``correction(on_reject(state_t, q[t], x[t]))``; if all ``length`` drafts are
  accepted the bonus is ``correction(init(z[length], p[length]))`` (docs/spec.md
  §2).  This is the one chain driver of a node rule: the decoding loop, the
  exact analysis and the tests all reach a node rule on a chain through it.
  The law of ``num_accepted`` is :func:`first_failure_law` of the acceptance
  probabilities.  An accepted draft whose uniform lies at or above the node
  rule's ``strict_accept_prob`` counts as relaxed (``num_relaxed``).

  Attributes:
    node: the node rule (a nested pytree: its float hyperparameters are traced).
  """

  node: NodeRule = None

  name = "node"

  def validate(self):
    if not isinstance(self.node, NodeRule):
      raise ValueError(f"node={self.node!r} must be a NodeRule (specjax.verifiers.base); "
                       f"a path rule needs no adapter")

  def _states_and_accept(self, z, p, q, x, length, q_node):
    k, _ = check_path_shapes(z, p, q, x)
    _check_length(length, k)
    states = _node_states(self.node, z[:k], p[:k], q if q_node is None else q_node)
    a = jax.vmap(self.node.accept_prob)(states, q, x)  # [K]
    a = jnp.where(position_mask(k, length), a, 0.0)
    return states, a

  def _bonus(self, z, p, i):
    return self.node.correction(self.node.init(z[i], p[i]))

  def accept_length_law(self, z, p, q, x, length=None, q_node=None):
    _, a = self._states_and_accept(z, p, q, x, length, q_node)
    return first_failure_law(a)

  def emit_dists(self, z, p, q, x, length=None, q_node=None):
    states, _ = self._states_and_accept(z, p, q, x, length, q_node)
    k = x.shape[0]
    n = k if length is None else length
    node = self.node
    reject = jax.vmap(lambda s, qq, xx: node.correction(node.on_reject(s, qq, xx)))(
        states, q, x)  # [K, V]
    bonus = jax.vmap(lambda zz, pp: node.correction(node.init(zz, pp)))(z, p)  # [K+1, V]
    t = jnp.arange(k + 1)[:, None]
    reject = jnp.concatenate([reject, jnp.zeros_like(reject[:1])])
    return jnp.where(t < n, reject, jnp.where(t == n, bonus, 0.0))

  def verify_path(self, z, p, q, x, u, length=None, q_node=None):
    check_path_shapes(z, p, q, x, u)
    states, a = self._states_and_accept(z, p, q, x, length, q_node)
    k = x.shape[0]
    n_valid = k if length is None else length
    tau = first_failure_sample(a, u)
    a_strict = jax.vmap(self.node.strict_accept_prob)(states, q, x)  # [K]
    relaxed = (jnp.arange(k) < tau) & (u >= a_strict)
    # Only the stopping position needs a [V] distribution: the correction after
    # rejecting x[tau], or the bonus at tau when every offered draft was accepted.
    i_rej = jnp.minimum(tau, k - 1)
    state = jax.tree.map(lambda leaf: leaf[i_rej], states)
    reject = self.node.correction(self.node.on_reject(state, q[i_rej], x[i_rej]))
    bonus = self._bonus(z, p, jnp.minimum(tau, k))
    return PathDecision(tau, jnp.where(tau >= n_valid, bonus, reject),
                        jnp.sum(relaxed).astype(jnp.int32))

  @property
  def is_lossless(self) -> bool:
    return self.node.is_lossless


def as_path_rule(rule) -> PathRule:
  """``rule`` itself if it is a path rule, :class:`NodePathRule` around a node rule."""
  if isinstance(rule, PathRule):
    return rule
  if isinstance(rule, NodeRule):
    return NodePathRule(rule)
  raise ValueError(f"rule={rule!r} is neither a PathRule nor a NodeRule")


def verify_path_batch(rule, z: jax.Array, p: jax.Array, q: jax.Array, x: jax.Array,
                      u: jax.Array, length=None, q_node=None) -> PathDecision:
  """:meth:`PathRule.verify_path` over a batch of rows (a node rule is wrapped).

  Args:
    rule: a path rule or a node rule.
    z, p: [B, K+1, V]; q: [B, K, V]; x: [B, K] int; u: [B, K].
    length: optional [B] int drafts offered per row (ragged), default K.
    q_node: optional [B, K, V] (node rules with ``needs_node_dist``).

  Returns:
    :class:`PathDecision` with ``num_accepted [B]`` and ``emit_dist [B, V]``.
  """
  rule = as_path_rule(rule)
  if length is None:
    length = jnp.full(x.shape[:1], x.shape[1], jnp.int32)
  fn = lambda *a: rule.verify_path(*a[:6], q_node=a[6] if len(a) > 6 else None)
  args = (z, p, q, x, u, length) + (() if q_node is None else (q_node,))
  return jax.vmap(fn)(*args)
