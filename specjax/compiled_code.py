"""Keep a long-running process under the kernel's limit on memory maps.

Each XLA:CPU executable keeps its JIT-compiled code mapped into the process.
A sweep that compiles a few hundred programs (every rule x drafter x
temperature of the verifier comparison, or SV's calibration plus one program
per method and batch size) accumulates tens of thousands of memory maps; once
the process reaches Linux's ``vm.max_map_count`` (65,530 by default) an mmap
inside LLVM fails ("LLVM compilation error: Cannot allocate memory") and the
process aborts mid-compile, losing the run in progress.

:func:`release_if_crowded` drops JAX's in-memory caches of compiled programs
(``jax.clear_caches``) when the process holds more than a fraction of the
limit. Call it between independent units of work (sweep records, methods).
Later calls recompile; with the persistent compilation cache the recompile is
a disk read. On systems without ``/proc`` it does nothing.

:class:`count_lowerings` counts the programs JAX builds inside a block: a timed
region that should only run compiled programs checks that it built none.
"""

import gc
import threading

MAPS_FILE = "/proc/self/maps"
LIMIT_FILE = "/proc/sys/vm/max_map_count"
DEFAULT_FRACTION = 0.5


def memory_maps_in_use() -> int | None:
  """Number of memory maps of this process, or None where /proc is absent."""
  try:
    with open(MAPS_FILE, "rb") as f:
      return sum(1 for _ in f)
  except OSError:
    return None


def memory_map_limit() -> int | None:
  """The kernel's per-process limit on memory maps, or None where unknown."""
  try:
    with open(LIMIT_FILE) as f:
      return int(f.read().strip())
  except (OSError, ValueError):
    return None


def release_compiled_programs() -> None:
  """Drop every compiled program JAX holds in memory (they recompile on next use)."""
  import jax  # here, so that importing this module (experiments/common/sweep.py does) stays cheap
  jax.clear_caches()
  gc.collect()


LOWERING_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"


class count_lowerings:
  """Context manager counting the programs JAX lowers (traces to a module) inside it.

  Every new program -- a first call, a new shape or static argument, a recompile
  after :func:`release_compiled_programs` -- is lowered once before compilation
  (or a persistent-cache hit), so ``count == 0`` means the block ran programs
  compiled before it. Counts lowerings on any thread while active::

      with count_lowerings() as c:
        f(x)
      assert c.count == 0
  """

  def __init__(self):
    self.count = 0
    self._active = False
    self._lock = threading.Lock()

  def _listener(self, event: str, duration_secs: float, **kwargs) -> None:
    del duration_secs, kwargs
    if self._active and event == LOWERING_EVENT:
      with self._lock:
        self.count += 1

  def __enter__(self):
    from jax import monitoring
    self._active = True
    monitoring.register_event_duration_secs_listener(self._listener)
    return self

  def __exit__(self, *exc):
    from jax import monitoring
    self._active = False
    monitoring.unregister_event_duration_listener(self._listener)
    return False


def release_if_crowded(fraction: float = DEFAULT_FRACTION) -> bool:
  """Release compiled programs when memory maps exceed ``fraction`` of the limit.

  Args:
    fraction: in (0, 1]; the share of ``vm.max_map_count`` above which to release.

  Returns:
    True when the caches were cleared.
  """
  if not 0.0 < fraction <= 1.0:
    raise ValueError(f"fraction={fraction!r}: must be in (0, 1]")
  used, limit = memory_maps_in_use(), memory_map_limit()
  if used is None or limit is None or used <= fraction * limit:
    return False
  release_compiled_programs()
  return True
