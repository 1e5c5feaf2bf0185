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
                           weight_decay=0.0, depths=0, gate=0),
                max_new_tokens=256, max_context=4096, seed=1, turns=8, min_turns=8,
                temperature=0.0, timed=True, session_set="sharegpt", draft_shape="chain",
                verifier="lossless")


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


def test_the_verifier_is_one_rule_kept_with_converted_values():
  spec = oa.SessionRuleSpec("mars:theta=0.9")
  assert spec.canonical() == "mars:theta=0.9" and not spec.rule().is_lossless
  assert oa.SessionRuleSpec().canonical() == "lossless" and oa.SessionRuleSpec().rule().is_lossless
  from experiments.common.knobs import KnobError
  with pytest.raises(KnobError, match="verifier.*exactly one rule"):
    oa.SessionRuleSpec("lossless, mars")
  with pytest.raises(KnobError, match="verifier.*unknown verifier 'nope'"):
    oa.SessionRuleSpec("nope")
  with pytest.raises(KnobError, match="verifier.*theta"):
    oa.SessionRuleSpec("mars:theta=x")


def test_a_record_without_a_verifier_resumes_as_lossless_and_not_as_mars(tmp_path):
  """Records taken before ``--verifier`` verified losslessly."""
  assert oa.resume_from(_old_record(tmp_path), dict(SETTINGS, verifier="lossless"))[0]
  with pytest.raises(app.UsageError, match="verifier: record 'lossless'"):
    oa.resume_from(_old_record(tmp_path), dict(SETTINGS, verifier="mars:theta=0.9"))


class _Out:
  """A fake ``generate`` result: one row's answer, its round counts and adapter."""

  def __init__(self, answer, accepted=0, calls=1):
    from types import SimpleNamespace as NS
    self.answer = answer
    self.stats = NS(summary=lambda: dict(target_calls=calls, accepted=accepted,
                                         tau=(accepted + calls) / calls),
                    accept_counts=[[accepted]], offered_counts=[[calls]])
    self.adapter = "next state"

  def to_lists(self):
    return [self.answer]


@pytest.mark.parametrize("lossy", [False, True])
def test_a_greedy_turn_checks_identity_only_under_a_lossless_rule(monkeypatch, lossy):
  """Greedy under lossless verification, the three answers must agree (a difference
  is an error); under a lossy rule they may differ, each run keeps its own answer's
  length, and each answer is scored by the target's log-likelihood (here a fake
  scoring -1 per token, so the sums are minus the lengths)."""
  from types import SimpleNamespace as NS
  answers = {"target": [1, 2, 3], "frozen": [1, 2], "adapted": [1, 2, 3, 4]}
  monkeypatch.setattr("specjax.decoding.autoregressive.generate",
                      lambda *a, **k: _Out(answers["target"]))
  order = iter(["frozen", "adapted"])
  monkeypatch.setattr("specjax.decoding.speculative.speculative_generate",
                      lambda *a, **k: _Out(answers[next(order)], accepted=1))
  monkeypatch.setattr("experiments.compare.quality.target_loglik",
                      lambda m, p, prompts, outs: dict(per_row=[-1.0] * len(outs)))
  rule = oa.SessionRuleSpec("mars:theta=0.9" if lossy else "lossless").rule()
  r = NS(new_tokens=NS(max_new_tokens=4), temperature=NS(temperature=0.0),
         bench=oa.OnlineAdaptationSpec(timed=False))
  setup = dict(ms=NS(target=None, target_params=None), rule=rule, sampling=None,
               frozen=None, fparams=None, adapting=None, aparams={})
  if not lossy:
    with pytest.raises(RuntimeError, match="greedy outputs differ"):
      oa.run_turn(r, setup, [0], None, None)
    return
  row, state, out = oa.run_turn(r, setup, [0], None, None)
  assert out == answers["target"] and state == "next state"
  assert (row["frozen"]["tokens"], row["adapted"]["tokens"]) == (2, 4)
  assert (row["target_loglik"], row["frozen"]["loglik"], row["adapted"]["loglik"]) == (
      -3.0, -2.0, -4.0)
  summary = oa.summarize([dict(row, session=0, turn=0)])
  assert summary["loglik"] == {"target": -1.0, "frozen": -1.0, "adapted": -1.0}


def test_the_lossy_table_scores_each_runs_own_answers(tmp_path, monkeypatch):
  """Per session, target-only's answers score -1 nat per token, the frozen head's -1.5
  and the adapting head's -1.25 (token-weighted over turns of unequal lengths): the
  table reads -1.000, -1.500, -1.250 and the differences -0.500, -0.250, +0.250; a
  lossless record (no log-likelihoods) is refused."""
  from experiments.results import adaptation_tables, markdown
  turns = []
  for s in range(4):
    for t, n in enumerate((4, 8)):
      turns.append(dict(session=s, turn=t, tokens=n, target_loglik=-1.0 * n,
                        frozen=dict(tokens=2 * n, loglik=-3.0 * n),
                        adapted=dict(tokens=n, loglik=-1.25 * n)))
  rec = dict(settings=dict(SETTINGS, verifier="mars:theta=0.9"), turns=turns)
  (tmp_path / "r.json").write_text(json.dumps(rec))
  monkeypatch.setattr(markdown, "ROOT", str(tmp_path))
  text = adaptation_tables.lossy_loglik_table("r.json")
  for cell in ("| -1.000 |", "| -1.500 |", "| -1.250 |", "-0.500 [-0.500, -0.500]",
               "-0.250 [-0.250, -0.250]", "+0.250 [+0.250, +0.250]"):
    assert cell in text
  (tmp_path / "l.json").write_text(json.dumps(dict(rec, turns=[
      {k: v for k, v in t.items() if k != "target_loglik"} for t in turns])))
  with pytest.raises(ValueError, match="without log-likelihoods"):
    adaptation_tables.lossy_loglik_table("l.json")


def test_two_settings_are_compared_only_on_the_same_greedy_sessions(tmp_path, monkeypatch):
  """The first setting's adapting head reaches tau 3 where the second's reaches 2, on
  four sessions whose frozen rounds agree: +0.500 on every turn, and on the second
  turns alone (those after 8 served tokens) when asked for.  A record whose frozen
  head ran other rounds (other sessions) is refused, naming where."""
  from experiments.results import adaptation_tables, markdown

  def rec(adapted_accepted, frozen_calls=4):
    turns = [dict(session=s, turn=t, tokens=8, served_before=8 * t,
                  frozen=dict(accepted=4, target_calls=frozen_calls),
                  adapted=dict(accepted=adapted_accepted, target_calls=4))
             for s in range(4) for t in range(2)]
    return json.dumps(dict(turns=turns))

  (tmp_path / "a.json").write_text(rec(8))
  (tmp_path / "b.json").write_text(rec(4))
  (tmp_path / "c.json").write_text(rec(4, frozen_calls=5))
  monkeypatch.setattr(markdown, "ROOT", str(tmp_path))
  text = adaptation_tables.two_settings_table("a.json", "b.json", "A", "B")
  assert "| all turns | 4 | 64 | 2.00 | 3.00 | +0.500 [+0.500, +0.500]" in text
  assert "served tokens" not in text
  text = adaptation_tables.two_settings_table("a.json", "b.json", "A", "B", served_from=(8,))
  assert "| turns after >= 8 served tokens | 4 | 32 | 2.00 | 3.00 | +0.500" in text
  with pytest.raises(ValueError, match="differ at session 0, turn 0"):
    adaptation_tables.two_settings_table("a.json", "c.json", "A", "C")


def test_a_gated_record_says_how_often_its_gate_was_shut(tmp_path, monkeypatch):
  """The per-turn table's note counts the updates after which the gate was shut from
  each session's last turn (the counts run over a session): sessions ending at 3 of
  10 and 1 of 30 updates read "4 of the adapting head's 40 updates (10%)"; an ungated
  record says nothing about a gate, with or without the counts (the benchmark writes
  them, all 0, for any adapter)."""
  from experiments.results import adaptation_tables, markdown
  counts = {(0, 0): (1, 4), (0, 1): (3, 10), (1, 0): (0, 12), (1, 1): (1, 30)}
  turns = [dict(session=s, turn=t, tokens=8, served_before=8 * t,
                frozen=dict(accepted=4, target_calls=4),
                adapted=dict(accepted=6, target_calls=4, gate_shut=shut, updates=n))
           for (s, t), (shut, n) in counts.items()]
  rec = dict(settings=dict(SETTINGS, adapt=dict(SETTINGS["adapt"], gate=64)),
             adapt=dict(SETTINGS["adapt"], gate=64), k=4, max_new_tokens=256, turns=turns,
             provenance=dict(command="cmd", git_commit="a" * 40))
  (tmp_path / "g.json").write_text(json.dumps(rec))
  monkeypatch.setattr(markdown, "ROOT", str(tmp_path))
  text = adaptation_tables.online_adaptation_table("g.json")
  assert "gated (memory 64 entries)" in text
  assert "the gate was shut after 4 of the adapting head's 40 updates (10%)" in text
  for t in turns:
    for k in ("gate_shut", "updates"):
      del t["adapted"][k]
  ungated = dict(rec, settings=SETTINGS, adapt=SETTINGS["adapt"])
  (tmp_path / "u.json").write_text(json.dumps(ungated))
  assert "gate" not in adaptation_tables.online_adaptation_table("u.json")
  for t in turns:
    t["adapted"].update(gate_shut=0, updates=10)
  (tmp_path / "u.json").write_text(json.dumps(dict(ungated, turns=turns)))
  assert "gate" not in adaptation_tables.online_adaptation_table("u.json")


def test_a_turn_records_the_sessions_updates_and_shut_gates(monkeypatch):
  """A turn whose adapting run returns an adapter state records that state's counts
  (the session's updates so far and those after which its gate was shut); a run
  without one (the fake's placeholder) records neither."""
  from types import SimpleNamespace as NS
  import dataclasses
  import jax.numpy as jnp
  from specjax.decoding import adaptation
  state = adaptation.init_state(adaptation.OnlineAdaptation(window=2, rank=1, gate=4), 1,
                                2, 2, 3)
  state = dataclasses.replace(state, updates=jnp.asarray([7]), gate_shut=jnp.asarray([2]))
  outs = iter([_Out([1, 2], accepted=1), _Out([1, 2], accepted=1)])
  monkeypatch.setattr("specjax.decoding.autoregressive.generate", lambda *a, **k: _Out([1, 2]))
  monkeypatch.setattr("specjax.decoding.speculative.speculative_generate",
                      lambda *a, **k: next(outs))
  r = NS(new_tokens=NS(max_new_tokens=2), temperature=NS(temperature=0.0),
         bench=oa.OnlineAdaptationSpec(timed=False))
  setup = dict(ms=NS(target=None, target_params=None), rule=oa.SessionRuleSpec().rule(),
               sampling=None, frozen=None, fparams=None, adapting=None, aparams={})
  row, _, _ = oa.run_turn(r, setup, [0], None, None)
  assert "updates" not in row["adapted"] and "gate_shut" not in row["adapted"]
  adapted = _Out([1, 2], accepted=1)
  adapted.adapter = state
  outs = iter([_Out([1, 2], accepted=1), adapted])
  row, got, _ = oa.run_turn(r, setup, [0], None, None)
  assert got is state
  assert (row["adapted"]["updates"], row["adapted"]["gate_shut"]) == (7, 2)
  assert "updates" not in row["frozen"]
