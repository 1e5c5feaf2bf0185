"""First code of every sandboxed interpreter: limits, audit hook, then the program.

Run as ``python -I -S -B -c CODEC_SOURCE + GUARD_SOURCE MODE SOCK_FD WORKDIR
AS_BYTES CPU_S FSIZE_BYTES NPROC NOFILE HOOK`` (the runner builds this line;
the ``from ... import`` below is dropped there). The program's source arrives
on stdin (a read-only file descriptor), which is then replaced by
``/dev/null``; nothing secret is in argv, the environment or any descriptor.

``MODE``:

* ``run``: execute the program as ``__main__``; exit 0 after writing
  ``{"op": "end"}`` to ``SOCK_FD``, 3 on ``AssertionError``, 4 on any other
  exception (``SystemExit`` included, so an early exit never ends well).
  The program shares this process, so it could write the same line itself:
  the verdict of this mode is only as good as the program's honesty.
* ``serve``: execute the program, report ``{"op": "loaded"}``, then answer the
  harness's requests on ``SOCK_FD`` (``describe`` names, ``call`` a function)
  until EOF. The verdict is made by the harness, in another process.
"""

import os
import resource
import sys
import traceback
import types

from specjax.data.sandbox.codec import LineReader, WireError, decode, encode, send  # noqa: F401

FAIL_RC, ERROR_RC = 3, 4
_DENIED_IMPORTS = ("ctypes", "_ctypes", "_posixsubprocess", "_xxsubinterpreters",
                   "_xxinterpchannels", "_testcapi", "_testinternalcapi")


def set_limits(as_bytes: int, cpu_s: int, fsize: int, nproc: int, nofile: int) -> None:
  """rlimits: address space, CPU (SIGXCPU at ``cpu_s``, SIGKILL a second later),
  file size, processes+threads of the uid, open files, no core dumps."""
  for lim, soft, hard in ((resource.RLIMIT_AS, as_bytes, as_bytes),
                          (resource.RLIMIT_CPU, cpu_s, cpu_s + 1),
                          (resource.RLIMIT_FSIZE, fsize, fsize),
                          (resource.RLIMIT_NPROC, nproc, nproc),
                          (resource.RLIMIT_NOFILE, nofile, nofile),
                          (resource.RLIMIT_CORE, 0, 0)):
    try:
      resource.setrlimit(lim, (soft, hard))
    except (ValueError, OSError):  # hard limit already lower: keep it
      resource.setrlimit(lim, (min(soft, resource.getrlimit(lim)[1]), resource.getrlimit(lim)[1]))


def prefer_for_oom_killer() -> None:
  """Make this process (and what it starts) the kernel OOM killer's first choice."""
  try:
    with open("/proc/self/oom_score_adj", "w") as f:
      f.write("1000")
  except OSError:
    pass


def install_audit_hook(work: str) -> None:
  """PEP 578 hook refusing writes outside ``work``, process creation, signals,
  sockets and native-code modules. In-process, hence bypassable: a second
  layer under the namespaces, and the only one at isolation level 'guard'."""
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
                 "os.fork", "os.forkpty", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
                 "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
                 "socket.gethostbyname", "socket.sendto", "socket.sendmsg", "os.startfile",
                 "winreg.", "ctypes.", "sqlite3.connect", "os.mknod", "os.mkfifo",
                 "cpython._PySys_ClearAuditHooks", "cpython.run_")
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
        if args[0] in _DENIED_IMPORTS:
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


def read_program() -> str:
  """The program's source from stdin; stdin becomes ``/dev/null``."""
  chunks = []
  while chunk := os.read(0, 1 << 16):
    chunks.append(chunk)
  null = os.open(os.devnull, os.O_RDONLY)
  os.dup2(null, 0)
  os.close(null)
  return b"".join(chunks).decode("utf-8")


def load(source: str) -> types.ModuleType:
  """Execute ``source`` as a fresh ``__main__`` module (``program.py``)."""
  module = types.ModuleType("__main__")
  module.__file__ = "program.py"
  sys.modules["__main__"] = module
  exec(compile(source, "program.py", "exec"), module.__dict__)
  return module


def _flush() -> None:
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except Exception:  # a program may have replaced or closed them
      pass


def _die(rc: int) -> None:
  traceback.print_exc()
  _flush()
  os._exit(rc)


def run_mode(source: str, sock: int) -> None:
  """Mode ``run``: the program (with its checks) in this process."""
  try:
    load(source)
  except AssertionError:
    _die(FAIL_RC)
  except BaseException:
    _die(ERROR_RC)
  _flush()
  send(sock, {"op": "end"})
  os._exit(0)


def describe(module: types.ModuleType, name) -> list:
  """What the harness may bind to ``name``: a module, a callable, plain data."""
  missing = object()
  value = module.__dict__.get(name, missing) if type(name) is str else missing
  if value is missing:
    return ["missing"]
  if type(value) is types.ModuleType:
    return ["module", str(getattr(value, "__name__", ""))]
  if callable(value):
    return ["callable"]
  try:
    return ["value", encode(value)]
  except (WireError, RecursionError):
    return ["value", ["?", type(value).__qualname__]]


def call(module: types.ModuleType, request: dict) -> dict:
  """Run one ``call`` request; the reply carries the value or the exception."""
  try:
    fn = module.__dict__[request["name"]]
    args = [decode(a) for a in request["args"]]
    kwargs = {k: decode(v) for k, v in request["kwargs"]}
  except (KeyError, TypeError, ValueError) as e:
    return {"op": "raise", "module": "builtins", "type": "NameError", "message": repr(e)[:500]}
  try:
    value = fn(*args, **kwargs)
  except BaseException as e:
    traceback.print_exc()
    try:
      message = str(e)[:2000]
    except BaseException:
      message = "<unprintable>"
    return {"op": "raise", "module": str(type(e).__module__), "type": type(e).__name__,
            "message": message}
  try:
    return {"op": "return", "value": encode(value)}
  except (WireError, RecursionError):
    return {"op": "return", "value": ["?", type(value).__qualname__]}


def serve_mode(source: str, sock: int) -> None:
  """Mode ``serve``: load the program, then answer the harness until EOF."""
  try:
    module = load(source)
  except AssertionError:
    traceback.print_exc()
    send(sock, {"op": "loaded", "error": "AssertionError"})
    _die_quiet(FAIL_RC)
  except BaseException as e:
    traceback.print_exc()
    send(sock, {"op": "loaded", "error": type(e).__name__})
    _die_quiet(ERROR_RC)
  send(sock, {"op": "loaded"})
  reader = LineReader(sock)
  while True:
    request = reader.read()
    if request is None:
      _die_quiet(0)
    op = request.get("op")
    if op == "describe":
      send(sock, {"op": "names", "kinds": [describe(module, n) for n in request["names"]]})
    elif op == "call":
      reply = call(module, request)
      _flush()
      send(sock, reply)
    else:
      _die_quiet(ERROR_RC)


def _die_quiet(rc: int) -> None:
  _flush()
  os._exit(rc)


def main(argv: list) -> None:
  mode, sock, work = argv[0], int(argv[1]), argv[2]
  as_bytes, cpu_s, fsize, nproc, nofile, hook = (int(x) for x in argv[3:9])
  os.chdir(work)
  source = read_program()
  prefer_for_oom_killer()
  set_limits(as_bytes, cpu_s, fsize, nproc, nofile)
  if hook:
    install_audit_hook(work)
  sys.argv = ["program.py"]
  (run_mode if mode == "run" else serve_mode)(source, sock)


if __name__ == "__main__":
  main(sys.argv[1:])
