"""benchmarks/adaptation_cost.py's bookkeeping (no model is loaded): the null adapters
of ``--adapt`` and what the record's summary and table make of its timings."""

import json

import pytest

from benchmarks import adaptation_cost as ac
from experiments.common import knobs, specs


def test_every_online_mode_becomes_a_null_adapter_and_none_is_refused():
  got = ac.null_adaptations(specs.AdaptSpec(
      "none, online:every=4:learning_rate=0.03, online:every=2:label_top_k=8"))
  assert list(got) == ["online:every=4", "online:every=2:label_top_k=8"]
  assert all(c.learning_rate == ac.NULL_LEARNING_RATE for c in got.values())
  assert got["online:every=2:label_top_k=8"].label_top_k == 8
  with pytest.raises(knobs.KnobError, match="adapt"):
    ac.null_adaptations(specs.AdaptSpec("none"))


def _rows():
  """Two prompts: target-only 0.1 s per decode token, the frozen chain 1.0 s and 2.0 s,
  the null adapter 1.1 s and 2.2 s (10% more) over 5 + 5 rounds of 11 tokens each."""
  row = lambda f, a, calls: dict(tokens=11, decode_s=dict(target=1.0, frozen=f, **{"online": a}),
                                 calls=dict(frozen=dict(target_calls=5, updates=0),
                                            online=dict(target_calls=calls, updates=1)))
  return [row(1.0, 1.1, 5), row(2.0, 2.2, 5)]


def test_the_summary_reads_the_added_share_and_target_steps_per_round():
  """Added 0.3 s over 3.0 s: a 10% share; 0.3 s over 10 rounds is 0.03 s a round, 0.3
  target steps of 0.1 s.  Different rounds on any prompt are reported."""
  got = ac.summarize(_rows())["online"]
  assert got["share"] == pytest.approx(0.1) and got["steps_per_round"] == pytest.approx(0.3)
  assert got["same_rounds"] and got["updates"] == 2
  other = _rows()
  other[1]["calls"]["online"]["target_calls"] = 6
  assert not ac.summarize(other)["online"]["same_rounds"]


def test_the_table_tests_the_share_against_the_goal(tmp_path):
  """10% on both prompts: the interval is [10%, 10%], above the 5% goal."""
  from experiments.results import adaptation_tables
  rows = _rows()
  rec = dict(prompts=rows, summary=ac.summarize(rows), max_new_tokens=11, k=4,
             null_learning_rate=ac.NULL_LEARNING_RATE, repeats=3,
             provenance=dict(command="python -m benchmarks.adaptation_cost", git_commit="a" * 40))
  (tmp_path / "cost.json").write_text(json.dumps(rec))
  text = adaptation_tables.adaptation_cost_table(str(tmp_path / "cost.json"))
  assert "+10.0% [+10.0, +10.0]: above the goal" in text and "| 0.300 |" in text
