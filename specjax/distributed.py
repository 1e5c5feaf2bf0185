"""Multi-process runs (``jax.distributed``): one process per host, or several
processes on one machine (the CPU tests).

Every process runs the same program: it calls :func:`initialize` before any
JAX computation, builds the same mesh over *all* devices
(``parallel.make_mesh``, which reads ``jax.devices()``: every process's
devices), passes the same global batch, and receives the whole result
(``parallel.run_sharded`` gathers the rows the other processes computed).
Only :func:`is_coordinator` (process 0) should write files or print reports.

On CPU the processes exchange data through the gloo collectives
(``jax_cpu_collectives_implementation``, set here unless already chosen).
"""

from __future__ import annotations

import re

import jax

_ADDRESS = re.compile(r"^\[?[A-Za-z0-9_.:-]+\]?:\d{1,5}$")


def check_args(coordinator_address, num_processes, process_id) -> None:
  """``ValueError`` naming the bad argument, its value and what is allowed."""
  if isinstance(num_processes, bool) or not isinstance(num_processes, int) or num_processes < 1:
    raise ValueError(f"num_processes={num_processes!r} must be a positive integer")
  if (isinstance(process_id, bool) or not isinstance(process_id, int)
      or not 0 <= process_id < num_processes):
    raise ValueError(f"process_id={process_id!r} must be an integer in [0, {num_processes})")
  if num_processes > 1 and not (isinstance(coordinator_address, str)
                                and _ADDRESS.match(coordinator_address)):
    raise ValueError(f"coordinator_address={coordinator_address!r} must be 'host:port' (the "
                     f"address of process 0, e.g. 'localhost:12355') when num_processes="
                     f"{num_processes} > 1")


def initialize(coordinator_address: str | None = None, num_processes: int = 1,
               process_id: int = 0, *, local_device_count: int | None = None) -> bool:
  """Join a run of ``num_processes`` processes coordinated by process 0 at
  ``coordinator_address`` ('host:port'); a no-op for one process.

  ``local_device_count`` sets the number of CPU devices of this process (for
  multi-process tests on one machine; ``jax_num_cpu_devices``).  Must run
  before any JAX computation.  Returns whether ``jax.distributed`` was
  initialized."""
  check_args(coordinator_address, num_processes, process_id)
  if local_device_count is not None:
    if isinstance(local_device_count, bool) or not isinstance(local_device_count, int) or (
        local_device_count < 1):
      raise ValueError(f"local_device_count={local_device_count!r} must be a positive integer")
    jax.config.update("jax_num_cpu_devices", local_device_count)
  if num_processes == 1:
    return False
  if jax.config.jax_cpu_collectives_implementation in (None, "", "none"):
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id)
  return True


def is_coordinator() -> bool:
  """True in process 0 (the one that writes files and prints)."""
  return jax.process_index() == 0
