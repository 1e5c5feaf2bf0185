"""What crosses the boundary between a sandboxed program and the test harness.

Messages are single JSON lines (``send`` / ``LineReader``). Values are plain
data encoded as a tagged JSON tree (``encode`` / ``decode``): ``None``,
``bool``, ``int`` (hex, so any size), ``float`` (``float.hex``, so exact and
NaN/inf), ``complex``, ``str``, ``bytes``, ``list``, ``tuple``, ``set``,
``frozenset`` and ``dict`` of those. Only *exact* builtin types are encoded
(``type(v) is int``, not a subclass): an object whose ``__eq__`` always answers
``True`` cannot travel, it arrives as an :class:`Unrepresentable` that equals
nothing but itself. Decoding builds only these types (no ``pickle``, no
``marshal``, no ``eval``), checks the tree's shape and refuses depth beyond
``MAX_DEPTH``; ``LineReader`` refuses lines over its byte limit.

This module uses the standard library only: the sandbox runner concatenates
its source in front of the guard's and the harness's (they run as
``python -I -S -c SOURCE``, where ``specjax`` is not importable).
"""

import json
import os

MAX_DEPTH = 64
MAX_LINE_BYTES = 4 << 20
_SEQ_TAGS = {"l": list, "t": tuple, "S": set, "F": frozenset}
_TAG_OF_SEQ = {list: "l", tuple: "t", set: "S", frozenset: "F"}


class Unrepresentable:
  """A value of a type that does not cross the boundary (named by ``type_name``)."""

  __slots__ = ("type_name",)

  def __init__(self, type_name: str):
    self.type_name = type_name

  def __repr__(self) -> str:
    return f"<unrepresentable {self.type_name}>"


class WireError(ValueError):
  """A malformed message or value tree."""


def encode(value, depth: int = 0) -> list:
  """``value`` as a tagged JSON tree; other types become ``["?", type name]``.

  Raises:
    WireError: nesting deeper than ``MAX_DEPTH`` (also catches cycles).
  """
  if depth > MAX_DEPTH:
    raise WireError(f"value nested deeper than {MAX_DEPTH}")
  t = type(value)
  if value is None:
    return ["N"]
  if t is bool:
    return ["b", value]
  if t is int:
    return ["i", format(value, "x")]
  if t is float:
    return ["f", value.hex()]
  if t is complex:
    return ["c", value.real.hex(), value.imag.hex()]
  if t is str:
    return ["s", value]
  if t is bytes:
    return ["y", value.hex()]
  if t in _TAG_OF_SEQ:
    return [_TAG_OF_SEQ[t], [encode(v, depth + 1) for v in value]]
  if t is dict:
    return ["d", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
  if t is Unrepresentable:
    return ["?", value.type_name]
  return ["?", str(t.__qualname__)[:200]]


def _expect(cond: bool, tree) -> None:
  if not cond:
    raise WireError(f"malformed value {str(tree)[:200]!r}")


def decode(tree, depth: int = 0):
  """The value of an ``encode`` tree.

  Raises:
    WireError: the tree is malformed (unknown tag, wrong shape, unhashable
      set member or dict key, nesting deeper than ``MAX_DEPTH``).
  """
  _expect(depth <= MAX_DEPTH and type(tree) is list and tree and type(tree[0]) is str, tree)
  tag, rest = tree[0], tree[1:]
  try:
    if tag == "N" and not rest:
      return None
    if tag == "b" and len(rest) == 1 and type(rest[0]) is bool:
      return rest[0]
    if tag == "i" and len(rest) == 1 and type(rest[0]) is str:
      return int(rest[0], 16)
    if tag == "f" and len(rest) == 1 and type(rest[0]) is str:
      return float.fromhex(rest[0])
    if tag == "c" and len(rest) == 2 and all(type(x) is str for x in rest):
      return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    if tag == "s" and len(rest) == 1 and type(rest[0]) is str:
      return rest[0]
    if tag == "y" and len(rest) == 1 and type(rest[0]) is str:
      return bytes.fromhex(rest[0])
    if tag in _SEQ_TAGS and len(rest) == 1 and type(rest[0]) is list:
      return _SEQ_TAGS[tag](decode(v, depth + 1) for v in rest[0])
    if tag == "d" and len(rest) == 1 and type(rest[0]) is list:
      _expect(all(type(kv) is list and len(kv) == 2 for kv in rest[0]), tree)
      return {decode(k, depth + 1): decode(v, depth + 1) for k, v in rest[0]}
    if tag == "?" and len(rest) == 1 and type(rest[0]) is str:
      return Unrepresentable(rest[0][:200])
  except (TypeError, ValueError, OverflowError) as e:  # unhashable key, bad hex
    raise WireError(f"malformed value {str(tree)[:200]!r}: {e}") from None
  raise WireError(f"malformed value {str(tree)[:200]!r}")


def send(fd: int, message: dict) -> None:
  """Write ``message`` as one JSON line to ``fd`` (all of it)."""
  data = (json.dumps(message, ensure_ascii=True, separators=(",", ":")) + "\n").encode()
  view = memoryview(data)
  while view:
    view = view[os.write(fd, view):]


class LineReader:
  """JSON messages, one per line, read from ``fd``; ``read`` gives ``None`` at EOF."""

  def __init__(self, fd: int, max_bytes: int = MAX_LINE_BYTES):
    self.fd, self.max_bytes, self.buf = fd, max_bytes, bytearray()

  def read(self):
    """The next message (a dict), or ``None`` at end of file.

    Raises:
      WireError: a line longer than ``max_bytes``, not JSON, or not an object.
    """
    scanned = 0
    while (end := self.buf.find(b"\n", scanned)) < 0:
      if len(self.buf) > self.max_bytes:
        raise WireError(f"message longer than {self.max_bytes} bytes")
      scanned = len(self.buf)
      chunk = os.read(self.fd, 1 << 16)
      if not chunk:
        if self.buf:
          raise WireError("connection closed in the middle of a message")
        return None
      self.buf += chunk
    line = bytes(self.buf[:end])
    del self.buf[:end + 1]
    if len(line) > self.max_bytes:
      raise WireError(f"message longer than {self.max_bytes} bytes")
    try:
      message = json.loads(line)
    except ValueError:
      raise WireError(f"not a JSON message: {line[:200]!r}") from None
    if type(message) is not dict:
      raise WireError(f"not a JSON object: {line[:200]!r}")
    return message
