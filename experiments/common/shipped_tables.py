"""Acceptance tables shipped with a target's drafters, for the cost-aware policy
(docs/spec.md §5): one JSON file per (drafting source, rule, temperature, K) under
``specjax/models/assets/<target>/acceptance/``, written by
``python -m experiments.calibrate_acceptance`` on held-out prompts disjoint from every
evaluation prompt, and refused when loaded for another target, drafter head, rule,
temperature or K (:func:`specjax.policies.acceptance.load`).

* :func:`table_path` -- where a table lives;
* :func:`table_metadata` -- what a table must match (the target's and the head's
  weight hashes, the source, the rule with its hyperparameters, T, K);
* :func:`load_shipped` -- the fitted table, checked.
"""

from __future__ import annotations

import json
import os

from specjax.models import drafter_assets

SOURCES = ("lookup_chain", "eagle_chain")  # the sources tables are shipped for


def _rule_label(rule: str, hparams: dict) -> str:
  hp = "".join(f"-{k}{v}" for k, v in sorted(hparams.items()))
  return f"{rule}{hp}"


def table_path(target_name: str, source: str, rule: str, hparams: dict, temperature: float,
               k: int) -> str:
  """``assets/<target>/acceptance/<source>-<rule>[-<hparam><value>]-t<T>-k<K>.json``."""
  if source not in SOURCES:
    raise ValueError(f"source={source!r}: acceptance tables are shipped for {SOURCES}")
  name = f"{source}-{_rule_label(rule, hparams)}-t{float(temperature):g}-k{int(k)}.json"
  return os.path.join(drafter_assets.assets_root(), target_name, "acceptance", name)


def table_metadata(model_hashes: dict, source: str, rule: str, hparams: dict,
                   temperature: float, k: int) -> dict:
  """The metadata a table is saved with and checked against on load: the target's
  weight hash and, for a model source, the head's (``model_hashes``:
  ``specjax.provenance.model_hashes`` of the run's sources)."""
  models = {"target": model_hashes.get("target")}
  if source != "lookup_chain":
    models["eagle"] = model_hashes.get("eagle")
  return dict(models=models, drafter=source,
              verifier=json.loads(json.dumps({"rule": rule, **hparams})),
              temperature=float(temperature), k=int(k))


def load_shipped(target_name: str, model_hashes: dict, source: str, rule: str, hparams: dict,
                 temperature: float, k: int):
  """``(FittedAcceptance, metadata)`` of the shipped table; ``FileNotFoundError`` names the
  file and the command that writes it, ``ValueError`` a table made for another setup."""
  from specjax.policies import acceptance
  path = table_path(target_name, source, rule, hparams, temperature, k)
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f"no acceptance table for {source}, {_rule_label(rule, hparams)}, T={temperature:g}, "
        f"K={k} at {path}; `python -m experiments.calibrate_acceptance "
        f"--model={target_name} --temperatures={temperature:g} --k={k}` writes it for a chat "
        f"model")
  return acceptance.load(path, **table_metadata(model_hashes, source, rule, hparams,
                                                temperature, k))
