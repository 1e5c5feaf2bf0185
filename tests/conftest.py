"""Shared test setup: fake CPU devices for mesh tests, quiet logging, and compiled
programs that outlive a test module.

Compile time, not checking, is what the suite spends most of its time on, so:

* **Compiled programs are kept across modules** and released only when the
  process holds more than half the kernel's memory-map limit
  (:func:`specjax.compiled_code.release_if_crowded`). Each XLA:CPU executable
  keeps its code mapped; one process that never released them ran past
  ``vm.max_map_count`` (65,530) and segfaulted mid-compile.
* **LLVM at -O0 for the default suite**: a run whose marker expression
  excludes the slow tests (the README's ``python -m pytest -q``) compiles with
  ``--xla_backend_optimization_level=0``; what it runs is small and compile
  time dominates (user time of test_speculative + test_tree + test_first_step_law:
  197 s at -O0 vs 300 s at XLA's default). Runs that select slow or real tests
  (CI's second step) keep XLA's default level: their long statistical runs and
  the SmolLM2 programs run slower at -O0. A caller's own
  ``--xla_backend_optimization_level`` in ``XLA_FLAGS`` always wins. The golden
  outputs were written at the default level; ``tests/docs/test_golden.py``
  recomputes them in a subprocess at that level when this process is at -O0.
* **Rolled layers for the default suite** (``SPECJAX_LAYER_STACK=rolled``, set
  with -O0 under the same condition unless the caller set it): the decode
  loops run the layer stack as one ``lax.scan`` body instead of L unrolled
  copies, which compiles faster and gives the same values bit for bit
  (tests/models/test_models.py checks both layouts; user time of test_speculative +
  test_tree at -O0: 166 s rolled vs 204 s unrolled). The slow step keeps the
  CPU default (unrolled), so both layouts run in CI.
* **Whole-cache attention for the default suite** (``SPECJAX_ATTENTION_CHUNK=0``,
  same condition): the chunked decode attention (a scan of conds per layer) adds
  compile time to every small forward, and the suite's tiny caches gain nothing
  from it; tests/models/test_chunked_attention.py checks the chunked path against the
  einsum, and the slow step keeps the CPU default (chunked), so both run in CI.
* **A persistent compilation cache** (``JAX_COMPILATION_CACHE_DIR``) for the
  session: programs recompiled after a release, and the same programs in the
  binaries the tests start as subprocesses (they inherit the variable), are a
  disk read. The directory is fresh per session unless the caller sets the
  variable (``.ci/run`` shares one between its two pytest steps); a cold cache
  is what the suite's timing in ``tests/README.md`` measures.
"""

import os
import shutil
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_OWN_CACHE = None
if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
  _OWN_CACHE = tempfile.mkdtemp(prefix="specjax-test-jit-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE
# Cache every program that took a noticeable time to compile (JAX's default, 1 s,
# would skip most of the suite's small programs).
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.2")


import pytest  # noqa: E402


OPT_LEVEL_FLAG = "--xla_backend_optimization_level"


def pytest_configure(config):
  """-O0 and rolled layers for runs that exclude the slow tests (module
  docstring); before any test module is imported, so before JAX's CPU backend
  starts."""
  expr = " ".join((config.getoption("markexpr") or "").split())
  if "not slow" not in expr:
    return
  flags = os.environ.get("XLA_FLAGS", "")
  if OPT_LEVEL_FLAG not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} {OPT_LEVEL_FLAG}=0".strip()
  os.environ.setdefault("SPECJAX_LAYER_STACK", "rolled")
  os.environ.setdefault("SPECJAX_ATTENTION_CHUNK", "0")


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  if _OWN_CACHE is not None:
    shutil.rmtree(_OWN_CACHE, ignore_errors=True)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs_when_crowded():
  """After each module: drop compiled programs only if memory maps are crowded."""
  yield
  from specjax import compiled_code
  compiled_code.release_if_crowded()
