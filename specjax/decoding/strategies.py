"""Chain vs tree verification: the part of one speculative step that depends on
the draft's shape, one driver per shape (``drafter.strategy``).

A strategy is a stateless, hashable object whose one method the speculative
step (:func:`specjax.decoding.speculative.speculative_step`) calls after the
drafter's ``propose`` and the policy's choice::

    verdict = strategy.verify(loop, inputs, target_cache, Round(last[B], proposal,
                              gamma[B], active[B], u_keys[B], verify_keys[B]))

``loop`` (:class:`~specjax.decoding.loop_state.SpecLoop`) holds the static
settings (the target, the verify buckets, ``depth``), ``inputs``
(:class:`~specjax.decoding.loop_state.SpecInputs`) the traced ones (the target's
params, the rule, the target's sampling), :class:`Round` this round's drafts.

* :data:`CHAIN` -- the target runs over ``[last, x_1..x_b]`` (``b`` the smallest
  verify-length bucket covering ``max(gamma)``, :mod:`specjax.decoding.buckets`;
  K without buckets), and the target's distributions and the rule are computed
  over those ``b`` drafts only.  The rule is a path rule
  (:mod:`specjax.verifiers.path`): a node rule through
  :class:`~specjax.verifiers.path.NodePathRule`, block verification and the
  other path rules as they are; ``num_accepted + 1`` tokens are committed to the
  target cache (per-row cursor).
* :data:`TREE` -- the target runs over the root and every node under the
  ancestor mask at positions prefix + depth; the rule is a tree rule
  (:mod:`specjax.verifiers.tree_rule`): a node rule through
  :class:`~specjax.verifiers.tree_rule.NodeTreeRule`, traversal verification as
  it is (a chain-only path rule such as block is refused); the accepted
  root-to-node path moves to contiguous cache slots (``kv_cache.gather_path``).

Either way the step gets the same :class:`Verdict`, so everything after
verification (drafter / policy commit, output, statistics) is shared.  The
emitted token is drawn from the decision's ``emit_dist`` with the row's
``verify_keys``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from specjax.decoding.buckets import bucket_index
from specjax.decoding.loop_state import SpecInputs, SpecLoop
from specjax.decoding.proposal import Proposal
from specjax.decoding.tree import ancestor_mask, with_root
from specjax.distributions import probs_from_logits, sample_from_probs
from specjax.models import kv_cache as kvc
from specjax.verifiers.path import PathDecision, PathRule, as_path_rule
from specjax.verifiers.tree_rule import TreeRule, as_tree_rule

__all__ = ["Round", "Verdict", "ChainStrategy", "TreeStrategy", "CHAIN", "TREE",
           "check_rule_for_strategy"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Round:
  """This round's drafts and randomness, per row (B rows).

  Attributes:
    last: [B] int32 the token emitted last round (in no cache yet).
    proposal: the drafter's :class:`Proposal`.
    gamma: [B] int32 drafts verified per row (chains: 0..K; trees: N, unused).
    active: [B] bool rows still RUNNING (the others commit nothing).
    u_keys: [B] PRNG keys of the acceptance uniforms.
    verify_keys: [B] PRNG keys of the emitted token.
  """

  last: jax.Array
  proposal: Proposal
  gamma: jax.Array
  active: jax.Array
  u_keys: jax.Array
  verify_keys: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Verdict:
  """What the target kept this round, per row (D = ``loop.depth``, the most drafts a
  round accepts).

  Attributes:
    cache: the target's KV cache with ``num_accepted + 1`` tokens committed for
      active rows (``last`` and the accepted drafts); idle rows unchanged.
    num_accepted: [B] int32 accepted drafts, ``0..D``.
    token: [B] int32 the token emitted after them (correction or bonus).
    path_drafts: [B, D] int32 the drafts along the verified path, whose first
      ``num_accepted`` are the accepted ones: a chain's K drafts; a tree's
      accepted path, then the root token.  Only the first ``num_accepted`` are
      committed.
    accepted: [B, D] bool draft position i accepted.
    num_relaxed: [B] int32 acceptances only a lossy relaxation allowed.
    hidden: [n_sel, B, D+1, H] the target's selected hidden states at ``last``
      and the path (what the drafter commits), or None when none are selected.
    processed: [] int32 tokens the target forward processed per row.
    target_logits: [B, D+1, V] the target's logits at ``last`` and the path (row j:
      the next token's), when the loop's drafter reads them (``loop.path_logits``:
      an adapting drafter learns from them), else None.
  """

  cache: kvc.KVCache
  num_accepted: jax.Array
  token: jax.Array
  path_drafts: jax.Array
  accepted: jax.Array
  num_relaxed: jax.Array
  hidden: Optional[jax.Array]
  processed: jax.Array
  target_logits: Optional[jax.Array] = None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _BucketRun:
  """One verify bucket's outputs, padded to K drafts (the branches of the switch).

  Attributes:
    decision: the rule's :class:`PathDecision` per row ([B] / [B, V]).
    hidden: [n_sel, B, K+1, H] or None.
    cache_out: the written cache (no switch), or the new keys and values ``(k, v)``,
      each ``[L, B, K+1, ...]`` (inside a switch, written once after it).
    processed: [] int32 tokens the forward processed per row.
    logits: [B, K+1, V] the target's logits (``loop.path_logits``), else None.
  """

  decision: PathDecision
  hidden: Optional[jax.Array]
  cache_out: object
  processed: jax.Array
  logits: Optional[jax.Array] = None


def _pad_axis(x, size: int, axis: int):
  pad = [(0, 0)] * x.ndim
  pad[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, pad)


def _hidden_at(hidden, node_ids):
  """``hidden [n_sel, B, T, H]`` at ``node_ids [B, D+1]`` -> ``[n_sel, B, D+1, H]``
  (None stays None)."""
  if hidden is None:
    return None
  return jnp.take_along_axis(hidden, node_ids[None, :, :, None], axis=2)


def _relaxed(decision, num_accepted):
  """``[B] int32`` relaxed acceptances of a decision (0 where the rule does not count)."""
  if decision.num_relaxed is None:
    return jnp.zeros_like(num_accepted)
  return decision.num_relaxed.astype(jnp.int32)


def check_rule_for_strategy(rule, tree: bool) -> None:
  """``ValueError`` (before tracing) for a chain-only path rule (block) on a tree:
  trees take node rules and tree rules (traversal verification)."""
  if tree and isinstance(rule, PathRule) and not isinstance(rule, TreeRule):
    raise ValueError(
        f"verifier {type(rule).__name__} ({rule.name!r}) is a path rule for chains, but the "
        f"drafter proposes trees: trees need a tree path rule (verifiers.available('tree'), "
        f"e.g. 'traversal') or a node rule (verifiers.available())")


class ChainStrategy:
  """K drafts in a row, verified by a path rule (module docstring)."""

  tree = False

  def verify(self, loop: SpecLoop, inputs: SpecInputs, cache: kvc.KVCache, rnd: Round
             ) -> Verdict:
    proposal, gamma = rnd.proposal, rnd.gamma
    rule = as_path_rule(inputs.verifier)
    x, q = proposal.tokens, proposal.q
    # A sampled chain's q is its node distribution (validate_pair refuses the rest).
    q_node = q if proposal.q_node is None else proposal.q_node
    b, k = x.shape
    u = jax.vmap(lambda kk: jax.random.uniform(kk, (k,)))(rnd.u_keys)
    switched = loop.buckets is not None

    def verify_first(n: int):
      """The round when every row offers at most ``n`` drafts (``gamma <= n``): the
      forward over ``n + 1`` tokens, then the target's distributions and the rule over
      the first ``max(n, 1)`` drafts only -- the rule stops at ``gamma``, so the rest
      never matter, and ``u`` is sliced, not redrawn, so every bucket decides exactly
      as the full length would.

      Inside a bucket switch the forward does not write the cache: each branch
      returns its new keys and values padded to K + 1 tokens and the cache is
      written once after the switch (in place in the loop's carry; a branch that
      wrote it would make XLA copy the whole cache into and out of the switch)."""
      def run(_) -> _BucketRun:
        t_in = jnp.concatenate([rnd.last[:, None], x[:, :n]], axis=1)  # [B, n+1]
        pos = cache.lengths[:, None] + jnp.arange(n + 1)[None, :]
        o = loop.target.apply(inputs.target_params, t_in, pos, cache,
                              write_cache=not switched)
        cache_out = (o.cache if not switched
                     else tuple(_pad_axis(kv, k + 1, 2) for kv in o.new_kv))  # [L, B, K+1, ..]
        p = probs_from_logits(o.logits, inputs.sampling)  # [B, n+1, V]
        m = max(n, 1)  # with n = 0 (gamma = 0) the rule reads position 0 only
        z, p = _pad_axis(o.logits, m + 1, 1), _pad_axis(p, m + 1, 1)
        dec = jax.vmap(rule.verify_path)(z, p, q[:, :m], x[:, :m], u[:, :m], gamma,
                                         q_node[:, :m])
        hidden = None if o.hidden_states is None else _pad_axis(o.hidden_states, k + 1, 2)
        logits = _pad_axis(o.logits, k + 1, 1) if loop.path_logits else None
        return _BucketRun(dec, hidden, cache_out, jnp.int32(n + 1), logits)
      return run

    if not switched:
      run = verify_first(k)(None)
      written = run.cache_out
    else:
      run = jax.lax.switch(bucket_index(loop.buckets, gamma),
                           [verify_first(n) for n in loop.buckets], None)
      written = kvc.write_layers(cache, *run.cache_out)
    nacc = run.decision.num_accepted.astype(jnp.int32)
    token = jax.vmap(sample_from_probs)(rnd.verify_keys, run.decision.emit_dist)
    accepted = jnp.arange(k)[None, :] < nacc[:, None]
    node_ids = jnp.broadcast_to(jnp.arange(k + 1)[None, :], (b, k + 1))
    return Verdict(kvc.commit(written, jnp.where(rnd.active, nacc + 1, 0)), nacc, token, x,
                   accepted, _relaxed(run.decision, nacc), _hidden_at(run.hidden, node_ids),
                   run.processed, run.logits)


class TreeStrategy:
  """A draft tree verified by a tree rule (module docstring)."""

  tree = True

  def verify(self, loop: SpecLoop, inputs: SpecInputs, cache: kvc.KVCache, rnd: Round
             ) -> Verdict:
    # Every node is verified (gamma and buckets unused: no verify-length policy for trees).
    check_rule_for_strategy(inputs.verifier, tree=True)
    rule = as_tree_rule(inputs.verifier)
    proposal, depth, active, last = rnd.proposal, loop.depth, rnd.active, rnd.last
    b, n_nodes = proposal.tokens.shape
    x_full = jnp.concatenate([last[:, None], proposal.tokens], 1)  # [B, N+1]
    parents = with_root(proposal.parents)  # [B, N+1]
    depths = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), proposal.depths], 1)
    mask = jax.vmap(ancestor_mask)(parents)  # [B, N+1, N+1]
    o = loop.target.apply(inputs.target_params, x_full, cache.lengths[:, None] + depths, cache,
                          attn_mask=mask)
    p = probs_from_logits(o.logits, inputs.sampling)  # [B, N+1, V]
    q_full = jnp.concatenate([jnp.zeros_like(proposal.q[:, :1]), proposal.q], 1)
    u = jax.vmap(lambda kk: jax.random.uniform(kk, (n_nodes + 1,)))(rnd.u_keys)
    if proposal.q_node is None:  # validate_pair: the rule does not need it
      dec = jax.vmap(rule.verify_tree_path)(o.logits, p, q_full, x_full, parents, u)
    else:
      dec = jax.vmap(lambda *a: rule.verify_tree_path(*a[:6], q_node=a[6]))(
          o.logits, p, q_full, x_full, parents, u, proposal.q_node)
    token = jax.vmap(sample_from_probs)(rnd.verify_keys, dec.emit_dist)
    nacc = jnp.minimum(dec.num_accepted, depth)
    path = dec.path[:, 1:depth + 1]  # [B, D] tree indices of accepted nodes (root excluded)
    gathered = kvc.gather_path(o.cache, path, jnp.where(active, nacc, 0))
    t_cache = dataclasses.replace(
        gathered, lengths=jnp.where(active, gathered.lengths, cache.lengths))
    node_ids = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), path], 1)  # [B, D+1]
    path_drafts = jnp.take_along_axis(x_full, path, 1)  # [B, D]
    accepted = jnp.arange(depth)[None, :] < nacc[:, None]
    logits = (jnp.take_along_axis(o.logits, node_ids[:, :, None], 1) if loop.path_logits
              else None)  # [B, D+1, V]
    return Verdict(t_cache, nacc, token, path_drafts, accepted, _relaxed(dec, nacc),
                   _hidden_at(o.hidden_states, node_ids), jnp.int32(n_nodes + 1), logits)


CHAIN = ChainStrategy()
TREE = TreeStrategy()
