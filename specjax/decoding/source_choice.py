"""SourceChoiceDrafter: each round and row, the drafts of prompt lookup where they
pay, else those of a chain drafter with a model (an EAGLE chain): one loop, two
sources, chosen per step (docs/spec.md §5, "Choosing the source").

The two sources are good in different places: prompt lookup costs nothing and
is right when the text repeats its context (code, quoted turns, the target's
own loops), the EAGLE head costs a fraction of a target step per draft and is
right more often on new text.  Each round, for every row:

1. **Prompt lookup proposes** (source 0): its K drafts, whether it matched
   (``num_valid``) and its score, the matched n-gram's length -- all functions
   of the committed text.
2. **The row chooses its source** before the model source draws anything:
   without a policy, lookup wherever it matched (the rule SAM-Decoding uses);
   under the cost-aware policy (:class:`~specjax.policies.cost_aware.SourceGate`),
   lookup where its best value this round, ``max_n E(n) - lambda c_0(n)`` from
   its acceptance table at its score, is at least the model source's, valued at
   that source's per-position prior acceptance and its own cost curve ``c_1``.
3. **The model source drafts** (source 1) for the other rows only: its draft gate
   stops the chain as soon as none of them has a draft worth offering (for rows
   that took lookup it stops at once), so a round in which every row took lookup
   pays for the model source's first step only (EAGLE: the head over the
   committed tokens it has not read, which it needs anyway to stay in step).

**Exact.**  Which source a row takes depends on the committed text, lambda (the
past) and, through the gate, on the model source's distributions before each of
its draws -- never on a draft that is then offered or on the target's output, so
the offered drafts are distributed as the chosen source's ``q`` and every
lossless rule still samples the target (the stopping-time argument of
:mod:`specjax.policies.cost_aware`).  Choosing the model source *after* seeing
its first draft (e.g. only when the head drew its own top token) would bias the
offered drafts towards the head's favourites; the statistical tests
(``tests/verifiers/test_statistical_power.py``, ``source-choice-*``) catch that.

Both sources commit every round whoever drafted it: both follow the committed
text (``Drafter.follows_committed``), so neither falls out of step.  The
proposal's ``source [B]`` says who drafted each row; the loop counts rounds and
accepted drafts per source (``SpecStats.source_rounds`` / ``source_accepted``).
Rules that need the drafter's full distribution at every node (CoS) are refused:
prompt lookup has none.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from specjax.checks import ArgumentTypeError
from specjax.decoding.drafters import Drafter
from specjax.decoding.lookup_drafter import PromptLookupDrafter
from specjax.decoding.proposal import Proposal, draft_confidence
from specjax.decoding.strategies import CHAIN


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SourceChoiceState:
  """Both sources' states (each source keeps its own)."""

  first: Any
  second: Any

  @property
  def adapter(self):
    """The model source's online adapter, when it adapts (``SpecResult.adapter``)."""
    return getattr(self.second, "adapter", None)


@dataclasses.dataclass(frozen=True)
class _OnlyRows:
  """A draft gate with no policy behind it: the model source drafts on ``rows [B]``
  only and stops once none of them is left (every draft of theirs is offered)."""

  rows: jax.Array

  def start(self, b: int) -> jax.Array:
    return jnp.zeros((b,), jnp.float32)

  def step(self, i, q_node, carry):
    return self.rows, carry


@dataclasses.dataclass(frozen=True)
class SourceChoiceDrafter(Drafter):
  """Prompt lookup where it pays, else a model chain drafter (module docstring).

  Attributes:
    first: the model-free source, a :class:`~specjax.decoding.lookup_drafter.PromptLookupDrafter`.
    second: a chain drafter that drafts step by step under a gate and follows the
      committed text (an EAGLE chain, :class:`~specjax.decoding.eagle_drafter.EagleDrafter`),
      with the same K and vocabulary.

  Params: ``{"first": None, "second": the second source's params}``
  (:meth:`make_params`).
  """

  first: Drafter = None
  second: Drafter = None

  strategy = CHAIN
  gates_drafting = True
  supplies_node_dist = False  # prompt lookup has no distribution
  follows_committed = True

  def __post_init__(self):
    if not isinstance(self.first, PromptLookupDrafter):
      raise ArgumentTypeError(f"SourceChoiceDrafter needs first=PromptLookupDrafter(...) (a "
                              f"model-free source that scores its drafts), got "
                              f"{type(self.first).__name__}")
    s = self.second
    if not isinstance(s, Drafter) or s.tree or not s.gates_drafting or not s.follows_committed:
      raise ArgumentTypeError(
          f"SourceChoiceDrafter needs second= a chain drafter that drafts step by step under "
          f"a gate and takes in every committed token (an EagleDrafter chain), got "
          f"{type(s).__name__}" + ("" if not isinstance(s, Drafter) else
                                   f" (tree={s.tree}, gates_drafting={s.gates_drafting}, "
                                   f"follows_committed={s.follows_committed})"))
    if s.max_accepted != self.first.num_draft:
      raise ValueError(f"the sources draft different K: first K={self.first.num_draft}, "
                       f"second K={s.max_accepted}")
    if s.vocab_size != self.first.vocab_size:
      raise ValueError(f"the sources have different vocabularies: first "
                       f"{self.first.vocab_size}, second {s.vocab_size}")

  @staticmethod
  def make_params(second_params) -> dict:
    return {"first": None, "second": second_params}

  # ---- protocol attributes ------------------------------------------------------------
  @property
  def num_draft(self) -> int:
    return self.first.num_draft

  @property
  def sampling(self):
    """The model source's sampling (prompt lookup's drafts are deterministic)."""
    return self.second.sampling

  @property
  def max_accepted(self) -> int:
    return self.num_draft

  @property
  def vocab_size(self) -> int:
    return self.second.vocab_size

  @property
  def target_hidden_layers(self) -> tuple:
    return self.second.target_hidden_layers

  @property
  def reads_target_logits(self) -> bool:
    return self.second.reads_target_logits

  @property
  def num_sources(self) -> int:
    return 2

  @property
  def q_is_node_dist(self) -> bool:
    return False  # prompt lookup's rows carry one-hot q

  @property
  def verify_buckets(self) -> tuple:
    """Prompt lookup's (default ``(0, K)``); a policy's buckets take precedence."""
    return self.first.verify_buckets

  # ---- protocol ---------------------------------------------------------------------------
  def decode_params(self, params):
    return {"first": None, "second": self.second.decode_params(params["second"])}

  def prefill(self, params, tokens, lengths, cache_length: int, target_hidden=None
              ) -> SourceChoiceState:
    return SourceChoiceState(
        self.first.prefill(None, tokens, lengths, cache_length),
        self.second.prefill(params["second"], tokens, lengths, cache_length, target_hidden))

  def propose(self, params, state: SourceChoiceState, prev, last, keys, gate=None):
    """Lookup first, the choice, then the model source for the other rows (module
    docstring); ``gate``: the cost-aware policy's ``SourceGate``, or None."""
    p0, s0 = self.first.propose(None, state.first, prev, last, keys)
    offers = p0.num_valid
    if gate is None:
      take_first = offers > 0
      second_gate = _OnlyRows(~take_first)
    else:
      if not hasattr(gate, "prefer_first"):
        raise ValueError(
            "a SourceChoiceDrafter under a gating policy needs one table and cost curve per "
            "source: policy_params=cost_aware.make_source_params(...) (got a single "
            f"drafter's gate, {type(gate).__name__})")
      take_first = gate.prefer_first(p0.confidence, offers)
      second_gate = gate.for_second(~take_first)
    p1, s1 = self.second.propose(params["second"], state.second, prev, last, keys,
                                 gate=second_gate)
    k = self.num_draft
    f = take_first
    nodes = p1.q if p1.q_node is None else p1.q_node
    conf1 = draft_confidence(nodes)
    valid1 = jnp.full(f.shape, k, jnp.int32) if p1.num_valid is None else p1.num_valid
    proposal = Proposal(
        tokens=jnp.where(f[:, None], p0.tokens, p1.tokens),
        q=jnp.where(f[:, None, None], p0.q.astype(p1.q.dtype), p1.q),
        num_valid=jnp.where(f, offers, valid1).astype(jnp.int32),
        confidence=jnp.where(f[:, None], p0.confidence, conf1).astype(jnp.float32),
        source=jnp.where(f, 0, 1).astype(jnp.int32))
    return proposal, SourceChoiceState(s0, s1)

  def commit(self, state: SourceChoiceState, target_lengths, committed=None,
             num_committed=None, target_hidden=None, target_logits=None, params=None):
    """Both sources take in what the target kept, whoever drafted the round."""
    first = self.first.commit(state.first, target_lengths, committed, num_committed)
    learns = {} if target_logits is None else dict(target_logits=target_logits,
                                                   params=params["second"])
    second = self.second.commit(state.second, target_lengths, committed, num_committed,
                                target_hidden, **learns)
    return SourceChoiceState(first, second)
