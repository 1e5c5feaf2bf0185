"""The code reproduces tests/golden/outputs.npz bit for bit.

The golden file was written by ``tests/golden/make_golden.py`` before the
distributions refactor (greedy and sampled chains and trees, EAGLE, SV, the
lossless / MARS / CoS / typical / SpecCascade / lenience rules, processors
and the exact analysis).  A mismatch means a refactor changed behaviour.
"""

import os
import subprocess
import sys
import tempfile

import jax
import numpy as np
import pytest

from tests.golden import make_golden


@pytest.fixture(scope="module")
def golden():
  return make_golden.load()


# Statistics added to the loop after the golden file was written (additive: they
# change no existing output).  Any other name missing from the file fails.
# SpecStats fields added after the golden file: gamma_counts (for SV on SmolLM2), the
# per-source counters (for a drafter choosing between sources; one source elsewhere)
ADDED_AFTER_GOLDEN = {"gamma_counts", "source_rounds", "source_accepted"}


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OPT0 = "--xla_backend_optimization_level=0"
_SUBPROCESS = (
    "import sys, numpy as np\n"
    "from tests.golden import make_golden\n"
    "np.savez(sys.argv[1], **make_golden.golden_outputs((sys.argv[2],)))\n")


def _outputs_at_default_opt_level(part: str) -> dict:
  """``make_golden.golden_outputs((part,))`` compiled at XLA's default optimisation
  level, at which the golden file was written: in this process, or -- when the
  default suite runs at LLVM -O0 (tests/conftest.py), where the analysis part's
  last bits differ -- in a subprocess without that flag."""
  flags = os.environ.get("XLA_FLAGS", "")
  if _OPT0 not in flags:
    return make_golden.golden_outputs((part,))
  with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "outputs.npz")
    env = dict(os.environ, XLA_FLAGS=" ".join(f for f in flags.split() if f != _OPT0))
    r = subprocess.run([sys.executable, "-c", _SUBPROCESS, path, part], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    with np.load(path, allow_pickle=False) as f:
      return {k: f[k] for k in f.files}


# Every part runs in CI's slow step (and before any refactor of the loop): each is a
# subprocess recompiling at XLA's default optimisation level (18 s for the analysis
# part alone), and the default suite checks the same functions exactly elsewhere
# (tests/analysis/test_analysis.py, tests/analysis/test_exact_accepted.py, the lossless tests).
DEFAULT_PARTS = ()


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="golden outputs are CPU float32")
@pytest.mark.parametrize("part", [pytest.param(p, marks=() if p in DEFAULT_PARTS
                                               else pytest.mark.slow)
                                  for p in sorted(make_golden.PARTS)])
def test_reproduces_golden_outputs(golden, part):
  got = _outputs_at_default_opt_level(part)
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
