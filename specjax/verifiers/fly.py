"""FLy, training-free loosely speculative decoding (Li, Xu, Li, Yang, Xu, Yin, Li, Ngai,
Barsoum, "Training-Free Loosely Speculative Decoding: Accepting Semantically Correct
Drafts Beyond Exact Match", ICLR 2026, arXiv:2511.22972): a lossy path rule for chains
that defers a rejection at a high-entropy position and forgives it when the drafts
after it keep passing.

Definition and the choices made here: docs/lossy_path_rules.md, "FLy".  One row, L
drafts offered (``length``), 1-based positions i:

* pass test (the lossless one): ``B_i = [u_i < a_i]``, ``a_i = min(1, P_i(x_i) / Q_i(x_i))``
  (greedy decoding, p one-hot: "the draft is the target's argmax");
* entropy gate: ``H_i`` = the target's top-k entropy at i,
  ``-sum_{y in top-k(pi_i)} pi_i(y) log pi_i(y)`` with ``pi_i = softmax(z_i)``
  (raw logits; k = ``top_k``, 3 by default);
* deferred window of W drafts (``window``): a failed position i is forgiven iff
  ``H_i >= entropy_threshold``, ``i <= L - W`` and ``B_{i+1} = .. = B_{i+W-1} = 1``;
* accepted: ``A_i = B_i or forgiven_i``; ``tau`` = the number of leading ``A_i``;
  the emitted token is drawn from the residual ``norm(max(0, P - Q))`` at position
  ``tau + 1`` if ``tau < L``, from ``P_{L+1}`` if ``tau = L``.

The law of ``tau`` given the drafts is exact and O(K W) (:func:`fly_reach`: a forward
pass over the positions whose state is how many of the next drafts must still pass).
``entropy_threshold`` is traced (a sweep compiles once); ``window`` and ``top_k`` are
static (they shape the computation).  ``entropy_threshold = inf`` (or W > K) is the
lossless token-level rule; the rule reads ``z`` only for the gate.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.checks import check_int
from specjax.distributions import safe_normalize
from specjax.verifiers.base import check_range, safe_ratio
from specjax.verifiers.path import (PathDecision, PathRule, _check_length, check_path_shapes,
                                    position_mask, residual_emit_dists)
from specjax.verifiers.registry import register


def top_k_entropy(z: jax.Array, k: int) -> jax.Array:
  """``-sum_{top-k y} pi(y) log pi(y)``, ``pi = softmax(z)`` (not renormalised). ``[..., V] -> [...]``."""
  logp = jax.nn.log_softmax(z.astype(jnp.float32), axis=-1)
  top = jax.lax.top_k(logp, min(k, z.shape[-1]))[0]
  prob = jnp.exp(top)
  return -jnp.sum(jnp.where(prob > 0, prob * top, 0.0), axis=-1)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FlyTerms:
  """Per-position quantities of one row (0-based arrays, position i+1 at index i).

  Attributes:
    a: [K] pass probabilities ``min(1, P(x)/Q(x))``, 0 beyond ``length``.
    eligible: [K] bool, a failure here may be forgiven (gate open and a full window fits).
  """

  a: jax.Array
  eligible: jax.Array


def _shift_all(flags: jax.Array, window: int) -> jax.Array:
  """[K] bool: ``flags[i+1] & .. & flags[i+W-1]`` (False where that runs past K)."""
  k = flags.shape[0]
  out = jnp.ones((k,), bool)
  padded = jnp.concatenate([flags, jnp.zeros((window,), bool)])
  for d in range(1, window):
    out = out & padded[d:d + k]
  return out


def fly_accepted(passed: jax.Array, eligible: jax.Array, window: int) -> jax.Array:
  """[K] bool ``A_i = B_i or (eligible_i and B_{i+1..i+W-1})`` from the pass flags ``B [K]``."""
  return passed | (eligible & _shift_all(passed, window))


def fly_reach(a: jax.Array, eligible: jax.Array, window: int) -> jax.Array:
  """[K+1] ``P(tau >= t)``, t = 0..K, the pass flags independent Bernoulli(a_i).

  ``tau >= t`` iff every failure among positions 1..t is eligible and followed by
  W-1 passes.  A forward pass keeps ``f[r]`` = P(constraints so far hold and the next
  r positions must pass), r = 0..W-1; then ``P(tau >= t) = sum_r f_t[r] prod_{j=t+1}^{t+r} a_j``.
  """
  k = a.shape[0]
  a_pad = jnp.concatenate([a, jnp.zeros((window,), a.dtype)])
  cols = [jnp.ones((k,), a.dtype)]  # fp[t-1, r] = prod_{idx=t}^{t+r-1} a_pad[idx], t = 1..K
  for r in range(1, window):
    cols.append(cols[-1] * a_pad[r:r + k])
  fp = jnp.stack(cols, axis=1)  # [K, W]

  def step(f, inp):
    aj, ej, fpj = inp
    new = jnp.concatenate([f[1:], jnp.zeros((1,), f.dtype)]) * aj
    new = new.at[0].add(f[0] * aj)
    new = new.at[window - 1].add(f[0] * (1.0 - aj) * ej)
    return new, jnp.sum(new * fpj)

  f0 = jnp.zeros((window,), a.dtype).at[0].set(1.0)
  _, reach = jax.lax.scan(step, f0, (a, eligible.astype(a.dtype), fp))
  return jnp.concatenate([jnp.ones((1,), a.dtype), reach])


@register("fly", kind="path")
@dataclasses.dataclass(frozen=True)
class Fly(PathRule):
  """FLy (module docstring; docs/lossy_path_rules.md).  Chains only.

  Attributes:
    entropy_threshold: the gate's threshold on the target's top-k entropy (nats), in
      [0, inf]; traced.  inf never forgives (the lossless rule).  Default 0.3 (the
      authors' released configuration).
    window: W >= 1, the deferred window in drafts (the failed one included); static.
      Default 6 (the authors' released configuration).
    top_k: k >= 1 of the top-k entropy; static.  Default 3 (the authors' code).
  """

  name = "fly"
  entropy_threshold: float = 0.3
  window: int = 6
  top_k: int = 3

  def validate(self):
    check_range("entropy_threshold", self.entropy_threshold, low=0.0)
    check_int("window", self.window, low=1)
    check_int("top_k", self.top_k, low=1)

  def terms(self, z, p, q, x, length=None) -> FlyTerms:
    """The pass probabilities and eligibility of one row (shapes in the module docstring)."""
    k, _ = check_path_shapes(z, p, q, x)
    _check_length(length, k)
    n = k if length is None else length
    px = jnp.take_along_axis(p[:k], x[:, None], axis=1)[:, 0]
    qx = jnp.take_along_axis(q, x[:, None], axis=1)[:, 0]
    a = jnp.where(position_mask(k, length), safe_ratio(px, qx), 0.0)
    gate = top_k_entropy(z[:k], self.top_k) >= self.entropy_threshold
    fits = jnp.arange(1, k + 1) <= n - self.window
    return FlyTerms(a=a, eligible=gate & fits)

  def accept_length_law(self, z, p, q, x, length=None, q_node=None):
    del q_node
    t = self.terms(z, p, q, x, length)
    reach = jnp.concatenate([fly_reach(t.a, t.eligible, self.window), jnp.zeros((1,), p.dtype)])
    return jnp.maximum(reach[:-1] - reach[1:], 0.0)

  def emit_dists(self, z, p, q, x, length=None, q_node=None):
    del q_node
    self.terms(z, p, q, x, length)  # shape and length checks
    k = x.shape[0]
    return residual_emit_dists(jnp.maximum(p[:k] - q, 0.0), p, length)

  def verify_path(self, z, p, q, x, u, length=None, q_node=None):
    del q_node
    check_path_shapes(z, p, q, x, u)
    t = self.terms(z, p, q, x, length)
    k = x.shape[0]
    n = k if length is None else length
    accepted = fly_accepted(u < t.a, t.eligible, self.window)
    tau = jnp.sum(jnp.cumprod(accepted.astype(jnp.int32))).astype(jnp.int32)
    i = jnp.minimum(tau, k - 1)
    resid = safe_normalize(jnp.maximum(p[i] - q[i], 0.0), p[i])
    return PathDecision(tau, jnp.where(tau < n, resid, p[tau]))

  @property
  def is_lossless(self) -> bool:
    return float(self.entropy_threshold) == float("inf")
