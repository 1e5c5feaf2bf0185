"""The assertion-counting plugin (tests/count_assertions.py) counts what a test runs:
passing ``assert`` statements, outermost numpy.testing calls, pytest.raises."""

import os
import subprocess
import sys
import textwrap

from tests import count_assertions

SYNTHETIC = textwrap.dedent("""
    import numpy as np
    import pytest
    from numpy.testing import assert_allclose

    def test_counted():
      for i in range(5):
        assert i >= 0
      assert_allclose(np.ones(3), np.ones(3))  # calls other numpy asserts: counts once
      np.testing.assert_array_equal(np.ones(2), np.ones(2))
      with pytest.raises(ValueError):
        raise ValueError("x")

    def test_fails():
      assert 1 == 1
      assert 1 == 2

    def test_none():
      pass
    """)


def test_counts_of_a_synthetic_file(tmp_path):
  (tmp_path / "test_synthetic.py").write_text(SYNTHETIC)
  out = tmp_path / "counts"
  env = dict(os.environ, PYTHONPATH=os.path.dirname(count_assertions.__file__))
  proc = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "count_assertions", "-p", "no:xdist",
       "-p", "no:cacheprovider", "-o", "enable_assertion_pass_hook=true", "-c", os.devnull,
       f"--count-assertions-dir={out}", "--rootdir", str(tmp_path), str(tmp_path)],
      capture_output=True, text=True, env=env, cwd=tmp_path)
  assert "1 failed, 2 passed" in proc.stdout, proc.stdout + proc.stderr
  tests = {k.split("::")[1]: v for k, v in count_assertions.load(str(out)).items()}
  assert tests["test_counted"] == {"assert": 5, "numpy": 2, "chex": 0, "raises": 1,
                                   "outcome": "passed"}
  assert tests["test_fails"] == {"assert": 1, "numpy": 0, "chex": 0, "raises": 0,
                                 "outcome": "failed"}
  assert tests["test_none"]["outcome"] == "passed"
  files = count_assertions.by_file(count_assertions.load(str(out)))
  assert count_assertions.totals(files) == {"tests": 3, "failed": 1, "total": 9, "assert": 6,
                                            "numpy": 2, "chex": 0, "raises": 1}


def test_without_the_ini_option_it_refuses(tmp_path):
  (tmp_path / "test_synthetic.py").write_text("def test_x():\n  assert True\n")
  env = dict(os.environ, PYTHONPATH=os.path.dirname(count_assertions.__file__))
  proc = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "count_assertions", "-p", "no:xdist",
       "-p", "no:cacheprovider", "-c", os.devnull, f"--count-assertions-dir={tmp_path}/c",
       "--rootdir", str(tmp_path), str(tmp_path)],
      capture_output=True, text=True, env=env, cwd=tmp_path)
  assert proc.returncode != 0
  assert "enable_assertion_pass_hook=true" in proc.stdout + proc.stderr
