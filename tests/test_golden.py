"""The code reproduces tests/golden/outputs.npz bit for bit (issue 17).

The golden file was written by ``tests/golden/make_golden.py`` before the
distributions refactor (greedy and sampled chains and trees, EAGLE, SV, the
lossless / MARS / CoS / typical / SpecCascade / lenience rules, processors
and the exact analysis).  A mismatch means a refactor changed behaviour.
"""

import jax
import numpy as np
import pytest

from tests.golden import make_golden


@pytest.fixture(scope="module")
def golden():
  return make_golden.load()


# Statistics added to the loop after the golden file was written (additive: they
# change no existing output).  Any other name missing from the file fails.
ADDED_AFTER_GOLDEN = {"gamma_counts"}  # SpecStats.gamma_counts (issue 15, SV on SmolLM2)


# The default suite reproduces the analysis part; the loop, EAGLE and SV parts
# (85% of this file's time: every rule x drafter x temperature compiles its own
# loop) run in CI's slow step, and before any refactor of the loop.
DEFAULT_PARTS = ("math",)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="golden outputs are CPU float32")
@pytest.mark.parametrize("part", [pytest.param(p, marks=() if p in DEFAULT_PARTS
                                               else pytest.mark.slow)
                                  for p in sorted(make_golden.PARTS)])
def test_reproduces_golden_outputs(golden, part):
  got = make_golden.golden_outputs((part,))
  assert got, part
  for name, value in got.items():
    if name.rsplit("/", 1)[-1] in ADDED_AFTER_GOLDEN:
      continue
    assert name in golden, f"{name} is not in the golden file (regenerate it?)"
    ref = golden[name]
    assert value.dtype == ref.dtype and value.shape == ref.shape, name
    if value.tobytes() != ref.tobytes():  # bit for bit (-0.0 vs 0.0, NaN payloads too)
      np.testing.assert_array_equal(value, ref, err_msg=name, strict=True)
      pytest.fail(f"{name}: equal values but different bits")
