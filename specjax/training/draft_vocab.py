"""Choosing EAGLE-3's reduced draft vocabulary from a feature store.

EAGLE-3 (Li et al. 2025; the published SGLang/SpecForge recipe) drafts over the
``Vd`` most frequent tokens only: its LM head has ``Vd`` rows, and training
positions whose target argmax lies outside them are masked. What matters is
therefore how often the *target's argmax* falls inside the draft vocabulary, on
the positions the head is trained and used on: :func:`argmax_counts` counts
``topk_ids[s, 0]`` over the target positions of a :class:`StoreBatcher`'s
windows, :func:`coverage` reports the share the top ``Vd`` ids cover, and
:func:`draft_vocab` / :func:`specjax.models.eagle.vocab_maps` give the ids and the
published ``(d2t, t2d)`` maps ``EagleHead`` reads (draft id d -> target id
``d + d2t[d]``; ``t2d[v]`` True iff v is in the draft vocabulary).
"""

from __future__ import annotations

import numpy as np

from specjax.models.eagle import vocab_maps

DEFAULT_SIZES = (4096, 8192, 16384)


def argmax_counts(batcher, vocab_size: int) -> np.ndarray:
  """int64 ``[V]``: how often each id is the target's argmax at a target position
  (``mask[s] = 1``) of the batcher's windows."""
  counts = np.zeros((vocab_size,), np.int64)
  for store, shard, s, n, end in batcher.window_rows():
    sh = store.shard(shard)
    m = np.asarray(sh["loss_mask"][s + 1:min(s + n + 1, end)]) == 1
    top1 = np.asarray(sh["topk_ids"][s:s + len(m), 0])[m]
    if len(top1) and (top1.min() < 0 or top1.max() >= vocab_size):
      raise ValueError(f"stored argmax ids lie outside [0, vocab_size={vocab_size})")
    counts += np.bincount(top1, minlength=vocab_size)
  return counts


def coverage(counts: np.ndarray, sizes=DEFAULT_SIZES) -> dict:
  """``{Vd: share of target-argmax occurrences the Vd most frequent ids cover}``."""
  counts = np.asarray(counts, np.float64)
  total = counts.sum()
  if total <= 0:
    raise ValueError("counts hold no occurrence: no target position to cover")
  desc = np.sort(counts)[::-1]
  cum = np.cumsum(desc)
  out = {}
  for vd in sizes:
    if not (isinstance(vd, (int, np.integer)) and vd >= 1):
      raise ValueError(f"draft vocabulary size {vd!r} must be an integer >= 1")
    out[int(vd)] = float(cum[min(int(vd), len(cum)) - 1] / total)
  return out


def draft_vocab(counts: np.ndarray, size: int, always=()) -> np.ndarray:
  """Sorted target ids of the ``size`` most frequent argmax ids (ties: lower id
  first), ``always`` (e.g. EOS) forced in."""
  v = len(counts)
  if not 1 <= size <= v:
    raise ValueError(f"draft vocabulary size={size} must lie in [1, vocab_size={v}]")
  c = np.asarray(counts, np.float64).copy()
  for t in always:
    c[int(t)] = np.inf
  return np.sort(np.argsort(-c, kind="stable")[:size])


def draft_maps(counts: np.ndarray, size: int, always=()):
  """``(draft_ids [Vd], d2t [Vd] int64, t2d [V] bool)`` for a draft vocabulary of ``size``."""
  ids = draft_vocab(counts, size, always)
  d2t, t2d = vocab_maps(ids, len(counts))
  return ids, d2t, t2d
