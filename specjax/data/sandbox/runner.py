"""One sandboxed run: start the program (and the test harness), watch the
clock, end everything, check that nothing outlived the run, give the verdict."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings

from specjax.data.sandbox import guard, harness, levels
from specjax.data.sandbox.config import ExecResult, SandboxConfig

_END_LINE = b'{"op":"end"}\n'
_GRACE_S = 2.0  # how long a program may take to go after its run ended
_SURVIVOR_GRACE_S = 1.0  # how long the processes of a finished run may take to vanish
_announced: set = set()
_announce_lock = threading.Lock()


# ---------------------------------------------------------------- scripts

@functools.lru_cache(maxsize=None)
def script(name: str) -> str:
  """Source of the guard or the harness, the codec in front of it (they run
  as ``python -I -S -c``, where specjax is not importable)."""
  here = os.path.dirname(os.path.abspath(__file__))

  def read(module: str) -> str:
    with open(os.path.join(here, module + ".py"), encoding="utf-8") as f:
      return f.read()

  body = "\n".join(line for line in read(name).splitlines()
                   if not line.startswith("from specjax.data.sandbox.codec import"))
  return read("codec") + "\n" + body + "\n"


# ---------------------------------------------------------------- choosing the level

def resolve_level(config: SandboxConfig) -> levels.Level:
  """The level ``config.isolation`` asks for, or a RuntimeError saying why it
  cannot be had here."""
  if config.isolation == "guard":
    if config.network == "unshare" and not unshare_net_available():
      raise RuntimeError("network='unshare' but `unshare -n` does not work on this machine")
    return levels.level("guard", "in-process")
  found = levels.probe_levels()
  names = ("bwrap", "unshare") if config.isolation == "auto" else (config.isolation,)
  for name in names:
    if isinstance(found[name], levels.Level):
      return found[name]
  why = "; ".join(f"{n}: {found[n]}" for n in names)
  raise RuntimeError(
      f"sandbox: isolation={config.isolation!r} is not available here ({why}). Install "
      f"bubblewrap (apt-get install bubblewrap) for full isolation, or pass "
      f"SandboxConfig(isolation='guard') to accept the weak in-process guard.")


def announce(level: levels.Level) -> None:
  """Say once per process which isolation level is in force (stderr; a
  RuntimeWarning as well for the weak one)."""
  with _announce_lock:
    if level.name in _announced:
      return
    _announced.add(level.name)
  print(f"specjax.data.sandbox: isolation level {level.name!r} ({level.variant}): "
        f"{level.description}", file=sys.stderr, flush=True)
  if level.variant == "in-process":
    warnings.warn("specjax.data.sandbox: isolation 'guard' is an in-process audit hook only, "
                  "which code written to escape it can switch off. Install bubblewrap for "
                  "full isolation.",
                  RuntimeWarning, stacklevel=3)


@functools.lru_cache(maxsize=1)
def unshare_net_available() -> bool:
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


# ---------------------------------------------------------------- processes

@dataclasses.dataclass
class Child:
  """A started process, waited for through a pidfd (no polling loop)."""

  popen: subprocess.Popen
  pidfd: int
  returncode: int | None = None
  cpu_s: float = 0.0

  @classmethod
  def start(cls, argv: list, **kwargs) -> "Child":
    popen = subprocess.Popen(argv, **kwargs)
    return cls(popen=popen, pidfd=os.pidfd_open(popen.pid))

  @property
  def pid(self) -> int:
    return self.popen.pid

  def reap(self) -> bool:
    """Collect the exit status (and CPU time, the descendants it waited for
    included) if the process has ended."""
    if self.returncode is not None:
      return True
    pid, status, usage = os.wait4(self.pid, os.WNOHANG)
    if pid == 0:
      return False
    self.returncode = os.waitstatus_to_exitcode(status)
    self.popen.returncode = self.returncode
    self.cpu_s = usage.ru_utime + usage.ru_stime
    os.close(self.pidfd)
    return True

  def wait(self, deadline: float) -> bool:
    """Whether it ended before ``deadline`` (time.monotonic)."""
    poller = select.poll()
    poller.register(self.pidfd, select.POLLIN)
    while not self.reap():
      left = deadline - time.monotonic()
      if left <= 0:
        return False
      poller.poll(max(1, int(left * 1000)))
    return True

  def kill(self) -> None:
    if self.returncode is None:
      try:
        signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
      except ProcessLookupError:
        pass


def _children(pid: int) -> list:
  try:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
      return [int(x) for x in f.read().split()]
  except (OSError, ValueError):
    return []


def _pid_namespace(pid: int) -> str:
  try:
    return os.readlink(f"/proc/{pid}/ns/pid")
  except OSError:
    return ""


def _read_child_pid(fd: int, deadline: float) -> int | None:
  """bwrap's ``--info-fd`` report: the host pid of the sandbox's pid 1."""
  data, poller = b"", select.poll()
  poller.register(fd, select.POLLIN)
  while b"}" not in data and time.monotonic() < deadline:
    if not poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
      break
    chunk = os.read(fd, 4096)
    if not chunk:
      break
    data += chunk
  m = re.search(rb'"child-pid"\s*:\s*(\d+)', data)
  return int(m.group(1)) if m else None


def end_sandbox(level: levels.Level, child: Child, init_pid: int | None) -> None:
  """Kill what is left of a run: the sandbox's pid 1 first (the kernel then
  kills every process in its pid namespace before the wrapper can exit),
  then the wrapper; at level 'guard', the run's process group."""
  if child.reap():
    return
  if level.name == "guard":
    try:
      os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      pass
  else:
    targets = [init_pid] if init_pid else _children(child.pid)
    for pid in targets:
      if pid in _children(child.pid):  # never a pid the program could have named
        try:
          os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
          pass
  if not child.wait(time.monotonic() + _GRACE_S):
    child.kill()
    child.wait(time.monotonic() + _GRACE_S)


def _session_members(sid: int) -> list:
  found = []
  for pid in os.listdir("/proc"):
    if pid.isdigit():
      try:
        with open(f"/proc/{pid}/stat") as f:
          fields = f.read().rsplit(")", 1)[1].split()
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
          found.append(int(pid))
      except (OSError, IndexError, ValueError):
        continue
  return found


def _namespace_members(ns: str) -> list:
  return [int(p) for p in os.listdir("/proc")
          if p.isdigit() and _pid_namespace(int(p)) == ns and levels.alive(int(p))]


def survivors(level: levels.Level, run_uid: int | None, pid_ns: str, sid: int) -> list:
  """Processes of the run still alive: with its host uid, in its pid
  namespace, or (level 'guard') in its session."""
  if level.name == "guard":
    return _session_members(sid)
  found = set(levels.processes_of_uid(run_uid)) if run_uid is not None else set()
  if pid_ns and pid_ns != _pid_namespace(os.getpid()):
    found |= set(_namespace_members(pid_ns))
  return sorted(found)


def check_nothing_survived(level, run_uid, pid_ns, sid) -> str:
  """'' when no process of the run is left (after a grace period), else a
  report of the ones that were, which are then killed."""
  deadline = time.monotonic() + _SURVIVOR_GRACE_S
  while (left := survivors(level, run_uid, pid_ns, sid)) and time.monotonic() < deadline:
    time.sleep(0.01)
  if not left:
    return ""
  for pid in left:
    try:
      os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      pass
  return f"sandbox: {len(left)} process(es) outlived the run and were killed: {left[:10]}"


# ---------------------------------------------------------------- one run

@dataclasses.dataclass
class Run:
  """Where one run keeps its files on the host."""

  meta: str  # program, test, stdout, stderr: the runner's, never visible to the program
  work: str  # the program's work dir as it sees it
  host_work: str | None  # level 'guard': that dir on the host (removed after)

  def path(self, name: str) -> str:
    return os.path.join(self.meta, name)


def _write(path: str, text: str) -> int:
  """Write ``text`` to ``path``; a read-only descriptor of it."""
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return os.open(path, os.O_RDONLY)


def _keep_tail(text: str, n: int) -> str:
  return text[-n:] if n > 0 else ""


def _tail(path: str, n: int) -> str:
  try:
    with open(path, "rb") as f:
      f.seek(0, os.SEEK_END)
      f.seek(max(0, f.tell() - 4 * n))
      return _keep_tail(f.read().decode("utf-8", errors="replace"), n)
  except OSError:
    return ""


def _guard_argv(level, config: SandboxConfig, mode: str, sock_fd: int, work: str) -> list:
  hook = config.audit_hook or level.name == "guard"
  return [levels.interpreter().executable, "-I", "-S", "-B", "-c", script("guard"), mode,
          str(sock_fd), work, str(config.memory_mb << 20), str(config.cpu_limit_s),
          str(config.fsize_mb << 20), str(config.nproc), str(config.nofile), str(int(hook))]


def _sandbox_argv(level, config, mode, sock_fd, work, run_uid, info_fd) -> list:
  command = _guard_argv(level, config, mode, sock_fd, work)
  if level.name == "bwrap":
    return levels.bwrap_argv(level, config.disk_mb << 20, run_uid, info_fd) + command
  if level.name == "unshare":
    return levels.unshare_argv(config.disk_mb << 20, run_uid, command)
  if config.network != "hook" and unshare_net_available():
    return [shutil.which("unshare"), "-n"] + command
  return command


def _env(work: str) -> dict:
  return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": work, "TMPDIR": work,
          "PYTHONHASHSEED": "0", "MALLOC_ARENA_MAX": "2"}


def _signal_of(level, rc: int) -> int:
  """The signal that ended the program (0 if none); the namespace levels'
  wrappers report one as exit status 128 + signal."""
  if rc < 0:
    return -rc
  if level.name != "guard" and 128 < rc <= 128 + 64:
    return rc - 128
  return 0


def cpu_timeout(level, child: Child, config: SandboxConfig, duration_s: float) -> bool:
  """Whether the program was ended by its CPU limit: SIGXCPU, or the SIGKILL
  of the hard limit (a program that ignores SIGXCPU). The kernel does not say
  why it sent a SIGKILL: it counts as the CPU limit when the CPU time the
  wrapper collected reached it, or, where the sandbox's pid 1 is not waited
  for by the wrapper (bwrap), when the run lasted at least that long."""
  sig = _signal_of(level, child.returncode)
  if sig == signal.SIGXCPU:
    return True
  limit = config.cpu_limit_s
  return sig == signal.SIGKILL and (child.cpu_s >= limit - 0.05 or duration_s >= limit)


def _cleanup(run: Run) -> str:
  errors = []

  def note(func, path, exc_info):
    errors.append(f"{path}: {exc_info[1]}")

  for d in (run.meta, run.host_work):
    if d is not None and os.path.exists(d):
      shutil.rmtree(d, onerror=note)
  return ("sandbox: cleanup failed: " + "; ".join(errors[:5])) if errors else ""


def run_program(source: str, config: SandboxConfig = SandboxConfig(),
                test: str | None = None) -> ExecResult:
  """Run one program in the sandbox; see the package docstring.

  Args:
    source: the program (Python source).
    config: limits and isolation.
    test: optional trusted test code, run by a separate harness process
      whose global names not defined by the test resolve to the program's
      (functions are called across the boundary). With ``test``, the verdict
      is the harness's, out of the program's reach; without, the program
      runs with its checks in one process (see "Verdicts").
  """
  if not isinstance(source, str):
    raise TypeError(f"source must be str, got {type(source).__name__}")
  if test is not None and not isinstance(test, str):
    raise TypeError(f"test must be str or None, got {type(test).__name__}")
  level = resolve_level(config)
  announce(level)
  meta = tempfile.mkdtemp(prefix="specjax_sbx_meta_")
  host_work = tempfile.mkdtemp(prefix="specjax_sbx_") if level.name == "guard" else None
  run = Run(meta=meta, work=host_work or "/tmp", host_work=host_work)
  try:
    if level.run_uid:
      with levels.run_uid() as uid:
        result = _execute(level, config, source, test, run, uid)
    else:
      result = _execute(level, config, source, test, run, None)
  finally:
    cleanup_error = _cleanup(run)
  if cleanup_error:
    result = _with_cleanup_error(result, cleanup_error, config)
  return result


def _with_cleanup_error(result: ExecResult, message: str, config: SandboxConfig) -> ExecResult:
  joined = "; ".join(m for m in (result.cleanup_error, message) if m)
  tail = _keep_tail(result.stderr_tail + "\n" + message, config.stderr_tail_chars)
  return dataclasses.replace(result, status="error", cleanup_error=joined, stderr_tail=tail)


def _execute(level, config, source, test, run: Run, uid) -> ExecResult:
  """Start, wait, end and judge one run (cleanup of ``run`` is the caller's)."""
  t0 = time.monotonic()
  deadline = t0 + config.timeout_s
  parent_sock, sandbox_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
  box = tester = None
  try:
    box, init_pid = _start_sandbox(level, config, source, test is not None, run, uid,
                                   sandbox_sock, deadline)
    sandbox_sock.close()
    if test is not None:
      tester = _start_harness(run, test, parent_sock)
      parent_sock.close()
    pid_ns = _pid_namespace(init_pid) if init_pid else ""
    timed_out = _wait_for_verdict(box, tester, deadline)
    duration = time.monotonic() - t0
    end_sandbox(level, box, init_pid)
    survived = check_nothing_survived(level, uid, pid_ns, box.pid)
  finally:
    sandbox_sock.close()
    for child in (box, tester):
      if child is not None and child.returncode is None:
        child.kill()
        child.wait(time.monotonic() + _GRACE_S)
  ended = _read_available(parent_sock) if test is None else b""
  parent_sock.close()
  status = _verdict(level, config, box, tester, timed_out, ended, duration)
  result = _result(level, config, run, box, tester, status, duration)
  return _with_cleanup_error(result, survived, config) if survived else result


def _start_sandbox(level, config, source, split: bool, run: Run, uid, sock: socket.socket,
                   deadline: float) -> tuple:
  """The sandboxed program, started; and (bwrap) the host pid of its pid 1."""
  program_fd = _write(run.path("program.py"), source)
  info_r, info_w = os.pipe() if level.name == "bwrap" else (-1, -1)
  mode = "serve" if split else "run"
  try:
    argv = _sandbox_argv(level, config, mode, sock.fileno(), run.work, uid, info_w)
    passed = (sock.fileno(),) + ((info_w,) if info_w >= 0 else ())
    with open(run.path("stdout"), "wb") as out, open(run.path("stderr"), "wb") as err:
      box = Child.start(argv, cwd=run.host_work or "/", env=_env(run.work), stdin=program_fd,
                        stdout=out, stderr=err, start_new_session=True, close_fds=True,
                        pass_fds=passed)
    if info_w >= 0:
      os.close(info_w)
      info_w = -1
      return box, _read_child_pid(info_r, deadline)
    return box, None
  finally:
    for fd in (program_fd, info_r, info_w):
      if fd >= 0:
        os.close(fd)


def _start_harness(run: Run, test: str, sock: socket.socket) -> Child:
  """The test's harness (trusted code, unsandboxed), holding the other end of ``sock``."""
  test_fd = _write(run.path("test.py"), test)
  try:
    with open(run.path("harness_stderr"), "wb") as err:
      return Child.start([levels.interpreter().executable, "-I", "-S", "-B", "-c",
                          script("harness"), str(sock.fileno())],
                         cwd=run.meta, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                         stdin=test_fd, stdout=subprocess.DEVNULL, stderr=err,
                         close_fds=True, pass_fds=(sock.fileno(),))
  finally:
    os.close(test_fd)


def _wait_for_verdict(box: Child, tester: Child | None, deadline: float) -> bool:
  """Wait for the one who decides (the harness of a split run, else the
  program) until ``deadline``; whether it timed out. After a split run's
  verdict the program, which then sees EOF, gets a moment to end by itself."""
  timed_out = not (tester if tester is not None else box).wait(deadline)
  if tester is not None:
    if timed_out:
      tester.kill()
    tester.wait(time.monotonic() + _GRACE_S)
    if not timed_out:
      box.wait(time.monotonic() + _GRACE_S)
  return timed_out


def _result(level, config, run: Run, box: Child, tester, status: str,
            duration: float) -> ExecResult:
  tail = _tail(run.path("stderr"), config.stderr_tail_chars)
  if tester is not None:
    tail = _keep_tail(tail + _tail(run.path("harness_stderr"), config.stderr_tail_chars),
                      config.stderr_tail_chars)
  elif status == "error" and box.returncode == 0:
    tail = _keep_tail(tail + "\nsandbox: the program exited before its end",
                      config.stderr_tail_chars)
  sig = _signal_of(level, box.returncode)
  return ExecResult(status=status, returncode=-sig if sig else box.returncode,
                    stderr_tail=tail, duration_s=duration, isolation=level.name)


def _read_available(sock: socket.socket, limit: int = 1 << 16) -> bytes:
  sock.setblocking(False)
  data = b""
  try:
    while len(data) < limit:
      chunk = sock.recv(limit)
      if not chunk:
        break
      data += chunk
  except BlockingIOError:
    pass
  return data


def _verdict(level, config, box: Child, tester: Child | None, timed_out: bool,
             ended: bytes, duration_s: float) -> str:
  if timed_out:
    return "timeout"
  if tester is not None:
    rc = tester.returncode
    if rc == harness.PASS_RC:
      return "pass"
    if rc == harness.FAIL_RC:
      return "fail"
    if rc == harness.GONE_RC and box.returncode is not None and cpu_timeout(
        level, box, config, duration_s):
      return "timeout"
    return "error"
  if cpu_timeout(level, box, config, duration_s):
    return "timeout"
  if box.returncode == 0 and ended == _END_LINE:
    return "pass"
  if box.returncode == guard.FAIL_RC:
    return "fail"
  return "error"
