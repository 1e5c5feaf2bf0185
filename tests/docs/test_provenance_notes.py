"""What the result tables say about their records' provenance and commands.

Broken variants caught: a note that calls a dirty-tree or unstamped record
"committed tree" (it would let it decide); a table that loses its note; a rerun
command that keeps ``speed_smollm2``'s recorded command, which today runs 96 tokens
instead of the record's 128; an acceptance command that today runs a 16-node tree
instead of the record's 24; the main job's 4-prompt table printing verdicts.
"""

import json

import pytest

from experiments.results import commands, provenance_notes as pn
from experiments.results import tables


def _stamp(dirty, commit="a" * 40, **kw):
  return {"command": "python -m x", "git_commit": commit, "git_dirty": dirty, **kw}


def _write(path, stamps):
  path.write_text("".join(json.dumps({"result": {}, **({"provenance": s} if s else {})}) + "\n"
                          for s in stamps))
  return str(path)


def test_clean_dirty_and_unstamped_records(tmp_path):
  clean = pn.record_provenance(_write(tmp_path / "c.jsonl", [_stamp(False), _stamp(False)]))
  assert not clean.exploratory and clean.describe().endswith("committed tree")
  dirty = pn.record_provenance(_write(tmp_path / "d.jsonl", [_stamp(False), _stamp(True)]))
  assert dirty.exploratory and "**1 of 2 from a tree with uncommitted changes**" in dirty.describe()
  bare = pn.record_provenance(_write(tmp_path / "b.jsonl", [None, None]))
  assert bare.exploratory and "no provenance stamp" in bare.describe()
  decided = pn.record_provenance(_write(tmp_path / "e.jsonl", [_stamp(False, decision=True)]))
  assert "a `--decision` run" in decided.describe()
  one = tmp_path / "old.json"  # an older writer's top-level command / commit
  one.write_text(json.dumps({"command": "python -m y", "commit": "b" * 40}))
  old = pn.record_provenance(str(one))
  assert old.exploratory and "do not record whether the tree was clean" in old.describe()
  assert pn.EXPLORATORY in pn.provenance_note([str(tmp_path / "d.jsonl")])
  assert pn.EXPLORATORY not in pn.provenance_note([str(tmp_path / "c.jsonl")])
  with pytest.raises(FileNotFoundError, match="rel='nope.jsonl'"):
    pn.record_provenance("nope.jsonl")


def test_every_listed_table_exists_reads_committed_records_and_carries_its_note():
  for name, rels in pn.RECORDS_OF.items():
    assert name in tables.TABLES, name
    for rel in rels():
      pn.record_provenance(rel)  # exists and parses
  assert "Provenance: `benchmarks/results/compare_smollm2/" in tables.TABLES["compare_smollm2"]()
  with pytest.raises(KeyError, match="do not exist"):
    pn.with_provenance({})


def _bench(cmd, cap, eos_frac=0.5):
  res = {"eos_frac": eos_frac, "batch_timing": {"spec": [[[cap, 1.0], [cap - 9, 1.0]]]}}
  return [{"config": {"kind": "spec"}, "result": res, "provenance": {"command": cmd}}]


def test_rerun_command_pins_a_changed_default():
  cmd = "python -m experiments.benchmark --num_prompts=16"
  got = commands.benchmark_rerun(_bench(cmd, 128))
  assert got.rerun == cmd + " --max_new_tokens=128" and got.recorded == cmd
  assert "pinned from the record" in got.why
  assert commands.benchmark_rerun(_bench(cmd, commands.BENCHMARK_MAX_NEW_TOKENS)).rerun == cmd
  assert commands.benchmark_rerun(_bench(cmd + " --max_new_tokens=128", 128)).pinned == ()
  assert commands.benchmark_rerun(_bench(cmd, 128, eos_frac=1.0)).pinned == ()  # cap unknown
  with pytest.raises(ValueError, match="records"):
    commands.benchmark_rerun([])


def test_committed_speed_record_is_rendered_with_its_real_token_cap():
  text = tables.TABLES["speed_smollm2"]()
  assert "--output_dir=benchmarks/results/speed_smollm2 --max_new_tokens=128`" in text


def test_main_job_table_has_no_verdicts():
  body = tables.TABLES["main_job_smollm2"]().split("\n\n")[0]
  for word in ("faster", "slower", "inconclusive", "better", "worse"):
    assert word not in body, word
  assert "target-only tokens/s beside it" in body


def test_a_moved_record_reruns_into_its_own_directory():
  """The broken variant: the acceptance record's command that names the directory its
  rows were first written to, which a rerun would fill instead of this record's."""
  rel = "benchmarks/results/acceptance_smollm2/acceptance.jsonl"
  moved = commands.moved_output_rerun(
      "python -m experiments.acceptance --output_dir=benchmarks/results/zero_cost", rel)
  assert moved.rerun.endswith("--output_dir=benchmarks/results/acceptance_smollm2")
  assert "moved into `benchmarks/results/acceptance_smollm2`" in moved.why
  same = commands.moved_output_rerun(
      "python -m experiments.acceptance --output_dir=benchmarks/results/acceptance_smollm2/", rel)
  assert same.pinned == () and commands.moved_output_rerun("python -m x", rel).pinned == ()
  text = tables.TABLES["acceptance_smollm2"]()
  assert "recorded as `python -m experiments.acceptance --drafters=lookup_chain," in text


def test_an_acceptance_record_reruns_with_its_tree():
  """The broken variant: an acceptance command that left --eagle_total_tokens at the
  default of its day (24), which today (16) would rerun every cell under new keys."""
  cmd = "python -m experiments.acceptance --drafters=eagle_tree"
  cell = lambda kind, tree: {"config": {"kind": kind},
                             "key": f"x|sharegpt|T=0|m|d|e|K=5|tree={tree}|n=16"}
  recs = [cell("eagle_tree", "5,8,24"), cell("suffix_tree", "4,8,16")]
  got = commands.acceptance_tree_rerun(cmd, recs)
  assert got.rerun == cmd + " --eagle_total_tokens=24" and "`tree=5,8,24`" in got.why
  assert commands.acceptance_tree_rerun(cmd + " --eagle_total_tokens=24", recs).pinned == ()
  assert commands.acceptance_tree_rerun(cmd, [cell("eagle_tree", "5,8,16")]).pinned == ()
  assert commands.acceptance_tree_rerun("python -m x", recs).pinned == ()
  text = tables.TABLES["acceptance_smollm2"]()
  assert ("`python -m experiments.acceptance --output_dir=benchmarks/results/acceptance_smollm2"
          " --eagle_total_tokens=24`") in text
