"""benchmarks/adapter_transfer.py (the carried adapter on unlike text) without a model:
its flags, its record's resumption, the per-row counts and the carried adapter's
tiling; the crossed bootstrap its table reads (experiments/common/bootstrap.py) and
the table itself (experiments/results/adaptation_tables.py) on hand-made records."""

import json

from absl import app
import numpy as np
import pytest

from benchmarks import adapter_transfer as at
from experiments.common.bootstrap import crossed_ratio_contrast, paired_ratio_gain
from tests.flag_errors import usage_errors


def test_bad_command_lines_name_the_flag():
  msgs = usage_errors("benchmarks.adapter_transfer", [
      ["--unlike_prompts=0"], ["--unlike_sets=multiturn"], ["--unlike_new_tokens=1"],
      ["--adapt=none"]], entry="build_run", define="define_flags")
  for flag, msg in zip(["--unlike_prompts", "--unlike_sets", "--unlike_new_tokens", "--adapt"],
                       msgs):
    assert flag in msg, (flag, msg)


SETTINGS = dict(target="smollm2-135m-instruct", k=4, seed=1, turns=8, unlike_prompts=8)


def test_a_record_taken_otherwise_is_refused_and_none_starts_afresh(tmp_path):
  p = tmp_path / "r.json"
  p.write_text(json.dumps(dict(settings=SETTINGS, sessions=[], baselines={}, parts=[])))
  assert at.resume_from(str(p), SETTINGS)["settings"] == SETTINGS
  with pytest.raises(app.UsageError, match="unlike_prompts: record 8, this run 4"):
    at.resume_from(str(p), dict(SETTINGS, unlike_prompts=4))
  assert at.resume_from(str(tmp_path / "none.json"), SETTINGS) is None


def test_per_row_counts_and_the_tiled_adapter():
  import jax.numpy as jnp

  from specjax.decoding.adaptation import AdapterParams
  from specjax.decoding.loop_state import SpecStats

  class Result:
    stats = SpecStats(target_calls=jnp.asarray([3, 5]), accepted=jnp.asarray([4, 1]),
                      relaxed=jnp.zeros(2, int), accept_counts=jnp.asarray([[2, 2], [1, 0]]),
                      offered_counts=jnp.asarray([[3, 2], [5, 1]]),
                      verified_tokens=jnp.zeros(2, int), processed_tokens=jnp.zeros(2, int),
                      gamma_counts=jnp.zeros((2, 3), int), source_rounds=jnp.zeros((2, 1), int),
                      source_accepted=jnp.zeros((2, 1), int))
  rows = at.per_prompt(Result())
  assert rows[1] == dict(target_calls=5, accepted=1, accept_counts=[1, 0],
                         offered_counts=[5, 1])
  one = AdapterParams(jnp.arange(3.0)[None], jnp.ones((1, 2, 1)), jnp.zeros((1, 1, 3)))
  many = at.tiled(one, 4)
  assert many.bias.shape == (4, 3) and (many.bias == jnp.arange(3.0)).all()
  with pytest.raises(ValueError, match="has 4 rows; expected 1"):
    at.tiled(many, 2)


def test_crossed_contrast_by_hand_and_its_two_sources_of_spread():
  """x [S, P, 2] against y [P, 2]. By hand: two sessions x two prompts of tau 2 and 3
  (pooled 10 / 4 = 2.5) against y's 8 / 4 = 2: +0.25. Identical sessions and prompts:
  the interval is the point. Sessions that differ (prompts identical): an interval that
  resampled only prompts (the broken variant: the pooled sessions as one method, paired
  over prompts) is the point, the crossed one is not."""
  x = np.array([[[4, 2], [6, 2]], [[4, 2], [6, 2]]], float)  # tau 2 and 3 per prompt
  y = np.array([[4, 2], [4, 2]], float)
  g = crossed_ratio_contrast(x, y, num_resamples=200)
  assert g["diff"] == pytest.approx(20 / 8 / 2 - 1) and (g["sessions"], g["prompts"]) == (2, 2)
  same = np.tile(np.array([4.0, 2.0]), (3, 5, 1))
  flat = crossed_ratio_contrast(same, np.tile([3.0, 2.0], (5, 1)), num_resamples=200)
  assert flat["ci95"][0] == pytest.approx(flat["ci95"][1]) == pytest.approx(1 / 3)
  varied = np.stack([np.tile([t, 1.0], (5, 1)) for t in (1.2, 1.6, 2.0, 2.4, 2.8, 3.2)])
  ref = np.tile([2.0, 1.0], (5, 1))
  crossed = crossed_ratio_contrast(varied, ref, num_resamples=400)
  prompts_only = paired_ratio_gain(varied.sum(0), ref * len(varied), num_resamples=400)
  assert prompts_only["ci95"][1] - prompts_only["ci95"][0] == pytest.approx(0, abs=1e-12)
  assert crossed["ci95"][1] - crossed["ci95"][0] > 0.2
  d = crossed_ratio_contrast(varied, ref, difference=True, num_resamples=100)
  assert d["diff"] == pytest.approx(varied[..., 0].sum() / varied[..., 1].sum() - 2.0)
  with pytest.raises(ValueError, match="x must be"):
    crossed_ratio_contrast(varied[0], ref)


def _row(tau_num, calls, agree, offered):
  return dict(target_calls=calls, accepted=tau_num - calls, accept_counts=[agree, 0],
              offered_counts=[offered, 0])


def test_transfer_table_reads_each_arm_and_the_agreement_goal(tmp_path, monkeypatch):
  """Four sessions whose carried adapter agrees on 40% of first drafts where the frozen
  head agrees on 50%: the agreement falls 10 points, far past the 1-point goal; its tau
  against the frozen head's is lower in every session and prompt. Two prompt sets: a
  row group per set and one pooling both (a family of 2 baselines x 3 groups)."""
  from experiments.results import adaptation_tables as tabs
  prompts = [f"humaneval:{i}" for i in range(3)] + [f"sharegpt:{i}" for i in range(3)]
  frozen = [_row(30, 10, 5, 10) for _ in prompts]
  fresh = [_row(31, 10, 5, 10) for _ in prompts]
  sessions = [dict(session=s, served=1000 + s, turns=[],
                   carried=[_row(25 + (s + p) % 2, 10, 4, 10) for p in range(len(prompts))])
              for s in range(4)]
  rec = dict(benchmark="adapter_transfer", prompts=prompts,
             settings=dict(k=4, turns=8, unlike_sets=["humaneval", "sharegpt"],
                           unlike_new_tokens=128,
                           adapt=dict(every=4, learning_rate=0.03, rank=8, window=32)),
             baselines=dict(frozen=frozen, fresh=fresh), sessions=sessions,
             parts=[dict(command="python -m benchmarks.adapter_transfer", git_commit="a" * 40)])
  (tmp_path / "t.json").write_text(json.dumps(rec))
  monkeypatch.setattr(tabs, "path", lambda rel: str(tmp_path / rel))
  lines = tabs.adapter_transfer_table("t.json").splitlines()
  frozen_line = next(l for l in lines if l.startswith("| all | the frozen head"))
  assert "| 3.00 | 0.500 |" in frozen_line and ": worse" in frozen_line
  assert "-10.0 [-10.0, -10.0]: falls by more than 1 point" in frozen_line
  carried = next(l for l in lines if l.startswith("| all | the adapter carried from each of 4"))
  assert "| 2.55 | 0.400 |" in carried
  assert sum(l.startswith("| humaneval |") for l in lines) == 3
  text = "\n".join(lines)
  assert "1,000-1,003 tokens served" in text and "m = 6" in text
