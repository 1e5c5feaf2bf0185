"""Calibrated acceptance of a drafter's drafts: ``a(i, c) = P(draft i accepted |
the verifier reached it, the drafter's confidence at i is c)`` (docs/spec.md §5).

The confidence at position i is the drafter's own score where it gives one
(``Proposal.confidence``: prompt lookup's matched n-gram length over its
longest), else the largest probability of the drafter's distribution there
(:func:`draft_confidence` of ``Proposal.q_node``).  It depends on the drafts
before i only, so a policy may decide from it whether draft i is offered (the
cost-aware policy, :mod:`specjax.policies.cost_aware`).

Records come from ordinary speculative decoding (every row verifies all K) on
held-out prompts, one per position the verifier reached (:func:`collect`):
after a rejection the later positions were never tried, so the estimate is
the acceptance *given that the position is reached* -- the factor in
``E(n) = 1 + sum_{i<=n} a_1 ... a_i``.  A table depends on the target, the
drafter, the rule and the temperature; :func:`load` refuses one made for
another.  Estimates per (position, confidence bin) are smoothed towards the
position's own rate: ``(accepted + 2 alpha r_i) / (count + 2 alpha)`` with
``r_i`` the position's acceptance over all bins (the table's ``prior``), so an
empty bin falls back to the position's rate.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.proposal import draft_confidence
from specjax.policies.base import VerifyPolicy, node_distributions
from specjax.policies.calibration import (bin_index, fixed_edges, metadata_mismatches,
                                          np_bin_index)
from specjax.policies.probe import run_probe

FORMAT = "specjax.acceptance_table/1"


def proposal_confidence(proposal) -> jax.Array:
  """``[B, K]``: the drafter's own score where it gives one (``Proposal.confidence``;
  prompt lookup: the match length), else :func:`draft_confidence` of its node
  distributions (one-hot drafts without a score: 1)."""
  if proposal.confidence is not None:
    return proposal.confidence.astype(jnp.float32)
  return draft_confidence(node_distributions(proposal))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AcceptanceTable:
  """Acceptance estimates per (draft position, confidence bin) (a pytree: pass it
  in policy params).

  Attributes:
    edges: [nC+1] float32 confidence bin edges (0 first, 1 last, increasing).
    p_hat: [K, nC] float32 estimated acceptance given the position is reached.
    prior: [K] float32 each position's acceptance over all confidences.
  """

  edges: jax.Array
  p_hat: jax.Array
  prior: jax.Array

  def lookup(self, confidence: jax.Array) -> jax.Array:
    """``a [B, K]`` at ``confidence [B, K]`` (position = the last axis)."""
    k = self.p_hat.shape[0]
    return self.p_hat[jnp.arange(k)[None, :], bin_index(self.edges, confidence)]


def constant_table(accept, num_bins: int = 1) -> AcceptanceTable:
  """A table with acceptance ``accept[i]`` at every confidence of position i
  (a scalar: the same at every position; ``accept`` [K] or a scalar with K
  given by its length)."""
  a = np.atleast_1d(np.asarray(accept, np.float32))
  return AcceptanceTable(jnp.asarray(fixed_edges(num_bins), jnp.float32),
                         jnp.asarray(np.repeat(a[:, None], num_bins, 1)), jnp.asarray(a))


@dataclasses.dataclass(frozen=True)
class FittedAcceptance:
  """A fitted table with its counts (numpy, host side).

  Attributes:
    edges: [nC+1]; counts / accepts: [K, nC] int64 records and accepted records per
    bin; p_hat: [K, nC]; prior: [K]; alpha: the smoothing weight.
  """

  edges: np.ndarray
  counts: np.ndarray
  accepts: np.ndarray
  p_hat: np.ndarray
  prior: np.ndarray
  alpha: float

  def table(self) -> AcceptanceTable:
    f32 = lambda v: jnp.asarray(v, jnp.float32)
    return AcceptanceTable(f32(self.edges), f32(self.p_hat), f32(self.prior))

  def predict(self, position: np.ndarray, confidence: np.ndarray) -> np.ndarray:
    return self.p_hat[np.asarray(position), np_bin_index(self.edges, confidence)]

  def reliability(self, position, confidence, accepted) -> dict:
    """Calibration on records (held-out ones for an honest figure): per bin of the
    *predicted* acceptance (10 equal bins), the count, mean prediction and observed
    rate, and the expected calibration error ``sum_bins n/N |pred - obs|``."""
    pred = self.predict(position, confidence)
    x = np.asarray(accepted, np.float64).reshape(-1)
    b = np_bin_index(fixed_edges(10), pred)
    rows, ece = [], 0.0
    for j in range(10):
      m = b == j
      if m.any():
        rows.append({"bin": j, "count": int(m.sum()), "predicted": float(pred[m].mean()),
                     "observed": float(x[m].mean())})
        ece += m.sum() / max(x.size, 1) * abs(pred[m].mean() - x[m].mean())
    return {"bins": rows, "ece": float(ece), "records": int(x.size),
            "observed": float(x.mean()) if x.size else float("nan")}


def fit(position, confidence, accepted, num_draft: int, edges=None, *,
        alpha: float = 1.0) -> FittedAcceptance:
  """Fit the table by counting, smoothed towards each position's rate (module docstring).

  Args:
    position: [N] 0-based draft index of each record (< ``num_draft``).
    confidence: [N] the drafter's confidence at that position, in [0, 1].
    accepted: [N] 0/1 outcomes.
    edges: confidence bin edges (default 10 equal bins).
    alpha: pseudo-count weight >= 0.
  """
  pos = np.asarray(position).reshape(-1)
  conf = np.asarray(confidence, np.float64).reshape(-1)
  x = np.asarray(accepted).reshape(-1)
  if not pos.shape == conf.shape == x.shape:
    raise ValueError(f"position, confidence, accepted must have equal lengths; got "
                     f"{pos.shape}, {conf.shape}, {x.shape}")
  if not (isinstance(num_draft, int) and num_draft >= 1):
    raise ValueError(f"num_draft={num_draft!r} must be an integer >= 1")
  if pos.size and (pos.min() < 0 or pos.max() >= num_draft):
    raise ValueError(f"position must be in [0, num_draft={num_draft}); got "
                     f"[{pos.min()}, {pos.max()}]")
  if not np.all((x == 0) | (x == 1)):
    raise ValueError("accepted must hold 0/1 outcomes")
  if not alpha >= 0:
    raise ValueError(f"alpha={alpha!r} must be >= 0")
  edges = fixed_edges(10) if edges is None else np.asarray(edges, np.float64)
  if edges.ndim != 1 or len(edges) < 2 or np.any(np.diff(edges) <= 0):
    raise ValueError("edges must be a strictly increasing 1-D array of >= 2 edges")
  nc = len(edges) - 1
  flat = pos * nc + np_bin_index(edges, conf)
  counts = np.bincount(flat, minlength=num_draft * nc).reshape(num_draft, nc)
  accepts = np.rint(np.bincount(flat, weights=x.astype(np.float64),
                                minlength=num_draft * nc)).astype(np.int64).reshape(num_draft, nc)
  n_pos, a_pos = counts.sum(1), accepts.sum(1)
  prior = np.where(n_pos > 0, (a_pos + alpha) / np.maximum(n_pos + 2 * alpha, 1e-12), 0.5)
  den = counts + 2.0 * alpha
  p = np.where(den > 0, (accepts + 2.0 * alpha * prior[:, None]) / np.where(den > 0, den, 1),
               prior[:, None])
  return FittedAcceptance(edges, counts, accepts, p, prior, float(alpha))


def fit_held_out(records: dict, num_draft: int, num_prompts: int
                 ) -> tuple[FittedAcceptance, dict]:
  """``(table, reliability)`` from :func:`collect`'s ``records`` of ``num_prompts``
  prompts: the calibration error read on the second half of the prompts with a table
  fitted on the first half, then the table refitted on all of them."""
  pos, conf, acc = records["position"], records["confidence"], records["accepted"]
  fit_on = lambda m: fit(pos[m], conf[m], acc[m], num_draft)
  first = records["row"] < num_prompts // 2
  rel = fit_on(first).reliability(pos[~first], conf[~first], acc[~first])
  return fit_on(np.ones_like(first)), rel


def save(path: str, fitted: FittedAcceptance, metadata: dict) -> str:
  """Write the table and ``metadata`` (must hold ``"models"``, ``"drafter"``,
  ``"verifier"``, ``"temperature"``) as one JSON file."""
  for key in ("models", "drafter", "verifier", "temperature"):
    if key not in metadata:
      raise ValueError(f"acceptance table metadata needs {key!r} (what the table belongs to)")
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  body = dict(metadata, format=FORMAT, alpha=fitted.alpha, edges=fitted.edges.tolist(),
              counts=fitted.counts.tolist(), accepts=fitted.accepts.tolist(),
              p_hat=fitted.p_hat.tolist(), prior=fitted.prior.tolist(),
              num_records=int(fitted.counts.sum()))
  with open(path, "w") as f:
    json.dump(body, f, indent=1, sort_keys=True, default=str)
  return path


def load(path: str, **expected) -> tuple[FittedAcceptance, dict]:
  """Load a table saved by :func:`save`, refusing one whose metadata differ from
  ``expected`` (e.g. ``models=..., drafter="eagle3", verifier="lossless",
  temperature=1.0``; entries set to None are not checked): ``ValueError`` naming
  every mismatch."""
  with open(path) as f:
    meta = json.load(f)
  if meta.get("format") != FORMAT:
    raise ValueError(f"{path} is not an acceptance table (format {meta.get('format')!r}, "
                     f"expected {FORMAT!r})")
  bad = metadata_mismatches(json.loads(json.dumps(expected, default=str)), meta)
  if bad:
    raise ValueError(f"acceptance table {path} was made for a different setup: "
                     + "; ".join(bad))
  arr = lambda k, dt=np.float64: np.asarray(meta[k], dt)
  fitted = FittedAcceptance(arr("edges"), arr("counts", np.int64), arr("accepts", np.int64),
                            arr("p_hat"), arr("prior"), float(meta["alpha"]))
  return fitted, meta


def records_from_steps(steps) -> dict:
  """``{"position", "confidence", "accepted", "row"}`` numpy arrays from step records
  of a loop that verified all K drafts and reported a ``confidence [B, K]`` signal:
  one entry per position the verifier reached (``offered``)."""
  out = {"position": [], "confidence": [], "accepted": [], "row": []}
  for rec in steps:
    ri, pi = np.nonzero(np.asarray(rec.offered))
    out["position"].append(pi.astype(np.int32))
    out["row"].append(ri.astype(np.int32))
    out["confidence"].append(np.asarray(rec.signals["confidence"])[ri, pi])
    out["accepted"].append(np.asarray(rec.accepted)[ri, pi].astype(np.int8))
  return {name: np.concatenate(v) if v else np.zeros((0,)) for name, v in out.items()}


@dataclasses.dataclass(frozen=True)
class ConfidenceProbe(VerifyPolicy):
  """Verify all K drafts (``FixedLength``) and report the drafter's confidence
  (signal ``confidence [B, K]``) for :func:`collect`."""

  def choose(self, params, state, prev, last, proposal, active):
    gamma = jnp.where(active, self.num_draft, 0).astype(jnp.int32)
    return gamma, state, {"confidence": proposal_confidence(proposal)}


def collect(target, target_params, drafter, draft_params, verifier, prompts, *,
            max_new_tokens: int, sampling, key=None, eos_token_id="config",
            cache_length: Optional[int] = None, row_offset: int = 0) -> dict:
  """Records of ordinary speculative decoding with ``drafter`` (chains) on
  ``prompts``: ``{"position", "confidence", "accepted", "row"}`` numpy arrays, one
  entry per position the verifier reached (``row``: the prompt's index), and
  ``tokens_per_call``."""
  run = run_probe(target, target_params, drafter, draft_params,
                  ConfidenceProbe(drafter.num_draft), None, verifier, prompts,
                  max_new_tokens=max_new_tokens, sampling=sampling, key=key,
                  eos_token_id=eos_token_id, cache_length=cache_length, row_offset=row_offset)
  return dict(records_from_steps(run.steps), tokens_per_call=run.tokens_per_call)
