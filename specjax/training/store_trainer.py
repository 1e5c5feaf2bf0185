"""One training loop for every model trained from a feature store: EAGLE-1 and
EAGLE-3 heads (:mod:`store_losses`) and the distilled draft LM (:mod:`distill`).

It runs on the shared loop (:mod:`specjax.training.loop`) without a target
forward: optax AdamW (:mod:`optim`), a jitted train step with the state
donated, orbax checkpoints holding the state, the data state and the metrics,
and exact resume -- batch
``s`` is a pure function of the data state and the batcher's window table, whose
shard count is checkpointed and checked, and the step's PRNG key is
``fold_in(key(init_seed + 1), s)``.

``training.json`` in the workdir (rewritten at every checkpoint and at the end)
records what was trained on what: the store directory and its target's file
sha256, shards, windows, tokens and target positions seen, steps, losses,
held-out evals and the caller's ``record`` (kind, configs). A workdir whose
``training.json`` names another target or kind is refused.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Optional

import jax

from specjax.training import loop
from specjax.training import optim as optim_lib
from specjax.training import state as state_lib
from specjax.training.loop import read_training_json


@dataclasses.dataclass(frozen=True)
class StoreTrainConfig(loop.LoopConfig):
  """The loop's settings (:class:`~specjax.training.loop.LoopConfig`, its defaults)."""


@functools.lru_cache(maxsize=8)
def _compiled(loss, optim_cfg: optim_lib.OptimConfig):
  """``(optimizer, train_step, eval_fn)`` for a hashable loss (one compilation per setup)."""
  optimizer = optim_lib.make_optimizer(optim_cfg)
  return (optimizer, loop.make_train_step(loss, optimizer),
          jax.jit(lambda p, fr, b: loss(p, fr, b, None)[1]))


class StoreTrainer(loop.TrainLoop):
  """One run on :class:`~specjax.training.loop.TrainLoop`: ``trainer.train()``
  initialises or restores the latest checkpoint under ``workdir/checkpoints`` and
  trains to ``cfg.num_steps``, rewriting ``training.json`` at every checkpoint.

  Args:
    loss: hashable ``loss(params, frozen, batch, key) -> (loss, metrics)``.
    frozen: the frozen params the loss reads (target embedding / LM head), or {}.
    init_params: ``key -> params`` of a fresh run.
    train_batcher, eval_batcher: :class:`~specjax.training.store_batching.StoreBatcher` or
      :class:`~specjax.training.store_batching.MixedBatcher`.
    record: JSON facts written to training.json; its ``kind`` and ``target_sha256``
      must match an existing run's in ``workdir``.
  """

  def __init__(self, loss, frozen, init_params: Callable, optim_cfg: optim_lib.OptimConfig,
               cfg: StoreTrainConfig, train_batcher, eval_batcher=None,
               workdir: Optional[str] = None, record: Optional[dict] = None,
               progress: bool = True):
    self.loss, self.frozen, self.init_params = loss, frozen, init_params
    self.optim_cfg = optim_cfg
    optimizer, self._train_step, self._eval = _compiled(loss, optim_cfg)
    self.eval_batcher = eval_batcher
    self.record = dict(record or {})
    self.record.setdefault("target_sha256", train_batcher.target_sha256)
    if workdir:
      self._check_workdir(workdir)
    eval_set = (eval_batcher.eval_batches(cfg.eval_batches)
                if eval_batcher is not None and cfg.eval_batches else [])
    super().__init__(cfg, optimizer, train_batcher, eval_set, workdir, progress,
                     timing={"train_seconds": 0.0, "timed_steps": 0, "target_positions": 0.0},
                     desc=f"train {self.record.get('kind', '')}")

  def _check_workdir(self, workdir: str) -> None:
    prev = read_training_json(workdir)
    if prev is None:
      return
    for key in ("kind", "target_sha256"):
      if key in self.record and prev.get(key) != self.record[key]:
        raise ValueError(f"workdir {workdir} holds a run with {key}={prev.get(key)!r}; this run "
                         f"has {key}={self.record[key]!r}. Use another workdir.")

  # ---- the loop's hooks -----------------------------------------------------------------------
  def init_state(self) -> state_lib.TrainState:
    return state_lib.create(self.init_params(jax.random.key(self.cfg.init_seed)), self.optimizer)

  def run_step(self, state, batch, key):
    return self._train_step(state, self.frozen, batch, key)

  def eval_metrics(self, batch) -> dict:
    return self._eval(self.state.params, self.frozen, batch)

  def account(self, batch, timed: bool) -> None:
    if timed:
      self.timing["timed_steps"] += 1
    self.timing["target_positions"] += float(batch["mask"].sum())

  def checkpoint_data(self) -> dict:
    return dict(self.data_state.to_json(), num_shards=self.train_batcher.num_shards)

  def check_restored_data(self, data: dict) -> None:
    want = self.train_batcher.num_shards
    if data.get("num_shards") != want:
      raise ValueError(f"the checkpoint in {self.workdir} was trained on the store's first "
                       f"{data.get('num_shards')} shards, this batcher reads {want}: pass "
                       f"num_shards={data.get('num_shards')} to resume exactly")

  def summary(self) -> dict:
    """The training.json contents."""
    b = self.train_batcher
    steps = int(self.state.step) if self.state is not None else 0
    t = self.timing
    return dict(
        self.record, data=b.describe(),
        heldout=self.eval_batcher.describe() if self.eval_batcher is not None else None,
        steps=steps, tokens_seen=steps * b.batch_size * b.seq_len,
        target_positions_seen=int(t["target_positions"]),
        seconds_per_step=t["train_seconds"] / max(t["timed_steps"], 1),
        train_seconds=t["train_seconds"], resumed_from=self.resumed_from,
        optim=dataclasses.asdict(self.optim_cfg), train=dataclasses.asdict(self.cfg),
        loss_history=[h["loss"] for h in self.history],
        last_metrics=self.history[-1] if self.history else None, evals=self.evals)
