"""specjax.compiled_code: release compiled programs before the memory-map limit."""

import os

import jax
import jax.numpy as jnp
import pytest

from specjax import compiled_code


@pytest.mark.skipif(not os.path.exists(compiled_code.MAPS_FILE), reason="needs /proc")
def test_release_happens_above_the_fraction_and_not_below():
  f = jax.jit(lambda x: x * 2 + 1)
  assert int(f(jnp.int32(3))) == 7
  assert f._cache_size() == 1
  used, limit = compiled_code.memory_maps_in_use(), compiled_code.memory_map_limit()
  assert 0 < used < limit
  # Far below the limit: nothing is released and the compiled program stays.
  assert not compiled_code.release_if_crowded(1.0)
  assert f._cache_size() == 1
  # A fraction below the current use: released, and the function still runs.
  assert compiled_code.release_if_crowded(0.5 * used / limit)
  assert f._cache_size() == 0
  assert int(f(jnp.int32(4))) == 9


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5])
def test_fraction_outside_the_unit_interval_is_refused(fraction):
  with pytest.raises(ValueError, match=f"fraction={fraction!r}"):
    compiled_code.release_if_crowded(fraction)


def test_without_proc_nothing_is_released(monkeypatch):
  monkeypatch.setattr(compiled_code, "MAPS_FILE", "/nonexistent/maps")
  assert compiled_code.memory_maps_in_use() is None
  assert not compiled_code.release_if_crowded(1e-9)


def test_count_lowerings_sees_new_programs_only():
  """A new shape builds a program inside the block; a compiled one does not; a
  block after release rebuilds (and nothing is counted outside a block)."""
  f = jax.jit(lambda x: x * 3)
  x3, x4 = jnp.ones(3), jnp.ones(4)
  f(x3).block_until_ready()
  with compiled_code.count_lowerings() as c:
    f(x3).block_until_ready()
  assert c.count == 0
  with compiled_code.count_lowerings() as c:
    f(x4).block_until_ready()
  assert c.count == 1
  f(jnp.ones(5)).block_until_ready()  # outside: not counted
  assert c.count == 1
  compiled_code.release_compiled_programs()
  with compiled_code.count_lowerings() as c:
    f(x3).block_until_ready()
  assert c.count == 1
