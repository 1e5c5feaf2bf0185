"""Feature store: the frozen target's features and next-token distributions,
computed once over a token stream and stored on disk for head / draft training.

A SmolLM2-135M forward costs ~1-2 s per 256 tokens on a 2-core CPU, so
features for a million tokens cost about an hour: compute them once, train many
times from the store.

Per token t of every stored sequence (shapes per shard, N tokens in S sequences):

    tokens.npy     int32   [N]             the token ids
    loss_mask.npy  uint8   [N]             1 on assistant tokens (chat loss mask)
    offsets.npy    int64   [S + 1]         sequence s is tokens[offsets[s]:offsets[s+1]]
    features.npy   uint16  [N, F, H]       bfloat16 bits (view as ml_dtypes.bfloat16) of
                                           the target's hidden states at
                                           ``hidden_layers`` (layer *inputs*; index L =
                                           the final normed feature): EAGLE-3 fuses the
                                           low/mid/high ones, EAGLE-1 reads the last
    topk_ids.npy   int32   [N, k]          the k most likely next tokens at t (T = 1),
                                           descending; topk_ids[:, 0] is the argmax
    topk_logp.npy  float16 [N, k]          their log-probabilities (full-vocabulary
                                           log-softmax, not renormalised)
    ids.json                               the sequences' conversation ids

Compressed distribution (choice): the top-k (default 64) log-probabilities.
A loss against the target distribution uses them renormalised over the k ids
(``topk_target_probs``); the mass outside, ``1 - sum exp(topk_logp)``, is what
that costs and is reported by :func:`FeatureStore.topk_mass_stats`.

Resumable and idempotent: sequences are taken from the stream in order and
shard ``i`` holds sequences ``[i * S, (i + 1) * S)``. A shard is written to a
temporary directory and renamed into place, and the manifest (target file hash,
settings, shards) is rewritten atomically after each shard, so a killed run
leaves only whole shards; a restart skips the stream prefix the finished shards
cover and continues -- nothing is lost or duplicated. A restart with another
target or other settings is refused.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from typing import Callable, Iterable, Iterator, Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.training.json_files import read_json, write_json_atomic

MANIFEST = "manifest.json"
_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class FeatureStoreConfig:
  """Attributes:
    hidden_layers: target layer inputs to store (index L = final normed feature).
    top_k: stored next-token candidates per position.
    seqs_per_shard: sequences per shard (the resume granularity).
    bucket: sequences are right-padded to a multiple of this (bounded recompiles).
    max_len: longest sequence accepted (longer ones are refused, not cut: cut them
      when tokenizing).
  """

  hidden_layers: tuple = ()
  top_k: int = 64
  seqs_per_shard: int = 32
  bucket: int = 128
  max_len: int = 1024

  def __post_init__(self):
    if not self.hidden_layers or not all(isinstance(l, int) and l >= 0
                                         for l in self.hidden_layers):
      raise ValueError(f"hidden_layers={self.hidden_layers!r} must be a non-empty tuple of "
                       "layer indices >= 0")
    for name in ("top_k", "seqs_per_shard", "bucket", "max_len"):
      v = getattr(self, name)
      if not (isinstance(v, int) and v >= 1):
        raise ValueError(f"{name}={v!r} must be an integer >= 1")

  def to_json(self) -> dict:
    d = dataclasses.asdict(self)
    d["hidden_layers"] = list(self.hidden_layers)
    return d


def read_manifest(out_dir: str) -> Optional[dict]:
  return read_json(os.path.join(out_dir, MANIFEST))


def _feature_fn(model, top_k: int):
  """jitted ``tokens [1, T] -> (features [F, T, H] bf16, topk ids/logp [T, k])``."""

  def fn(params, tokens):
    t = tokens.shape[1]
    pos = jnp.arange(t, dtype=jnp.int32)[None]
    out = model.apply(params, tokens, pos, model.init_cache(1, t))
    logp = jax.nn.log_softmax(out.logits[0].astype(jnp.float32), axis=-1)
    top_logp, top_ids = jax.lax.top_k(logp, top_k)
    return out.hidden_states[:, 0].astype(jnp.bfloat16), top_ids, top_logp

  return jax.jit(fn)


def build_feature_store(out_dir: str, model, params, sequences: Iterable, *,
                        config: FeatureStoreConfig, target_sha256: str, target_name: str = "",
                        max_tokens: Optional[int] = None, source: str = "",
                        progress: bool = True) -> dict:
  """Extend (or create) the store in ``out_dir`` until ``max_tokens`` are stored or
  ``sequences`` runs out. Returns the manifest.

  Args:
    model, params: the target; ``model.config.hidden_layers`` must equal
      ``config.hidden_layers``.
    sequences: iterable of objects with ``.ids`` int [T], ``.loss_mask`` [T], ``.id``
      (e.g. :func:`specjax.data.chat_tokenize.tokenize_conversations`), in a
      deterministic order: a restart re-reads it from the start and skips the
      sequences already stored.
    target_sha256: the target file's hash, recorded and checked on resume.
    max_tokens: stop after the first shard that reaches this many stored tokens.
  """
  check_model_layers(model, config)
  fn = _feature_fn(model, config.top_k)
  header = {"format": _FORMAT, "target_sha256": target_sha256, "config": config.to_json(),
            "source": source}
  return extend_store(out_dir, header, sequences,
                      lambda batch, index, bar: (_compute_shard(fn, params, batch, config, bar),
                                                 {}),
                      items_per_shard=config.seqs_per_shard, target_name=target_name,
                      max_tokens=max_tokens, progress=progress)


def check_model_layers(model, config: FeatureStoreConfig) -> None:
  """Refuse a target whose selected hidden layers are not the store's."""
  if tuple(model.config.hidden_layers) != tuple(config.hidden_layers):
    raise ValueError(f"model hidden_layers={model.config.hidden_layers} differ from the "
                     f"store's hidden_layers={config.hidden_layers}; load the target with "
                     f"hidden_layers={config.hidden_layers}")


def extend_store(out_dir: str, header: dict, items: Iterable, compute_shard: Callable, *,
                 items_per_shard: int, target_name: str = "", max_tokens: Optional[int] = None,
                 count: str = "num_tokens", progress: bool = True) -> dict:
  """The resumable shard loop shared by every store writer. Returns the manifest.

  Args:
    header: what the store was built with (format, target hash, config, source,
      generation settings); a resume with any other value is refused.
    items: deterministic stream; shard ``i`` is built from items
      ``[i * items_per_shard, (i + 1) * items_per_shard)``.
    compute_shard: ``(items, shard_index, progress_bar) -> (arrays, extra)``:
      ``arrays`` as :func:`_compute_shard` returns them, ``extra`` a JSON dict
      added to the shard's manifest entry (e.g. its sampling temperature).
    max_tokens: stop after the first shard at which ``manifest[count]`` reaches it.
    count: ``"num_tokens"`` (every stored token) or ``"num_loss_tokens"``
      (tokens with loss mask 1) -- what ``max_tokens`` bounds.
  """
  if max_tokens is not None and max_tokens < 1:
    raise ValueError(f"max_tokens={max_tokens!r} must be >= 1 or None")
  if count not in ("num_tokens", "num_loss_tokens"):
    raise ValueError(f"count={count!r} must be 'num_tokens' or 'num_loss_tokens'")
  os.makedirs(out_dir, exist_ok=True)
  manifest = read_manifest(out_dir)
  if manifest is None:
    manifest = dict(header, target_name=target_name, shards=[], num_tokens=0,
                    num_loss_tokens=0, num_sequences=0)
  else:
    for key, want in header.items():
      if manifest.get(key) != want:
        raise ValueError(f"feature store {out_dir} was built with {key}={manifest.get(key)!r}, "
                         f"this run has {key}={want!r}; use another --output_dir or delete it")
  for leftover in os.listdir(out_dir):  # half-written shards of a killed run
    if leftover.startswith(".tmp-shard"):
      shutil.rmtree(os.path.join(out_dir, leftover), ignore_errors=True)

  skip = manifest["num_sequences"]
  it = iter(items)
  for _ in range(skip):
    if next(it, None) is None:
      return manifest
  bar = None
  if progress:
    from tqdm import tqdm
    bar = tqdm(total=max_tokens, initial=manifest.get(count, 0), unit="tok",
               desc=f"store -> {os.path.basename(out_dir.rstrip('/'))}")
  t_start = time.time()
  try:
    while max_tokens is None or manifest.get(count, 0) < max_tokens:
      batch = []
      for item in it:
        batch.append(item)
        if len(batch) == items_per_shard:
          break
      if not batch:
        break
      shard, extra = compute_shard(batch, len(manifest["shards"]), bar)
      name = f"shard-{len(manifest['shards']):05d}"
      _write_shard(out_dir, name, shard)
      n = int(shard["offsets"][-1])
      n_loss = int(np.asarray(shard["loss_mask"]).sum())
      manifest["shards"].append(dict({"name": name, "num_sequences": len(batch),
                                      "num_tokens": n, "num_loss_tokens": n_loss,
                                      "first_sequence": manifest["num_sequences"]}, **extra))
      manifest["num_sequences"] += len(batch)
      manifest["num_tokens"] += n
      manifest["num_loss_tokens"] = manifest.get("num_loss_tokens", 0) + n_loss
      manifest["seconds"] = manifest.get("seconds", 0.0) + (time.time() - t_start)
      t_start = time.time()
      write_json_atomic(os.path.join(out_dir, MANIFEST), manifest)
      if len(batch) < items_per_shard:
        break
  finally:
    if bar is not None:
      bar.close()
  return manifest


def _compute_shard(fn, params, batch, config: FeatureStoreConfig, bar) -> dict:
  records = []
  for seq in batch:
    ids = np.asarray(seq.ids, np.int32)
    t = len(ids)
    if not 1 <= t <= config.max_len:
      raise ValueError(f"sequence {getattr(seq, 'id', '?')!r} has {t} tokens; the store takes "
                       f"1..max_len={config.max_len}")
    padded = -(-t // config.bucket) * config.bucket
    x = np.zeros((1, padded), np.int32)
    x[0, :t] = ids
    f, ti, tl = fn(params, x)
    records.append(SequenceRecord(
        tokens=ids, loss_mask=np.asarray(seq.loss_mask, np.uint8),
        features=np.asarray(jax.device_get(f))[:, :t].swapaxes(0, 1),
        topk_ids=np.asarray(ti)[:t], topk_logp=np.asarray(tl)[:t],
        id=str(getattr(seq, "id", ""))))
    if bar is not None:
      bar.update(t)
  return shard_arrays(records)


@dataclasses.dataclass(frozen=True)
class SequenceRecord:
  """One stored sequence (T tokens, F hidden layers of width H, top-k candidates).

  Attributes:
    tokens: int [T]; loss_mask: [T] (1 on tokens a drafter learns to predict);
    features: bfloat16 [T, F, H]; topk_ids: int [T, k]; topk_logp: float [T, k];
    id: where the sequence came from (conversation id, turn).
  """

  tokens: np.ndarray
  loss_mask: np.ndarray
  features: np.ndarray
  topk_ids: np.ndarray
  topk_logp: np.ndarray
  id: str = ""


def shard_arrays(records: list) -> dict:
  """Concatenate :class:`SequenceRecord` s into the on-disk shard layout."""
  offsets = np.cumsum([0] + [len(r.tokens) for r in records]).astype(np.int64)
  return {"tokens": np.concatenate([np.asarray(r.tokens, np.int32) for r in records]),
          "loss_mask": np.concatenate([np.asarray(r.loss_mask, np.uint8) for r in records]),
          "offsets": offsets,
          "features": np.concatenate([np.asarray(r.features, jnp.bfloat16).view(np.uint16)
                                      for r in records]),
          "topk_ids": np.concatenate([np.asarray(r.topk_ids, np.int32) for r in records]),
          "topk_logp": np.concatenate([np.asarray(r.topk_logp, np.float16) for r in records]),
          "ids": [r.id for r in records]}


def _write_shard(out_dir: str, name: str, shard: dict) -> None:
  tmp = tempfile.mkdtemp(prefix=".tmp-shard-", dir=out_dir)
  for key, arr in shard.items():
    if key == "ids":
      with open(os.path.join(tmp, "ids.json"), "w") as f:
        json.dump(arr, f)
    else:
      np.save(os.path.join(tmp, f"{key}.npy"), arr, allow_pickle=False)
  final = os.path.join(out_dir, name)
  if os.path.exists(final):  # a shard not yet in the manifest (killed before it was written)
    shutil.rmtree(final)
  os.rename(tmp, final)


# ----------------------------------------------------------------------------- reading


class FeatureStore:
  """Read-only, memory-mapped view of a store written by :func:`build_feature_store`."""

  def __init__(self, out_dir: str, expect_sha256: Optional[str] = None):
    manifest = read_manifest(out_dir)
    if manifest is None:
      raise FileNotFoundError(f"no feature store at {out_dir} (missing {MANIFEST})")
    if expect_sha256 is not None and manifest["target_sha256"] != expect_sha256:
      raise ValueError(f"feature store {out_dir} holds features of target sha256 "
                       f"{manifest['target_sha256'][:12]}..., not {expect_sha256[:12]}...")
    self.dir = out_dir
    self.manifest = manifest
    self.config = FeatureStoreConfig(**dict(manifest["config"],
                                            hidden_layers=tuple(manifest["config"]
                                                                ["hidden_layers"])))
    self._shards = {}

  @property
  def num_tokens(self) -> int:
    return self.manifest["num_tokens"]

  @property
  def num_sequences(self) -> int:
    return self.manifest["num_sequences"]

  def shard(self, i: int) -> dict:
    """Arrays of shard ``i`` (memory-mapped; ``features`` viewed as bfloat16)."""
    if i not in self._shards:
      d = os.path.join(self.dir, self.manifest["shards"][i]["name"])
      arrs = {k: np.load(os.path.join(d, f"{k}.npy"), mmap_mode="r", allow_pickle=False)
              for k in ("tokens", "loss_mask", "offsets", "features", "topk_ids", "topk_logp")}
      arrs["features"] = arrs["features"].view(jnp.bfloat16)
      self._shards[i] = arrs
    return self._shards[i]

  def iter_sequences(self) -> Iterator[dict]:
    """Every stored sequence in stream order: dict of per-token arrays."""
    for i in range(len(self.manifest["shards"])):
      s = self.shard(i)
      off = s["offsets"]
      for j in range(len(off) - 1):
        a, b = int(off[j]), int(off[j + 1])
        yield {k: s[k][a:b] for k in ("tokens", "loss_mask", "features", "topk_ids",
                                        "topk_logp")}

  def topk_mass_stats(self) -> dict:
    """Probability mass the top-k candidates hold, over assistant (loss) positions."""
    mass, n = [], 0
    for i in range(len(self.manifest["shards"])):
      s = self.shard(i)
      m = np.exp(np.asarray(s["topk_logp"], np.float32)).sum(-1)[np.asarray(s["loss_mask"]) == 1]
      mass.append(m)
      n += len(m)
    m = np.concatenate(mass) if mass else np.zeros(0)
    return {"positions": n, "mean_mass": float(m.mean()) if n else float("nan"),
            "p05_mass": float(np.quantile(m, 0.05)) if n else float("nan")}


def topk_target_probs(topk_logp) -> jax.Array:
  """Target distribution renormalised over the stored top-k ids: ``[..., k]``."""
  return jax.nn.softmax(jnp.asarray(topk_logp, jnp.float32), axis=-1)
