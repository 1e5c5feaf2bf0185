"""Cost-aware draft length: each row verifies as many drafts as are worth their
measured cost (docs/spec.md §5, "Cost-aware draft length").

**The objective.**  A round that verifies n drafts (0 <= n <= K; n = 0 is a
plain decode step) costs ``c(n)`` target decode steps -- the target forward
over the verify bucket that covers n, plus what every round pays (drafting,
the loop's own work), measured on the machine (:func:`round_cost_from_profile`)
-- and emits ``E(n) = 1 + sum_{i<=n} P_i`` tokens in expectation, with
``P_i = a_1 ... a_i`` and ``a_i`` the probability that draft i is accepted
given that the verifier reached it.  Throughput over many rounds is the renewal
ratio ``E[tokens] / E[cost]``; the per-round choice that maximises it
(Dinkelbach) maximises ``E(n) - lambda c(n)`` where lambda is the long-run rate
the policy achieves (tokens per target step), *not* each round's own ratio
``E(n) / c(n)``.  Each row carries its own lambda: a discounted ratio of the
tokens it committed to the cost of the rounds it chose,

    lambda = (w0 rate0 + sum_r rho^{R-r} tokens_r) / (w0 + sum_r rho^{R-r} c(n_r)),

starting at ``rate0`` (**our choice** 1: plain decoding's rate) with prior
weight ``w0`` and forgetting factor ``rho``.

**Rows alone, or a group priced together** (``group_size``).  With
``group_size=1`` (the default) every row chooses as if the round's cost were its
own: ``c(n_b)``.  But the target runs one forward over the bucket of the batch's
longest offer, so one eager row makes every row pay for its length.  With
``group_size=G`` the consecutive rows ``0..G-1, G..2G-1, ...`` (None: the whole
batch) choose one length ``N`` together and every row of the group pays
``c(N)``: the group's objective is ``sum_b E_b(N) - (sum_b lambda_b) c(N)``
over the group's running rows (a row without a draft on offer gains nothing and
still pays), and the stopping rule below becomes

    max_{m >= i}  sum_b [ sum_{j=i..m} P_{b,i} abar_{i+1} ... abar_j
                          -  lambda_b (c(m) - c(i-1)) ]  >  0

(each row under its own source's table and curve).  It is exact by the same
argument as one row's rule: whether row b's draft i is offered depends on row
b's drafts before i and on the other rows' drafts and estimates, which are
independent of row b's verification (its target distributions and uniforms).
The group's sum is taken in fixed point (exact integers), so it does not depend
on the order the rows are added in; groups never straddle devices
(:meth:`CostAwareLength.check_rows`), so the tokens do not depend on the split
of rows over devices.  ``group_size=1`` is exactly the row's own rule.

**A stopping time, not an argmax.**  Whether draft i is offered may depend on
the drafts before it and on the drafter's distribution at position i, never
on draft i itself or later ones (docs/spec.md §5, exactness): the
distribution at position i+1 is conditioned on draft i, so choosing "the best
n" from all K estimates would let draft i's offer depend on draft i, and the
lossless rules would no longer sample the target (the same off-by-one that
breaks AdaEDL).  So draft i is offered, given drafts 1..i-1 were, iff some
continuation to m >= i is worth its extra cost when the positions after i are
valued at the calibration's *prior* acceptance ``abar_l`` (no look at later
drafts):

    max_{m >= i}  sum_{j=i..m} P_i abar_{i+1} ... abar_j  -  lambda (c(m) - c(i-1))  >  0.

With a flat cost curve every draft with a chance of acceptance is offered;
with zero estimated acceptance none is (a plain decode step).

**The estimate.**  ``a_i`` is read from a calibrated :class:`AcceptanceTable`
at (position i, the drafter's confidence at i): its own score where it gives
one (prompt lookup: the matched n-gram's length), else the largest
probability of its distribution there (``Proposal.q_node``); either is a
function of the earlier drafts only.  Tables are fitted on held-out prompts for the drafter, rule and
temperature in use (:mod:`specjax.policies.acceptance`).

**Several sources.**  For a drafter that chooses its source each round and row
(:class:`~specjax.decoding.source_choice.SourceChoiceDrafter`: prompt lookup or an
EAGLE chain) the params are :class:`SourceParams`, one table and cost curve per
source sharing one lambda; :class:`SourceGate` makes the choice before the model
source draws (docs/spec.md §5, "Choosing the source") and each row's offer is then
stopped under its source's table and curve (``Proposal.source``).

**Saving.**  The target runs over the smallest verify bucket covering the
batch's longest offer, and a drafter that drafts step by step (the draft LM,
EAGLE chains: ``gates_drafting``) stops as soon as no row's latest draft is
worth offering (:class:`DraftGate`, the same rule applied while drafting), so
the unspent draft steps cost nothing.  A drafter that offers nothing this
round (prompt lookup without a match) reaches the policy as an inactive row:
the round is a plain step, costed ``c(0)``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.checks import check_int, check_range
from specjax.decoding.buckets import covering
from specjax.policies.acceptance import AcceptanceTable, draft_confidence, proposal_confidence
from specjax.policies.base import BucketedPolicy, check_group_size, check_row_groups
from specjax.policies.calibration import bin_index


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CostAwareParams:
  """Traced inputs of :class:`CostAwareLength` (a pytree: a new profile or table
  reuses the compiled loop).

  Attributes:
    table: the calibrated acceptance estimates (K positions).
    round_cost: [K+1] float32 ``c(n)``, a round's cost in target decode steps when
      n drafts are verified (non-decreasing, ``c(0) > 0``).
    rate0: the rate lambda starts from, tokens per target step (1: plain decoding).
    prior_weight: ``w0``, the weight of ``rate0`` in rounds' worth of cost.
    forget: ``rho`` in [0, 1], the discount of past rounds in lambda.
  """

  table: AcceptanceTable
  round_cost: jax.Array
  rate0: jax.Array
  prior_weight: jax.Array
  forget: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CostAwareState:
  """Per-row state carried across steps (all ``[B]``).  The last round is folded
  into lambda at the start of the next ``choose`` (``commit`` gets no params)."""

  tokens: jax.Array     # [B] float32 discounted tokens committed (prior included)
  cost: jax.Array       # [B] float32 discounted cost of the rounds chosen (prior included)
  spent: jax.Array      # [B] float32 the cost of the last round's choice, c_s(n)
  committed: jax.Array  # [B] int32 tokens the last round committed (0: the row did not run)
  length: jax.Array     # [B] int32 the target's committed length after the last commit


def fold_round(tokens, cost, committed, round_cost, forget):
  """Discounted sums after one more round per row: ``(tokens, cost) <- (rho tokens +
  committed, rho cost + round_cost)`` where the row ran (``committed > 0``)."""
  ran = committed > 0
  return (jnp.where(ran, forget * tokens + committed, tokens),
          jnp.where(ran, forget * cost + round_cost, cost))


def make_params(table: AcceptanceTable, round_cost, *, rate0: float = 1.0,
                prior_weight: float = 4.0, forget: float = 0.9) -> CostAwareParams:
  """Checked :class:`CostAwareParams`; ValueError names a bad value.

  Defaults (**our choices**): lambda starts at plain decoding's rate 1 with the
  weight of 4 plain steps and forgets a round's share at 0.9 per round (about
  the last 10 rounds count), so a row adapts within a sentence."""
  cost = np.asarray(round_cost, np.float64)
  k = int(np.asarray(table.p_hat).shape[0])
  if cost.shape != (k + 1,):
    raise ValueError(f"round_cost has shape {cost.shape}; the table has K={k} positions, "
                     f"so it needs K + 1 = {k + 1} costs (n = 0..K drafts verified)")
  if not (np.all(np.isfinite(cost)) and cost[0] > 0 and np.all(np.diff(cost) >= 0)):
    raise ValueError(f"round_cost={cost.tolist()} must be finite, positive at n = 0 and "
                     f"non-decreasing in n (more verified tokens never cost less)")
  check_range("rate0", rate0, low=0.0, low_open=True)
  check_range("prior_weight", prior_weight, low=0.0, low_open=True)
  check_range("forget", forget, low=0.0, high=1.0)
  f32 = lambda v: jnp.asarray(v, jnp.float32)
  return CostAwareParams(table, f32(cost), f32(rate0), f32(prior_weight), f32(forget))


def bucket_cost(round_cost: jax.Array, buckets: tuple) -> jax.Array:
  """``c_eff(n) = c(smallest bucket >= n)``: what verifying n drafts costs when the
  target runs over a bucket. ``[K+1] -> [K+1]``."""
  return round_cost[..., covering(buckets)]


def continuation_tables(prior: jax.Array, cost: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(S, E)``, both ``[K, K]``, for the stopping rule: with 0-based positions,
  ``S[i, m] = sum_{j=i..m} abar_{i+1} ... abar_j`` (the later positions' worth per
  unit of ``P_i``) and ``E[i, m] = c(m+1) - c(i)`` (the extra cost of going from
  i to m + 1 drafts), ``-inf`` / ``+inf`` where ``m < i``."""
  k = prior.shape[-1]
  logp = jnp.log(jnp.maximum(prior.astype(jnp.float32), 1e-30))
  cum = jnp.cumsum(logp)                                               # [K]
  idx = jnp.arange(k)
  upper = idx[None, :] >= idx[:, None]                                 # m >= i
  ratio = jnp.where(upper, jnp.exp(cum[None, :] - cum[:, None]), 0.0)  # abar_{i+1..m}
  worth = jnp.where(upper, jnp.cumsum(ratio, axis=-1), -jnp.inf)
  extra = jnp.where(upper, cost[1:][None, :] - cost[:-1][:, None], jnp.inf)
  return worth, extra


# a row's value in a group's sum is clipped to +-VALUE_BOUND (tokens per round minus
# lambda times steps: far inside it) and summed in fixed point
VALUE_BOUND = 1024.0


def group_goes_on(value: jax.Array, rows: jax.Array, group_size: Optional[int]) -> jax.Array:
  """``[B]`` bool: whether each row's group goes on, ``max_m sum_b value[b, m] > 0``
  over the group's ``rows [B]`` (``value [B, M]``; groups of ``group_size``
  consecutive rows, None: the whole batch).  The sum is of integers (``value``
  rounded to a fixed point whose step is set by the group's size, at most 2^-14
  for groups of up to 64 rows), so it is the same in any order of the rows."""
  b = value.shape[0]
  g = b if group_size is None else group_size
  if b % g:
    raise ValueError(f"the batch has {b} rows, not a multiple of group_size={g}")
  if g == 1:  # a group of one row: its own rule, in floating point
    return (jnp.max(value, axis=-1) > 0) & rows
  scale = 2.0 ** math.floor(math.log2(2.0 ** 30 / (g * VALUE_BOUND)))
  # lengths below the position are -inf (and 0 * -inf = nan for a row that reaches
  # nothing): the bound's floor, never an integer out of range
  value = jnp.nan_to_num(value, nan=-VALUE_BOUND, neginf=-VALUE_BOUND, posinf=VALUE_BOUND)
  fixed = jnp.round(jnp.clip(value, -VALUE_BOUND, VALUE_BOUND) * scale).astype(jnp.int32)
  fixed = jnp.where(rows[:, None], fixed, 0)
  total = jnp.sum(fixed.reshape(b // g, g, -1), axis=1)                   # [B/G, M]
  return jnp.repeat(jnp.max(total, axis=-1) > 0, g)


def group_max(x: jax.Array, group_size: Optional[int]) -> jax.Array:
  """``[B]``: each row's group's largest ``x [B]`` (groups as in :func:`group_goes_on`)."""
  b = x.shape[0]
  g = b if group_size is None else group_size
  return jnp.repeat(jnp.max(x.reshape(b // g, g), axis=1), g)


def is_worth(reach: jax.Array, worth_row: jax.Array, extra_row: jax.Array,
             lam: jax.Array, rows: Optional[jax.Array] = None,
             group_size: Optional[int] = 1) -> jax.Array:
  """Whether a draft reached with probability ``reach [B]`` is worth offering:
  ``max_m reach S[i, m] - lambda E[i, m] > 0`` for its position's rows of
  :func:`continuation_tables` (``[K]``, or ``[B, K]``: one per row); with
  ``group_size`` other than 1, the same for each group's sum over ``rows [B]``
  (:func:`group_goes_on`)."""
  value = reach[:, None] * worth_row - lam[:, None] * extra_row           # [B, K]
  if group_size == 1:
    return jnp.max(value, axis=-1) > 0
  rows = jnp.ones(reach.shape, bool) if rows is None else rows
  return group_goes_on(value, rows, group_size)


def offer_lengths(a: jax.Array, prior: jax.Array, cost: jax.Array, lam: jax.Array,
                  active: jax.Array, *, running: Optional[jax.Array] = None,
                  group_size: Optional[int] = 1) -> jax.Array:
  """Drafts each row offers: the leading positions that pass the stopping rule of
  the module docstring.

  Args:
    a: [B, K] estimated acceptance of draft i given it is reached (from the
      drafts before i only).
    prior: [K] the calibration's prior acceptance per position (``abar``).
    cost: [K+1] ``c(n)`` (already the bucket's cost, :func:`bucket_cost`).
    lam: [B] each row's rate lambda.
    active: [B] rows that run and have drafts on offer.
    running: [B] rows that run (default ``active``): with groups, a running row
      without an offer pays its share of the group's cost.
    group_size: 1 (each row alone), G or None (module docstring).
  Returns int32 [B] in 0..K (0 for inactive rows).
  """
  worth, extra = continuation_tables(prior, cost)
  return stop_lengths(a, worth, extra, lam, active, running=running, group_size=group_size)


def stop_lengths(a: jax.Array, worth: jax.Array, extra: jax.Array, lam: jax.Array,
                 active: jax.Array, *, running: Optional[jax.Array] = None,
                 group_size: Optional[int] = 1) -> jax.Array:
  """:func:`offer_lengths` from the :func:`continuation_tables` ``worth`` / ``extra``
  (``[K, K]``, or ``[B, K, K]``: each row its own source's)."""
  k = a.shape[-1]
  grouped = group_size != 1
  running = active if running is None else running
  if grouped:  # a row without an offer gains nothing (its reach is 0) and pays
    a = jnp.where(active[:, None], a, 0.0)
  reach = jnp.ones(a.shape[:1], jnp.float32)
  go, n = jnp.ones(a.shape[:1], bool), jnp.zeros(a.shape[:1], jnp.int32)
  for i in range(k):  # the running product, as DraftGate forms it draft by draft
    reach = reach * a[:, i].astype(jnp.float32)
    go = go & is_worth(reach, worth[..., i, :], extra[..., i, :], lam, running, group_size)
    n = n + go.astype(jnp.int32)
  return jnp.where(active, n, 0).astype(jnp.int32)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DraftGate:
  """The stopping rule applied while drafting (``drafters.sample_chain``): after
  each draft, whether it is worth offering; drafting ends when no row's is.  The
  same arithmetic as :func:`offer_lengths`, so the chain stops where ``choose``
  will stop it (and never earlier).

  Attributes: table (the estimates), worth / extra (:func:`continuation_tables`
  of the bucket costs), lam [B] the rows' rates, rows [B] (None: all) the rows
  drafting under this gate, running [B] (None: all) the rows that run, and the
  static group_size of :class:`CostAwareLength` (a group goes on together, from
  the sum over its running drafting rows).
  """

  table: AcceptanceTable
  worth: jax.Array
  extra: jax.Array
  lam: jax.Array
  rows: Optional[jax.Array] = None
  running: Optional[jax.Array] = None
  group_size: Optional[int] = dataclasses.field(default=1, metadata=dict(static=True))

  def start(self, b: int) -> jax.Array:
    """The carry: each row's probability of reaching the next draft, ``[B]``."""
    return jnp.ones((b,), jnp.float32)

  def step(self, i, q_node: jax.Array, reach: jax.Array):
    """``(go [B], reach [B])`` after draft ``i`` (0-based) drawn from the node
    distribution ``q_node [B, V]`` (its confidence: :func:`draft_confidence`); rows
    outside ``rows`` (when given) never go on."""
    a = self.table.p_hat[i][bin_index(self.table.edges, draft_confidence(q_node))]
    reach = reach * a.astype(jnp.float32)
    members = jnp.ones(reach.shape, bool)
    for mask in (self.rows, self.running):
      members = members if mask is None else members & mask
    go = is_worth(reach, self.worth[i], self.extra[i], self.lam, members, self.group_size)
    return (go if self.rows is None else go & self.rows), reach

  def only(self, rows: jax.Array) -> "DraftGate":
    """This gate for the rows ``rows [B]`` only (the others stop at once)."""
    return dataclasses.replace(self, rows=rows)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SourceParams:
  """Traced inputs of :class:`CostAwareLength` for a drafter that chooses, each round
  and row, between drafting sources
  (:class:`~specjax.decoding.source_choice.SourceChoiceDrafter`): one
  :class:`CostAwareParams` per source, in the drafter's order, each with the
  source's own acceptance table and round cost curve (built by
  :func:`make_source_params`).  Lambda is shared: the rate settings are the
  first source's."""

  sources: tuple


def per_source(params) -> tuple:
  """The :class:`CostAwareParams` of each source: ``(params,)`` for one drafter."""
  return params.sources if isinstance(params, SourceParams) else (params,)


def make_source_params(*sources: CostAwareParams) -> SourceParams:
  """:class:`SourceParams` of the two sources' :func:`make_params`; ValueError when
  they differ in K, bin edges or the rate settings (one lambda serves them all)."""
  if len(sources) != 2 or not all(isinstance(p, CostAwareParams) for p in sources):
    raise ValueError(f"make_source_params takes two cost_aware.make_params(...) results "
                     f"(source 0 model-free, source 1 drafting step by step: SourceGate), "
                     f"got {[type(p).__name__ for p in sources]}")
  first = sources[0]
  for i, p in enumerate(sources[1:], 1):
    for name in ("rate0", "prior_weight", "forget"):
      if float(getattr(p, name)) != float(getattr(first, name)):
        raise ValueError(f"source {i} has {name}={float(getattr(p, name)):g}, source 0 "
                         f"{float(getattr(first, name)):g}: the sources share one lambda")
    if np.shape(p.table.p_hat) != np.shape(first.table.p_hat):
      raise ValueError(f"source {i}'s table has shape {np.shape(p.table.p_hat)}, source "
                       f"0's {np.shape(first.table.p_hat)}: the same K and bin count")
  return SourceParams(tuple(sources))


def best_offer(a: jax.Array, cost: jax.Array, lam: jax.Array, offers: jax.Array
               ) -> tuple[jax.Array, jax.Array]:
  """``(value [B], n [B])``: ``max_n E(n) - lambda c(n)`` over ``n = 0..offers`` and the
  n that attains it -- a source's worth this round when its estimates ``a [B, K]`` are
  known before it drafts (``E(n) = 1 + sum_{i<=n} a_1 ... a_i``; ``cost [K+1]`` the
  bucket costs, ``lam [B]``, ``offers [B]`` the most drafts the source can offer)."""
  k = a.shape[-1]
  reach = jnp.cumprod(a.astype(jnp.float32), axis=-1)                    # [B, K]
  gain = 1.0 + jnp.concatenate([jnp.zeros_like(reach[:, :1]), jnp.cumsum(reach, -1)], -1)
  value = gain - lam[:, None] * cost[None, :]                            # [B, K+1]
  allowed = jnp.arange(k + 1)[None, :] <= offers[:, None]
  value = jnp.where(allowed, value, -jnp.inf)
  return jnp.max(value, axis=-1), jnp.argmax(value, axis=-1).astype(jnp.int32)


RATE_ESTIMATES = ("prior", "best")


def fixed_length_rate(params, buckets: tuple, estimate: str = "prior") -> tuple[float, int, int]:
  """``(rate, source, n)``: the best rate, tokens per target step, of a fixed verify
  length, ``max_{s, n} E_s(n) / c_s(n)`` with ``E_s(n) = 1 + sum_{i<=n} a_1 ... a_i``
  and ``c_s`` the bucket costs, and the source and length that attain it.  ``a_i``:
  the table's prior acceptance at position i (``estimate="prior"``: what a fixed
  length earns on average) or its most confident bin's (``"best"``: what the best
  round the table knows could earn).  Below 1 with ``"best"``, no round of any
  source can beat target-only decoding on this machine, and the binaries decode
  without speculating (docs/spec.md §5, "When speculation cannot pay")."""
  if estimate not in RATE_ESTIMATES:
    raise ValueError(f"estimate={estimate!r}; choose one of {RATE_ESTIMATES}")
  best = (-np.inf, 0, 0)
  for s, p in enumerate(per_source(params)):
    cost = np.asarray(bucket_cost(p.round_cost, buckets), np.float64)
    a = (np.asarray(p.table.prior, np.float64) if estimate == "prior"
         else np.asarray(p.table.p_hat, np.float64).max(axis=1))
    gain = 1.0 + np.concatenate([[0.0], np.cumsum(np.cumprod(a))])
    rate = gain / cost
    n = int(np.argmax(rate))
    best = max(best, (float(rate[n]), s, n))
  return best


# How far above 1 a batch's prior rate must be before a batch of rows speculates
# (speculation_rule): run to run, the cost profiles at batch 32 measured a two-token
# verify at 1.21 to 1.54 steps (benchmarks/results/benchmark_smollm2_b32*), a spread
# of about a tenth around their mean.
BATCH_RATE_MARGIN = 0.1


@dataclasses.dataclass(frozen=True)
class SpeculationRule:
  """Whether a run speculates at all: iff :func:`fixed_length_rate` under ``estimate``
  exceeds ``threshold`` tokens per target step (docs/spec.md §5, "When speculation
  cannot pay")."""

  estimate: str
  threshold: float

  def speculates(self, rate: float) -> bool:
    return rate > self.threshold

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


def speculation_rule(batch: int, margin: float = BATCH_RATE_MARGIN) -> SpeculationRule:
  """The :class:`SpeculationRule` of ``batch`` rows per forward.

  **Our choice.**  One row (``batch == 1``) speculates unless even its tables' most
  confident bins cannot pay (``"best"`` against 1): the per-step policy earns its rate
  from the confident rounds, which the prior averages away.  A batch of rows pays
  every round for the batch's one forward, whose drafts are worth what its rows earn
  together -- their average acceptance, which over many rows is the prior's, not the
  most confident bin's -- so a batch speculates only when the prior rate exceeds 1 by
  ``margin`` (the profile's own run-to-run error: :data:`BATCH_RATE_MARGIN`)."""
  batch = check_int("batch", batch, low=1)
  check_range("margin", margin, low=0.0)
  if batch == 1:
    return SpeculationRule("best", 1.0)
  return SpeculationRule("prior", 1.0 + float(margin))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SourceGate:
  """The draft gate of a drafter choosing between a model-free source (source 0,
  whose drafts and score are known before any model runs: prompt lookup) and a
  source that drafts step by step (source 1: an EAGLE chain).

  A row takes source 0 iff its best offer this round (:func:`best_offer` of its
  table at its score) verifies at least one draft and is worth at least source 1's,
  valued at source 1's per-position prior acceptance -- both known before source 1
  draws a draft, so the choice never depends on a draft it selects (docs/spec.md §5,
  exactness).  Source 1 then drafts only for the other rows, under its own
  :class:`DraftGate` (which may offer nothing: a plain step).

  Attributes: gates (one :class:`DraftGate` per source), costs (each source's bucket
  costs ``[K+1]``).
  """

  gates: tuple
  costs: tuple

  def prefer_first(self, confidence: jax.Array, offers: jax.Array) -> jax.Array:
    """Rows that take source 0, from its score ``confidence [B, K]`` and the drafts
    it offers ``offers [B]`` (0 without a match).  ``[B]`` bool."""
    g0, g1 = self.gates
    v0, n0 = best_offer(g0.table.lookup(confidence), self.costs[0], g0.lam, offers)
    prior = jnp.broadcast_to(g1.table.prior[None, :], confidence.shape)
    k = jnp.full(offers.shape, confidence.shape[-1], jnp.int32)
    v1, _ = best_offer(prior, self.costs[1], g1.lam, k)
    return (n0 > 0) & (v0 >= v1)

  def for_second(self, rows: jax.Array) -> DraftGate:
    """Source 1's gate, for the rows ``rows [B]`` that did not take source 0."""
    return self.gates[1].only(rows)


@dataclasses.dataclass(frozen=True)
class CostAwareLength(BucketedPolicy):
  """The cost-aware verify-length policy (module docstring).

  Attributes (static):
    num_draft: K.
    verify_buckets: verify lengths the target forward is compiled for (default
      ``(0, 1, 2, 4, ..., K)``); a length between buckets is costed at its bucket.
    gate_drafting: stop the drafter's chain as soon as no row's next draft is worth
      it (:class:`DraftGate`; drafters with ``gates_drafting``), default True;
      False drafts all K (the same tokens, the unspent draft steps paid).
    group_size: 1 (default: each row prices its own length), G (consecutive groups
      of G rows choose one length and share its cost) or None (the whole batch,
      on one device only); module docstring, "Rows alone, or a group".
  Params: :class:`CostAwareParams` (:func:`make_params`).
  """

  gate_drafting: bool = True
  group_size: Optional[int] = 1

  def __post_init__(self):
    super().__post_init__()
    if not isinstance(self.gate_drafting, bool):
      raise ValueError(f"gate_drafting={self.gate_drafting!r} must be a bool")
    check_group_size(self.group_size)

  def check_rows(self, num_rows: int, rows_per_device: int, num_devices: int) -> None:
    """Refuse a split over devices under which a group would straddle devices."""
    if self.group_size != 1:
      check_row_groups(f"CostAwareLength(group_size={self.group_size})", self.group_size,
                       num_rows, rows_per_device, num_devices)

  def _check(self, params) -> None:
    if not isinstance(params, (CostAwareParams, SourceParams)):
      raise ValueError(f"CostAwareLength needs policy_params=cost_aware.make_params(...) "
                       f"(or make_source_params for a drafter choosing between sources), "
                       f"got {type(params).__name__}")
    for p in per_source(params):
      k = p.table.p_hat.shape[0]
      if k != self.num_draft:
        raise ValueError(f"the acceptance table has K={k} positions; the policy drafts "
                         f"K={self.num_draft}")

  def init(self, params: CostAwareParams, tokens, lengths, cache_length: int):
    self._check(params)
    b = lengths.shape[0]
    first = per_source(params)[0]
    w = jnp.full((b,), first.prior_weight, jnp.float32)
    zeros = jnp.zeros((b,), jnp.int32)
    return CostAwareState(w * first.rate0, w, jnp.zeros((b,), jnp.float32), zeros,
                          jnp.asarray(lengths, jnp.int32))

  def _rate(self, params, state: CostAwareState):
    """``(tokens, cost, lambda)`` with the last round folded in (the rate settings are
    the first source's: :func:`make_source_params` checks they agree)."""
    first = per_source(params)[0]
    tok, spent = fold_round(state.tokens, state.cost, state.committed, state.spent,
                            first.forget)
    return tok, spent, tok / spent

  def draft_gate(self, params, state: CostAwareState, running=None):
    """A :class:`DraftGate` for one drafter, a :class:`SourceGate` for a drafter that
    chooses between sources (:class:`SourceParams`); ``running [B]``: the rows that
    run this step (None: all)."""
    if not self.gate_drafting:
      return None
    _, _, lam = self._rate(params, state)
    gates = []
    for src in per_source(params):
      worth, extra = continuation_tables(src.table.prior, bucket_cost(src.round_cost,
                                                                      self.buckets))
      gates.append(DraftGate(src.table, worth, extra, lam, running=running,
                             group_size=self.group_size))
    if not isinstance(params, SourceParams):
      return gates[0]
    return SourceGate(tuple(gates), tuple(bucket_cost(src.round_cost, self.buckets)
                                          for src in params.sources))

  def choose(self, params, state: CostAwareState, prev, last, proposal, active):
    """Fold the last round into lambda, then stop each row's chain (each row under the
    table and cost curve of the source that drafted it: ``proposal.source``); with
    groups, stop each group's (:meth:`choose_running` passes the rows that run and
    pay without an offer; here ``active`` rows are taken to be all that run).
    Signals ``[B, K]``: ``confidence``, ``accept`` (the estimates); ``[B]``: ``rate``
    (the lambda this round used) and, for several sources, ``source``."""
    return self._choose(params, state, proposal, active, active)

  def choose_running(self, params, state, prev, last, proposal, running):
    """:meth:`choose` with the rows that run (``running``) apart from those that
    offer drafts: in a group, a running row without an offer pays its share."""
    offers = running if proposal.num_valid is None else running & (proposal.num_valid > 0)
    return self._choose(params, state, proposal, offers, running)

  def _choose(self, params, state: CostAwareState, proposal, active, running):
    k = proposal.tokens.shape[1]
    if k != self.num_draft:
      raise ValueError(f"got {k} drafts per row; the policy was built for K={self.num_draft}")
    sources = per_source(params)
    if (proposal.source is None) != (len(sources) == 1):
      raise ValueError(
          "a drafter that chooses between sources needs policy_params=cost_aware."
          "make_source_params(...) (one table and cost curve per source), and a single "
          f"drafter needs cost_aware.make_params(...); got {type(params).__name__} for a "
          f"proposal {'with' if proposal.source is not None else 'without'} sources")
    tok, spent, lam = self._rate(params, state)
    conf = proposal_confidence(proposal)
    src = jnp.zeros_like(active, jnp.int32) if proposal.source is None else proposal.source
    if self.group_size == 1:
      gamma, a, paid = self._row_lengths(sources, conf, src, lam, active)
    else:
      gamma, a, paid = self._group_lengths(sources, conf, src, lam, proposal, active, running)
    new = CostAwareState(tok, spent, paid, jnp.zeros_like(gamma), state.length)
    signals = {"confidence": conf, "accept": a, "rate": lam}
    if proposal.source is not None:
      signals["source"] = src
    return gamma, new, signals

  def _row_lengths(self, sources, conf, src, lam, active):
    """``(gamma, a, paid)``, each row alone: its stop, estimates and ``c(gamma)``."""
    gamma = jnp.zeros_like(src)
    a = jnp.zeros(conf.shape, jnp.float32)
    paid = jnp.zeros(src.shape, jnp.float32)
    for s, p in enumerate(sources):
      cost = bucket_cost(p.round_cost, self.buckets)
      a_s = p.table.lookup(conf)
      n_s = offer_lengths(a_s, p.table.prior, cost, lam, active)
      mine = src == s
      gamma, a = jnp.where(mine, n_s, gamma), jnp.where(mine[:, None], a_s, a)
      paid = jnp.where(mine, cost[n_s], paid)
    return gamma, a, paid

  def _group_lengths(self, sources, conf, src, lam, proposal, active, running):
    """``(gamma, a, paid)`` of groups: one stop per group from the sum over its
    running rows (each under its source's table and curve; drafts a row did not
    make gain nothing), and every row pays its source's ``c`` at the length the
    group verifies (its longest offer the drafter made)."""
    b, k = conf.shape
    a = jnp.zeros(conf.shape, jnp.float32)
    worth = jnp.zeros((b, k, k), jnp.float32)
    extra = jnp.zeros((b, k, k), jnp.float32)
    costs = []
    for s, p in enumerate(sources):
      cost = bucket_cost(p.round_cost, self.buckets)
      w_s, e_s = continuation_tables(p.table.prior, cost)
      mine = src == s
      a = jnp.where(mine[:, None], p.table.lookup(conf), a)
      worth = jnp.where(mine[:, None, None], w_s, worth)
      extra = jnp.where(mine[:, None, None], e_s, extra)
      costs.append(cost)
    made = (jnp.full((b,), k, jnp.int32) if proposal.num_valid is None
            else proposal.num_valid)
    a_made = jnp.where(jnp.arange(k)[None, :] < made[:, None], a, 0.0)
    gamma = stop_lengths(a_made, worth, extra, lam, active, running=running,
                         group_size=self.group_size)
    verified = group_max(jnp.where(active, jnp.minimum(gamma, made), 0), self.group_size)
    paid = jnp.zeros((b,), jnp.float32)
    for s, cost in enumerate(costs):
      paid = jnp.where(src == s, cost[verified], paid)
    return gamma, a, paid

  def commit(self, state: CostAwareState, target_lengths) -> CostAwareState:
    """Record the round's committed tokens (idle rows commit 0 and are not folded)."""
    committed = (target_lengths - state.length).astype(jnp.int32)
    return dataclasses.replace(state, committed=committed,
                               length=jnp.asarray(target_lengths, jnp.int32))
