"""Exact analysis of verification rules (docs/spec.md §6).

* :mod:`~specjax.analysis.induced` -- the exact induced distribution of the
  first emitted token(s) of any node rule, for sampled and top-k drafts.
* :mod:`~specjax.analysis.divergences` -- KL, TV, entropy, acceptance rate,
  block efficiency, allowed sets and matched truncation baselines.
* :mod:`~specjax.analysis.propositions` -- the lossy-verification
  propositions (Revisiting Lossy Verification; MARS) as functions.
* :mod:`~specjax.analysis.path_law` / :mod:`~specjax.analysis.tree_law` -- the
  exact law of one round on a chain / a static tree, for node, path and tree
  rules; :func:`expected_accepted` and :func:`round_law`
  (:mod:`~specjax.analysis.accepted`) are the one entry point for any rule and
  draft shape (docs/path_rules.md).
"""

from specjax.analysis.induced import (InducedParts, bonus_distribution, induced_distribution,
                                      induced_parts, induced_two_tokens)
from specjax.analysis.divergences import (acceptance_rate, allowed_mass, block_efficiency,
                                          entropy, eta_baseline, joint, kl, kl_both,
                                          matched_allowed_set, matched_baseline_probs,
                                          min_p_baseline, tv)
# (the modules tree_law / path_law keep their names: their functions are not re-exported)
from specjax.analysis.path_law import ChainLaw, ChainTables, chain_tables
from specjax.analysis.tree_law import static_tree_law
from specjax.analysis.accepted import expected_accepted, round_law

__all__ = ["InducedParts", "bonus_distribution", "induced_distribution", "induced_parts",
           "induced_two_tokens", "acceptance_rate", "allowed_mass", "block_efficiency",
           "entropy", "eta_baseline", "joint", "kl", "kl_both", "matched_allowed_set",
           "matched_baseline_probs", "min_p_baseline", "tv", "ChainLaw", "ChainTables",
           "chain_tables", "static_tree_law", "expected_accepted", "round_law"]
