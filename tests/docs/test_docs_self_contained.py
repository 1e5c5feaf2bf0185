"""The docs are self-contained: nothing in the repo cites a file outside it.

A person who clones specjax has only the repo, so docstrings, comments and
docs cite docs/spec.md, docs/design.md or docs/path_rules.md, never internal
notes (SPEC / DESIGN / STYLE / REFERENCES files) or paths outside the repo;
and every relative markdown link in docs/*.md and README.md resolves.

The docs also speak of the project, not of the tracker it was built with: a
clone has no issue tracker and no record of work sessions, so no doc a reader
follows (README.md, docs/*.md, tests/README.md, benchmarks/RESULTS.md, the
assets README) says "issue 28", "issues 4, 5, 14", "issue #12", "session 14"
or "sessions 6-10"; it names the feature, the section or the date instead.
The broken variant this catches: a heading such as "## Drafters trained for
SmolLM2 (issue 13)" or a timing row "session 15, README command" in one of
those docs (``test_docs_name_no_issue_or_session`` fails and lists the line);
``test_issue_reference_pattern`` checks the pattern itself on such phrases and
on wording that must stay allowed ("the drafter issue", "across three
sessions"). And tests/README.md stays a map: every tracked test file has its
row there (``test_every_test_file_is_on_the_map``).
Fast (no JAX import): reads the tracked text files only.
"""

from __future__ import annotations

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCANNED = ("specjax", "experiments", "benchmarks", "tests", "docs", "notebooks", "README.md")
TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".txt", ".cfg", ".toml", ".ini", ".yaml", ".yml", ""}
# Built from pieces so that this file does not match itself.
_NOTES = "|".join(("SPEC", "DESIGN", "STYLE", "REFERENCES"))
FORBIDDEN = re.compile(r"\b(?:" + _NOTES + r")\.md\b"
                       r"|\bSPEC " + "\u00a7"
                       r"|\.\./shared\b|/work/" + "shared")
# "issue 28", "Issues 4, 5", "issue #12", "session 14", "sessions 6-10": a tracker's
# numbers or a work session's, which mean nothing in a clone.
ISSUE_REF = re.compile(r"\b(?:issues?|sessions?)\s+#?\d+", re.I)
# The docs a reader of the repo follows (docs/*.md is globbed).
READER_DOCS = ("README.md", "tests/README.md", "benchmarks/RESULTS.md",
               "specjax/models/assets/README.md")
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


def _reader_docs() -> list[str]:
  docs = [d for d in READER_DOCS if (ROOT / d).is_file()]
  return docs + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("doc", _reader_docs())
def test_docs_name_no_issue_or_session(doc):
  text = (ROOT / doc).read_text(encoding="utf-8")
  bad = [f"{doc}:{n}: {m.group(0)!r}" for n, line in enumerate(text.splitlines(), 1)
         for m in ISSUE_REF.finditer(line)]
  assert not bad, ("name the feature, the section or the date, not a tracker issue or a "
                   "work session (a clone has neither):\n" + "\n".join(bad))


@pytest.mark.parametrize("phrase,caught", [
    ("## Drafters trained for SmolLM2 (issue 13)", True),
    ("## Drafters and speed (issues 4, 5, 14)", True),
    ("see Issue #12", True),
    ("| session 15, README command | 868 | 401 s |", True),
    ("sessions 6-10: + on-policy store", True),
    ("A stronger drafter is the test that matters (the drafter issue).", False),
    ("run across three sessions (stopped at steps 1000 and 1400)", False),
    ("a persistent compilation cache per session", False),
])
def test_issue_reference_pattern(phrase, caught):
  assert bool(ISSUE_REF.search(phrase)) is caught


# A row of tests/README.md's map: "| `verifiers/test_tree.py` | ..." (the path under tests/;
# "| `test_sampling.py` | ..." for a file at the top of tests/).
MAP_ROW = re.compile(r"^\| `((?:\w+/)*test_\w+\.py)` \|", re.M)


def test_every_test_file_is_on_the_map():
  tests = ROOT / "tests"
  files = {f.relative_to(tests).as_posix() for f in _tracked("tests")
           if f.name.startswith("test_") and f.suffix == ".py"}
  on_map = set(MAP_ROW.findall((tests / "README.md").read_text(encoding="utf-8")))
  missing = sorted(files - on_map)
  assert not missing, ("tests/README.md, 'Which file covers what': add a row for each of "
                       + ", ".join(missing))
