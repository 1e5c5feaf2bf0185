"""The one training loop: LM training (:mod:`lm`), EAGLE heads on a live target
(:mod:`eagle`) and every model trained from a feature store (:mod:`store_trainer`).

* :func:`make_train_step` -- ``loss_fn(params, *args) -> (loss, metrics)`` becomes a
  jitted ``step(state, *args) -> (state, metrics + grad_norm)`` with the state
  donated (optax AdamW through :func:`specjax.training.state.apply_gradients`).
* :class:`TrainLoop` -- init or restore (orbax, :class:`Checkpointer`: the state,
  the data state and the metrics), step to ``num_steps`` with a tqdm bar and absl
  logs, held-out evals every ``eval_every`` steps, checkpoints every
  ``checkpoint_every`` steps and at the end, an optional wall-time budget and, for
  trainers that describe their run (:meth:`TrainLoop.summary`), ``training.json``.

Exact resume: batch ``s`` is a pure function of the data state, the step key is
``fold_in(key(init_seed + 1), s)``, and the params and optimizer state are
restored bit for bit, so a run killed after its step-N checkpoint and resumed
reproduces the uninterrupted run (same machine, same XLA build).

A trainer subclasses :class:`TrainLoop` and supplies the model-specific parts:
:meth:`init_state`, :meth:`run_step` (one call of its jitted step) and
:meth:`eval_metrics` (one held-out batch), and optionally its logging, its
throughput accounting (:meth:`account`), extra checkpointed data and a summary.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any, Callable, Optional

import jax
import numpy as np
from absl import logging

from specjax.data.batching import DataState
from specjax.training import state as state_lib
from specjax.training.checkpoint import Checkpointer
from specjax.training.json_files import read_json, write_json_atomic

TRAINING_JSON = "training.json"


def make_train_step(loss_fn: Callable, optimizer) -> Callable:
  """``step(state, *args) -> (state, metrics)``, jitted, state donated.

  ``loss_fn(params, *args) -> (loss, metrics)``; the step adds ``grad_norm``.
  """
  import optax

  @functools.partial(jax.jit, donate_argnums=0)
  def step(state: state_lib.TrainState, *args):
    (_, m), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params, *args)
    m = dict(m, grad_norm=optax.global_norm(grads))
    return state_lib.apply_gradients(state, grads, optimizer), m

  return step


def read_training_json(workdir: str) -> Optional[dict]:
  """The ``training.json`` of a workdir, or None when there is none."""
  return read_json(os.path.join(workdir, TRAINING_JSON))


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """What the loop reads; every trainer's config extends it.

  Attributes:
    num_steps: optimizer steps of the run.
    init_seed: init seed (and, +1, the per-step key seed); data_seed: batch order seed.
    eval_every, eval_batches: held-out eval cadence / size (0 = off).
    checkpoint_every: orbax cadence in steps (0 = only at the end).
    log_every: absl logging cadence; max_to_keep: checkpoints kept.
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


class TrainLoop:
  """Init / restore, step, eval, checkpoint: the loop every trainer shares.

  Attributes set here: ``cfg`` (a :class:`LoopConfig`),
  ``optimizer``, ``train_batcher``, ``workdir``, ``checkpointer`` (None without
  a workdir), ``state``, ``data_state``, ``history`` (one entry per step, restored
  ones included), ``evals``, ``timing`` and ``resumed_from``.
  """

  def __init__(self, cfg, optimizer, train_batcher, eval_set: list,
               workdir: Optional[str], progress: bool, timing: dict, desc: str = "train"):
    self.cfg, self.optimizer = cfg, optimizer
    self.train_batcher = train_batcher
    self.workdir, self.progress, self.desc = workdir, progress, desc
    self.checkpointer = (Checkpointer(f"{workdir}/checkpoints", max_to_keep=cfg.max_to_keep)
                         if workdir else None)
    self._eval_set = eval_set
    self.state: Optional[state_lib.TrainState] = None
    self.data_state = DataState(seed=cfg.data_seed, step=0)
    self.history: list = []
    self.evals: list[dict] = []
    self.timing = dict(timing)
    self.run_stamp: Optional[dict] = None  # provenance of this process's run (training.json)
    self.resumed_from: Optional[int] = None

  # ---- what a trainer supplies --------------------------------------------------------------
  def init_state(self) -> state_lib.TrainState:
    raise NotImplementedError

  def run_step(self, state, batch, key) -> tuple[state_lib.TrainState, dict]:
    """One call of the jitted step on ``batch``; returns ``(state, metrics)``."""
    raise NotImplementedError

  def eval_metrics(self, batch) -> dict:
    """Metrics of the current params on one held-out batch."""
    raise NotImplementedError

  def restore_template(self):
    """The state orbax restores into (its shapes and dtypes)."""
    return self.init_state()

  def history_entry(self, metrics: dict) -> Any:
    return metrics

  def account(self, batch, timed: bool) -> None:
    """Add one step to ``timing`` (``timed``: it is not the compiling first step)."""
    if timed:
      self.timing["train_tokens"] += self.train_batcher.batch_size * self.train_batcher.seq_len

  def log_step(self, step: int, metrics: dict) -> None:
    logging.info("step %d %s", step, " ".join(f"{k} {v:.4f}" for k, v in metrics.items()))

  def log_eval(self, ev: dict) -> None:
    logging.info("eval %s", ev)

  def checkpoint_data(self) -> dict:
    """The JSON data item of a checkpoint (the data state, plus what resuming checks)."""
    return self.data_state.to_json()

  def check_restored_data(self, data: dict) -> None:
    """Raise when a checkpoint's data item cannot be resumed exactly by this trainer."""

  def summary(self) -> Optional[dict]:
    """The ``training.json`` contents, or None (no file)."""
    return None

  # ---- state ----------------------------------------------------------------------------------
  def init_or_restore(self):
    if self.checkpointer is not None and self.checkpointer.latest_step() is not None:
      state, data, meta = self.checkpointer.restore(self.restore_template())
      self.check_restored_data(data)
      self.state = state
      self.data_state = DataState.from_json(data)
      self.history = list(meta.get("history", []))
      self.evals = list(meta.get("evals", []))
      self.timing = dict(meta.get("timing", self.timing))
      self.resumed_from = int(state.step)
      logging.info("restored checkpoint at step %d", self.resumed_from)
    else:
      self.state = self.init_state()
    if int(self.state.step) != self.data_state.step:
      raise ValueError(f"checkpoint inconsistent: train step {int(self.state.step)} != "
                       f"data step {self.data_state.step}")

  def save(self):
    if self.checkpointer is None:
      return
    meta = {"history": self.history, "evals": self.evals, "timing": self.timing}
    self.checkpointer.save(int(self.state.step), self.state, self.checkpoint_data(), meta)
    self.checkpointer.wait()  # the next train step donates these buffers
    self.write_training_json()

  def write_training_json(self) -> None:
    """``training.json``: :meth:`summary` and the run's provenance
    (:func:`specjax.provenance.stamp` of the process that trained since the last
    resume: command, commit, clean tree, start time and load; and the load now)."""
    from specjax import provenance
    summary = self.summary() if self.workdir else None
    if summary is not None:
      if self.run_stamp is None:
        self.run_stamp = provenance.stamp()
      os.makedirs(self.workdir, exist_ok=True)
      write_json_atomic(os.path.join(self.workdir, TRAINING_JSON),
                        dict(summary, provenance=provenance.finish(self.run_stamp)))

  def step_key(self, step: int):
    """The PRNG key of train step ``step`` (feature noise, dropout)."""
    return jax.random.fold_in(jax.random.key(self.cfg.init_seed + 1), step)

  # ---- loop -----------------------------------------------------------------------------------
  def evaluate(self) -> dict:
    """``{"step", "eval_<metric>": mean over the held-out batches}`` ({} without any)."""
    if not self._eval_set:
      return {}
    ms = [jax.device_get(self.eval_metrics(b)) for b in self._eval_set]
    out = {k: float(np.mean([m[k] for m in ms])) for k in ms[0]}
    return dict(step=int(self.state.step), **{f"eval_{k}": v for k, v in out.items()})

  def train(self, num_steps: Optional[int] = None, stop_after: Optional[int] = None,
            time_budget_s: Optional[float] = None) -> list:
    """Run to ``num_steps`` (default ``cfg.num_steps``); ``stop_after`` returns early
    after checkpointing (how tests simulate a kill), ``time_budget_s`` stops and
    checkpoints once that much wall time has passed. Returns ``history``."""
    if self.state is None:
      self.init_or_restore()
    total = num_steps or self.cfg.num_steps
    end = min(total, stop_after) if stop_after else total
    start = int(self.state.step)
    bar = None
    if self.progress:
      from tqdm import tqdm
      bar = tqdm(total=total, initial=start, desc=self.desc, dynamic_ncols=True, mininterval=5)
    t0 = t_last = time.time()
    first = True
    for s in range(start, end):
      batch = self.train_batcher.batch(self.data_state)
      self.state, m = self.run_step(self.state, batch, self.step_key(s))
      m = {k: float(v) for k, v in jax.device_get(m).items()}  # blocks: the step is done
      now = time.time()
      if not first:  # the first step of a process includes compilation
        self.timing["train_seconds"] += now - t_last
      self.account(batch, timed=not first)
      first, t_last = False, now
      self.history.append(self.history_entry(m))
      self.data_state = DataState(self.data_state.seed, s + 1)
      step = s + 1
      if bar is not None:
        bar.update(1)
        bar.set_postfix(loss=f"{m['loss']:.3f}", refresh=False)
      if step % self.cfg.log_every == 0 or step == end:
        self.log_step(step, m)
      out_of_time = time_budget_s is not None and now - t0 > time_budget_s
      if self.cfg.eval_every and (step % self.cfg.eval_every == 0 or step == total
                                  or out_of_time):
        ev = self.evaluate()
        if ev:
          self.evals.append(ev)
          self.log_eval(ev)
        t_last = time.time()  # exclude eval from throughput
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
