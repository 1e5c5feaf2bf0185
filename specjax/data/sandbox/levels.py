"""Isolation levels and the command lines that put a program behind them.

``bwrap`` (bubblewrap) and ``unshare`` (util-linux) build the same picture
with Linux namespaces; ``guard`` is the in-process audit hook alone. What
each level guarantees is in the package docstring; this module only builds
command lines, probes which levels work on this machine (once per process)
and hands out the per-run host uids used when the caller is root.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile

LEVELS = ("bwrap", "unshare", "guard")
SANDBOX_UID = 1000  # the program's uid inside its own user namespace
RUN_UID_FIRST, RUN_UID_COUNT = 1_900_000_000, 4096  # host uids of runs started by root
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_SETPRIV_DROP = ("--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all")


@dataclasses.dataclass(frozen=True)
class Level:
  """One way of isolating a program.

  Attributes:
    name: 'bwrap', 'unshare' or 'guard'.
    variant: how the level is built here: 'root+userns' (root caller: own
      namespaces, then an unprivileged host uid for the run, then a user
      namespace in which the program is uid 1000), 'root' (the same without
      the inner user namespace: this host refuses unprivileged ones, so the
      program cannot create one either), 'user' (non-root caller: user
      namespace, program uid 1000) or 'in-process'.
    description: one line for people.
  """

  name: str
  variant: str
  description: str

  @property
  def run_uid(self) -> bool:
    """Whether each run gets its own unprivileged host uid."""
    return self.variant.startswith("root")


@dataclasses.dataclass(frozen=True)
class Interpreter:
  """The interpreter every program runs on and the directories it needs."""

  executable: str
  mounts: tuple


@functools.lru_cache(maxsize=1)
def interpreter() -> Interpreter:
  """This Python's real binary and its installation directories (real paths)."""
  exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
  dirs = {os.path.realpath(d) for d in (sys.base_prefix, sys.base_exec_prefix,
                                         os.path.dirname(os.path.dirname(exe)))}
  covered = [d for d in ("/usr",) + _SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
  mounts = sorted(d for d in dirs if not any(_under(d, c) for c in covered))
  mounts = [m for m in mounts if not any(m != o and _under(m, o) for o in mounts)]
  return Interpreter(executable=exe, mounts=tuple(mounts))


def _under(path: str, top: str) -> bool:
  return path == top or path.startswith(top.rstrip("/") + "/")


def _system_binds() -> list:
  """bwrap arguments: /usr read-only; /bin, /lib... as the same symlinks or binds."""
  args = ["--ro-bind", "/usr", "/usr"]
  for d in _SYSTEM_DIRS:
    if os.path.islink(d):
      args += ["--symlink", os.readlink(d), d]
    elif os.path.isdir(d):
      args += ["--ro-bind", d, d]
  if os.path.isfile("/etc/ld.so.cache"):
    args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
  return args


def _interpreter_binds(interp: Interpreter) -> list:
  """bwrap arguments: the interpreter's directories read-only at their own
  paths, under parents created traversable (mode 0755) whatever the host's."""
  args, made = [], set()
  for m in interp.mounts:
    parts = m.strip("/").split("/")
    for i in range(1, len(parts)):
      parent = "/" + "/".join(parts[:i])
      if parent not in made:
        args += ["--perms", "0755", "--dir", parent]
        made.add(parent)
    args += ["--ro-bind", m, m]
  return args


def _tool(name: str) -> str | None:
  path = shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")
  return os.path.realpath(path) if path else None


def bwrap_argv(level: Level, disk_bytes: int, run_uid: int | None, info_fd: int) -> list:
  """The command prefix of level 'bwrap' (the interpreter's argv follows)."""
  bwrap = _tool("bwrap")
  namespaces = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--hostname", "sandbox"]
  userns = ["--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID),
            "--gid", str(SANDBOX_UID)]
  common = ["--die-with-parent", "--new-session", "--info-fd", str(info_fd),
            *_system_binds(), *_interpreter_binds(interpreter()),
            "--proc", "/proc", "--dev", "/dev",
            "--size", str(disk_bytes), "--perms", "1777", "--tmpfs", "/tmp", "--chdir", "/tmp"]
  if level.variant == "user":
    return [bwrap, *userns, *namespaces, *common, "--"]
  drop = [_tool("setpriv"), "--reuid", str(run_uid), "--regid", str(run_uid), *_SETPRIV_DROP,
          "--"]
  outer = [bwrap, *namespaces, *common, "--", *drop]
  if level.variant == "root":
    return outer
  inner = [bwrap, *userns, "--die-with-parent", "--ro-bind", "/", "/", "--bind", "/tmp", "/tmp",
           "--bind", "/proc", "/proc", "--dev-bind", "/dev", "/dev", "--chdir", "/tmp", "--"]
  return outer + inner


def unshare_argv(disk_bytes: int, run_uid: int, command: list) -> list:
  """Level 'unshare' (root only): new pid/mount/net/ipc/uts namespaces; a shell
  (pid 1) builds a minimal read-only root on a tmpfs, then runs ``command``
  chrooted into it as ``run_uid`` with no capabilities (as pid 2: the kernel
  would not deliver SIGXCPU to a pid 1)."""
  interp, q = interpreter(), shlex.quote
  lines = ["set -eu", "R=/tmp", "mount -t tmpfs -o mode=0755,nosuid,nodev specjax-root \"$R\"",
           "cd \"$R\"", "mkdir -p usr proc dev tmp etc",
           "mount --bind -o ro,nosuid,nodev /usr usr"]
  for d in _SYSTEM_DIRS:
    if os.path.islink(d):
      lines.append(f"ln -s {q(os.readlink(d))} .{q(d)}")
    elif os.path.isdir(d):
      lines.append(f"mkdir -p .{q(d)} && mount --bind -o ro,nosuid,nodev {q(d)} .{q(d)}")
  if os.path.isfile("/etc/ld.so.cache"):
    lines.append("touch etc/ld.so.cache && "
                 "mount --bind -o ro,nosuid,nodev /etc/ld.so.cache etc/ld.so.cache")
  for m in interp.mounts:
    lines.append(f"mkdir -p .{q(m)} && mount --bind -o ro,nosuid,nodev {q(m)} .{q(m)}")
  for dev in _DEVICES:
    lines.append(f"touch dev/{dev} && mount --bind /dev/{dev} dev/{dev}")
  lines += ["ln -s /proc/self/fd dev/fd", "mount -t proc -o nosuid,nodev,noexec proc proc",
            f"mount -t tmpfs -o size={int(disk_bytes)},mode=1777,nosuid,nodev specjax-tmp tmp",
            "mount -o remount,ro \"$R\"", "cd /", "echo 1000 > /proc/self/oom_score_adj",
            " ".join(q(a) for a in [_tool("chroot"), "/tmp", _tool("setpriv"), "--reuid",
                                    str(run_uid), "--regid", str(run_uid), *_SETPRIV_DROP,
                                    "--", *command]) + " && rc=0 || rc=$?",
            "exit $rc"]
  return [_tool("unshare"), "--pid", "--fork", "--kill-child", "--mount", "--net", "--ipc",
          "--uts", "--propagation", "private", "--", "/bin/sh", "-c", "\n".join(lines)]


# ---------------------------------------------------------------- which levels work here

def _probe_command(level: Level, uid: int) -> list:
  code = ("import os; open('/tmp/probe', 'w').write('x'); "
          "print('ok' if os.getuid() != 0 and os.listdir('/tmp') == ['probe'] else 'bad')")
  command = [interpreter().executable, "-I", "-S", "-c", code]
  if level.name == "bwrap":
    return bwrap_argv(level, 1 << 20, uid, 2) + command
  return unshare_argv(1 << 20, uid, command)


def _probe(level: Level) -> str:
  """'' when ``level`` runs a trivial program as it should here, else why not."""
  try:
    with run_uid() as uid:
      argv = _probe_command(level, uid)
      if None in argv:
        return "a tool is not installed"
      r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=30, env={"PATH": "/usr/bin:/bin"})
  except (OSError, subprocess.SubprocessError, RuntimeError) as e:
    return str(e)
  if r.returncode == 0 and r.stdout.strip() == "ok":
    return ""
  return (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}")[-300:]


_DESCRIPTIONS = {
    ("bwrap", "root+userns"): "bubblewrap: own pid/mount/net/ipc/uts namespaces, an unprivileged "
                              "host uid per run, a user namespace (program uid 1000, no "
                              "capabilities, no further user namespaces), read-only system "
                              "paths, a private size-capped /tmp",
    ("bwrap", "root"): "bubblewrap: own pid/mount/net/ipc/uts namespaces, an unprivileged host "
                       "uid per run (no capabilities; this host refuses unprivileged user "
                       "namespaces), read-only system paths, a private size-capped /tmp",
    ("bwrap", "user"): "bubblewrap: own user/pid/mount/net/ipc/uts namespaces (program uid "
                       "1000, no capabilities, no further user namespaces), read-only system "
                       "paths, a private size-capped /tmp",
    ("unshare", "root"): "util-linux unshare + setpriv: own pid/mount/net/ipc/uts namespaces, a "
                         "chroot into a minimal read-only root, an unprivileged host uid per "
                         "run (no capabilities), a private size-capped /tmp",
    ("guard", "in-process"): "WEAK: in-process audit hook and rlimits only (bypassable by code "
                             "written to escape; runs as the caller's user)",
}


def level(name: str, variant: str) -> Level:
  return Level(name=name, variant=variant, description=_DESCRIPTIONS[(name, variant)])


@functools.lru_cache(maxsize=None)
def probe_levels() -> dict:
  """``{name: Level or the reason it is unavailable}`` for 'bwrap' and 'unshare'."""
  root = os.geteuid() == 0
  found: dict = {}
  bwrap_variants = ("root+userns", "root") if root else ("user",)
  reasons = []
  if _tool("bwrap") is None:
    reasons.append("bubblewrap is not installed (apt-get install bubblewrap)")
  else:
    for variant in bwrap_variants:
      why = _probe(level("bwrap", variant))
      if not why:
        found["bwrap"] = level("bwrap", variant)
        break
      reasons.append(f"{variant}: {why}")
  if "bwrap" not in found:
    found["bwrap"] = "; ".join(reasons)
  if not root:
    found["unshare"] = "level 'unshare' needs root (use bubblewrap as a normal user)"
  elif _tool("unshare") is None or _tool("setpriv") is None or _tool("chroot") is None:
    found["unshare"] = "unshare, setpriv or chroot is not installed (util-linux, coreutils)"
  else:
    why = _probe(level("unshare", "root"))
    found["unshare"] = why or level("unshare", "root")
  return found


# ---------------------------------------------------------------- per-run host uids

def alive(pid: int) -> bool:
  """Whether ``pid`` exists and is not a zombie (a zombie has ended; only its
  exit status waits to be collected)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
  except (OSError, IndexError):
    return False


def processes_of_uid(uid: int) -> list:
  """Live pids whose real, effective, saved or filesystem uid is ``uid``."""
  found, me = [], str(uid)
  for pid in os.listdir("/proc"):
    if not pid.isdigit():
      continue
    try:
      with open(f"/proc/{pid}/status") as f:
        for line in f:
          if line.startswith("Uid:"):
            if me in line.split()[1:] and alive(int(pid)):
              found.append(int(pid))
            break
    except OSError:
      continue
  return found


@contextlib.contextmanager
def run_uid():
  """A host uid no other run (in any process on this machine) holds, and no
  process has: an flock per uid under the temp dir, held for the run."""
  locks = os.path.join(tempfile.gettempdir(), "specjax-sandbox-uids")
  os.makedirs(locks, mode=0o700, exist_ok=True)
  start = random.randrange(RUN_UID_COUNT)
  for i in range(RUN_UID_COUNT):
    uid = RUN_UID_FIRST + (start + i) % RUN_UID_COUNT
    fd = os.open(os.path.join(locks, str(uid)), os.O_CREAT | os.O_RDWR, 0o600)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      os.close(fd)
      continue
    try:
      if processes_of_uid(uid):
        continue
      yield uid
      return
    finally:
      os.close(fd)  # releases the lock
  raise RuntimeError(f"all {RUN_UID_COUNT} sandbox uids from {RUN_UID_FIRST} are in use")
