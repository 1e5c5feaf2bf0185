"""Evaluation prompts: held-out ShareGPT first user turns in four domains.

Source: the ``heldout`` split of :mod:`specjax.data.sharegpt` (same hash
split as the training data, so no prompt is ever trained on). Each prompt is
the conversation's first user turn, as ``[{"role": "user", "content": text}]``
(the chat template adds its default system prompt, if any).

Rules, applied in this order (all regexes case-insensitive):

1. *First part only*: the id ends in ``_0`` (ShareGPT V3 splits long chats
   into ``<id>_0, <id>_1, ...``; the first user turn of a later part continues a
   dialogue the model does not see).
2. *Length*: ``MIN_CHARS <= len(text.strip()) <= MAX_CHARS`` (20..1000).
3. *English-ish*: at least ``MIN_ASCII_RATIO`` (0.97) of the characters are ASCII.
4. *Self-contained*: no URL (``http://``, ``https://``, ``www.``): the model cannot browse.
5. *Domain*, the first that matches in the order code, math, writing, qa:

   * ``code``: ``CODE_RE`` -- a code fence, a code-like token (``def``/
     ``import``/``#include``/``console.log``/``</``) or a programming word
     (a language name, function, script, api, sql, regex, debug, algorithm, ...);
   * ``math``: ``MATH_RE`` (solve, equation, integral, derivative,
     probability, calculate, prove, theorem, algebra, geometry, polynomial,
     percentage, interest rate, formula, math, ...) *and* a digit or a
     symbolic expression (``x^2``, ``f(x)``, ``a = b``, ``sqrt``);
   * ``writing``: ``WRITING_RE`` -- starts with an imperative (write,
     compose, draft, create, generate, rewrite, give me; optionally after
     "please"/"can you") and names a genre (story, poem, essay, blog, article,
     email, letter, song, lyrics, speech, post, tweet, description, outline,
     script, ...) within 80 characters;
   * ``qa``: ``QA_RE`` -- starts with a question word (what, why, how, who,
     when, where, which, is, are, can, could, does, do, should, explain, tell me),
     ends with ``?``, one paragraph (no blank line) and at most
     ``QA_MAX_CHARS`` (300) characters.

   Anything else is not used.
6. *Dedup*: identical texts (after ``strip``) are kept once.
7. *Order and count*: within a domain, prompts are sorted by
   ``sha256(f"eval:{seed}:{id}")`` and the first ``n_per_domain`` are taken --
   a deterministic pseudo-random sample that does not depend on file order.

**Multi-turn prompts** (:func:`multiturn_prompts`): held-out conversations (first
parts, rule 1) with at least two user turns, every message English-ish (rule 3); a
prompt is the conversation up to and including user turn j >= 2, the earlier
assistant answers (ChatGPT's, as recorded) in context, and the last user turn must
pass rules 2 and 4. Each conversation offers its prefixes with the most turns first,
so a caller with a token budget takes the longest that fits; conversations are
ordered by the same ``sha256(f"eval:{seed}:{id}")`` and deduplicated on their
last user turn. These are the prompts where an answer can copy from earlier turns.

ShareGPT has little math. Measured on the shipped file with the default 5 %
held-out split (854 held-out conversations, 466 first parts): eligible code
78, qa 39, writing 14, math 4 (the math rule is kept strict -- keyword *and*
an expression -- for precision; 3 of the 4 are real arithmetic/geometry
questions). So the default ``n_per_domain=10`` gives 10/10/10 and 4 math
prompts; ``strict=True`` raises instead of returning a short domain.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import re
from typing import Iterable

from specjax.data import sharegpt

DOMAINS = ("code", "math", "writing", "qa")
MIN_CHARS, MAX_CHARS, QA_MAX_CHARS = 20, 1000, 300
MIN_ASCII_RATIO = 0.97

URL_RE = re.compile(r"https?://|www\.", re.I)
CODE_RE = re.compile(
    r"```|\bdef \w+\(|^\s*import \w+|#include|console\.log|</\w+>|"
    r"\b(python|javascript|typescript|java|c\+\+|c#|golang|rust|kotlin|swift|php|ruby|sql|"
    r"html|css|bash|powershell|regex|function|functions|code|coding|script|api|json|yaml|"
    r"dataframe|pandas|numpy|compile|compiler|debug|bug|algorithm|github|docker|kubernetes|"
    r"react|node\.?js|django|flask)\b", re.I | re.M)
MATH_RE = re.compile(
    r"\b(solve|equations?|integral|integrate|derivative|differentiate|probability|calculate|"
    r"compute|proof|prove|theorem|algebra|arithmetic|geometry|polynomial|factorial|"
    r"prime numbers?|maths?|mathematics|mathematical|triangle|fraction|percentage|"
    r"interest rate|formulas?|statistics|variance)\b", re.I)
MATH_EXPR_RE = re.compile(r"\d|\bx\^?2\b|\bf\(x\)|\w\s*=\s*\w|sqrt")
WRITING_RE = re.compile(
    r"^\s*((please|can you|could you)\s+)?(write|compose|draft|create|generate|rewrite|"
    r"give me)\b.{0,80}?\b(story|stories|poem|poems|essay|essays|blog|article|articles|email|"
    r"emails|letter|letters|song|songs|lyrics|speech|post|posts|tweet|tweets|description|"
    r"outline|script|haiku|limerick|slogan|caption|review)\b", re.I | re.S)
QA_RE = re.compile(r"^\s*(what|why|how|who|when|where|which|is|are|can|could|does|do|should|"
                   r"explain|tell me)\b", re.I)


@dataclasses.dataclass(frozen=True)
class EvalPrompt:
  """One evaluation prompt: ``messages`` is ``({"role": "user", "content": text},)``."""

  id: str
  domain: str
  messages: tuple

  @property
  def text(self) -> str:
    return self.messages[-1]["content"]


def ascii_ratio(text: str) -> float:
  return sum(c.isascii() for c in text) / max(1, len(text))


def rejection_reason(conv_id: str, text: str) -> str | None:
  """Why a first user turn is not used (rules 1-4), or None if it is eligible."""
  if not conv_id.endswith("_0"):
    return "not_first_part"
  t = text.strip()
  if not MIN_CHARS <= len(t) <= MAX_CHARS:
    return "length"
  if ascii_ratio(t) < MIN_ASCII_RATIO:
    return "non_ascii"
  if URL_RE.search(t):
    return "url"
  return None


def classify(text: str) -> str | None:
  """The domain of a prompt text by rule 5 (module docstring), or None."""
  t = text.strip()
  if CODE_RE.search(t):
    return "code"
  if MATH_RE.search(t) and MATH_EXPR_RE.search(t):
    return "math"
  if WRITING_RE.search(t):
    return "writing"
  if QA_RE.search(t) and t.endswith("?") and "\n\n" not in t and len(t) <= QA_MAX_CHARS:
    return "qa"
  return None


def _order_key(conv_id: str, seed: int) -> bytes:
  return hashlib.sha256(f"eval:{seed}:{conv_id}".encode("utf-8")).digest()


def select_eval_prompts(conversations: Iterable, n_per_domain: int = 10,
                        domains: tuple = DOMAINS, seed: int = 0, strict: bool = False,
                        counts: collections.Counter | None = None) -> dict[str, list[EvalPrompt]]:
  """Pick ``n_per_domain`` prompts per domain from ``conversations`` (objects
  with ``.id`` and ``.first_user_turn``, e.g. held-out :class:`sharegpt.Conversation` s).

  Returns ``{domain: [EvalPrompt, ...]}`` in ``domains`` order. ``counts``
  (if given) accumulates rejection reasons, ``unclassified``, ``duplicate`` and
  ``available:<domain>`` (eligible prompts before taking ``n_per_domain``).
  ``strict``: raise ``ValueError`` if a domain has fewer than ``n_per_domain``
  (else such a domain just has fewer prompts).
  """
  if not isinstance(n_per_domain, int) or n_per_domain < 1:
    raise ValueError(f"n_per_domain={n_per_domain!r} must be a positive int")
  bad = [d for d in domains if d not in DOMAINS]
  if bad or not domains:
    raise ValueError(f"domains={domains!r}; allowed domains are {DOMAINS}")
  counts = counts if counts is not None else collections.Counter()
  pools = {d: [] for d in domains}
  for conv in conversations:
    text = conv.first_user_turn
    reason = rejection_reason(conv.id, text)
    if reason is not None:
      counts[reason] += 1
      continue
    domain = classify(text)
    if domain is None or domain not in pools:
      counts["unclassified"] += 1
      continue
    pools[domain].append((_order_key(conv.id, seed), conv.id, text.strip()))
  for d, pool in pools.items():  # dedup in hash order, so the kept copy is order-free
    seen, kept = set(), []
    for item in sorted(pool):
      if item[2] in seen:
        counts["duplicate"] += 1
        continue
      seen.add(item[2])
      kept.append(item)
    pools[d] = kept
    counts[f"available:{d}"] += len(kept)
  short = {d: len(p) for d, p in pools.items() if len(p) < n_per_domain}
  if strict and short:
    raise ValueError(f"n_per_domain={n_per_domain} but only {short} eligible prompts in "
                     "those domains; lower n_per_domain, enlarge the held-out split, or "
                     "pass strict=False")
  return {d: [EvalPrompt(cid, d, ({"role": "user", "content": text},))
              for _, cid, text in p[:n_per_domain]]
          for d, p in pools.items()}


def multiturn_prompts(conversations: Iterable, seed: int = 0) -> list[tuple[EvalPrompt, ...]]:
  """Multi-turn prompt candidates from ``conversations`` (module docstring): one tuple
  per eligible conversation, in ``sha256(f"eval:{seed}:{id}")`` order, holding its
  :class:`EvalPrompt` s (domain ``"multiturn"``, ``messages`` the conversation up to a
  user turn j >= 2) with the most turns first."""
  pools = []
  for conv in conversations:
    if not conv.id.endswith("_0"):
      continue
    msgs = tuple(conv.messages)
    if any(ascii_ratio(m["content"]) < MIN_ASCII_RATIO for m in msgs):
      continue
    user_at = [i for i, m in enumerate(msgs) if m["role"] == "user"]
    ends = []
    for turn, i in enumerate(user_at):
      t = msgs[i]["content"].strip()
      if turn >= 1 and MIN_CHARS <= len(t) <= MAX_CHARS and not URL_RE.search(t):
        ends.append(i)
    if ends:
      pools.append((_order_key(conv.id, seed), conv.id, msgs, ends))
  out, seen = [], set()
  for _, cid, msgs, ends in sorted(pools):
    last = msgs[ends[-1]]["content"].strip()
    if last in seen:
      continue
    seen.add(last)
    out.append(tuple(EvalPrompt(cid, "multiturn", msgs[:i + 1]) for i in reversed(ends)))
  return out


def heldout_multiturn_prompts(path: str | None = None,
                              heldout_fraction: float = sharegpt.DEFAULT_HELDOUT_FRACTION,
                              split_seed: int = 0, seed: int = 0) -> list[tuple[EvalPrompt, ...]]:
  """:func:`multiturn_prompts` over the held-out split of the ShareGPT file."""
  convs = sharegpt.iter_conversations(path, "heldout", heldout_fraction, split_seed)
  return multiturn_prompts(convs, seed=seed)


def heldout_eval_prompts(path: str | None = None, n_per_domain: int = 10,
                         heldout_fraction: float = sharegpt.DEFAULT_HELDOUT_FRACTION,
                         split_seed: int = 0, seed: int = 0, strict: bool = False,
                         counts: collections.Counter | None = None) -> dict[str, list[EvalPrompt]]:
  """:func:`select_eval_prompts` over the held-out split of the ShareGPT file."""
  convs = sharegpt.iter_conversations(path, "heldout", heldout_fraction, split_seed)
  return select_eval_prompts(convs, n_per_domain, seed=seed, strict=strict, counts=counts)
