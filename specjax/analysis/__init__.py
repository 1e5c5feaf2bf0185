"""Exact analysis of verification rules (docs/spec.md §6).

* :mod:`~specjax.analysis.induced` -- the exact induced distribution of the
  first emitted token(s) of any node rule, for sampled and top-k drafts.
* :mod:`~specjax.analysis.divergences` -- KL, TV, entropy, acceptance rate,
  block efficiency, allowed sets and matched truncation baselines.
* :mod:`~specjax.analysis.propositions` -- the lossy-verification
  propositions (Revisiting Lossy Verification; MARS) as functions.
"""

from specjax.analysis.induced import (InducedParts, bonus_distribution, induced_distribution,
                                      induced_parts, induced_two_tokens)
from specjax.analysis.divergences import (acceptance_rate, allowed_mass, block_efficiency,
                                          entropy, eta_baseline, joint, kl, kl_both,
                                          matched_allowed_set, matched_baseline_probs,
                                          min_p_baseline, tv)

__all__ = ["InducedParts", "bonus_distribution", "induced_distribution", "induced_parts",
           "induced_two_tokens", "acceptance_rate", "allowed_mass", "block_efficiency",
           "entropy", "eta_baseline", "joint", "kl", "kl_both", "matched_allowed_set",
           "matched_baseline_probs", "min_p_baseline", "tv"]
