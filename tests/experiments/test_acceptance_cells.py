"""Acceptance cells (experiments/compare/acceptance.py) and the paired ratio gain
(experiments/common/bootstrap.py) that compares two drafters on the same prompts."""

import numpy as np
import pytest

from experiments.common.bootstrap import paired_ratio_gain, pooled_paired_ratio_gain
from experiments.compare import acceptance


@pytest.mark.slow  # 7 s of loop compilation: CI's slow step
def test_cell_on_a_tiny_target_counts_every_target_call():
  from experiments.common.model_sets import TinySpec, load_model_set
  ms = load_model_set("tiny", eagle="", tiny=TinySpec(vocab_size=64))
  prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
  s = acceptance.CellSettings(k=3, seeds=2, batch_size=2, max_new_tokens=8)
  res = acceptance.run_cell(ms, ms.draft_sources(), "chain", 1.0, prompts, s)
  pairs = np.asarray(res["per_prompt"])
  assert pairs.shape == (2, 2) and res["seeds"] == 2
  # a run emits max_new_tokens per prompt: the prefill's token, then accepted drafts
  # plus one token per target call (the last call may overshoot: at least, never less)
  assert (pairs[:, 0] >= 2 * (8 - 1)).all() and (pairs[:, 1] >= 2).all()
  assert res["tau"] == pytest.approx(pairs[:, 0].sum() / pairs[:, 1].sum())
  lo, hi = res["tau_ci"]
  assert 1.0 <= lo <= res["tau"] <= hi <= 4.0  # K = 3: at most 4 tokens per call
  assert len(res["accept_rate_per_position"]) == 3


def test_cell_with_a_model_free_tree_drafter():
  """The suffix tree (no draft model: experiments.acceptance --drafters=suffix_tree) runs
  as a cell on the tiny target at T = 0: one run per prompt, per-depth acceptance rates
  for its depth, tau within [1, depth + 1]."""
  from experiments.common.model_sets import TinySpec, load_model_set
  ms = load_model_set("tiny", draft="", eagle="", tiny=TinySpec(vocab_size=64))
  prompts = [[1, 2, 3, 1, 2, 3, 1, 2], [4, 5, 6, 7, 8]]
  s = acceptance.CellSettings(k=3, depth=3, top_k=2, total_tokens=6, seeds=2, batch_size=2,
                              max_new_tokens=8)
  res = acceptance.run_cell(ms, ms.draft_sources(), "suffix_tree", 0.0, prompts, s)
  assert res["seeds"] == 1 and len(res["accept_rate_per_position"]) == 3
  assert 1.0 <= res["tau"] <= 4.0


def test_paired_ratio_gain():
  rng = np.random.default_rng(0)
  calls = rng.integers(20, 40, size=(30, 1))
  y = np.concatenate([calls * rng.uniform(1.5, 2.5, size=(30, 1)), calls], 1)
  same = paired_ratio_gain(y, y)
  assert same["diff"] == 0 and same["ci95"] == [0, 0] and same["mde80"] == 0
  x = y * [[1.1, 1.0]]  # 10% more tokens per call on every prompt
  g = paired_ratio_gain(x, y)
  assert g["diff"] == pytest.approx(0.1) and g["ci95"][0] == pytest.approx(0.1)
  assert g["excludes_zero"] and g["prompts"] == 30
  noisy = x * np.concatenate([rng.uniform(0.7, 1.3, size=(30, 1)), np.ones((30, 1))], 1)
  n = paired_ratio_gain(noisy, y)
  assert n["ci95"][0] < n["diff"] < n["ci95"][1] and n["sd"] > 0.1 and n["mde80"] > 0.05
  with pytest.raises(ValueError, match=r"\[n, 2\] rows of the same prompts"):
    paired_ratio_gain(x[:5], y)
  with pytest.raises(ValueError, match="different prompt lists"):
    acceptance.paired_tau_gain({"per_prompt": x[:5].tolist()}, {"per_prompt": y.tolist()})


def test_pooled_paired_ratio_gain():
  """Known gains, a shared-prompt group, and the errors.

  30 prompts per group. An exact 10% gain in every cell gives 0.1 with a
  degenerate interval; cells at +21% and 0% pool to their geometric mean
  sqrt(1.21) - 1 = 0.1. The broken variants it catches: an arithmetic mean
  (0.105), or resampling each cell on its own (a noisy cell and its mirror
  image would no longer cancel in every resample: the interval would widen
  from 0 to about +-0.1)."""
  rng = np.random.default_rng(0)
  calls = rng.integers(20, 40, size=(30, 1))
  y = np.concatenate([calls * rng.uniform(1.5, 2.5, size=(30, 1)), calls], 1)
  x = y * [[1.1, 1.0]]
  g = pooled_paired_ratio_gain([[(x, y), (x, y)], [(x, y)]])
  assert g["diff"] == pytest.approx(0.1) and g["ci95"][0] == pytest.approx(0.1)
  assert g["cells"] == 3 and g["prompts"] == 60 and g["excludes_zero"]
  assert g["mde80"] == pytest.approx(0, abs=1e-12)
  mixed = pooled_paired_ratio_gain([[(y * [[1.21, 1.0]], y)], [(y, y)]])
  assert mixed["diff"] == pytest.approx(0.1)
  # A per-prompt noise and its inverse on the same prompts cancel in the geometric
  # mean of every resample only if both cells are resampled with the same prompts.
  noise = rng.uniform(0.5, 1.5, size=(30, 1))
  up = np.concatenate([y[:, :1] * noise, y[:, 1:]], 1)
  down = np.concatenate([y[:, :1] / noise, y[:, 1:]], 1)
  cancel = pooled_paired_ratio_gain([[(up, y), (down, y)]])
  assert abs(cancel["ci95"][1] - cancel["ci95"][0]) < 0.05
  apart = pooled_paired_ratio_gain([[(up, y)], [(down, y)]])  # the same cells, unshared
  assert apart["ci95"][1] - apart["ci95"][0] > 3 * (cancel["ci95"][1] - cancel["ci95"][0])
  with pytest.raises(ValueError, match=r"groups\[0\]: every cell of a group"):
    pooled_paired_ratio_gain([[(x, y), (x[:5], y[:5])]])
  with pytest.raises(ValueError, match=r"groups\[1\] holds no cells"):
    pooled_paired_ratio_gain([[(x, y)], []])
  with pytest.raises(ValueError, match=r"\[n, 2\] rows"):
    pooled_paired_ratio_gain([[(x[:, :1], y)]])


def test_candidate_table_pairs_cells_of_equal_settings(tmp_path):
  """experiments.results.tables.candidate_table on hand-made records: a candidate draft
  LM exactly 10% above the shipped one in both cells pools to +0.100 "better"; its
  cells pair with the shipped cells of the same settings (other drafters and settings
  ignored), and a candidate cell without a shipped twin is refused."""
  import json

  from experiments.results import tables

  rng = np.random.default_rng(1)
  calls = rng.integers(20, 40, size=(16, 1))
  base = np.concatenate([calls * rng.uniform(1.2, 1.6, size=(16, 1)), calls], 1)

  def rec(drafter, t, draft, per_prompt, new=128):
    key = f"{drafter}|sharegpt|T={t:g}|m|{draft}|eagle3|K=5|tree=5,8,24|n=16|new={new}|seeds=3"
    pp = np.asarray(per_prompt)
    tau = float(pp[:, 0].sum() / pp[:, 1].sum())
    return {"key": key, "config": {"drafter": drafter, "prompt_set": "sharegpt",
                                   "temperature": t},
            "result": {"per_prompt": pp.tolist(), "tau": tau, "tau_ci": [tau - 0.1, tau + 0.1],
                       "num_prompts": 16, "seeds": 3}}

  def write(name, recs):
    with open(tmp_path / name, "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in recs)
    return str(tmp_path / name)

  shipped = write("shipped.jsonl", [rec("draft_lm_chain", t, "draft", base) for t in (0, 1)]
                  + [rec("eagle3_chain", 0, "draft", base * [[2, 1]]),
                     rec("draft_lm_chain", 0, "draft", base * [[3, 1]], new=64)])
  better = base * [[1.1, 1.0]]
  cand = write("cand.jsonl", [rec("draft_lm_chain", t, "/runs/x/asset", better)
                              for t in (0, 1)])
  out = tables.candidate_table(cand, shipped)
  lines = [line for line in out.splitlines() if line.startswith("|")]  # the note follows
  assert len(lines) == 2 + 2 + 1  # header, rule, two cells, pooled
  assert all("+0.100" in line and "better" in line for line in lines[2:])
  assert "2 cells" in lines[-1]
  orphan = write("orphan.jsonl", [rec("draft_lm_chain", 0, "/runs/x/asset", better, new=96)])
  with pytest.raises(ValueError, match="has no cell of the same settings"):
    tables.candidate_table(orphan, shipped)


def test_continued_shipped_table_pairs_with_the_head_shipped_at_the_time(tmp_path):
  """experiments.results.tables.drafter_data_continued_shipped_table on hand-made records:
  a head exactly 5% above the head shipped when it was measured ("b") pools to +0.050
  "better" over its two cells, although it is 15.5% above the first shipped head
  ("reference"); the first-head table leaves it out unless it has no mapped baseline.
  Pairing with the first head instead would read +0.155 and fail the +0.050 check."""
  import json

  from experiments.results import tables

  rng = np.random.default_rng(2)
  calls = rng.integers(20, 40, size=(16, 1))
  base = np.concatenate([calls * rng.uniform(1.2, 1.6, size=(16, 1)), calls], 1)

  def rec(head, t, per_prompt):
    pp = np.asarray(per_prompt)
    tau = float(pp[:, 0].sum() / pp[:, 1].sum())
    return {"key": f"{head}|{t}", "config": {"head": head, "kind": "eagle_chain",
                                             "prompt_set": "sharegpt", "temperature": t},
            "result": {"per_prompt": pp.tolist(), "tau": tau, "tau_ci": [tau - 0.1, tau + 0.1]}}

  recs = [rec(h, t, base * [[f, 1]]) for t in (0, 1)
          for h, f in (("reference", 1.0), ("b", 1.1), ("c", 1.155))]
  path = tmp_path / "acceptance.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in recs))
  out = tables.drafter_data_continued_shipped_table(str(path), {"c": "b"})
  lines = [line for line in out.splitlines() if line.startswith("|")]  # the note follows
  assert len(lines) == 2 + 2 + 1  # header, rule, two cells, pooled
  assert all(line.startswith("| c |") and "+0.050" in line and "better" in line
             for line in lines[2:])
  assert "2 cells" in lines[-1]
  first = tables.drafter_data_continued_table(str(path), {"c": "b"})
  assert "| c |" not in first
  assert "| b | **pooled** |" in first and "+0.100" in first
  unmapped = tables.drafter_data_continued_table(str(path), {})
  assert "| c | **pooled** |" in unmapped and "+0.155" in unmapped
