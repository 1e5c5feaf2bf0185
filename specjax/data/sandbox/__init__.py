"""Run untrusted (model-generated) Python programs behind an OS isolation boundary.

Every program runs in a fresh ``python -I -S -B`` (isolated mode, no site,
no ``.pyc`` writes: the standard library only), started by a guard that sets
rlimits and (by default) an audit hook before the program's first line. The
program's source arrives on stdin; no token or secret exists anywhere.

Isolation levels (``SandboxConfig.isolation``). ``'auto'`` takes the first of
``bwrap``, ``unshare`` that works here and *refuses to run* when neither does;
the level in force is printed to stderr once per process and recorded in
``ExecResult.isolation``; :func:`isolation_level` tells it in advance.

* ``bwrap`` -- bubblewrap (``apt-get install bubblewrap``): new pid, mount,
  network, IPC, UTS (and cgroup) namespaces. A new root holding only
  read-only ``/usr``, ``/bin``/``/lib*`` and the interpreter's directory, a
  fresh ``/proc`` (only the run's processes), a minimal ``/dev`` and a
  private, empty tmpfs of ``disk_mb`` MB that is the work dir, ``/tmp`` and
  ``HOME`` -- the only writable place. The host's files, ``/tmp``, processes,
  environment and UNIX sockets are absent; the network namespace has only its
  own loopback. The program is uid 1000 in a user namespace, without
  capabilities, with ``no_new_privs``, and may not create further user
  namespaces. Started by root, each run also gets its own unprivileged host
  uid (locked against concurrent runs in any process), so ``RLIMIT_NPROC``
  holds and nothing the program does runs as root. ``--die-with-parent``,
  ``--new-session``.
* ``unshare`` -- util-linux ``unshare`` + ``setpriv`` and coreutils
  ``chroot`` (root only): the same namespaces; a shell builds the same
  read-only root on a tmpfs and runs the program chrooted into it under an
  unprivileged per-run uid without capabilities. Residual: the program may
  create user namespaces of its own where the host allows them (more kernel
  surface; no power over the host's files or processes).
* ``guard`` -- the in-process audit hook and rlimits only, as the caller's
  user, in a temp work dir on the host (``unshare -n`` for the network when
  it works). It stops accidents, not code written to escape (the hook can be
  switched off through ``gc``; a process that leaves the run's session is
  not found afterwards). Used only when asked for by name, with a
  RuntimeWarning.

Every process of a run ends with it. At the namespace levels the runner kills
the run's pid 1 (the kernel then kills every process of the pid namespace),
then checks that no live process has the run's uid or is in its pid
namespace (at ``guard``: in its session); any it finds it kills and reports
in ``ExecResult.cleanup_error``, with status ``error`` -- as it does a work dir
it cannot remove.

Verdicts (``ExecResult.status``): ``pass``, ``fail`` (``AssertionError``),
``timeout`` (wall clock ``timeout_s``; or the CPU limit: SIGXCPU, or the
SIGKILL of the hard limit a second later when a program ignores SIGXCPU --
the kernel does not say why it killed, so a SIGKILL counts as the CPU limit
when the collected CPU time, or where the wrapper does not collect it the
run's duration, reached ``cpu_s``), ``error`` (anything else: other
exceptions, refused operations, ``MemoryError``, other signals, an early
``sys.exit``/``os._exit``, a process outliving the run, a failed cleanup).

* ``run_program(program, config, test=...)`` -- a *split* run, what
  :func:`specjax.data.humaneval.evaluate` does: the program runs in the
  sandbox and only answers calls; the trusted test runs in a separate harness
  process outside the sandbox (unsandboxed: the test is the caller's code),
  where the program's functions are proxies. Arguments and results cross as
  plain data (``codec``: exact builtin types, so an object whose ``__eq__``
  always answers ``True`` cannot cross). The verdict is the harness's exit
  status: the program can neither read nor write it. Residual: the program
  defines every name the test takes from it, prompt helpers included
  (HumanEval's ``poly``, ``encode_cyclic``); redefining one changes what the
  test checks, exactly as in-process.
* ``run_program(source, config)`` -- a *single-process* run: program and
  checks share one interpreter; the guard reports the program's end on a
  socket. Residuals of this mode: the program can write that report itself,
  make its check function skip its asserts through ``sys.settrace``, or
  monkeypatch what the checks use (builtins, modules, the guard's own
  globals). Use ``test=`` when the verdict matters.

Each residual is shown by a ``test_residual_*`` test in
``tests/data/test_sandbox_isolation.py``, next to the attack tests of every class
(file writes by every route, spawning, surviving processes, cross-sample
tampering, signals, sockets of every family, forged verdicts, resources).

Resources: ``RLIMIT_AS`` per process (``memory_mb``), ``RLIMIT_CPU``
(``cpu_s``), ``RLIMIT_FSIZE`` (each file, memfd, stdout and stderr),
``RLIMIT_NPROC`` (processes + threads of the run's uid), ``RLIMIT_NOFILE``,
no core dumps, the work-dir tmpfs (``disk_mb``), ``oom_score_adj`` 1000 (the
kernel's OOM killer takes sandboxed processes first) and
``MALLOC_ARENA_MAX=2`` (glibc would reserve 64 MB of address space per
thread: 16 threads now run under the default 1 GB). No cgroup is used (this
project's machines have no writable cgroup v2 memory controller), so memory
is bounded per process, not per run: memfds and pipe buffers live outside
the address space, bounded by ``nofile`` x ``fsize_mb`` per process and the
kernel's per-user pipe quota, and a run may have ``nproc`` processes. Run
the evaluator in a memory-capped cgroup (``systemd-run --scope -p
MemoryMax=8G ...``) for a hard total. There is no seccomp filter: the
kernel's system calls are reachable as from any unprivileged process.

Cost, by ``python -m benchmarks.sandbox_overhead`` (the 164 canonical
HumanEval solutions, 2 workers, wall time / 164, median of 3, on a 2-core
machine shared with other jobs, 1-minute load 7-11): the previous
single-process executor 23 ms per program; split runs under ``bwrap`` (what
``humaneval.evaluate`` does) 76 ms; single-process under ``bwrap`` 59 ms;
split under ``unshare`` 95 ms; split at ``guard`` 60 ms. Namespaces and the
split run's second interpreter cost about the same.
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
