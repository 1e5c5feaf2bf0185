"""Verify-length buckets: the verify lengths a chain's target forward is compiled for.

A chain round verifies ``gamma[b]`` in ``0..K`` drafts per row (a verify-length
policy's choice, or fewer when the drafter offers fewer: prompt lookup without a
match offers none).  The target then runs over ``bucket + 1`` tokens, the bucket
being the smallest of a static, sorted tuple of lengths that covers every active
row's ``gamma``; the chain strategy compiles one branch per bucket and picks it
with ``lax.switch`` (:func:`bucket_index`).  Drafters declare buckets
(``Drafter.verify_buckets``, e.g. prompt lookup's ``(0, K)``), verify-length
policies too (``BucketedPolicy.verify_buckets``, default :func:`default_buckets`);
a policy's take precedence.  A bucket tuple always ends with K.

This module is the one definition of buckets: their default, their validation,
the switch index and the covering bucket of a length (which the cost-aware policy
uses to cost a length at the forward it runs).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def default_buckets(k: int) -> tuple:
  """``(0, 1, 2, 4, ..., K)``: powers of two below K, plus 0 and K."""
  out, g = [0], 1
  while g < k:
    out.append(g)
    g *= 2
  out.append(k)
  return tuple(out)


def check_buckets(name: str, buckets, k: int) -> tuple:
  """``buckets`` as a sorted tuple of distinct ints in ``[0, K]`` that contains K;
  ``ValueError`` naming ``name``, the value and the allowed range otherwise."""
  try:
    out = tuple(sorted(set(int(v) for v in buckets)))
    ints = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in buckets)
  except (TypeError, ValueError):
    out, ints = (), False
  if not ints or not out or out[0] < 0 or out[-1] != k:
    raise ValueError(f"{name}={buckets!r} must be integers in [0, K={k}] that include K, "
                     f"e.g. (0, {k})")
  return out


def bucket_index(buckets: tuple, gamma: jax.Array, active: jax.Array | None = None
                 ) -> jax.Array:
  """``[] int32`` index of the smallest bucket ``>= max(gamma[active])`` (0 when no row
  is active): ``lax.switch(bucket_index(...), [branch(n) for n in buckets], ...)``.

  ``gamma [B]`` in ``0..K``; ``active [B]`` bool, default every row."""
  g = gamma if active is None else jnp.where(active, gamma, 0)
  idx = jnp.sum(jnp.asarray(buckets, jnp.int32) < jnp.max(g)).astype(jnp.int32)
  return jnp.minimum(idx, len(buckets) - 1)


def round_up(buckets: tuple, gamma: jax.Array) -> jax.Array:
  """Elementwise smallest bucket ``>= gamma`` (``gamma <= K = buckets[-1]``)."""
  b = jnp.asarray(buckets, jnp.int32)
  return b[jnp.sum(b[None, :] < gamma.reshape(-1, 1), axis=1)].reshape(gamma.shape)


def covering(buckets: tuple) -> np.ndarray:
  """``[K+1]`` (static numpy): for each length ``n = 0..K``, the smallest bucket ``>= n``."""
  b = np.asarray(buckets)
  return np.asarray([b[np.searchsorted(b, n)] for n in range(int(b[-1]) + 1)])
