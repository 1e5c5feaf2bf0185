"""specjax.provenance: the stamp a committed record carries."""

import json
import os
import subprocess
import sys

from specjax import provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_stamp_names_command_commit_and_load(tmp_path, monkeypatch):
  for name in provenance.COMMAND_ENVIRONMENT:
    monkeypatch.delenv(name, raising=False)
  s = provenance.finish(provenance.stamp(["bench.py", "--repeats=3", "a b"], cwd=ROOT))
  json.dumps(s)  # a record field: JSON-able
  assert s["command"] == "python bench.py --repeats=3 'a b'"
  head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                        text=True).stdout.strip()
  assert s["git_commit"] == head and isinstance(s["git_dirty"], bool)
  assert len(s["load_average"]) == 3 and len(s["load_average_end"]) == 3
  assert s["backend"] and s["devices"] >= 1 and s["cpus"] >= 1
  assert s["started"] <= s["finished"]
  # outside a checkout: no commit, no error
  assert provenance.git_state(str(tmp_path)) == {"git_commit": None, "git_dirty": None}


def test_command_line_of_a_module_run(tmp_path):
  """``python -m pkg.mod args`` is recorded as typed, not as the module's file path."""
  pkg = tmp_path / "stamped"
  pkg.mkdir()
  (pkg / "__init__.py").write_text("")
  (pkg / "run.py").write_text("from specjax import provenance\n"
                              "print(provenance.command_line())\n")
  env = {k: v for k, v in os.environ.items() if k not in provenance.COMMAND_ENVIRONMENT}
  env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), ROOT])
  r = subprocess.run([sys.executable, "-m", "stamped.run", "--x=1"], cwd=tmp_path, env=env,
                     capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.strip() == "python -m stamped.run --x=1"


def test_command_line_names_the_environment_that_changes_a_run():
  """A run under ``XLA_FLAGS`` reruns only with it: the command line says so; an
  unrelated or empty variable is left out."""
  env = {"XLA_FLAGS": "--xla_cpu_use_onednn=true --x=1", "HOME": "/h", "JAX_ENABLE_X64": ""}
  assert (provenance.command_line(["b.py", "--r=3"], environ=env)
          == "XLA_FLAGS='--xla_cpu_use_onednn=true --x=1' python b.py --r=3")
  assert provenance.command_line(["b.py"], environ={}) == "python b.py"


def test_model_hashes_and_stamped_record(tmp_path, monkeypatch):
  """A record gets ``provenance`` (with the end load) and ``model_sha256``: a checkpoint
  directory hashed by its model.safetensors, a file by itself, None for a random model."""
  from specjax.models.defaults import default_model_dir
  from specjax.models.registry import file_sha256
  for name in provenance.COMMAND_ENVIRONMENT:
    monkeypatch.delenv(name, raising=False)
  gguf = tmp_path / "m.gguf"
  gguf.write_bytes(b"weights")
  target = default_model_dir("target")
  got = provenance.model_hashes({"target": target, "file": str(gguf), "random": None,
                                 "missing": str(tmp_path / "nosuch")})
  assert got == {"target": file_sha256(os.path.join(target, "model.safetensors")),
                 "file": file_sha256(str(gguf)), "random": None, "missing": None}
  rec = provenance.stamped({"rows": [1]}, provenance.stamp(["x.py"]), {"file": str(gguf)})
  json.dumps(rec)
  assert rec["rows"] == [1] and rec["model_sha256"] == {"file": file_sha256(str(gguf))}
  assert rec["provenance"]["command"] == "python x.py" and "load_average_end" in rec["provenance"]
  assert "model_sha256" not in provenance.stamped({}, provenance.stamp(["x.py"]))


def test_speculative_benchmark_record_is_stamped():
  """benchmarks/speculative.py's JSON record: rows plus the weights' sha256 of the HF
  directories it loaded (None for a random draft) and the run's provenance."""
  from benchmarks import speculative
  from specjax.models.defaults import default_model_dir
  t_dir = default_model_dir("target")
  sources = speculative.model_sources(t_dir, None, None)
  rec = speculative.output_record([{"batch": 1}], t_dir, "random 1-layer", sources,
                                  provenance.stamp(["bench.py"]))
  assert rec["rows"] == [{"batch": 1}] and rec["draft"] == "random 1-layer"
  assert rec["model_sha256"]["draft"] is None and len(rec["model_sha256"]["target"]) == 64
  assert {"command", "git_commit", "started", "finished"} <= set(rec["provenance"])
