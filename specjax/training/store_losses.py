"""EAGLE-1 / EAGLE-3 losses on feature-store batches (:mod:`store_batching`).

The same loss definitions as the on-the-fly trainer
(:func:`specjax.training.eagle.eagle1_loss_on_features`,
:func:`~specjax.training.eagle.eagle3_loss_on_features`), fed with the stored
features (bf16, cast to float32), the stored top-k next-token distribution
renormalised (:func:`specjax.training.target_dist.from_topk`) and the
assistant-token target mask. Only the target's embedding -- and, for EAGLE-1,
its LM head -- take part: :func:`frozen_target_params` keeps just those.

A loss is a frozen dataclass (hashable: static under jit, so trainers of the
same setup share one compilation) called as
``loss(params, frozen, batch, key) -> (loss, metrics)``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax.numpy as jnp

from specjax.models.eagle import EagleHead
from specjax.models.transformer import Model
from specjax.training import eagle as eagle_train
from specjax.training import target_dist


def frozen_target_params(target: Model, target_params) -> dict:
  """The part of the target's params a head's loss reads: the embedding, plus the
  LM head when it is not tied to it."""
  keep = {"embed_tokens": target_params["embed_tokens"]}
  if not target.config.tie_word_embeddings:
    keep["lm_head"] = target_params["lm_head"]
  return keep


@dataclasses.dataclass(frozen=True)
class EagleStoreLoss:
  """Attributes:
    head: the head being trained (its ``config.target_layers`` are the batch's
      ``feature_layers``, in order).
    target: the target Model (config only: embedding / LM-head shapes, dtype).
    cfg: loss settings (EAGLE-1 weights and noise, EAGLE-3 ttt_steps / decay).
    draft_ids: EAGLE-3 sorted target ids of the draft vocabulary (None = all).
  """

  head: EagleHead
  target: Model
  cfg: eagle_train.EagleTrainConfig
  draft_ids: Optional[tuple] = None

  def __call__(self, params, frozen, batch, key=None):
    tokens = jnp.asarray(batch["tokens"], jnp.int32)  # [B, T]
    hid = jnp.asarray(batch["features"]).astype(jnp.float32)  # [F, B, T, H]
    dist = target_dist.from_topk(batch["topk_ids"], batch["topk_logp"])  # [B, T, k]
    mask = jnp.asarray(batch["mask"], jnp.float32)  # [B, T]
    if self.head.config.kind == "eagle1":
      return eagle_train.eagle1_loss_on_features(self.head, self.target, params, frozen, tokens,
                                                 hid, dist, mask, self.cfg, key)
    ids = None if self.draft_ids is None else jnp.asarray(self.draft_ids, jnp.int32)
    return eagle_train.eagle3_loss_on_features(self.head, self.target, params, frozen, tokens,
                                               hid, dist, mask, self.cfg, ids, key)

  def init_params(self, key):
    return self.head.init_params(key)
