"""The propositions claims table (experiments.results.propositions_tables) on small
hand-made records: it reads the right configuration for each claim, the verdicts follow
the numbers (and turn when the numbers do), and a missing configuration is named.
No model, no JAX."""

import json

import pytest

from experiments.results import propositions_tables as pt

TS = [1.0, 0.5, 0.0]


def _rec(part, result, **config):
  key = "|".join([part, "real"] + [f"{k}={v}" for k, v in sorted(config.items())])
  return {"key": key, "config": {"part": part, "source": "real", **config}, "result": result}


def _records(eta_deltas=(0.011, 0.008, 0.006), sd_kl_at_q_equals_p=3e-8, mars_accept=0.268):
  kl = lambda rule, family, **kw: _rec(
      "sd" if not kw else "eagle",
      {"n": 1500, "ts": TS, "kl_mean": [0.05, 0.02, sd_kl_at_q_equals_p if not kw else 0.2063],
       "tv_mean": [0.1, 0.05, 0.0], "limit": 0.2063 if kw else 0.0},
      rule=rule, family=family, **kw)
  recs = [kl(r, "draft") for r in ("spec_cascade:p_base=0.3", "typical:eps=0.09")]
  recs += [kl(r, "draft", top_k=1) for r in ("spec_cascade:p_base=0.3", "typical:eps=0.09")]
  recs.append(_rec("sd", {"n": 1500, "ts": TS, "kl_mean": [None, None, None],
                          "tv_mean": [0.1, 0.05, 0.027], "limit": 0.0},
                   rule="typical:eps=0.09,gate=soft", family="draft"))
  recs.append(_rec("margins", {"n": 1000, "summary": {
      "n": 1000, "frac_relaxed": 0.6, "greedy_reject_rate_relaxed": 0.8,
      "greedy_reject_rate": 0.74}}))
  for draft in ("sampled", "top1"):
    recs.append(_rec("mars", {"n": 1500, "thetas": [0.8, 0.9], "kl_mean": [0.06, 0.042],
                              "tv_mean": [0.05, 0.03], "accept_mean": [0.3, mars_accept],
                              "lossless_accept_mean": 0.238}, draft=draft))
  recs.append(_rec("truncation", {"values": [0.05, 0.15, 0.25], "gamma": 10, "be_pq": 1.31,
                                  "delta_be_paqa": list(eta_deltas)}, kind="eta", family="draft"))
  recs.append(_rec("truncation", {"values": [0.1, 0.5, 0.9], "gamma": 10, "be_pq": 1.31,
                                  "delta_be_paqa": [0.017, 0.02, 0.029]}, kind="min_p",
                   family="draft"))
  for trunc in (True, False):
    sign = 1 if trunc else -1
    recs.append(_rec("alignment", {"values": [0.05, 0.1], "rhos": [0.0, 0.5, 1.0],
                                   "delta_be": [[sign * 0.01, sign * 0.009],
                                                [sign * 0.6, sign * 0.571], [0.0, sign * 1.0]]},
                     kind="eta", family="draft", truncate_draft=trunc))
  return recs


def _table(tmp_path, recs) -> list[str]:
  p = tmp_path / "records.jsonl"
  p.write_text("".join(json.dumps(r) + "\n" for r in recs))
  return pt.propositions_claims(str(p)).splitlines()


def test_claims_read_their_configurations(tmp_path):
  lines = _table(tmp_path, _records())
  assert len(lines) == 2 + 8
  fig1d = lines[2]
  # 60% of 1000 positions relaxed, 80% of those rejected: 480 / 600 vs 2590 / 4838
  assert "80.0% (480 / 600" in fig1d and fig1d.endswith("| differ |")
  assert "sampled drafts: acceptance 0.238 -> 0.268, KL(P_MARS ‖ p) 0.0420" in lines[3]
  assert "agree in sign" in lines[3]
  assert "SD 0.0500 -> 3.0e-08; top-1 0.0500 -> 0.2063 (limit 0.2063)" in lines[4]
  assert lines[4].endswith("| agree (exact) |")
  assert "KL(P ‖ p_A) inf, TV 0.0270" in lines[6]
  assert "+0.011 (0.05), +0.008 (0.15), +0.006 (0.25)" in lines[7]
  # a sign read from means over sampled contexts: no interval over conversations
  assert "agree in sign, exploratory (means of exact per-context values" in lines[7]
  assert "no interval over conversations" in lines[3]
  assert "differ: the gain does not shrink" in lines[8]  # min-p: +0.017 -> +0.029
  assert "+0.009 (0), +0.571 (0.5), +1.000 (1)" in lines[9]
  assert "(p_A, q): negative throughout" in lines[9]


def test_verdicts_turn_with_the_numbers(tmp_path):
  """A sign flip in Lemma 1's eta series, KL that does not vanish at q = p, and MARS
  accepting less than lossless each turn their verdict."""
  lines = _table(tmp_path, _records(eta_deltas=(0.001, -0.002, 0.003),
                                    sd_kl_at_q_equals_p=0.01, mars_accept=0.2))
  assert "differ, exploratory (means of exact per-context values" in lines[7]
  assert lines[4].endswith("| differ (exact) |")
  assert "differ in sign" in lines[3]


def test_a_missing_configuration_is_named(tmp_path):
  recs = [r for r in _records() if r["config"]["part"] != "margins"]
  with pytest.raises(ValueError, match="part.*margins.*found 0"):
    _table(tmp_path, recs)


def _by_window(per_conversation: list, contexts: int = 5) -> dict:
  """A ``window_sums`` entry: each conversation's per-context mean times its contexts
  (``per_conversation``: [W] or [n values][W])."""
  import numpy as np
  v = np.asarray(per_conversation, float)
  return {"counts": [contexts] * v.shape[-1], "sums": (v * contexts).tolist()}


def _with_conversations(recs, mars_gain, eta_gain=0.01):
  """``_records()`` with per-conversation sums: MARS's acceptance gain over lossless per
  conversation (``mars_gain`` [W]), Lemma 1's truncated acceptance ``eta_gain`` above the
  untruncated 0.25 in every conversation (its change grows with eta) and min-p's growing
  with p_base."""
  w = len(mars_gain)
  for r in recs:
    c, res = r["config"], r["result"]
    if c["part"] == "mars":
      res["by_window"] = {"lossless_accept": _by_window([0.24] * w),
                          "accept": _by_window([[0.3] * w, [0.24 + g for g in mars_gain]])}
    elif c["part"] == "truncation":
      grow = [eta_gain * (j + 1) for j in range(3)]
      res["by_window"] = {"alpha_pq": _by_window([0.25] * w),
                          "alpha_paqa": _by_window([[0.25 + g] * w for g in grow])}
  return recs


def test_readings_over_conversations_get_intervals_and_their_verdicts(tmp_path):
  """With per-conversation sums the sign readings carry a bootstrap interval over the
  conversations and drop "exploratory": MARS's gain of +0.03 in each of 10 conversations
  agrees in sign; so does eta's block-efficiency change; min-p's grows with p_base, so the
  paper's "vanishes" differs."""
  lines = _table(tmp_path, _with_conversations(_records(), [0.03] * 10))
  assert "gain +0.030 [+0.030, +0.030] over 10 conversations" in lines[3]
  assert lines[3].endswith("| agree in sign |")
  assert "over 10 conversations" in lines[7] and "| agree in sign;" in lines[7]
  assert "last minus first +" in lines[8] and "| differ: the gain does not shrink" in lines[8]
  assert "exploratory" not in lines[3] + lines[7] + lines[8]


def test_one_conversation_cannot_carry_a_sign(tmp_path):
  """The broken reading the interval catches: one conversation gains +0.5 and nine lose
  0.01 each. The mean over contexts is +0.041, so the mean-only verdict says "agree in
  sign"; resampling conversations leaves the big one out about a third of the time
  (0.9^10), so the interval holds 0 and the verdict is inconclusive."""
  gains = [0.5] + [-0.01] * 9
  mean_only = _table(tmp_path, _records(mars_accept=0.24 + (0.5 - 0.09) / 10))
  assert "agree in sign, exploratory" in mean_only[3]
  lines = _table(tmp_path, _with_conversations(_records(), gains))
  assert "gain +0.041 [" in lines[3] and lines[3].endswith("| inconclusive |")


def test_window_sums_per_conversation():
  from experiments.propositions.sweep import window_sums
  out = window_sums([[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 0.0, 1.0]], [7, 3, 7, 9])
  assert out == {"counts": [1, 2, 1], "sums": [[2.0, 4.0, 4.0], [1.0, 0.0, 1.0]]}
  with pytest.raises(ValueError, match="differ in length"):
    window_sums([1.0, 2.0], [0, 1, 2])
