"""A record that decides something comes from a committed tree: ``--decision``
(``specjax.provenance.require_clean_tree``) refuses a checkout with uncommitted
changes to tracked files or no checkout at all, and marks the process's stamps
``"decision": true``. Broken variants caught: a check that ignores modified tracked
files (the dirty case passes), and stamps that never say they decided."""

import subprocess

import pytest

from specjax import provenance


def _git(cwd, *args):
  subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
                 cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def checkout(tmp_path, monkeypatch):
  """A committed one-file git checkout; the decision mark is reset afterwards."""
  monkeypatch.setitem(provenance._DECISION, "on", False)
  _git(tmp_path, "init", "-q")
  (tmp_path / "a.txt").write_text("1\n")
  _git(tmp_path, "add", "a.txt")
  _git(tmp_path, "commit", "-q", "-m", "one")
  return tmp_path


def test_clean_tree_decides_and_stamps_say_so(checkout):
  assert "decision" not in provenance.stamp(["x.py"], cwd=str(checkout))
  state = provenance.require_clean_tree(str(checkout))
  assert state["git_dirty"] is False and len(state["git_commit"]) == 40
  assert provenance.stamp(["x.py"], cwd=str(checkout))["decision"] is True


def test_untracked_files_do_not_make_a_tree_dirty(checkout):
  (checkout / "new_output.jsonl").write_text("{}\n")
  provenance.require_clean_tree(str(checkout))


def test_dirty_tree_is_refused(checkout):
  (checkout / "a.txt").write_text("2\n")
  with pytest.raises(provenance.DirtyTreeError, match="--decision: the working tree has "
                     "uncommitted changes"):
    provenance.require_clean_tree(str(checkout))
  assert provenance._DECISION["on"] is False


def test_no_checkout_is_refused(tmp_path, monkeypatch):
  monkeypatch.setitem(provenance._DECISION, "on", False)
  with pytest.raises(provenance.DirtyTreeError, match="is not a git checkout"):
    provenance.require_clean_tree(str(tmp_path))


def test_decision_flag_turns_a_refusal_into_a_usage_error(monkeypatch):
  from absl import app, flags
  from absl.testing import flagsaver

  from experiments.common import cli
  cli.define_decision_flag()
  cli.define_decision_flag()  # idempotent: binaries share one process in the tests
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()

  def refuse(cwd=None):
    raise provenance.DirtyTreeError("--decision: the working tree has uncommitted changes")

  monkeypatch.setattr(provenance, "require_clean_tree", refuse)
  with flagsaver.flagsaver(decision=True):
    with pytest.raises(app.UsageError, match="--decision: the working tree"):
      cli.apply_decision_flag()
  with flagsaver.flagsaver(decision=False):
    cli.apply_decision_flag()  # without the flag nothing is checked
