"""The test side of a split run: trusted test code, outside the program's reach.

Run (unsandboxed, as the caller's user) as ``python -I -S -B -c CODEC_SOURCE +
HARNESS_SOURCE SOCK_FD``; the test's source arrives on stdin. The program runs
in the sandbox, in another process, serving ``SOCK_FD``'s other end (see the
guard's ``serve`` mode). This process:

1. waits for the program's ``loaded`` message (a module-level
   ``AssertionError`` is a fail, any other exception an error);
2. compiles the test and asks the program about every global name the test
   uses that is neither a builtin nor defined by the test itself: a
   callable becomes a :class:`RemoteFunction` (a call sends the arguments
   as plain data and returns the result as plain data), plain data is copied,
   a standard-library module is imported here under its own name;
3. executes the test to its end.

Exit status (the verdict): 0 the test ran to its end, 3 it raised
``AssertionError``, 4 any other exception (the test's own or the program's,
re-raised as a builtin exception of the same name, else
:class:`RemoteError`), 5 the program is gone (died, was killed, closed its
end). The program can influence the verdict only through the values its
functions return: it cannot reach this process's memory, exit status, stdout
or stderr. Whatever the program returns is rebuilt here from plain data, so an
object whose ``__eq__`` always answers ``True`` never reaches the test.
"""

import builtins
import os
import sys
import types

from specjax.data.sandbox.codec import LineReader, WireError, decode, encode, send  # noqa: F401

PASS_RC, FAIL_RC, ERROR_RC, GONE_RC = 0, 3, 4, 5
_NEVER_IMPORT = ("antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo")


class RemoteError(Exception):
  """An exception raised by the program that has no builtin counterpart here."""


class ProgramGone(BaseException):
  """The program's end of the channel closed (BaseException: a test's
  ``except Exception`` must not swallow it)."""


class ProtocolError(BaseException):
  """The program sent something that is not a well-formed reply."""


class Channel:
  """Requests to the sandboxed program and its replies, strictly in turn."""

  def __init__(self, fd: int):
    self.fd, self.reader = fd, LineReader(fd)

  def receive(self) -> dict:
    try:
      message = self.reader.read()
    except WireError as e:
      raise ProtocolError(str(e)) from None
    if message is None:
      raise ProgramGone("the program's end of the channel closed")
    return message

  def request(self, message: dict) -> dict:
    try:
      send(self.fd, message)
    except OSError as e:
      raise ProgramGone(f"cannot reach the program: {e}") from None
    return self.receive()

  def call(self, name: str, args: tuple, kwargs: dict):
    """``name(*args, **kwargs)`` in the program; its value or its exception."""
    try:
      wire_args = [encode(a) for a in args]
      wire_kwargs = [[k, encode(v)] for k, v in kwargs.items()]
    except WireError as e:
      raise TypeError(f"sandbox: an argument cannot be sent to the program: {e}") from None
    for wire in wire_args + [w for _, w in wire_kwargs]:
      if wire[0] == "?":
        raise TypeError(f"sandbox: an argument of type {wire[1]} cannot be sent to the program")
    reply = self.request({"op": "call", "name": name, "args": wire_args, "kwargs": wire_kwargs})
    op = reply.get("op")
    try:
      if op == "return":
        return decode(reply["value"])
      if op == "raise":
        error = remote_exception(str(reply["module"]), str(reply["type"]), str(reply["message"]))
    except WireError as e:
      raise ProtocolError(str(e)) from None
    except KeyError as e:
      raise ProtocolError(f"reply without {e}") from None
    if op == "raise":
      raise error
    raise ProtocolError(f"unexpected reply {str(reply)[:200]}")


def remote_exception(module: str, type_name: str, message: str) -> Exception:
  """The program's exception as a builtin ``Exception`` subclass of the same
  name when there is one (never ``SystemExit`` and the like), else RemoteError."""
  cls = getattr(builtins, type_name, None) if module == "builtins" else None
  if isinstance(cls, type) and issubclass(cls, Exception):
    try:
      return cls(message)
    except Exception:
      pass
  return RemoteError(f"{module}.{type_name}: {message}")


class RemoteFunction:
  """A function of the program, called across the boundary."""

  def __init__(self, channel: Channel, name: str):
    self._channel, self.__name__ = channel, name

  def __call__(self, *args, **kwargs):
    return self._channel.call(self.__name__, args, kwargs)

  def __repr__(self) -> str:
    return f"<sandboxed function {self.__name__}>"


def global_names(code: types.CodeType) -> set:
  """Names a code object (and the ones nested in it) may look up globally."""
  names = set(code.co_names)
  for const in code.co_consts:
    if isinstance(const, types.CodeType):
      names |= global_names(const)
  return names


def stdlib_module(name: str, module_name: str):
  """The standard-library module ``module_name`` when ``name`` is what an
  ``import`` statement would bind it to, else None."""
  top = module_name.split(".")[0]
  if top not in sys.stdlib_module_names or top in _NEVER_IMPORT:
    return None
  if module_name != name and not module_name.endswith("." + name):
    return None
  try:
    __import__(module_name)
    return sys.modules[module_name]
  except Exception:
    return None


def bind_program_names(channel: Channel, code: types.CodeType) -> dict:
  """The test's globals: builtins, then what the program defines under the
  names the test uses (the test's own definitions overwrite them when it runs)."""
  namespace = {"__name__": "__main__", "__builtins__": builtins}
  wanted = sorted(global_names(code) - set(dir(builtins)))
  if not wanted:
    return namespace
  reply = channel.request({"op": "describe", "names": wanted})
  kinds = reply.get("kinds")
  if reply.get("op") != "names" or type(kinds) is not list or len(kinds) != len(wanted):
    raise ProtocolError(f"unexpected reply {str(reply)[:200]}")
  for name, kind in zip(wanted, kinds):
    if type(kind) is not list or not kind:
      raise ProtocolError(f"bad description of {name!r}")
    if kind[0] == "callable":
      namespace[name] = RemoteFunction(channel, name)
    elif kind[0] == "value" and len(kind) == 2:
      try:
        namespace[name] = decode(kind[1])
      except WireError as e:
        raise ProtocolError(str(e)) from None
    elif kind[0] == "module" and len(kind) == 2 and type(kind[1]) is str:
      module = stdlib_module(name, kind[1])
      if module is not None:
        namespace[name] = module
  return namespace


def wait_loaded(channel: Channel) -> None:
  """Return once the program has loaded; exit with its verdict if it failed to."""
  message = channel.receive()
  if message.get("op") != "loaded":
    raise ProtocolError(f"expected 'loaded', got {str(message)[:200]}")
  error = message.get("error")
  if error is not None:
    print(f"sandbox: the program raised {error} while loading", file=sys.stderr)
    finish(FAIL_RC if error == "AssertionError" else ERROR_RC)


def finish(rc: int) -> None:
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(rc)


def read_test() -> str:
  chunks = []
  while chunk := os.read(0, 1 << 16):
    chunks.append(chunk)
  return b"".join(chunks).decode("utf-8")


def main(argv: list) -> None:
  channel = Channel(int(argv[0]))
  test_source = read_test()
  try:
    code = compile(test_source, "test.py", "exec")
    wait_loaded(channel)
    namespace = bind_program_names(channel, code)
    exec(code, namespace)
  except AssertionError:
    print_traceback()
    finish(FAIL_RC)
  except ProgramGone as e:
    print(f"sandbox: {e}", file=sys.stderr)
    finish(GONE_RC)
  except BaseException:
    print_traceback()
    finish(ERROR_RC)
  finish(PASS_RC)


def print_traceback() -> None:
  import traceback  # only when there is one to print (it costs a few ms to import)
  traceback.print_exc()


if __name__ == "__main__":
  main(sys.argv[1:])
