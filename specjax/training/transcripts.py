"""Answer transcripts: the small, expensive part of an on-policy store, kept in git.

An on-policy store (:mod:`specjax.training.onpolicy`) costs one decode step per
generated token (about 60 tokens/s for SmolLM2-135M on two CPU cores), and it
keeps ~4.6 KB of features per token -- far too much for a repository, so the
store lives in a cache that a new machine does not have. What generation
*decided* is tiny: the answer tokens. Every on-policy shard therefore also
writes a transcript -- the answers' token ids, the turn ids, the sampling
temperature and the generation settings, about 2 bytes per token compressed --
to a directory that is committed. When the store is gone, the same command
rebuilds each transcribed shard with one teacher-forced forward pass per
sequence (several times faster than generating, and equal to the features
captured during generation up to bfloat16 rounding) and generates only the
shards after the last transcript.

File layout: ``<dir>/shard-<i:05d>.npz`` (``numpy.savez_compressed``, read with
``allow_pickle=False``): ``tokens`` the answers concatenated (uint16 when the
vocabulary fits, else uint32), ``offsets`` int64 [n + 1], ``ids`` the turn ids
(unicode), ``meta`` a JSON string (``header``: what generated them; ``temperature``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from typing import Optional

import numpy as np

_FORMAT = "specjax-transcript-v1"


@dataclasses.dataclass(frozen=True)
class TranscriptShard:
  """The answers of one on-policy shard.

  Attributes:
    ids: turn ids, one per answer (``"<conversation id>#<message index>"``).
    answers: int32 [T_i] per turn: the generated tokens (end-of-turn included
      when it was generated).
    temperature: the shard's sampling temperature (0 = greedy).
    header: what generated them (target hash, generation settings, source);
      a store with another header refuses them.
  """

  ids: tuple
  answers: tuple
  temperature: float
  header: dict

  def __post_init__(self):
    if len(self.ids) != len(self.answers):
      raise ValueError(f"ids ({len(self.ids)}) and answers ({len(self.answers)}) differ in "
                       "length")

  @property
  def num_tokens(self) -> int:
    return int(sum(len(a) for a in self.answers))


def shard_path(directory: str, index: int) -> str:
  return os.path.join(directory, f"shard-{index:05d}.npz")


def write(directory: str, index: int, shard: TranscriptShard) -> str:
  """Write shard ``index`` atomically (a killed write leaves no partial file)."""
  os.makedirs(directory, exist_ok=True)
  tokens = np.concatenate([np.asarray(a, np.int64) for a in shard.answers] or
                          [np.zeros(0, np.int64)])
  if tokens.size and (tokens.min() < 0 or tokens.max() >= 2**32):
    raise ValueError(f"shard {index}: token ids must lie in [0, 2**32)")
  dtype = np.uint16 if not tokens.size or tokens.max() < 2**16 else np.uint32
  offsets = np.cumsum([0] + [len(a) for a in shard.answers]).astype(np.int64)
  meta = json.dumps({"format": _FORMAT, "header": shard.header,
                     "temperature": float(shard.temperature)}, sort_keys=True)
  fd, tmp = tempfile.mkstemp(prefix=".tmp-transcript-", suffix=".npz", dir=directory)
  os.close(fd)
  try:
    np.savez_compressed(tmp, tokens=tokens.astype(dtype), offsets=offsets,
                        ids=np.asarray(list(shard.ids), dtype=np.str_), meta=np.asarray(meta))
    final = shard_path(directory, index)
    os.replace(tmp, final)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)
  return final


def read(directory: str, index: int, expect_header: Optional[dict] = None
         ) -> Optional[TranscriptShard]:
  """Shard ``index`` of ``directory``, or None when it has none.

  Raises ``ValueError`` when the file was written with another header than
  ``expect_header`` (another target, other generation settings).
  """
  path = shard_path(directory, index)
  if not os.path.exists(path):
    return None
  with np.load(path, allow_pickle=False) as z:
    meta = json.loads(str(z["meta"]))
    if meta.get("format") != _FORMAT:
      raise ValueError(f"{path}: format {meta.get('format')!r}, expected {_FORMAT!r}")
    tokens = z["tokens"].astype(np.int32)
    offsets = z["offsets"]
    ids = tuple(str(i) for i in z["ids"])
  if expect_header is not None and meta["header"] != expect_header:
    diff = sorted(k for k in set(meta["header"]) | set(expect_header)
                  if meta["header"].get(k) != expect_header.get(k))
    raise ValueError(f"transcript {path} was generated with other settings ({', '.join(diff)}: "
                     f"{[meta['header'].get(k) for k in diff]} vs "
                     f"{[expect_header.get(k) for k in diff]}); use another transcripts "
                     "directory")
  answers = tuple(tokens[offsets[i]:offsets[i + 1]] for i in range(len(ids)))
  return TranscriptShard(ids=ids, answers=answers, temperature=float(meta["temperature"]),
                         header=meta["header"])


def count(directory: str) -> int:
  """Number of consecutive shards ``0, 1, ...`` present in ``directory``."""
  n = 0
  while os.path.exists(shard_path(directory, n)):
    n += 1
  return n


def summary(directory: str) -> dict:
  """Totals over the consecutive shards of ``directory`` (turns, generated tokens,
  per temperature), for docs and notes."""
  turns, tokens, per_t = 0, 0, {}
  for i in range(count(directory)):
    s = read(directory, i)
    turns += len(s.ids)
    tokens += s.num_tokens
    per_t[str(s.temperature)] = per_t.get(str(s.temperature), 0) + s.num_tokens
  return {"shards": count(directory), "turns": turns, "generated_tokens": tokens,
          "generated_tokens_per_temperature": per_t}
