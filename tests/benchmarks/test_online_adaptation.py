"""benchmarks/online_adaptation.py's bookkeeping: a record written session by session
resumes only under the settings it was taken with (no model is loaded)."""

import json

from absl import app
import pytest

from benchmarks import online_adaptation as oa
from experiments.results import provenance_notes

SETTINGS = dict(target="smollm2-135m-instruct", k=4,
                adapt=dict(every=4, steps=1, window=32, rank=8, learning_rate=0.03,
                           label_top_k=1, loss="ce"),
                max_new_tokens=256, max_context=4096, seed=1, turns=8, min_turns=8,
                temperature=0.0, timed=True)


def _old_record(tmp_path):
  """A record as written before resumption existed: settings only in its command (and
  before the adapter's ``loss`` setting: it ran with cross-entropy)."""
  cmd = ("python -m benchmarks.online_adaptation --sessions=3 --turns=8 --min_turns=8 "
         "--max_new_tokens=256 --max_context=4096 --seed=1 --output=x.json")
  rec = dict(benchmark="online_adaptation", target=SETTINGS["target"], k=4,
             adapt={k: v for k, v in SETTINGS["adapt"].items() if k != "loss"},
             max_new_tokens=256, max_context=4096,
             turns=[{"session": s, "turn": 0} for s in range(3)],
             provenance=dict(command=cmd, git_commit="a" * 40, git_dirty=False))
  path = tmp_path / "old.json"
  path.write_text(json.dumps(rec))
  return str(path)


def test_an_old_record_resumes_with_its_sessions_as_one_part(tmp_path):
  turns, parts = oa.resume_from(_old_record(tmp_path), SETTINGS)
  assert sorted(t["session"] for t in turns) == [0, 1, 2]
  assert len(parts) == 1 and parts[0]["sessions"] == [0, 1, 2]
  assert parts[0]["git_commit"] == "a" * 40


@pytest.mark.parametrize("field,value", [("seed", 2), ("turns", 3), ("max_new_tokens", 128),
                                         ("temperature", 1.0), ("timed", False),
                                         ("adapt", dict(SETTINGS["adapt"], every=8)),
                                         ("adapt", dict(SETTINGS["adapt"], loss="tv"))])
def test_a_record_taken_otherwise_is_refused_naming_the_difference(tmp_path, field, value):
  with pytest.raises(app.UsageError, match=f"{field}: record"):
    oa.resume_from(_old_record(tmp_path), dict(SETTINGS, **{field: value}))


def test_no_record_starts_afresh(tmp_path):
  assert oa.resume_from(str(tmp_path / "none.json"), SETTINGS) == ([], [])
  assert oa.resume_from("", SETTINGS) == ([], [])


def test_a_resumed_record_is_dirty_when_any_of_its_runs_was(tmp_path, monkeypatch):
  rec = dict(provenance=dict(git_commit="b" * 40, git_dirty=False),
             parts=[dict(git_commit="a" * 40, git_dirty=True, sessions=[0]),
                    dict(git_commit="b" * 40, git_dirty=False, sessions=[1])])
  (tmp_path / "r.json").write_text(json.dumps(rec))
  monkeypatch.setattr(provenance_notes, "ROOT", str(tmp_path))
  prov = provenance_notes.record_provenance.__wrapped__("r.json")
  assert prov.records == 2 and prov.dirty == 1 and prov.exploratory
  assert prov.commits == ("a" * 10, "b" * 10)


def test_a_record_body_keeps_settings_and_turns_apart():
  """The settings hold a ``turns`` count and the record a ``turns`` list: both survive,
  and the body resumes under the settings it names."""
  row = dict(tokens=5, frozen=dict(accepted=2, target_calls=3),
             adapted=dict(accepted=3, target_calls=2), target_decode_s=1.0,
             frozen_decode_s=0.9, adapted_decode_s=0.8)
  turns = [dict(row, session=1, turn=0), dict(row, session=0, turn=0)]
  body = oa.record_body(SETTINGS, turns)
  assert body["settings"] == SETTINGS and body["settings"]["turns"] == 8
  assert [t["session"] for t in body["turns"]] == [0, 1]
  assert oa.record_settings(body) == SETTINGS


def test_sampled_turns_time_each_run_by_its_own_answer():
  """At T > 0 the three runs of a turn emit answers of their own lengths: each run's
  decode-phase speed is per token of its own answer.  Target-only 0.1 s/token, the
  frozen run 0.1 s/token, the adapting run 0.05 s/token: speedups 1.0 and 2.0 (timing
  both by target-only's 10 decode tokens would read 2.0 and 1.0)."""
  from experiments.results import adaptation_tables
  row = dict(session=0, turn=0, tokens=11, target_decode_s=1.0, frozen_decode_s=0.5,
             adapted_decode_s=1.0, frozen=dict(accepted=2, target_calls=3, tokens=6),
             adapted=dict(accepted=3, target_calls=2, tokens=21))
  summary = oa.summarize([row])
  assert summary["decode_speedup_frozen"] == pytest.approx(1.0)
  assert summary["decode_speedup_adapted"] == pytest.approx(2.0)
  assert adaptation_tables._time_pairs([row], "adapted").tolist() == [[20.0, 1.0]]
  assert adaptation_tables._time_pairs([row], "target").tolist() == [[10.0, 1.0]]
  greedy = dict(row, frozen=dict(accepted=2, target_calls=3),
                adapted=dict(accepted=3, target_calls=2))
  assert oa.summarize([greedy])["decode_speedup_adapted"] == pytest.approx(1.0)


def test_untimed_turns_report_tau_and_no_speed():
  """``--notimed`` turns have no decode-phase seconds: the summary keeps tau and leaves
  the speedups out, and the table says "not timed" instead of a speed."""
  from experiments.results import adaptation_tables
  row = dict(session=0, turn=0, tokens=11, frozen=dict(accepted=2, target_calls=3),
             adapted=dict(accepted=3, target_calls=2))
  summary = oa.summarize([row])
  assert summary["tau_adapted"] == pytest.approx(2.5)
  assert "decode_speedup_adapted" not in summary
  assert adaptation_tables._speedup([row], "adapted") == "not timed"


def test_a_turns_key_is_the_same_for_its_three_runs_and_differs_across_turns():
  import jax
  same = [jax.random.key_data(oa.turn_key(1, 2, 3)) for _ in range(2)]
  assert (same[0] == same[1]).all()
  other = jax.random.key_data(oa.turn_key(1, 2, 4))
  assert not (same[0] == other).all()
