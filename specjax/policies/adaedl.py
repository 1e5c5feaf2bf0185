"""AdaEDL: entropy-based early draft stopping as a verify-length policy
(docs/spec.md §5, "AdaEDL").

S. Agrawal, W. Jeon, M. Lee, "AdaEDL: Early Draft Stopping for Speculative
Decoding of Large Language Models via an Entropy-based Lower Bound on Token
Acceptance Probability", ENLSP-IV (NeurIPS 2024 workshop), PMLR 262:355-369,
arXiv 2410.18351.  The paper numbers no equations; we cite its sections and
Algorithm 1.

**Criterion** (Section 3; derived in Appendix B).  With ``H_k = H(q_k)`` the
entropy (nats) of the drafter's distribution for draft position k, drafting
stops before position k when

    1 - sqrt(gamma * H_k) < lambda,

``1 - sqrt(gamma H_k)`` being an approximate lower bound on the acceptance
probability ``beta_k = 1 - TV(q_k, p_k)`` (Pinsker, with the cross-entropy
approximated by ``(1 + gamma') H_k``, ``gamma = gamma' / 2``).  Row b verifies
``gamma_b`` drafts: the number of leading positions that pass, at least
``min_draft`` (**our choice**, default 1: every active row verifies one draft,
so Algorithm 1 always gets feedback).  The paper's ``gamma`` is
``entropy_factor`` here (``gamma`` is the verify length everywhere else in
specjax).

**Threshold update** (Algorithm 1, lines 7-16; hyperparameters Section 4.4),
per row and per drafting round with ``n_drafted = gamma_b`` drafts and
``n_acc`` accepted:

    AR_i = n_acc / n_drafted;      AR <- beta1 AR + (1 - beta1) AR_i
    lambda' = lambda + eps   if AR < alpha
              lambda - eps   elif n_acc != K
              lambda         otherwise
    lambda <- beta2 lambda + (1 - beta2) lambda'

**(our choices)** ``AR`` starts at ``alpha`` (the paper leaves it open; then the
first round raises lambda exactly when ``AR_1 < alpha``); a round that offered
no draft (``min_draft=0``) or an idle row changes nothing; lambda is not
clipped (as in Algorithm 1).  The update runs at the start of the next
``choose`` (the protocol's ``commit`` gets no params); ``n_acc`` is read from
the target's committed length (``n_acc + 1`` tokens per step).

**Which distribution.** ``q_k`` is the drafter's full distribution at the
position (``Proposal.q_node``, :func:`~specjax.policies.base.node_distributions`): the distribution sampled
drafts are drawn from, and for greedy drafts (whose ``q`` is one-hot, entropy 0)
the drafter's softmax at T = 1.  A drafter without ``q_node`` (prompt lookup)
gives one-hot rows, so AdaEDL never stops it.

**Exactness.**  Whether ``x_k`` is offered depends on ``H_1..H_k``, functions
of ``x_<k`` only (and of earlier steps), never of ``x_k``: a stopping time of
the drafts, so every lossless rule stays lossless (tests/verifiers/test_statistical_power.py:
the same check catches the off-by-one that reads ``H_{k+1}``, which depends on ``x_k``).

**Saving.**  The loop drafts all K tokens and the target runs over the
smallest of ``buckets`` covering ``max_b gamma_b`` (as SV); AdaEDL's saving in the
paper is the drafting itself, which a drafter that stops early would add.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.checks import check_int, check_range
from specjax.distributions import entropy_nats
from specjax.hyperparams import Hyperparams
from specjax.policies.base import BucketedPolicy, node_distributions


@dataclasses.dataclass(frozen=True)
class AdaEDLParams(Hyperparams):
  """AdaEDL's continuous hyperparameters (all traced: a sweep compiles once).

  Attributes (defaults: the paper's Section 4.4 values, except ``lam``):
    entropy_factor: the paper's gamma > 0 in ``1 - sqrt(gamma H)`` (0.2).
    lam: the initial stopping threshold lambda in [0, 1] (**our choice** 0.5; the
      paper sweeps it, Figure 6).
    alpha: the target acceptance rate in [0, 1] (0.9).
    eps: the step size >= 0 (0.01).
    beta1: EMA weight of the acceptance rate in [0, 1] (0.5).
    beta2: EMA weight of the threshold in [0, 1] (0.9).
  """

  entropy_factor: float = 0.2
  lam: float = 0.5
  alpha: float = 0.9
  eps: float = 0.01
  beta1: float = 0.5
  beta2: float = 0.9

  def __post_init__(self):
    check_range("entropy_factor", self.entropy_factor, low=0.0, low_open=True)
    check_range("lam", self.lam, low=0.0, high=1.0)
    check_range("alpha", self.alpha, low=0.0, high=1.0)
    check_range("eps", self.eps, low=0.0)
    check_range("beta1", self.beta1, low=0.0, high=1.0)
    check_range("beta2", self.beta2, low=0.0, high=1.0)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AdaEDLState:
  """Per-row state carried across steps (all ``[B]``)."""

  lam: jax.Array       # [B] float32 stopping threshold lambda (before the pending update)
  ar: jax.Array        # [B] float32 EMA of the acceptance rate, AR
  offered: jax.Array   # [B] int32 drafts offered last round (0: no round to learn from)
  accepted: jax.Array  # [B] int32 of those, accepted
  length: jax.Array    # [B] int32 the target's committed length after the last commit


def draft_entropy(q: jax.Array) -> jax.Array:
  """Entropy in nats, ``[..., V] -> [...]`` (``0 log 0 = 0``)."""
  return entropy_nats(q.astype(jnp.float32))


def acceptance_bound(entropy: jax.Array, entropy_factor) -> jax.Array:
  """The paper's approximate lower bound ``1 - sqrt(gamma H)`` (Section 3, Appendix B)."""
  return 1.0 - jnp.sqrt(entropy_factor * jnp.maximum(entropy, 0.0))


def stop_lengths(bound: jax.Array, lam: jax.Array, active: jax.Array,
                 min_draft: int = 1) -> jax.Array:
  """Drafts per row: leading positions with ``bound >= lambda`` (drafting stops at the
  first ``bound < lambda``), at least ``min_draft``; 0 for inactive rows.

  ``bound [B, K]``, ``lam [B]``, ``active [B]`` -> int32 ``[B]``.
  """
  k = bound.shape[-1]
  go = (bound >= lam[:, None]).astype(jnp.int32)
  n = jnp.sum(jnp.cumprod(go, axis=-1), axis=-1)
  return jnp.where(active, jnp.clip(n, min(min_draft, k), k), 0).astype(jnp.int32)


def update_threshold(lam: jax.Array, ar: jax.Array, offered: jax.Array, accepted: jax.Array,
                     num_draft: int, hp: AdaEDLParams) -> tuple[jax.Array, jax.Array]:
  """Algorithm 1 (lines 7-16) for one round per row -> ``(lambda [B], AR [B])``.

  Rows with ``offered == 0`` keep both (module docstring).
  """
  ar_i = accepted / jnp.maximum(offered, 1)
  ar_new = hp.beta1 * ar + (1.0 - hp.beta1) * ar_i
  lam_p = jnp.where(ar_new < hp.alpha, lam + hp.eps,
                    jnp.where(accepted != num_draft, lam - hp.eps, lam))
  lam_new = hp.beta2 * lam + (1.0 - hp.beta2) * lam_p
  learn = offered > 0
  return (jnp.where(learn, lam_new, lam).astype(jnp.float32),
          jnp.where(learn, ar_new, ar).astype(jnp.float32))


@dataclasses.dataclass(frozen=True)
class AdaEDL(BucketedPolicy):
  """AdaEDL verify-length policy (the module docstring).

  Attributes (static: they select the compiled program):
    num_draft: K.
    min_draft: the fewest drafts an active row verifies, in ``[0, K]`` (default 1).
    adaptive: apply Algorithm 1 (default True); False keeps lambda = ``params.lam``.
    verify_buckets: verify lengths the target forward is compiled for; default
      ``(0, 1, 2, 4, ..., K)``.

  Params: an :class:`AdaEDLParams` (traced).
  """

  min_draft: int = 1
  adaptive: bool = True

  def __post_init__(self):
    super().__post_init__()
    check_int("min_draft", self.min_draft, low=0)
    if self.min_draft > self.num_draft:
      raise ValueError(f"min_draft={self.min_draft} must be in [0, K={self.num_draft}]")
    if not isinstance(self.adaptive, bool):
      raise ValueError(f"adaptive={self.adaptive!r} must be a bool")

  @staticmethod
  def make_params(**hyperparams) -> AdaEDLParams:
    """``AdaEDLParams(**hyperparams)``; ValueError names a bad value."""
    return AdaEDLParams(**hyperparams)

  def init(self, params: AdaEDLParams, tokens, lengths, cache_length: int) -> AdaEDLState:
    if not isinstance(params, AdaEDLParams):
      raise ValueError(f"AdaEDL needs policy_params=AdaEDL.make_params(...), "
                       f"got {type(params).__name__}")
    b = lengths.shape[0]
    zeros = jnp.zeros((b,), jnp.int32)
    return AdaEDLState(jnp.full((b,), params.lam, jnp.float32),
                       jnp.full((b,), params.alpha, jnp.float32), zeros, zeros,
                       jnp.asarray(lengths, jnp.int32))

  def choose(self, params: AdaEDLParams, state: AdaEDLState, prev, last, proposal, active):
    """Update lambda from the last round, then stop each row's chain (module docstring).

    Reads the node distributions. Signals: ``entropy``, ``bound`` ``[B, K]`` and
    ``lam`` ``[B]`` (the threshold this round used).
    """
    q = node_distributions(proposal)
    k = q.shape[1]
    if k != self.num_draft:
      raise ValueError(f"got {k} drafts per row; the policy was built for K={self.num_draft}")
    lam, ar = state.lam, state.ar
    if self.adaptive:
      lam, ar = update_threshold(lam, ar, state.offered, state.accepted, k, params)
    h = draft_entropy(q)  # [B, K]
    bound = acceptance_bound(h, params.entropy_factor)
    gamma = stop_lengths(bound, lam, active, self.min_draft)
    new = AdaEDLState(lam, ar, gamma, jnp.zeros_like(gamma), state.length)
    return gamma, new, {"entropy": h, "bound": bound, "lam": lam}

  def commit(self, state: AdaEDLState, target_lengths) -> AdaEDLState:
    """Record the round: ``n_acc = committed - 1`` for rows that ran (idle rows commit 0)."""
    committed = target_lengths - state.length
    ran = committed > 0
    return AdaEDLState(state.lam, state.ar, jnp.where(ran, state.offered, 0),
                       jnp.maximum(committed - 1, 0).astype(jnp.int32),
                       jnp.asarray(target_lengths, jnp.int32))
