"""Shared test setup: fake CPU devices for mesh tests, quiet logging, and compiled
programs that outlive a test module.

Compile time, not checking, is what the suite spends most of its time on, so:

* **Compiled programs are kept across modules** and released only when the
  process holds more than half the kernel's memory-map limit
  (:func:`specjax.compiled_code.release_if_crowded`). Each XLA:CPU executable
  keeps its code mapped; one process that never released them ran past
  ``vm.max_map_count`` (65,530) and segfaulted mid-compile.
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
