"""Lossless speculative sampling (Leviathan et al. 2023, Alg. 1; Chen et al. 2023).

Accept draft x drawn from q with probability ``min(1, p_cur(x) / q(x))``; on
rejection replace ``p_cur`` by ``norm(max(0, p_cur - q))`` and try the next
sibling (the multi-draft form of SpecInfer / EAGLE); if all candidates are
rejected, emit from ``p_cur``.  With deterministic drafts ``q = onehot(x)``
this is EAGLE's rule: accept with probability ``p_cur(x)``, else zero x and
renormalise.  With siblings drawn without replacement, each carrying its law
given the earlier siblings (docs/spec.md §4, "Sampled trees"), the same steps
are recursive rejection sampling (Jeon et al. 2024).  The output distribution
equals p exactly, for chains and trees.
"""

from __future__ import annotations

import dataclasses

from specjax.verifiers.base import NodeRule, safe_ratio
from specjax.verifiers.registry import register


@register("lossless")
@dataclasses.dataclass(frozen=True)
class Lossless(NodeRule):
  """``a = min(1, p_cur(x) / q(x))``; residual ``norm(max(0, p_cur - q))``."""

  name = "lossless"

  def accept_prob(self, state, q, x):
    return safe_ratio(state.p_cur[x], q[x])

  @property
  def is_lossless(self) -> bool:
    return True
