"""The target's next-token distribution as a training target: dense (computed by
the target in the train step) or sparse (the top-k stored in a feature store).

EAGLE-1 (Li et al. 2024, Sec. 4.1, the classification loss), EAGLE-3 (Li et al.
2025, Sec. 3.2) and a distilled draft LM all minimise a cross-entropy
``-sum_v p(v) log q(v)`` to the target's distribution ``p``. One
:class:`TargetDist` carries ``p`` in either form, so each loss is written once and
runs on both paths:

* dense: ``probs [B, T, V]`` with ``ids = None`` (entry v is token v);
* sparse: ``probs [B, T, k]`` renormalised over the stored top-k and
  ``ids [B, T, k]`` their target-vocabulary ids (``topk_target_probs``).

With ``k = V`` both forms give the same numbers (up to the store's float16
log-probs).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp

from specjax.training.features import topk_target_probs


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TargetDist:
  """Attributes:
    probs: [B, T, k] float32, sums to 1 over k (k = V when dense).
    ids: [B, T, k] int32 target-vocabulary ids of ``probs``' entries, or None (dense).
  """

  probs: jax.Array
  ids: Optional[jax.Array] = None


def dense(logits) -> TargetDist:
  """``logits [B, T, V]`` -> the full softmax distribution."""
  return TargetDist(jax.nn.softmax(jnp.asarray(logits, jnp.float32), axis=-1))


def from_topk(topk_ids, topk_logp) -> TargetDist:
  """Stored ``topk_ids [B, T, k]`` int, ``topk_logp [B, T, k]`` -> renormalised top-k."""
  return TargetDist(topk_target_probs(topk_logp), jnp.asarray(topk_ids, jnp.int32))


def window(dist: TargetDist, start: int, n: int) -> TargetDist:
  """Positions ``start .. start+n-1`` (zero probability past the end): ``[B, n, k]``."""
  def cut(x):
    pad = jnp.zeros((x.shape[0], start + n) + x.shape[2:], x.dtype)
    return jnp.concatenate([x[:, start:start + n], pad], 1)[:, :n]
  return TargetDist(cut(dist.probs), None if dist.ids is None else cut(dist.ids))


def top1(dist: TargetDist) -> jax.Array:
  """The target's most likely token id per position ``[B, T]`` int32."""
  j = jnp.argmax(dist.probs, -1)
  if dist.ids is None:
    return j.astype(jnp.int32)
  return jnp.take_along_axis(dist.ids, j[..., None], -1)[..., 0]


def cross_entropy(dist: TargetDist, logq) -> jax.Array:
  """``-sum_v p(v) log q(v)`` per position ``[B, T]``; ``logq [B, T, V]`` log-probs."""
  if dist.ids is None:
    return -jnp.sum(dist.probs * logq, -1)
  return -jnp.sum(dist.probs * jnp.take_along_axis(logq, dist.ids, -1), -1)


def draft_index(draft_ids, vocab_size: int) -> jax.Array:
  """``[V] int32``: position of target id v in the draft vocabulary ``draft_ids [Vd]``
  (sorted target ids), -1 outside it (the ``t2d`` map as indices)."""
  d = jnp.asarray(draft_ids, jnp.int32)
  return jnp.full((vocab_size,), -1, jnp.int32).at[d].set(jnp.arange(d.shape[0], dtype=jnp.int32))


def to_draft_vocab(dist: TargetDist, draft_ids, index) -> tuple[TargetDist, jax.Array]:
  """EAGLE-3's reduced-vocabulary target (Li et al. 2025, Sec. 3; the published
  ``t2d`` masking): ``p`` restricted to the draft vocabulary and renormalised, in
  draft ids, and ``in_draft [B, T]`` -- whether the target's argmax lies in it
  (positions where it does not are masked out of the loss).

  Args:
    draft_ids: [Vd] int32 sorted target ids of the draft vocabulary.
    index: [V] int32 from :func:`draft_index`.
  """
  in_draft = index[top1(dist)] >= 0
  if dist.ids is None:
    p = dist.probs[..., draft_ids]
    return TargetDist(p / jnp.maximum(p.sum(-1, keepdims=True), 1e-30)), in_draft
  d = index[dist.ids]  # [B, T, k] draft ids, -1 outside
  p = jnp.where(d >= 0, dist.probs, 0.0)
  p = p / jnp.maximum(p.sum(-1, keepdims=True), 1e-30)
  return TargetDist(p, jnp.maximum(d, 0)), in_draft
