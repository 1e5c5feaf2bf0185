"""One training loop for every model trained from a feature store: EAGLE-1 and
EAGLE-3 heads (:mod:`store_losses`) and the distilled draft LM (:mod:`distill`).

The loop mirrors :class:`specjax.training.eagle.EagleTrainer` without the
target forward: optax AdamW (:mod:`optim`), a
:class:`~specjax.training.state.TrainState`, a jitted train step with the state
donated, orbax checkpoints (:class:`~specjax.training.checkpoint.Checkpointer`)
holding the state, the data state and the metrics, and exact resume -- batch
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
import json
import os
import time
from typing import Callable, Optional

import jax
import numpy as np
from absl import logging

from specjax.data.batching import DataState
from specjax.training import optim as optim_lib
from specjax.training import state as state_lib
from specjax.training.checkpoint import Checkpointer

TRAINING_JSON = "training.json"


@dataclasses.dataclass(frozen=True)
class StoreTrainConfig:
  """Attributes:
    num_steps: optimizer steps of the run.
    init_seed: init seed (and, +1, the per-step key seed); data_seed: window order seed.
    eval_every, eval_batches: held-out eval cadence / size (0 = off).
    checkpoint_every: orbax cadence in steps (0 = only at the end); log_every; max_to_keep.
  """

  num_steps: int = 1000
  init_seed: int = 0
  data_seed: int = 0
  eval_every: int = 200
  eval_batches: int = 8
  checkpoint_every: int = 100
  log_every: int = 25
  max_to_keep: int = 2

  def __post_init__(self):
    if self.num_steps < 1:
      raise ValueError(f"num_steps={self.num_steps} must be >= 1")
    for name in ("eval_every", "eval_batches", "checkpoint_every", "max_to_keep"):
      if getattr(self, name) < 0:
        raise ValueError(f"{name}={getattr(self, name)} must be >= 0")
    if self.log_every < 1:
      raise ValueError(f"log_every={self.log_every} must be >= 1")


@functools.lru_cache(maxsize=8)
def _compiled(loss, optim_cfg: optim_lib.OptimConfig):
  """``(optimizer, train_step, eval_fn)`` for a hashable loss (one compilation per setup)."""
  import optax
  optimizer = optim_lib.make_optimizer(optim_cfg)

  @functools.partial(jax.jit, donate_argnums=0)
  def step(state: state_lib.TrainState, frozen, batch, key):
    (_, m), grads = jax.value_and_grad(loss, has_aux=True)(state.params, frozen, batch, key)
    m = dict(m, grad_norm=optax.global_norm(grads))
    return state_lib.apply_gradients(state, grads, optimizer), m

  return optimizer, step, jax.jit(lambda p, fr, b: loss(p, fr, b, None)[1])


def read_training_json(workdir: str) -> Optional[dict]:
  path = os.path.join(workdir, TRAINING_JSON)
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


class StoreTrainer:
  """Owns one run: ``trainer.train()`` initialises or restores the latest checkpoint
  under ``workdir/checkpoints`` and trains to ``cfg.num_steps``.

  Args:
    loss: hashable ``loss(params, frozen, batch, key) -> (loss, metrics)``.
    frozen: the frozen params the loss reads (target embedding / LM head), or {}.
    init_params: ``key -> params`` of a fresh run.
    train_batcher, eval_batcher: :class:`~specjax.training.store_batching.StoreBatcher`.
    record: JSON facts written to training.json; its ``kind`` and ``target_sha256``
      must match an existing run's in ``workdir``.
  """

  def __init__(self, loss, frozen, init_params: Callable, optim_cfg: optim_lib.OptimConfig,
               cfg: StoreTrainConfig, train_batcher, eval_batcher=None,
               workdir: Optional[str] = None, record: Optional[dict] = None,
               progress: bool = True):
    self.loss, self.frozen, self.init_params = loss, frozen, init_params
    self.optim_cfg, self.cfg = optim_cfg, cfg
    self.optimizer, self._train_step, self._eval = _compiled(loss, optim_cfg)
    self.train_batcher, self.eval_batcher = train_batcher, eval_batcher
    self.workdir, self.progress = workdir, progress
    self.record = dict(record or {})
    self.record.setdefault("target_sha256", train_batcher.store.manifest["target_sha256"])
    if workdir:
      self._check_workdir(workdir)
    self.checkpointer = (Checkpointer(f"{workdir}/checkpoints", max_to_keep=cfg.max_to_keep)
                         if workdir else None)
    self._eval_set = (eval_batcher.eval_batches(cfg.eval_batches)
                      if eval_batcher is not None and cfg.eval_batches else [])
    self.state: Optional[state_lib.TrainState] = None
    self.data_state = DataState(seed=cfg.data_seed, step=0)
    self.history: list[dict] = []
    self.evals: list[dict] = []
    self.timing = {"train_seconds": 0.0, "timed_steps": 0, "target_positions": 0.0}
    self.resumed_from: Optional[int] = None

  def _check_workdir(self, workdir: str) -> None:
    prev = read_training_json(workdir)
    if prev is None:
      return
    for key in ("kind", "target_sha256"):
      if key in self.record and prev.get(key) != self.record[key]:
        raise ValueError(f"workdir {workdir} holds a run with {key}={prev.get(key)!r}; this run "
                         f"has {key}={self.record[key]!r}. Use another workdir.")

  # ---- state ------------------------------------------------------------------------------
  def init_state(self) -> state_lib.TrainState:
    return state_lib.create(self.init_params(jax.random.key(self.cfg.init_seed)), self.optimizer)

  def init_or_restore(self):
    fresh = self.init_state()
    if self.checkpointer is not None and self.checkpointer.latest_step() is not None:
      state, data, meta = self.checkpointer.restore(fresh)
      want = self.train_batcher.num_shards
      if data.get("num_shards") != want:
        raise ValueError(f"the checkpoint in {self.workdir} was trained on the store's first "
                         f"{data.get('num_shards')} shards, this batcher reads {want}: pass "
                         f"num_shards={data.get('num_shards')} to resume exactly")
      self.state = state
      self.data_state = DataState.from_json(data)
      self.history = list(meta.get("history", []))
      self.evals = list(meta.get("evals", []))
      self.timing = dict(meta.get("timing", self.timing))
      self.resumed_from = int(state.step)
      logging.info("restored checkpoint at step %d", self.resumed_from)
    else:
      self.state = fresh
    if int(self.state.step) != self.data_state.step:
      raise ValueError(f"checkpoint inconsistent: train step {int(self.state.step)} != "
                       f"data step {self.data_state.step}")

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

  def write_training_json(self) -> None:
    if not self.workdir:
      return
    os.makedirs(self.workdir, exist_ok=True)
    path = os.path.join(self.workdir, TRAINING_JSON)
    with open(path + ".tmp", "w") as f:
      json.dump(self.summary(), f, indent=1)
    os.replace(path + ".tmp", path)

  def save(self):
    if self.checkpointer is None:
      return
    meta = {"history": self.history, "evals": self.evals, "timing": self.timing}
    data = dict(self.data_state.to_json(), num_shards=self.train_batcher.num_shards)
    self.checkpointer.save(int(self.state.step), self.state, data, meta)
    self.checkpointer.wait()  # the next step donates these buffers
    self.write_training_json()

  # ---- loops ------------------------------------------------------------------------------
  def evaluate(self) -> dict:
    if not self._eval_set:
      return {}
    ms = [jax.device_get(self._eval(self.state.params, self.frozen, b)) for b in self._eval_set]
    out = {k: float(np.mean([m[k] for m in ms])) for k in ms[0]}
    return dict(step=int(self.state.step), **{f"eval_{k}": v for k, v in out.items()})

  def _key(self, step: int):
    return jax.random.fold_in(jax.random.key(self.cfg.init_seed + 1), step)

  def train(self, num_steps: Optional[int] = None, stop_after: Optional[int] = None,
            time_budget_s: Optional[float] = None) -> list:
    """Run to ``num_steps``; ``stop_after`` returns early after checkpointing (how tests
    simulate a kill), ``time_budget_s`` stops and checkpoints after that much wall time."""
    if self.state is None:
      self.init_or_restore()
    total = num_steps or self.cfg.num_steps
    end = min(total, stop_after) if stop_after else total
    start = int(self.state.step)
    bar = None
    if self.progress:
      from tqdm import tqdm
      bar = tqdm(total=total, initial=start, desc=f"train {self.record.get('kind', '')}",
                 dynamic_ncols=True, mininterval=5)
    t0 = t_last = time.time()
    first = True
    for s in range(start, end):
      batch = self.train_batcher.batch(self.data_state)
      self.state, m = self._train_step(self.state, self.frozen, batch, self._key(s))
      m = {k: float(v) for k, v in jax.device_get(m).items()}
      now = time.time()
      if not first:  # the first step of a process includes compilation
        self.timing["train_seconds"] += now - t_last
        self.timing["timed_steps"] += 1
      self.timing["target_positions"] += float(batch["mask"].sum())
      first, t_last = False, now
      self.history.append(m)
      self.data_state = DataState(self.data_state.seed, s + 1)
      step = s + 1
      if bar is not None:
        bar.update(1)
        bar.set_postfix(loss=f"{m['loss']:.3f}", refresh=False)
      if step % self.cfg.log_every == 0 or step == end:
        logging.info("step %d %s", step, " ".join(f"{k} {v:.4f}" for k, v in m.items()))
      out_of_time = time_budget_s is not None and now - t0 > time_budget_s
      if self.cfg.eval_every and (step % self.cfg.eval_every == 0 or step == total
                                  or out_of_time):
        ev = self.evaluate()
        if ev:
          self.evals.append(ev)
          logging.info("eval %s", ev)
        t_last = time.time()
      if self.checkpointer is not None and (
          (self.cfg.checkpoint_every and step % self.cfg.checkpoint_every == 0)
          or step == end or out_of_time):
        self.save()
        t_last = time.time()
      if out_of_time:
        logging.info("time budget %.0fs reached at step %d", time_budget_s, step)
        break
    if bar is not None:
      bar.close()
    if self.checkpointer is not None:
      self.checkpointer.wait()
    self.write_training_json()
    return self.history

  def close(self):
    if self.checkpointer is not None:
      self.checkpointer.close()
