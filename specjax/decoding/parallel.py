"""Device parallelism on a ``(data, model)`` mesh: rows over ``data``, tensor
parallelism over ``model``, on one host or many.

**Rows (data parallel).** Every decode loop in specjax is row-independent
(per-row caches, cursors and RNG streams keyed by the *global* row index), so
:func:`run_sharded` runs the jitted loop under ``jax.shard_map`` that is
manual over ``data`` only: each ``data`` slice runs its own ``while_loop``
over its rows.  Batches are padded to a multiple of the axis and unpadded on
return.

**Weights (tensor parallel).** :func:`shard_params` places a model's params
by the logical axes their modules declare (``Model.logical_axes``) and one rules
table (``specjax.models.sharding.DEFAULT_RULES``): q/k/v and gate/up
column-parallel over heads / mlp, o and down row-parallel, embedding and LM
head vocab-parallel, norms replicated.  An axis whose units (whole heads,
entries) do not divide the ``model`` axis is replicated.  Inside the loop the
``model`` axis stays automatic: XLA partitions the matmuls from the params'
shardings and inserts the all-reduces; the KV caches the loop creates
(``Model.init_cache``) are split over KV heads the same way.  EAGLE head
params are not declared: place them with :func:`replicate` (they are small;
the target embedding / LM head they share stay as the target's).

Results do not depend on the mesh: rows and their RNG streams are the same
on any split.  Tensor parallelism changes the order of the floating-point
sums inside the row-parallel matmuls (all-reduce of partial sums), so logits
agree to rounding, not bit for bit; the tests check equal tokens on small
models whose next-token margins are far above that.

**Hosts.** Nothing here assumes one host: after ``specjax.distributed.
initialize`` every process calls the same entry point with the same global
batch; inputs become global arrays (each process fills its own devices) and
results are gathered to every process (``process_allgather``).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from specjax.checks import ArgumentTypeError
from specjax.models import sharding

AXES = ("data", "model")


def make_mesh(data: int | None = None, model: int = 1, devices=None) -> Mesh:
  """A ``(data, model)`` mesh over ``devices`` (default: every device of every
  process, ``jax.devices()``); ``data`` defaults to ``len(devices) // model``.

  Devices are laid out process-major, ``model`` innermost, so a ``model``
  group sits on one host when it fits there (its all-reduces stay local).
  A mesh smaller than the device count uses the first ``data * model``."""
  devices = list(jax.devices() if devices is None else devices)
  n = len(devices)
  for name, v in (("data", data), ("model", model)):
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
      raise ValueError(f"make_mesh: {name}={v!r} must be a positive integer")
  if model > n:
    raise ValueError(f"make_mesh: model={model} exceeds the {n} available devices")
  if data is None:
    data = n // model
  if data * model > n:
    raise ValueError(f"make_mesh: data={data} x model={model} needs {data * model} devices; "
                     f"{n} are available (data * model must be <= {n})")
  grid = np.asarray(devices[:data * model], dtype=object).reshape(data, model)
  return Mesh(grid, AXES)


def check_mesh(mesh, name: str = "mesh", axes=("data",)) -> Mesh:
  """``mesh`` is a ``jax.sharding.Mesh`` with every axis in ``axes``."""
  if not isinstance(mesh, Mesh):
    raise ArgumentTypeError(f"{name} must be a jax.sharding.Mesh (e.g. parallel.make_mesh()), "
                            f"got {type(mesh).__name__}")
  missing = [a for a in axes if a not in mesh.axis_names]
  if missing:
    raise ValueError(f"{name} has axes {tuple(mesh.axis_names)}; it needs axes {tuple(axes)} "
                     f"(missing {tuple(missing)}; parallel.make_mesh(data, model) builds one)")
  return mesh


def param_shardings(model, params, mesh: Mesh, rules=None):
  """``NamedSharding`` per leaf of ``params`` (arrays or ``ShapeDtypeStruct``s)
  from its logical axes and ``rules`` (default: the current
  ``sharding.axis_rules``, i.e. ``DEFAULT_RULES``)."""
  from specjax.models.transformer import Model
  if not isinstance(model, Model):
    hint = (" (the model goes first: shard_params(model, params, mesh))"
            if isinstance(model, dict) else "")
    raise ArgumentTypeError(f"model must be a specjax Model, got {type(model).__name__}{hint}")
  check_mesh(mesh, axes=())
  rules = sharding.current_rules() if rules is None else sharding.check_rules(rules)
  axes = model.logical_axes(params)
  used = {n for spec in jax.tree.leaves(axes, is_leaf=lambda x: isinstance(x, P)) for n in spec}
  absent = sorted({m for name, m in rules
                   if name in used and m is not None and m not in mesh.axis_names})
  if absent:
    raise ValueError(f"rules map logical axes to mesh axes {absent} that mesh (axes "
                     f"{tuple(mesh.axis_names)}) lacks; build the mesh with "
                     f"parallel.make_mesh(data, model) (model=1: no tensor parallelism) or "
                     f"pass rules over its axes")
  mesh_shape = dict(mesh.shape)
  units = model.axis_units

  def place(leaf, names):
    shape = tuple(leaf.shape) if hasattr(leaf, "shape") else np.shape(leaf)
    spec = sharding.partition_spec(tuple(names), shape, units, mesh_shape, rules)
    return NamedSharding(mesh, spec)

  return jax.tree.map(place, params, axes)


def shard_params(model, params, mesh: Mesh, rules=None):
  """Place ``params`` of ``model`` on ``mesh`` for tensor parallelism: each leaf
  sharded by its declared logical axes through ``rules`` (see
  ``specjax.models.sharding``), replicated over every other mesh axis
  (``data``).  Works unchanged on many hosts (every process passes the same
  values; each fills its own devices)."""
  shardings = param_shardings(model, params, mesh, rules)
  return jax.tree.map(lambda x, s: jax.device_put(x, s), params, shardings)


def replicate(params, mesh: Mesh):
  """Place any pytree replicated on every device of ``mesh`` (e.g. EAGLE head params)."""
  check_mesh(mesh, axes=())
  return jax.device_put(params, NamedSharding(mesh, P()))


def bytes_per_device(tree) -> dict:
  """``{device: bytes}`` that the arrays of ``tree`` hold on each addressable
  device, read from their shardings (``addressable_shards``)."""
  out: dict = {}
  for leaf in jax.tree.leaves(tree):
    for shard in leaf.addressable_shards:
      out[shard.device] = out.get(shard.device, 0) + shard.data.nbytes
  return out


@functools.lru_cache(maxsize=64)
def _sharded(core, loop, mesh: Mesh, axis: str, rules: tuple):
  def per_shard(replicated, tokens, lengths, key, row_ids):
    with sharding.axis_rules(rules):  # caches created while tracing follow ``rules``
      return core(loop, *replicated, tokens, lengths, key, row_ids)

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


def _global_rows(a: jax.Array, b: int) -> jax.Array:
  """The first ``b`` rows of a row-sharded result, on every process."""
  if not a.is_fully_addressable:  # other hosts hold some rows: gather them here
    from jax.experimental import multihost_utils
    a = jnp.asarray(multihost_utils.process_allgather(a, tiled=True))
  return a[:b]


def run_sharded(core, loop, replicated: tuple, tokens, lengths, key, row_offset: int,
                mesh: Mesh, axis: str = "data"):
  """Run ``core(loop, *replicated, tokens, lengths, key, row_ids)`` with rows
  sharded over ``mesh[axis]``; returns the result for the real rows.

  ``loop`` is the loop's static configuration (hashable: ``SpecLoop`` /
  ``GenLoop``; it keys the compiled program).  ``replicated`` is a tuple of
  pytrees traced as arguments and
  replicated over ``axis``: params (keeping any ``model`` sharding from
  :func:`shard_params`), and hyperparameter pytrees such as a
  ``SamplingConfig``, a drafter or a verification rule, whose continuous
  values then change without recompiling (:mod:`specjax.hyperparams`).
  The current ``sharding.axis_rules`` place the caches the loop creates.
  On many processes every process passes the same global batch."""
  check_mesh(mesh, axes=(axis,))
  b = tokens.shape[0]
  tokens, lengths = pad_rows(np.asarray(tokens), np.asarray(lengths), mesh.shape[axis])
  row_ids = np.arange(tokens.shape[0], dtype=np.int32) + row_offset
  fn = _sharded(core, loop, mesh, axis, sharding.current_rules())
  batch = NamedSharding(mesh, P(axis))
  put = lambda a: jax.device_put(np.asarray(a), batch)  # global array; each host fills its own
  out = fn(replicated, put(tokens), put(lengths), key, put(row_ids))
  return jax.tree.map(lambda a: _global_rows(a, b), out)
