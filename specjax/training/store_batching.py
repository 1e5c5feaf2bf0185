"""Deterministic, resumable batches of fixed-length windows cut from a feature store.

Every stored sequence of length L is tiled into windows starting at
``0, T, 2T, ...`` (``T = window``); a window never crosses a sequence boundary
and a short last window is right-padded. Position s of a window is a *target*
position (``mask[s] = 1``) iff the token it predicts, ``x_{s+1}``, exists in the
sequence and is an assistant token (the store's ``loss_mask``): the next-token
distribution stored at s, and the feature at s + 1, are then trained on. Windows
without a target position are dropped.

Held-out split: a sequence is held out iff ``sha256(its conversation id) mod
1000 < eval_permille`` (the global sequence index when the store has no ids) --
disjoint from training, stable as the store grows, and the same conversations
in a ShareGPT-text store and an on-policy store of the same conversations (whose
sequences are the conversation's answered turns, ``"<id>#<turn>"``).

Batch ``s`` of the training windows is a pure function of ``(windows, seed,
step)``, exactly as :mod:`specjax.data.batching`: epoch ``e`` visits the windows
in the order of ``default_rng([seed, e]).permutation``; the data state is
:class:`~specjax.data.batching.DataState` ``(seed, step)``. The windows are
fixed by the first ``num_shards`` shards, which a run records and reuses on
resume, so a store still being extended does not change a resumed run's data.

Reads are memory-mapped: a batch touches only its windows' rows.

Token budgets and mixtures (the controlled comparison of training data): with
``max_target_tokens`` the training split keeps its windows in stream order up to
the first one at which the count of target positions reaches the budget, so two
stores can be compared at equal token counts; :class:`MixedBatcher` draws
batches from the union of several batchers' windows (e.g. half the budget from
ShareGPT text, half from the target's own answers), with the same deterministic
order and resume rule.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Optional

import numpy as np

from specjax.data.batching import DataState
from specjax.training.features import FeatureStore


@dataclasses.dataclass(frozen=True)
class StoreBatchConfig:
  """Attributes:
    window: tokens per window T (>= 2).
    batch_size: windows per batch B.
    feature_layers: target layers whose features a batch carries, in this order
      (each must be one of the store's ``hidden_layers``); () = no features (draft LM).
    top_k: stored candidates a batch carries (0 = all the store has).
    eval_permille: held-out share of sequences, per mille of hashed ids.
    num_shards: shards the windows are cut from (0 = all the store has now).
    max_target_tokens: keep the training windows, in stream order, until their
      target positions reach this count (0 = all); the held-out split is never cut.
  """

  window: int = 512
  batch_size: int = 8
  feature_layers: tuple = ()
  top_k: int = 0
  eval_permille: int = 20
  num_shards: int = 0
  max_target_tokens: int = 0

  def __post_init__(self):
    if not (isinstance(self.window, int) and self.window >= 2):
      raise ValueError(f"window={self.window!r} must be an integer >= 2")
    if not (isinstance(self.batch_size, int) and self.batch_size >= 1):
      raise ValueError(f"batch_size={self.batch_size!r} must be an integer >= 1")
    if not 0 <= self.eval_permille < 1000:
      raise ValueError(f"eval_permille={self.eval_permille!r} must lie in [0, 1000)")
    for name in ("top_k", "num_shards", "max_target_tokens"):
      v = getattr(self, name)
      if not (isinstance(v, int) and v >= 0):
        raise ValueError(f"{name}={v!r} must be an integer >= 0")


def conversation_id(seq_id: str) -> str:
  """The conversation a sequence id belongs to: on-policy stores name a sequence
  ``"<conversation id>#<message index>"`` (one per answered user turn); others
  name the conversation itself."""
  head, sep, tail = seq_id.rpartition("#")
  return head if sep and head and tail.isdigit() else seq_id


def is_heldout(seq_id: str, eval_permille: int) -> bool:
  """Deterministic held-out membership of a sequence id: sha256 of its
  :func:`conversation_id` mod 1000, so every turn of a conversation falls on the
  same side, in every store built from the same conversations."""
  h = int.from_bytes(hashlib.sha256(conversation_id(seq_id).encode()).digest()[:8], "little")
  return h % 1000 < eval_permille


def _read_ids(store: FeatureStore, shard: int) -> list:
  import json
  import os
  path = os.path.join(store.dir, store.manifest["shards"][shard]["name"], "ids.json")
  with open(path) as f:
    return json.load(f)


def window_targets(store: FeatureStore, windows: np.ndarray) -> np.ndarray:
  """int64 ``[W]``: the target positions of each window-table row."""
  out = np.zeros((len(windows),), np.int64)
  for r, (shard, s, n, end) in enumerate(windows):
    lm = store.shard(int(shard))["loss_mask"]
    out[r] = int(np.count_nonzero(np.asarray(lm[s + 1:min(s + n + 1, end)])))
  return out


def within_budget(store: FeatureStore, windows: np.ndarray, max_target_tokens: int) -> np.ndarray:
  """The stream-order prefix of ``windows`` whose target positions first reach
  ``max_target_tokens`` (all of them when the budget is 0 or never reached)."""
  if not max_target_tokens:
    return windows
  cum = np.cumsum(window_targets(store, windows))
  return windows[:int(np.searchsorted(cum, max_target_tokens)) + 1]


def cut_windows(store: FeatureStore, window: int, num_shards: int, eval_permille: int):
  """``(train, heldout)`` window tables: int64 ``[W, 4]`` rows ``(shard, start,
  length, seq_end)`` (offsets within the shard), in stream order."""
  rows = {False: [], True: []}
  for i in range(num_shards):
    sh = store.shard(i)
    off = np.asarray(sh["offsets"])
    lm = np.asarray(sh["loss_mask"])
    ids = _read_ids(store, i)
    first = store.manifest["shards"][i]["first_sequence"]
    for j in range(len(off) - 1):
      a, b = int(off[j]), int(off[j + 1])
      sid = ids[j] if j < len(ids) and ids[j] else f"#{first + j}"
      held = is_heldout(sid, eval_permille)
      for s in range(a, b - 1, window):
        n = min(window, b - s)
        if lm[s + 1:min(s + n + 1, b)].any():  # the window has a target position
          rows[held].append((i, s, n, b))
  as_arr = lambda r: np.asarray(r, np.int64).reshape(-1, 4)
  return as_arr(rows[False]), as_arr(rows[True])


class _WindowBatcher:
  """Deterministic batches over ``num_windows`` windows (module docstring); a
  subclass supplies :meth:`gather` and :meth:`describe`."""

  batch_size: int
  seq_len: int
  num_windows: int

  def __init__(self):
    self._perms: dict = {}

  def gather(self, rows) -> dict:
    """The batch made of window-table ``rows`` (abstract: a subclass defines it)."""
    raise NotImplementedError(f"{type(self).__name__} must define gather")

  def _perm(self, seed: int, epoch: int) -> np.ndarray:
    if (seed, epoch) not in self._perms:
      if len(self._perms) > 4:
        self._perms.clear()
      self._perms[(seed, epoch)] = np.random.default_rng([seed, epoch]).permutation(
          self.num_windows)
    return self._perms[(seed, epoch)]

  def batch(self, state: DataState) -> dict:
    """The batch at ``state.step`` (does not advance the state)."""
    idx = state.step * self.batch_size + np.arange(self.batch_size)
    epochs, pos = idx // self.num_windows, idx % self.num_windows
    return self.gather([self._perm(state.seed, int(e))[p] for e, p in zip(epochs, pos)])

  def epoch_of(self, state: DataState) -> float:
    return state.step * self.batch_size / self.num_windows

  def eval_batches(self, max_batches: Optional[int] = None) -> list:
    """Windows in stream order grouped into full batches (a last partial one dropped)."""
    b = self.batch_size
    n = max(self.num_windows // b, 1)  # fewer windows than B: one batch, windows repeated
    if max_batches:
      n = min(n, max_batches)
    return [self.gather([(i * b + j) % self.num_windows for j in range(b)]) for i in range(n)]


class StoreBatcher(_WindowBatcher):
  """Random-access batches over a :class:`FeatureStore` (module docstring).

  A batch is a dict of numpy arrays::

    tokens     int32    [B, T]          window tokens (0 past the sequence end)
    mask       float32  [B, T]          1 where position s is a target position
    features   bfloat16 [F, B, T, H]    target features at ``feature_layers`` (if any)
    topk_ids   int32    [B, T, k]       stored next-token candidates at s
    topk_logp  float16  [B, T, k]       their log-probabilities
  """

  def __init__(self, store: FeatureStore, config: StoreBatchConfig, split: str = "train"):
    super().__init__()
    if split not in ("train", "heldout"):
      raise ValueError(f"split={split!r}; choose 'train' or 'heldout'")
    have = len(store.manifest["shards"])
    n = config.num_shards or have
    if n > have:
      raise ValueError(f"num_shards={n} but the store {store.dir} has {have} shards")
    layers = tuple(store.config.hidden_layers)
    missing = [l for l in config.feature_layers if l not in layers]
    if missing:
      raise ValueError(f"feature_layers={tuple(config.feature_layers)}: {missing} not stored; "
                       f"the store at {store.dir} holds hidden_layers={layers}")
    k = config.top_k or store.config.top_k
    if k > store.config.top_k:
      raise ValueError(f"top_k={k} > the store's top_k={store.config.top_k}")
    self.store, self.config, self.split = store, config, split
    self.num_shards, self.top_k = n, k
    self.feature_index = [layers.index(l) for l in config.feature_layers]
    train, held = cut_windows(store, config.window, n, config.eval_permille)
    self.windows = (within_budget(store, train, config.max_target_tokens) if split == "train"
                    else held)
    self.num_windows = len(self.windows)
    if self.num_windows < 1:
      raise ValueError(f"the {split} split of {store.dir} ({n} shards, eval_permille="
                       f"{config.eval_permille}) has no window with a target position")
    self.batch_size, self.seq_len = config.batch_size, config.window

  @property
  def target_sha256(self) -> str:
    return self.store.manifest["target_sha256"]

  def window_rows(self):
    """Yields ``(store, shard, start, length, seq_end)`` per window, in table order."""
    for shard, s, n, end in self.windows:
      yield self.store, int(shard), int(s), int(n), int(end)

  def gather(self, rows) -> dict:
    """The batch made of window-table ``rows`` (indices into ``self.windows``)."""
    b, t, k = len(rows), self.config.window, self.top_k
    out = {"tokens": np.zeros((b, t), np.int32), "mask": np.zeros((b, t), np.float32),
           "topk_ids": np.zeros((b, t, k), np.int32),
           "topk_logp": np.zeros((b, t, k), np.float16)}
    feats = None
    if self.feature_index:
      import ml_dtypes
      h = self.store.shard(0)["features"].shape[-1]
      feats = np.zeros((len(self.feature_index), b, t, h), ml_dtypes.bfloat16)
    for r, w in enumerate(rows):
      shard, s, n, end = (int(x) for x in self.windows[int(w)])
      sh = self.store.shard(shard)
      out["tokens"][r, :n] = sh["tokens"][s:s + n]
      m = np.asarray(sh["loss_mask"][s + 1:min(s + n + 1, end)], np.float32)
      out["mask"][r, :len(m)] = m
      out["topk_ids"][r, :n] = sh["topk_ids"][s:s + n, :k]
      out["topk_logp"][r, :n] = sh["topk_logp"][s:s + n, :k]
      if feats is not None:
        feats[:, r, :n] = np.swapaxes(sh["features"][s:s + n][:, self.feature_index], 0, 1)
    if feats is not None:
      out["features"] = feats
    return out

  def describe(self) -> dict:
    """What a run records about its data (training.json)."""
    lens = self.windows[:, 2]
    return {"store": self.store.dir, "target_sha256": self.store.manifest["target_sha256"],
            "target_name": self.store.manifest.get("target_name", ""), "split": self.split,
            "num_shards": self.num_shards, "window": self.config.window,
            "batch_size": self.batch_size, "top_k": self.top_k,
            "feature_layers": list(self.config.feature_layers),
            "eval_permille": self.config.eval_permille, "num_windows": self.num_windows,
            "window_tokens": int(lens.sum()),
            "max_target_tokens": self.config.max_target_tokens,
            "target_tokens": int(window_targets(self.store, self.windows).sum()),
            "source": self.store.manifest.get("source", ""),
            "generation": self.store.manifest.get("generation")}


class MixedBatcher(_WindowBatcher):
  """Batches drawn from the union of several :class:`StoreBatcher`'s windows.

  Window ``w`` of the union is window ``w - offset[i]`` of part ``i`` (parts in
  order), and the union is shuffled per epoch exactly like one store, so a batch
  mixes the parts in proportion to their window counts. The parts must agree on
  the target, the window, the batch size, the features and top-k. ``num_shards``
  is the list of the parts' shard counts (a resumed run checks it).
  """

  def __init__(self, parts):
    super().__init__()
    parts = list(parts)
    if not parts:
      raise ValueError("parts=[]: a MixedBatcher needs at least one StoreBatcher")
    first = parts[0]
    for p in parts[1:]:
      for what in ("target_sha256", "batch_size", "seq_len", "top_k", "feature_index", "split"):
        if getattr(p, what) != getattr(first, what):
          raise ValueError(f"parts disagree on {what}: {getattr(first, what)!r} ({first.store.dir})"
                           f" vs {getattr(p, what)!r} ({p.store.dir})")
    self.parts = parts
    self.split, self.config = first.split, first.config
    self.batch_size, self.seq_len = first.batch_size, first.seq_len
    self.offsets = np.cumsum([0] + [p.num_windows for p in parts])
    self.num_windows = int(self.offsets[-1])
    self.num_shards = [p.num_shards for p in parts]

  @property
  def target_sha256(self) -> str:
    return self.parts[0].target_sha256

  def window_rows(self):
    for p in self.parts:
      yield from p.window_rows()

  def gather(self, rows) -> dict:
    rows = [int(r) for r in rows]
    part_of = np.searchsorted(self.offsets, rows, side="right") - 1
    one = [self.parts[i].gather([r - int(self.offsets[i])]) for i, r in zip(part_of, rows)]
    return {k: np.concatenate([b[k] for b in one], axis=1 if k == "features" else 0)
            for k in one[0]}

  def describe(self) -> dict:
    parts = [p.describe() for p in self.parts]
    return {"mixture": parts, "split": self.split, "num_shards": self.num_shards,
            "target_sha256": self.target_sha256, "window": self.config.window,
            "batch_size": self.batch_size, "num_windows": self.num_windows,
            "window_tokens": sum(p["window_tokens"] for p in parts),
            "target_tokens": sum(p["target_tokens"] for p in parts)}
