"""orbax CheckpointManager wrapper: train state (arrays) + data state and metrics (JSON).

Each checkpoint step directory holds items ``state`` (StandardSave of the
:class:`~specjax.training.state.TrainState` pytree), ``data`` (JSON, e.g.
``DataState.to_json()``) and ``meta`` (JSON: metrics so far, config). A fresh
process restores with :meth:`Checkpointer.restore` given an abstract state
(``jax.eval_shape`` of the initial state), so resuming needs no pickles.

Before restoring, the checkpoint's saved tree (orbax's item metadata: each
leaf's path, shape and dtype) is compared with the abstract state, and a
mismatch -- e.g. resuming a workdir after changing the model config -- raises a
ValueError naming the first differing leaf instead of orbax's tracebacks.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import jax
import numpy as np
import orbax.checkpoint as ocp


def _key_name(k) -> str:
  for attr in ("key", "name", "idx"):  # DictKey / FlattenedIndexKey, GetAttrKey, SequenceKey
    if hasattr(k, attr):
      return str(getattr(k, attr))
  return str(k)


def leaf_specs(tree) -> dict:
  """``{"a.b.0.c": (shape, dtype)}`` for every array leaf of ``tree`` (arrays,
  ShapeDtypeStructs or orbax ArrayMetadata), in flattening order.  Dataclass fields,
  namedtuple fields and dict keys all become their names, as in orbax's metadata."""
  flat, _ = jax.tree_util.tree_flatten_with_path(
      tree, is_leaf=lambda x: hasattr(x, "shape") and hasattr(x, "dtype"))
  return {".".join(_key_name(k) for k in path): (tuple(leaf.shape), np.dtype(leaf.dtype))
          for path, leaf in flat if hasattr(leaf, "shape")}


def tree_mismatch(saved: dict, current: dict) -> Optional[str]:
  """The first difference between two :func:`leaf_specs` (None if they agree), in
  the current tree's order, then leaves only the checkpoint has."""
  for name, (shape, dtype) in current.items():
    if name not in saved:
      return (f"leaf {name!r} {shape} {dtype} of the current model is not in the "
              "checkpoint")
    s_shape, s_dtype = saved[name]
    if (s_shape, s_dtype) != (shape, dtype):
      return (f"leaf {name!r} has shape {s_shape} {s_dtype} in the checkpoint but "
              f"{shape} {dtype} in the current model")
  top = {n.split(".")[0]: i for i, n in reversed(list(enumerate(current)))}
  extra = sorted((n for n in saved if n not in current),
                 key=lambda n: top.get(n.split(".")[0], len(top)))
  if extra:
    shape, dtype = saved[extra[0]]
    return (f"leaf {extra[0]!r} {shape} {dtype} of the checkpoint is not in the current "
            "model")
  return None


class Checkpointer:

  def __init__(self, directory: str, max_to_keep: int = 2, save_interval_steps: int = 1):
    self.directory = os.path.abspath(directory)
    opts = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep,
                                        save_interval_steps=save_interval_steps, create=True)
    # Handlers named up front, so a fresh process can read item metadata (check_matches).
    handlers = dict(state=ocp.StandardCheckpointHandler(), data=ocp.JsonCheckpointHandler(),
                    meta=ocp.JsonCheckpointHandler())
    self.manager = ocp.CheckpointManager(self.directory, options=opts, item_handlers=handlers)

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
    self.check_matches(abstract, step)
    out = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), data=ocp.args.JsonRestore(),
        meta=ocp.args.JsonRestore()))
    return out["state"], out["data"], out["meta"]

  def check_matches(self, abstract_state: Any, step: int) -> None:
    """ValueError unless checkpoint ``step`` holds exactly the leaves (paths, shapes,
    dtypes) of ``abstract_state``."""
    meta = self.manager.item_metadata(step)["state"]
    if meta is None:
      raise ValueError(f"checkpoint {self.directory} (step {step}) has no readable 'state' "
                       "metadata; it was not written by specjax's Checkpointer")
    saved = leaf_specs(meta)
    diff = tree_mismatch(saved, leaf_specs(abstract_state))
    if diff is not None:
      raise ValueError(
          f"checkpoint {self.directory} (step {step}) was written by a different model or "
          f"optimizer: {diff}. Resume with the config that wrote it, or start a new run "
          "in a new workdir.")

  def close(self):
    self.manager.wait_until_finished()
    self.manager.close()
