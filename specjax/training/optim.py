"""AdamW with linear warmup + cosine decay (Loshchilov & Hutter 2019), global-norm clipping."""

from __future__ import annotations

import dataclasses

import jax
import optax


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """Attributes:
    learning_rate: peak LR after warmup.
    warmup_steps: linear warmup from 0.
    total_steps: end of the cosine decay (to ``min_lr_ratio * learning_rate``).
    min_lr_ratio: final LR / peak LR.
    weight_decay: decoupled decay, applied to matrices only (not norms, biases).
    b1, b2, eps: Adam moments.
    grad_clip: global-norm clip (0 = off).
  """

  learning_rate: float = 3e-3
  warmup_steps: int = 100
  total_steps: int = 1000
  min_lr_ratio: float = 0.1
  weight_decay: float = 0.1
  b1: float = 0.9
  b2: float = 0.95
  eps: float = 1e-8
  grad_clip: float = 1.0

  def __post_init__(self):
    if self.total_steps < 1:
      raise ValueError(f"total_steps={self.total_steps} must be >= 1")
    if not 0 <= self.warmup_steps <= self.total_steps:
      raise ValueError(f"warmup_steps={self.warmup_steps} must lie in [0, total_steps]")
    if self.learning_rate <= 0:
      raise ValueError(f"learning_rate={self.learning_rate} must be > 0")


def schedule(cfg: OptimConfig) -> optax.Schedule:
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=cfg.learning_rate, warmup_steps=cfg.warmup_steps,
      decay_steps=cfg.total_steps, end_value=cfg.learning_rate * cfg.min_lr_ratio)


def decay_mask(params):
  """True for leaves with >= 2 dims (kernels, embeddings; stacked layers count from dim 1)."""
  def is_matrix(path, x):
    names = [getattr(p, "key", str(p)) for p in path]
    nd = x.ndim - (1 if "layers" in names else 0)
    return nd >= 2
  return jax.tree_util.tree_map_with_path(is_matrix, params)


def make_optimizer(cfg: OptimConfig) -> optax.GradientTransformation:
  parts = []
  if cfg.grad_clip:
    parts.append(optax.clip_by_global_norm(cfg.grad_clip))
  parts.append(optax.adamw(schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                           weight_decay=cfg.weight_decay, mask=decay_mask))
  return optax.chain(*parts)
