"""Greedy verification: accept iff the draft is the target's argmax.

``a = 1[x = argmax z]``; the correction is ``onehot(argmax z)``.  Independent
of the temperature: with T = 0 the lossless rule reduces to the same thing.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.distributions import argmax
from specjax.verifiers.base import NodeRule
from specjax.verifiers.registry import register


@register("greedy")
@dataclasses.dataclass(frozen=True)
class Greedy(NodeRule):
  """Accept iff ``x == argmax z``; emit ``argmax z`` otherwise."""

  name = "greedy"

  def accept_prob(self, state, q, x):
    return (x == argmax(state.z)).astype(state.p.dtype)

  def on_reject(self, state, q, x):
    return state

  def correction(self, state):
    return jax.nn.one_hot(argmax(state.z), state.z.shape[-1], dtype=state.p.dtype)
