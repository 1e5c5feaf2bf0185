"""experiments/common/sweep.py: resumable, append-only JSONL sweeps."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from experiments.common import sweep

CONFIGS = [{"a": i, "b": [i, i * i], "name": f"c{i}"} for i in range(8)]


def evaluate(cfg):
  return {"value": cfg["a"] * 10 + 1, "sq": cfg["b"][1] / 3}


def _lines(path):
  with open(path, "rb") as f:
    return f.read().splitlines()


def _without_provenance(path):
  """The file's records without their ``provenance`` (times and load differ per run)."""
  out = []
  for line in _lines(path):
    r = json.loads(line)
    assert set(r["provenance"]) >= {"command", "git_commit", "load_average", "finished"}
    out.append({k: v for k, v in r.items() if k != "provenance"})
  return out


def test_keys_are_stable_and_explicit_key_wins():
  assert sweep.config_key({"x": 1, "y": 2}) == sweep.config_key({"y": 2, "x": 1})
  assert sweep.config_key({"x": 1}) != sweep.config_key({"x": 2})
  assert sweep.config_key({"key": "mine", "x": 1}) == "mine"
  with pytest.raises(ValueError):
    sweep.run_sweep([{"key": "k"}, {"key": "k"}], evaluate, "/tmp/never.jsonl")


def test_uninterrupted_run_and_rerun_is_noop(tmp_path):
  path = str(tmp_path / "r.jsonl")
  recs = sweep.run_sweep(CONFIGS, evaluate, path, progress=False)
  assert [r["config"] for r in recs] == CONFIGS
  assert [r["result"] for r in recs] == [evaluate(c) for c in CONFIGS]
  before = open(path, "rb").read()
  calls = []
  recs2 = sweep.run_sweep(CONFIGS, lambda c: calls.append(c) or evaluate(c), path,
                          progress=False)
  assert calls == [] and recs2 == recs and open(path, "rb").read() == before


def test_interrupted_then_resumed_equals_uninterrupted(tmp_path):
  ref = str(tmp_path / "ref.jsonl")
  sweep.run_sweep(CONFIGS, evaluate, ref, progress=False)
  path = str(tmp_path / "r.jsonl")
  n = {"calls": 0}

  def dies_after_3(cfg):
    if n["calls"] == 3:
      raise KeyboardInterrupt("simulated kill")
    n["calls"] += 1
    return evaluate(cfg)

  with pytest.raises(KeyboardInterrupt):
    sweep.run_sweep(CONFIGS, dies_after_3, path, progress=False)
  assert len(_lines(path)) == 3
  seen = []
  sweep.run_sweep(CONFIGS, lambda c: seen.append(c["a"]) or evaluate(c), path, progress=False)
  assert seen == [3, 4, 5, 6, 7]  # only the missing ones
  assert _without_provenance(path) == _without_provenance(ref)
  keys = [json.loads(l)["key"] for l in _lines(path)]
  assert len(keys) == len(set(keys)) == len(CONFIGS)


def test_torn_last_line_is_dropped_and_repaired(tmp_path, monkeypatch):
  ref = str(tmp_path / "ref.jsonl")
  sweep.run_sweep(CONFIGS, evaluate, ref, progress=False)
  path = str(tmp_path / "r.jsonl")
  real_write = os.write
  n = {"records": 0}

  def torn_write(fd, data):
    # The 5th record is killed half way through its single write.
    n["records"] += 1
    if n["records"] == 5:
      real_write(fd, bytes(data[:len(data) // 2]))
      raise KeyboardInterrupt("killed mid-write")
    return real_write(fd, data)

  monkeypatch.setattr(sweep.os, "write", torn_write)
  with pytest.raises(KeyboardInterrupt):
    sweep.run_sweep(CONFIGS, evaluate, path, progress=False)
  monkeypatch.setattr(sweep.os, "write", real_write)
  raw = open(path, "rb").read()
  assert not raw.endswith(b"\n")  # torn
  assert [r["config"]["a"] for r in sweep.load_records(path)] == [0, 1, 2, 3]
  assert open(path, "rb").read() == raw  # load without repair leaves the file alone
  sweep.run_sweep(CONFIGS, evaluate, path, progress=False)
  assert _without_provenance(path) == _without_provenance(ref)


def test_torn_line_that_is_valid_json_prefix_and_midfile_garbage(tmp_path):
  path = str(tmp_path / "r.jsonl")
  sweep.run_sweep(CONFIGS[:2], evaluate, path, progress=False)
  with open(path, "ab") as f:
    f.write(b'{"key": "x"')  # no newline
  assert len(sweep.load_records(path)) == 2
  with open(path, "ab") as f:
    f.write(b"\n" + open(path, "rb").read().splitlines()[0] + b"\n")
  with pytest.raises(ValueError, match="not the last line"):
    sweep.load_records(path)


def test_killed_subprocess_resumes_without_duplicates(tmp_path):
  """A real SIGKILL of a running sweep, then a restart."""
  ref = str(tmp_path / "ref.jsonl")
  sweep.run_sweep(CONFIGS, evaluate, ref, progress=False)
  path = str(tmp_path / "r.jsonl")
  script = textwrap.dedent(f"""
      import sys, time
      sys.path.insert(0, {os.getcwd()!r})
      from experiments.common import sweep
      from tests.experiments.test_sweep import CONFIGS, evaluate
      def slow(c):
          time.sleep(0.15)
          return evaluate(c)
      sweep.run_sweep(CONFIGS, slow, {path!r}, progress=False)
  """)
  proc = subprocess.Popen([sys.executable, "-c", script], cwd=os.getcwd())
  deadline = time.time() + 60
  while time.time() < deadline:
    if os.path.exists(path) and len(_lines(path)) >= 2:
      break
    time.sleep(0.02)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  got = len(sweep.load_records(path))
  assert 2 <= got < len(CONFIGS)
  sweep.run_sweep(CONFIGS, evaluate, path, progress=False)
  assert _without_provenance(path) == _without_provenance(ref)


def test_concurrent_sweep_is_refused(tmp_path):
  path = str(tmp_path / "r.jsonl")

  def nested(cfg):
    with pytest.raises(RuntimeError, match="locked"):
      sweep.run_sweep(CONFIGS[:1], evaluate, path, progress=False)
    return evaluate(cfg)

  sweep.run_sweep(CONFIGS[:1], nested, path, progress=False)


def test_non_finite_and_numpy_values(tmp_path):
  import numpy as np
  path = str(tmp_path / "r.jsonl")
  recs = sweep.run_sweep([{"key": "a"}], lambda c: {"x": np.float32(1.5), "y": float("inf"),
                                                    "z": np.arange(3)}, path, progress=False)
  assert recs[0]["result"] == {"x": 1.5, "y": None, "z": [0, 1, 2]}
