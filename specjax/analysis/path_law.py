"""Exact law of a chain's emitted block, for any path rule or node rule.

docs/path_rules.md, "Exact analysis".  For one context and a chain of K
drafts on a small vocabulary V, every drafted sequence ``x = (x_1..x_K)`` is
enumerated (``V^K`` of them), each with its probability under the drafter
``P(x) = prod_i Q_i(x_i | x_<i)``.  The uniforms are integrated out
analytically by the rule's own exact methods
(:class:`specjax.verifiers.path.PathRule`): ``accept_length_law`` gives
``P(tau = t | x)`` and ``emit_dists`` the emitted token's law given
``tau = t``.  So, with no sampling:

* the joint law of the emitted block ``(x_1..x_t, y)`` (t accepted drafts,
  then the emitted token y)::

    B_t(x_1..x_t, y) = sum_{x_{t+1..K}} P(x) P(tau = t | x) emit_t(y | x)

* the law of ``tau`` and the **expected number of accepted tokens**
  ``E[tau] = sum_x P(x) sum_t t P(tau = t | x)`` (tokens per target call is
  ``E[tau] + 1``);
* the law of the **first K+1 emitted tokens** when the block is followed by
  exact sampling from the target: ``sum_t B_t(s_1..s_{t+1})
  prod_{j>t+1} P_j(s_j | s_<j)``.  A rule is lossless at this context (Sun et
  al.'s validity) iff this equals the target's joint law
  ``prod_j P_j(s_j | s_<j)`` for every ``s`` -- by induction over rounds, a
  rule that is valid at every context makes the whole decoding loop sample
  from the target.

Node rules are analysed through :class:`~specjax.verifiers.path.NodePathRule`
(token-level verification with their own four functions), so "block accepts
at least as much as token-level at every context" and "lossless rules
reproduce the target" are checked exactly.

The target and the drafter are given by prefix: :class:`ChainTables` holds
``P_{i+1}(. | x_1..x_i)`` as an array of shape ``[V]*i + [V]`` for
``i = 0..K`` (``Q`` likewise for ``i = 0..K-1``); :func:`chain_tables`
builds it from functions of the prefix.  Leading batch axes (contexts) are
allowed on every table and mapped over; a rule is a traced pytree argument,
so one compiled program serves a sweep of its float hyperparameters.
Cost: ``V^K`` rows of the rule's path functions plus ``V^(K+1)`` outputs
per context -- meant for V <= ~8, K <= ~5.  This module never loads a model.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.verifiers.path import PathRule, as_path_rule


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ChainTables:
  """Target and drafter along every prefix of a K-draft chain (small V).

  Each table may carry the same leading batch axes ``[...]`` (contexts).

  Attributes:
    p: K+1 arrays; ``p[i]`` is ``[..., V]*(i+1)``: ``p[i][x_1, .., x_i, y] =
      P_{i+1}(y | x_1..x_i)``, the target after i drafts (``p[K]``: the bonus
      position).
    q: K arrays; ``q[i]`` is ``[..., V]*(i+1)``: ``Q_{i+1}(y | x_1..x_i)``, the
      distribution draft ``x_{i+1}`` is drawn from.
    z: K+1 raw-logit arrays shaped like ``p`` (rules such as MARS read them),
      or None: ``log p``.
    q_node: K arrays like ``q`` (the drafter's full distribution, read only by
      node rules with ``needs_node_dist``), or None: ``q``.
  """

  p: tuple
  q: tuple
  z: tuple | None = None
  q_node: tuple | None = None

  @property
  def num_draft(self) -> int:
    """K, the chain's draft length."""
    return len(self.q)

  @property
  def vocab(self) -> int:
    """V."""
    return self.p[0].shape[-1]

  @property
  def batch_shape(self) -> tuple:
    """Leading context axes."""
    return self.p[0].shape[:-1]


def chain_tables(p_fn: Callable[[tuple], Sequence[float]],
                 q_fn: Callable[[tuple], Sequence[float]], num_draft: int, vocab: int,
                 z_fn: Callable[[tuple], Sequence[float]] | None = None) -> ChainTables:
  """:class:`ChainTables` from functions of the prefix (one context).

  Args:
    p_fn: ``prefix -> [V]`` target distribution after the drafts ``prefix``
      (a tuple of ints of length 0..K).
    q_fn: ``prefix -> [V]`` draft distribution (prefix length 0..K-1).
    num_draft: K >= 1.
    vocab: V >= 1.
    z_fn: optional ``prefix -> [V]`` raw target logits (default ``log p``).
  """
  if not (isinstance(num_draft, int) and num_draft >= 1):
    raise ValueError(f"num_draft={num_draft!r} must be an integer >= 1")
  if not (isinstance(vocab, int) and vocab >= 1):
    raise ValueError(f"vocab={vocab!r} must be an integer >= 1")

  def table(fn, depth):
    rows = [np.asarray(fn(pre), np.float32) for pre in
            itertools.product(range(vocab), repeat=depth)]
    for pre, row in zip(itertools.product(range(vocab), repeat=depth), rows):
      if row.shape != (vocab,):
        raise ValueError(f"the function gave shape {row.shape} for prefix {pre}; expected "
                         f"({vocab},)")
    return jnp.asarray(np.stack(rows).reshape((vocab,) * (depth + 1)))

  p = tuple(table(p_fn, i) for i in range(num_draft + 1))
  q = tuple(table(q_fn, i) for i in range(num_draft))
  z = None if z_fn is None else tuple(table(z_fn, i) for i in range(num_draft + 1))
  return ChainTables(p=p, q=q, z=z)


def check_tables(tables: ChainTables) -> None:
  """``ValueError`` naming the first table of the wrong shape."""
  if not isinstance(tables, ChainTables):
    raise ValueError(f"tables={tables!r} must be a ChainTables (see chain_tables)")
  k = len(tables.q)
  if k < 1 or len(tables.p) != k + 1:
    raise ValueError(f"ChainTables needs K >= 1 draft tables q and K+1 target tables p; got "
                     f"{len(tables.q)} and {len(tables.p)}")
  lead, v = tables.p[0].shape[:-1], tables.p[0].shape[-1]
  groups = [("p", tables.p, k + 1), ("q", tables.q, k), ("z", tables.z, k + 1),
            ("q_node", tables.q_node, k)]
  for name, group, n in groups:
    if group is None:
      continue
    if len(group) != n:
      raise ValueError(f"ChainTables.{name} must hold {n} tables; got {len(group)}")
    for i, arr in enumerate(group):
      want = lead + (v,) * (i + 1)
      if tuple(arr.shape) != want:
        raise ValueError(f"ChainTables.{name}[{i}] must have shape {want} (batch {lead}, "
                         f"then V = {v} for each of the {i} prefix tokens and the next); "
                         f"got {tuple(arr.shape)}")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DraftLaws:
  """Per drafted sequence: its probability and the rule's exact decision law.

  N = V^K drafted sequences, in lexicographic order (x_1 slowest).

  Attributes:
    drafts: [N, K] int32 the drafted sequences.
    prob: [..., N] ``P(x) = prod_i Q_i(x_i | x_<i)``.
    law: [..., N, K+1] ``P(tau = t | x)``.
    emit: [..., N, K+1, V] the emitted token's law given x and ``tau = t``.
  """

  drafts: jax.Array
  prob: jax.Array
  law: jax.Array
  emit: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ChainLaw:
  """Exact laws of one round of chain verification (module docstring).

  Attributes:
    accept_length: [..., K+1] ``P(tau = t)``, the drafts integrated out.
    expected_accepted: [...] ``E[tau]``, the exact expected number of
      accepted drafts per round (tokens per target call: ``+ 1``).
    block: K+1 arrays; ``block[t]`` is ``[..., V]*(t+1)``, the joint law
      ``P(tau = t, x_1..x_t, y)`` of the emitted block.  All entries sum to 1.
    first_tokens: [..., V]*(K+1) law of the first K+1 emitted tokens when the
      block is followed by sampling from the target.
    target: [..., V]*(K+1) the target's joint law of K+1 tokens.
  """

  accept_length: jax.Array
  expected_accepted: jax.Array
  block: tuple
  first_tokens: jax.Array
  target: jax.Array

  @property
  def lossless_gap(self) -> jax.Array:
    """[...] ``max_s |first_tokens(s) - target(s)|``: 0 (up to float error) iff
    the rule is lossless at this context."""
    k1 = len(self.block)
    d = jnp.abs(self.first_tokens - self.target)
    return jnp.max(d.reshape(d.shape[:d.ndim - k1] + (-1,)), axis=-1)


# --- one context ---------------------------------------------------------------------


def _all_drafts(k: int, v: int) -> np.ndarray:
  """[V^K, K] every drafted sequence, lexicographic (x_1 slowest)."""
  return np.array(list(itertools.product(range(v), repeat=k)), np.int32).reshape(-1, k)


def _rows(group, drafts, upto):
  """Stack ``group[i][x_1..x_i]`` for i = 0..upto-1 into [N, upto, V]."""
  n = drafts.shape[0]
  out = []
  for i in range(upto):
    arr = group[i]
    idx = tuple(drafts[:, j] for j in range(i))
    out.append(arr[idx] if i else jnp.broadcast_to(arr, (n, arr.shape[-1])))
  return jnp.stack(out, axis=1)


def _log(p):
  return jnp.where(p > 0, jnp.log(jnp.where(p > 0, p, 1.0)), -jnp.inf)


def _draft_laws_one(rule: PathRule, tables: ChainTables, length) -> DraftLaws:
  k, v = len(tables.q), tables.p[0].shape[-1]
  drafts = jnp.asarray(_all_drafts(k, v))
  p = _rows(tables.p, drafts, k + 1)  # [N, K+1, V]
  z = _log(p) if tables.z is None else _rows(tables.z, drafts, k + 1)
  q = _rows(tables.q, drafts, k)  # [N, K, V]
  q_node = None if tables.q_node is None else _rows(tables.q_node, drafts, k)
  qx = jnp.take_along_axis(q, drafts[:, :, None], axis=2)[:, :, 0]  # [N, K]
  prob = jnp.prod(qx, axis=1)  # [N]

  def one(zz, pp, qq, xx, qn):
    return (rule.accept_length_law(zz, pp, qq, xx, length, q_node=qn),
            rule.emit_dists(zz, pp, qq, xx, length, q_node=qn))

  if q_node is None:
    law, emit = jax.vmap(lambda zz, pp, qq, xx: one(zz, pp, qq, xx, None))(z, p, q, drafts)
  else:
    law, emit = jax.vmap(one)(z, p, q, drafts, q_node)
  # Drafts of probability 0 never happen; their (possibly undefined) laws are dropped.
  live = prob > 0
  law = jnp.where(live[:, None], law, 0.0)
  emit = jnp.where(live[:, None, None], emit, 0.0)
  return DraftLaws(drafts=drafts, prob=prob, law=law, emit=emit)


def _expand(arr, ndim):
  """``arr`` [V]*m with trailing singleton axes up to ``ndim``."""
  return arr.reshape(arr.shape + (1,) * (ndim - arr.ndim))


def _chain_law_one(rule: PathRule, tables: ChainTables, length) -> ChainLaw:
  k, v = len(tables.q), tables.p[0].shape[-1]
  dl = _draft_laws_one(rule, tables, length)
  weights = dl.prob[:, None] * dl.law  # [N, K+1] P(x, tau = t)
  accept_length = jnp.sum(weights, axis=0)
  expected = jnp.sum(accept_length * jnp.arange(k + 1, dtype=accept_length.dtype))
  block = []
  for t in range(k + 1):
    m = weights[:, t, None] * dl.emit[:, t]  # [N, V]
    m = m.reshape((v,) * k + (v,))  # x_1..x_K, y
    block.append(jnp.sum(m, axis=tuple(range(t, k))) if t < k else m)  # [V]*(t+1)
  first, target = continued_law(block, tables.p)
  return ChainLaw(accept_length=accept_length, expected_accepted=expected, block=tuple(block),
                  first_tokens=first, target=target)


def continued_law(block, p_tables) -> tuple[jax.Array, jax.Array]:
  """``(first_tokens, target)``, both ``[V]*(K+1)`` for one context: the law of the
  first K+1 emitted tokens when the emitted block (``block[t]`` of shape
  ``[V]*(t+1)``, t = 0..K) is followed by exact sampling from the target
  (``p_tables[j]`` of shape ``[V]*(j+1)``, j = 0..K), and the target's own law."""
  n = len(p_tables)
  v = p_tables[0].shape[-1]
  # factor[j-1] = P_j(s_j | s_<j) as a [V]*(K+1) broadcastable array, j = 1..K+1.
  factors = [_expand(p_tables[j], n) for j in range(n)]
  target = functools.reduce(jnp.multiply, factors)
  first = jnp.zeros((v,) * n, target.dtype)
  for t in range(len(block)):
    cont = functools.reduce(jnp.multiply, factors[t + 1:], jnp.ones((), target.dtype))
    first = first + _expand(block[t], n) * cont
  return first, jnp.broadcast_to(target, (v,) * n)


# --- batched entry points ---------------------------------------------------------------


def _batched(fn, rule, tables: ChainTables, length):
  lead = tables.batch_shape
  b = int(np.prod(lead)) if lead else 1
  nl = len(lead)
  flat = jax.tree.map(lambda a: a.reshape((b,) + a.shape[nl:]), tables)
  if length is None:
    out = jax.vmap(lambda t: fn(rule, t, None))(flat)
  else:
    ln = jnp.broadcast_to(jnp.asarray(length, jnp.int32), lead).reshape(b)
    out = jax.vmap(lambda t, n: fn(rule, t, n))(flat, ln)
  return jax.tree.map(lambda a: a.reshape(lead + a.shape[1:]), out)


@jax.jit
def _chain_law_jit(rule, tables, length):
  return _batched(_chain_law_one, rule, tables, length)


@jax.jit
def _draft_laws_jit(rule, tables, length):
  return _batched(_draft_laws_one, rule, tables, length)


def _prepare(rule, tables, length):
  rule = as_path_rule(rule)
  check_tables(tables)
  if length is not None:
    try:
      arr = np.asarray(length)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
      return rule, tables  # traced: the caller's contract
    k = tables.num_draft
    if arr.dtype.kind not in "iu" or np.any(arr < 0) or np.any(arr > k):
      raise ValueError(f"length={length!r} must be integers in 0..K = 0..{k}")
  return rule, tables


def chain_law(rule, tables: ChainTables, length=None) -> ChainLaw:
  """Exact laws of one round of chain verification by ``rule`` (module docstring).

  Args:
    rule: a path rule (``verifiers.get("block")``) or a node rule (analysed
      as token-level verification through ``NodePathRule``).
    tables: :class:`ChainTables` (leading axes = contexts).
    length: optional int or [...] ints in 0..K, the drafts offered (ragged
      chains); default K.

  Returns:
    :class:`ChainLaw` with the leading context axes of ``tables``.
  """
  rule, tables = _prepare(rule, tables, length)
  return _chain_law_jit(rule, tables, length)


def draft_laws(rule, tables: ChainTables, length=None) -> DraftLaws:
  """Per drafted sequence: ``P(x)``, ``P(tau = t | x)`` and the emitted token's law.

  Same arguments as :func:`chain_law`; ``drafts`` carries no batch axes.
  """
  rule, tables = _prepare(rule, tables, length)
  out = _draft_laws_jit(rule, tables, length)
  k, v = tables.num_draft, tables.vocab
  return dataclasses.replace(out, drafts=jnp.asarray(_all_drafts(k, v)))


def expected_accepted(rule, tables: ChainTables, length=None) -> jax.Array:
  """[...] exact expected number of accepted drafts per round, ``E[tau]``."""
  return chain_law(rule, tables, length).expected_accepted
