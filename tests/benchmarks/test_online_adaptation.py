"""benchmarks/online_adaptation.py's bookkeeping: a record written session by session
resumes only under the settings it was taken with (no model is loaded)."""

import json

from absl import app
import pytest

from benchmarks import online_adaptation as oa
from experiments.results import provenance_notes

SETTINGS = dict(target="smollm2-135m-instruct", k=4,
                adapt=dict(every=4, steps=1, window=32, rank=8, learning_rate=0.03,
                           label_top_k=1, loss="ce", update_vocab="all",
                           weight_decay=0.0),
                max_new_tokens=256, max_context=4096, seed=1, turns=8, min_turns=8,
                temperature=0.0, timed=True, session_set="sharegpt", draft_shape="chain")


def _old_record(tmp_path):
  """A record as written before resumption existed: settings only in its command (and
  before the adapter's ``loss`` and ``update_vocab`` settings: it ran with their
  defaults)."""
  cmd = ("python -m benchmarks.online_adaptation --sessions=3 --turns=8 --min_turns=8 "
         "--max_new_tokens=256 --max_context=4096 --seed=1 --output=x.json")
  rec = dict(benchmark="online_adaptation", target=SETTINGS["target"], k=4,
             adapt={k: v for k, v in SETTINGS["adapt"].items() if k not in oa.ADAPT_ADDED},
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
                                         ("draft_shape", "tree"),
                                         ("session_set", "humaneval"),
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


def _run(**kw):
  """A parsed run of this binary's specs with ``kw`` overriding its presets."""
  from types import SimpleNamespace as NS
  bench = oa.OnlineAdaptationSpec(**{k: kw[k] for k in ("sessions", "turns") if k in kw})
  return NS(bench=bench, new_tokens=NS(max_new_tokens=kw.get("max_new_tokens", 8)),
            context=NS(max_context=kw.get("max_context", 100)), seed=NS(seed=0))


def test_humaneval_sessions_are_runs_of_problems_in_their_seed_order(monkeypatch):
  """``--session_set=humaneval``: session s holds problems [s * turns, (s + 1) * turns)
  of one ordered list of prompts that fit the context (asked for sessions x turns),
  each an independent turn; too few problems is a usage error naming the flags."""
  from experiments.common.prompts import ChatPrompt
  asked = {}

  def fake(encode_chat, n, *, sets, max_tokens, seed):
    asked.update(n=n, sets=sets, max_tokens=max_tokens, seed=seed)
    if n > 6:
      raise ValueError("prompt set 'humaneval' has only 6 prompts")
    return [ChatPrompt(f"problem {i}", (1,), f"humaneval:HumanEval/{i}", "humaneval")
            for i in range(n)]

  monkeypatch.setattr("experiments.common.prompts.load_chat_prompts", fake)
  got = oa.sessions(_run(sessions=2, turns=3), None, "humaneval")
  assert asked == dict(n=6, sets=("humaneval",), max_tokens=92, seed=0)
  assert [c.independent for c in got] == [True, True]
  assert [[u["content"] for u in c.users] for c in got] == [
      ["problem 0", "problem 1", "problem 2"], ["problem 3", "problem 4", "problem 5"]]
  assert got[1].id == "humaneval:HumanEval/3,humaneval:HumanEval/4,humaneval:HumanEval/5"
  with pytest.raises(app.UsageError, match="--sessions=3 --turns=3"):
    oa.sessions(_run(sessions=3, turns=3), None, "humaneval")


@pytest.mark.parametrize("independent", [False, True])
def test_replay_keeps_earlier_turns_only_for_a_conversation(independent):
  """A chat's turn t is rendered after every earlier user turn and answer; an
  independent session's turn alone.  The replay stops at the first turn that does not
  fit ``--max_context`` with ``--max_new_tokens`` more."""
  from types import SimpleNamespace as NS
  seen = []
  ms = NS(encode_chat=lambda msgs: [len(m["content"]) for m in msgs],
          tokenizer=NS(decode=lambda ids: "a" * len(ids)))
  users = [{"role": "user", "content": c} for c in ("x", "yy", "zzz")]
  conv = oa.Conversation("c", users, independent=independent)

  def answer(turn, ids):
    seen.append(list(ids))
    return [0] * (turn + 1)

  oa.replay(_run(max_new_tokens=1, max_context=5), ms, conv, answer)
  if independent:
    assert seen == [[1], [2], [3]]
  else:  # turn 3 would need 5 rendered messages + 1 new token > 5
    assert seen == [[1], [1, 1, 2]]
