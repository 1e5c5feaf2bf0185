"""Deterministic, resumable batching over a tokenized corpus.

The split's documents are encoded and concatenated, each followed by EOS,
into one token stream. The stream is cut into ``n = (N - 1) // seq_len``
non-overlapping windows of ``seq_len + 1`` tokens (inputs ``w[:-1]``, targets
``w[1:]``). Epoch ``e`` visits the windows in the order of a permutation drawn
from ``numpy.random.default_rng([seed, e])``; the ``i``-th example overall is
window ``perm_e[i mod n]`` with ``e = i // n``, and batch ``s`` holds examples
``s*B .. s*B + B - 1``. A batch is therefore a pure function of
``(stream, seq_len, batch_size, seed, step)``: the whole data state is
:class:`DataState` ``(seed, step)`` and resuming from it reproduces the exact
same batches.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from typing import Iterable

import numpy as np

from specjax.data import corpus as corpus_lib
from specjax.data import tokenizer as tok_lib


def encode_documents(tokenizer, texts: Iterable[str], eos: int, chunk: int = 256) -> np.ndarray:
  """Concatenate the encodings of ``texts``, each followed by ``eos`` -> int32 [N]."""
  parts, buf = [], []

  def flush():
    for enc in tokenizer.encode_batch(buf):
      parts.append(np.asarray(enc.ids, np.int32))
      parts.append(np.asarray([eos], np.int32))
    buf.clear()

  for t in texts:
    buf.append(t)
    if len(buf) >= chunk:
      flush()
  flush()
  return np.concatenate(parts) if parts else np.zeros((0,), np.int32)


def tokenizer_fingerprint(tokenizer) -> str:
  return hashlib.sha256(tokenizer.to_str().encode()).hexdigest()[:16]


def load_token_stream(cfg: corpus_lib.CorpusConfig, split: str, tokenizer,
                      cache_dir: str | None = None) -> np.ndarray:
  """The split's token stream (int32 [N]), cached as ``.npy`` under ``cache_dir`` if given."""
  files = corpus_lib.split_files(cfg, split)
  eos = tok_lib.eos_id(tokenizer)
  path = None
  if cache_dir:
    key = f"{corpus_lib.corpus_fingerprint(cfg, files)}-{tokenizer_fingerprint(tokenizer)}"
    path = os.path.join(cache_dir, f"tokens-{split}-{key}.npy")
    if os.path.isfile(path):
      return np.load(path)
  stream = encode_documents(tokenizer, (t for _, t in corpus_lib.read_documents(cfg, split)), eos)
  if path:
    os.makedirs(cache_dir, exist_ok=True)
    tmp = path + ".tmp.npy"
    np.save(tmp, stream)
    os.replace(tmp, path)
  return stream


@dataclasses.dataclass(frozen=True)
class DataState:
  """Everything needed to resume the batch stream. seed: permutation seed; step: next batch."""

  seed: int = 0
  step: int = 0

  def to_json(self) -> dict:
    return {"seed": int(self.seed), "step": int(self.step)}

  @classmethod
  def from_json(cls, d: dict) -> "DataState":
    return cls(seed=int(d["seed"]), step=int(d["step"]))


class Batcher:
  """Random-access batches of ``tokens [B, seq_len]`` / ``targets [B, seq_len]``."""

  def __init__(self, stream: np.ndarray, seq_len: int, batch_size: int):
    if seq_len < 1 or batch_size < 1:
      raise ValueError(f"seq_len={seq_len} and batch_size={batch_size} must be >= 1")
    self.stream = np.asarray(stream, np.int32)
    self.seq_len, self.batch_size = int(seq_len), int(batch_size)
    self.num_windows = (len(self.stream) - 1) // self.seq_len
    if self.num_windows < 1:
      raise ValueError(f"token stream of length {len(self.stream)} is shorter than "
                       f"seq_len + 1 = {self.seq_len + 1}")
    self._perms: dict = {}

  def _perm(self, seed: int, epoch: int) -> np.ndarray:
    k = (seed, epoch)
    if k not in self._perms:
      if len(self._perms) > 4:
        self._perms.clear()
      self._perms[k] = np.random.default_rng([seed, epoch]).permutation(self.num_windows)
    return self._perms[k]

  def window(self, w: int) -> np.ndarray:
    s = w * self.seq_len
    return self.stream[s:s + self.seq_len + 1]

  def batch(self, state: DataState) -> dict:
    """The batch at ``state.step`` (does not advance the state)."""
    idx = state.step * self.batch_size + np.arange(self.batch_size)
    epochs, pos = idx // self.num_windows, idx % self.num_windows
    wins = [self._perm(state.seed, int(e))[p] for e, p in zip(epochs, pos)]
    arr = np.stack([self.window(int(w)) for w in wins])
    return {"tokens": arr[:, :-1], "targets": arr[:, 1:]}

  def epoch_of(self, state: DataState) -> float:
    return state.step * self.batch_size / self.num_windows

  def eval_batches(self, max_batches: int | None = None) -> list[dict]:
    """Windows in stream order, grouped into full batches (deterministic held-out set)."""
    n = self.num_windows // self.batch_size
    if max_batches:
      n = min(n, max_batches)
    if n < 1:
      raise ValueError(f"{self.num_windows} windows cannot fill one batch of {self.batch_size}")
    out = []
    for b in range(n):
      arr = np.stack([self.window(b * self.batch_size + j) for j in range(self.batch_size)])
      out.append({"tokens": arr[:, :-1], "targets": arr[:, 1:]})
    return out


def next_state(state: DataState) -> DataState:
  return dataclasses.replace(state, step=state.step + 1)
