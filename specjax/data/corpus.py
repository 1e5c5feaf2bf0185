"""A corpus is a directory of text files, split into train / held-out *by file*.

Default corpus: the pure-Python standard library of the running interpreter
(``os.path.dirname(os.__file__)``), ``*.py`` files only, excluding
``site-packages`` (third-party code, differs between machines), test
directories (``test``, ``tests``, ``idle_test``: large, repetitive and
partly synthetic -- deliberately odd encodings, generated data) and
``__pycache__``. The file list is sorted, so the corpus is a pure function of
the interpreter's stdlib (the shipped models used CPython 3.11.7).

The split is deterministic and independent of the file order or count: a
file is held out iff ``sha256(split_seed + ":" + relpath) / 2**64 <
heldout_fraction`` (first 8 digest bytes), so adding a file never moves
another file across the split.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import os
from typing import Iterator, Sequence

DEFAULT_EXCLUDE_DIRS = ("site-packages", "test", "tests", "idle_test", "__pycache__")
SPLITS = ("train", "heldout")


def default_corpus_dir() -> str:
  """The running interpreter's standard-library directory."""
  return os.path.dirname(os.__file__)


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
  """Attributes:
    root: directory to read ("" = :func:`default_corpus_dir`).
    patterns: filename globs to include.
    exclude_dirs: directory *names* skipped anywhere in the tree.
    heldout_fraction: fraction of files (by hash) in the held-out split, in [0, 1).
    split_seed: salt of the split hash.
    max_file_bytes: skip larger files (generated tables, 0 = no limit).
  """

  root: str = ""
  patterns: tuple = ("*.py",)
  exclude_dirs: tuple = DEFAULT_EXCLUDE_DIRS
  heldout_fraction: float = 0.05
  split_seed: int = 0
  max_file_bytes: int = 500_000

  def __post_init__(self):
    if not 0.0 <= self.heldout_fraction < 1.0:
      raise ValueError(f"heldout_fraction={self.heldout_fraction!r} must lie in [0, 1)")

  @property
  def resolved_root(self) -> str:
    return os.path.abspath(self.root or default_corpus_dir())


def split_of(relpath: str, heldout_fraction: float, split_seed: int = 0) -> str:
  """'train' or 'heldout' for a file's path relative to the corpus root (``/`` separators)."""
  digest = hashlib.sha256(f"{split_seed}:{relpath}".encode("utf-8")).digest()
  u = int.from_bytes(digest[:8], "big") / 2.0 ** 64
  return "heldout" if u < heldout_fraction else "train"


def list_files(cfg: CorpusConfig) -> list[str]:
  """Sorted relative paths (``/`` separators) of the corpus files."""
  root = cfg.resolved_root
  if not os.path.isdir(root):
    raise FileNotFoundError(f"corpus directory does not exist: {root}")
  out = []
  for dirpath, dirnames, filenames in os.walk(root):
    dirnames[:] = sorted(d for d in dirnames if d not in cfg.exclude_dirs)
    for name in filenames:
      if not any(fnmatch.fnmatch(name, p) for p in cfg.patterns):
        continue
      full = os.path.join(dirpath, name)
      if cfg.max_file_bytes and os.path.getsize(full) > cfg.max_file_bytes:
        continue
      out.append(os.path.relpath(full, root).replace(os.sep, "/"))
  return sorted(out)


def split_files(cfg: CorpusConfig, split: str) -> list[str]:
  """Sorted relative paths of one split."""
  if split not in SPLITS:
    raise ValueError(f"split={split!r}; choose one of {SPLITS}")
  return [f for f in list_files(cfg)
          if split_of(f, cfg.heldout_fraction, cfg.split_seed) == split]


def read_documents(cfg: CorpusConfig, split: str) -> Iterator[tuple[str, str]]:
  """Yield ``(relpath, text)`` of one split in sorted order (undecodable bytes replaced)."""
  root = cfg.resolved_root
  for rel in split_files(cfg, split):
    with open(os.path.join(root, rel), "rb") as f:
      yield rel, f.read().decode("utf-8", errors="replace")


def corpus_fingerprint(cfg: CorpusConfig, files: Sequence[str] | None = None) -> str:
  """Short hash of the config and the file list (names + sizes): a cache key."""
  root = cfg.resolved_root
  h = hashlib.sha256(repr(dataclasses.astuple(cfg)).encode())
  for rel in (files if files is not None else list_files(cfg)):
    h.update(f"{rel}:{os.path.getsize(os.path.join(root, rel))}\n".encode())
  return h.hexdigest()[:16]
