"""Block verification (Sun et al., "Block Verification Accelerates Speculative
Decoding", ICLR 2025, Algorithm 2): a lossless path rule for chains.

Definition and the choices made here: docs/path_rules.md, "Block
verification".  In the paper's names, with ``P_i`` / ``Q_i`` the target /
draft distribution at draft position i (``P_{K+1}`` the bonus position) and
``w_0 = 1``::

    w_i = min(1, w_{i-1} P_i(x_i) / Q_i(x_i))                      i = 1..K
    r_i(y) = max(0, w_i P_{i+1}(y) - Q_{i+1}(y)),  s_i = sum_y r_i(y)    i = 0..K-1
    h_i = s_i / (s_i + 1 - w_i)  (0 where s_i = 0)                  i = 1..K-1
    h_K = w_K

``tau`` = the LARGEST i with ``u_i < h_i`` (0 if none); the emitted token is
drawn from ``r_tau / s_tau`` if ``tau < K`` (for ``tau = 0`` the ordinary
residual ``norm(max(0, P_1 - Q_1))``), else from ``P_{K+1}``.  The law of
``tau`` given the drafts is ``P(tau = t) = h_t prod_{j>t} (1 - h_j)``
(:func:`specjax.verifiers.path.largest_success_law`).

With ``length = L < K`` drafts offered the chain is simply the block of the
first L drafts: ``h_L = w_L``, ``h_i = 0`` for ``i > L``, bonus ``P_{L+1}``.
``z`` is not read (block verification needs only ``p`` and ``q``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.distributions import safe_normalize
from specjax.verifiers.base import safe_ratio
from specjax.verifiers.path import (PathDecision, PathRule, _check_length, check_path_shapes,
                                    largest_success_law, largest_success_sample,
                                    residual_emit_dists)
from specjax.verifiers.registry import register


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BlockTerms:
  """The quantities of Algorithm 2 along one row's chain (0-based arrays).

  Attributes:
    w: [K] ``w[i] = w_{i+1}`` (``w_0 = 1`` is implicit).
    r: [K, V] ``r[i] = r_i`` (unnormalised residual after accepting i drafts).
    s: [K] ``s[i] = s_i = sum_y r_i(y)``.
    h: [K] ``h[i] = h_{i+1}``, with ``h_L = w_L`` at the last offered position
      and 0 beyond it.
  """

  w: jax.Array
  r: jax.Array
  s: jax.Array
  h: jax.Array


def block_terms(p: jax.Array, q: jax.Array, x: jax.Array, length=None) -> BlockTerms:
  """Algorithm 2's weights, residuals and success probabilities for one row.

  Args:
    p: [K+1, V] target distributions ``P_1..P_{K+1}``.
    q: [K, V] draft distributions ``Q_1..Q_K``.
    x: [K] int drafts.
    length: [] int drafts offered (0..K, may be traced); default K.

  ``Q_i(x_i) = 0`` (a draft the drafter could not have drawn) follows the node
  rules' :func:`~specjax.verifiers.base.safe_ratio`: ``w_i = 1`` if
  ``w_{i-1} P_i(x_i) > 0``, else 0.
  """
  k = x.shape[0]
  n = k if length is None else length
  px = jnp.take_along_axis(p[:k], x[:, None], axis=1)[:, 0]  # [K] P_i(x_i)
  qx = jnp.take_along_axis(q, x[:, None], axis=1)[:, 0]  # [K] Q_i(x_i)

  def step(w_prev, pq):
    w = safe_ratio(w_prev * pq[0], pq[1])
    return w, w

  _, w = jax.lax.scan(step, jnp.ones((), p.dtype), (px, qx))  # [K] w_1..w_K
  w_before = jnp.concatenate([jnp.ones((1,), p.dtype), w[:-1]])  # [K] w_0..w_{K-1}
  r = jnp.maximum(w_before[:, None] * p[:k] - q, 0.0)  # [K, V] r_0..r_{K-1}
  s = jnp.sum(r, axis=-1)  # [K]
  # h_i for i = 1..K-1 from s_i and w_i; position index j = i - 1.
  s_next = jnp.concatenate([s[1:], jnp.zeros((1,), p.dtype)])  # s_{j+1}
  # s / (s + (1 - w)): 1 - w first, so w = 1 gives exactly 1 (not (s + 1) - 1 rounded).
  den = s_next + (1.0 - w)
  h_mid = jnp.where(s_next > 0, jnp.minimum(1.0, s_next / jnp.where(s_next > 0, den, 1.0)), 0.0)
  pos = jnp.arange(1, k + 1)  # 1-based position i
  h = jnp.where(pos < n, h_mid, jnp.where(pos == n, w, 0.0))
  return BlockTerms(w=w, r=r, s=s, h=h)


@register("block", kind="path")
@dataclasses.dataclass(frozen=True)
class Block(PathRule):
  """Block verification (Sun et al., ICLR 2025, Algorithm 2); lossless.

  No hyperparameters.  See the module docstring and docs/path_rules.md.
  """

  name = "block"

  def _terms(self, z, p, q, x, length):
    k, _ = check_path_shapes(z, p, q, x)
    _check_length(length, k)
    return block_terms(p, q, x, length)

  def accept_length_law(self, z, p, q, x, length=None, q_node=None):
    del q_node
    return largest_success_law(self._terms(z, p, q, x, length).h)

  def emit_dists(self, z, p, q, x, length=None, q_node=None):
    del q_node
    # r_t / s_t (P_{t+1} where s_t = 0); P_{K+1} after a full acceptance
    return residual_emit_dists(self._terms(z, p, q, x, length).r, p, length)

  def verify_path(self, z, p, q, x, u, length=None, q_node=None):
    del q_node
    check_path_shapes(z, p, q, x, u)
    terms = self._terms(z, p, q, x, length)
    k = x.shape[0]
    n = k if length is None else length
    tau = largest_success_sample(terms.h, u)
    i = jnp.minimum(tau, k - 1)
    resid = safe_normalize(terms.r[i], p[i])
    return PathDecision(tau, jnp.where(tau < n, resid, p[tau]))

  @property
  def is_lossless(self) -> bool:
    return True
