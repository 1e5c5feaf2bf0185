"""The main job (README command 1, ``python -m experiments.benchmark``) end to end
on the small embedded models, run as a user runs it: a table with every row,
JSONL records whose greedy rows agree with target-only output exactly, and
flag errors that name the flag before any model loads."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args, timeout=600):
  return subprocess.run([sys.executable, "-m", "experiments.benchmark", *args], cwd=ROOT,
                        capture_output=True, text=True, timeout=timeout)


# AdaEDL at lambda = 1 stops every chain after min_draft = 1 draft (greedy drafts are
# scored by the draft LM's softmax, whose entropy is > 0): one draft verified per call.
ADAEDL = "--policies=none,adaedl:lam=1:adaptive=false"
ADAEDL_METHOD = "lossless+adaedl(adaptive=False,lam=1.0)"


@pytest.mark.slow  # 35 s: the shipped models and two drafters end to end; CI's slow step
def test_main_job_on_default_models(tmp_path):
  out = tmp_path / "bench"
  r = _run("--model=default", "--drafters=chain,eagle_tree", "--verifiers=lossless,mars",
           "--temperatures=0", "--num_prompts=2", "--max_new_tokens=12", "--repeats=1",
           "--eagle_total_tokens=6", "--eagle_depth=3", "--eagle_top_k=2", ADAEDL,
           f"--output_dir={out}")
  assert r.returncode == 0, r.stderr[-3000:]
  recs = [json.loads(l) for l in open(out / "benchmark.jsonl")]
  methods = {(x["config"]["method"], x["config"]["drafter"]) for x in recs}
  assert methods == {("target", "-"), ("lossless", "chain"), ("mars", "chain"),
                     ("lossless", "eagle_tree"), ("mars", "eagle_tree"),
                     (ADAEDL_METHOD, "chain"), ("mars+adaedl(adaptive=False,lam=1.0)", "chain")}
  for x in recs:
    res = x["result"]
    assert res["tokens_per_s"] > 0 and res["num_rows"] == 2
    if x["config"]["method"] in ("target", "lossless", ADAEDL_METHOD):
      assert res["agree_exact"] == 1.0  # greedy speculative == target greedy
    if "adaedl" in x["config"]["method"]:
      assert res["verified_per_call"] == 1.0  # the policy reached the loop
    if x["config"]["kind"] == "spec":
      assert res["tau"] >= 1.0 and res["speedup"] > 0
  # --target_timing=shared (the default): target-only is timed once per temperature and
  # every row's speedup divides by that one timing.
  assert len({x["result"]["target_time_s"] for x in recs}) == 1
  assert "| lossless | eagle_tree | 0 |" in r.stdout and "wall time" in r.stdout
  assert os.path.isfile(out / "benchmark.png") and os.path.isfile(out / "benchmark.md")
  # A rerun resumes: every row is already there.
  again = _run("--model=default", "--drafters=chain,eagle_tree", "--verifiers=lossless,mars",
               "--temperatures=0", "--num_prompts=2", "--max_new_tokens=12", "--repeats=1",
               "--eagle_total_tokens=6", "--eagle_depth=3", "--eagle_top_k=2", ADAEDL,
               f"--output_dir={out}")
  assert again.returncode == 0 and len(open(out / "benchmark.jsonl").readlines()) == len(recs)


BAD_FLAGS = [  # (command line, what the error must say)
    ("--drafters=chain,medusa", "--drafters="),
    ("--temperatures=0,hot", "--temperatures=0,hot: 'hot' is not a float"),
    ("--k=0", "--k"),
    ("--model=/nowhere/model.gguf", "--model='/nowhere/model.gguf'"),
    ("--eagle=eagle9", "--eagle='eagle9'"),
    ("--prompt_sets=wiki", "--prompt_sets="),
    ("--verifiers=lossless,nosuch", "nosuch"),
    ("--policies=none,sv", "--policies='none,sv': policy='sv' is unknown"),
    ("--policies=adaedl:lam=1.5", "lam=1.5 is outside the allowed range"),
    ("--policies=adaedl:gamma=0.2", "['gamma'] unknown; allowed: entropy_factor"),
    ("--k=2 --policies=adaedl:min_draft=3", "min_draft=3 must be in [0, K=2]"),
    ("--mesh_model=2", "--mesh_model=2: needs a mesh"),
    ("--num_processes=2", "--coordinator_address=None must be 'host:port'"),
    ("--num_processes=2 --coordinator_address=localhost:1 --process_id=5",
     "--process_id=5 must be an integer in [0, 2)"),
]


def test_bad_flags_name_the_flag(tmp_path):
  """Every bad flag is refused, naming it, before any model loads (one interpreter
  for all cases: tests/flag_errors.py); one case end to end as a user sees it."""
  from tests.flag_errors import usage_errors
  got = usage_errors("experiments.benchmark",
                     [["--model=default", *flag.split(), f"--output_dir={tmp_path}"]
                      for flag, _ in BAD_FLAGS], define="define_flags")
  for (flag, message), err in zip(BAD_FLAGS, got):
    assert message in err, (flag, err)
  r = _run("--model=default", "--k=0", f"--output_dir={tmp_path}", timeout=120)
  assert r.returncode != 0 and "--k" in r.stderr and "Traceback" not in r.stderr
