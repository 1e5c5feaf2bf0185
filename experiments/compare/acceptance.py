"""Acceptance of one drafter on one prompt set at one temperature (no timing).

One *cell* runs lossless verification over a fixed prompt list, ``seeds`` runs
per prompt at T > 0 (one at T = 0), in batches (acceptance does not depend on
the batch: every row has its own RNG stream). Per prompt it sums the accepted
draft tokens, the target calls and, per draft position, the accepted and
offered counts (chains: the i-th draft; trees: depth i).

tau = (accepted + target calls) / target calls, summed over prompts, with a
95% percentile-bootstrap interval over prompts (a prompt's seeds stay
together). The per-prompt sums are kept in the result (``per_prompt``: rows of
``[accepted + calls, calls]``) so that two drafters run on the same prompts and
keys can be compared *paired* (:func:`paired_tau_gain`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from experiments.common.bootstrap import bootstrap_ci, paired_ratio_gain


@dataclasses.dataclass(frozen=True)
class CellSettings:
  """How a cell runs.

  Attributes:
    k: chain draft length K.
    depth, top_k, total_tokens: the dynamic (EAGLE-2) tree: depth, children per
      expanded node, nodes verified per step.
    seeds: runs per prompt at T > 0 (keys ``0 .. seeds - 1``; one run at T = 0).
    batch_size: rows per call.
    max_new_tokens: tokens generated per prompt.
  """

  k: int = 5
  depth: int = 5
  top_k: int = 8
  total_tokens: int = 24
  seeds: int = 3
  batch_size: int = 8
  max_new_tokens: int = 128


def _ratio(x: np.ndarray) -> float:
  return float(x[:, 0].sum() / max(x[:, 1].sum(), 1.0))


def cell_stats(per_prompt: list) -> dict:
  """tau and per-position acceptance (with bootstrap CIs over prompts) from
  per-prompt sums ``{"accepted", "calls", "accept_counts" [K], "offered_counts" [K]}``."""
  acc = np.array([p["accepted"] for p in per_prompt], np.float64)
  calls = np.array([p["calls"] for p in per_prompt], np.float64)
  a = np.array([p["accept_counts"] for p in per_prompt], np.float64)  # [n, K]
  o = np.array([p["offered_counts"] for p in per_prompt], np.float64)
  pairs = np.stack([acc + calls, calls], 1)
  return {"tau": _ratio(pairs), "tau_ci": bootstrap_ci(pairs, _ratio),
          "num_prompts": len(per_prompt), "target_calls": int(calls.sum()),
          "accept_rate_per_position": (a.sum(0) / np.maximum(o.sum(0), 1)).tolist(),
          "offered_per_position": o.sum(0).astype(int).tolist(),
          "per_prompt": pairs.astype(int).tolist()}


def run_cell(ms, sources, kind: str, temperature: float, prompts: list,
             settings: CellSettings) -> dict:
  """:func:`cell_stats` of drafter ``kind`` (a :mod:`specjax.decoding.drafter_factory`
  kind) from ``sources`` on the target of model set ``ms``, over ``prompts`` (token
  id lists), lossless verification at ``temperature``; adds ``seeds``."""
  import jax

  from specjax import verifiers
  from specjax.decoding.drafter_factory import make_drafter
  from specjax.decoding.speculative import speculative_generate
  from specjax.distributions import SamplingConfig
  samp = SamplingConfig(temperature)
  s = settings
  drafter, dparams = make_drafter(kind, samp, sources, num_draft=s.k, depth=s.depth,
                                  top_k=s.top_k, total_tokens=s.total_tokens)
  seeds = s.seeds if temperature > 0 else 1
  per = [{"accepted": 0, "calls": 0, "accept_counts": 0, "offered_counts": 0} for _ in prompts]
  for seed in range(seeds):
    for i in range(0, len(prompts), s.batch_size):
      rows = prompts[i:i + s.batch_size]
      out = speculative_generate(ms.target, ms.target_params, drafter, dparams,
                                 verifiers.get("lossless"), rows,
                                 max_new_tokens=s.max_new_tokens, sampling=samp,
                                 key=jax.random.key(seed), row_offset=i)
      st = jax.device_get(out.stats)
      for j in range(len(rows)):
        p = per[i + j]
        p["accepted"] += int(st.accepted[j])
        p["calls"] += int(st.target_calls[j])
        p["accept_counts"] = p["accept_counts"] + np.asarray(st.accept_counts[j])
        p["offered_counts"] = p["offered_counts"] + np.asarray(st.offered_counts[j])
  return dict(cell_stats(per), seeds=seeds)


def paired_tau_gain(a: dict, b: dict, num_resamples: int = 2000, seed: int = 0) -> dict:
  """tau(a) / tau(b) - 1 of two cells run on the same prompts and keys, paired
  (:func:`experiments.common.bootstrap.paired_ratio_gain`)."""
  if len(a["per_prompt"]) != len(b["per_prompt"]):
    raise ValueError(f"cells ran different prompt lists: {len(a['per_prompt'])} vs "
                     f"{len(b['per_prompt'])} prompts")
  return paired_ratio_gain(a["per_prompt"], b["per_prompt"], num_resamples, seed)
