"""TrainState: the pytree a train step consumes and returns (donated under jit)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TrainState:
  """Attributes:
    step: [] int32 optimizer steps taken.
    params: float32 master parameters (pytree).
    opt_state: optax state (pytree).
  """

  step: jax.Array
  params: Any
  opt_state: Any


def create(params, optimizer: optax.GradientTransformation) -> TrainState:
  params = jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), params)
  return TrainState(jnp.zeros((), jnp.int32), params, optimizer.init(params))


def apply_gradients(state: TrainState, grads, optimizer: optax.GradientTransformation
                    ) -> TrainState:
  updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
  return TrainState(state.step + 1, optax.apply_updates(state.params, updates), opt_state)
