"""Shared test setup: fake CPU devices for mesh tests, quiet logging."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  """Drop every compiled program after each test module.

  Each XLA:CPU executable keeps its JIT-compiled code mapped; the whole suite
  compiles thousands of programs, and one process accumulating them ran past
  the kernel's ``vm.max_map_count`` (65530 memory maps; ~18k after two test
  files), after which an mmap inside LLVM failed and the process segfaulted
  mid-compile. Modules share their fixtures, not their compiled programs, so
  clearing costs little.
  """
  yield
  from specjax import compiled_code
  compiled_code.release_compiled_programs()
