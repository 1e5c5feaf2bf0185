"""Configuration and result of one sandboxed run."""

from __future__ import annotations

import dataclasses

STATUSES = ("pass", "fail", "timeout", "error")
ISOLATIONS = ("auto", "bwrap", "unshare", "guard")
NETWORKS = ("auto", "unshare", "hook")


def _check_int(name: str, value, low: int, note: str = "") -> None:
  if type(value) is not int or value < low:
    raise ValueError(f"{name}={value!r} must be an int >= {low}{note}")


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
  """Limits and isolation of one run (the package docstring says what each level guarantees).

  Attributes:
    timeout_s: wall-clock limit of the whole run (> 0); reported as ``timeout``.
    memory_mb: address-space limit (RLIMIT_AS) of each process of the program, >= 64.
    cpu_s: CPU-seconds limit (RLIMIT_CPU: SIGXCPU, then SIGKILL a second
      later; both reported as ``timeout``); 0 = int(timeout_s) + 2.
    fsize_mb: largest file the program may write (RLIMIT_FSIZE; also caps
      its stdout/stderr and each memfd), >= 1.
    disk_mb: size of the private tmpfs that is the program's work dir, /tmp
      and HOME (all it can write), >= 1; not enforced at isolation 'guard'.
    nproc: processes + threads of the run's uid (RLIMIT_NPROC), >= 1; the
      kernel ignores it for root, i.e. at isolation 'guard' as root.
    nofile: open file descriptors per process (RLIMIT_NOFILE), >= 16.
    isolation: 'auto' (the strongest level that works here: 'bwrap', else
      'unshare'; refuses to run when neither does), 'bwrap', 'unshare' (that
      level or a RuntimeError saying why not) or 'guard' (the in-process audit
      hook only: weak, and used only when asked for by name).
    audit_hook: install the in-process audit hook (always on at 'guard'; at
      the namespace levels a second layer that gives readable errors).
    network: at isolation 'guard' only (the other levels always run in an
      empty network namespace): 'auto' (``unshare -n`` when it works), 'unshare'
      (require it) or 'hook' (the audit hook only).
    stderr_tail_chars: how much of the end of stderr an ExecResult keeps.
  """

  timeout_s: float = 10.0
  memory_mb: int = 1024
  cpu_s: int = 0
  fsize_mb: int = 16
  disk_mb: int = 64
  nproc: int = 64
  nofile: int = 64
  isolation: str = "auto"
  audit_hook: bool = True
  network: str = "auto"
  stderr_tail_chars: int = 2000

  def __post_init__(self):
    if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
      raise ValueError(f"timeout_s={self.timeout_s!r} must be > 0")
    _check_int("memory_mb", self.memory_mb, 64)
    _check_int("cpu_s", self.cpu_s, 0, " (0 = from timeout_s)")
    _check_int("fsize_mb", self.fsize_mb, 1)
    _check_int("disk_mb", self.disk_mb, 1)
    _check_int("nproc", self.nproc, 1)
    _check_int("nofile", self.nofile, 16)
    _check_int("stderr_tail_chars", self.stderr_tail_chars, 0)
    if self.isolation not in ISOLATIONS:
      raise ValueError(f"isolation={self.isolation!r}; choose one of {ISOLATIONS}")
    if type(self.audit_hook) is not bool:
      raise ValueError(f"audit_hook={self.audit_hook!r} must be True or False")
    if self.network not in NETWORKS:
      raise ValueError(f"network={self.network!r}; choose 'auto', 'unshare' or 'hook'")

  @property
  def cpu_limit_s(self) -> int:
    return self.cpu_s or int(self.timeout_s) + 2


@dataclasses.dataclass(frozen=True)
class ExecResult:
  """The outcome of one run.

  Attributes:
    status: one of STATUSES.
    returncode: the program's exit status (negative: killed by that signal);
      in a split run (a separate test), the program's, not the test's.
    stderr_tail: the end of the program's stderr (then the test's, in a split run).
    duration_s: wall time of the run.
    isolation: the level it ran under ('bwrap', 'unshare', 'guard').
    cleanup_error: what could not be cleaned up or had to be killed after
      the run ('' when nothing); a non-empty value makes the status 'error'.
  """

  status: str
  returncode: int
  stderr_tail: str
  duration_s: float
  isolation: str = ""
  cleanup_error: str = ""

  @property
  def passed(self) -> bool:
    return self.status == "pass"
