"""Device parallelism: rows sharded over a mesh axis ``data`` with
``jax.shard_map`` inside ``jax.jit`` (the current form of pmap).

Every decode loop in specjax is row-independent (per-row caches, cursors and
RNG streams keyed by the *global* row index), so sharding rows changes
nothing but speed: each device runs its own ``while_loop`` over its rows.
Params are replicated over ``data``; on a mesh that also has a ``model``
axis they may be sharded over it (:func:`shard_params`), and XLA partitions
the matmuls (shard_map is manual over ``data`` only).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P


def make_mesh(data: int | None = None, model: int = 1) -> Mesh:
  """A ``(data, model)`` mesh over the local devices (``data`` defaults to all / model)."""
  n = jax.device_count()
  if data is None:
    data = n // model
  if data * model > n or data < 1 or model < 1:
    raise ValueError(f"mesh shape data={data} x model={model} needs {data * model} devices; "
                     f"{n} are available")
  devices = np.asarray(jax.devices()[:data * model]).reshape(data, model)
  return Mesh(devices, ("data", "model"))


def shard_params(params, mesh: Mesh, axis: str = "model"):
  """Place params on ``mesh``: the last dim of every >=2-D leaf divisible by the
  ``axis`` size is sharded over it; everything else is replicated."""
  size = mesh.shape.get(axis, 1)

  def place(x):
    spec = P()
    if size > 1 and x.ndim >= 2 and x.shape[-1] % size == 0:
      spec = P(*([None] * (x.ndim - 1) + [axis]))
    return jax.device_put(x, NamedSharding(mesh, spec))

  return jax.tree.map(place, params)


@functools.lru_cache(maxsize=64)
def _sharded(core, core_args: tuple, statics: tuple, mesh: Mesh, axis: str):
  kw = dict(statics)

  def per_shard(replicated, tokens, lengths, key, row_ids):
    return core(*core_args, *replicated, tokens, lengths, key, row_ids, **kw)

  names = frozenset({axis})
  fn = jax.shard_map(per_shard, mesh=mesh,
                     in_specs=(P(), P(axis), P(axis), P(), P(axis)), out_specs=P(axis),
                     axis_names=names, check_vma=False)
  return jax.jit(fn)


def pad_rows(tokens: np.ndarray, lengths: np.ndarray, multiple: int):
  """Pad the batch to a multiple of ``multiple`` by repeating row 0 (results dropped)."""
  b = tokens.shape[0]
  bp = math.ceil(b / multiple) * multiple
  if bp == b:
    return tokens, lengths
  reps = np.zeros((bp - b,), np.int64)
  return np.concatenate([tokens, tokens[reps]]), np.concatenate([lengths, lengths[reps]])


def run_sharded(core, core_args: tuple, statics: dict, replicated: tuple, tokens, lengths,
                key, row_offset: int, mesh: Mesh, axis: str = "data"):
  """Run ``core(*core_args, *replicated, tokens, lengths, key, row_ids, **statics)``
  with rows sharded over ``mesh[axis]``; returns the result for the real rows.

  ``core_args`` and ``statics`` are static (hashable; they key the compiled
  program).  ``replicated`` is a tuple of pytrees traced as arguments and
  replicated over ``axis``: params, and hyperparameter pytrees such as a
  ``SamplingConfig``, a drafter or a verification rule, whose continuous
  values then change without recompiling (:mod:`specjax.hyperparams`)."""
  if axis not in mesh.shape:
    raise ValueError(f"mesh has axes {tuple(mesh.shape)}; rows need a {axis!r} axis")
  b = tokens.shape[0]
  tokens, lengths = pad_rows(np.asarray(tokens), np.asarray(lengths), mesh.shape[axis])
  row_ids = np.arange(tokens.shape[0], dtype=np.int32) + row_offset
  fn = _sharded(core, core_args, tuple(sorted(statics.items())), mesh, axis)
  batch = NamedSharding(mesh, P(axis))
  put = lambda a: jax.device_put(jnp.asarray(a), batch)
  out = fn(replicated, put(tokens), put(lengths), key, put(row_ids))
  return jax.tree.map(lambda a: a[:b], out)
