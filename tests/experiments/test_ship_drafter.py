"""experiments/ship_drafter.py: a continued drafter ships with its history."""

import json

from experiments.ship_drafter import with_lineage


def _write(d, rec):
  d.mkdir(parents=True, exist_ok=True)
  (d / "training.json").write_text(json.dumps(rec))


def test_a_continued_run_carries_the_shipped_records_oldest_first(tmp_path):
  shipped = tmp_path / "assets" / "eagle3"
  first = {"steps": 1500, "loss_history": [3.0, 2.0]}
  second = {"steps": 300, "init_from": "x", "loss_history": [1.0],
            "lineage": [first | {"loss_history": None}]}
  second["lineage"][0].pop("loss_history")
  _write(shipped, second)
  run = {"steps": 600, "init_from": str(shipped), "loss_history": [0.5]}
  out = with_lineage(run, str(shipped))
  assert [s["steps"] for s in out["lineage"]] == [1500, 300]
  assert all("loss_history" not in s for s in out["lineage"])
  assert out["loss_history"] == [0.5] and "lineage" not in run  # the run's record is not changed


def test_a_run_from_scratch_or_from_elsewhere_has_no_lineage(tmp_path):
  shipped = tmp_path / "eagle3"
  _write(shipped, {"steps": 1500})
  for init in (None, "", str(tmp_path / "other")):
    rec = {"steps": 600, "init_from": init}
    assert with_lineage(rec, str(shipped)) == rec
  rec = {"steps": 600, "init_from": str(shipped)}
  assert with_lineage(rec, str(tmp_path / "nothing_shipped_yet")) == rec
