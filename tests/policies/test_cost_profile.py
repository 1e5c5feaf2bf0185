"""The round cost profile (specjax.policies.cost_profile), the acceptance tables shipped
with the drafters (experiments/common/shipped_tables.py) and the cost-aware rows of a
run (experiments/common/adaptive.py, the main job's ``adaptive`` row): curves by hand,
a measured profile's shape, tables refused for another setup, and a cost-aware row
built from a measured profile and shipped tables (no timing is asserted)."""

import dataclasses

import numpy as np
import pytest

from experiments.common import shipped_tables
from specjax.policies import acceptance, cost_aware
from specjax.policies.cost_profile import RoundCostProfile

K = 4


def _profile(**kw):
  base = dict(k=K, context=100, cache_length=256, step_s=0.02,
              forward=(1.0, 1.3, 1.4, 1.45, 1.5), drafting={"lookup_chain": 0.02,
                                                          "eagle_chain": 0.8},
              gated={"lookup_chain": False, "eagle_chain": True}, device="cpu")
  return RoundCostProfile(**{**base, **kw})


def test_round_costs_by_hand():
  p = _profile()
  np.testing.assert_allclose(p.round_cost("lookup_chain"), [1.02, 1.32, 1.42, 1.47, 1.52])
  # the chain stops under the gate: max(n, 1) / K of its K-draft step
  np.testing.assert_allclose(p.round_cost("eagle_chain"), [1.2, 1.5, 1.8, 2.05, 2.3])
  lookup, chain = p.source_costs("lookup_chain", "eagle_chain")
  np.testing.assert_allclose(lookup, [1.22, 1.52, 1.62, 1.67, 1.72])  # + the chain's first step
  np.testing.assert_allclose(chain, [1.22, 1.52, 1.82, 2.07, 2.32])
  with pytest.raises(ValueError, match="was not profiled"):
    p.round_cost("suffix_tree")
  # the loop's own work per round, once measured, is in every c(n) of every curve
  busy = _profile(overhead=0.25)
  np.testing.assert_allclose(busy.round_cost("eagle_chain"), p.round_cost("eagle_chain") + 0.25)
  for got, want in zip(busy.source_costs("lookup_chain", "eagle_chain"), (lookup, chain)):
    np.testing.assert_allclose(got, want + 0.25)
  assert RoundCostProfile(**busy.to_json()) == busy
  # curves a policy takes (non-decreasing, positive)
  cost_aware.make_source_params(
      *[cost_aware.make_params(acceptance.constant_table([0.5] * K), c) for c in (lookup, chain)])


@pytest.mark.slow  # compiles K + 1 forwards and two drafters' steps (~20 s)
def test_a_measured_profile_has_the_shape_the_policy_needs():
  from specjax.decoding.drafter_factory import make_drafter
  from specjax.distributions import SamplingConfig
  from specjax.policies import cost_profile
  from experiments.common.model_sets import load_model_set
  ms = load_model_set("default", draft="", eagle="eagle3")
  greedy = SamplingConfig(temperature=0.0)
  sources = {n: make_drafter(n, greedy, ms.draft_sources(), num_draft=K)
             for n in ("lookup_chain", "eagle_chain")}
  prof = cost_profile.measure(ms.target, ms.target_params, sources, [1, 2, 3, 4, 5, 6], k=K,
                              cache_length=64, context=20, repeats=2)
  assert prof.forward[0] == 1.0 and np.all(np.diff(prof.forward) >= 0)
  assert set(prof.drafting) == {"lookup_chain", "eagle_chain"}
  assert prof.drafting["eagle_chain"] > 0 and prof.drafting["lookup_chain"] >= 0
  assert prof.gated["eagle_chain"]
  assert not prof.gated["lookup_chain"] and prof.step_s > 0
  assert RoundCostProfile(**prof.to_json()) == prof and prof.batch == 1
  # At the run's batch size: the step is the forward over one token for each of B rows.
  wide = cost_profile.measure(ms.target, ms.target_params, sources, [1, 2, 3, 4, 5, 6], k=K,
                              cache_length=64, context=20, repeats=2, batch=3)
  assert wide.batch == 3 and wide.forward[0] == 1.0 and np.all(np.diff(wide.forward) >= 0)
  with pytest.raises(ValueError, match="batch=0"):
    cost_profile.measure(ms.target, ms.target_params, sources, [1, 2], k=K, cache_length=64,
                         context=20, batch=0)


def test_shipped_tables_are_found_by_setup_and_refused_for_another(tmp_path, monkeypatch):
  from specjax.models import drafter_assets
  monkeypatch.setattr(drafter_assets, "assets_root", lambda: str(tmp_path))
  hashes = {"target": "t" * 64, "eagle": "e" * 64}
  fitted = acceptance.fit([0, 1, 0, 1], [0.9, 0.9, 0.2, 0.2], [1, 0, 0, 0], K)
  for source in shipped_tables.SOURCES:
    meta = shipped_tables.table_metadata(hashes, source, "mars", {"theta": 0.9}, 1.0, K)
    path = shipped_tables.table_path("m", source, "mars", {"theta": 0.9}, 1.0, K)
    assert path == str(tmp_path / "m" / "acceptance" / f"{source}-mars-theta0.9-t1-k4.json")
    acceptance.save(path, fitted, dict(meta, reliability={"ece": 0.1}))
    got, m = shipped_tables.load_shipped("m", hashes, source, "mars", {"theta": 0.9}, 1.0, K)
    np.testing.assert_allclose(got.p_hat, fitted.p_hat)
    assert m["reliability"]["ece"] == 0.1
  # prompt lookup's table does not depend on the head; the chain's does
  other_head = dict(hashes, eagle="x" * 64)
  shipped_tables.load_shipped("m", other_head, "lookup_chain", "mars", {"theta": 0.9}, 1.0, K)
  with pytest.raises(ValueError, match="different setup"):
    shipped_tables.load_shipped("m", other_head, "eagle_chain", "mars", {"theta": 0.9}, 1.0, K)
  with pytest.raises(FileNotFoundError, match="experiments.calibrate_acceptance"):
    shipped_tables.load_shipped("m", hashes, "eagle_chain", "lossless", {}, 1.0, K)
  with pytest.raises(ValueError, match="shipped for"):
    shipped_tables.table_path("m", "suffix_tree", "lossless", {}, 0.0, K)


def test_cost_aware_by_name_and_the_adaptive_row():
  """``cost_aware`` is a policy name (its params are built by the run); the main job's
  ``adaptive`` drafter gets rows of lookup_eagle_chain under it and no other policy."""
  from experiments.common import rows
  from experiments.configs import compare
  from specjax.policies import factory
  policy, params = factory.make_policy("cost_aware", K)
  assert isinstance(policy, cost_aware.CostAwareLength) and params is None
  with pytest.raises(ValueError, match="no hyperparameters"):
    factory.make_policy("cost_aware", K, lam=1.0)
  for d in ("lookup_chain", "eagle_chain", "lookup_eagle_chain", "adaptive"):
    assert factory.unsupported("cost_aware", d) == ""
  assert "has none" in factory.unsupported("cost_aware", "chain")
  assert "trees" in factory.unsupported("cost_aware", "suffix_tree")
  assert "lookup" in factory.unsupported("adaedl", "lookup_eagle_chain")
  c = compare.get_config()
  c.drafters = ("lookup_chain", "adaptive")
  c.policies = "none, adaedl:lam=0.6"
  c.rules = "lossless"
  c.temperatures = (0.0, 1.0)
  c.eagle_dir = "eagle3"
  out = [r for r in rows.default_rows(c) if r["kind"] == "spec"]
  adaptive = [r for r in out if r["drafter"] == "adaptive"]
  assert len(adaptive) == 2 and {r["policy"] for r in adaptive} == {"cost_aware"}
  assert {r["method"] for r in adaptive} == {"lossless+cost_aware"}
  assert all("policy" not in r for r in out if r["drafter"] == "lookup_chain")


@dataclasses.dataclass
class _Ctx:
  """The parts of a run's Context the cost-aware rows read."""
  target: object
  target_params: object
  sources: object
  prompt_ids: list
  c: object
  model_name: str
  model_sources: dict
  cache: dict = dataclasses.field(default_factory=dict)
  mesh: object = None


@pytest.mark.slow  # profiles the default models (~20 s)
def test_a_cost_aware_row_is_built_from_the_profile_and_the_shipped_tables(tmp_path,
                                                                          monkeypatch):
  from experiments.common import adaptive
  from experiments.common.model_sets import load_model_set
  from ml_collections import ConfigDict
  from specjax import provenance
  from specjax.models import drafter_assets
  monkeypatch.setattr(drafter_assets, "assets_root", lambda: str(tmp_path))
  ms = load_model_set("default", draft="", eagle="eagle3")
  ctx = _Ctx(ms.target, ms.target_params, ms.draft_sources(), [[1, 2, 3, 4, 5, 6]],
             ConfigDict({"data": {"max_new_tokens": 16}}), "default", dict(ms.sources))
  row = dict(drafter="adaptive", rule="lossless", hparams={}, temperature=0.0, num_draft=K)
  with pytest.raises(FileNotFoundError, match="calibrate_acceptance"):
    adaptive.cost_aware(ctx, row, 64)
  assert not ctx.cache.get(("cost_profile", K, 64))  # a missing table fails before timing
  hashes = provenance.model_hashes(dict(ms.sources))
  fitted = acceptance.fit([0, 1, 2, 3], [0.9] * 4, [1, 1, 0, 0], K)
  for s in shipped_tables.SOURCES:
    acceptance.save(shipped_tables.table_path("default", s, "lossless", {}, 0.0, K), fitted,
                    dict(shipped_tables.table_metadata(hashes, s, "lossless", {}, 0.0, K),
                         reliability={"ece": 0.05}))
  policy, params, info = adaptive.cost_aware(ctx, row, 64)
  assert isinstance(params, cost_aware.SourceParams) and policy.num_draft == K
  assert policy.group_size is None and info["group_size"] == "batch"  # one data device
  assert len(info["round_cost"]) == 2 and info["calibration_ece"] == [0.05, 0.05]
  assert info["cost_profile"]["overhead"] >= 0 and info["speculation"] in ("on", "off")
  assert info["speculation_rule"] == {"estimate": "best", "threshold": 1.0}  # one prompt
  rate = info["best_rate"]
  assert (rate["rate"] > 1) == (info["speculation"] == "on") and rate["source"] in (
      "lookup_chain", "eagle_chain")
  assert info["best_rate"]["rate"] >= info["prior_rate"]["rate"]
  _, again, _ = adaptive.cost_aware(ctx, dict(row, drafter="eagle_chain"), 64)
  assert isinstance(again, cost_aware.CostAwareParams)  # the profile measured once, reused
  assert len([k for k in ctx.cache if k[0] == "cost_profile"]) == 1
  # the loop's overhead: once per drafter kind
  assert sorted(k[1] for k in ctx.cache if k[0] == "loop_overhead") == ["eagle_chain",
                                                                        "lookup_eagle_chain"]


@pytest.mark.slow  # compiles the loop and generate twice each (~12 s; default-suite budget)
def test_loop_overhead_is_the_real_plain_round_less_the_model(monkeypatch):
  """``loop_overhead`` = (spec(m) - spec(1)) / (gen(m) - gen(1)) - the modelled c(0),
  from the medians of its four timers (replaced here by fixed ones: no timing is
  asserted), and never below 0; the timed calls run (tiny models)."""
  from specjax.decoding.drafters import LMDrafter
  from specjax.distributions import SamplingConfig
  from specjax.policies import cost_profile
  from tests.helpers import sharpened_noisy_pair
  target, tp, dp = sharpened_noisy_pair()
  seen = {}

  def medians(timers, rounds):
    for once in timers.values():
      once()  # the real calls run
    seen.update(timers)
    return {("spec", 1): 1.0, ("spec", 9): 3.6, ("gen", 1): 0.9, ("gen", 9): 2.9}

  monkeypatch.setattr("specjax.policies.timers.interleaved_medians", medians)
  prof = _profile(cache_length=40, batch=2)
  never = cost_aware.make_params(acceptance.constant_table([0.0] * K), prof.round_cost(
      "eagle_chain"))
  kw = dict(plain_policy=cost_aware.CostAwareLength(K), plain_params=never, new_tokens=9)
  drafter = LMDrafter(K, SamplingConfig(temperature=0.0), target)
  got = cost_profile.loop_overhead(prof, 1.2, target, tp, drafter, dp, [3, 4, 5], **kw)
  assert got == pytest.approx(2.6 / 2.0 - 1.2) and set(seen) == {
      ("spec", 1), ("spec", 9), ("gen", 1), ("gen", 9)}
  assert cost_profile.loop_overhead(prof, 1.5, target, tp, drafter, dp, [3, 4, 5], **kw) == 0.0


def test_fit_held_out_reads_the_error_on_the_second_half_and_refits_on_all():
  rec = {"position": np.array([0, 1, 0, 1, 0, 0]), "confidence": np.array([0.9] * 6),
         "accepted": np.array([1, 1, 1, 0, 0, 0]), "row": np.array([0, 0, 1, 1, 2, 3])}
  table, rel = acceptance.fit_held_out(rec, 2, num_prompts=4)
  everything = acceptance.fit(rec["position"], rec["confidence"], rec["accepted"], 2)
  np.testing.assert_allclose(table.p_hat, everything.p_hat)
  assert rel["records"] == 2 and rel["observed"] == 0.0  # rows 2 and 3 only
  first = acceptance.fit(rec["position"][:4], rec["confidence"][:4], rec["accepted"][:4], 2)
  assert rel["ece"] == pytest.approx(float(first.predict(np.array([0]), np.array([0.9]))[0]))
