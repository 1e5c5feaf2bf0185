"""The draft tree a machine can afford: Sequoia's optimal tree for each node budget,
and the budget (and depth) that maximises tokens per unit of measured cost
(docs/spec.md §5, "Tree size from the cost profile").

**The acceptance model** (Sequoia, Chen et al. 2024, "positional acceptance"): each
node's children are its drafter's top-ranked tokens, and the rank-r child of a node
at depth d - 1 is the one the verifier accepts with probability ``P[d, r]``, given
that node is on the accepted path -- whatever the tree holds elsewhere.  Then a
tree's expected tokens per round is

    E(tree) = 1 + sum_{nodes u != root} prod_{edges on u's path} P[depth, rank],

(the root is the round's last committed token, whose successor the target always
emits), and the best tree of at most n nodes and depth at most D follows from
Sequoia's dynamic program over subtree sizes:

    F_l(1) = 1,   F_l(n) = 1 + max over n_1 + n_2 + ... = n - 1 of
                                 sum_r P[l + 1, r] F_{l+1}(n_r),

for a subtree whose root sits at depth l (``F_D(n) = -inf`` for n > 1).  A chain of
K drafts is the tree whose every node has only its rank-1 child: ``E = 1 + sum_i
prod_{j<=i} P[j, 1]``, the chain formula of the cost-aware policy.

**Our choices where the paper is silent:** ``P`` may differ by depth (our drafters'
acceptance falls with depth; the paper uses one vector), and it is measured on
chains (:func:`rank_acceptance`): at depth d, the rank of the target's token within
the drafter's distribution at a reached position -- so a deep node off the rank-1
path is valued as if its context were the chain's, which is the positional model's
own assumption.  The round's cost is ``c(n, D) = verify(n) + D * draft_level``: the
target's forward over the n tree tokens (the smallest measured size covering n) and
one drafter step per level (a level runs the head over its whole frontier at once;
on a CPU a wider frontier costs more, which this leaves out, so the CPU's choice
leans towards trees, not away from them).  A fixed shape for every round makes the
long-run rate the ratio ``E / c`` itself (no Dinkelbach lambda needed).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from specjax.checks import check_int


@dataclasses.dataclass(frozen=True)
class TreePlan:
  """One tree shape and its value under a positional acceptance model.

  Attributes:
    parents: ``[n]`` each node's parent (-1 for the root, node 0), parents first.
    ranks: ``[n]`` each node's rank among its siblings (0 = the drafter's top token;
      the root's is 0).
    value: expected tokens per round, ``E(tree)``.
  """

  parents: tuple
  ranks: tuple
  value: float

  @property
  def nodes(self) -> int:
    return len(self.parents)

  @property
  def depths(self) -> tuple:
    d = [0] * self.nodes
    for i, p in enumerate(self.parents[1:], 1):
      d[i] = d[p] + 1
    return tuple(d)

  @property
  def depth(self) -> int:
    return max(self.depths)

  @property
  def widths(self) -> tuple:
    """Nodes at each depth 1..``depth`` (the drafts of each level)."""
    return tuple(int(w) for w in np.bincount(self.depths, minlength=self.depth + 1)[1:])


def check_acceptance(p) -> np.ndarray:
  """``P [D, R]`` as float64, checked: entries in [0, 1], each row summing to <= 1
  (at most one child of a node is accepted)."""
  a = np.asarray(p, np.float64)
  if a.ndim != 2 or 0 in a.shape:
    raise ValueError(f"acceptance P must be [depth, rank] with both > 0, got shape {a.shape}")
  if not (np.all(np.isfinite(a)) and np.all(a >= 0) and np.all(a.sum(1) <= 1 + 1e-9)):
    raise ValueError(f"acceptance P={a.round(4).tolist()} must be in [0, 1] with each "
                     f"depth's row summing to <= 1")
  return a


def tree_value(p, parents, ranks) -> float:
  """``E(tree)`` of the module docstring for an explicit tree (the check of the DP)."""
  a = check_acceptance(p)
  if len(parents) != len(ranks) or not parents or parents[0] != -1 or any(
      not 0 <= q < i for i, q in enumerate(parents[1:], 1)):
    raise ValueError(f"parents={list(parents)} must start with the root (-1) and list each "
                     f"node after its parent, with one rank per node")
  depths = TreePlan(tuple(parents), tuple(ranks), 0.0).depths
  reach = [1.0]
  for i in range(1, len(parents)):
    d = depths[i]
    inside = d <= a.shape[0] and ranks[i] < a.shape[1]
    reach.append(reach[parents[i]] * a[d - 1, ranks[i]] if inside else 0.0)
  return float(sum(reach))


def optimal_trees(p, max_nodes: int) -> list[TreePlan]:
  """The best tree of at most n nodes (root included) and depth at most ``D``
  (``P``'s rows), for n = 1..``max_nodes``: Sequoia's dynamic program (module
  docstring).  ``[n - 1]`` is the plan for n nodes."""
  a = check_acceptance(p)
  check_int("max_nodes", max_nodes, low=1)
  depth, ranks = a.shape
  neg = -np.inf
  # f[l][n]: best subtree value rooted at depth l with exactly n nodes (index n).
  f = np.full((depth + 1, max_nodes + 1), neg)
  split = {}  # (l, m, r) -> nodes given to rank r (0: skipped) in the best allocation
  f[depth, 1] = 1.0
  for l in range(depth - 1, -1, -1):
    g = np.full((ranks + 1, max_nodes), neg)  # g[r, m]: m nodes to children of rank >= r
    g[:, 0] = 0.0
    for r in range(ranks - 1, -1, -1):
      for m in range(1, max_nodes):
        best, arg = g[r + 1, m], 0
        for j in range(1, m + 1):
          if f[l + 1, j] == neg or g[r + 1, m - j] == neg:
            continue  # infeasible (0 * -inf would be nan)
          v = a[l, r] * f[l + 1, j] + g[r + 1, m - j]
          if v > best + 1e-15:
            best, arg = v, j
        g[r, m], split[l, m, r] = best, arg
    f[l, 1] = 1.0
    f[l, 2:] = 1.0 + g[0, 1:max_nodes]
  plans, best = [], None
  for n in range(1, max_nodes + 1):
    if best is None or f[0, n] > best[1] + 1e-12:
      best = (n, f[0, n])
    parents, rks = [-1], [0]
    _build(split, 0, best[0] - 1, 0, ranks, parents, rks)
    plans.append(TreePlan(tuple(parents), tuple(rks), float(best[1])))
  return plans


def _build(split, level, m, node, ranks, parents, rks) -> None:
  """Append the children of ``node`` (at ``level``, ``m`` nodes below it) in the DP's
  best allocation, breadth first within the node (parents before children)."""
  kids = []
  for r in range(ranks):
    if m == 0:
      break
    j = split.get((level, m, r), 0)
    if j:
      parents.append(node)
      rks.append(r)
      kids.append((len(parents) - 1, j - 1))
      m -= j
  for child, below in kids:
    _build(split, level + 1, below, child, ranks, parents, rks)


def chain_plan(p, k: int) -> TreePlan:
  """The chain of ``k`` rank-1 drafts as a plan (value ``1 + sum_i prod_{j<=i} P[j, 0]``)."""
  a = check_acceptance(p)
  check_int("k", k, low=0)
  if k > a.shape[0]:
    raise ValueError(f"k={k}: the acceptance model has {a.shape[0]} depths")
  parents = tuple(range(-1, k))
  return TreePlan(parents, (0,) * (k + 1), float(1 + np.cumprod(a[:k, 0]).sum()))


@dataclasses.dataclass(frozen=True)
class VerifyCost:
  """The target's forward over n new tokens per row, in decode steps, at measured
  sizes; n tokens cost the smallest measured size >= n (the loop's buckets).

  Attributes: sizes: increasing token counts (the first 1); steps: their costs
  (non-decreasing, ``steps[0]`` = 1 by definition of a step)."""

  sizes: tuple
  steps: tuple

  def __post_init__(self):
    s, c = np.asarray(self.sizes), np.asarray(self.steps, np.float64)
    if s.ndim != 1 or len(s) == 0 or s[0] != 1 or np.any(np.diff(s) <= 0) or c.shape != s.shape:
      raise ValueError(f"VerifyCost sizes={list(self.sizes)} must increase from 1, with one "
                       f"cost each (got {len(self.steps)} costs)")
    if not (np.all(np.isfinite(c)) and np.all(c > 0) and np.all(np.diff(c) >= 0)):
      raise ValueError(f"VerifyCost steps={list(self.steps)} must be positive and "
                       f"non-decreasing in the size")

  def at(self, n: int) -> float:
    i = int(np.searchsorted(np.asarray(self.sizes), n))
    if i == len(self.sizes):
      raise ValueError(f"a verify over n={n} tokens is beyond the largest measured size "
                       f"{self.sizes[-1]}")
    return float(self.steps[i])


@dataclasses.dataclass(frozen=True)
class ShapeChoice:
  """A candidate shape and its rate. Attributes: plan; cost: ``c(n, D)`` in steps;
  rate: ``plan.value / cost``, tokens per target step (1: plain decoding)."""

  plan: TreePlan
  cost: float
  rate: float


def choose_shape(p, verify: VerifyCost, draft_level: float, *, max_nodes: int
                 ) -> tuple[ShapeChoice, list[ShapeChoice]]:
  """``(best, candidates)``: for every depth limit ``D' <= D`` and node budget up to
  ``max_nodes``, Sequoia's best tree, costed ``verify.at(nodes) + depth * draft_level``
  (module docstring); plus the plain decode step (the root alone: no drafts, no
  drafting) and every chain.
  The best maximises ``value / cost`` (ties: the smaller tree)."""
  a = check_acceptance(p)
  if not (np.isfinite(draft_level) and draft_level >= 0):
    raise ValueError(f"draft_level={draft_level} must be a finite cost >= 0 (in steps)")
  check_int("max_nodes", max_nodes, low=1)
  if max_nodes > verify.sizes[-1]:
    raise ValueError(f"max_nodes={max_nodes} is beyond the largest measured verify size "
                     f"{verify.sizes[-1]}")
  plans = {}
  for d in range(0, a.shape[0] + 1):
    chain = chain_plan(a, d)
    plans.setdefault((chain.parents, chain.ranks), chain)
    for plan in optimal_trees(a[:d], max_nodes) if d else ():
      plans.setdefault((plan.parents, plan.ranks), plan)
  cands = [costed(plan, verify, draft_level) for plan in plans.values()]
  best = max(cands, key=lambda c: (round(c.rate, 12), -c.plan.nodes))
  return best, cands


def costed(plan: TreePlan, verify: VerifyCost, draft_level: float) -> ShapeChoice:
  """The plan's round cost and rate (module docstring)."""
  cost = verify.at(plan.nodes) + plan.depth * draft_level
  return ShapeChoice(plan, cost, plan.value / cost)
