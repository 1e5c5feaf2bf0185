"""Logical axes -> mesh axes: one rules table for params and KV caches.

Every param of a :class:`~specjax.models.transformer.Model` declares its
*logical* axes where its module declares it (``("embed", "heads")`` for the
query projection, ``("mlp", "embed")`` for the down projection, ...; read back
by ``Model.logical_axes``), and so
does the KV cache (``transformer.CACHE_AXES``).  A rules table maps logical
axes to mesh axes::

    DEFAULT_RULES = (("vocab", "model"), ("heads", "model"),
                     ("kv_heads", "model"), ("mlp", "model"), ("batch", "data"))

Logical axes not in the table (``embed``, ``head_dim``, ``layers``, norms)
are replicated; ``batch`` (cache rows) goes over ``data`` -- inside the
loops' shard_map ``data`` is manual and rows are already split, so only the
``model`` rules act there.  With the default rules this is Megatron-style tensor
parallelism: q/k/v and gate/up are column-parallel (split over heads / mlp),
o and down row-parallel (their inputs split, XLA all-reduces the partial
sums), the embedding and LM head vocab-parallel.

A logical axis is sharded only when its *units* divide the mesh axis: for
``heads`` / ``kv_heads`` the unit is a whole head (the flattened
``heads * head_dim`` dims are split between heads, never inside one), for
every other axis one entry.  Otherwise the dim is replicated -- never an
error, never a split head.  SmolLM2-135M (9 query heads, 3 KV heads) on
``model=3`` shards everything; on ``model=2`` or ``4`` its attention weights
and KV cache are replicated and the MLP and vocabulary are sharded.  A mesh
axis is used at most once per array (the first dim that claims it wins).

Custom rules: pass ``rules=`` to ``parallel.shard_params`` and run the loop
inside ``with axis_rules(rules):`` so the caches created inside the loop
follow the same table (default: :data:`DEFAULT_RULES`).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Mapping, Optional, Sequence

import jax
from jax.sharding import PartitionSpec as P

Rules = tuple  # ((logical axis, mesh axis or None), ...)

DEFAULT_RULES: Rules = (("vocab", "model"), ("heads", "model"), ("kv_heads", "model"),
                        ("mlp", "model"), ("batch", "data"))

_RULES = contextvars.ContextVar("specjax_axis_rules", default=DEFAULT_RULES)


def check_rules(rules, name: str = "rules") -> Rules:
  """``rules`` as a hashable tuple of ``(logical, mesh axis | None)`` pairs; a
  dict is accepted.  ``ValueError`` naming the bad entry otherwise."""
  items = rules.items() if isinstance(rules, Mapping) else rules
  try:
    items = tuple(tuple(r) for r in items)
  except TypeError:
    raise ValueError(f"{name}={rules!r} must be a sequence of (logical axis, mesh axis or "
                     f"None) pairs or a dict") from None
  seen = set()
  for r in items:
    if (len(r) != 2 or not isinstance(r[0], str)
        or not (r[1] is None or isinstance(r[1], str))):
      raise ValueError(f"{name} entry {r!r} must be a (logical axis: str, mesh axis: str or "
                       f"None) pair")
    if r[0] in seen:
      raise ValueError(f"{name} maps logical axis {r[0]!r} twice; give one mesh axis per "
                       f"logical axis")
    seen.add(r[0])
  return items


@contextlib.contextmanager
def axis_rules(rules):
  """Use ``rules`` for the caches (and default params) of the loops run inside."""
  token = _RULES.set(check_rules(rules))
  try:
    yield
  finally:
    _RULES.reset(token)


def current_rules() -> Rules:
  return _RULES.get()


def partition_spec(names: Sequence[str], shape: Sequence[int], units: Mapping[str, int],
                   mesh_shape: Mapping[str, int], rules: Rules, skip=()) -> P:
  """The ``PartitionSpec`` of an array with logical axes ``names`` and ``shape``.

  Dim ``i`` goes to ``rules[names[i]]`` when that mesh axis exists, is larger
  than 1, is not in ``skip`` (e.g. shard_map's manual ``data`` axis), is not
  already used by an earlier dim, and divides ``units.get(names[i],
  shape[i])`` (the count of indivisible units, e.g. heads); else ``None``
  (replicated)."""
  table = dict(rules)
  spec, used = [], set()
  for name, size in zip(names, shape):
    axis = table.get(name)
    n = mesh_shape.get(axis, 1) if axis is not None else 1
    count = units.get(name, size)
    if axis is None or axis in skip or axis in used or n <= 1 or count % n or size % n:
      spec.append(None)
    else:
      spec.append(axis)
      used.add(axis)
  return P(*spec)


def constrain(x: jax.Array, names: Sequence[str], units: Mapping[str, int],
              rules: Optional[Rules] = None) -> jax.Array:
  """``with_sharding_constraint`` by logical axes under the mesh in context.

  A no-op outside a mesh (plain ``jit``); inside ``parallel.run_sharded``'s
  shard_map the manual ``data`` axis is skipped, so the constraint places the
  per-shard array over the automatic axes (``model``).  A dim that does not
  divide is constrained to be replicated."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty:
    return x
  spec = partition_spec(names, x.shape, units, dict(mesh.shape),
                        current_rules() if rules is None else rules,
                        skip=set(mesh.manual_axes))
  return jax.lax.with_sharding_constraint(x, spec)
