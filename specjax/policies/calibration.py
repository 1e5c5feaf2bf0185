"""Calibration of Speculative Verification: the table ``P_hat(accept | S, A)``
(docs/spec.md §5; the SV paper, Kim et al., Table 1).

Logged data: one record per draft position that the verifier actually
reached in ordinary speculative decoding (positions ``i <= n`` of a step that
accepted ``n`` drafts; later positions were never tried), with the companion
signals ``S = sum_v min(P_d, P_c)`` and ``A = min(1, P_c(x)/P_d(x))`` and the
outcome ``X = 1[accepted]``.  Hence ``P_hat`` is the acceptance probability
*given that the position is reached*, exactly the factor in
``E[N|gamma] = sum_n prod_{i<=n} P_hat_i``.

Two binnings of ``[0, 1]^2``: a fixed grid (``fixed_edges``) and adaptive
quantile bins (``quantile_edges``: marginal quantiles of the data, ties merged,
so dense regions get narrow bins).  Bin ``j`` is ``[e_j, e_{j+1})``, the last
one closed (A = 1 exactly is common).  Estimates use additive smoothing
``(accepted + 2 alpha prior) / (count + 2 alpha)``; ``alpha = 1, prior = 1/2``
is Laplace's rule.

A table is saved as ``<path>.npz`` (edges, p_hat, counts) plus
``<path>.json`` (metadata: the model triple's identifiers, verifier, sampling,
binning, entropies).  :func:`load_table` refuses a table whose identifiers
differ from the caller's (``ValueError`` naming the mismatch).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

TABLE_FORMAT = "specjax.sv_table/1"


# --- the table ------------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CalibrationTable:
  """``P_hat(accept | S, A)`` on a product of bins (a pytree: pass it in policy params).

  Attributes:
    s_edges: [nS+1] float32 bin edges of S (first 0, last 1, strictly increasing).
    a_edges: [nA+1] float32 bin edges of A.
    p_hat: [nS, nA] float32 smoothed acceptance probability per bin.
  """

  s_edges: jax.Array
  a_edges: jax.Array
  p_hat: jax.Array

  def lookup(self, s: jax.Array, a: jax.Array) -> jax.Array:
    """``P_hat`` at signals ``s, a`` (any equal shapes; jnp, traceable)."""
    i = bin_index(self.s_edges, s)
    j = bin_index(self.a_edges, a)
    return self.p_hat[i, j]


def bin_index(edges: jax.Array, v: jax.Array) -> jax.Array:
  """Bin of ``v`` for ``edges [n+1]``: ``[e_j, e_{j+1})``, last bin closed, clipped to [0, n-1]."""
  edges = jnp.asarray(edges)
  n = edges.shape[0] - 1
  idx = jnp.searchsorted(edges[1:-1], v, side="right")
  return jnp.clip(idx, 0, n - 1).astype(jnp.int32)


def np_bin_index(edges: np.ndarray, v: np.ndarray) -> np.ndarray:
  """numpy twin of :func:`bin_index`."""
  edges = np.asarray(edges)
  n = len(edges) - 1
  return np.clip(np.searchsorted(edges[1:-1], v, side="right"), 0, n - 1)


def fixed_edges(num_bins: int) -> np.ndarray:
  """``num_bins`` equal-width bins of [0, 1]."""
  if not (isinstance(num_bins, (int, np.integer)) and num_bins >= 1):
    raise ValueError(f"num_bins={num_bins!r} must be an integer >= 1")
  return np.linspace(0.0, 1.0, int(num_bins) + 1)


def quantile_edges(values: np.ndarray, num_bins: int, min_width: float = 1e-3) -> np.ndarray:
  """Adaptive bins: edges at the ``k / num_bins`` quantiles of ``values`` in [0, 1].

  Quantiles closer than ``min_width`` to the previous kept edge or to 1 are
  dropped -- point masses such as A = 1 (or S = 1 up to float rounding) would
  otherwise make empty or sliver bins -- so fewer than ``num_bins`` bins may
  result; the outer edges are 0 and 1.  The result is strictly increasing.
  """
  if not (isinstance(num_bins, (int, np.integer)) and num_bins >= 1):
    raise ValueError(f"num_bins={num_bins!r} must be an integer >= 1")
  v = np.clip(np.asarray(values, np.float64).reshape(-1), 0.0, 1.0)
  if v.size == 0:
    raise ValueError("quantile_edges needs at least one value")
  inner = np.quantile(v, np.arange(1, num_bins) / num_bins) if num_bins > 1 else np.zeros(0)
  edges = [0.0]
  for e in np.sort(inner):
    if e - edges[-1] >= min_width and 1.0 - e >= min_width:
      edges.append(float(e))
  return np.asarray(edges + [1.0])


@dataclasses.dataclass(frozen=True)
class FittedTable:
  """A fitted table with its counts (numpy, host side).

  Attributes:
    s_edges: [nS+1]; a_edges: [nA+1].
    counts: [nS, nA] int64 records per bin; accepts: [nS, nA] int64 accepted records.
    p_hat: [nS, nA] smoothed estimate.
    alpha, prior: the smoothing used.
  """

  s_edges: np.ndarray
  a_edges: np.ndarray
  counts: np.ndarray
  accepts: np.ndarray
  p_hat: np.ndarray
  alpha: float
  prior: float

  @property
  def freq(self) -> np.ndarray:
    """Raw bin frequencies ``accepts / counts`` (nan for empty bins)."""
    with np.errstate(invalid="ignore", divide="ignore"):
      return np.where(self.counts > 0, self.accepts / np.maximum(self.counts, 1), np.nan)

  def table(self) -> CalibrationTable:
    return CalibrationTable(jnp.asarray(self.s_edges, jnp.float32),
                            jnp.asarray(self.a_edges, jnp.float32),
                            jnp.asarray(self.p_hat, jnp.float32))

  def predict(self, s: np.ndarray, a: np.ndarray) -> np.ndarray:
    return self.p_hat[np_bin_index(self.s_edges, s), np_bin_index(self.a_edges, a)]


def fit_table(s, a, x, s_edges, a_edges, *, alpha: float = 1.0,
              prior: float | str = 0.5) -> FittedTable:
  """Fit ``P_hat(accept | S, A)`` by bin counting with additive smoothing.

  Args:
    s, a: [N] signals in [0, 1]; x: [N] 0/1 outcomes (accepted).
    s_edges, a_edges: bin edges (:func:`fixed_edges` / :func:`quantile_edges`).
    alpha: pseudo-count weight (>= 0); ``p = (k + 2 alpha prior) / (n + 2 alpha)``.
    prior: number in [0, 1] or "marginal" (the overall acceptance rate).
  """
  s = np.asarray(s, np.float64).reshape(-1)
  a = np.asarray(a, np.float64).reshape(-1)
  x = np.asarray(x).reshape(-1)
  if not (s.shape == a.shape == x.shape):
    raise ValueError(f"s, a, x must have equal lengths; got {s.shape}, {a.shape}, {x.shape}")
  if not np.all((x == 0) | (x == 1)):
    raise ValueError("x must hold 0/1 acceptance outcomes")
  if not alpha >= 0:
    raise ValueError(f"alpha={alpha!r} must be >= 0")
  for name, e in (("s_edges", s_edges), ("a_edges", a_edges)):
    e = np.asarray(e)
    if e.ndim != 1 or len(e) < 2 or np.any(np.diff(e) <= 0):
      raise ValueError(f"{name} must be a strictly increasing 1-D array of >= 2 edges")
  if prior == "marginal":
    prior = float(np.mean(x)) if x.size else 0.5
  if not 0.0 <= float(prior) <= 1.0:
    raise ValueError(f"prior={prior!r} must be in [0, 1] or 'marginal'")
  s_edges, a_edges = np.asarray(s_edges, np.float64), np.asarray(a_edges, np.float64)
  ns, na = len(s_edges) - 1, len(a_edges) - 1
  flat = np_bin_index(s_edges, s) * na + np_bin_index(a_edges, a)
  counts = np.bincount(flat, minlength=ns * na).reshape(ns, na)
  accepts = np.bincount(flat, weights=x.astype(np.float64), minlength=ns * na)
  accepts = np.rint(accepts).astype(np.int64).reshape(ns, na)
  den = counts + 2.0 * alpha
  with np.errstate(invalid="ignore", divide="ignore"):
    p = np.where(den > 0, (accepts + 2.0 * alpha * prior) / np.where(den > 0, den, 1), prior)
  return FittedTable(s_edges, a_edges, counts, accepts, p, float(alpha), float(prior))


# --- information ----------------------------------------------------------------------------


def binary_entropy(p) -> np.ndarray:
  """``H(p)`` in bits (0 log 0 = 0)."""
  p = np.clip(np.asarray(p, np.float64), 0.0, 1.0)
  with np.errstate(invalid="ignore", divide="ignore"):
    h = -(np.where(p > 0, p * np.log2(np.where(p > 0, p, 1)), 0.0) +
          np.where(p < 1, (1 - p) * np.log2(np.where(p < 1, 1 - p, 1)), 0.0))
  return h


def conditional_entropy(x, groups) -> float:
  """Plug-in ``H(X | G) = sum_g P(g) H(X | G = g)`` in bits, ``groups`` [N] int labels."""
  x = np.asarray(x).reshape(-1).astype(np.float64)
  g = np.asarray(groups).reshape(-1)
  if x.size == 0:
    return 0.0
  _, inv = np.unique(g, return_inverse=True)
  n = np.bincount(inv)
  k = np.bincount(inv, weights=x)
  return float(np.sum(n / x.size * binary_entropy(k / n)))


def information_report(s, a, x, s_edges, a_edges) -> dict:
  """``H(X)``, ``H(X|S)``, ``H(X|S,A)`` (bits, plug-in on the given bins) and the gains.

  ``ig_s = H(X) - H(X|S)``, ``ig = H(X) - H(X|S,A)``, ``ig_frac = ig / H(X)``.
  Plug-in conditional entropies are biased low when bins hold few records;
  ``min_bin_count`` is reported for that reason.
  """
  x = np.asarray(x).reshape(-1)
  si = np_bin_index(s_edges, np.asarray(s).reshape(-1))
  ai = np_bin_index(a_edges, np.asarray(a).reshape(-1))
  hx = float(binary_entropy(np.mean(x))) if x.size else 0.0
  hs = conditional_entropy(x, si)
  hsa = conditional_entropy(x, si * (len(a_edges) - 1) + ai)
  counts = np.bincount(si * (len(a_edges) - 1) + ai)
  return {"n": int(x.size), "accept_rate": float(np.mean(x)) if x.size else float("nan"),
          "H_X": hx, "H_X_given_S": hs, "H_X_given_SA": hsa,
          "ig_S": hx - hs, "ig_SA": hx - hsa, "ig_frac": (hx - hsa) / hx if hx > 0 else 0.0,
          "ig_S_frac": (hx - hs) / hx if hx > 0 else 0.0,
          "num_bins": [len(s_edges) - 1, len(a_edges) - 1],
          "min_bin_count": int(counts[counts > 0].min()) if counts.size else 0}


def information_by_group(s, a, x, groups, names, s_edges, a_edges) -> dict:
  """:func:`information_report` of each group of records, on the same bins.

  ``groups [N]`` int labels indexing ``names`` (e.g. the prompt set of each
  record's row).  Each group's ``H(X)`` is its own, so ``ig_frac`` is relative
  to that group's entropy (docs/spec.md §5: compare IG / H(X), not entropies).
  Returns ``{name: report}`` for the names that have records.
  """
  groups = np.asarray(groups).reshape(-1)
  if groups.shape != np.asarray(x).reshape(-1).shape:
    raise ValueError(f"groups has {groups.size} labels for {np.asarray(x).size} records")
  if groups.size and not 0 <= groups.min() <= groups.max() < len(names):
    raise ValueError(f"group labels {sorted(set(groups.tolist()))} do not index "
                     f"names {list(names)}")
  s, a, x = (np.asarray(v).reshape(-1) for v in (s, a, x))
  return {name: information_report(s[groups == i], a[groups == i], x[groups == i],
                                   s_edges, a_edges)
          for i, name in enumerate(names) if np.any(groups == i)}


def log_loss_bits(p_hat, x) -> float:
  """Mean cross-entropy (bits) of predictions ``p_hat`` for outcomes ``x`` (held-out check)."""
  p = np.clip(np.asarray(p_hat, np.float64), 1e-12, 1 - 1e-12)
  x = np.asarray(x, np.float64)
  return float(-np.mean(x * np.log2(p) + (1 - x) * np.log2(1 - p)))


# --- identity of the model triple -----------------------------------------------------------


def config_hash(config) -> str:
  """sha256 (16 hex) of a ModelConfig's fields (``dataclasses.asdict``, sorted JSON)."""
  d = dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)
  blob = json.dumps(d, sort_keys=True, default=str).encode()
  return hashlib.sha256(blob).hexdigest()[:16]


def params_hash(params) -> str:
  """sha256 (16 hex) of every parameter's bytes, in pytree order."""
  h = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    arr = np.asarray(leaf)
    h.update(jax.tree_util.keystr(path).encode())
    h.update(str(arr.dtype).encode() + str(arr.shape).encode())
    h.update(np.ascontiguousarray(arr).tobytes())
  return h.hexdigest()[:16]


def model_id(model, params=None) -> dict:
  """``{"config": config_hash, "params": params_hash or None}`` for one model."""
  return {"config": config_hash(model.config),
          "params": None if params is None else params_hash(params)}


def triple_id(target, target_params, draft, draft_params, companion, companion_params) -> dict:
  """Identifiers of a (target, draft, companion) triple (models are ``Model`` objects)."""
  return {"target": model_id(target, target_params), "draft": model_id(draft, draft_params),
          "companion": model_id(companion, companion_params)}


# --- save / load ----------------------------------------------------------------------------


def save_table(path: str, fitted: FittedTable, metadata: dict) -> tuple[str, str]:
  """Write ``<path>.npz`` and ``<path>.json``; ``metadata`` must hold ``"models"``
  (:func:`triple_id`) and ``"verifier"``.  Returns the two file names."""
  for key in ("models", "verifier"):
    if key not in metadata:
      raise ValueError(f"table metadata needs {key!r} (the model triple / verifier it belongs to)")
  base = path[:-4] if path.endswith(".npz") else path
  os.makedirs(os.path.dirname(os.path.abspath(base)), exist_ok=True)
  np.savez(base + ".npz", s_edges=fitted.s_edges, a_edges=fitted.a_edges, counts=fitted.counts,
           accepts=fitted.accepts, p_hat=fitted.p_hat)
  meta = dict(metadata, format=TABLE_FORMAT, alpha=fitted.alpha, prior=fitted.prior,
              num_bins=[len(fitted.s_edges) - 1, len(fitted.a_edges) - 1],
              num_records=int(fitted.counts.sum()))
  with open(base + ".json", "w") as f:
    json.dump(meta, f, indent=2, sort_keys=True, default=str)
  return base + ".npz", base + ".json"


def metadata_mismatches(expected, found, prefix="") -> list[str]:
  """Every key of ``expected`` (nested dicts; None: not checked) whose value differs
  in ``found``, as "key: expected X, table has Y" (SV and acceptance tables)."""
  out = []
  if isinstance(expected, dict):
    if not isinstance(found, dict):
      return [f"{prefix or 'value'}: expected {expected!r}, table has {found!r}"]
    for k, v in expected.items():
      if v is None:  # unknown on the caller's side: not checked
        continue
      out += metadata_mismatches(v, found.get(k), f"{prefix}.{k}" if prefix else k)
    return out
  if expected != found:
    out.append(f"{prefix}: expected {expected!r}, table has {found!r}")
  return out


def load_table(path: str, *, models: dict, verifier: Optional[str] = None,
               **expected) -> tuple[FittedTable, dict]:
  """Load a table saved by :func:`save_table`, refusing a different model triple.

  Args:
    models: :func:`triple_id` of the triple it will be used with (entries set
      to None are not checked, e.g. ``params`` when params are unknown).
    verifier: the verifier's name/description it will be used with (checked if given).
    expected: further metadata keys to check (e.g. ``sampling=...``).

  Raises ``ValueError`` listing every mismatching identifier.
  """
  base = path[:-4] if path.endswith((".npz", ".json")) else path
  with open(base + ".json") as f:
    meta = json.load(f)
  if meta.get("format") != TABLE_FORMAT:
    raise ValueError(f"{base}.json is not an SV calibration table (format "
                     f"{meta.get('format')!r}, expected {TABLE_FORMAT!r})")
  want = {"models": models}
  if verifier is not None:
    want["verifier"] = verifier
  want.update(expected)
  bad = metadata_mismatches(json.loads(json.dumps(want, default=str)), meta)
  if bad:
    raise ValueError(f"calibration table {base} was made for a different setup: " +
                     "; ".join(bad))
  z = np.load(base + ".npz")
  fitted = FittedTable(z["s_edges"], z["a_edges"], z["counts"], z["accepts"], z["p_hat"],
                       float(meta["alpha"]), float(meta["prior"]))
  return fitted, meta
