"""Run untrusted (model-generated) Python programs, one fresh subprocess each.

Layers, all applied to every program:

* **Fresh interpreter**: ``sys.executable -I -S -B -c GUARD`` -- isolated mode
  (no ``PYTHON*`` variables, no user site, script directory not on
  ``sys.path``), no ``site`` (so no site-packages: HumanEval needs only the
  stdlib), no ``.pyc`` writes; a minimal environment (``PATH``, ``LANG``,
  ``HOME``/``TMPDIR`` = the work dir); stdin is ``/dev/null``; its own session
  (process group), killed as a whole on timeout.
* **Fresh work directory**: a new ``tempfile.mkdtemp`` is the cwd, deleted after.
* **Resource limits** (set by the guard before any user code runs):
  ``RLIMIT_AS`` (address space, ``memory_mb``), ``RLIMIT_CPU`` (``cpu_s``),
  ``RLIMIT_FSIZE`` (``fsize_mb``; also caps stdout/stderr, which go to files),
  ``RLIMIT_NPROC`` (``nproc``; note the kernel ignores it for root),
  ``RLIMIT_CORE`` = 0. A wall-clock ``timeout_s`` is enforced by the parent.
* **No network**: when ``unshare -n`` works on this machine (root or
  unprivileged user namespaces), the interpreter runs in a new, empty network
  namespace (only a down loopback). Always, in addition, the audit hook below
  refuses ``socket.__new__``/``connect``/``bind``/``getaddrinfo``/... .
* **Audit hook** (:pep:`578`, ``sys.addaudithook``, cannot be removed once
  installed) refusing with ``PermissionError``: ``open`` for writing (any of
  ``O_WRONLY|O_RDWR|O_APPEND|O_CREAT|O_TRUNC``) of a path whose ``realpath``
  is outside the work dir (so symlinks out are caught; ``/dev/null`` is
  allowed); ``os.remove``,
  ``rename``, ``rmdir``, ``mkdir``, ``link``, ``symlink``, ``truncate``,
  ``chmod``, ``chown``, ``utime``, ``*xattr`` and ``shutil.*`` outside the
  work dir; process creation and signalling (``subprocess.Popen``,
  ``os.system``, ``os.exec*``, ``os.posix_spawn``, ``os.spawn*``, ``os.fork``,
  ``os.forkpty``, ``pty.spawn``, ``os.kill``, ``os.killpg``); all ``ctypes.*``
  events, and imports of ``ctypes``/``_ctypes``.

This stops accidents and the usual model mistakes (stray file writes,
``rm -rf``, network fetches, fork or memory bombs, infinite loops); it is
*not* a security boundary against code written to escape (audit hooks run
in-process). Run untrusted code at scale inside a container/VM as well.

Outcome (:class:`ExecResult.status`):

* ``pass``: the program ran to its end and exited 0 (the guard writes a
  completion marker to a file it opened before user code started, so an early
  ``sys.exit(0)``/``os._exit(0)`` is *not* a pass);
* ``fail``: it raised ``AssertionError`` (a test assertion failed);
* ``timeout``: wall-clock ``timeout_s`` exceeded or CPU limit hit (SIGXCPU);
* ``error``: anything else (syntax error, other exception, refused
  operation, ``MemoryError``, killed by a signal, early exit).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Sequence

STATUSES = ("pass", "fail", "timeout", "error")
_FAIL_RC, _ERROR_RC = 3, 4

# Runs first in the child: limits, marker fd, audit hook, then the program.
# argv: [-c, program_path, marker_path, token, workdir, as_bytes, cpu_s, fsize_bytes, nproc]
GUARD = r'''
import os, sys, resource
_prog, _marker, _token, _work = sys.argv[1:5]
_as, _cpu, _fsize, _nproc = (int(x) for x in sys.argv[5:9])
# CPU: SIGXCPU at the soft limit, SIGKILL one second later (hard limit)
for _lim, _v, _h in ((resource.RLIMIT_AS, _as, _as), (resource.RLIMIT_CPU, _cpu, _cpu + 1),
                     (resource.RLIMIT_FSIZE, _fsize, _fsize),
                     (resource.RLIMIT_NPROC, _nproc, _nproc), (resource.RLIMIT_CORE, 0, 0)):
    try:
        resource.setrlimit(_lim, (_v, _h))
    except (ValueError, OSError):
        resource.setrlimit(_lim, (_v, resource.getrlimit(_lim)[1]))
with open(_prog, encoding="utf-8") as _f:
    _src = _f.read()
_mfd = os.open(_marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
sys.argv = [_prog]

def _install(work):
    import posixpath
    realpath, sep = posixpath.realpath, "/"
    root = realpath(work)
    wflags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    def inside(p):
        if isinstance(p, int):  # an fd the program already holds
            return True
        r = realpath(os.fsdecode(p))
        return r == root or r.startswith(root + sep) or r == "/dev/null"
    deny_always = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn",
                   "os.fork", "os.forkpty", "pty.spawn", "os.kill", "os.killpg",
                   "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
                   "socket.gethostbyname", "socket.sendto", "socket.sendmsg",
                   "os.startfile", "winreg.", "ctypes.")
    path_events = {"os.remove": 1, "os.rename": 2, "os.rmdir": 1, "os.mkdir": 1, "os.link": 2,
                   "os.symlink": 2, "os.truncate": 1, "os.chmod": 1, "os.chown": 1,
                   "os.utime": 1, "os.chflags": 1, "os.lchflags": 1, "os.setxattr": 1,
                   "os.removexattr": 1, "shutil.rmtree": 1, "shutil.move": 2,
                   "shutil.copyfile": 2, "shutil.copytree": 2, "shutil.chown": 1}
    busy = [False]

    def hook(event, args):
        if busy[0]:
            return
        busy[0] = True
        try:
            if event == "open":
                path, flags = args[0], args[2]
                if isinstance(flags, int) and flags & wflags and not inside(path):
                    raise PermissionError(f"sandbox: writing {path!r} outside the work dir")
            elif event == "import":
                if args[0] in ("ctypes", "_ctypes"):
                    raise PermissionError(f"sandbox: import of {args[0]} is not allowed")
            elif event.startswith(deny_always):
                raise PermissionError(f"sandbox: {event} is not allowed")
            elif event in path_events:
                for p in args[:path_events[event]]:
                    if isinstance(p, (str, bytes, os.PathLike)) and not inside(p):
                        raise PermissionError(f"sandbox: {event} on {p!r} outside the work dir")
        finally:
            busy[0] = False

    sys.addaudithook(hook)

_install(_work)
del _install
_g = {"__name__": "__main__", "__file__": _prog, "__builtins__": __builtins__}
try:
    exec(compile(_src, _prog, "exec"), _g)
except AssertionError:
    import traceback
    traceback.print_exc()
    sys.stderr.flush()
    os._exit(%(fail)d)
except BaseException:
    import traceback
    traceback.print_exc()
    sys.stderr.flush()
    os._exit(%(error)d)
sys.stdout.flush()
sys.stderr.flush()
os.write(_mfd, _token.encode())
os._exit(0)
''' % {"fail": _FAIL_RC, "error": _ERROR_RC}


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
  """Limits of one run (module docstring).

  Attributes:
    timeout_s: wall-clock limit (> 0).
    memory_mb: address-space limit (RLIMIT_AS), >= 64.
    cpu_s: CPU-seconds limit (RLIMIT_CPU); 0 = ceil(timeout_s) + 1.
    fsize_mb: largest file the program (and its stdout/stderr) may write.
    nproc: RLIMIT_NPROC (processes+threads of the user; ignored for root).
    network: 'auto' (``unshare -n`` when it works, else audit hook only),
      'unshare' (require it; error if unavailable) or 'hook' (audit hook only).
    stderr_tail_chars: how much of the end of stderr an ExecResult keeps.
  """

  timeout_s: float = 10.0
  memory_mb: int = 1024
  cpu_s: int = 0
  fsize_mb: int = 16
  nproc: int = 256
  network: str = "auto"
  stderr_tail_chars: int = 2000

  def __post_init__(self):
    if not self.timeout_s > 0:
      raise ValueError(f"timeout_s={self.timeout_s!r} must be > 0")
    if not isinstance(self.memory_mb, int) or self.memory_mb < 64:
      raise ValueError(f"memory_mb={self.memory_mb!r} must be an int >= 64")
    if not isinstance(self.cpu_s, int) or self.cpu_s < 0:
      raise ValueError(f"cpu_s={self.cpu_s!r} must be an int >= 0 (0 = from timeout_s)")
    if not isinstance(self.fsize_mb, int) or self.fsize_mb < 1:
      raise ValueError(f"fsize_mb={self.fsize_mb!r} must be an int >= 1")
    if not isinstance(self.nproc, int) or self.nproc < 1:
      raise ValueError(f"nproc={self.nproc!r} must be an int >= 1")
    if self.network not in ("auto", "unshare", "hook"):
      raise ValueError(f"network={self.network!r}; choose 'auto', 'unshare' or 'hook'")


@dataclasses.dataclass(frozen=True)
class ExecResult:
  """``status`` in STATUSES; ``returncode`` (negative = killed by that signal);
  ``stderr_tail``: the end of stderr; ``duration_s``: wall time."""

  status: str
  returncode: int
  stderr_tail: str
  duration_s: float

  @property
  def passed(self) -> bool:
    return self.status == "pass"


@functools.lru_cache(maxsize=1)
def unshare_available() -> bool:
  """Whether ``unshare -n`` can create a network namespace here (probed once)."""
  exe = shutil.which("unshare")
  if exe is None:
    return False
  try:
    return subprocess.run([exe, "-n", "true"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=10).returncode == 0
  except (OSError, subprocess.SubprocessError):
    return False


def _prefix(network: str) -> list[str]:
  if network == "hook":
    return []
  if unshare_available():
    return [shutil.which("unshare"), "-n"]
  if network == "unshare":
    raise RuntimeError("network='unshare' but `unshare -n` does not work on this machine")
  return []


def _tail(path: str, n: int) -> str:
  try:
    with open(path, "rb") as f:
      f.seek(0, os.SEEK_END)
      size = f.tell()
      f.seek(max(0, size - 4 * n))
      return f.read().decode("utf-8", errors="replace")[-n:]
  except OSError:
    return ""


def run_program(source: str, config: SandboxConfig = SandboxConfig()) -> ExecResult:
  """Run one Python program in the sandbox; see the module docstring."""
  if not isinstance(source, str):
    raise TypeError(f"source must be str, got {type(source).__name__}")
  prefix = _prefix(config.network)
  cpu_s = config.cpu_s or int(config.timeout_s) + 2
  work = tempfile.mkdtemp(prefix="specjax_sbx_")  # the program's cwd (writable)
  meta = tempfile.mkdtemp(prefix="specjax_sbx_meta_")  # ours: program, marker, output
  try:
    prog = os.path.join(meta, "program.py")
    with open(prog, "w", encoding="utf-8") as f:
      f.write(source)
    marker, token = os.path.join(meta, "done"), secrets.token_hex(16)
    out_path, err_path = os.path.join(meta, "stdout"), os.path.join(meta, "stderr")
    argv = prefix + [sys.executable, "-I", "-S", "-B", "-c", GUARD, prog, marker, token, work,
                     str(config.memory_mb << 20), str(cpu_s), str(config.fsize_mb << 20),
                     str(config.nproc)]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": work, "TMPDIR": work,
           "PYTHONHASHSEED": "0"}
    t0 = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
      proc = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out,
                              stderr=err, start_new_session=True, close_fds=True)
      timed_out = False
      try:
        rc = proc.wait(timeout=config.timeout_s)
      except subprocess.TimeoutExpired:
        timed_out = True
        try:
          os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
        rc = proc.wait()
    duration = time.monotonic() - t0
    stderr_tail = _tail(err_path, config.stderr_tail_chars)
    try:
      with open(marker) as f:
        finished = f.read() == token
    except OSError:
      finished = False
    if timed_out or rc == -signal.SIGXCPU:
      status = "timeout"
    elif rc == 0 and finished:
      status = "pass"
    elif rc == _FAIL_RC:
      status = "fail"
    else:
      status = "error"
      if rc == 0:
        stderr_tail = (stderr_tail + "\nsandbox: the program exited before its end")[
            -config.stderr_tail_chars:]
    return ExecResult(status=status, returncode=rc, stderr_tail=stderr_tail,
                      duration_s=duration)
  finally:
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(meta, ignore_errors=True)


def run_programs(sources: Sequence[str], config: SandboxConfig = SandboxConfig(),
                 workers: int = 2) -> list[ExecResult]:
  """:func:`run_program` over ``sources`` with ``workers`` concurrent subprocesses
  (threads that wait on them); results in input order."""
  if not isinstance(workers, int) or workers < 1:
    raise ValueError(f"workers={workers!r} must be a positive int")
  if isinstance(sources, str):
    raise TypeError("sources must be a sequence of programs, not one str")
  bad = [i for i, s in enumerate(sources) if not isinstance(s, str)]
  if bad:
    raise TypeError(f"sources[{bad[0]}] is {type(sources[bad[0]]).__name__}, not str")
  _prefix(config.network)  # fail before starting anything if 'unshare' is unavailable
  with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
    return list(pool.map(lambda s: run_program(s, config), sources))
