r"""Online adaptation of the EAGLE-3 head over multi-turn sessions: frozen and adapted
drafts side by side, turn after turn, on SmolLM2.

Each of ``--sessions`` held-out ShareGPT conversations with at least two user turns
(``specjax.data.eval_prompts.multiturn_prompts``) is replayed: the model answers
user turn 1, then user turn 2 with its own first answer in context, and so on for
``--turns`` turns or until the conversation, rendered through the chat template, no
longer fits ``--max_context`` tokens with ``--max_new_tokens`` more.  At
``--temperature=0`` the answers are greedy, so they are the target's whatever the
drafts are: the frozen head, the adapting head and target-only decoding see the same
sessions (checked token for token).  At T > 0 each of the three samples its own
answer (the same law: lossless verification) under the same key, and **our choice**
is that the conversation goes on with target-only's answer, so all three read the
same context every turn (the adapting head has learned from its own answer, a draw
from the same law).  The adapting head carries its state (adapters, Adam's moments,
window) from one turn to the next, as a served chat would (``SpecResult.adapter``).

With ``--session_set=humaneval`` a session is instead a run of ``--turns`` HumanEval
problems in sequence, each answered in a context of its own, the adapter carried from
one problem to the next (a coding assistant serving one user's problems).
``--draft_shape=tree`` drafts with the head's EAGLE-2 dynamic tree instead of its
chain (frozen and adapting alike).  ``--verifier`` names the rule both heads verify
with (lossless by default); under a lossy rule (``mars:theta=0.9``) the answers'
law depends on the head, so the runs' answers differ even greedy, the conversation
goes on with target-only's answer, and each run's answer is scored by the target's
log-likelihood per token -- the divergence adaptation can move (a lossy rule's exact
first-token divergence is the frozen head's by construction: the adapter starts at
zero).

Per turn, batch 1, every call once per round, round-robin, median of ``--repeats``
rounds: target-only ``generate``, the frozen chain and the adapting chain, each at
``n`` and 1 new tokens (the 1-token call is the prefill and first token; decode
phase = n - 1).  The adapting chain is timed from the state it starts the turn with,
and every call of a turn uses the turn's key, so every repeat runs the same
computation.  The record has per turn: the tokens emitted (per run at T > 0), target
calls, tau and accepted drafts per position for both heads, the decode-phase seconds
of all three, the tokens served before the turn (the learning curve's x axis), and the
adapting head's updates in its session so far and how many of them left its gate shut
(``--adapt=online:...:gate=M``: the frozen head's logits drafted until the next).
With ``--notimed`` each run is called once and nothing is timed: tau only, and the
record has no decode-phase seconds (such a run may share the machine).

    python -m benchmarks.online_adaptation --sessions=6 --turns=3 --max_new_tokens=128 \
        --adapt=online:every=4:learning_rate=0.03 \
        --output=benchmarks/results/online_adaptation/smollm2.json
"""

from __future__ import annotations

import dataclasses
import os

from absl import app
import numpy as np

from experiments.common import knobs, specs


@dataclasses.dataclass(frozen=True)
class OnlineAdaptationSpec:
  """The multi-turn sessions replayed."""
  sessions: int = knobs.knob(6, "held-out multi-turn conversations")
  turns: int = knobs.knob(3, "user turns answered per session (at most)")
  min_turns: int = knobs.knob(2, "only conversations with at least this many user turns (a "
                              "long learning curve needs long sessions)")
  timed: bool = knobs.knob(True, "time the three runs of every turn (--notimed: tau only, "
                           "each run called once, so the machine may be busy)")

  def __post_init__(self):
    knobs.check_int(self, "sessions", 1)
    knobs.check_int(self, "turns", 1)
    knobs.check_int(self, "min_turns", 1)


SESSION_SETS = ("sharegpt", "humaneval")
# --draft_shape -> the EAGLE-3 head's drafter of that shape (drafter_factory names)
DRAFTERS = {"chain": "eagle_chain", "tree": "eagle_tree"}


@dataclasses.dataclass(frozen=True)
class SessionKindSpec:
  """What a session is and what drafts for it."""
  session_set: str = knobs.knob("sharegpt", "sharegpt: held-out multi-turn chats replayed turn "
                                "after turn; humaneval: --turns HumanEval problems in "
                                "sequence, each in a context of its own", choices=SESSION_SETS)
  draft_shape: str = knobs.knob("chain", "the EAGLE-3 head's chain (K = --k) or its EAGLE-2 "
                                "dynamic tree (--eagle_depth, --eagle_top_k, "
                                "--eagle_total_tokens)", choices=tuple(DRAFTERS))


@dataclasses.dataclass(frozen=True)
class SessionRuleSpec:
  """How the frozen and the adapting runs verify."""
  verifier: str = knobs.knob("lossless", "the rule both runs verify with, "
                             "name[:hparam=value[:...]] (docs/rules.md); under a lossy rule "
                             "(e.g. mars:theta=0.9) the answers depend on the head, and each "
                             "run's answer is scored by the target's log-likelihood per token")

  def __post_init__(self):
    rules = _parsed_rules(self.verifier)
    if len(rules) != 1:
      raise knobs.KnobError("verifier", self.verifier, "give exactly one rule, "
                            "name[:hparam=value[:...]]")

  def rule(self):
    """The verifier named (its hyperparameters converted)."""
    from specjax import verifiers
    name, hp = _parsed_rules(self.verifier)[0]
    return verifiers.get(name, **hp)

  def canonical(self) -> str:
    """``name[:hparam=value...]`` with converted values, as records keep it."""
    name, hp = _parsed_rules(self.verifier)[0]
    return name + "".join(f":{k}={v}" for k, v in hp.items())


def _parsed_rules(spec: str) -> list:
  from experiments.common.rows import parse_rules
  try:
    return parse_rules(spec)
  except ValueError as e:
    raise knobs.KnobError("verifier", spec, str(e)) from None


SPECS = knobs.Specs(specs.ModelSpec, specs.ChainSpec, specs.AdaptSpec, specs.NewTokensSpec,
                    specs.ContextSpec, specs.TimingSpec, specs.SeedSpec, specs.OutputSpec,
                    OnlineAdaptationSpec, specs.TemperatureSpec, SessionKindSpec,
                    specs.EagleTreeSpec, SessionRuleSpec,
                    presets=dict(model="smollm2-135m-instruct", k=4, temperature=0.0,
                                 adapt="online:every=4:learning_rate=0.03",
                                 max_new_tokens=128, max_context=1024, repeats=3, output=""))


@dataclasses.dataclass(frozen=True)
class Run:
  """This benchmark's specs, by name."""
  model: specs.ModelSpec
  chain: specs.ChainSpec
  adapt: specs.AdaptSpec
  new_tokens: specs.NewTokensSpec
  context: specs.ContextSpec
  timing: specs.TimingSpec
  seed: specs.SeedSpec
  output: specs.OutputSpec
  bench: OnlineAdaptationSpec
  temperature: specs.TemperatureSpec
  kind: SessionKindSpec
  eagle_tree: specs.EagleTreeSpec
  rule: SessionRuleSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only."""
  SPECS.define()
  from experiments.common import cli
  cli.define_decision_flag()


def online_adaptation(adapt: specs.AdaptSpec):
  """The ``OnlineAdaptation`` of ``--adapt``, which must be one ``online[:...]`` mode
  (the frozen head always runs beside it); ``KnobError`` otherwise."""
  from specjax.decoding.adaptation import OnlineAdaptation
  modes = adapt.modes()
  if len(modes) != 1 or modes[0][0] != "online":
    raise knobs.KnobError("adapt", adapt.adapt, "give one online[:hparam=value[:...]] mode "
                          "(the frozen head runs beside it)")
  return OnlineAdaptation(**modes[0][1])


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  r = Run(*SPECS.build())
  try:
    online_adaptation(r.adapt)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r


@dataclasses.dataclass(frozen=True)
class Conversation:
  """A session: a held-out conversation's ShareGPT ``id`` and its user turns
  (``users``: chat messages, at most ``--turns``), each answered after the earlier
  turns and answers; or, ``independent``, a sequence of problems (``id``: their
  sources, comma-separated), each answered in a context of its own."""
  id: str
  users: list
  independent: bool = False


def sessions(r, encode_chat, session_set: str = "sharegpt") -> list[Conversation]:
  """``--sessions`` sessions (``r``: a run with this binary's ``bench``, ``new_tokens``,
  ``context`` and ``seed`` specs): held-out conversations with ``--min_turns`` user
  turns or more whose first turn fits the context, or (``session_set="humaneval"``)
  runs of ``--turns`` HumanEval problems that fit it, in their ``--seed`` order
  (``experiments.common.prompts.load_chat_prompts``), session s the s-th run."""
  b, n, ctx = r.bench, r.new_tokens.max_new_tokens, r.context.max_context
  if session_set == "humaneval":
    return _problem_sessions(r, encode_chat)
  from specjax.data import eval_prompts
  out = []
  for prefixes in eval_prompts.heldout_multiturn_prompts(seed=r.seed.seed):
    users = [m for m in prefixes[0].messages if m["role"] == "user"]
    if len(users) < b.min_turns:
      continue
    if len(encode_chat(users[:1])) + n <= ctx:
      out.append(Conversation(prefixes[0].id, users[:b.turns]))
    if len(out) == b.sessions:
      return out
  raise app.UsageError(f"--sessions={b.sessions}: only {len(out)} held-out conversations "
                       f"have --min_turns={b.min_turns} user turns and fit "
                       f"--max_context={ctx}")


def _problem_sessions(r, encode_chat) -> list[Conversation]:
  from experiments.common.prompts import load_chat_prompts
  b, n, ctx = r.bench, r.new_tokens.max_new_tokens, r.context.max_context
  try:
    probs = load_chat_prompts(encode_chat, b.sessions * b.turns, sets=("humaneval",),
                              max_tokens=ctx - n, seed=r.seed.seed)
  except ValueError as e:
    raise app.UsageError(f"--sessions={b.sessions} --turns={b.turns}: {e}") from None
  runs = [probs[i:i + b.turns] for i in range(0, len(probs), b.turns)]
  return [Conversation(",".join(p.source for p in run),
                       [{"role": "user", "content": p.text} for p in run], independent=True)
          for run in runs]


def _position_counts(stats) -> tuple[list, list]:
  return (np.asarray(stats.accept_counts).sum(0).tolist(),
          np.asarray(stats.offered_counts).sum(0).tolist())


def turn_key(seed: int, session: int, turn: int):
  """The key every call of one turn samples with (the same for the three runs)."""
  import jax
  return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), session), turn)


def run_turn(r: Run, setup: dict, ids: list, state, key) -> tuple[dict, object, list]:
  """One turn: the three calls' outputs and their decode-phase timings
  (module docstring); returns ``(row, the adapting head's next state, target-only's
  answer ids)``."""
  from benchmarks.common import call_timer, interleaved_medians
  from specjax.decoding.adaptation import AdapterState
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.speculative import speculative_generate
  ms, n = setup["ms"], r.new_tokens.max_new_tokens
  target, tp, rule = ms.target, ms.target_params, setup["rule"]
  kw = dict(sampling=setup["sampling"], key=key)
  aparams = setup["aparams"] if state is None else dict(setup["aparams"], adapter=state)
  calls = {
      "target": lambda m: generate(target, tp, [ids], max_new_tokens=m, **kw),
      "frozen": lambda m: speculative_generate(target, tp, setup["frozen"], setup["fparams"],
                                               rule, [ids], max_new_tokens=m, **kw),
      "adapted": lambda m: speculative_generate(target, tp, setup["adapting"], aparams,
                                                rule, [ids], max_new_tokens=m, **kw)}
  outs = {name: fn(n) for name, fn in calls.items()}
  answers = {name: o.to_lists()[0] for name, o in outs.items()}
  same = r.temperature.temperature == 0 and rule.is_lossless  # one answer for all three
  if same and not answers["target"] == answers["frozen"] == answers["adapted"]:
    raise RuntimeError("greedy outputs differ between target-only, frozen and adapted runs")
  row = {"prompt_tokens": len(ids), "tokens": len(answers["target"])}
  for name in ("frozen", "adapted"):
    s = outs[name].stats.summary()
    acc, off = _position_counts(outs[name].stats)
    row[name] = dict(target_calls=s["target_calls"], accepted=s["accepted"], tau=s["tau"],
                     accept_counts=acc, offered_counts=off)
    if not same:  # each run's own answer
      row[name]["tokens"] = len(answers[name])
  a = outs["adapted"].adapter
  if isinstance(a, AdapterState):  # the session's updates so far, those that shut the gate
    row["adapted"].update(updates=int(a.updates[0]), gate_shut=int(a.gate_shut[0]))
  if not rule.is_lossless:  # the answers' law depends on the head: score them
    sums = _logliks(setup, ids, answers)
    row["target_loglik"] = sums["target"]
    for name in ("frozen", "adapted"):
      row[name]["loglik"] = sums[name]
  if r.bench.timed:
    timers = {(name, m): call_timer(fn, m) for name, fn in calls.items() for m in (n, 1)}
    med = interleaved_medians(timers, r.timing.repeats)
    for name in calls:
      row[f"{name}_decode_s"] = med[name, n] - med[name, 1]
  return row, outs["adapted"].adapter, answers["target"]


def _logliks(setup: dict, ids: list, answers: dict) -> dict:
  """The target's log-likelihood (sum over tokens, temperature 1) of each run's answer
  to ``ids``, by run name."""
  from experiments.compare.quality import target_loglik
  ms = setup["ms"]
  names = list(answers)
  ll = target_loglik(ms.target, ms.target_params, [ids] * len(names),
                     [answers[n] for n in names])  # one batched forward
  return {n: m * len(answers[n]) if answers[n] else 0.0 for n, m in zip(names, ll["per_row"])}


def run_session(r: Run, setup: dict, conv: Conversation, session: int, served: int) -> list:
  """Every turn of session number ``session`` (module docstring); ``served``: tokens
  served before it by the adapting head (its state starts afresh per session)."""
  rows, state = [], None

  def answer(turn: int, ids: list) -> list:
    nonlocal state, served
    row, state, out = run_turn(r, setup, ids, state, turn_key(r.seed.seed, session, turn))
    rows.append({"turn": turn, "served_before": served, **row})
    served += row["adapted"].get("tokens", row["tokens"])
    return out

  replay(r, setup["ms"], conv, answer)
  return rows


def replay(r, ms, conv: Conversation, answer) -> None:
  """Replay a session turn after turn: each user turn joins the messages (or, for an
  ``independent`` session, starts them afresh), they are rendered (``ms.encode_chat``)
  and ``answer(turn, ids) -> answer ids`` answers them, the answer joining the
  messages as the assistant's; stops at the first turn whose rendering and
  ``--max_new_tokens`` more do not fit ``--max_context``."""
  messages = []
  for turn, user in enumerate(conv.users):
    messages = [user] if conv.independent else messages + [user]
    ids = ms.encode_chat(messages)
    if len(ids) + r.new_tokens.max_new_tokens > r.context.max_context:
      return
    messages.append({"role": "assistant", "content": ms.tokenizer.decode(answer(turn, ids))})


def load_setup(r: Run) -> dict:
  from experiments.common.model_sets import load_model_set
  from specjax.decoding.drafter_factory import make_drafter
  from specjax.distributions import SamplingConfig
  cfg = online_adaptation(r.adapt)
  ms = load_model_set(r.model.model, draft="", eagle="eagle3")
  sampling = SamplingConfig(temperature=r.temperature.temperature)
  shape = dict(num_draft=r.chain.k)
  if r.kind.draft_shape == "tree":
    t = r.eagle_tree
    shape = dict(depth=t.eagle_depth, top_k=t.eagle_top_k, total_tokens=t.eagle_total_tokens)
  name = DRAFTERS[r.kind.draft_shape]
  frozen, fparams = make_drafter(name, sampling, ms.draft_sources(), **shape)
  adapting, aparams = make_drafter(name, sampling, ms.draft_sources(), adapt=cfg, **shape)
  return dict(ms=ms, cfg=cfg, rule=r.rule.rule(), frozen=frozen, fparams=fparams,
              adapting=adapting, aparams=aparams, sampling=sampling)


def summarize(turns: list) -> dict:
  """Pooled tau per turn index and over everything, both heads, (when the turns were
  timed) the decode-phase speedups over target-only (sums over turns) and (under a
  lossy rule) the three runs' target log-likelihood per token."""
  def pooled(rows, name):
    calls = sum(r[name]["target_calls"] for r in rows)
    return (sum(r[name]["accepted"] for r in rows) + calls) / max(calls, 1)
  out = {"by_turn": []}
  for t in sorted({r["turn"] for r in turns}):
    rows = [r for r in turns if r["turn"] == t]
    out["by_turn"].append({"turn": t, "rows": len(rows), "tau_frozen": pooled(rows, "frozen"),
                           "tau_adapted": pooled(rows, "adapted")})
  out.update(tau_frozen=pooled(turns, "frozen"), tau_adapted=pooled(turns, "adapted"))
  if all("target_loglik" in r for r in turns):  # a lossy rule: per-token log-likelihoods
    out["loglik"] = {k: sum(_loglik(r, k) for r in turns) / max(sum(
        decode_tokens(r, k) + 1 for r in turns), 1) for k in ("target", "frozen", "adapted")}
  if all("target_decode_s" in r for r in turns):
    per_token = {k: sum(r[f"{k}_decode_s"] for r in turns) / max(sum(
        decode_tokens(r, k) for r in turns), 1) for k in ("target", "frozen", "adapted")}
    out.update(decode_speedup_frozen=per_token["target"] / per_token["frozen"],
               decode_speedup_adapted=per_token["target"] / per_token["adapted"])
  return out


def _loglik(turn: dict, who: str) -> float:
  return turn["target_loglik"] if who == "target" else turn[who]["loglik"]


def decode_tokens(turn: dict, who: str) -> int:
  """Tokens of ``who``'s decode phase in one turn (the first is the prefill's): its own
  answer's when the runs' answers differ (T > 0, or a lossy rule), else the shared
  answer's."""
  own = turn.get(who, {}).get("tokens") if who != "target" else None
  return (turn["tokens"] if own is None else own) - 1


def session_settings(r, cfg) -> dict:
  """What the replayed sessions depend on (the model, K, the adapter's settings, the
  sessions' draw and length): every record of replayed sessions keeps them."""
  return dict(target=r.model.model, k=r.chain.k,
              adapt={f: getattr(cfg, f) for f in ADAPT_SETTINGS},
              max_new_tokens=r.new_tokens.max_new_tokens, max_context=r.context.max_context,
              seed=r.seed.seed, turns=r.bench.turns, min_turns=r.bench.min_turns)


# The adapter's settings a record keeps.  Those added after some records were taken
# (adapter settings, ADAPT_ADDED, and the record's own, SETTINGS_ADDED): an older
# record ran with their defaults, so one it lacks reads as its default.
ADAPT_SETTINGS = ("every", "steps", "window", "rank", "learning_rate", "label_top_k", "loss",
                  "update_vocab", "weight_decay", "depths", "gate")
ADAPT_ADDED = ("loss", "update_vocab", "weight_decay", "depths", "gate")
SETTINGS_ADDED = ("timed", "session_set", "draft_shape", "verifier")


def added_defaults() -> tuple[dict, dict]:
  """``(adapter settings, record settings)``: the defaults of :data:`ADAPT_ADDED` (from
  ``OnlineAdaptation``) and of :data:`SETTINGS_ADDED` (from this binary's specs)."""
  from specjax.decoding.adaptation import OnlineAdaptation
  adapt = {f: getattr(OnlineAdaptation(), f) for f in ADAPT_ADDED}
  top = {f.name: f.default for spec in (OnlineAdaptationSpec, SessionKindSpec, SessionRuleSpec)
         for f in dataclasses.fields(spec) if f.name in SETTINGS_ADDED}
  return adapt, top


def settings(r: Run, cfg) -> dict:
  """What a record's sessions depend on: a resumed record must match them all."""
  out = dict(session_settings(r, cfg), temperature=r.temperature.temperature,
             timed=r.bench.timed, session_set=r.kind.session_set,
             draft_shape=r.kind.draft_shape, verifier=r.rule.canonical())
  if r.kind.draft_shape == "tree":
    out["eagle_tree"] = dataclasses.asdict(r.eagle_tree)
  return out


def _flag(command: str, name: str):
  """The value of ``--name=...`` in a stored command line, else None."""
  for part in command.split():
    if part.startswith(f"--{name}="):
      return part.split("=", 1)[1]
  return None


def record_settings(rec: dict) -> dict:
  """:func:`settings` of a stored record (older records name seed / turns /
  min_turns only in their command line; absent flags take their defaults; records
  taken before ``--temperature`` existed are greedy)."""
  if "settings" in rec:
    return {"temperature": 0.0, **rec["settings"]}
  cmd = rec["provenance"]["command"]
  get = lambda name, default: int(_flag(cmd, name) or default)
  return dict(target=rec["target"], k=rec["k"], adapt=rec["adapt"],
              max_new_tokens=rec["max_new_tokens"], max_context=rec["max_context"],
              seed=get("seed", 0), turns=get("turns", OnlineAdaptationSpec.turns),
              min_turns=get("min_turns", OnlineAdaptationSpec.min_turns), temperature=0.0)


def check_same_settings(path: str, have: dict, want: dict) -> None:
  """UsageError naming every setting in which the record at ``path`` (``have``) differs
  from this run's (``want``): a resumed record must be taken under one set of them (an
  adapter or record setting the record predates counts as its default:
  :func:`added_defaults`)."""
  adapt, top = added_defaults()
  have = {**{k: v for k, v in top.items() if k in want}, **have}
  if isinstance(have.get("adapt"), dict):
    have = dict(have, adapt={**adapt, **have["adapt"]})
  diff = [f"{k}: record {have.get(k)!r}, this run {v!r}" for k, v in want.items()
          if have.get(k) != v]
  if diff:
    raise app.UsageError(f"--output={path} holds sessions taken with other settings ("
                         + "; ".join(diff) + "); name a new --output to start afresh")


def resume_from(path: str, want: dict) -> tuple[list, list]:
  """``(turns, parts)`` already in the record at ``path`` (empty when there is none);
  UsageError when its settings differ from this run's (naming each)."""
  if not path or not os.path.exists(path):
    return [], []
  import json
  with open(path) as f:
    rec = json.load(f)
  check_same_settings(path, record_settings(rec), want)
  parts = rec.get("parts") or [dict(rec["provenance"],
                                    sessions=sorted({t["session"] for t in rec["turns"]}))]
  return rec["turns"], parts


def main(_):
  from experiments.common import cli
  from specjax import provenance
  r = build_run()
  cli.apply_decision_flag()
  stamp = provenance.stamp()
  setup = load_setup(r)
  want = settings(r, setup["cfg"])
  turns, parts = resume_from(r.output.output, want)
  done = {t["session"] for t in turns}
  ran = []
  for s, conv in enumerate(sessions(r, setup["ms"].encode_chat, r.kind.session_set)):
    if s in done:
      continue
    rows = run_session(r, setup, conv, s, 0)
    turns += [{"session": s, **row} for row in rows]
    ran.append(s)
    print(f"session {s}: " + ", ".join(
        f"turn {row['turn']} tau {row['frozen']['tau']:.2f} -> {row['adapted']['tau']:.2f}"
        for row in rows), flush=True)
    if r.output.output:  # after every session: a killed run resumes from here
      _write(r, setup, want, turns, parts, stamp, ran)
  print(summarize(turns))


def _write(r: Run, setup: dict, want: dict, turns: list, parts: list, stamp: dict,
           ran: list) -> None:
  """The record with every session so far; ``parts`` holds each run's provenance and
  the sessions it added (the top-level ``provenance`` is this run's)."""
  from benchmarks.records import write_record
  from specjax import provenance
  record = provenance.stamped(record_body(want, turns), stamp, dict(setup["ms"].sources))
  record["parts"] = parts + [dict(record["provenance"], sessions=list(ran))]
  write_record(r.output.output, record)


def record_body(want: dict, turns: list) -> dict:
  """The record's content before its stamp: the settings (also at the top level under
  the keys older records used), every turn in session order, the summary."""
  turns = sorted(turns, key=lambda t: (t["session"], t["turn"]))
  top = {k: want[k] for k in ("target", "k", "adapt", "max_new_tokens", "max_context")}
  return dict(benchmark="online_adaptation", **top, settings=want, turns=turns,
              summary=summarize(turns), load_end=os.getloadavg()[0])


if __name__ == "__main__":
  define_flags()
  app.run(main)
