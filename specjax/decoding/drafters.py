"""Drafters: propose K tokens (or a tree of N nodes) per row together with the
exact distribution q each was drawn from (docs/design.md "Drafter").

A drafter is a frozen dataclass and a pytree whose only leaves are its
sampling config's continuous values (traced under jit; everything else is
static); its params and state are pytrees passed in and out.  The protocol::

    state = drafter.prefill(params, tokens[B,P], lengths[B], cache_length,
                            target_hidden)            # [n_sel, B, P, H] or None
    proposal, state = drafter.propose(params, state, prev[B], last[B], keys[B],
                                      gate=None)      # a policy's draft gate, or None
    state = drafter.commit(state, target_lengths[B], committed[B,D+1], num_committed[B],
                           target_hidden)             # [n_sel, B, D+1, H] or None

A :class:`~specjax.decoding.proposal.Proposal` holds the drafts (``tokens``
[B, K] for a chain, whose ``strategy`` is ``strategies.CHAIN``; [B, N] for a
tree, ``strategies.TREE``, layout in :mod:`specjax.decoding.tree`), ``q``,
``q_node``, a tree's ``parents`` / ``depths`` and, for chains, ``num_valid``
([B] drafts offered, or None: all K).  Chain drafters with ``gates_drafting``
stop drafting early under a policy's gate (:func:`sample_chain`); every other
drafter ignores ``gate``.

Sizes have one name each: a chain drafter's ``num_draft`` is K, the drafts
per step; a tree drafter's ``depth`` is the longest path (N, the node count,
follows from its shape).  ``max_accepted`` (D) is what the loop needs from
either -- the most drafts one step can accept: K, or the depth -- and
``tokens_per_step`` is K + 1 or N + 1.  ``strategy`` (chain or tree,
:mod:`specjax.decoding.strategies`) is how the loop drafts and verifies.

``prev`` is the last token already in the target's cache (position L-1, L the
target's committed length), ``last`` the token emitted by the previous step
(position L, not yet in any cache).  ``q`` is the distribution *after* the
drafter's own processors (one-hot for greedy or top-k drafts): losslessness
depends on it being the one the token was really drawn from.  ``q_node`` is
the drafter's *full* distribution at each position (chains) or at each tree
node (row 0 the root; row j predicts node j's children), from which the
candidates were proposed: what CoS mixes with the target (docs/spec.md §3).  It equals
``q`` for sampled chains; for greedy / top-k drafts it is
:func:`node_distribution`.  A drafter that cannot supply it returns ``None``
and sets ``supplies_node_dist = False``; rules that need it then raise.  At
commit the
drafter learns which tokens the target kept this step (``last`` followed by
the accepted drafts, ``num_committed = accepted + 1`` of them), the target's
hidden states at those positions (the ``target_hidden_layers`` it asked for:
EAGLE heads re-seed from them) and the new target length.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specjax.checks import ArgumentTypeError, check_int
from specjax.decoding.proposal import Proposal
from specjax.decoding.sampled_tree import check_children
from specjax.decoding.static_tree_drafting import draft_static_tree
from specjax.decoding.strategies import CHAIN, TREE
from specjax.decoding.tree import TreeDraft, static_ancestor_mask, static_tree
from specjax.distributions import GREEDY, SamplingConfig, probs_from_logits, sample_logits
from specjax.hyperparams import Hyperparams
from specjax.models import kv_cache as kvc
from specjax.models.transformer import Model


def node_distribution(logits: jax.Array, sampling: SamplingConfig) -> jax.Array:
  """The drafter's full distribution at a node, ``[..., V]`` logits -> ``[..., V]``.

  ``probs_from_logits(logits, sampling)`` (the distribution sampled drafts are
  drawn from); **(choice)** for ``T = 0`` (greedy / top-k drafts, whose q is
  one-hot) the model's softmax at temperature 1 without processors: the
  distribution the candidates are ranked by (EAGLE-2 scores use the same
  log-softmax).
  """
  if sampling.greedy:
    return jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  return probs_from_logits(logits, sampling)


def sample_chain(sampling: SamplingConfig, keys, first_logits, step, carry, num_draft: int,
                 unroll: bool | int = 1, gate=None) -> tuple[Proposal, Any]:
  """The chain drafting scan shared by the chain drafters: K drafts, each sampled
  from the logits the previous one produced.

  Args:
    sampling: the processors drafts are drawn under (greedy: q one-hot, ``q_node``
      = :func:`node_distribution`; sampled: ``q_node`` = q).
    keys: [B] PRNG keys, split into K per row (draft i uses split i).
    first_logits: [B, V] logits of the first draft.
    step: ``(carry, tok [B]) -> (carry, logits [B, V])``: feed one draft, get the next
      draft's logits (the drafter's cache / features live in ``carry``).
    carry: the state ``step`` starts from.
    num_draft: K >= 1.
    unroll: passed to ``lax.scan``.
    gate: None, or a policy's draft gate (``gate.start(B) -> g``; ``gate.step(i,
      q_node [B, V], g) -> (go [B], g)`` with the node distribution of draft i):
      drafting stops once no row's
      draft i is worth offering, so the unspent steps cost nothing (a bounded
      ``while_loop``).  Each draft is sampled with the same key as without a
      gate; positions never drafted hold token 0 with one-hot rows, and
      ``num_valid`` says how many were drafted.

  Returns ``(Proposal(tokens [B, K], q [B, K, V], q_node [B, K, V]), carry)`` -- the
  carry after the last draft step (the last draft is never fed).
  """
  k = num_draft
  step_keys = jax.vmap(lambda kk: jax.random.split(kk, k))(keys)  # [B, K]
  greedy = sampling.greedy

  def sample(kk, logits):  # -> x [B], q [B, V], q_node [B, V] (q itself unless greedy)
    x, q = jax.vmap(lambda kb, lb: sample_logits(kb, lb, sampling))(kk, logits)
    return x, q, (node_distribution(logits, sampling) if greedy else q)

  x0, q0, n0 = sample(step_keys[:, 0], first_logits)
  if k == 1:
    return Proposal(x0[:, None], q0[:, None], n0[:, None]), carry
  if gate is not None:
    return _gated_chain(sample, step_keys, (x0, q0, n0), step, carry, k, greedy, gate)

  def body(c, i):
    state, tok = c
    state, logits = step(state, tok)
    x, q, qn = sample(step_keys[:, i], logits)
    return (state, x), (x, q, qn)

  (carry, _), (xs, qs, ns) = jax.lax.scan(body, (carry, x0), jnp.arange(1, k), unroll=unroll)
  x = jnp.concatenate([x0[:, None], xs.T], axis=1)  # [B, K]
  q = jnp.concatenate([q0[:, None], jnp.swapaxes(qs, 0, 1)], axis=1)  # [B, K, V]
  q_node = (jnp.concatenate([n0[:, None], jnp.swapaxes(ns, 0, 1)], axis=1) if greedy
            else q)  # [B, K, V]
  return Proposal(x, q, q_node), carry


def _gated_chain(sample, step_keys, first, step, carry, k: int, greedy: bool, gate):
  """:func:`sample_chain` with a draft gate: a ``while_loop`` over positions 1..K-1
  that runs while some row's last draft was worth offering."""
  x0, q0, n0 = first
  b, v = q0.shape
  go, g = gate.step(0, n0, gate.start(b))
  filler = jax.nn.one_hot(jnp.zeros((b, k), jnp.int32), v, dtype=q0.dtype)  # never drafted
  xs = jnp.zeros((b, k), x0.dtype).at[:, 0].set(x0)
  qs, ns = filler.at[:, 0].set(q0), filler.at[:, 0].set(n0)

  def more(c):
    i, go = c[0], c[2]
    return (i < k) & jnp.any(go)

  def body(c):
    i, (state, tok), go, g, xs, qs, ns = c
    state, logits = step(state, tok)
    x, q, qn = sample(step_keys[:, i], logits)
    go_i, g = gate.step(i, qn, g)
    return (i + 1, (state, x), go & go_i, g, xs.at[:, i].set(x), qs.at[:, i].set(q),
            ns.at[:, i].set(qn))

  n, (carry, _), _, _, xs, qs, ns = jax.lax.while_loop(
      more, body, (jnp.int32(1), (carry, x0), go, g, xs, qs, ns))
  return Proposal(xs, qs, ns if greedy else qs, num_valid=jnp.full((b,), n, jnp.int32)), carry


@dataclasses.dataclass(frozen=True)
class Drafter(Hyperparams):
  """Base class of drafters (the protocol in the module docstring).

  A drafter is a pytree (:mod:`specjax.hyperparams`): its ``sampling``
  config's continuous values (temperature, top-p, ...) are traced leaves, so
  the speculative loop compiles once for a temperature sweep; everything that
  fixes shapes (K, the model, a tree's shape, top-k) is static.

  Subclasses define ``sampling`` (the processors drafts are drawn under; for
  tree drafters, whose drafts are deterministic top-k choices, it only sets
  ``q_node``), ``max_accepted`` and, for trees, ``strategy = TREE``.
  """

  # How the loop drafts and verifies (strategies.CHAIN or strategies.TREE).
  strategy = CHAIN
  # Whether propose returns the node distributions q_node (else None).
  supplies_node_dist = False
  # Whether propose honours a policy's draft gate (``gate=``) and stops drafting early.
  gates_drafting = False

  @property
  def tree(self) -> bool:
    """Whether the drafter proposes trees (``strategy`` is ``TREE``)."""
    return self.strategy.tree

  @property
  def max_accepted(self) -> int:
    """D: the most drafts one step can accept -- K for a chain, the depth for a tree."""
    raise NotImplementedError

  @property
  def vocab_size(self) -> int:
    raise NotImplementedError

  @property
  def target_hidden_layers(self) -> tuple:
    """Target hidden-state layers this drafter reads (``ModelConfig.hidden_layers``)."""
    return ()

  @property
  def reads_target_logits(self) -> bool:
    """Whether ``commit`` needs the target's logits at the committed positions
    (``target_logits``; an online-adapting drafter learns from them)."""
    return False

  @property
  def tokens_per_step(self) -> int:
    """Tokens the target processes per verify step: K + 1 (chain) or N + 1 (tree)."""
    return self.max_accepted + 1

  @property
  def q_is_node_dist(self) -> bool:
    """Whether each draft's ``q`` is the drafter's full distribution at its position
    (a sampled chain), so rules that read node distributions may use ``q`` when
    ``q_node`` is not supplied."""
    return not self.tree and not self.sampling.greedy

  @property
  def num_sources(self) -> int:
    """S, the drafting sources a row's round may come from (``Proposal.source``):
    1 but for a drafter that chooses between sources."""
    return 1

  @property
  def follows_committed(self) -> bool:
    """Whether ``commit`` takes in every committed token, so the drafter stays in
    step with the text when another drafter drafted the round (prompt lookup's
    history, EAGLE's pending buffer); a drafter that re-reads only ``[prev,
    last]`` (the draft LM chain) does not."""
    return False

  def prefill(self, params, tokens, lengths, cache_length: int, target_hidden=None) -> Any:
    raise NotImplementedError

  def decode_params(self, params):
    """The params ``propose`` gets inside the loop, made once after
    ``prefill`` (e.g. :meth:`Model.decode_params`); default ``params``."""
    return params

  def propose(self, params, state, prev, last, keys, gate=None) -> tuple[Proposal, Any]:
    """``(Proposal, state)``: K drafts per row (a chain) or N nodes with their parents
    and depths (a tree); module docstring.  A drafter with ``gates_drafting`` stops
    drafting early under ``gate`` (:func:`sample_chain`); the others ignore it."""
    raise NotImplementedError(f"{type(self).__name__} must define propose")

  def commit(self, state, target_lengths, committed, num_committed, target_hidden=None,
             target_logits=None, params=None):
    """The drafter learns what the target kept (module docstring); ``target_logits``
    ``[B, D+1, V]`` (the target's logits at the committed positions) and ``params`` (its
    decode params) only for a drafter with ``reads_target_logits``."""
    raise NotImplementedError

  @property
  def verify_buckets(self):
    """Chains: the verify lengths (sorted, ending with K) the target forward is
    compiled for when :meth:`num_valid` offers fewer than K (as a verify-length
    policy's ``buckets``); None: always K.  A policy's buckets take precedence."""
    return None


def _check_model(owner: str, model) -> None:
  if not isinstance(model, Model):
    raise ArgumentTypeError(f"{owner} needs model=Model(...), got {type(model).__name__}"
                            + (" (a params pytree? params go to speculative_generate)"
                               if isinstance(model, dict) else ""))


def _check_sampling(sampling) -> None:
  if not isinstance(sampling, SamplingConfig):
    raise ArgumentTypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")


def lm_prefill(model: Model, params, tokens, lengths, cache_length: int) -> kvc.KVCache:
  """A draft-side LM (the draft LM, the SV companion) reads the prompts; its cache
  keeps ``prompt[:-1]`` (``tokens [B, P]``, ``lengths [B]`` -> cache lengths - 1): the
  last prompt token is re-read with the first step's tokens."""
  b, p = tokens.shape
  cache = model.init_cache(b, cache_length)
  positions = jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32), (b, p))
  out = model.apply(params, tokens, positions, cache, logits_index=jnp.zeros((b, 1), jnp.int32))
  return kvc.commit(out.cache, lengths - 1)


def lm_commit(cache: kvc.KVCache, target_lengths) -> kvc.KVCache:
  """Keep the context the target committed (``target_lengths [B]``) minus its last
  token, which the next step re-reads (the :func:`lm_prefill` convention)."""
  return dataclasses.replace(cache, lengths=(target_lengths - 1).astype(jnp.int32))


@dataclasses.dataclass(frozen=True)
class LMDrafter(Drafter):
  """Independent small LM (vanilla speculative decoding, Leviathan et al. 2023).

  Attributes:
    num_draft: K, the chain length (drafts per step).
    sampling: the processors the drafts are sampled under (T = 0: greedy).
    model: the draft :class:`Model`.

  Its cache holds the committed context except the target's last cached
  token: at each step it re-reads ``[prev, last]`` (2 tokens, one of them
  recomputed -- identical values), then drafts K tokens autoregressively.
  Commit rolls the cache back to ``target_length - 1``.
  """

  num_draft: int
  sampling: SamplingConfig
  model: Model = None

  supplies_node_dist = True
  gates_drafting = True

  def __post_init__(self):
    _check_model("LMDrafter", self.model)
    check_int("num_draft (K)", self.num_draft, low=1)
    _check_sampling(self.sampling)

  @property
  def max_accepted(self) -> int:
    return self.num_draft

  @property
  def vocab_size(self) -> int:
    return self.model.config.vocab_size

  def decode_params(self, params):
    return self.model.decode_params(params)

  def prefill(self, params, tokens, lengths, cache_length: int, target_hidden=None
              ) -> kvc.KVCache:
    return lm_prefill(self.model, params, tokens, lengths, cache_length)

  def propose(self, params, state: kvc.KVCache, prev, last, keys, gate=None):
    pos0 = state.lengths  # position of prev
    out = self.model.apply(params, jnp.stack([prev, last], 1),
                           jnp.stack([pos0, pos0 + 1], 1), state,
                           logits_index=jnp.ones((prev.shape[0], 1), jnp.int32))
    cache = kvc.commit(out.cache, jnp.full_like(pos0, 2))

    def step(cache, tok):
      o = self.model.apply(params, tok[:, None], cache.lengths[:, None], cache)
      return kvc.commit(o.cache, jnp.ones_like(tok)), o.logits[:, 0]

    return sample_chain(self.sampling, keys, out.logits[:, 0], step, cache, self.num_draft,
                        unroll=True, gate=gate)

  def commit(self, state: kvc.KVCache, target_lengths, committed=None, num_committed=None,
             target_hidden=None, target_logits=None,
             params=None):
    """Keep the context the target committed, minus its last token (re-read next step)."""
    return lm_commit(state, target_lengths)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PendingState:
  """Drafter cache plus the committed tokens it has not read yet.

  Attributes:
    cache: the drafter's KV cache (committed = context it has read).
    pending: [B, W] committed tokens still to be read, left-aligned.
    num_pending: [B] how many of them are real.
  """

  cache: kvc.KVCache
  pending: jax.Array
  num_pending: jax.Array


@dataclasses.dataclass(frozen=True)
class LMTreeDrafter(Drafter):
  """Independent LM drafting a *static* token tree (SpecInfer / Medusa style).

  Attributes:
    model: the draft :class:`Model`.
    paths: choice paths (``decoding.tree.static_tree``): node ``[r_1, .., r_d]``
      takes the rank-``r_d`` token of its parent's draft distribution.  The
      tree's ``depth`` is its longest path; N = ``len(paths)`` nodes.
    sampling: shapes ``q_node`` (:func:`node_distribution`; default
      greedy: the model's softmax at T = 1).  With ``children="topk"`` drafts are
      deterministic top-k candidates, so ``q`` is one-hot (docs/spec.md §1)
      whatever ``sampling`` says.
    children: "topk" (node ``[.., r]`` = the parent's rank-r token) or "sampled"
      (its r-th draw without replacement from the parent's ``q_node``; ``q`` = the
      draw's law given the earlier siblings, so lossless verification is recursive
      rejection sampling; :mod:`specjax.decoding.sampled_tree`, docs/spec.md §4).

  Each step first reads the tokens the target committed last step (the
  accepted path, kept as ``pending``) and the new root, then drafts the tree
  level by level, re-running the drafter over all nodes drafted so far under
  the ancestor mask.  Tree nodes are never committed to the drafter cache.
  """

  model: Model = None
  paths: tuple = ((0,), (1,), (0, 0))
  sampling: SamplingConfig = GREEDY
  children: str = "topk"

  strategy = TREE
  supplies_node_dist = True

  def __post_init__(self):
    _check_model("LMTreeDrafter", self.model)
    _check_sampling(self.sampling)
    check_children(self.children)
    static_tree(self.paths)  # ValueError on a malformed tree
    object.__setattr__(self, "paths", tuple(tuple(int(r) for r in p) for p in self.paths))

  @property
  def depth(self) -> int:
    """The longest path of the tree (the most drafts one step can accept)."""
    return max(len(p) for p in self.paths)

  @property
  def max_accepted(self) -> int:
    return self.depth

  @property
  def vocab_size(self) -> int:
    return self.model.config.vocab_size

  @property
  def tokens_per_step(self) -> int:
    return len(self.paths) + 1

  def decode_params(self, params):
    return self.model.decode_params(params)

  def prefill(self, params, tokens, lengths, cache_length: int, target_hidden=None):
    cache = lm_prefill(self.model, params, tokens, lengths, cache_length)
    b = tokens.shape[0]
    pending = jnp.zeros((b, self.depth + 1), jnp.int32)
    last_prompt = jnp.take_along_axis(tokens, (lengths - 1)[:, None], 1)[:, 0]
    return PendingState(cache, pending.at[:, 0].set(last_prompt), jnp.ones((b,), jnp.int32))

  def propose(self, params, state: PendingState, prev, last, keys, gate=None):
    del prev, gate  # prev is in ``pending``; keys: sampled children only
    parents, depths, ranks = static_tree(self.paths)
    n = len(parents)
    b, w = state.pending.shape
    # Read the pending tokens and the root: [pending[:np], last, pad...].
    i = jnp.arange(w + 1)[None, :]
    npend = state.num_pending[:, None]
    padded = jnp.concatenate([state.pending, jnp.zeros((b, 1), jnp.int32)], 1)
    seq = jnp.where(i < npend, padded, jnp.where(i == npend, last[:, None], 0))
    base = state.cache.lengths
    o = self.model.apply(params, seq, base[:, None] + i, state.cache,
                         logits_index=state.num_pending[:, None])
    cache = kvc.commit(o.cache, state.num_pending + 1)  # ... through the root
    root_pos = cache.lengths - 1
    anc = static_ancestor_mask(parents)  # [N+1, N+1]

    def expand(cache, d, level, tokens):
      """Re-run every node drafted so far (sorted by depth: nodes 1..m); tree nodes
      never enter the cache."""
      del level
      m = int(np.sum(depths <= d))
      mask = jnp.broadcast_to(jnp.asarray(anc[1:m + 1, 1:m + 1]), (b, m, m))
      pos = root_pos[:, None] + jnp.asarray(depths[:m])[None, :]
      out = self.model.apply(params, tokens[:, :m], pos, cache, attn_mask=mask)
      return np.arange(1, m + 1), out.logits, cache

    filled = draft_static_tree(self.paths, o.logits[:, 0], self.sampling, self.children, keys,
                               expand, cache, expand_leaves=True)
    tokens, q, q_node = filled.tokens, filled.q, filled.q_node
    tree = TreeDraft(tokens, jnp.broadcast_to(jnp.asarray(parents), (b, n)),
                     jnp.broadcast_to(jnp.asarray(depths), (b, n)))
    return (Proposal.from_tree(tree, q, q_node),
            PendingState(cache, state.pending, state.num_pending))

  def commit(self, state: PendingState, target_lengths, committed=None, num_committed=None,
             target_hidden=None, target_logits=None,
             params=None):
    """The root is already read; the accepted path tokens become pending."""
    w = state.pending.shape[1]
    pending = jnp.concatenate([committed[:, 1:], jnp.zeros_like(committed[:, :1])], 1)[:, :w]
    npend = jnp.maximum(num_committed - 1, 0)
    active = num_committed > 0
    return PendingState(state.cache, jnp.where(active[:, None], pending, state.pending),
                        jnp.where(active, npend, state.num_pending))
