"""Online adaptation of an EAGLE head's drafts from the loop's own verification.

Every verify forward computes, at each position the target commits, exactly what an
EAGLE head is trained on: the target's features there and its next-token
distribution.  With :class:`OnlineAdaptation` the drafter keeps them: each committed
token adds one *entry* to a per-row window of the last ``window`` entries -- the
head's output ``h`` at that position (run on the target features ``f_t`` and the
next committed token ``x_{t+1}``, with the row's whole history in its cache) and its
label, the target's distribution over ``x_{t+2}`` (its ``label_top_k`` most likely
tokens at temperature 1; the head's own training target) -- and after every
``every`` rounds in which a row committed tokens, it takes ``steps`` Adam steps on
that row's small *adapter* of the head's draft logits:

    draft logits = head logits(h) + bias + rms(h) A B        (bias [Vd], A [H, r], B [r, Vd])

with ``rms(h) = h / sqrt(mean(h^2) + eps)`` and the loss, over the window's entries
under the adapted logits, one of (``loss``):

* ``"ce"``: the cross-entropy of the label (renormalised over its tokens) -- the
  head's own training loss, the forward KL from the label to the draft distribution;
* ``"tv"``: minus the label's part of the first draft's acceptance probability,
  ``-sum_{i in label} min(p_i, q_i)``.  A lossless round accepts its first draft with
  probability ``sum_i min(p_i, q_i) = 1 - TV(p, q)`` (Leviathan et al. 2023,
  Theorem 3.5), and the label's tokens bound it from below, so this loss raises
  sampled acceptance itself; it stops pulling on a token once ``q_i >= p_i``, where
  cross-entropy goes on sharpening ``q`` towards the label.  DistillSpec (Zhou et
  al. 2024) distils drafters on total variation for the same reason.  (Measured on
  SmolLM2 at T = 1 it drafted worse than cross-entropy on the same labels:
  benchmarks/RESULTS.md, "Online adaptation".)

With ``update_vocab="labels"`` an update moves only the logits of the draft tokens in
the row's window labels (their ``bias`` and ``B`` columns; every other token keeps the
frozen head's logit).  Adam scales each coordinate's step by its own gradient's size,
so with ``"all"`` the tiny gradients of the many tokens no label names -- each pushed
down by its own probability -- become steps as large as the label tokens': every
update lowers the whole tail by about the learning rate, sharpening ``q``.  Greedy
drafting does not mind (the argmax is what counts); sampled drafting is accepted
with probability ``1 - TV(p, q)`` and might.  (On SmolLM2 at T = 1 the mask did not
help: benchmarks/RESULTS.md.)  With ``weight_decay`` what an adapter learned fades
unless its window keeps teaching it (:meth:`OnlineAdaptation.optimizer`).

Every entry is an example of the *first* draft: the head run on the target's own
features.  Deeper drafts run the head on its own output features, which no entry
shows the adapter.  ``depths`` limits the draft depths whose logits the adapter
changes (1: the first draft only; deeper drafts are the frozen head's); 0, the
default, adapts every depth.

An adapter can also draft worse than the frozen head: it follows the window, and a
conversation that moves on leaves it fitted to text that no longer comes.  With
``gate = m`` each row keeps a *prequential* score of its adapter against the frozen
head and drafts with the adapted logits only while that score is >= 0.  At every
update, before its Adam steps, the entries committed since the row's last update --
which no update has seen yet -- are scored under both heads' logits: at T = 0 whether
the draft's argmax is the label's top token (a greedy first draft's acceptance); at
T > 0 the label's part of ``sum_i min(p_i, q_i)`` with ``q`` the drafter's sampling
distribution (a sampled first draft's acceptance probability: Leviathan et al. 2023,
Theorem 3.5).  The score is the difference, adapted minus frozen, summed over entries
with weight ``(1 - 1/m)^age`` (age in entries, newest 0), an exponential memory of
about ``m`` entries.  The adapter goes on learning while the gate is shut, so the
score can reopen it: a follow-the-leader choice between two experts.  Gated or not,
the adapter a round drafts with is a function of committed entries only.

The head's own weights stay frozen and shared; each row adapts to its own
conversation (per-row adapters keep rows independent, so results do not depend on
how rows are batched or split over devices).  ``B`` starts at 0, so an adapter that
has not learned yet drafts as the frozen head does.

**Where an entry's parts come from.**  The drafter computes ``h`` anyway: every
round it first runs the head over the previous round's committed positions (its
*pending* entries, each with the token committed after it) to catch its cache up
before drafting, and :func:`keep_drafted` keeps those outputs -- the features the
adapter's logits are applied to when it drafts, so an update needs no head forward
of its own, only the head's LM head over the window.  Their labels come from two
verify forwards: an entry's label is the target's distribution after its token, a
row of the previous round's verify for all but the last pending entry, and for the
last (whose token is this round's ``last``) row 0 of this round's.  So
:func:`add_entries`, at the end of a round, completes the *previous* round's
entries: an entry joins the window one round after its token is committed, and a
row's final round's entries are never learned from (whatever rows it is batched
with: a finished row adds nothing).

**Exact by construction** (docs/spec.md §4, "Online adaptation").  The adapter a
round drafts with is a function of tokens committed before that round and of the
target's features and distributions at those positions: an entry is complete only
when the token after it is committed and the target's distribution after that token
verified, entries are added in ``commit``, after the round's verification, and the
update runs there too, on those committed entries.  Conditioned on
the history, every round is ordinary speculative sampling with the adapted drafter's
q, so lossless rules stay lossless; lossy rules' output laws depend on the adapter
(measure their KL with adaptation on).

Shapes: B rows, W = ``window`` entries, P the drafter's pending entries per round (its
most committed tokens per round), H the head's hidden size, Vd its draft vocabulary,
V the target's, r = ``rank``, k = ``label_top_k``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp
import optax

from specjax.checks import check_int, check_range
from specjax.distributions import GREEDY, SamplingConfig, argmax, probs_from_logits
from specjax.hyperparams import Hyperparams

RMS_EPS = 1e-6
# A's entries start at N(0, 1 / H) scaled by this, the same for every row (a fixed key).
A_INIT_SCALE = 1.0
LOSSES = ("ce", "tv")
UPDATE_VOCABS = ("all", "labels")


@dataclasses.dataclass(frozen=True)
class OnlineAdaptation(Hyperparams):
  """How an EAGLE drafter adapts its drafts while it serves (module docstring).

  Attributes:
    every: rounds between updates (>= 1).
    steps: Adam steps per update (>= 1).
    window: W, committed entries per row the update learns from (>= 2).
    rank: r, the rank of the adapter's low-rank term (>= 1).
    learning_rate: Adam's step size (> 0; traced: a sweep compiles once).
    label_top_k: k, the target tokens each label keeps (>= 1; k = 1 is one argmax
      pass over the vocabulary per committed position, k > 1 an exact two-stage
      top-k of about two passes: :func:`labels`).
    loss: ``"ce"`` or ``"tv"`` (module docstring): what an update minimises.
    update_vocab: ``"all"`` or ``"labels"`` (module docstring): the draft tokens whose
      logits an update may move.
    weight_decay: AdamW's decoupled decay of ``bias`` and ``b`` per step (>= 0, and
      ``learning_rate * weight_decay < 1``; 0: plain Adam): a half-life of about
      ``0.69 / (learning_rate * weight_decay)`` updates.
    depths: the draft depths the adapter changes (module docstring): drafts at depth
      ``<= depths`` (the first draft is depth 1) take the adapted logits, deeper ones
      the frozen head's; 0 (the default): every depth.
    gate: m, the memory in entries of the prequential gate (module docstring): a row
      drafts with the adapted logits only while their score on fresh entries is at
      least the frozen head's; 0 (the default): no gate, always the adapted logits.
  """

  every: int = 8
  steps: int = 1
  window: int = 32
  rank: int = 8
  learning_rate: float = 3e-2
  label_top_k: int = 1
  loss: str = "ce"
  update_vocab: str = "all"
  weight_decay: float = 0.0
  depths: int = 0
  gate: int = 0

  # whether there is decay at all picks the optimiser (a Python branch): static
  static_fields = ("weight_decay",)

  def __post_init__(self):
    for name, low, high in (("every", 1, None), ("steps", 1, 64), ("window", 2, 4096),
                            ("rank", 1, 256), ("label_top_k", 1, 256), ("depths", 0, 64),
                            ("gate", 0, 1 << 20)):
      value = check_int(name, getattr(self, name), low=low)
      if high is not None and value > high:
        raise ValueError(f"{name}={value} must be an integer in [{low}, {high}]")
    check_range("learning_rate", self.learning_rate, low=0.0, low_open=True, high=1.0)
    if self.loss not in LOSSES:
      raise ValueError(f"loss={self.loss!r} must be one of {LOSSES}")
    check_range("weight_decay", self.weight_decay, low=0.0)
    if self.learning_rate * self.weight_decay >= 1:
      raise ValueError(f"weight_decay={self.weight_decay} with learning_rate="
                       f"{self.learning_rate}: their product must be below 1 (each step "
                       f"multiplies the adapter by 1 minus it)")
    if self.update_vocab not in UPDATE_VOCABS:
      raise ValueError(f"update_vocab={self.update_vocab!r} must be one of {UPDATE_VOCABS}")

  @property
  def gate_decay(self) -> float:
    """The gate's weight per entry of age, ``1 - 1/gate`` (0 without a gate)."""
    return 1.0 - 1.0 / self.gate if self.gate else 0.0

  def adapts_depth(self, depth: int) -> bool:
    """Whether drafts at ``depth`` (1 = the first draft) take the adapted logits."""
    return self.depths == 0 or depth <= self.depths

  def optimizer(self) -> optax.GradientTransformation:
    """Adam; with ``weight_decay``, Adam with decoupled weight decay on ``bias`` and
    ``b`` (AdamW, Loshchilov & Hutter 2019: each step also multiplies them by
    ``1 - learning_rate * weight_decay``), so what the adapter learned fades unless the
    window keeps teaching it.  ``a`` is not decayed: with ``b`` at 0 it changes nothing,
    and decaying it would shrink the low-rank term's input for every later update."""
    if self.weight_decay == 0:
      return optax.adam(self.learning_rate)
    mask = lambda p: AdapterParams(bias=True, a=False, b=True)
    return optax.adamw(self.learning_rate, weight_decay=self.weight_decay, mask=mask)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AdapterParams:
  """Per-row adapter of the draft logits (``B`` rows).

  Attributes:
    bias: [B, Vd] added to every draft logit of the row.
    a: [B, H, r] and b: [B, r, Vd]: the low-rank term ``rms(h) a b``.
  """

  bias: jax.Array
  a: jax.Array
  b: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Window:
  """The last W complete entries of each row, oldest first (``valid`` marks them).

  Attributes:
    hidden: [B, W, H] the head's output at the entry, as the drafter computed it (run on
      the target's features there and the next committed token, the row's history in
      its cache).
    label_ids: [B, W, k] int32 target-vocabulary ids of the label.
    label_probs: [B, W, k] float32 their probabilities at temperature 1.
    valid: [B, W] bool.
  """

  hidden: jax.Array
  label_ids: jax.Array
  label_probs: jax.Array
  valid: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AdapterState:
  """What an adapting drafter carries through the loop (part of its state).

  Attributes:
    params: the :class:`AdapterParams` the next round drafts with.
    opt_state: Adam's state for them (per row).
    window: the :class:`Window` of complete entries.
    drafted: [B, P, H] the head's outputs at the row's pending entries, kept by the
      drafter's last catch-up (:func:`keep_drafted`); ``drafted_count`` [B] of them.
    last_ids: [B, P, k] int32 and last_probs: [B, P, k] float32: the labels of the
      last round's verify (row j: the target's distribution after its committed
      position j), which the next round's :func:`add_entries` pairs with them.
    rounds: [B] int32 rounds the row committed tokens in (the update schedule: a
      finished row stops counting, so its adapter is the same however the rows are
      split over devices).
    updated_at: [B] int32 ``rounds`` at the row's last update.
    updates: [B] int32 updates that saw at least one entry of the row.
    fresh: [B] int32 entries appended since the row's last update (at most W): the
      ones the gate scores next.
    gate_score: [B] float32 the gate's score, adapted minus frozen (module docstring);
      the row drafts with the adapted logits while it is >= 0.
    gate_shut: [B] int32 updates after which the gate was shut (the row drafted with
      the frozen head's logits until the next).
  """

  params: AdapterParams
  opt_state: Any
  window: Window
  drafted: jax.Array
  drafted_count: jax.Array
  last_ids: jax.Array
  last_probs: jax.Array
  rounds: jax.Array
  updated_at: jax.Array
  updates: jax.Array
  fresh: jax.Array
  gate_score: jax.Array
  gate_shut: jax.Array


def init_params(cfg: OnlineAdaptation, batch: int, hidden: int, draft_vocab: int
                ) -> AdapterParams:
  """Adapters that change nothing yet (``bias = 0``, ``b = 0``); ``a`` random, the same
  for every row."""
  a = jax.random.normal(jax.random.key(0), (hidden, cfg.rank), jnp.float32)
  a = A_INIT_SCALE * a / jnp.sqrt(float(hidden))
  return AdapterParams(jnp.zeros((batch, draft_vocab), jnp.float32),
                       jnp.broadcast_to(a, (batch, hidden, cfg.rank)),
                       jnp.zeros((batch, cfg.rank, draft_vocab), jnp.float32))


def check_carried(carried, cfg: OnlineAdaptation, batch: int, hidden: int, draft_vocab: int
                  ) -> None:
  """``ValueError`` (before tracing) unless ``carried`` -- a session's adapter state
  (``SpecResult.adapter`` of an earlier call) or bare :class:`AdapterParams` -- holds
  adapters of ``batch`` rows for a head of width ``hidden`` and ``draft_vocab`` draft
  tokens at ``cfg.rank`` (and, for a state, ``cfg``'s window): what a session carries
  into its next call must come from the same head, settings and rows."""
  if isinstance(carried, AdapterState):
    w = tuple(carried.window.label_ids.shape)
    if w != (batch, cfg.window, cfg.label_top_k):
      raise ValueError(f"draft_params['adapter'] holds a window of shape {w[:2]} with "
                       f"{w[2]} label tokens; this drafter and batch need ({batch}, "
                       f"{cfg.window}) with {cfg.label_top_k}: carry a state only into a call "
                       f"with the same adaptation settings and rows")
    carried = carried.params
  if not isinstance(carried, AdapterParams):
    raise ValueError(f"draft_params['adapter'] must be an AdapterState (SpecResult.adapter of "
                     f"an earlier call) or AdapterParams, got {type(carried).__name__}")
  want = {"bias": (batch, draft_vocab), "a": (batch, hidden, cfg.rank),
          "b": (batch, cfg.rank, draft_vocab)}
  for name, shape in want.items():
    got = tuple(getattr(carried, name).shape)
    if got != shape:
      raise ValueError(f"draft_params['adapter'].{name} has shape {got}; this drafter and "
                       f"batch need {shape} (batch {batch}, head width {hidden}, draft vocab "
                       f"{draft_vocab}, rank {cfg.rank}): carry adapters only into a call "
                       f"with the same head, rank and rows")


def init_state(cfg: OnlineAdaptation, batch: int, pending: int, hidden: int,
               draft_vocab: int, carried=None, hidden_dtype=jnp.float32) -> AdapterState:
  """The adapter state a call starts from, for a drafter of ``pending`` = P pending
  entries per round and a head of width ``hidden`` (its outputs kept in
  ``hidden_dtype``).  ``carried`` (:func:`check_carried`): a session's state from an
  earlier call -- its adapters, Adam's moments and window go on (the window's entries
  lie in the conversation the next call continues), its pending entries do not (the
  next call's first token is not the one after them) -- or bare
  :class:`AdapterParams` (a fresh window and optimiser); None: :func:`init_params`."""
  k = cfg.label_top_k
  pend = dict(drafted=jnp.zeros((batch, pending, hidden), hidden_dtype),
              drafted_count=jnp.zeros((batch,), jnp.int32),
              last_ids=jnp.zeros((batch, pending, k), jnp.int32),
              last_probs=jnp.zeros((batch, pending, k), jnp.float32))
  if isinstance(carried, AdapterState):
    return dataclasses.replace(carried, **pend)
  p = init_params(cfg, batch, hidden, draft_vocab) if carried is None else carried
  opt = jax.vmap(cfg.optimizer().init)(p)
  w = cfg.window
  window = Window(jnp.zeros((batch, w, hidden), hidden_dtype),
                  jnp.zeros((batch, w, k), jnp.int32), jnp.zeros((batch, w, k), jnp.float32),
                  jnp.zeros((batch, w), bool))
  zeros = jnp.zeros((batch,), jnp.int32)
  return AdapterState(p, opt, window, rounds=zeros, updated_at=zeros, updates=zeros,
                      fresh=zeros, gate_score=jnp.zeros((batch,), jnp.float32),
                      gate_shut=zeros, **pend)


def drafts_adapted(state: AdapterState) -> jax.Array:
  """``[B]`` bool: the rows whose next drafts take the adapted logits (the gate open;
  always without a gate, whose score stays 0)."""
  return state.gate_score >= 0


def rms(h: jax.Array) -> jax.Array:
  """``h / sqrt(mean(h^2) + eps)`` over the last axis, in float32."""
  h = h.astype(jnp.float32)
  return h * jax.lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + RMS_EPS)


def logit_delta(params: AdapterParams, h: jax.Array) -> jax.Array:
  """``bias + rms(h) a b``: ``h [B, ..., H]`` -> ``[B, ..., Vd]`` (per-row params)."""
  x = rms(h)
  lead = x.shape[1:-1]
  flat = x.reshape(x.shape[0], -1, x.shape[-1])  # [B, T, H]
  low = jnp.einsum("bth,bhr,brv->btv", flat, params.a, params.b)
  return (low + params.bias[:, None, :]).reshape((x.shape[0],) + lead + (params.bias.shape[-1],))


# vocabulary entries per chunk of the two-stage top-k in :func:`labels`
LABEL_CHUNK = 128


def labels(logits: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """``(ids, probs)`` ``[..., k]``: the target's ``k`` most likely next tokens at
  temperature 1 (target-vocabulary ids in decreasing probability, the lower id first
  on ties) and their probabilities.

  ``lax.top_k`` over the whole vocabulary would do, but inside the decoding loop
  XLA:CPU lowers it to a full sort (about 50 ms per round for SmolLM2's 49,152
  tokens).  So an exact two-stage top-k: split the vocabulary into chunks of
  :data:`LABEL_CHUNK`; the ``k`` largest logits lie in the ``k`` chunks with the
  largest maxima (a token in any other chunk has ``k`` chunk maxima above it), so one
  pass takes every chunk's maximum, a top-k over those maxima picks ``k`` chunks, and
  a top-k over their ``k * LABEL_CHUNK`` entries finishes -- about two passes over
  the vocabulary for any ``k`` (with the log-normaliser), against one per label token
  for repeated argmax.  With ``k = 1`` the label is the most likely token alone
  (probability 1 after renormalising: one argmax, no softmax) -- the two-reduction
  :func:`specjax.distributions.argmax`, since XLA:CPU's variadic ``jnp.argmax``
  costs about four times as long as the whole two-stage top-k."""
  v = logits.shape[-1]
  if not 1 <= k <= v:
    raise ValueError(f"k={k} must be in [1, {v}] (the vocabulary's size)")
  if k == 1:
    ids = argmax(logits)[..., None]
    return ids, jnp.ones(ids.shape, jnp.float32)
  logits = logits.astype(jnp.float32)
  lead, chunk = logits.shape[:-1], min(LABEL_CHUNK, v)
  padded = jnp.pad(logits, [(0, 0)] * len(lead) + [(0, -v % chunk)],
                   constant_values=-jnp.inf)
  chunks = padded.reshape(*lead, -1, chunk)                        # [..., C, chunk]
  _, best = jax.lax.top_k(chunks.max(-1), min(k, chunks.shape[-2]))
  best = jnp.sort(best, -1)  # ascending chunks: ties inside resolve to the lower id
  cand = jnp.take_along_axis(chunks, best[..., None], -2)          # [..., k, chunk]
  top, pos = jax.lax.top_k(cand.reshape(*lead, -1), k)
  ids = jnp.take_along_axis(best, pos // chunk, -1) * chunk + pos % chunk
  probs = jnp.exp(top - jax.nn.logsumexp(logits, -1, keepdims=True))
  return ids.astype(jnp.int32), probs


def target_to_draft(draft_vocab: int, vocab: int, d2t: Optional[jax.Array]) -> jax.Array:
  """``[V] int32``: the draft-vocabulary id of each target id (-1 outside it); draft id
  d is target id ``d + d2t[d]`` (identity without ``d2t``)."""
  if d2t is None:
    return jnp.where(jnp.arange(vocab) < draft_vocab, jnp.arange(vocab), -1).astype(jnp.int32)
  ids = jnp.arange(draft_vocab, dtype=jnp.int32) + d2t.astype(jnp.int32)
  return jnp.full((vocab,), -1, jnp.int32).at[ids].set(jnp.arange(draft_vocab, dtype=jnp.int32))


def _append(window: Window, new: Window, count: jax.Array) -> Window:
  """Each row's first ``count[b]`` entries of ``new`` ([B, D, ...]) after its window,
  keeping the last W."""
  w = window.valid.shape[1]

  def shift(old, add):
    both = jnp.concatenate([old, add], 1)
    return jax.vmap(lambda x, c: jax.lax.dynamic_slice_in_dim(x, c, w, 0))(both, count)

  d = new.valid.shape[1]
  keep = jnp.arange(d)[None, :] < count[:, None]
  new = dataclasses.replace(new, valid=new.valid & keep)
  return jax.tree.map(shift, window, new)


def keep_drafted(state: AdapterState, hidden: jax.Array, count: jax.Array) -> AdapterState:
  """The head's outputs ``hidden [B, P, H]`` at the drafter's ``count [B]`` pending
  entries (its catch-up before drafting: the previous round's committed positions),
  kept until this round's :func:`add_entries` labels them."""
  if hidden.shape[1] != state.drafted.shape[1]:
    raise ValueError(f"hidden has {hidden.shape[1]} pending entries per row; this adapter "
                     f"state was made for {state.drafted.shape[1]}")
  return dataclasses.replace(state, drafted=hidden.astype(state.drafted.dtype),
                             drafted_count=count.astype(jnp.int32))


def add_entries(cfg: OnlineAdaptation, state: AdapterState, num_committed: jax.Array,
                target_logits: jax.Array) -> AdapterState:
  """The previous round's entries, complete now, appended to each row's window; counts
  the round (module docstring, "Where an entry's parts come from").

  Args:
    num_committed: [B] the tokens each row committed this round (0: a finished row,
      which adds nothing and does not count the round).
    target_logits: [B, P, V] this round's verify logits at its committed positions
      (row j: the target's distribution after committed position j).

  Kept entry i of ``state.drafted`` (i < ``drafted_count``) is labelled by row i + 1 of
  the previous round's labels (``state.last_ids`` / ``last_probs``) when i is not the
  last, and by this round's row 0 when it is (its token is this round's ``last``).
  This round's labels are kept for the next round's call.
  """
  ids, probs = labels(target_logits, cfg.label_top_k)  # [B, P, k]
  if ids.shape[1] != state.last_ids.shape[1]:
    raise ValueError(f"target_logits has {ids.shape[1]} committed positions per row; this "
                     f"adapter state was made for {state.last_ids.shape[1]}")
  n = state.drafted_count
  is_last = (jnp.arange(ids.shape[1])[None, :] == (n - 1)[:, None])[..., None]  # [B, P, 1]
  entries = Window(state.drafted,
                   jnp.where(is_last, ids[:, :1], jnp.roll(state.last_ids, -1, 1)),
                   jnp.where(is_last, probs[:, :1], jnp.roll(state.last_probs, -1, 1)),
                   jnp.ones(ids.shape[:2], bool))
  ran = num_committed > 0
  added = jnp.where(ran, n, 0)
  keep = ran[:, None, None]
  return dataclasses.replace(
      state, window=_append(state.window, entries, added),
      last_ids=jnp.where(keep, ids, state.last_ids),
      last_probs=jnp.where(keep, probs, state.last_probs),
      rounds=state.rounds + ran.astype(jnp.int32),
      fresh=jnp.minimum(state.fresh + added, state.window.valid.shape[1]))


def window_loss(params: AdapterParams, base_logits: jax.Array, hidden: jax.Array,
                window: Window, to_draft: jax.Array, loss: str = "ce") -> jax.Array:
  """``[B]`` each row's mean loss over its valid entries (module docstring, ``loss``)
  under the adapted draft logits (``base_logits [B, W, Vd]`` the frozen head's,
  ``hidden [B, W, H]``); label tokens outside the draft vocabulary (``to_draft`` [V])
  count for nothing, and an entry with none inside it is skipped."""
  logp = jax.nn.log_softmax(base_logits + logit_delta(params, hidden), -1)  # [B, W, Vd]
  ids = to_draft[window.label_ids]  # [B, W, k]
  probs = jnp.where(ids >= 0, window.label_probs, 0.0)
  mass = jnp.sum(probs, -1)
  picked = jnp.take_along_axis(logp, jnp.maximum(ids, 0), -1)
  if loss == "tv":
    per_entry = -_label_overlap(jnp.exp(picked), ids, window.label_probs)
  else:
    per_entry = -jnp.sum(probs * picked, -1) / jnp.maximum(mass, 1e-30)
  w = (window.valid & (mass > 0)).astype(jnp.float32)
  return jnp.sum(per_entry * w, -1) / jnp.maximum(jnp.sum(w, -1), 1.0)


def entry_scores(logits: jax.Array, window: Window, to_draft: jax.Array,
                 sampling: SamplingConfig) -> jax.Array:
  """``[B, W]`` how well draft logits ``[B, W, Vd]`` predict each window entry's label
  as a first draft (module docstring, ``gate``): greedy ``sampling``, 1 where their
  argmax is the label's top token; else ``sum_{i in label} min(p_i, q_i)`` with ``q``
  the sampling distribution.  Label tokens outside the draft vocabulary count for
  nothing."""
  ids = to_draft[window.label_ids]  # [B, W, k]
  if sampling.greedy:
    top = argmax(logits)
    return ((ids[..., 0] >= 0) & (top == ids[..., 0])).astype(jnp.float32)
  q = probs_from_logits(logits, sampling)
  return _label_overlap(jnp.take_along_axis(q, jnp.maximum(ids, 0), -1), ids,
                        window.label_probs)


def _label_overlap(q_at: jax.Array, ids: jax.Array, label_probs: jax.Array) -> jax.Array:
  """``[...]`` the label's part of a first draft's acceptance probability,
  ``sum_{i in label} min(p_i, q_i)``: ``q_at [..., k]`` the draft probabilities of the
  label's tokens, ``ids`` their draft ids (-1 outside the draft vocabulary: nothing)."""
  return jnp.sum(jnp.where(ids >= 0, jnp.minimum(label_probs, q_at), 0.0), -1)


def gate_update(cfg: OnlineAdaptation, state: AdapterState, base_logits: jax.Array,
                hidden: jax.Array, to_draft: jax.Array, sampling: SamplingConfig,
                rows: jax.Array) -> jax.Array:
  """``[B]`` the gate's score after ``rows`` score their fresh entries (the last
  ``state.fresh`` valid ones of the window, before any update saw them) under the
  row's adapter (the one they were drafted with) and the frozen head:
  ``score * d^n + sum_j d^age_j (adapted_j - frozen_j)``, ``d = cfg.gate_decay``,
  ``n`` fresh entries (module docstring)."""
  w = state.window.valid.shape[1]
  age = (w - 1) - jnp.arange(w)[None, :]  # [1, W]: the newest entry is the last
  fresh = state.window.valid & (age < state.fresh[:, None])
  adapted = entry_scores(base_logits + logit_delta(state.params, hidden), state.window,
                         to_draft, sampling)
  gain = adapted - entry_scores(base_logits, state.window, to_draft, sampling)
  d = cfg.gate_decay
  added = jnp.sum(jnp.where(fresh, gain * d ** age, 0.0), -1)
  new = state.gate_score * d ** state.fresh + added
  return jnp.where(rows, new, state.gate_score)


def update(cfg: OnlineAdaptation, state: AdapterState, base_logits: jax.Array,
           hidden: jax.Array, to_draft: jax.Array,
           sampling: Optional[SamplingConfig] = None) -> AdapterState:
  """``cfg.steps`` Adam steps on the adapter of every row that is due
  (:func:`due_rows`) against its window (other rows, and rows with an empty window,
  keep theirs); with ``cfg.gate``, first the gate's score of the fresh entries under
  the adapter they were drafted with (:func:`gate_update`; ``sampling``: the
  drafter's, greedy when None).  ``hidden [B, W, H]``: the window's head outputs,
  ``base_logits [B, W, Vd]`` the frozen head's draft logits of them; ``to_draft``:
  :func:`target_to_draft`."""
  opt = cfg.optimizer()
  due = due_rows(cfg, state)
  has = jnp.any(state.window.valid, 1) & due  # [B]
  gate_score = state.gate_score
  if cfg.gate:
    gate_score = gate_update(cfg, state, base_logits, hidden, to_draft,
                             GREEDY if sampling is None else sampling, has)
  movable = (label_tokens(state.window, to_draft, base_logits.shape[-1])
             if cfg.update_vocab == "labels" else None)

  def one_step(carry, _):
    params, opt_state = carry
    grads = jax.grad(lambda p: jnp.sum(
        window_loss(p, base_logits, hidden, state.window, to_draft, cfg.loss)))(params)
    if movable is not None:
      grads = dataclasses.replace(grads, bias=jnp.where(movable, grads.bias, 0.0),
                                  b=jnp.where(movable[:, None, :], grads.b, 0.0))
    upd, new_opt = jax.vmap(opt.update)(grads, opt_state, params)
    new_params = optax.apply_updates(params, upd)
    pick = lambda new, old: jnp.where(has.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)
    return (jax.tree.map(pick, new_params, params), jax.tree.map(pick, new_opt, opt_state)), None

  (params, opt_state), _ = jax.lax.scan(one_step, (state.params, state.opt_state), None,
                                        length=cfg.steps)
  shut = has & (gate_score < 0)
  return dataclasses.replace(state, params=params, opt_state=opt_state,
                             updated_at=jnp.where(due, state.rounds, state.updated_at),
                             updates=state.updates + has.astype(jnp.int32),
                             fresh=jnp.where(due, 0, state.fresh), gate_score=gate_score,
                             gate_shut=state.gate_shut + shut.astype(jnp.int32))


def label_tokens(window: Window, to_draft: jax.Array, draft_vocab: int) -> jax.Array:
  """``[B, Vd]`` bool: the draft tokens named (with nonzero probability) by a valid label
  of each row's window."""
  ids = to_draft[window.label_ids]  # [B, W, k]
  named = window.valid[..., None] & (ids >= 0) & (window.label_probs > 0)
  rows = jnp.arange(ids.shape[0])[:, None, None]
  return jnp.zeros((ids.shape[0], draft_vocab), bool).at[rows, jnp.maximum(ids, 0)].max(named)


def due_rows(cfg: OnlineAdaptation, state: AdapterState) -> jax.Array:
  """``[B]`` bool: rows whose count of committing rounds reached a new multiple of
  ``cfg.every`` since their last update (the round about to draft updates them first)."""
  r = state.rounds
  return (r > state.updated_at) & ((r % cfg.every) == 0)
