"""Run untrusted (model-generated) Python programs behind an OS isolation boundary.

Every program runs in a fresh ``python -I -S -B`` (isolated mode, no site,
no ``.pyc`` writes; only the standard library), started by a guard that sets
rlimits and (optionally) an audit hook before the program's first line.

Isolation levels (``SandboxConfig.isolation``; ``'auto'`` takes the first of
``bwrap``, ``unshare`` that works here and *refuses to run* when neither does;
the level in force is printed to stderr once per process and recorded in
``ExecResult.isolation``):

* ``bwrap`` -- bubblewrap (``apt-get install bubblewrap``): new pid, mount,
  network, IPC, UTS (and cgroup) namespaces; a new root holding only
  read-only ``/usr``, ``/bin``/``/lib*`` and the interpreter's directory,
  a fresh ``/proc`` (only the run's processes), a minimal ``/dev`` and a
  private, empty tmpfs of ``disk_mb`` MB that is the work dir, ``/tmp`` and
  ``HOME`` (the only writable place; ``/root``, ``/home``, ``/etc``, ``/run``,
  the host's ``/tmp`` and every UNIX socket on the host are absent); the
  network namespace has only a down loopback. As root, each run gets its own
  unprivileged host uid (locked against other runs) with no capabilities and
  ``no_new_privs``, and inside it a user namespace in which the program is
  uid 1000 and may not create further user namespaces (as a normal user:
  that user namespace directly). ``--die-with-parent``, ``--new-session``.
* ``unshare`` -- util-linux ``unshare`` + ``setpriv`` and coreutils
  ``chroot`` (root only): the same namespaces; a shell builds the same
  read-only root on a tmpfs, then runs the program chrooted into it under an
  unprivileged per-run uid without capabilities.
* ``guard`` -- the in-process audit hook and rlimits only, as the caller's
  user, in a temp work dir on the host (``unshare -n`` for the network when
  it works). Code written to escape can (``_posixsubprocess``, ``gc`` on the
  hook's closure, ...). Used only when asked for by name, with a
  RuntimeWarning.

At every level: all processes of a run end with it. At the namespace levels
the run's pid 1 is killed (the kernel then kills every process of the pid
namespace); the runner then checks that no process with the run's uid or in
its pid namespace is left (at ``guard``: in its session), kills any that is
and reports it in ``ExecResult.cleanup_error`` with status ``error``, as it
does a work dir it cannot remove.

Verdicts (``ExecResult.status``): ``pass``, ``fail`` (an ``AssertionError``),
``timeout`` (wall clock ``timeout_s``; or the CPU limit: SIGXCPU, or the
SIGKILL of the hard limit when a program ignores SIGXCPU), ``error``
(anything else: other exceptions, refused operations, ``MemoryError``,
signals, an early ``sys.exit``/``os._exit``, something outliving the run).

* ``run_program(source, config, test=...)`` (a *split* run; what
  :func:`specjax.data.humaneval.evaluate` does): the program runs in the
  sandbox and only answers calls; the trusted test runs in a separate harness
  process outside the sandbox, with the program's functions bound as proxies
  (arguments and results cross as plain data; see ``codec``). The verdict is
  the harness's exit status: the program cannot read or write it, and no
  token exists. Residual: the program defines every name the test takes from
  it, including prompt helpers (HumanEval's ``poly``, ``encode_cyclic``);
  redefining them changes what the test checks, as it would in-process.
* ``run_program(source, config)`` (no ``test``): the program and its checks
  share one process; the guard reports the end of the program on a socket.
  Residuals of this mode (each shown by a test in
  ``tests/test_sandbox_isolation.py``): a program can write that report
  itself, replace the test function through ``sys.settrace``, or monkeypatch
  the names its checks use (``builtins``, modules). Use ``test=`` when the
  verdict matters.

Resources: ``RLIMIT_AS`` per process (``memory_mb``), ``RLIMIT_CPU``,
``RLIMIT_FSIZE`` (each file, memfd and stdout/stderr), ``RLIMIT_NPROC``
(processes + threads; enforced because the run's uid is not root),
``RLIMIT_NOFILE``, no core dumps, the work-dir tmpfs (``disk_mb``), and
``oom_score_adj`` 1000 (the kernel's OOM killer takes sandboxed processes
first). ``MALLOC_ARENA_MAX=2`` keeps glibc from reserving 64 MB of address
space per thread, so a program with 16 threads runs under 1 GB. No cgroup is
used (this project's machines have no writable cgroup v2 memory controller),
so memory is bounded per process, not per run: at most about ``nproc`` x
(``memory_mb`` + ``nofile`` x ``fsize_mb``) (memfds and pipes hold memory
outside the address space). Run the evaluator itself in a memory-capped
cgroup (e.g. ``systemd-run --scope -p MemoryMax=8G ...``) for a hard total.

Overhead (164 canonical HumanEval solutions, 2 workers; see README):
reported there with the command and machine load.
"""

from __future__ import annotations

import concurrent.futures
from typing import Sequence

from specjax.data.sandbox.config import ExecResult, SandboxConfig, STATUSES
from specjax.data.sandbox.levels import LEVELS, Level, probe_levels
from specjax.data.sandbox.runner import resolve_level, run_program, unshare_net_available

__all__ = ["ExecResult", "SandboxConfig", "STATUSES", "LEVELS", "Level", "isolation_level",
           "probe_levels", "run_program", "run_programs", "unshare_available"]


def unshare_available() -> bool:
  """Whether ``unshare -n`` can create a network namespace here (probed once)."""
  return unshare_net_available()


def isolation_level(config: SandboxConfig = SandboxConfig()) -> Level:
  """The level ``config`` runs under here (RuntimeError, saying why, if none)."""
  return resolve_level(config)


def run_programs(sources: Sequence[str], config: SandboxConfig = SandboxConfig(),
                 workers: int = 2, tests: Sequence[str] | None = None) -> list[ExecResult]:
  """:func:`run_program` over ``sources`` (with ``tests[i]`` as the split test of
  ``sources[i]`` when given), ``workers`` at a time; results in input order."""
  if not isinstance(workers, int) or workers < 1:
    raise ValueError(f"workers={workers!r} must be a positive int")
  if isinstance(sources, str):
    raise TypeError("sources must be a sequence of programs, not one str")
  bad = [i for i, s in enumerate(sources) if not isinstance(s, str)]
  if bad:
    raise TypeError(f"sources[{bad[0]}] is {type(sources[bad[0]]).__name__}, not str")
  if tests is not None:
    if isinstance(tests, str) or len(tests) != len(sources):
      raise ValueError(f"tests must be a sequence of {len(sources)} test sources (one per "
                       f"program), got {type(tests).__name__} of length "
                       f"{len(tests) if not isinstance(tests, str) else 'str'}")
  resolve_level(config)  # fail before starting anything if the level is unavailable
  pairs = list(zip(sources, tests if tests is not None else [None] * len(sources)))
  with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
    return list(pool.map(lambda st: run_program(st[0], config, st[1]), pairs))
