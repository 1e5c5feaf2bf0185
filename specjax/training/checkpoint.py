"""orbax CheckpointManager wrapper: train state (arrays) + data state and metrics (JSON).

Each checkpoint step directory holds items ``state`` (StandardSave of the
:class:`~specjax.training.state.TrainState` pytree), ``data`` (JSON, e.g.
``DataState.to_json()``) and ``meta`` (JSON: metrics so far, config). A fresh
process restores with :meth:`Checkpointer.restore` given an abstract state
(``jax.eval_shape`` of the initial state), so resuming needs no pickles.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp


class Checkpointer:

  def __init__(self, directory: str, max_to_keep: int = 2, save_interval_steps: int = 1):
    self.directory = os.path.abspath(directory)
    opts = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                        save_interval_steps=save_interval_steps, create=True)
    self.manager = ocp.CheckpointManager(self.directory, options=opts,
                                         item_names=("state", "data", "meta"))

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def save(self, step: int, state: Any, data: dict, meta: dict | None = None,
           force: bool = True) -> bool:
    saved = self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), data=ocp.args.JsonSave(data),
        meta=ocp.args.JsonSave(meta or {})), force=force)
    return saved

  def wait(self):
    self.manager.wait_until_finished()

  def restore(self, abstract_state: Any, step: int | None = None):
    """Returns ``(state, data, meta)`` of ``step`` (default the latest)."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise FileNotFoundError(f"no checkpoint in {self.directory}")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, abstract_state)
    out = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore(),
        meta=ocp.args.JsonRestore()))
    return out["state"], out["data"], out["meta"]

  def close(self):
    self.manager.wait_until_finished()
    self.manager.close()
