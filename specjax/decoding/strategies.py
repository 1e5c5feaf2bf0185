"""Chain vs tree speculation: the part of one speculative step that depends on
the draft's shape, supplied by the drafter (``drafter.strategy``).

A strategy is a stateless, hashable object with two methods that the one
speculative step (:func:`specjax.decoding.speculative.speculative_step`)
calls in order::

    proposal, d_state = strategy.propose(drafter, draft_params, d_state,
                                         prev[B], last[B], keys[B])
    verdict = strategy.verify(VerifyInputs(target, depth, buckets, target_params,
                                           target_cache, verifier, sampling, last[B],
                                           proposal, gamma[B], u_keys[B],
                                           verify_keys[B], active[B]))

* :data:`CHAIN` -- ``drafter.draft`` proposes K tokens; the target runs over
  ``[last, x_1..x_b]`` (``b`` the smallest verify-length bucket covering
  ``max(gamma)``, K without a policy), and the target's distributions and the
  rule are computed over those ``b`` drafts only; the rule accepts a prefix --
  ``verify_chain`` for a node rule, ``verify_path`` for a path rule
  (:mod:`specjax.verifiers.path`, e.g. block verification); ``n + 1`` tokens
  are committed to the target cache (per-row cursor).
* :data:`TREE` -- ``drafter.draft_tree`` proposes N nodes (``tree.py``
  layout); the target runs over the root and every node under the ancestor
  mask at positions prefix + depth; ``verify_tree`` accepts one root-to-node
  path, which ``kv_cache.gather_path`` moves to contiguous slots and commits.
  A node rule goes through ``verify_tree``; a tree rule
  (:mod:`specjax.verifiers.tree_rule`, e.g. traversal verification) through
  ``verify_tree_path``; a chain-only path rule (block) is refused.

Either way the step gets the same :class:`Verdict`, so everything after
verification (drafter / policy commit, output, statistics) is shared.
``depth`` is ``drafter.max_accepted``: the most drafts one step can accept
(K for a chain, the tree depth for a tree).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp

from specjax.decoding.proposal import Proposal
from specjax.decoding.tree import ancestor_mask, with_root
from specjax.distributions import SamplingConfig, probs_from_logits, sample_from_probs
from specjax.models import kv_cache as kvc
from specjax.verifiers.base import TreeResult, verify_chain, verify_tree
from specjax.verifiers.path import PathRule, verify_path_batch
from specjax.verifiers.tree_rule import TreeRule, verify_tree_rule_batch

__all__ = ["Proposal", "VerifyInputs", "Verdict", "ChainStrategy", "TreeStrategy", "CHAIN",
           "TREE", "check_rule_for_strategy"]


def _static():
  return dataclasses.field(metadata=dict(static=True))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class VerifyInputs:
  """Everything ``strategy.verify`` reads in one step (B rows, D = ``depth``).

  Static (they select the compiled program):

  Attributes:
    target: the target ``Model``.
    depth: D, the most drafts one step can accept (``drafter.max_accepted``).
    buckets: sorted verify lengths the chain forward is compiled for (a
      policy's or ``drafter.verify_buckets``), or None: always K.

  Traced:

  Attributes:
    target_params: the target's decode params.
    cache: the target's KV cache before this step (``lengths [B]``).
    verifier: the rule, a node rule or (chains) a path rule; a pytree whose
      float hyperparameters are traced.
    sampling: the target's ``SamplingConfig``.
    last: [B] int32 the token emitted last step (in no cache yet).
    proposal: the drafter's :class:`Proposal` (chains: ``q_node`` filled).
    gamma: [B] int32 drafts verified per row (0..K; trees: N, unused).
    u_keys: [B] PRNG keys for the acceptance uniforms.
    verify_keys: [B] PRNG keys for the emitted token.
    active: [B] bool rows still RUNNING (others commit nothing).
  """

  target: Any = _static()
  depth: int = _static()
  buckets: Optional[tuple] = _static()
  target_params: Any
  cache: kvc.KVCache
  verifier: Any
  sampling: SamplingConfig
  last: jax.Array
  proposal: Proposal
  gamma: jax.Array
  u_keys: jax.Array
  verify_keys: jax.Array
  active: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Verdict:
  """What the target kept this step, per row (D = ``depth``, the most drafts a step accepts).

  Attributes:
    cache: the target's KV cache with ``num_accepted + 1`` tokens committed for
      active rows (``last`` and the accepted drafts); idle rows unchanged.
    num_accepted: [B] int32 accepted drafts, ``0..D``.
    token: [B] int32 the token emitted after them (correction or bonus).
    path_tokens: [B, D] int32 the accepted drafts in order (valid up to ``num_accepted``).
    accepted: [B, D] bool draft position i accepted.
    num_relaxed: [B] int32 acceptances only a lossy relaxation allowed.
    hidden: [n_sel, B, D+1, H] the target's selected hidden states at ``last``
      and the path (what the drafter commits), or None when none are selected.
    processed: [] int32 tokens the target forward processed per row.
  """

  cache: kvc.KVCache
  num_accepted: jax.Array
  token: jax.Array
  path_tokens: jax.Array
  accepted: jax.Array
  num_relaxed: jax.Array
  hidden: Optional[jax.Array]
  processed: jax.Array


def _pad_axis(x, size: int, axis: int):
  pad = [(0, 0)] * x.ndim
  pad[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, pad)


def _chain_forward(target, target_params, t_cache, last, x, n: int, write_cache: bool = True):
  """Target forward over ``[last, x_1..x_n]`` (``n`` static, ``<= K``): the model's
  output (``logits [B, n+1, V]``, ``hidden_states [n_sel, B, n+1, H]`` or None, the
  cache written -- or, ``write_cache=False``, the new keys and values in ``new_kv``)."""
  t_in = jnp.concatenate([last[:, None], x[:, :n]], axis=1)  # [B, n+1]
  pos = t_cache.lengths[:, None] + jnp.arange(n + 1)[None, :]
  return target.apply(target_params, t_in, pos, t_cache, write_cache=write_cache)


def _bucket_index(gamma, buckets: tuple):
  """Index into ``buckets`` (sorted, distinct, the last = K) of the smallest verify
  length covering every row's ``gamma [B]``: [] int32."""
  idx = jnp.sum(jnp.asarray(buckets)[None, :] < jnp.max(gamma)).astype(jnp.int32)
  return jnp.minimum(idx, len(buckets) - 1)


def _hidden_at(hidden, node_ids):
  """``hidden [n_sel, B, T, H]`` at ``node_ids [B, D+1]`` -> ``[n_sel, B, D+1, H]``
  (None stays None)."""
  if hidden is None:
    return None
  return jnp.take_along_axis(hidden, node_ids[None, :, :, None], axis=2)


def check_rule_for_strategy(rule, tree: bool) -> None:
  """``ValueError`` (before tracing) for a chain-only path rule (block) on a tree:
  trees take node rules and tree rules (traversal verification)."""
  if tree and isinstance(rule, PathRule) and not isinstance(rule, TreeRule):
    raise ValueError(
        f"verifier {type(rule).__name__} ({rule.name!r}) is a path rule for chains, but the "
        f"drafter proposes trees: trees need a tree path rule (verifiers.available('tree'), "
        f"e.g. 'traversal') or a node rule (verifiers.available())")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _ChainDecision:
  """One step's chain verification for every row (K drafts).

  Attributes:
    num_accepted: [B] int32 accepted drafts, 0..gamma.
    token: [B] int32 the emitted token.
    accepted: [B, K] bool draft i accepted.
    num_relaxed: [B] int32 acceptances only a lossy relaxation allowed.
  """

  num_accepted: jax.Array
  token: jax.Array
  accepted: jax.Array
  num_relaxed: jax.Array


def _node_chain(rule, z, p, q, x, u, keys, gamma, q_node) -> _ChainDecision:
  """A node rule over every row: ``verify_chain`` (z, p [B, K+1, V]; q, q_node
  [B, K, V]; x, u [B, K]; keys, gamma [B])."""
  res = jax.vmap(lambda zz, pp, qq, xx, uu, kk, g, qn: verify_chain(
      rule, zz, pp, qq, xx, uu, kk, num_valid=g, q_node=qn))(z, p, q, x, u, keys, gamma, q_node)
  return _ChainDecision(res.num_accepted, res.token, res.accepted,
                        jnp.sum(res.relaxed, 1).astype(jnp.int32))


def _path_chain(rule: PathRule, z, p, q, x, u, keys, gamma, q_node) -> _ChainDecision:
  """A path rule over every row (shapes as :func:`_node_chain`): ``verify_path`` with
  ``length = gamma``; the token is drawn from ``emit_dist`` with the row's key; the
  accepted drafts are the leading ``num_accepted``; no relaxed acceptances."""
  dec = verify_path_batch(rule, z, p, q, x, u, length=gamma, q_node=q_node)
  nacc = dec.num_accepted.astype(jnp.int32)
  token = jax.vmap(sample_from_probs)(keys, dec.emit_dist)
  accepted = jnp.arange(x.shape[1])[None, :] < nacc[:, None]
  return _ChainDecision(nacc, token, accepted, jnp.zeros_like(nacc))


class ChainStrategy:
  """K drafts in a row, verified by the rule (see the module docstring)."""

  tree = False

  def propose(self, drafter, params, state, prev, last, keys, gate=None
              ) -> tuple[Proposal, Any]:
    """The drafter's chain; ``gate`` (a policy's draft gate) stops drafting early
    where the drafter supports it (``gates_drafting``)."""
    if gate is not None and drafter.gates_drafting:
      proposal, state = drafter.draft(params, state, prev, last, keys, gate=gate)
    else:
      proposal, state = drafter.draft(params, state, prev, last, keys)
    if proposal.q_node is None:
      # A sampled chain's q is its node distribution (validate_pair refuses the rest).
      proposal = dataclasses.replace(proposal, q_node=proposal.q)
    return proposal, state

  def verify(self, inputs: VerifyInputs) -> Verdict:
    proposal, gamma, verifier = inputs.proposal, inputs.gamma, inputs.verifier
    x, q, q_node = proposal.tokens, proposal.q, proposal.q_node
    b, k = x.shape
    u = jax.vmap(lambda kk: jax.random.uniform(kk, (k,)))(inputs.u_keys)
    decide = _path_chain if isinstance(verifier, PathRule) else _node_chain

    def verify_first(n: int):
      """The step when every row offers at most ``n`` drafts (``gamma <= n``): the
      forward over ``n + 1`` tokens, then the target's distributions and the rule over
      the first ``max(n, 1)`` drafts only -- the rule stops at ``gamma``, so the rest
      never matter, and ``u`` and the keys are sliced, not redrawn, so every bucket
      decides exactly as the full length would.  Outputs are padded to K.

      Inside a bucket switch the forward does not write the cache: each branch
      returns its new keys and values padded to K + 1 tokens and the cache is
      written once after the switch (in place in the loop's carry; a branch that
      wrote it would make XLA copy the whole cache into and out of the switch)."""
      def run(_):
        o = _chain_forward(inputs.target, inputs.target_params, inputs.cache, inputs.last, x,
                           n, write_cache=not switched)
        z, hidden = o.logits, o.hidden_states
        o_kv = (o.cache if not switched
                else tuple(_pad_axis(kv, k + 1, 2) for kv in o.new_kv))  # [L, B, K+1, ..]
        p = probs_from_logits(z, inputs.sampling)  # [B, n+1, V]
        m = max(n, 1)  # with n = 0 (gamma = 0) the rule reads position 0 only
        z, p = _pad_axis(z, m + 1, 1), _pad_axis(p, m + 1, 1)
        res = decide(verifier, z, p, q[:, :m], x[:, :m], u[:, :m], inputs.verify_keys, gamma,
                     q_node[:, :m])
        res = dataclasses.replace(res, accepted=_pad_axis(res.accepted, k, 1))
        hidden = None if hidden is None else _pad_axis(hidden, k + 1, 2)
        return res, hidden, o_kv, jnp.int32(n + 1)
      return run

    buckets = (None if inputs.buckets is None
               else tuple(sorted(set(int(v) for v in inputs.buckets))))
    switched = buckets is not None and len(buckets) > 1  # (K,) alone: no switch
    if not switched:
      res, hidden, o_cache, processed = verify_first(k)(None)
    else:
      res, hidden, (k_new, v_new), processed = jax.lax.switch(
          _bucket_index(gamma, buckets), [verify_first(n) for n in buckets], None)
      o_cache = kvc.write_layers(inputs.cache, k_new, v_new)
    nacc = res.num_accepted
    cache = kvc.commit(o_cache, jnp.where(inputs.active, nacc + 1, 0))
    node_ids = jnp.broadcast_to(jnp.arange(k + 1)[None, :], (b, k + 1))
    return Verdict(cache, nacc, res.token, x, res.accepted, res.num_relaxed,
                   _hidden_at(hidden, node_ids), processed)


def _tree_rule_tree(rule: TreeRule, z, p, q, x, parents, u, keys, q_node) -> TreeResult:
  """A tree rule over every row (z, p, q [B, N+1, V]; x, parents, u [B, N+1]; keys [B];
  q_node [B, N+1, V] or None): ``verify_tree_path``; the token is drawn from
  ``emit_dist`` with the row's key; no relaxed acceptances."""
  dec = verify_tree_rule_batch(rule, z, p, q, x, parents, u, q_node=q_node)
  token = jax.vmap(sample_from_probs)(keys, dec.emit_dist)
  return TreeResult(dec.path[:, 1:], dec.num_accepted, token, jnp.zeros_like(dec.num_accepted),
                    dec.emit_dist)


class TreeStrategy:
  """A draft tree verified by ``verify_tree`` or a tree rule (see the module docstring)."""

  tree = True

  def propose(self, drafter, params, state, prev, last, keys, gate=None
              ) -> tuple[Proposal, Any]:
    del gate  # trees have no verify-length policy
    return drafter.draft_tree(params, state, prev, last, keys)

  def verify(self, inputs: VerifyInputs) -> Verdict:
    # Every node is verified (gamma and buckets unused: no verify-length policy for trees).
    check_rule_for_strategy(inputs.verifier, tree=True)
    target, t_cache, verifier, last = inputs.target, inputs.cache, inputs.verifier, inputs.last
    proposal, depth, active = inputs.proposal, inputs.depth, inputs.active
    q, q_node = proposal.q, proposal.q_node
    b, n_nodes = proposal.tokens.shape
    x_full = jnp.concatenate([last[:, None], proposal.tokens], 1)  # [B, N+1]
    parents = with_root(proposal.parents)  # [B, N+1]
    depths = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), proposal.depths], 1)
    mask = jax.vmap(ancestor_mask)(parents)  # [B, N+1, N+1]
    o = target.apply(inputs.target_params, x_full, t_cache.lengths[:, None] + depths, t_cache,
                     attn_mask=mask)
    z = o.logits  # [B, N+1, V]
    p = probs_from_logits(z, inputs.sampling)
    q_full = jnp.concatenate([jnp.zeros_like(q[:, :1]), q], 1)
    u = jax.vmap(lambda kk: jax.random.uniform(kk, (n_nodes + 1,)))(inputs.u_keys)
    if isinstance(verifier, TreeRule):
      res = _tree_rule_tree(verifier, z, p, q_full, x_full, parents, u, inputs.verify_keys,
                            q_node)
    elif q_node is None:  # validate_pair: the verifier does not need it
      res = jax.vmap(lambda *a: verify_tree(verifier, *a))(z, p, q_full, x_full, parents, u,
                                                            inputs.verify_keys)
    else:
      res = jax.vmap(lambda *a, qn: verify_tree(verifier, *a, q_node=qn))(
          z, p, q_full, x_full, parents, u, inputs.verify_keys, qn=q_node)
    nacc = jnp.minimum(res.num_accepted, depth)
    path = res.path[:, :depth]  # [B, D] tree indices of accepted nodes
    gathered = kvc.gather_path(o.cache, path, jnp.where(active, nacc, 0))
    cache = dataclasses.replace(
        gathered, lengths=jnp.where(active, gathered.lengths, t_cache.lengths))
    node_ids = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), path], 1)  # [B, D+1]
    path_tokens = jnp.take_along_axis(x_full, path, 1)  # [B, D]
    accepted = jnp.arange(depth)[None, :] < nacc[:, None]
    return Verdict(cache, nacc, res.token, path_tokens, accepted, res.num_relaxed,
                   _hidden_at(o.hidden_states, node_ids), jnp.int32(n_nodes + 1))


CHAIN = ChainStrategy()
TREE = TreeStrategy()
