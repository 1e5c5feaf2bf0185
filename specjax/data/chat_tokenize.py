"""Conversation -> token ids + assistant loss mask, through a chat template.

The mask is computed from *characters*, never by assuming token boundaries:

1. The conversation is rendered with the template (no generation prompt).
   For every assistant message ``i`` the prefix
   ``render(messages[:i], add_generation_prompt=True)`` (everything up to and
   including the assistant header) must be a prefix of the full text; the
   assistant span then starts right after it, must begin with the message
   content verbatim, and must continue with the end-of-turn string
   (``<|im_end|>`` for ChatML/SmolLM2; by default the template's
   ``eos_token``). Span = content + end-of-turn; the header and whatever the
   template writes after the end-of-turn marker (ChatML's ``"\\n"``) are not in
   it. A template that breaks these assumptions raises ``ValueError``.
2. The text is encoded once with a ``tokenizers.Tokenizer``
   (``add_special_tokens=False`` by default: the template writes the special
   tokens itself, and ``<|im_start|>`` etc. are matched as added tokens), and a
   token gets mask 1 iff its character offsets ``[s, e)`` overlap an assistant
   span. A token straddling the header/content boundary (byte-level BPE
   merges the header's ``"\\n"`` with leading spaces of the content, e.g.
   ``"\\n "``) carries content, so it is in the mask.
3. Truncation keeps the first ``max_len`` tokens (and their mask).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class TokenizedChat:
  """``ids`` int32 [T]; ``loss_mask`` uint8 [T] (1 on assistant content + end-of-turn);
  ``truncated``: the rendered conversation had more than ``max_len`` tokens."""

  ids: np.ndarray
  loss_mask: np.ndarray
  truncated: bool = False
  id: str = ""

  @property
  def n_assistant_tokens(self) -> int:
    return int(self.loss_mask.sum())


def _end_of_turn(template, end_of_turn: str | None) -> str:
  eot = template.eos_token if end_of_turn is None else end_of_turn
  if not isinstance(eot, str) or not eot:
    raise ValueError(f"end_of_turn={end_of_turn!r} and template.eos_token={template.eos_token!r}: "
                     "need a non-empty end-of-turn string (e.g. '<|im_end|>')")
  return eot


def assistant_spans(template, messages: Sequence[Mapping[str, Any]],
                    end_of_turn: str | None = None) -> tuple[str, list[tuple[int, int]]]:
  """Render ``messages``; return ``(text, spans)`` with the character span
  ``[start, end)`` of every assistant turn (content + end-of-turn string)."""
  eot = _end_of_turn(template, end_of_turn)
  text = template.render(messages, add_generation_prompt=False)
  spans = []
  for i, m in enumerate(messages):
    if m["role"] != "assistant":
      continue
    if i == 0:
      raise ValueError("messages[0] is an assistant turn; a conversation cannot start with one")
    prefix = template.render(messages[:i], add_generation_prompt=True)
    if not text.startswith(prefix):
      raise ValueError(f"chat template is not prefix-stable at messages[{i}]: the rendering of "
                       "messages[:i] with the generation prompt is not a prefix of the full text")
    start = len(prefix)
    content = m["content"]
    if not text.startswith(content, start):
      raise ValueError(f"chat template does not write messages[{i}]['content'] verbatim right "
                       f"after the assistant header (found {text[start:start + 40]!r})")
    end = start + len(content)
    if not text.startswith(eot, end):
      raise ValueError(f"messages[{i}]: end_of_turn={eot!r} does not follow the assistant content "
                       f"(found {text[end:end + 40]!r})")
    spans.append((start, end + len(eot)))
  return text, spans


def mask_from_offsets(offsets: Sequence[tuple[int, int]],
                      spans: Sequence[tuple[int, int]]) -> np.ndarray:
  """uint8 [len(offsets)]: 1 where a token's ``[s, e)`` overlaps one of ``spans``
  (a zero-width token at ``s`` counts iff it lies inside: ``a <= s < b``)."""
  mask = np.zeros(len(offsets), np.uint8)
  if not spans or not len(offsets):
    return mask
  off = np.asarray(offsets, np.int64).reshape(-1, 2)
  s, e = off[:, 0], off[:, 1]
  for a, b in spans:
    # a zero-width token (s == e, e.g. an inserted special token) counts iff a <= s < b
    mask |= ((s < b) & ((e > a) | ((s == e) & (s >= a)))).astype(np.uint8)
  return mask


def tokenize_chat(tokenizer, template, messages: Sequence[Mapping[str, Any]],
                  max_len: int | None = None, end_of_turn: str | None = None,
                  add_special_tokens: bool = False, conv_id: str = "") -> TokenizedChat:
  """Token ids and assistant loss mask of one conversation (module docstring).

  Args:
    tokenizer: a ``tokenizers.Tokenizer``.
    template: a :class:`specjax.models.chat_template.ChatTemplate`.
    messages: ``{"role", "content"}`` dicts.
    max_len: keep at most this many tokens (None = all).
    end_of_turn: the string that closes an assistant turn (None = ``template.eos_token``).
    add_special_tokens: passed to ``tokenizer.encode`` (the template usually writes them).
  """
  if max_len is not None and (not isinstance(max_len, int) or max_len < 1):
    raise ValueError(f"max_len={max_len!r} must be a positive int or None")
  text, spans = assistant_spans(template, messages, end_of_turn)
  enc = tokenizer.encode(text, add_special_tokens=add_special_tokens)
  ids = np.asarray(enc.ids, np.int32)
  mask = mask_from_offsets(enc.offsets, spans)
  truncated = max_len is not None and len(ids) > max_len
  if truncated:
    ids, mask = ids[:max_len], mask[:max_len]
  return TokenizedChat(ids=ids, loss_mask=mask, truncated=bool(truncated), id=conv_id)


def tokenize_conversations(conversations: Iterable, tokenizer, template, max_len: int | None,
                           end_of_turn: str | None = None,
                           counts: collections.Counter | None = None) -> Iterator[TokenizedChat]:
  """Stream :func:`tokenize_chat` over ``Conversation``s (``.id``, ``.messages``).

  Conversations left without any assistant token (no assistant turn, or all
  of it cut by ``max_len``) are skipped; ``counts`` (if given) accumulates
  ``tokenized``, ``truncated`` and ``no_assistant_tokens``.
  """
  counts = counts if counts is not None else collections.Counter()
  for conv in conversations:
    tc = tokenize_chat(tokenizer, template, conv.messages, max_len, end_of_turn,
                       conv_id=conv.id)
    if tc.n_assistant_tokens == 0:
      counts["no_assistant_tokens"] += 1
      continue
    counts["tokenized"] += 1
    counts["truncated"] += tc.truncated
    yield tc
