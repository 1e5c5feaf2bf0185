"""Section 0 of docs/results.md (experiments.results.notebook_tables) is built from the
JSON records notebooks 02 and 03 write at their full settings, not from their printed
outputs: the record the notebooks' last cell writes is one the table reads (the cell run
on stand-in values, with the full and the CI settings), a record that lacks a field, is
missing or holds the CI settings fails naming the file and the field, and the verdicts
follow the numbers.

Broken variants caught: a table that still scrapes the notebooks' stdout (the committed
table renders with ``notebook_text`` disabled); a notebook cell and a table that disagree
on a field's name; a CI-settings run that writes into benchmarks/results."""

import collections
import importlib.util
import inspect
import json
import os
import types

import numpy as np
import pytest
import specjax

from experiments.results import notebook_tables as nt
from experiments.results import records

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _nb02(**margins):
  return {"notebook": "notebooks/02_mars_margins.ipynb",
          "settings": {"full": True, "n_conversations": 48, "seq_len": 512, "n_positions": 3000,
                       "theta": 0.9, "tau_prompts": 16, "tau_new_tokens": 128, "k": 7},
          "margins": {"n": 3000, "frac_negative_top1": 0.0, "z1_median": 25.18,
                      "frac_relaxed": 0.621, "greedy_reject_rate": 0.5977,
                      "greedy_num_relaxed": 1863, "greedy_rejected_relaxed": 1230, **margins},
          "tau_sweep": [{"theta": 1.0, "tau": 1.496}, {"theta": 0.9, "tau": 1.81}]}


def _nb03(min_p=(0.007, 0.007, 0.013, 0.015, 0.022), eta=(0.001, -0.0, -0.0, -0.002, -0.001)):
  curve = lambda sd0, sd1, e0, e1: {"sd": [sd0, 0.01, sd1], "eagle": [e0, 0.2, e1],
                                    "eagle_limit": e1}
  return {"notebook": "notebooks/03_lossy_verification.ipynb",
          "settings": {"full": True, "temperature": 0.7},
          "contexts": 2000, "sd_contexts": 256, "sd_tokens": 512, "t": [1.0, 0.5, 0.0],
          "kl_curves": {"SpecCascade p_base=0.3": curve(0.0309, 4.9e-8, 0.1471, 0.2063),
                        "typical eps=0.09 (hard)": curve(0.1339, 4.34e-8, 0.4043, 0.3091)},
          "soft_gate": {"rule": "typical eps=0.09 (soft)", "eagle_kl": float("inf"),
                        "sd_kl": float("inf")},
          "truncation_sweeps": {
              "min_p": {"be_pq": 1.281, "values": [0.1, 0.3, 0.5, 0.7, 0.9],
                        "delta_be_paqa": list(min_p)},
              "eta": {"be_pq": 1.281, "values": [0.05, 0.1, 0.15, 0.2, 0.25],
                      "delta_be_paqa": list(eta)}}}


@pytest.fixture
def use(tmp_path, monkeypatch):
  """``use(nb02, nb03)``: point the table at these records (written under tmp_path)."""
  def write(nb02, nb03):
    for attr, rec in (("NB02", nb02), ("NB03", nb03)):
      p = tmp_path / f"{attr}-{len(list(tmp_path.iterdir()))}.json"
      p.write_text(json.dumps(rec))
      monkeypatch.setattr(nt, attr, str(p))
    return nt.claims_notebooks().splitlines()
  return write


def test_rows_read_the_records(use):
  lines = use(_nb02(), _nb03())
  assert len(lines) == 2 + 8
  assert "0.0% of 3000 contexts, 95% interval [0.0000, 0.0013] (median z1 25.2)" in lines[2]
  assert "66.0% (1230 / 1863; unconditional 59.8%, r > 0.9 at 62.1% of positions)" in lines[3]
  assert "for 48 conversations" in lines[3] and "| differ |" in lines[3]
  assert "K = 7, greedy, 16 prompts x 128 tokens" in lines[4]
  assert "1.50 -> 1.81 (+21%)" in lines[4]
  assert "256 SmolLM2 contexts (T = 0.7) on their top 512 tokens" in lines[5]
  assert "0.0309 (draft LM) -> 4.9e-08 (q = p); typical eps 0.09 0.1339 -> 4.3e-08" in lines[5]
  assert "2000 contexts, full vocabulary, EAGLE-3 head 0.1471 -> at q = p 0.2063" in lines[6]
  assert "KL(P ‖ p_A) = inf (EAGLE-3), inf (draft LM)" in lines[7]
  assert "+0.001 (0.05), -0.000 (0.1)" in lines[8] and "that change sign" in lines[8]
  assert "the gain grows with p_base instead" in lines[9]


def test_verdicts_follow_the_numbers(use):
  lines = use(_nb02(greedy_rejected_relaxed=997), _nb03(min_p=(0.02, 0.01, 0.013, 0.015, 0.0),
                                                        eta=(0.001, 0.002, 0.0, 0.003, 0.001)))
  assert "53.5% (997 / 1863" in lines[3] and "| inconclusive |" in lines[3]
  assert "that change sign" not in lines[8] and "no monotone trend" in lines[9]
  # the verdict reads the changes as shown: 0.0072 > 0.0068 is not a fall at 3 decimals
  lines = use(_nb02(), _nb03(min_p=(0.0072, 0.0068, 0.013, 0.015, 0.022)))
  assert "+0.007 (0.1), +0.007 (0.3)" in lines[9] and "grows with p_base" in lines[9]


def test_a_missing_field_is_named_with_its_file(use):
  rec = _nb02()
  del rec["margins"]["greedy_num_relaxed"]
  with pytest.raises(ValueError, match=r"NB02-0\.json: the record has no field "
                     r"'margins\.greedy_num_relaxed'; regenerate it with `python "
                     r"notebooks/build\.py 02 03 --execute --full`"):
    use(rec, _nb03())
  rec = _nb03()
  del rec["kl_curves"]["typical eps=0.09 (hard)"]["eagle_limit"]
  with pytest.raises(ValueError, match=r"NB03-\d\.json: .*'kl_curves\.typical eps=0\.09 "
                     r"\(hard\)\.eagle_limit'"):
    use(_nb02(), rec)


def test_a_ci_settings_or_absent_record_is_refused(use, monkeypatch):
  rec = _nb02()
  rec["settings"]["full"] = False
  with pytest.raises(ValueError, match="settings.full is not true"):
    use(rec, _nb03())
  monkeypatch.setattr(nt, "NB02", "benchmarks/results/notebooks/nope.json")
  with pytest.raises(FileNotFoundError, match="nope.json: no such record; regenerate"):
    nt.claims_notebooks()


def test_committed_table_reads_no_notebook_output(monkeypatch):
  def scrape(*a, **k):
    raise AssertionError("notebook_tables read a notebook's printed output")
  monkeypatch.setattr(records, "notebook_text", scrape)
  monkeypatch.setattr(records, "find", scrape)
  src = inspect.getsource(nt)
  assert "notebook_text" not in src and "import re" not in src
  for rel in (nt.NB02, nt.NB03):
    assert os.path.isfile(os.path.join(ROOT, rel)), rel
  assert len(nt.claims_notebooks().splitlines()) == 2 + 8


def _build():
  pytest.importorskip("nbformat")
  spec = importlib.util.spec_from_file_location("nb_build", os.path.join(ROOT, "notebooks",
                                                                         "build.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


Sweep = collections.namedtuple("Sweep", "be_pq delta_be_paqa")


def _stand_ins(full: bool) -> dict:
  """The variables the last cells of 02 and 03 read, with stand-in values."""
  return {
      "FULL": full, "ms": types.SimpleNamespace(sources={}),
      # 02
      "N_CONVERSATIONS": 48, "SEQ_LEN": 512, "N_POSITIONS": 3000, "THETA": 0.9,
      "TAU_PROMPTS": 16, "TAU_NEW": 128, "K": 7,
      "summary": {"n": 3000, "frac_negative_top1": 0.0, "z1": {"q50": 25.18},
                  "frac_relaxed": 0.621, "greedy_reject_rate": 0.5977,
                  "greedy_num_relaxed": 1863, "greedy_reject_rate_relaxed": 1230 / 1863},
      "sweep": [(1.0, 1.496, 0.0, 1.0, 9.0), (0.9, 1.81, 0.2, 0.2, 9.0)],
      # 03
      "SUB_VOCAB": 512, "N_SD": 256, "TEMPERATURE": 0.7, "TS": [1.0, 0.3, 0.0],
      "zr": np.zeros((2000, 4)), "z_sub": np.zeros((256, 512)),
      "real": {"SpecCascade p_base=0.3": (np.array([0.0309, 0.01, 4.9e-8]),
                                          np.array([0.1471, 0.2, 0.2063]), 0.2063),
               "typical eps=0.09 (hard)": (np.array([0.1339, 0.01, 4.34e-8]),
                                           np.array([0.4043, 0.3, 0.3091]), 0.3091)},
      "matched": {"typical eps=0.09 (soft)": (0.0988, float("inf"), 0.6, float("inf"), 0.3)},
      "sweeps": {"min_p": ([0.1, 0.9], Sweep(1.281, np.array([0.007, 0.022]))),
                 "eta": ([0.05, 0.25], Sweep(1.281, np.array([0.001, -0.001])))},
  }


@pytest.mark.parametrize("full", [True, False], ids=["full", "ci"])
def test_the_notebooks_last_cells_write_what_the_table_reads(tmp_path, monkeypatch, full):
  build = _build()
  (tmp_path / "benchmarks" / "results").mkdir(parents=True)
  monkeypatch.setenv("SPECJAX_NOTEBOOK_COMMAND", "python notebooks/build.py 02 03 --execute")
  written = {}
  for name, nb in (("02_mars_margins", build.nb02()), ("03_lossy_verification", build.nb03())):
    ns = {"os": os, "specjax": specjax, **_stand_ins(full)}
    exec(build.STAMP_RUN % name, ns)
    assert ns["STAMP"]["command"] == "python notebooks/build.py 02 03 --execute"
    ns["ROOT"] = str(tmp_path)
    exec(nb.cells[-1].source, ns)
    written[name] = tmp_path / "benchmarks" / "results" / "notebooks" / f"{name}.json"
  if not full:  # the CI settings print the record and write nothing
    assert not (tmp_path / "benchmarks" / "results" / "notebooks").exists()
    return
  recs = {k: json.loads(p.read_text()) for k, p in written.items()}
  for rec in recs.values():
    assert {"command", "git_commit", "git_dirty", "load_average", "load_average_end",
            "started", "finished"} <= set(rec["provenance"]) and rec["model_sha256"] == {}
  monkeypatch.setattr(nt, "NB02", str(written["02_mars_margins"]))
  monkeypatch.setattr(nt, "NB03", str(written["03_lossy_verification"]))
  lines = nt.claims_notebooks().splitlines()
  assert "66.0% (1230 / 1863" in lines[3] and "1.50 -> 1.81 (+21%)" in lines[4]
  assert "typical eps 0.09 0.1339 -> 4.3e-08" in lines[5]
  assert "= inf (EAGLE-3), inf (draft LM)" in lines[7]
  assert "+0.001 (0.05), -0.001 (0.25); BE(p, q) = 1.281" in lines[8]
