"""The sandbox as an isolation boundary: attack programs, one class at a time.

Each attack runs at the namespace levels ('bwrap', 'unshare'; a level this
machine cannot provide is skipped, saying why) with the audit hook *off*, so
what stops it is the OS boundary alone. Every test asserts the verdict, that
nothing outside the sandbox changed (a canary dir on the host, read-only
system paths, a canary process, listening sockets) and that no process of
the run is left (the runner's own check, ``cleanup_error == ''``, and a scan
of the host's processes for the attack's unique token). The residual risks
the package docstring documents are shown by tests named ``test_residual_*``.
"""

import fcntl
import json
import os
import secrets
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time

import pytest

from specjax.data import sandbox
from specjax.data.sandbox import levels

OS_LEVELS = ("bwrap", "unshare")
ADD_TEST = ("def check(candidate):\n"
            "    assert candidate(2, 3) == 5\n"
            "    assert candidate(-1, 1) == 0\n"
            "    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9\n"
            "check(add)\n")
WRONG_ADD = "def add(a, b):\n    return a - b\n"
PY = levels.interpreter().executable  # the interpreter as the sandbox sees it
PREFIX = os.path.dirname(os.path.dirname(PY))
FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x40086602, 0x10


def _level_or_skip(name):
  found = sandbox.probe_levels()[name]
  if isinstance(found, str):
    pytest.skip(f"isolation level {name!r} is not available on this machine: {found}")
  return found


@pytest.fixture(params=OS_LEVELS)
def level(request):
  _level_or_skip(request.param)
  return request.param


@pytest.fixture(params=["bwrap", pytest.param("unshare", marks=pytest.mark.slow)])
def heavy_level(request):
  """Levels for the tests that burn CPU seconds: 'unshare' in the slow suite."""
  _level_or_skip(request.param)
  return request.param


def _run_all(host, attacks, cfg, expected):
  """Run every attack (two at a time); each must end ``expected`` and leave
  the host alone."""
  names = sorted(attacks)
  results = sandbox.run_programs([host.fmt(attacks[n]) for n in names], cfg, workers=2)
  wrong = {n: r for n, r in zip(names, results) if r.status != expected}
  assert not wrong, wrong
  for r in results:
    host.check(r)


def _cfg(level, **kw):
  kw.setdefault("timeout_s", 8.0)
  return sandbox.SandboxConfig(isolation=level, audit_hook=False, **kw)


def _tree(root):
  """Every path under ``root`` with its size, mode and mtime."""
  out = {}
  for d, dirs, files in os.walk(root):
    for name in dirs + files:
      p = os.path.join(d, name)
      st = os.lstat(p)
      out[os.path.relpath(p, root)] = (st.st_size, st.st_mode, st.st_mtime_ns)
  return out


def _processes_with(token):
  found = []
  for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
      try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
          if token.encode() in f.read():
            found.append(int(pid))
      except OSError:
        pass
  return found


@pytest.fixture
def host(tmp_path):
  """A canary dir (with a file) and a canary process on the host, and a
  check that the run left them, and the read-only system paths, alone."""
  canary = tmp_path / "canary"
  canary.mkdir()
  (canary / "keep.txt").write_text("keep")
  proc = subprocess.Popen(["sleep", "120"])
  token = "specjax_attack_" + secrets.token_hex(6)

  class Host:
    dir, pid = str(canary), proc.pid

    def __init__(self):
      self.token, self.before = token, _tree(canary)

    def fmt(self, src):
      return src.format(C=self.dir, PID=self.pid, TOKEN=self.token, PY=PY)

    def check(self, result):
      assert result.cleanup_error == "", result
      assert _tree(canary) == self.before
      assert (canary / "keep.txt").read_text() == "keep"
      assert proc.poll() is None, "the canary process was killed"
      assert not _processes_with(self.token), "a process of the run survived"
      for probe in ("/usr/" + self.token, os.path.join(PREFIX, self.token),
                    os.path.join("/tmp", self.token)):
        assert not os.path.exists(probe), probe

  yield Host()
  proc.kill()
  proc.wait()


# ---------------------------------------------------------------- files outside the work dir

FILE_ATTACKS = {
    "open": "open('{C}/new.txt', 'w').write('x')",
    "append": "open('{C}/keep.txt', 'a').write('x')",
    "str_subclass": "class P(str): pass\nopen(P('{C}/new.txt'), 'w').write('x')",
    "dir_fd_host": "import os\nd = os.open('{C}', os.O_RDONLY)\n"
                   "os.open('new.txt', os.O_WRONLY | os.O_CREAT, dir_fd=d)",
    "dir_fd_usr": "import os\nd = os.open('/usr', os.O_RDONLY)\n"
                  "os.open('{TOKEN}', os.O_WRONLY | os.O_CREAT, dir_fd=d)",
    "write_usr": "open('/usr/{TOKEN}', 'w').write('x')",
    "write_interpreter": "import sys\nopen(sys.prefix + '/{TOKEN}', 'w').write('x')",
    "symlink_out": "import os\nos.symlink('{C}/keep.txt', 'l')\nopen('l', 'a').write('x')",
    "hardlink_in": "import os\nos.link('/usr/bin/env', 'env')",
    "remove": "import os\nos.remove('{C}/keep.txt')",
    "rename": "import os\nos.rename('{C}/keep.txt', 'stolen')",
    "chmod_by_fd": "import os\nfd = os.open('/usr/bin/env', os.O_RDONLY)\nos.fchmod(fd, 0o777)",
    "mknod_device": "import os, stat\nos.mknod('mem', 0o600 | stat.S_IFCHR, os.makedev(1, 1))\n"
                    "open('mem', 'rb').read(1)",
    "sqlite": "import sqlite3\nsqlite3.connect('/usr/{TOKEN}.db').execute('create table t(x)')",
    "proc_root": "open('/proc/1/root{C}/new.txt', 'w').write('x')",
    "host_tmp": "open('/tmp/../tmp/{TOKEN}', 'w').write('x')\nimport os\n"
                "assert os.listdir('/tmp') == ['{TOKEN}']\nos.remove('/tmp/{TOKEN}')\n"
                "open('/nonexistent/{TOKEN}', 'w')",
    "dev_shm": "open('/dev/shm/{TOKEN}', 'w').write('x')",
    "immutable_flag": "import fcntl, os, struct\nfd = os.open('f', os.O_CREAT | os.O_RDONLY)\n"
                      f"fcntl.ioctl(fd, {FS_IOC_SETFLAGS:#x}, struct.pack('l', {FS_IMMUTABLE_FL:#x}))",
    "subinterpreter": "import _xxsubinterpreters as sub\n"
                      "sub.run_string(sub.create(), \"open('/usr/{TOKEN}', 'w')\")",
    "remount": "import os\nos.system('mount -o remount,rw /usr')\n"
               "open('/usr/{TOKEN}', 'w').write('x')",
}


def test_file_writes_outside_the_work_dir_fail(level, host):
  _run_all(host, FILE_ATTACKS, _cfg(level), "error")


def test_the_work_dir_is_private_empty_and_size_capped(level, host):
  src = ("import os, tempfile\nassert os.getcwd() == '/tmp' and os.listdir('/tmp') == []\n"
         "assert os.getuid() != 0 and os.environ['HOME'] == os.environ['TMPDIR'] == '/tmp'\n"
         "with tempfile.NamedTemporaryFile('w') as f:\n  f.write('x')\n"
         "os.mkdir('d')\nopen('d/a', 'w').write('1')\n")
  host.check(sandbox.run_program(src, _cfg(level)))
  assert sandbox.run_program(src, _cfg(level)).passed  # fresh every time
  # total disk cap: many files, each under the file-size limit, fill the tmpfs
  fill = "i = 0\nwhile True:\n  open('f' + str(i), 'wb').write(b'x' * (1 << 20))\n  i += 1"
  r = sandbox.run_program(fill, _cfg(level, disk_mb=8))
  assert r.status == "error" and "No space left on device" in r.stderr_tail, r
  host.check(r)


# ---------------------------------------------------------------- processes

SPAWN_ATTACKS = {
    "popen_new_session": "import subprocess\nsubprocess.Popen(['{PY}', '-c', "
                         "'import time; time.sleep(60)', '{TOKEN}'], start_new_session=True)",
    "double_fork_setsid": "import os, time\nif os.fork() == 0:\n  os.setsid()\n"
                          "  if os.fork() == 0:\n    os.execv('{PY}', ['{PY}', '-c', "
                          "'import time; time.sleep(60)', '{TOKEN}'])\n  os._exit(0)\n"
                          "time.sleep(0.3)",
    "posix_spawn": "import os\nos.posix_spawn('{PY}', ['{PY}', '-c', "
                   "'import time; time.sleep(60)', '{TOKEN}'], {{}})",
    "shell_background": "import os\nos.system(\"nohup '{PY}' -c 'import time; time.sleep(60)' "
                        "{TOKEN} >/dev/null 2>&1 &\")",
    "ignores_sigterm": "import os, signal\nif os.fork() == 0:\n  os.setsid()\n"
                       "  os.execv('{PY}', ['{PY}', '-c', 'import signal, time; "
                       "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)', "
                       "'{TOKEN}'])\n",
}


def test_no_process_outlives_its_run(level, host):
  """Each program ends normally (a pass), having started a process meant to
  outlive it; it is gone when the run ends, and the runner checked."""
  _run_all(host, SPAWN_ATTACKS, _cfg(level), "pass")


def test_a_timed_out_run_takes_its_processes_with_it(heavy_level, host):
  level = heavy_level
  src = host.fmt(SPAWN_ATTACKS["double_fork_setsid"]) + "\nwhile True:\n  pass"
  t0 = time.monotonic()
  r = sandbox.run_program(src, _cfg(level, timeout_s=1.0))
  assert r.status == "timeout" and time.monotonic() - t0 < 8, r
  host.check(r)


def test_fork_bomb_is_contained(heavy_level, host):
  level = heavy_level
  t0 = time.monotonic()
  r = sandbox.run_program("import os\nwhile True:\n  os.fork()", _cfg(level, nproc=32))
  assert r.status in ("error", "timeout") and time.monotonic() - t0 < 15, r
  host.check(r)


@pytest.mark.parametrize("workers", [1, 2])
def test_one_sample_cannot_change_the_verdict_of_later_ones(workers, host):
  """A sample leaves a process that tries, for 3 s, to rewrite every other
  sample's program and test it can find; the later wrong samples still fail
  (split runs and single-process runs)."""
  _level_or_skip("bwrap")
  tamper = host.fmt(
      "import os, glob, time\n"
      "if os.fork() == 0:\n"
      "  os.setsid()\n"
      "  end = time.time() + 3\n"
      "  while time.time() < end:\n"
      "    for p in glob.glob('/tmp/**/*.py', recursive=True) + glob.glob('/proc/*/cwd/*') + "
      "glob.glob('/proc/*/root/tmp/*'):\n"
      "      try:\n"
      "        open(p, 'w').write('def add(a, b):\\n    return a + b\\n')\n"
      "      except OSError:\n"
      "        pass\n"
      "  os._exit(0)\n"
      "def add(a, b):\n    return a + b\n")
  cfg = _cfg("bwrap")
  res = sandbox.run_programs([tamper] + [WRONG_ADD] * 4, cfg, workers=workers,
                             tests=[ADD_TEST] * 5)
  assert [r.status for r in res] == ["pass"] + ["fail"] * 4, res
  single = [tamper + ADD_TEST] + [WRONG_ADD + ADD_TEST] * 4
  res = sandbox.run_programs(single, cfg, workers=workers)
  assert [r.status for r in res] == ["pass"] + ["fail"] * 4, res
  for r in res:
    host.check(r)


# ---------------------------------------------------------------- signals

SIGNAL_ATTACKS = {
    "kill_host_pid": "import os, signal\nos.kill({PID}, signal.SIGKILL)",
    "pidfd_host_pid": "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open({PID}), 9)",
    "kill_everything": "import os, signal\nfor pid in range(1, 65536):\n"
                       "  if pid != os.getpid():\n    try:\n      os.kill(pid, signal.SIGKILL)\n"
                       "    except OSError:\n      pass\nos.kill(-1, signal.SIGKILL)\n"
                       "raise SystemExit('still here')",
    "kill_parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
                   "import time\ntime.sleep(2)",
}


def test_signals_reach_no_process_outside(level, host):
  _run_all(host, SIGNAL_ATTACKS, _cfg(level), "error")


def test_no_process_or_environment_of_the_host_is_visible(level, host, monkeypatch):
  secret = "specjax_secret_" + secrets.token_hex(6)
  monkeypatch.setenv("SPECJAX_CANARY", secret)
  src = ("import os, sys\nseen = []\n"
         "for pid in os.listdir('/proc'):\n  if pid.isdigit():\n"
         "    for what in ('environ', 'cmdline'):\n      try:\n"
         "        seen.append(open(f'/proc/{pid}/{what}', 'rb').read())\n"
         "      except OSError:\n        pass\n"
         "sys.stderr.write(repr(seen))\n"
         "assert len([p for p in os.listdir('/proc') if p.isdigit()]) <= 4\n")
  r = sandbox.run_program(src, _cfg(level, stderr_tail_chars=200_000))
  assert r.status == "pass" and secret not in r.stderr_tail and "SPECJAX" not in r.stderr_tail
  host.check(r)


NESTED_USERNS = ("import os\nif os.system('unshare --user --map-root-user true') != 0:\n"
                 "  raise PermissionError('no user namespace')\n")


def test_no_user_namespace_can_be_created_under_bwrap():
  level = _level_or_skip("bwrap")
  if level.variant == "root":
    pytest.skip("this host refuses unprivileged user namespaces to everyone")
  r = sandbox.run_program(NESTED_USERNS, _cfg("bwrap"))
  assert r.status == "error" and "no user namespace" in r.stderr_tail, r


def test_residual_unshare_level_allows_user_namespaces():
  """Residual (documented): at level 'unshare' the program is an unprivileged
  uid that may create user namespaces where the host allows them (more kernel
  surface; no power over the host's files or processes)."""
  _level_or_skip("unshare")
  r = sandbox.run_program(NESTED_USERNS, _cfg("unshare"))
  assert r.status in ("pass", "error"), r


# ---------------------------------------------------------------- sockets

@pytest.fixture
def listeners(tmp_path):
  """A TCP, a UDP, a path and an abstract UNIX listener on the host."""
  tcp = socket.socket()
  tcp.bind(("127.0.0.1", 0))
  tcp.listen()
  udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
  udp.bind(("127.0.0.1", 0))
  path = str(tmp_path / "s.sock")
  unix = socket.socket(socket.AF_UNIX)
  unix.bind(path)
  unix.listen()
  abstract_name = "\0specjax-" + secrets.token_hex(6)
  abstract = socket.socket(socket.AF_UNIX)
  abstract.bind(abstract_name)
  abstract.listen()
  socks = [tcp, udp, unix, abstract]
  for s in socks:
    s.setblocking(False)
  yield {"TCP": tcp.getsockname()[1], "UDP": udp.getsockname()[1], "UNIX": path,
         "ABSTRACT": abstract_name}, socks
  for s in socks:
    s.close()


SOCKET_ATTACKS = {
    "tcp_host_loopback": "import socket\nsocket.create_connection(('127.0.0.1', {TCP}), 2)",
    "tcp_internet": "import socket\nsocket.create_connection(('1.1.1.1', 80), 2)",
    "tcp6": "import socket\nsocket.create_connection(('::1', {TCP}), 2)",
    "udp": "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
           "s.sendto(b'x', ('127.0.0.1', {UDP}))\ns.sendto(b'x', ('1.1.1.1', 53))",
    "unix_path": "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({UNIX!r})",
    "unix_abstract": "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({ABSTRACT!r})",
    "packet": "import socket\nsocket.socket(socket.AF_PACKET, socket.SOCK_RAW)",
    "raw_icmp": "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)",
    "dns": "import socket\nsocket.getaddrinfo('pypi.org', 443)",
    "host_daemon_sockets": "import glob, socket\nfor p in glob.glob('/run/**', recursive=True) + "
                           "glob.glob('/var/run/**', recursive=True):\n"
                           "  s = socket.socket(socket.AF_UNIX)\n  s.connect(p)\n"
                           "raise SystemExit('no socket reachable')",
}


def test_sockets_of_every_family_reach_nothing(level, host, listeners):
  """Nothing connects or arrives at the host's listeners. (Under bwrap the
  sandbox's own loopback is up: a datagram to 127.0.0.1 stays inside.)"""
  ports, socks = listeners
  attacks = {name: src.format(**ports).replace("{", "{{").replace("}", "}}")
             for name, src in SOCKET_ATTACKS.items()}
  _run_all(host, attacks, _cfg(level, timeout_s=6.0), "error")
  for s in socks:
    with pytest.raises(BlockingIOError):
      s.accept() if s.type == socket.SOCK_STREAM else s.recvfrom(10)


# ---------------------------------------------------------------- verdicts

FORGERIES = {
    "always_equal": "class E:\n  __eq__ = lambda s, o: True\n  __sub__ = lambda s, o: 0\n"
                    "  __lt__ = lambda s, o: True\ndef add(a, b):\n  return E()\n",
    "int_subclass": "class I(int):\n  __eq__ = lambda s, o: True\ndef add(a, b):\n  return I(0)\n",
    "exit_in_call": "import os\ndef add(a, b):\n  os._exit(0)\n",
    "exit_at_load": "import os\ndef add(a, b):\n  return a - b\nos._exit(0)\n",
    "settrace": "import sys\ndef add(a, b):\n  return a - b\n"
                "def tracer(frame, event, arg):\n  if frame.f_code.co_name == 'check':\n"
                "    raise SystemExit(0)\n  return tracer\nsys.settrace(tracer)\n",
    "builtins": "import builtins\nbuiltins.abs = lambda x: 0\n"
                "builtins.AssertionError = type('X', (Exception,), {{}})\n"
                "def add(a, b):\n  return a - b\n",
    "fake_traceback": "import sys, types\nsys.modules['traceback'] = types.ModuleType('traceback')\n"
                      "def add(a, b):\n  return a - b\n",
    "write_end_to_every_socket": "import os, stat\nfor fd in range(3, 64):\n  try:\n"
                                 "    if stat.S_ISSOCK(os.fstat(fd).st_mode):\n"
                                 "      os.write(fd, b'{{\"op\":\"end\"}}\\n{{\"op\":\"loaded\"}}\\n')\n"
                                 "  except OSError:\n    pass\ndef add(a, b):\n  return a - b\n",
    "flood_the_channel": "import os, stat\nfor fd in range(3, 64):\n  try:\n"
                         "    if stat.S_ISSOCK(os.fstat(fd).st_mode):\n"
                         "      os.write(fd, b'x' * (8 << 20))\n  except OSError:\n    pass\n"
                         "def add(a, b):\n  return a - b\n",
    "kill_the_parent": "import os, signal\ndef add(a, b):\n"
                       "  os.kill(os.getppid(), signal.SIGKILL)\n  return a - b\n",
    "shadow_name_as_module": "import math as check\ndef add(a, b):\n  return a - b\n",
    "sys_exit_in_call": "import sys\ndef add(a, b):\n  sys.exit(0)\n",
}


def test_a_wrong_program_cannot_forge_a_split_verdict(host):
  """With the test in the harness, a wrong ``add`` never passes, whatever it
  does to its own process, its channel or its parent."""
  _level_or_skip("bwrap")
  names = sorted(FORGERIES)
  results = sandbox.run_programs([FORGERIES[n].format() for n in names],
                                 _cfg("bwrap", timeout_s=12.0), tests=[ADD_TEST] * len(names))
  forged = {n: r for n, r in zip(names, results) if r.status not in ("fail", "error")}
  assert not forged, forged
  for r in results:
    host.check(r)


def test_split_runs_cross_plain_data_exactly():
  _level_or_skip("bwrap")
  program = ("def echo(x):\n  return x\n"
             "def boom(x):\n  raise ValueError(f'bad {x}')\n"
             "def gen(n):\n  return (i for i in range(n))\n"
             "K = {'a': (1, 2.5, None), 'b': [b'x', {1, 2}, frozenset([3])]}\n")
  test = ("import math\n"
          "for v in [0, -7, 10 ** 5000, 1.5, float('inf'), 2 + 3j, 'é\\ud800', b'\\x00', True,\n"
          "          None, [1, [2, (3,)]], {'k': {4}}, frozenset({5})]:\n"
          "  r = echo(v)\n"
          "  assert r == v and type(r) is type(v), (r, v)\n"
          "assert math.isnan(echo(float('nan')))\n"
          "assert K == {'a': (1, 2.5, None), 'b': [b'x', {1, 2}, frozenset([3])]}\n"
          "try:\n  boom(3)\nexcept ValueError as e:\n  assert str(e) == 'bad 3'\n"
          "else:\n  raise AssertionError('no exception')\n"
          "assert repr(gen(2)) == '<unrepresentable generator>'\n"
          "try:\n  echo(lambda: 0)\nexcept TypeError as e:\n  assert 'cannot be sent' in str(e)\n")
  r = sandbox.run_program(program, _cfg("bwrap"), test=test)
  assert r.status == "pass", r.stderr_tail


def test_residual_single_process_runs_can_write_their_own_end_report(host):
  """Residual (documented): without ``test=``, the guard's end report travels
  on a socket the program holds; a program can write it and exit, skipping
  its failing checks. The same program in a split run does not pass."""
  _level_or_skip("bwrap")
  forge = ("import os, stat\nfor fd in range(3, 64):\n  try:\n"
           "    if stat.S_ISSOCK(os.fstat(fd).st_mode):\n"
           "      os.write(fd, b'{\"op\":\"end\"}\\n')\n  except OSError:\n    pass\n"
           "os._exit(0)\n")
  r = sandbox.run_program(WRONG_ADD + forge + ADD_TEST, _cfg("bwrap"))
  assert r.status == "pass", r
  assert not sandbox.run_program(WRONG_ADD + forge, _cfg("bwrap"), test=ADD_TEST).passed
  host.check(r)


def test_residual_single_process_runs_can_trace_away_their_checks():
  """Residual (documented): in a single-process run ``sys.settrace`` can make
  the check function jump over its failing asserts (HumanEval's checks end
  with ``assert True``); in a split run the check is out of reach."""
  _level_or_skip("bwrap")
  trace = ("import sys, dis\n"
           "def tracer(frame, event, arg):\n"
           "  if event == 'call' and frame.f_code.co_name == 'check':\n"
           "    last = max(line for _, line in dis.findlinestarts(frame.f_code) if line)\n"
           "    def skip(frame, event, arg):\n"
           "      if event == 'line' and frame.f_lineno < last:\n"
           "        frame.f_lineno = last\n"
           "      return skip\n"
           "    return skip\n"
           "  return None\n"
           "sys.settrace(tracer)\n")
  test = ADD_TEST.replace("check(add)\n", "    assert True\ncheck(add)\n")
  assert sandbox.run_program(WRONG_ADD + trace + test, _cfg("bwrap")).status == "pass"
  assert sandbox.run_program(WRONG_ADD + trace, _cfg("bwrap"), test=test).status == "fail"


def test_residual_single_process_runs_can_monkeypatch_what_checks_use():
  """Residual (documented): builtins (and modules) the checks use, and the
  guard's own globals, are the program's to change in a single-process run."""
  _level_or_skip("bwrap")
  patch_builtin = "import builtins\nbuiltins.abs = lambda x: 0\n"
  approx = ("def check(candidate):\n    assert abs(candidate(0.5, 0.25) - 0.75) < 1e-9\n"
            "check(add)\n")
  assert sandbox.run_program(WRONG_ADD + patch_builtin + approx, _cfg("bwrap")).passed
  assert not sandbox.run_program(WRONG_ADD + patch_builtin, _cfg("bwrap"), test=approx).passed
  patch_guard = ("import sys, os, stat\nguard = sys._getframe(1).f_globals\n"
                 "def ok(rc):\n  for fd in range(3, 64):\n    try:\n"
                 "      if stat.S_ISSOCK(os.fstat(fd).st_mode):\n"
                 "        guard['send'](fd, {'op': 'end'})\n    except OSError:\n      pass\n"
                 "  os._exit(0)\n"
                 "guard['_die'] = ok\n")
  program = WRONG_ADD + patch_guard + ADD_TEST
  assert sandbox.run_program(program, _cfg("bwrap")).passed
  # closed: the guard holds its own reference to traceback, so a fake module
  # in sys.modules changes nothing
  fake = ("import sys, types, os\nt = types.ModuleType('traceback')\n"
          "t.print_exc = lambda *a, **k: os._exit(0)\nsys.modules['traceback'] = t\n")
  assert sandbox.run_program(WRONG_ADD + fake + ADD_TEST, _cfg("bwrap")).status == "fail"


def test_residual_split_runs_trust_the_programs_own_helpers():
  """Residual (documented): names the test takes from the program -- the
  entry point, and prompt helpers such as HumanEval's ``poly`` -- are the
  program's; redefining a helper changes what the test checks."""
  _level_or_skip("bwrap")
  test = ("def check(candidate):\n    x = candidate([1, 2])\n"
          "    assert abs(poly([1, 2], x)) < 1e-6\ncheck(find_zero)\n")
  honest = "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n"
  wrong = "def find_zero(xs):\n    return 7.0\n"
  assert sandbox.run_program(honest + wrong, _cfg("bwrap"), test=test).status == "fail"
  lying = honest + wrong + "def poly(xs, x):\n    return 0.0\n"
  assert sandbox.run_program(lying, _cfg("bwrap"), test=test).status == "pass"


# ---------------------------------------------------------------- resources

def test_memfd_and_pipes_are_bounded(heavy_level, host):
  """memfd memory is outside RLIMIT_AS; each memfd is capped by RLIMIT_FSIZE
  and their number by RLIMIT_NOFILE, so the run stops (documented bound)."""
  cfg = _cfg(heavy_level, memory_mb=256, fsize_mb=8, nofile=32, timeout_s=20.0)
  big = "import os\nfd = os.memfd_create('m')\nos.ftruncate(fd, 1 << 30)"
  r = sandbox.run_program(big, cfg)
  assert r.status == "error" and "File too large" in r.stderr_tail, r
  many = ("import os\nfds = []\nwhile True:\n  fd = os.memfd_create('m')\n"
          "  for _ in range(8):\n    os.write(fd, b'x' * (1 << 20))\n  fds.append(fd)")
  r = sandbox.run_program(many, cfg)
  assert r.status == "error" and "Too many open files" in r.stderr_tail, r
  pipes = ("import fcntl, os\nkeep = []\nwhile True:\n  r, w = os.pipe()\n"
           "  fcntl.fcntl(w, 1031, 1 << 20)\n  os.set_blocking(w, False)\n"
           "  try:\n    os.write(w, b'x' * (1 << 20))\n  except BlockingIOError:\n    pass\n"
           "  keep.append((r, w))")
  r = sandbox.run_program(pipes, cfg)
  assert r.status == "error" and "Too many open files" in r.stderr_tail, r
  host.check(r)


def test_sixteen_threads_run_under_the_default_memory_limit(level):
  src = ("import threading\nout = []\ndef work(i):\n  b = bytearray(8 << 20)\n"
         "  out.append(sum(range(10000)) + len(b) * 0 + i)\n"
         "ts = [threading.Thread(target=work, args=(i,)) for i in range(16)]\n"
         "[t.start() for t in ts]\n[t.join() for t in ts]\nassert len(out) == 16\n")
  r = sandbox.run_program(src, _cfg(level))
  assert r.status == "pass", r


def test_cpu_limit_is_a_timeout_even_when_sigxcpu_is_ignored(heavy_level):
  level = heavy_level
  t0 = time.monotonic()
  src = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n  pass"
  r = sandbox.run_program(src, _cfg(level, cpu_s=1, timeout_s=40.0))
  assert r.status == "timeout" and r.returncode == -signal.SIGKILL, r
  assert time.monotonic() - t0 < 30
  r = sandbox.run_program("while True:\n  pass", _cfg(level, cpu_s=1, timeout_s=40.0))
  assert r.status == "timeout" and r.returncode == -signal.SIGXCPU, r


# ---------------------------------------------------------------- level 'guard' (weak)

def test_residual_guard_level_hook_is_bypassable_and_the_survivor_is_reported():
  """Residual (documented): at 'guard' a program can switch the audit hook
  off (here through ``gc``) and start a process; the runner finds it in the
  run's session afterwards, kills it and reports the run as an error."""
  token = "specjax_guard_" + secrets.token_hex(6)
  src = ("import gc, os\n"
         "for o in gc.get_objects():\n"
         "  if type(o) is list and o == [False]:\n    o[0] = True\n"
         f"if os.fork() == 0:\n  os.execv({PY!r}, [{PY!r}, '-c', "
         f"'import time; time.sleep(60)', {token!r}])\n")
  cfg = sandbox.SandboxConfig(timeout_s=5.0, isolation="guard")
  r = sandbox.run_program(src, cfg)
  assert r.status == "error" and "outlived the run" in r.cleanup_error, r
  time.sleep(0.2)
  assert not _processes_with(token)


def test_cleanup_failure_is_reported():
  """An immutable file left in the work dir (root at level 'guard': the hook
  does not cover ioctl) makes the cleanup fail; the run says so."""
  if os.geteuid() != 0:
    pytest.skip("setting the immutable flag needs root")
  src = ("import fcntl, os, struct\nfd = os.open('stuck', os.O_CREAT | os.O_RDONLY)\n"
         f"fcntl.ioctl(fd, {FS_IOC_SETFLAGS:#x}, struct.pack('l', {FS_IMMUTABLE_FL:#x}))\n")
  r = sandbox.run_program(src, sandbox.SandboxConfig(timeout_s=5.0, isolation="guard"))
  failed = [m.split(": [Errno")[0] for m in
            r.cleanup_error.replace("sandbox: cleanup failed: ", "").split("; ") if m]
  try:
    if r.status == "pass" and not r.cleanup_error:
      pytest.skip("the host's temp filesystem ignores the immutable flag")
    assert r.status == "error" and "cleanup failed" in r.cleanup_error, r
    assert "cleanup failed" in r.stderr_tail
  finally:
    for path in failed:
      stuck = path if path.endswith("/stuck") else os.path.join(path, "stuck")
      if os.path.exists(stuck):
        fd = os.open(stuck, os.O_RDONLY)
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("l", 0))
        os.close(fd)
        shutil.rmtree(os.path.dirname(stuck), ignore_errors=True)


def test_auto_refuses_to_fall_back_to_the_guard(monkeypatch):
  monkeypatch.setattr(sandbox.levels, "probe_levels",
                      lambda: {"bwrap": "not installed", "unshare": "not root"})
  with pytest.raises(RuntimeError, match=r"apt-get install bubblewrap.*isolation='guard'"):
    sandbox.run_program("pass")
  with pytest.raises(RuntimeError, match="isolation='bwrap' is not available here"):
    sandbox.run_programs(["pass"], sandbox.SandboxConfig(isolation="bwrap"))


NON_ROOT_SCRIPT = r'''
import json, os, sys
from specjax.data import sandbox
try:
  level = sandbox.isolation_level()
except RuntimeError as e:
  print(json.dumps({"level": ["none", str(e)]}))
  sys.exit(0)
cfg = sandbox.SandboxConfig(timeout_s=10.0, audit_hook=False)
runs = {
    "identity": sandbox.run_program(
        "import os\nassert os.getuid() == 1000 and os.listdir('/tmp') == []\n"
        "assert not os.path.exists(%(home)r)", cfg),
    "write_outside": sandbox.run_program("open(%(home)r + '/x', 'w')", cfg),
    "nested_userns": sandbox.run_program(
        "import os\nassert os.system('unshare --user --map-root-user true') != 0", cfg),
    "split_pass": sandbox.run_program("def add(a, b):\n  return a + b\n", cfg, test=%(test)r),
    "split_fail": sandbox.run_program("def add(a, b):\n  return a - b\n", cfg, test=%(test)r),
    "daemon": sandbox.run_program(%(daemon)r, cfg),
}
print(json.dumps({"level": [level.name, level.variant],
                  "runs": {k: [r.status, r.cleanup_error] for k, r in runs.items()}}))
'''


@pytest.mark.slow
def test_a_normal_user_gets_the_user_namespace_variant(tmp_path, host):
  """As a normal user (here: nobody, with the system's Python), level 'bwrap'
  is the plain user-namespace variant and isolates the same way."""
  python = "/usr/bin/python3"
  if os.geteuid() != 0 or not os.access(python, os.X_OK) or shutil.which("setpriv") is None:
    pytest.skip("needs root (to become nobody), setpriv and /usr/bin/python3")
  if subprocess.run([python, "-c", "import sys; sys.exit(sys.version_info < (3, 10))"]).returncode:
    pytest.skip(f"{python} is older than 3.10")
  if shutil.which("bwrap") is None:
    pytest.skip("bubblewrap is not installed")
  root = tempfile.mkdtemp(prefix="specjax_nonroot_")
  try:
    package = os.path.join(root, "specjax", "data", "sandbox")
    shutil.copytree(os.path.dirname(sandbox.__file__), package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for stub in ("specjax", "specjax/data"):
      open(os.path.join(root, stub, "__init__.py"), "w").close()
    home = os.path.join(root, "home")
    os.makedirs(home)
    for d, dirs, files in os.walk(root):
      os.chmod(d, 0o755)
      for f in files:
        os.chmod(os.path.join(d, f), 0o644)
    os.chmod(home, 0o777)
    script = NON_ROOT_SCRIPT % {"home": home, "test": ADD_TEST,
                                "daemon": host.fmt(SPAWN_ATTACKS["double_fork_setsid"]).replace(
                                    PY, python)}
    out = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                          python, "-c", script], cwd=root, capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": root,
                                           "HOME": home, "TMPDIR": home})
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    if report["level"][0] != "bwrap":
      pytest.skip(f"unprivileged user namespaces are refused here: {report}")
    assert report["level"] == ["bwrap", "user"]
    assert report["runs"] == {"identity": ["pass", ""], "write_outside": ["error", ""],
                              "nested_userns": ["pass", ""], "split_pass": ["pass", ""],
                              "split_fail": ["fail", ""], "daemon": ["pass", ""]}, report
    assert not os.path.exists(os.path.join(home, "x"))
    assert not _processes_with(host.token)
  finally:
    shutil.rmtree(root, ignore_errors=True)
