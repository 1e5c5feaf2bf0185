"""The layout of a static draft tree from its rank paths -- the one definition shared
by the drafters (:mod:`specjax.decoding.tree` re-exports it) and the exact analysis
(:mod:`specjax.analysis.tree_law`, which may not import ``decoding``).  Plain
numpy: it imports nothing from specjax.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def static_tree(paths: Sequence[Sequence[int]]):
  """A static tree from EAGLE/Medusa-style choice paths, e.g. ``[[0], [1], [0, 0]]``.

  Each path lists the rank of the chosen child at every depth (0 = the
  drafter's most likely token).  Returns numpy ``(parents [N], depths [N],
  ranks [N])`` with nodes sorted by depth (parents before children); ranks
  tell a drafter which of its top-k candidates each node takes.

  Raises ``ValueError`` if a path's prefix is missing or a path repeats.
  """
  norm = [tuple(int(r) for r in p) for p in paths]
  if not norm:
    raise ValueError("static tree needs at least one path")
  if len(set(norm)) != len(norm):
    raise ValueError("static tree paths must be unique")
  if any(len(p) == 0 or min(p) < 0 for p in norm):
    raise ValueError("every path needs >= 1 non-negative rank")
  order = sorted(norm, key=lambda p: (len(p), p))
  index = {(): 0}
  parents, depths, ranks = [], [], []
  for i, p in enumerate(order):
    if p[:-1] not in index:
      raise ValueError(f"path {list(p)} has no parent path {list(p[:-1])} in the tree")
    parents.append(index[p[:-1]])
    depths.append(len(p))
    ranks.append(p[-1])
    index[p] = i + 1
  return np.array(parents, np.int32), np.array(depths, np.int32), np.array(ranks, np.int32)
