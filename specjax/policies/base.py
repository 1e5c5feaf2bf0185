"""Verify-length policies: how many of the K drafted tokens each row sends to
the target (docs/spec.md §5; the no-op default verifies all K).

A policy is a frozen dataclass (hashable: static under ``jax.jit``); its
params and state are pytrees passed in and out, like a drafter's::

    state = policy.init(params, tokens[B,P], lengths[B], cache_length)
    gamma[B], state, signals = policy.choose(params, state, prev[B], last[B],
                                             proposal, active[B])
    # the loop calls policy.choose_running(..., running[B]), which passes choose the
    # rows that run and offer drafts
    state = policy.commit(state, target_lengths[B])

``prev`` / ``last`` are as in :mod:`specjax.decoding.drafters` (``prev`` the
last token in the target's cache, at position L-1; ``last`` the token emitted
by the previous step, at position L).  ``gamma[b]`` in ``0..K`` is the number
of drafts row b offers to the verifier (the chain rule's ``length``);
inactive rows get 0.  ``active[b]``: row b runs this step *and* its drafter
offers drafts (a prompt-lookup row without a match is inactive for the policy:
its round is a plain decode step).  ``signals`` is a dict of per-position arrays for
statistics (empty for policies without a companion).

``proposal`` is the drafter's :class:`~specjax.decoding.proposal.Proposal` of this
step: the drafts ``tokens [B, K]``, their ``q``, the drafter's full
distributions ``q_node`` where it has them (:func:`node_distributions`: AdaEDL
reads entropies, which one-hot greedy ``q`` lack) and its own ``confidence``
per position where it scores its drafts (prompt lookup: the match length).

``buckets`` is the static, sorted tuple of verify lengths the target forward
may be compiled for: the loop runs the target over ``bucket + 1`` tokens, the
bucket being the smallest one ``>= max(gamma over active rows)``
(:mod:`specjax.decoding.buckets`).  ``buckets[-1]`` must be K.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp

from specjax.decoding.buckets import check_buckets, default_buckets


def check_group_size(group_size) -> None:
  """ValueError unless ``group_size`` is None (the whole batch) or an integer >= 1."""
  if group_size is not None and not (isinstance(group_size, int)
                                     and not isinstance(group_size, bool) and group_size >= 1):
    raise ValueError(f"group_size={group_size!r} must be None (the whole batch) "
                     "or an integer >= 1")


def check_row_groups(what: str, group_size: Optional[int], num_rows: int,
                     rows_per_device: int, num_devices: int) -> None:
  """Refuse a split of ``num_rows`` rows over ``num_devices`` devices under which a
  group of ``group_size`` consecutive rows that choose together would straddle
  devices (results would then depend on the split); ``what`` names the policy in
  the message.  ``group_size=None`` (the whole batch) needs one device."""
  g = group_size
  if g is None:
    if num_devices > 1:
      raise ValueError(
          f"{what} with group_size=None couples all {num_rows} rows, so results would "
          f"depend on their split over {num_devices} devices; set group_size to a "
          f"divisor of the per-device row count ({rows_per_device})")
    return
  if num_rows % g:
    raise ValueError(f"{what}: the batch has {num_rows} rows, not a multiple of "
                     f"group_size={g}; pass a multiple of {g} prompts or change group_size")
  if rows_per_device % g:
    raise ValueError(
        f"{what}: {num_rows} rows over {num_devices} devices give {rows_per_device} rows "
        f"per device, not a multiple of group_size={g} (a group must not straddle "
        f"devices); use a batch that is a multiple of {num_devices * g} or a group_size "
        f"dividing {rows_per_device}")


def node_distributions(proposal) -> jax.Array:
  """``[B, K, V]``: the drafter's full distribution at each position (``q_node``), or
  the drafts' ``q`` for a drafter without one (one-hot rows for prompt lookup)."""
  return proposal.q if proposal.q_node is None else proposal.q_node


@dataclasses.dataclass(frozen=True)
class VerifyPolicy:
  """Base class.  Attributes: num_draft: K, the drafter's chain length."""

  num_draft: int

  def __post_init__(self):
    if not (isinstance(self.num_draft, int) and self.num_draft >= 1):
      raise ValueError(f"num_draft (K)={self.num_draft!r} must be an integer >= 1")

  @property
  def buckets(self) -> tuple:
    return (self.num_draft,)

  def check_rows(self, num_rows: int, rows_per_device: int, num_devices: int) -> None:
    """Boundary check before a run of ``num_rows`` rows split over ``num_devices``
    devices (``rows_per_device`` each, after padding).  Policies whose rows are
    independent accept every split; one that couples rows raises ValueError
    when the split would change results."""

  def init(self, params, tokens, lengths, cache_length: int) -> Any:
    return jnp.zeros((), jnp.int32)  # stateless (a trivial pytree leaf)

  def draft_gate(self, params, state, running=None):
    """None, or a gate that stops the drafter's chain once no row's next draft is
    worth offering (``drafters.sample_chain``); it must stop no earlier than
    ``choose`` will, from the same information (``running [B]``: the rows that run
    this step).  Default: draft all K."""
    return None

  def choose(self, params, state, prev, last, proposal, active):
    raise NotImplementedError

  def choose_running(self, params, state, prev, last, proposal, running):
    """The loop's call: :meth:`choose` over the rows that run (``running [B]``) and
    offer drafts (the drafter's ``num_valid > 0``).  A policy that prices rows
    together overrides it: a row that runs without an offer still pays."""
    offers = running if proposal.num_valid is None else running & (proposal.num_valid > 0)
    return self.choose(params, state, prev, last, proposal, offers)

  def commit(self, state, target_lengths):
    return state


@dataclasses.dataclass(frozen=True)
class BucketedPolicy(VerifyPolicy):
  """A policy whose verify lengths vary per step: ``verify_buckets`` (static) are the
  lengths the target forward is compiled for (:mod:`specjax.decoding.buckets`),
  default :func:`~specjax.decoding.buckets.default_buckets`."""

  verify_buckets: Optional[tuple] = None

  def __post_init__(self):
    super().__post_init__()
    b = (default_buckets(self.num_draft) if self.verify_buckets is None
         else check_buckets("verify_buckets", self.verify_buckets, self.num_draft))
    object.__setattr__(self, "verify_buckets", b)

  @property
  def buckets(self) -> tuple:
    return self.verify_buckets


@dataclasses.dataclass(frozen=True)
class FixedLength(VerifyPolicy):
  """Verify all K drafts (ordinary speculative decoding; the default)."""

  def choose(self, params, state, prev, last, proposal, active):
    gamma = jnp.where(active, self.num_draft, 0).astype(jnp.int32)
    return gamma, state, {}


@dataclasses.dataclass(frozen=True)
class ConstantGamma(VerifyPolicy):
  """Verify the first ``gamma`` drafts of every row (``0 <= gamma <= K``).

  ``buckets = (gamma, K)`` (the protocol requires K last); the loop only
  ever selects the ``gamma`` bucket, so the target runs over gamma + 1 tokens.
  """

  gamma: int = 0

  def __post_init__(self):
    super().__post_init__()
    if not (isinstance(self.gamma, int) and 0 <= self.gamma <= self.num_draft):
      raise ValueError(f"gamma={self.gamma!r} must be an integer in [0, K={self.num_draft}]")

  @property
  def buckets(self) -> tuple:
    return tuple(sorted({self.gamma, self.num_draft}))

  def choose(self, params, state, prev, last, proposal, active):
    return jnp.where(active, self.gamma, 0).astype(jnp.int32), state, {}
