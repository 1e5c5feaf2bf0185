"""Verify-length policies in the comparison rows and sweeps (``config.policies``,
``--policies``): the policy factory, the CLI strings, which rows a policy adds,
and that rows without a policy keep their keys.  (The main job runs an AdaEDL
row end to end: tests/experiments/test_benchmark_main.py.)"""

import pytest

from experiments.common import rows
from experiments.configs import compare


def test_factory_builds_adaedl_from_strings():
  from specjax.policies import AdaEDL, AdaEDLParams
  from specjax.policies.factory import NAMES, make_policy, unsupported
  assert NAMES == ("none", "adaedl", "cost_aware")
  assert make_policy("none", 4) == (None, None)
  pol, params = make_policy("AdaEDL", 4, lam="0.6", entropy_factor=0.3, min_draft="0",
                            adaptive="false")
  assert pol == AdaEDL(4, min_draft=0, adaptive=False)
  assert params == AdaEDLParams(entropy_factor=0.3, lam=0.6)
  assert unsupported("adaedl", "eagle3_chain") == "" and unsupported("none", "eagle_tree") == ""
  assert "trees" in unsupported("adaedl", "eagle_tree")
  assert "model-free" in unsupported("adaedl", "lookup_chain")


@pytest.mark.parametrize("spec,message", [
    ("sv", "policy='sv' is unknown; allowed: none, adaedl"),
    ("adaedl:gamma=0.2", "['gamma'] unknown; allowed: entropy_factor, lam"),
    ("adaedl:lam=1.5", "lam=1.5 is outside the allowed range [0.0, 1.0]"),
    ("adaedl:lam=abc", "lam='abc' is not a float"),
    ("adaedl:min_draft=5", "min_draft=5 must be in [0, K=4]"),
    ("adaedl:lam", "'lam' is not hparam=value"),
    ("none:lam=0.5", "policy 'none' takes no hyperparameters"),
])
def test_bad_policy_strings_name_the_value(spec, message):
  with pytest.raises(ValueError) as e:
    rows.parse_policies(spec, 4)
  assert message in str(e.value)


def test_cli_strings_parse_to_converted_values():
  got = rows.parse_policies("none, adaedl, adaedl:lam=0.6:min_draft=0, adaedl:lam=0.6:min_draft=0",
                            4)
  assert got == [("none", {}), ("adaedl", {}), ("adaedl", {"lam": 0.6, "min_draft": 0})]
  assert rows.parse_policies("", 4) == [("none", {})]


def test_policy_rows_for_chain_drafters_only_and_stable_keys():
  c = compare.get_config()
  c.rules = "lossless, mars:theta=0.9"
  base = rows.default_rows(c)  # policies = "none"
  c.policies = "none, adaedl:lam=0.6"
  both = rows.default_rows(c)
  assert [r for r in both if "policy" not in r] == base  # same rows, same keys
  pol = [r for r in both if "policy" in r]
  assert {r["drafter"] for r in pol} == {"chain"}  # the static tree gets none
  assert {r["method"] for r in pol} == {"lossless+adaedl(lam=0.6)",
                                        "mars(theta=0.9)+adaedl(lam=0.6)"}
  assert len(pol) == 2 * len(c.temperatures) and len({r["key"] for r in both}) == len(both)
  from experiments.compare.evaluation import build_policy
  policy, params, info = build_policy(None, pol[0])
  assert policy.num_draft == c.num_draft and float(params.lam) == 0.6 and info == {}
  assert build_policy(None, base[1]) == (None, None, {})
  tree = next(r for r in base if r["drafter"] == "tree")  # a depth, no K
  assert "num_draft" not in tree and build_policy(None, tree) == (None, None, {})
  with pytest.raises(ValueError, match="chooses verify lengths of chains"):
    build_policy(None, dict(tree, policy="adaedl", policy_hparams={"lam": 0.6}))


def test_sweeps_take_policies():
  from experiments import sweep_k, sweep_temperature, sweep_theta
  from experiments.configs import k, temperature, theta
  for mod, cfg in ((sweep_k, k), (sweep_theta, theta), (sweep_temperature, temperature)):
    c = cfg.get_config()
    plain = mod.rows(c)
    c.policies = "none, adaedl"
    both = mod.rows(c)
    assert [r for r in both if "policy" not in r] == plain, mod.__name__
    assert any(r.get("policy") == "adaedl" for r in both), mod.__name__
  c = k.get_config()
  c.policies = "adaedl:min_draft=2"  # K = 1 is in c.ks: refused before any row runs
  with pytest.raises(ValueError, match="min_draft=2 must be in \\[0, K=1\\]"):
    sweep_k.rows(c)


def test_adapt_rows_for_eagle_drafters_only_and_stable_keys():
  """``config.adapt`` (``--adapt``): an adapting EAGLE row beside every frozen one, its
  hyperparameters in the method and the row; other drafters get none; rows without
  adaptation keep their keys; bad strings name the value."""
  c = compare.get_config()
  c.rules = "lossless"
  c.drafters = ("chain", "eagle_chain", "eagle_tree")
  c.eagle_dir = "eagle3"
  base = rows.default_rows(c)  # adapt = "none"
  c.adapt = "none, online:every=4:learning_rate=0.05"
  both = rows.default_rows(c)
  assert [r for r in both if "adapt" not in r] == base
  adapted = [r for r in both if "adapt" in r]
  assert {r["drafter"] for r in adapted} == {"eagle_chain", "eagle_tree"}
  assert {r["method"] for r in adapted} == {"lossless+online(every=4,learning_rate=0.05)"}
  assert adapted[0]["adapt"] == {"every": 4, "learning_rate": 0.05}
  assert rows.parse_adapt("") == [("none", {})]
  for spec, message in (("offline", "adapt 'offline' unknown"), ("online:every=0", "every"),
                        ("none:every=2", "takes no hyperparameters")):
    with pytest.raises(ValueError, match=message):
      rows.parse_adapt(spec)
