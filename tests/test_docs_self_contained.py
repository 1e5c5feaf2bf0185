"""The docs are self-contained: nothing in the repo cites a file outside it.

A person who clones specjax has only the repo, so docstrings, comments and
docs cite docs/spec.md, docs/design.md or docs/path_rules.md, never internal
notes (SPEC / DESIGN / STYLE / REFERENCES files) or paths outside the repo;
and every relative markdown link in docs/*.md and README.md resolves.
Fast (no JAX import): reads the tracked text files only.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCANNED = ("specjax", "experiments", "benchmarks", "tests", "docs", "notebooks", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".txt", ".cfg", ".toml", ".ini", ".yaml", ".yml", ""}
# Built from pieces so that this file does not match itself.
_NOTES = "|".join(("SPEC", "DESIGN", "STYLE", "REFERENCES"))
FORBIDDEN = re.compile(r"\b(?:" + _NOTES + r")\.md\b"
                       r"|\bSPEC " + "\u00a7"
                       r"|\.\./shared\b|/work/" + "shared")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _tracked(*paths: str) -> list[pathlib.Path]:
  try:
    out = subprocess.run(["git", "ls-files", "-z", "--", *paths], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    files = [ROOT / f for f in out.split("\0") if f]
  except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk the tree
    files = [f for p in paths for f in ([ROOT / p] if (ROOT / p).is_file()
                                         else (ROOT / p).rglob("*"))]
  return [f for f in files if f.is_file()]


def test_no_citation_outside_the_repo():
  this = pathlib.Path(__file__).resolve()
  bad = []
  for f in _tracked(*SCANNED):
    if f.resolve() == this or f.suffix not in TEXT_SUFFIXES:
      continue
    try:
      text = f.read_text(encoding="utf-8")
    except UnicodeDecodeError:
      continue
    for n, line in enumerate(text.splitlines(), 1):
      m = FORBIDDEN.search(line)
      if m:
        bad.append(f"{f.relative_to(ROOT)}:{n}: {m.group(0)!r}")
  assert not bad, ("cite docs/spec.md (or docs/design.md, docs/path_rules.md) "
                   "instead of files outside the repo:\n" + "\n".join(bad))


@pytest.mark.parametrize("doc", ["README.md"] + sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
def test_relative_links_resolve(doc):
  path = ROOT / doc
  text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
  broken = []
  for target in LINK.findall(text):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
      continue  # URLs and in-page anchors
    rel = target.split("#", 1)[0]
    if rel and not (path.parent / rel).exists():
      broken.append(target)
  assert not broken, f"{doc}: links to missing files: {broken}"
