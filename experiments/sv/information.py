"""How much the companion's signals tell about acceptance, with an interval over prompts.

Speculative Verification (Kim et al. 2025, Sec. 3.2 and Table 1) measures the
information a companion's signals carry about whether the target accepts a
draft: ``IG(S, A) = H(X) - H(X | S, A)`` for the acceptance bit ``X``, binned
``(S, A)``, reported as a share of ``H(X)``. The calibration run
(:mod:`experiments.sv.calibrate`) keeps every record it fitted its tables on
(``records.npz``: ``S``, ``A``, ``accepted`` and the prompt ``row`` of each
reached draft position). This module turns those records into the gain with a
95% bootstrap interval that resamples **prompts**: records of one
prompt share its text and its decoding, so they are not independent, and
resampling records would make the interval too narrow.

The statistic depends on the records only through the counts of (bin,
accepted) pairs, so each prompt is reduced to its ``[cells, 2]`` count table
(:func:`prompt_counts`) and a bootstrap sample is the sum of the resampled
prompts' tables (:func:`information_of_counts`). Two companions calibrated on
the same prompts are compared paired: one resample of the prompts for both
(:func:`paired_gain_difference`).

Plug-in gains are biased upwards by about ``(cells - 1) / (2 n ln 2)`` bits
(Miller-Madow), and more so in a bootstrap resample, whose repeated prompts
spread fewer distinct records over the same bins: the resampled gains sit
above the estimate, and a percentile interval built from them can miss a true
gain of 0 entirely. So each gain comes with the bootstrap's bias correction and
a *basic* interval (:func:`bias_corrected`), which carry that shift back to the
other side of the estimate; the tables print the plug-in value (the papers'
statistic), the corrected one and the Miller-Madow bias beside them. The
module imports no JAX at load (the results tables import it); its functions
load the binning of :mod:`specjax.policies.calibration`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

import numpy as np

from experiments.common.bootstrap import bootstrap_sums

SIGNALS = ("S", "SA")  # the SV table's two inputs: S alone (one A bin) or (S, A)


def plugin_bias_bits(n: int, cells: int, outcomes: int = 2) -> float:
  """Expected plug-in information of ``cells`` bins about an independent ``outcomes``-
  valued variable from n records (Miller-Madow): (outcomes - 1)(cells - 1) / (2 n ln 2)
  bits. An estimated gain of this size is what binning noise alone gives."""
  return (outcomes - 1) * (cells - 1) / (2 * n * math.log(2))


@dataclasses.dataclass(frozen=True)
class CalibrationRecords:
  """The per-draft records of one calibration run, ``[N]`` each.

  ``s``, ``a``: the companion's signals (float in [0, 1]); ``accepted``: the
  target's verdict (0 / 1); ``row``: the calibration prompt of the record
  (an index into the run's prompts); ``prompt_set``: that prompt's set, an
  index into the run's ``prompt_sets``."""
  s: np.ndarray
  a: np.ndarray
  accepted: np.ndarray
  row: np.ndarray
  prompt_set: np.ndarray

  @classmethod
  def load(cls, path: str) -> "CalibrationRecords":
    """The records of ``<workdir>/records.npz`` (plain arrays; no pickles)."""
    with np.load(path, allow_pickle=False) as z:
      missing = [k for k in ("S", "A", "accepted", "row", "prompt_set") if k not in z.files]
      if missing:
        raise ValueError(f"{path}: records lack {missing} (has {sorted(z.files)})")
      return cls(s=z["S"].astype(np.float64), a=z["A"].astype(np.float64),
                 accepted=z["accepted"].astype(np.int64), row=z["row"].astype(np.int64),
                 prompt_set=z["prompt_set"].astype(np.int64))

  def subset(self, mask: np.ndarray) -> "CalibrationRecords":
    return CalibrationRecords(*(getattr(self, f.name)[mask] for f in dataclasses.fields(self)))


def prompt_counts(rec: CalibrationRecords, s_edges, a_edges, signals: str = "SA"
                  ) -> tuple[np.ndarray, np.ndarray]:
  """``(rows [P], counts [P, cells, 2])``: for each prompt that has records, the number of
  its records in each signal bin (``signals`` "SA": the ``(S, A)`` grid; "S": the S bins
  alone) that were rejected (``[..., 0]``) and accepted (``[..., 1]``)."""
  from specjax.policies.calibration import np_bin_index  # imports JAX: not at module level
  if signals not in SIGNALS:
    raise ValueError(f"signals={signals!r}; choose from {SIGNALS}")
  s_edges, a_edges = np.asarray(s_edges), np.asarray(a_edges)
  si = np_bin_index(s_edges, rec.s)
  n_a = len(a_edges) - 1 if signals == "SA" else 1
  cell = si * n_a + (np_bin_index(a_edges, rec.a) if signals == "SA" else 0)
  cells = (len(s_edges) - 1) * n_a
  rows, prompt = np.unique(rec.row, return_inverse=True)
  counts = np.zeros((len(rows), cells, 2), np.int64)
  np.add.at(counts, (prompt, cell, (rec.accepted > 0).astype(np.int64)), 1)
  return rows, counts


def _entropies(tables: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(n, H(X), H(X | bin))`` (bits) of ``[..., cells, 2]`` (rejected, accepted) count
  tables, one value per table (empty cells count for nothing)."""
  from specjax.policies.calibration import binary_entropy
  per_cell = tables.sum(-1)
  n = per_cell.sum(-1)
  h_x = binary_entropy(tables[..., 1].sum(-1) / np.maximum(n, 1))
  seen = per_cell > 0
  rate = tables[..., 1] / np.where(seen, per_cell, 1.0)
  h_cond = np.sum(np.where(seen, per_cell * binary_entropy(rate), 0.0), -1) / np.maximum(n, 1)
  return n, h_x, h_cond


def _ig_frac(h_x: np.ndarray, h_cond: np.ndarray) -> np.ndarray:
  """``1 - H(X | bin) / H(X)``, 0 where ``H(X) = 0``."""
  return np.where(h_x > 0, (h_x - h_cond) / np.where(h_x > 0, h_x, 1.0), 0.0)


def information_of_counts(counts: np.ndarray) -> dict:
  """Plug-in ``H(X)``, ``H(X | bin)`` (bits) and ``ig_frac = 1 - H(X | bin) / H(X)`` of a
  ``[cells, 2]`` (rejected, accepted) count table."""
  n, h_x, h_cond = (float(v) for v in _entropies(np.asarray(counts, np.float64)))
  if n == 0:
    raise ValueError("no records in the count table")
  return {"n": int(n), "H_X": h_x, "H_X_given": h_cond, "ig": h_x - h_cond,
          "ig_frac": float(_ig_frac(h_x, h_cond))}


def _ig_frac_of_sums(tables: np.ndarray) -> np.ndarray:
  """``ig_frac`` of each ``[..., cells, 2]`` count table (e.g. one per resample)."""
  _, h_x, h_cond = _entropies(tables)
  return _ig_frac(h_x, h_cond)


def bias_corrected(estimate: float, draws: np.ndarray, alpha: float = 0.05) -> dict:
  """The bootstrap's bias correction of ``estimate`` from its resampled ``draws``:
  ``corrected = 2 theta - mean(draws)`` and the basic interval ``ci = (2 theta - q_high,
  2 theta - q_low)`` of the draws' ``alpha / 2``, ``1 - alpha / 2`` quantiles (Davison and
  Hinkley 1997, Sec. 2.4 and 5.2)."""
  lo, hi = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
  return {"corrected": float(2 * estimate - np.mean(draws)),
          "ci": (float(2 * estimate - hi), float(2 * estimate - lo))}


def gain_with_interval(rec: CalibrationRecords, s_edges, a_edges, signals: str = "SA",
                       num_resamples: int = 2000, seed: int = 0) -> dict:
  """:func:`information_of_counts` of all ``rec`` on the bins (``ig_frac`` the plug-in
  ``IG / H(X)``), with ``ig_frac_corrected`` and ``ig_frac_ci``: the bootstrap's bias
  correction and 95% basic interval over prompts (:func:`bias_corrected`); ``prompts``,
  ``cells`` (for the plug-in bias)."""
  _, counts = prompt_counts(rec, s_edges, a_edges, signals)
  out = information_of_counts(counts.sum(0))
  bc = bias_corrected(out["ig_frac"],
                      _ig_frac_of_sums(bootstrap_sums(counts, num_resamples, seed)))
  out["ig_frac_corrected"], out["ig_frac_ci"] = bc["corrected"], bc["ci"]
  out["prompts"], out["cells"] = int(len(counts)), int(counts.shape[1])
  return out


def paired_gain_difference(a: CalibrationRecords, b: CalibrationRecords, s_edges, a_edges,
                           signals: str = "SA", num_resamples: int = 2000, seed: int = 0
                           ) -> dict:
  """``IG/H(X)`` of ``a`` minus that of ``b``, two companions calibrated on the same prompts
  (same ``row`` ids): the plug-in ``difference``, its bias-corrected value and 95% basic
  interval (:func:`bias_corrected`) from resampling the prompts once for both. Only
  prompts with records in both runs take part."""
  rows_a, ca = prompt_counts(a, s_edges, a_edges, signals)
  rows_b, cb = prompt_counts(b, s_edges, a_edges, signals)
  common, ia, ib = np.intersect1d(rows_a, rows_b, return_indices=True)
  if len(common) == 0:
    raise ValueError("the two runs share no prompt rows")
  both = np.stack([ca[ia], cb[ib]], axis=1)  # [P, 2, cells, 2]
  diff = lambda sums: _ig_frac_of_sums(sums[..., 0, :, :]) - _ig_frac_of_sums(sums[..., 1, :, :])
  est = float(diff(both.sum(0).astype(np.float64)))
  bc = bias_corrected(est, diff(bootstrap_sums(both, num_resamples, seed)))
  return {"difference": est, "corrected": bc["corrected"], "ci": bc["ci"],
          "prompts": int(len(common))}


def a_signal_against_s(rec: CalibrationRecords, s_edges, a_edges, num_resamples: int = 2000,
                       seed: int = 0) -> dict:
  """Whether the A signal carries more of the gain than S (SV Table 1: S alone 4-13% of
  ``H(X)``, with A 20-34%), on one set of records: ``a_gain = IG(S, A) - IG(S)`` (what A
  adds), ``s_gain = IG(S)`` (S alone), both over ``H(X)``, and ``difference = a_gain -
  s_gain`` with its bias-corrected value and 95% basic interval over prompts
  (:func:`bias_corrected`), the prompts resampled once for the three gains. Positive:
  A carries most of it."""
  _, c_sa = prompt_counts(rec, s_edges, a_edges, "SA")
  _, c_s = prompt_counts(rec, s_edges, a_edges, "S")
  cells = c_sa.shape[1]
  both = np.concatenate([c_sa, c_s], axis=1)  # [P, cells (S, A) + cells S, 2]: same prompts
  gains = lambda sums: (_ig_frac_of_sums(sums[..., :cells, :]),
                        _ig_frac_of_sums(sums[..., cells:, :]))
  sa, s = (float(g) for g in gains(both.sum(0).astype(np.float64)))
  sa_draws, s_draws = gains(bootstrap_sums(both, num_resamples, seed))
  bc = bias_corrected(sa - 2 * s, sa_draws - 2 * s_draws)
  return {"a_gain": sa - s, "s_gain": s, "difference": sa - 2 * s,
          "corrected": bc["corrected"], "ci": bc["ci"], "prompts": int(len(both))}


def by_prompt_set(rec: CalibrationRecords, names) -> Mapping[str, CalibrationRecords]:
  """``{set name: its records}`` for the sets that have records, then ``"all"``."""
  out = {n: rec.subset(rec.prompt_set == i) for i, n in enumerate(names)
         if np.any(rec.prompt_set == i)}
  out["all"] = rec
  return out
