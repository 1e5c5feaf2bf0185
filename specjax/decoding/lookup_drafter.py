"""PromptLookupDrafter: prompt-lookup decoding (n-gram copy drafts), a chain drafter
of the speculative loop with no model and no parameters.

Prompt lookup (Saxena 2023, the ``prompt_lookup_num_tokens`` /
``max_matching_ngram_size`` option of transformers' ``generate``) drafts by
copying: take the last n tokens of the current text, find an earlier place
where the same n tokens occur -- in the prompt or in anything the row has
generated so far -- and propose the K tokens that followed it.  It costs a few
thousand integer comparisons per step, so every accepted draft is almost free;
it helps where the output repeats its context: code edits and refactors,
questions about a given document, multi-turn chat that quotes earlier turns,
and the target's own greedy loops.

Our choices, per row and step (:mod:`specjax.decoding.token_history` holds the
row's text and the matching):

* **n-gram size:** the longest n in ``[min_ngram, max_ngram]`` with an earlier
  occurrence (transformers tries n = max .. 1 the same way).
* **which occurrence:** the most recent one (transformers takes the earliest;
  recent text predicts the next tokens better in chat and code, and it is the
  one that catches a loop the target has just entered).
* **the copy:** the K tokens after the occurrence; where they run past the end
  of the text the copy continues with what it has just proposed (overlapping
  copy, period = distance to the occurrence), so a repeated span is proposed
  in full.
* **no match:** the draft is still K tokens (static shapes) but the drafter
  reports ``num_valid = 0`` for the row (``Proposal.num_valid``): the verifier
  offers none of them, the step emits the target's own next token exactly as
  target-only decoding would, and with ``buckets`` containing 0 (the default
  ``(0, K)``) a step in which *no* row matched runs the target over 1 token
  instead of K + 1.  At batch > 1 the forward covers the longest offer in the
  batch (the loop's fixed shapes), and rows without a match waste only those
  padded positions.

Drafts are deterministic, so ``q = onehot(x)`` (as for EAGLE's top-k trees):
lossless verification accepts x with probability ``p(x)`` and otherwise
samples the residual ``norm(max(0, p - onehot(x)))``, which is lossless at any
temperature.  Prompt lookup has no distribution over tokens, so
``supplies_node_dist = False``: rules that mix the drafter's distribution into
the target (CoS) refuse this drafter with a stated reason; every other rule
(greedy, lossless, MARS, typical, ...) works unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from specjax.checks import check_int
from specjax.decoding import token_history as th
from specjax.decoding.buckets import check_buckets
from specjax.decoding.drafters import Drafter
from specjax.decoding.proposal import Proposal
from specjax.distributions import GREEDY


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LookupState:
  """Attributes:
    history: the rows' committed text (:class:`~specjax.decoding.token_history.TokenHistory`).
    num_valid: [B] int32 drafts the last ``draft`` offers per row: K after a match, 0 without.
  """

  history: th.TokenHistory
  num_valid: jax.Array


@dataclasses.dataclass(frozen=True)
class PromptLookupDrafter(Drafter):
  """Prompt-lookup decoding as a chain drafter (module docstring).

  Attributes:
    num_draft: K, the drafts per step (transformers' ``prompt_lookup_num_tokens``).
    vocab: V, the target's vocabulary size (drafts are one-hot over it).
    max_ngram: the longest n-gram matched (``max_matching_ngram_size``), >= 1.
    min_ngram: the shortest n-gram that counts as a match, in ``[1, max_ngram]``.
    buckets: verify lengths the target forward is compiled for (sorted, in
      ``[0, K]``, containing K); default ``(0, K)``: K + 1 tokens when a row
      matched, 1 when none did.  ``(K,)`` always verifies K + 1.

  Params: none (pass ``None`` as ``draft_params``).  Per step and row it costs
  ``max_ngram * C`` token comparisons (C = the loop's cache length).
  """

  num_draft: int
  vocab: int
  max_ngram: int = 3
  min_ngram: int = 1
  buckets: Optional[tuple] = None

  # Deterministic drafts: greedy is the only "sampling" there is (no PRNG key needed).
  sampling = GREEDY
  follows_committed = True  # commit takes in every committed token

  def __post_init__(self):
    check_int("num_draft (K)", self.num_draft, low=1)
    check_int("vocab", self.vocab, low=1)
    check_int("max_ngram", self.max_ngram, low=1)
    check_int("min_ngram", self.min_ngram, low=1)
    if self.min_ngram > self.max_ngram:
      raise ValueError(f"min_ngram={self.min_ngram} must lie in [1, max_ngram={self.max_ngram}]")
    b = (0, self.num_draft) if self.buckets is None else self.buckets
    object.__setattr__(self, "buckets", check_buckets("buckets", b, self.num_draft))

  @property
  def max_accepted(self) -> int:
    return self.num_draft

  @property
  def vocab_size(self) -> int:
    return self.vocab

  @property
  def verify_buckets(self) -> tuple:
    return self.buckets

  def prefill(self, params, tokens, lengths, cache_length: int, target_hidden=None
              ) -> LookupState:
    hist = th.prefill(tokens, lengths, cache_length)
    return LookupState(hist, jnp.zeros_like(hist.length))

  def match(self, hist: th.TokenHistory, last: jax.Array
            ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(x [B, K] int32, num_valid [B] int32, ngram [B] int32)`` for the text ``hist`` +
    ``last [B]``: the copy after the most recent occurrence of the longest matching
    n-gram (of ``ngram`` tokens, 0 without a match); ``num_valid`` is K or 0."""
    h, n = th.with_last(hist, last)
    m = th.match_lengths(h, n, self.max_ngram)  # [B, C]
    best = jnp.max(m, axis=1)  # [B] the longest n-gram with an earlier occurrence
    found = best >= self.min_ngram
    j = jnp.arange(h.shape[1])[None, :]
    end = jnp.max(jnp.where((m == best[:, None]) & found[:, None], j, -1), axis=1)  # most recent
    end = jnp.where(found, end, jnp.maximum(n - 2, 0))  # no match: any position (not offered)
    x = th.continuation(h, n, end[:, None], self.num_draft)[:, 0]
    ngram = jnp.where(found, best, 0).astype(jnp.int32)
    return x, jnp.where(found, self.num_draft, 0).astype(jnp.int32), ngram

  def propose(self, params, state: LookupState, prev, last, keys, gate=None):
    del params, prev, keys, gate  # no model; deterministic
    x, num_valid, ngram = self.match(state.history, last)
    q = jax.nn.one_hot(x, self.vocab, dtype=jnp.float32)  # [B, K, V]
    # confidence: the match length, known before the copy (every position the same)
    score = jnp.broadcast_to((ngram / self.max_ngram)[:, None], x.shape).astype(jnp.float32)
    return (Proposal(x, q, None, num_valid=num_valid, confidence=score),
            LookupState(state.history, num_valid))

  def commit(self, state: LookupState, target_lengths, committed=None, num_committed=None,
             target_hidden=None, target_logits=None,
             params=None) -> LookupState:
    """Append what the target kept (``last`` and the accepted drafts)."""
    if committed is None or num_committed is None:
      raise ValueError("PromptLookupDrafter.commit needs the committed tokens and their count")
    return LookupState(th.commit(state.history, committed, num_committed), state.num_valid)
