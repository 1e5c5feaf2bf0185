"""Language-model training: next-token cross-entropy on the shared loop
(:mod:`specjax.training.loop`: jitted donated train step, periodic held-out
eval, orbax checkpoints with exact resume).

Precision: ``"float32"`` or ``"bfloat16"`` -- the latter runs activations and
matmuls in bf16 while the master params and optimizer state stay float32
(the model config gets ``dtype=bfloat16, param_dtype=float32``; flax casts
the fp32 params per op).

Exact resume: the batch at step ``s`` is a pure function of the data state
(:mod:`specjax.data.batching`), the params and optimizer state are restored
bit for bit, and there is no other randomness, so a run killed after its
step-N checkpoint and resumed reproduces the uninterrupted run's later losses
exactly (same machine, same XLA build).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from specjax.data.batching import Batcher
from specjax.models.config import ModelConfig
from specjax.models.transformer import Model
from specjax.training import loop
from specjax.training import optim as optim_lib
from specjax.training import state as state_lib

PRECISIONS = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class LMTrainConfig(loop.LoopConfig):
  """The loop's settings (:class:`~specjax.training.loop.LoopConfig`) plus

  Attributes:
    precision: "float32" | "bfloat16" (activations; master params stay fp32).
  """

  eval_batches: int = 16
  checkpoint_every: int = 200
  log_every: int = 50
  precision: str = "float32"

  def __post_init__(self):
    if self.precision not in PRECISIONS:
      raise ValueError(f"precision={self.precision!r}; choose one of {PRECISIONS}")
    super().__post_init__()


def training_model(config: ModelConfig, precision: str) -> Model:
  """The model used inside the train step: fp32 params, activations per ``precision``."""
  return Model(config.replace(dtype=precision, param_dtype="float32"))


def lm_loss(model: Model, params, tokens, targets):
  """Mean next-token cross-entropy (nats) of ``tokens [B, T]`` against ``targets [B, T]``."""
  b, t = tokens.shape
  positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  cache = model.init_cache(b, t)
  logits = model.apply(params, tokens, positions, cache).logits  # [B, T, V] fp32
  logp = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
  return jnp.mean(nll)


def make_train_step(model: Model, optimizer) -> Callable:
  """``step(state, tokens, targets) -> (state, {"loss", "grad_norm"})``, jitted, state donated."""
  def loss_fn(params, tokens, targets):
    loss = lm_loss(model, params, tokens, targets)
    return loss, {"loss": loss}

  return loop.make_train_step(loss_fn, optimizer)


def make_eval_step(model: Model) -> Callable:
  return jax.jit(lambda params, tokens, targets: lm_loss(model, params, tokens, targets))


@functools.lru_cache(maxsize=16)
def cached_steps(model: Model, optim_cfg: optim_lib.OptimConfig):
  """``(optimizer, train_step, eval_step)`` shared by trainers of the same model and
  optimizer config in one process (one compilation; Model and OptimConfig are hashable)."""
  optimizer = optim_lib.make_optimizer(optim_cfg)
  return optimizer, make_train_step(model, optimizer), make_eval_step(model)


class LMTrainer(loop.TrainLoop):
  """One LM run on :class:`~specjax.training.loop.TrainLoop`.

  ``trainer.train()`` initialises (or restores the latest checkpoint under
  ``workdir/checkpoints``) and runs to ``cfg.num_steps``; the per-step train
  losses are in ``trainer.history`` (restored ones included).
  """

  def __init__(self, model_config: ModelConfig, optim_cfg: optim_lib.OptimConfig,
               cfg: LMTrainConfig, train_batcher: Batcher, eval_batcher: Optional[Batcher],
               workdir: Optional[str], progress: bool = True):
    self.model_config = model_config
    self.model = training_model(model_config, cfg.precision)
    self.optim_cfg = optim_cfg
    optimizer, self._train_step, self._eval_step = cached_steps(self.model, optim_cfg)
    self.eval_batcher = eval_batcher
    eval_set = (eval_batcher.eval_batches(cfg.eval_batches or None)
                if eval_batcher is not None else [])
    super().__init__(cfg, optimizer, train_batcher, eval_set, workdir, progress,
                     timing={"train_seconds": 0.0, "train_tokens": 0})

  def init_state(self) -> state_lib.TrainState:
    init = lambda key: state_lib.create(self.model.init_params(key), self.optimizer)
    return jax.jit(init)(jax.random.key(self.cfg.init_seed))

  def restore_template(self):
    return jax.eval_shape(self.init_state)

  def run_step(self, state, batch, key):
    return self._train_step(state, batch["tokens"], batch["targets"])

  def history_entry(self, metrics: dict) -> float:
    return metrics["loss"]

  def log_step(self, step: int, m: dict) -> None:
    logging.info("step %d loss %.4f grad_norm %.3f tok/s %.0f epoch %.2f", step, m["loss"],
                 m["grad_norm"], self.tokens_per_second(),
                 self.train_batcher.epoch_of(self.data_state))

  def log_eval(self, ev: dict) -> None:
    logging.info("step %d eval_loss %.4f eval_ppl %.2f", ev["step"], ev["eval_loss"],
                 ev["eval_ppl"])

  def mean_loss(self, batches) -> float:
    """Mean next-token loss (nats) of the current params over ``batches`` (equal sizes)."""
    return float(np.mean([float(self._eval_step(self.state.params, b["tokens"], b["targets"]))
                          for b in batches]))

  def evaluate(self) -> dict:
    if not self._eval_set:
      return {}
    loss = self.mean_loss(self._eval_set)
    return {"step": int(self.state.step), "eval_loss": loss, "eval_ppl": math.exp(loss)}

  def tokens_per_second(self) -> float:
    return self.timing["train_tokens"] / max(self.timing["train_seconds"], 1e-9)

  def final_params(self, dtype: str = "float32"):
    """The trained params cast to ``dtype`` (for export)."""
    return jax.tree.map(lambda x: jnp.asarray(x).astype(dtype), self.state.params)
