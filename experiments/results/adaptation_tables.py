"""Online adaptation of the EAGLE-3 head over multi-turn sessions
(``benchmarks/online_adaptation.py``): per turn of the sessions and over all turns,
tau of the frozen and of the adapting head on the same sessions (greedy: the same
answers; at T > 0: the same prompts every turn, each run sampling its own answer), the adapted
head's tau against the frozen one's (paired over sessions, corrected over the
column), and the decode-phase speedups of both over target-only decoding timed beside
them.

Records: ``benchmarks/results/online_adaptation/smollm2.json`` (short sessions),
``smollm2_long.json`` (sessions of eight user turns: the learning curve, with rows
pooling the turns that start after 1,000 and 2,000 served tokens) and
``smollm2_long_t1.json`` (the same at T = 1; ``smollm2_long_t1_top8.json`` with labels of
the target's 8 most likely tokens, ``smollm2_long_t1_tv8.json`` with them and the
total-variation loss, ``smollm2_long_t1_top8_labels.json`` with updates moving only
the labels' tokens); ``smollm2_humaneval.json`` (HumanEval problems in sequence;
``smollm2_humaneval_decay.json`` with weight decay);
``smollm2_long_tree.json`` (the long sessions drafted by the head's EAGLE-2 tree);
``smollm2_cost.json`` (``benchmarks/adaptation_cost.py``: what
adaptation costs per round); ``smollm2_transfer.json``
(``benchmarks/adapter_transfer.py``: a session's adapter carried into other text).
"""

from __future__ import annotations

import functools
import json

import numpy as np

from experiments.common.bootstrap import bootstrap_ci, paired_ratio_gain
from experiments.results.families import VerdictColumn, family_note
from experiments.results.markdown import RESULTS, ci, path, table

ONLINE_ADAPTATION = f"{RESULTS}/online_adaptation/smollm2.json"
ONLINE_ADAPTATION_LONG = f"{RESULTS}/online_adaptation/smollm2_long.json"
ONLINE_ADAPTATION_LONG_T1 = f"{RESULTS}/online_adaptation/smollm2_long_t1.json"
ONLINE_ADAPTATION_LONG_T1_TOP8 = f"{RESULTS}/online_adaptation/smollm2_long_t1_top8.json"
ONLINE_ADAPTATION_LONG_T1_TV8 = f"{RESULTS}/online_adaptation/smollm2_long_t1_tv8.json"
ONLINE_ADAPTATION_LONG_T1_TOP8_LABELS = (
    f"{RESULTS}/online_adaptation/smollm2_long_t1_top8_labels.json")
ONLINE_ADAPTATION_HUMANEVAL = f"{RESULTS}/online_adaptation/smollm2_humaneval.json"
ONLINE_ADAPTATION_TREE = f"{RESULTS}/online_adaptation/smollm2_long_tree.json"
ONLINE_ADAPTATION_HUMANEVAL_DECAY = f"{RESULTS}/online_adaptation/smollm2_humaneval_decay.json"
ADAPTATION_COST = f"{RESULTS}/online_adaptation/smollm2_cost.json"
ADAPTATION_COST_TWO_STAGE = f"{RESULTS}/online_adaptation/smollm2_cost_two_stage.json"
ADAPTATION_COST_KEPT = f"{RESULTS}/online_adaptation/smollm2_cost_kept_outputs.json"
ADAPTATION_COST_KEPT_R7 = f"{RESULTS}/online_adaptation/smollm2_cost_kept_outputs_r7.json"
ONLINE_ADAPTATION_LONGER = f"{RESULTS}/online_adaptation/smollm2_longer.json"
ONLINE_ADAPTATION_MARS = f"{RESULTS}/online_adaptation/smollm2_long_mars.json"
ONLINE_ADAPTATION_DEPTH1 = f"{RESULTS}/online_adaptation/smollm2_long_depth1.json"
ONLINE_ADAPTATION_GATE = f"{RESULTS}/online_adaptation/smollm2_long_gate.json"
ONLINE_ADAPTATION_LONGER_GATE = f"{RESULTS}/online_adaptation/smollm2_longer_gate.json"
ONLINE_ADAPTATION_LONG_T1_DEPTH1 = f"{RESULTS}/online_adaptation/smollm2_long_t1_top8_depth1.json"
ONLINE_ADAPTATION_LONG_KEPT = f"{RESULTS}/online_adaptation/smollm2_long_kept.json"
ONLINE_ADAPTATION_LONGER_KEPT = f"{RESULTS}/online_adaptation/smollm2_longer_kept.json"
ONLINE_ADAPTATION_LONG_T1_TOP8_KEPT = (
    f"{RESULTS}/online_adaptation/smollm2_long_t1_top8_kept.json")
# the online-adaptation goal: adaptation adds at most this share of decode time (batch 1)
COST_GOAL = 0.05


def _tau_pairs(turns: list, head: str) -> np.ndarray:
  """``[n, 2]`` (tokens per target call: accepted + calls, calls) per session."""
  by: dict = {}
  for r in turns:
    a, c = r[head]["accepted"], r[head]["target_calls"]
    acc = by.setdefault(r["session"], [0, 0])
    acc[0] += a + c
    acc[1] += c
  return np.array([by[s] for s in sorted(by)], float)


def _time_pairs(turns: list, who: str) -> np.ndarray:
  """``[n, 2]`` (tokens, decode-phase seconds of ``who``) per session: at T > 0 each
  run's own answer (``turn[who]["tokens"]``), else the answer all three emitted."""
  by: dict = {}
  for r in turns:
    acc = by.setdefault(r["session"], [0.0, 0.0])
    own = r[who].get("tokens") if who in ("frozen", "adapted") else None
    acc[0] += (r["tokens"] if own is None else own) - 1  # the first is the prefill's
    acc[1] += r[f"{who}_decode_s"]
  return np.array([by[s] for s in sorted(by)], float)


def _speedup(turns: list, who: str) -> str:
  if not all("target_decode_s" in r for r in turns):
    return "not timed"
  pairs = _time_pairs(turns, who), _time_pairs(turns, "target")
  g = paired_ratio_gain(*pairs)
  if len(pairs[0]) < MIN_SESSIONS:
    return f"{g['diff'] + 1:.2f}"
  return f"{g['diff'] + 1:.2f} {ci([v + 1 for v in g['ci95']], '.2f')}"


# A percentile bootstrap over n sessions has C(2n - 1, n) distinct resamples: 10 for
# three sessions, 35 for four. Below four the interval is not worth a verdict.
MIN_SESSIONS = 4


def _row(label: str, turns: list, column: VerdictColumn) -> list:
  frozen, adapted = _tau_pairs(turns, "frozen"), _tau_pairs(turns, "adapted")
  tau = lambda x: x[:, 0].sum() / x[:, 1].sum()
  gain = paired_ratio_gain(adapted, frozen)
  verdict = (column.cell(label, gain) if len(frozen) >= MIN_SESSIONS else
             f"{gain['diff']:+.3f}: no interval or verdict ({len(frozen)} session(s); a "
             f"bootstrap needs >= {MIN_SESSIONS})")
  return [label, f"{len(frozen)}", f"{sum(r['tokens'] for r in turns)}",
          f"{tau(frozen):.2f}", f"{tau(adapted):.2f}", verdict,
          _speedup(turns, "frozen"), _speedup(turns, "adapted")]


LABELS_ONLY = ", updates moving only the logits of their labels' tokens"


def _depths(depths: int) -> str:
  """The draft depths the adapter changed, when not all."""
  if not depths:
    return ""
  return (", adapting the first draft only" if depths == 1 else
          f", adapting the first {depths} draft depths")


def _gate(gate: int) -> str:
  """The prequential gate, when there was one."""
  return f", gated (memory {gate} entries)" if gate else ""


def _drafts(rec: dict) -> str:
  """What drafted: the EAGLE-3 chain (K) or its EAGLE-2 dynamic tree (its sizes)."""
  st = rec.get("settings", {})
  if st.get("draft_shape", "chain") == "tree":
    t = st["eagle_tree"]
    return (f"EAGLE-3 head's EAGLE-2 dynamic tree (depth {t['eagle_depth']}, top-k "
            f"{t['eagle_top_k']}, {t['eagle_total_tokens']} nodes)")
  return f"EAGLE-3 chain K = {rec['k']}"


def _problems(rec: dict) -> str:
  """How a HumanEval session's turns are formed (nothing for chats)."""
  if rec.get("settings", {}).get("session_set", "sharegpt") != "humaneval":
    return ""
  return "; each session a run of HumanEval problems, each answered in a context of its own"


def _span(sessions: list) -> str:
  """``1-3`` for consecutive (1-based) conversation numbers, else ``1, 3, 6``."""
  s = sorted(sessions)
  if s and s == list(range(s[0], s[-1] + 1)) and len(s) > 1:
    return f"{s[0]}-{s[-1]}"
  return ", ".join(map(str, s))


def online_adaptation_table(rel: str = ONLINE_ADAPTATION, served_from: tuple = ()) -> str:
  """One row per turn index of the sessions, then, for each ``served_from`` threshold,
  the turns that start after at least that many tokens served in their session, then
  all turns pooled (module docstring)."""
  with open(path(rel)) as f:
    rec = json.load(f)
  turns = rec["turns"]
  unit = "problem" if _problems(rec) else "turn"
  column = VerdictColumn("adapted vs frozen", "every turn index and all turns pooled: the "
                         "adapting head's tau against the frozen head's on the same sessions")
  rows = [_row(f"{unit} {t + 1}", [r for r in turns if r["turn"] == t], column)
          for t in sorted({r["turn"] for r in turns})]
  for least in served_from:
    later = [r for r in turns if r["served_before"] >= least]
    if later:
      rows.append(_row(f"{unit}s after >= {least:,} served tokens", later, column))
  rows.append(_row(f"all {unit}s", turns, column))
  head = [f"{unit}s", "sessions", "tokens", "tau, frozen", "tau, adapting",
          "adapting / frozen tau - 1 [95% CI, paired over sessions], MDE (80% power): verdict",
          "decode-phase speedup, frozen [95% CI]", "decode-phase speedup, adapting [95% CI]"]
  a = rec["adapt"]
  t = rec.get("settings", {}).get("temperature", 0.0)
  rule = rec.get("settings", {}).get("verifier", "lossless")
  own = ("each run sampled its own answer under the turn's key" if t else
         f"each run emitted its own answer (verified by `{rule}`, a lossy rule)")
  answers = ("the three runs of every turn emitted the same tokens" if t == 0 and
             rule == "lossless" else own + (
                 "" if _problems(rec) else ", and the next turn's context holds target-only's"))
  what = "problem runs" if _problems(rec) else "conversations"
  runs = "; ".join(f"{what} {_span([i + 1 for i in p['sessions']])}: `{p['command']}` at commit "
                   f"`{p['git_commit'][:10]}`" for p in rec["parts"]) if rec.get("parts") else (
      f"`{rec['provenance']['command']}` at commit `{rec['provenance']['git_commit'][:10]}`")
  note = (f"\n\nRecord `{rel}`: {runs}; "
          f"adaptation every {a['every']} rounds, {a['steps']} Adam step(s) at learning rate "
          f"{a['learning_rate']:g}, window {a['window']}, rank {a['rank']}, "
          f"{a['label_top_k']} label token(s)"
          f"{'' if a.get('loss', 'ce') == 'ce' else ', loss ' + a['loss']}"
          f"{'' if a.get('update_vocab', 'all') == 'all' else LABELS_ONLY}"
          f"{'' if not a.get('weight_decay') else ', weight decay %g' % a['weight_decay']}"
          f"{_depths(a.get('depths', 0))}{_gate(a.get('gate', 0))}; "
          f"{_drafts(rec)}, T = {t:g}, {rec['max_new_tokens']} new tokens per turn"
          f"{_problems(rec)}; {answers}{_gate_counts(turns) if a.get('gate') else ''}.")
  return table(head, column.fill(rows)) + note + "\n\n" + family_note(column.family())


def _gate_counts(turns: list) -> str:
  """How often a gated adapter's gate was shut: the updates after which it was, over
  all updates, from each session's last turn (the counts run over a session; a record
  without a gate holds them too, all 0, and its table does not say so)."""
  last = {}
  for r in turns:
    if "gate_shut" in r["adapted"] and r["turn"] >= last.get(r["session"], {}).get("turn", -1):
      last[r["session"]] = dict(r["adapted"], turn=r["turn"])
  if not last:
    return ""
  shut = sum(a["gate_shut"] for a in last.values())
  updates = sum(a["updates"] for a in last.values())
  return (f"; the gate was shut after {shut:,} of the adapting head's {updates:,} updates "
          f"({100 * shut / max(updates, 1):.0f}%)")




# the served-token bins of the learning curves: turns grouped by the tokens their
# session served before them
CURVE_EDGES = (0, 250, 500, 1000, 1500, 2000)


def served_bins(turns: list, edges: tuple = CURVE_EDGES) -> list[dict]:
  """The learning curve: turns grouped by ``served_before`` into ``[edges[i],
  edges[i + 1])`` (the last bin open-ended), each bin's pooled tau and acceptance rate
  per draft position (accepted / offered: the position's acceptance given it was
  reached) for both heads.  Empty bins are left out.  Returns per bin ``{"low",
  "high" (None: open), "turns", "mean_served" (their mean ``served_before``),
  "sessions", "tokens", "tau": {head: float},
  "position": {head: [K floats, nan where never offered]}}``."""
  out = []
  for i, low in enumerate(edges):
    high = edges[i + 1] if i + 1 < len(edges) else None
    rows = [r for r in turns if low <= r["served_before"] and (high is None or
                                                                r["served_before"] < high)]
    if not rows:
      continue
    tau, pos = {}, {}
    for head in ("frozen", "adapted"):
      calls = sum(r[head]["target_calls"] for r in rows)
      tau[head] = (sum(r[head]["accepted"] for r in rows) + calls) / max(calls, 1)
      acc = np.sum([r[head]["accept_counts"] for r in rows], 0)
      off = np.sum([r[head]["offered_counts"] for r in rows], 0)
      pos[head] = np.where(off > 0, acc / np.maximum(off, 1), np.nan).tolist()
    out.append(dict(low=low, high=high, turns=len(rows),
                    mean_served=float(np.mean([r["served_before"] for r in rows])),
                    sessions=len({r["session"] for r in rows}),
                    tokens=sum(r["tokens"] for r in rows), tau=tau, position=pos))
  return out


def _arrow(frozen: float, adapted: float) -> str:
  """``frozen -> adapted`` (``-`` where the frozen rate was never measured)."""
  return "-" if np.isnan(frozen) else f"{frozen:.2f} -> {adapted:.2f}"


def _bin_label(b: dict) -> str:
  return f"{b['low']:,}-{b['high']:,}" if b["high"] is not None else f">= {b['low']:,}"


def learning_curve_table(rel: str, figure: str = "") -> str:
  """Per bin of tokens served before a turn (:func:`served_bins`): tau and the
  acceptance rate at each draft position, frozen -> adapting, pooled over the turns in
  the bin (descriptive: the verdicts are the per-turn table's)."""
  with open(path(rel)) as f:
    rec = json.load(f)
  bins = served_bins(rec["turns"])
  k = len(bins[0]["position"]["frozen"])
  rows = [[_bin_label(b), f"{b['sessions']}", f"{b['turns']}", f"{b['tokens']:,}",
           _arrow(b["tau"]["frozen"], b["tau"]["adapted"])]
          + [_arrow(b["position"]["frozen"][j], b["position"]["adapted"][j]) for j in range(k)]
          for b in bins]
  head = (["tokens served before the turn", "sessions", "turns", "tokens",
           "tau, frozen -> adapting"]
          + [f"acceptance at position {j + 1}, frozen -> adapting" for j in range(k)])
  note = (f"\n\nAcceptance at position j: drafts accepted there over the rounds that "
          f"reached it (position 1 is the head's agreement with the target's next token). "
          f"Record `{rel}` (settings and commands under its per-turn table)"
          + (f"; figure `{figure}`." if figure else "."))
  return table(head, rows) + note


def position_table(rels: dict) -> str:
  """Per record (``rels``: row label -> record): the acceptance rate at each draft
  position over all its turns, frozen -> adapting (:func:`served_bins` with one bin)."""
  rows, k = [], 0
  for label, rel in rels.items():
    with open(path(rel)) as f:
      rec = json.load(f)
    b = served_bins(rec["turns"], edges=(0,))[0]
    pos = b["position"]
    k = max(k, len(pos["frozen"]))
    cells = [_arrow(f, a) for f, a in zip(pos["frozen"], pos["adapted"])]
    rows.append([label, f"`{rel.rsplit('/', 1)[-1]}`", f"{b['sessions']}",
                 f"{b['tau']['frozen']:.2f} -> {b['tau']['adapted']:.2f}"] + cells)
  rows = [r + ["-"] * (4 + k - len(r)) for r in rows]
  head = (["setting", "record", "sessions", "tau, frozen -> adapting"]
          + [f"position {j + 1}" for j in range(k)])
  return table(head, rows) + ("\n\nAcceptance rate at each draft position over all turns, "
                              "frozen -> adapting: drafts accepted there over the rounds "
                              "that reached it (a tree's position j: its depth j). Records "
                              "under `benchmarks/results/online_adaptation/`; settings and "
                              "commands under each record's own table.")


def two_settings_table(rel: str, base: str, name: str, base_name: str,
                       served_from: tuple = ()) -> str:
  """Two adapter settings on the same greedy sessions (records ``rel`` and ``base``):
  per turn index, for each ``served_from`` threshold the turns after that many served
  tokens, and pooled, the adapting head's tau under each and ``rel``'s against
  ``base``'s, paired over the sessions both hold (Holm over the column).  Greedy
  lossless sessions are the target's whatever drafts them, so the two records' frozen
  runs must agree turn by turn (``ValueError`` otherwise: other sessions)."""
  recs = []
  for r in (rel, base):
    with open(path(r)) as f:
      recs.append(json.load(f))
  keyed = [{(t["session"], t["turn"]): t for t in rec["turns"]} for rec in recs]
  common = sorted(set(keyed[0]) & set(keyed[1]))
  for k in common:
    a, b = keyed[0][k]["frozen"], keyed[1][k]["frozen"]
    if (a["accepted"], a["target_calls"]) != (b["accepted"], b["target_calls"]):
      raise ValueError(f"{rel} and {base} differ at session {k[0]}, turn {k[1]}: the frozen "
                       f"head's rounds must be the same (greedy, the same sessions)")
  # ``_row`` compares "adapted" against "frozen": put the base setting's adapting run there
  pairs = [dict(keyed[0][k], frozen=keyed[1][k]["adapted"]) for k in common]
  column = VerdictColumn(f"{name} vs {base_name}", f"every turn index and all turns pooled: "
                         f"the adapting head's tau with {name} against {base_name}, on the "
                         f"same sessions")
  rows = [_row(f"turn {t + 1}", [r for r in pairs if r["turn"] == t], column)[:6]
          for t in sorted({r["turn"] for r in pairs})]
  for least in served_from:
    later = [r for r in pairs if r["served_before"] >= least]
    if later:
      rows.append(_row(f"turns after >= {least:,} served tokens", later, column)[:6])
  rows.append(_row("all turns", pairs, column)[:6])
  head = ["turns", "sessions", "tokens", f"tau, adapting, {base_name}",
          f"tau, adapting, {name}", f"{name} / {base_name} tau - 1 [95% CI, paired over "
          f"sessions], MDE (80% power): verdict"]
  note = (f"\n\nRecords `{rel}` ({name}) and `{base}` ({base_name}), their common sessions; "
          f"the frozen head's rounds agree turn by turn (the same greedy sessions).")
  return table(head, column.fill(rows)) + note + "\n\n" + family_note(column.family())


def _loglik_pairs(turns: list, who: str) -> np.ndarray:
  """``[n, 2]`` (log-likelihood sum, tokens) of ``who``'s answers per session."""
  by: dict = {}
  for r in turns:
    ll, n = ((r["target_loglik"], r["tokens"]) if who == "target" else
             (r[who]["loglik"], r[who].get("tokens", r["tokens"])))
    acc = by.setdefault(r["session"], [0.0, 0.0])
    acc[0] += ll
    acc[1] += n
  return np.array([by[s] for s in sorted(by)], float)


def lossy_loglik_table(rel: str) -> str:
  """Under a lossy rule (``online_adaptation --verifier``): per run (target-only, the
  frozen head's, the adapting head's) the target's log-likelihood per token of its own
  answers, and each head's against target-only's and the adapting head's against the
  frozen head's (differences in nats per token, paired over sessions, Holm over the
  three)."""
  from experiments.common.bootstrap import paired_ratio_difference
  with open(path(rel)) as f:
    rec = json.load(f)
  turns = rec["turns"]
  if not all("target_loglik" in r for r in turns):
    raise ValueError(f"{rel}: turns without log-likelihoods (a lossless record?)")
  pairs = {who: _loglik_pairs(turns, who) for who in ("target", "frozen", "adapted")}
  column = VerdictColumn("log-likelihood difference", "each head's answers against "
                         "target-only's, and the adapting head's against the frozen head's: "
                         "the target's log-likelihood per token", up="higher", down="lower")
  rule = rec["settings"]["verifier"]
  names = {"target": "target-only", "frozen": f"frozen head, `{rule}`",
           "adapted": f"adapting head, `{rule}`"}
  rows = []
  for who, against in (("target", None), ("frozen", "target"), ("adapted", "target"),
                       ("adapted", "frozen")):
    x = pairs[who]
    d = None if against is None else paired_ratio_difference(x, pairs[against])
    cell = ("-" if d is None else column.cell((who, against), d) if len(x) >= MIN_SESSIONS
            else f"{d['diff']:+.3f}: no interval or verdict ({len(x)} session(s))")
    rows.append([names[who], "-" if against is None else names[against], f"{len(x)}",
                 f"{int(x[:, 1].sum())}", f"{x[:, 0].sum() / x[:, 1].sum():.3f}", cell])
  head = ["answers", "against", "sessions", "tokens", "log-likelihood per token (nats)",
          "difference per token [95% CI, paired over sessions], MDE (80% power): verdict"]
  st = rec["settings"]
  note = (f"\n\nThe target's log-likelihood (temperature 1) of every run's own answers, "
          f"T = {st['temperature']:g}; the conversation goes on with target-only's answer. "
          f"Record `{rel}` (settings and commands under the table of its tau).")
  return table(head, column.fill(rows)) + note + "\n\n" + family_note(column.family())


ADAPTER_TRANSFER = f"{RESULTS}/online_adaptation/smollm2_transfer.json"
# how far the carried adapter's agreement with the target's greedy token may fall below
# the frozen head's on unlike text (the online-adaptation goal: at most 1 point)
AGREEMENT_TOLERANCE = 0.01


def _counts(rows: list, what: str) -> np.ndarray:
  """``[P, 2]`` per prompt: (accepted + calls, calls) for ``"tau"``; (accepted, offered)
  at draft position 1 for ``"agreement"``."""
  if what == "tau":
    return np.array([[r["accepted"] + r["target_calls"], r["target_calls"]] for r in rows], float)
  return np.array([[r["accept_counts"][0], r["offered_counts"][0]] for r in rows], float)


def _agreement_verdict(d: dict) -> str:
  """Against the goal that agreement falls by at most :data:`AGREEMENT_TOLERANCE`: holds
  when the interval lies above minus the tolerance, fails when below it."""
  lo, hi = d["ci95"]
  tol = AGREEMENT_TOLERANCE
  if lo > -tol:
    return f"within {100 * tol:.0f} point"
  return f"falls by more than {100 * tol:.0f} point" if hi < -tol else "inconclusive"


def adapter_transfer_table(rel: str = ADAPTER_TRANSFER) -> str:
  """The carried adapter on unlike text (``benchmarks/adapter_transfer.py``): per prompt
  set and pooled, per arm (the frozen head, a fresh adapting head, the adapter carried
  from each session) tau and the position-1 acceptance (the head's agreement with the
  target's greedy token), and the carried arm against each baseline -- tau (relative,
  Holm over the column) and agreement (points; against the frozen head, the 1-point
  goal) -- with 95% intervals resampling sessions and prompts
  (:func:`~experiments.common.bootstrap.crossed_ratio_contrast`)."""
  with open(path(rel)) as f:
    rec = json.load(f)
  base, sessions = rec["baselines"], sorted(rec["sessions"], key=lambda s: s["session"])
  sets = sorted({p.split(":", 1)[0] for p in rec["prompts"]})
  column = VerdictColumn("carried adapter", "every prompt set and all pooled, against each "
                         "baseline: the carried adapter's tau on the unlike prompts against "
                         "the baseline's, sessions and prompts resampled")
  rows = []
  for name in sets + (["all"] if len(sets) > 1 else []):
    keep = [i for i, p in enumerate(rec["prompts"]) if name == "all" or p.startswith(name + ":")]
    pick = lambda rows_: [rows_[i] for i in keep]
    rows += _transfer_rows(name, {a: pick(base[a]) for a in ("frozen", "fresh")},
                           [pick(x["carried"]) for x in sessions], column)
  s = rec["settings"]
  served = [x["served"] for x in sessions]
  a = s["adapt"]
  note = (f"\n\n{len(rec['prompts'])} held-out prompts ({', '.join(sets)}), "
          f"{s['unlike_new_tokens']} greedy tokens each; sessions of up to {s['turns']} user "
          f"turns ({min(served):,}-{max(served):,} tokens served before the adapter was "
          f"carried); EAGLE-3 chain K = {s['k']}, adaptation every {a['every']} rounds at "
          f"learning rate {a['learning_rate']:g}, rank {a['rank']}, window {a['window']}. "
          f"Agreement verdicts against the goal that it falls by at most "
          f"{100 * AGREEMENT_TOLERANCE:.0f} point below the frozen head's. Record `{rel}`: "
          + "; ".join(f"`{p['command']}` at commit `{p['git_commit'][:10]}`"
                      for p in rec["parts"]) + ".")
  head = ["prompts", "head", "tau", "agreement (position-1 acceptance)",
          "carried / this tau - 1 [95% CI, sessions x prompts], MDE (80% power): verdict",
          "carried minus this agreement, points [95% CI]"]
  return table(head, column.fill(rows)) + note + "\n\n" + family_note(column.family())


def _transfer_rows(name: str, base: dict, carried_rows: list, column) -> list:
  """The three rows of one prompt set (:func:`adapter_transfer_table`)."""
  from experiments.common.bootstrap import crossed_ratio_contrast
  rate = lambda x: x[..., 0].sum() / x[..., 1].sum()
  carried = {w: np.stack([_counts(c, w) for c in carried_rows]) for w in ("tau", "agreement")}
  rows = []
  for arm, label in (("frozen", "the frozen head"), ("fresh", "a fresh adapting head")):
    ref = {w: _counts(base[arm], w) for w in ("tau", "agreement")}
    gain = crossed_ratio_contrast(carried["tau"], ref["tau"])
    agree = crossed_ratio_contrast(carried["agreement"], ref["agreement"], difference=True)
    rows.append([name, label, f"{rate(ref['tau']):.2f}", f"{rate(ref['agreement']):.3f}",
                 column.cell((name, arm), gain),
                 f"{100 * agree['diff']:+.1f} {ci([100 * v for v in agree['ci95']], '+.1f')}"
                 + (f": {_agreement_verdict(agree)}" if arm == "frozen" else "")])
  rows.append([name, f"the adapter carried from each of {len(carried_rows)} sessions",
               f"{rate(carried['tau']):.2f}", f"{rate(carried['agreement']):.3f}", "-", "-"])
  return rows

def adaptation_cost_table(rel: str = ADAPTATION_COST) -> str:
  """Per null adapter (``benchmarks/adaptation_cost.py``): the decode-phase time it adds
  to the frozen chain's, as a share with its interval over prompts (Bonferroni over the
  adapters) and a verdict against the goal, and in target decode steps per round."""
  with open(path(rel)) as f:
    rec = json.load(f)
  rows_in, summary = rec["prompts"], rec["summary"]
  m = len(summary)
  head = ["adapter (learning rate replaced)", "prompts", "rounds", "updates",
          "same rounds as frozen", f"decode time added [{100 - 5 / m:g}% CI over prompts]: "
          f"against <= {100 * COST_GOAL:g}%", "added target steps per round"]
  rows = []
  for name, s in summary.items():
    pairs = np.array([[r["decode_s"][name], r["decode_s"]["frozen"]] for r in rows_in])
    share = lambda a: a[:, 0].sum() / a[:, 1].sum() - 1
    lo, hi = bootstrap_ci(pairs, share, alpha=0.05 / m)
    verdict = ("within the goal" if hi <= COST_GOAL else "above the goal" if lo > COST_GOAL
               else "inconclusive")
    rows.append([f"`{name}`", f"{len(rows_in)}",
                 f"{sum(r['calls']['frozen']['target_calls'] for r in rows_in)}",
                 f"{s['updates']}", "yes" if s["same_rounds"] else "no",
                 f"{100 * s['share']:+.1f}% [{100 * lo:+.1f}, {100 * hi:+.1f}]: {verdict}",
                 f"{s['steps_per_round']:.3f}"])
  prov = rec["provenance"]
  note = (f"\n\nBatch 1, greedy, EOS off, {rec['max_new_tokens']} new tokens per prompt, "
          f"EAGLE-3 chain K = {rec['k']}; each null adapter is its mode with learning rate "
          f"{rec['null_learning_rate']:g}, so its drafts and rounds are the frozen head's and "
          f"the time between them is the adaptation's own; median of {rec['repeats']} "
          f"round-robin repeats. Family: the {m} adapters' intervals, Bonferroni at 5%. "
          f"Record `{rel}`: `{prov['command']}` at commit `{prov['git_commit'][:10]}`.")
  return table(head, rows) + note


# table name -> (its record, the served-token thresholds of its pooled rows): the
# tables of replayed sessions (:func:`online_adaptation_table`)
SESSION_TABLES = {
    "online_adaptation_smollm2": (ONLINE_ADAPTATION, ()),
    "online_adaptation_long_smollm2": (ONLINE_ADAPTATION_LONG, (1000, 2000)),
    "online_adaptation_long_t1_smollm2": (ONLINE_ADAPTATION_LONG_T1, (1000, 2000)),
    "online_adaptation_long_t1_top8_smollm2": (ONLINE_ADAPTATION_LONG_T1_TOP8, (1000, 2000)),
    "online_adaptation_long_t1_tv8_smollm2": (ONLINE_ADAPTATION_LONG_T1_TV8, (1000, 2000)),
    "online_adaptation_long_t1_top8_labels_smollm2": (ONLINE_ADAPTATION_LONG_T1_TOP8_LABELS,
                                                      (1000, 2000)),
    "online_adaptation_long_tree_smollm2": (ONLINE_ADAPTATION_TREE, (500,)),
    "online_adaptation_humaneval_smollm2": (ONLINE_ADAPTATION_HUMANEVAL, (500,)),
    "online_adaptation_humaneval_decay_smollm2": (ONLINE_ADAPTATION_HUMANEVAL_DECAY, (500,)),
    "online_adaptation_longer_smollm2": (ONLINE_ADAPTATION_LONGER, (1000, 2000)),
    "online_adaptation_long_mars_smollm2": (ONLINE_ADAPTATION_MARS, (500,)),
    "online_adaptation_long_t1_top8_depth1_smollm2": (ONLINE_ADAPTATION_LONG_T1_DEPTH1,
                                                      (1000, 2000)),
    "online_adaptation_long_depth1_smollm2": (ONLINE_ADAPTATION_DEPTH1, (1000, 2000)),
    "online_adaptation_long_gate_smollm2": (ONLINE_ADAPTATION_GATE, (1000, 2000)),
    "online_adaptation_longer_gate_smollm2": (ONLINE_ADAPTATION_LONGER_GATE, (1000, 2000)),
    "online_adaptation_long_kept_smollm2": (ONLINE_ADAPTATION_LONG_KEPT, (1000, 2000)),
    "online_adaptation_longer_kept_smollm2": (ONLINE_ADAPTATION_LONGER_KEPT, (1000, 2000)),
    "online_adaptation_long_t1_top8_kept_smollm2": (ONLINE_ADAPTATION_LONG_T1_TOP8_KEPT,
                                                    (1000, 2000)),
}
# every other table of this module -> (its function, the record it reads)
OTHER_TABLES = {
    "online_adaptation_long_curve_smollm2": (functools.partial(
        learning_curve_table, figure="docs/figures/online_adaptation_curve_smollm2.png"),
        ONLINE_ADAPTATION_LONG),
    "online_adaptation_longer_curve_smollm2": (learning_curve_table, ONLINE_ADAPTATION_LONGER),
    "online_adaptation_long_mars_loglik_smollm2": (lossy_loglik_table, ONLINE_ADAPTATION_MARS),
    "adapter_transfer_smollm2": (adapter_transfer_table, ADAPTER_TRANSFER),
    "adaptation_cost_smollm2": (adaptation_cost_table, ADAPTATION_COST),
    "adaptation_cost_two_stage_smollm2": (adaptation_cost_table, ADAPTATION_COST_TWO_STAGE),
    "adaptation_cost_kept_outputs_smollm2": (adaptation_cost_table, ADAPTATION_COST_KEPT),
    "adaptation_cost_kept_outputs_r7_smollm2": (adaptation_cost_table, ADAPTATION_COST_KEPT_R7),
}
# the records set side by side per draft position (:func:`position_table`)
POSITION_RECORDS = {
    "T = 0, chain": ONLINE_ADAPTATION_LONG,
    "T = 0, EAGLE-2 tree": ONLINE_ADAPTATION_TREE,
    "T = 0, HumanEval problems in sequence": ONLINE_ADAPTATION_HUMANEVAL,
    "T = 0, chain verified by MARS (theta 0.9)": ONLINE_ADAPTATION_MARS,
    "T = 0, chain, first draft only": ONLINE_ADAPTATION_DEPTH1,
    "T = 1, top-token labels": ONLINE_ADAPTATION_LONG_T1,
    "T = 1, 8 label tokens": ONLINE_ADAPTATION_LONG_T1_TOP8,
    "T = 1, 8 label tokens, total-variation loss": ONLINE_ADAPTATION_LONG_T1_TV8,
    "T = 1, 8 label tokens, labels-only update": ONLINE_ADAPTATION_LONG_T1_TOP8_LABELS,
    "T = 1, 8 label tokens, first draft only": ONLINE_ADAPTATION_LONG_T1_DEPTH1,
}
TABLES = {**{name: functools.partial(online_adaptation_table, rel, served)
             for name, (rel, served) in SESSION_TABLES.items()},
          **{name: functools.partial(fn, rel) for name, (fn, rel) in OTHER_TABLES.items()},
          "online_adaptation_positions_smollm2": functools.partial(position_table,
                                                                   POSITION_RECORDS),
          "online_adaptation_depth1_vs_all_smollm2": functools.partial(
              two_settings_table, ONLINE_ADAPTATION_DEPTH1, ONLINE_ADAPTATION_LONG,
              "the first draft adapted", "every depth adapted"),
          "online_adaptation_gate_vs_ungated_smollm2": functools.partial(
              two_settings_table, ONLINE_ADAPTATION_GATE, ONLINE_ADAPTATION_LONG, "gated",
              "ungated", served_from=(1000,)),
          "online_adaptation_longer_gate_vs_ungated_smollm2": functools.partial(
              two_settings_table, ONLINE_ADAPTATION_LONGER_GATE, ONLINE_ADAPTATION_LONGER,
              "gated", "ungated", served_from=(1000, 2000)),
          "online_adaptation_kept_vs_rerun_smollm2": functools.partial(
              two_settings_table, ONLINE_ADAPTATION_LONG_KEPT, ONLINE_ADAPTATION_LONG,
              "kept outputs", "window rerun", served_from=(1000,)),
          "online_adaptation_longer_kept_vs_rerun_smollm2": functools.partial(
              two_settings_table, ONLINE_ADAPTATION_LONGER_KEPT, ONLINE_ADAPTATION_LONGER,
              "kept outputs", "window rerun", served_from=(1000, 2000))}
# table name -> the records it reads (for its provenance note)
RECORDS = {**{name: (rel,) for name, (rel, _) in SESSION_TABLES.items()},
           **{name: (rel,) for name, (_, rel) in OTHER_TABLES.items()},
           "online_adaptation_positions_smollm2": tuple(POSITION_RECORDS.values()),
           "online_adaptation_depth1_vs_all_smollm2": (ONLINE_ADAPTATION_DEPTH1,
                                                       ONLINE_ADAPTATION_LONG),
           "online_adaptation_gate_vs_ungated_smollm2": (ONLINE_ADAPTATION_GATE,
                                                         ONLINE_ADAPTATION_LONG),
           "online_adaptation_longer_gate_vs_ungated_smollm2": (
               ONLINE_ADAPTATION_LONGER_GATE, ONLINE_ADAPTATION_LONGER),
           "online_adaptation_kept_vs_rerun_smollm2": (ONLINE_ADAPTATION_LONG_KEPT,
                                                       ONLINE_ADAPTATION_LONG),
           "online_adaptation_longer_kept_vs_rerun_smollm2": (ONLINE_ADAPTATION_LONGER_KEPT,
                                                              ONLINE_ADAPTATION_LONGER)}
