"""The verifier-comparison table (experiments/results/compare_tables.py) and the paired
difference of ratios it uses; synthetic records, no model, no JAX (well under 5 s)."""

import json

import numpy as np
import pytest

from experiments.common import bootstrap
from experiments.results import compare_tables as ct


def test_paired_ratio_difference_recovers_a_shift_and_states_its_power():
  rng = np.random.default_rng(0)
  n = 40
  tokens = rng.integers(20, 60, n).astype(float)
  base_ll = rng.normal(-2.0, 0.5, n) * tokens  # per-prompt sums: prompts differ a lot
  y = np.stack([base_ll, tokens], 1)
  x = np.stack([base_ll - 0.1 * tokens, tokens], 1)  # every prompt 0.1 nats/token lower
  g = bootstrap.paired_ratio_difference(x, y)
  assert g["diff"] == pytest.approx(-0.1)
  assert g["ci95"][0] == pytest.approx(-0.1) and g["ci95"][1] == pytest.approx(-0.1)
  assert g["sd"] == pytest.approx(0.0, abs=1e-12) and g["excludes_zero"]
  # With per-prompt noise of SD s the MDE is (z_.975 + z_.8) s / sqrt(n) ~ 2.80 s / sqrt(n).
  noise = rng.normal(0, 0.3, n)
  x2 = np.stack([base_ll + noise * tokens, tokens], 1)
  g2 = bootstrap.paired_ratio_difference(x2, y)
  assert g2["mde80"] == pytest.approx(2.8016 * np.std(noise, ddof=1) / np.sqrt(n), rel=1e-3)
  assert g2["ci95"][0] < g2["diff"] < g2["ci95"][1]
  # Unpaired resampling (a broken variant) would see the prompts' spread, not the shift's:
  lo, hi = bootstrap.bootstrap_ci(x[:, 0] / x[:, 1] - rng.permutation(y[:, 0] / y[:, 1]))
  assert hi - lo > 10 * (g["ci95"][1] - g["ci95"][0] + 1e-9)
  with pytest.raises(ValueError, match="same prompts"):
    bootstrap.paired_ratio_difference(x[:3], y)


def _res(tau_acc, calls, ll, tokens=10.0, **kw):
  n = len(tau_acc)
  tau = (sum(tau_acc) + sum(calls)) / sum(calls)
  mean_ll = sum(ll) / (tokens * n)
  return dict({"accepted_per_prompt": list(tau_acc), "target_calls_per_prompt": list(calls),
               "tau": tau, "tau_ci": [tau - 0.1, tau + 0.1],
               "loglik": mean_ll, "loglik_ci": [mean_ll - 0.1, mean_ll + 0.1],
               "loglik_per_prompt": [[v, tokens] for v in ll]}, **kw)


def _row(kind, rule, drafter, t, res, baseline=False, hparams=None):
  method = "target" if kind == "target" else (f"baseline:{rule}" if baseline else rule)
  return {"config": {"kind": kind, "rule": rule, "drafter": drafter, "temperature": t,
                     "baseline": baseline, "hparams": hparams or {}, "method": method,
                     "num_draft": 4},
          "result": res}


@pytest.fixture
def record(tmp_path):
  n = 12
  rng = np.random.default_rng(1)
  ll = rng.normal(-20.0, 4.0, n)  # per-prompt log-likelihood sums over 10 tokens
  calls = [10] * n
  rows = [
      _row("target", "lossless", "-", 1.0, _res([0] * n, calls, ll + rng.normal(0, 0.5, n))),
      _row("spec", "lossless", "chain", 1.0, _res([5] * n, calls, ll)),
      _row("spec", "mars", "chain", 1.0, _res([9] * n, calls, ll - 3.0 + rng.normal(0, .3, n)),
           hparams={"theta": 0.9}),
      _row("spec", "typical", "chain", 1.0, _res([8] * n, calls, ll - 1.0),
           hparams={"eps": 0.09}),
      _row("spec", "typical", "chain", 1.0, _res([6] * n, calls, ll - 1.0, first_kl=0.0,
                                                 first_tv=0.0), baseline=True,
           hparams={"eps": 0.09}),
      _row("spec", "lossless", "chain", 0.0, _res([5] * n, calls, ll, agree_exact=1.0)),
      _row("spec", "greedy", "chain", 0.0, _res([5] * n, calls, ll, agree_exact=1.0)),
      {"config": {"kind": "spec", "rule": "block", "drafter": "tree", "temperature": 1.0,
                  "baseline": False, "hparams": {}, "method": "block", "num_draft": 4},
       "result": {"skipped": "block verification needs a chain"}},
  ]
  p = tmp_path / "compare.jsonl"
  p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
  return str(p)


def test_matched_baselines_follow_the_papers_convention(record):
  recs = ct.load(record)
  by = {(r["config"]["method"], r["config"]["temperature"]): r for r in recs}
  assert ("block", 1.0) not in by  # skipped rows are left out
  base = lambda m, t: ct.matched_baseline(by[(m, t)], recs)
  assert base("typical", 1.0) is by[("baseline:typical", 1.0)]  # the truncated target
  assert base("mars", 1.0) is by[("lossless", 1.0)]  # the unprocessed target
  assert base("lossless", 1.0) is by[("target", 1.0)]
  assert base("baseline:typical", 1.0) is by[("target", 1.0)]
  assert base("greedy", 0.0) is by[("lossless", 0.0)]
  assert base("lossless", 0.0) is None  # the record has no target row at T = 0


def test_table_cells_state_effect_interval_power_and_verdict(record):
  lines = {tuple(c.strip() for c in line.split("|")[1:4]): line
           for line in ct.compare_table(record).splitlines()[2:]}
  mars = lines[("chain", "1", "mars")]
  assert "+0.267 [+0.267, +0.267]" in mars  # tau 1.9 / 1.5 - 1: paired, constant per prompt
  gap = mars.split("|")[8].strip()  # 3 nats over 10 tokens lower (+ noise), resolved
  assert abs(float(gap.split()[0]) + 0.3) < 0.02 and gap.endswith(": lower")
  typ = lines[("chain", "1", "typical")]
  assert "baseline:typical" in typ and "identical on every prompt" in typ
  assert "0.0000 / 0.0000" in lines[("chain", "1", "baseline:typical")]
  greedy = lines[("chain", "0", "greedy")]
  assert greedy.count("identical on every prompt") == 2 and greedy.rstrip(" |").endswith("1.00")


def test_a_record_without_per_prompt_loglik_is_refused_by_name(record, tmp_path):
  rows = [json.loads(line) for line in open(record)]
  for r in rows:
    r["result"].pop("loglik_per_prompt", None)
  p = tmp_path / "old.jsonl"
  p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
  with pytest.raises(ValueError, match="loglik_per_prompt"):
    ct.compare_table(str(p))
