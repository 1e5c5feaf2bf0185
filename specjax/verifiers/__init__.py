"""Verification rules as swappable pure node rules (see ``base.py``), path rules
(``path.py``: rules that decide over a whole drafted chain, e.g. block verification)
and tree rules (``tree_rule.py``: over a whole drafted tree, e.g. traversal verification).

``residual`` and the allowed-set helpers are defined in
:mod:`specjax.distributions` and re-exported here; the registry (rule names
and MARS threshold hooks) is :mod:`specjax.verifiers.registry`.
"""

from specjax.distributions import (allowed_set_eta, allowed_set_min_p, eta_threshold,
                                   min_p_threshold, residual, truncate)
from specjax.verifiers.base import NodeRule, NodeState, check_range, safe_ratio
from specjax.verifiers.registry import (available, get, register, register_threshold_hook,
                                        threshold_hooks)
from specjax.verifiers import lossless as _lossless  # noqa: F401  (registers)
from specjax.verifiers import greedy as _greedy  # noqa: F401
from specjax.verifiers.lossless import Lossless
from specjax.verifiers.greedy import Greedy
from specjax.verifiers.truncation import SpecCascade, Typical, TruncationState
from specjax.verifiers.collaborative import CoS, CoSContrastive, Lenience
from specjax.verifiers.mars import Mars, MarsState
from specjax.verifiers.baselines import MatchedBaseline, matched_baseline
from specjax.verifiers.path import (NodePathRule, PathDecision, PathRule, as_path_rule,
                                    verify_path_batch)
from specjax.verifiers.block import Block  # registers "block" (kind "path")
from specjax.verifiers.tree_rule import (NodeTreeRule, TreeDecision, TreeRule, as_tree_rule,
                                         verify_tree_rule_batch)
from specjax.verifiers.traversal import Traversal  # registers "traversal" (kind "tree")
from specjax.verifiers.fuzzy import Fuzzy  # registers "fuzzy" (a node rule)
from specjax.verifiers.fly import Fly  # registers "fly" (kind "path")
from specjax.verifiers.mars_block import MarsBlock  # registers "mars_block" (kind "path")

__all__ = ["NodeRule", "NodeState", "check_range", "residual",
           "safe_ratio", "available", "get", "register",
           "Lossless", "Greedy", "SpecCascade", "Typical", "TruncationState",
           "allowed_set_eta", "allowed_set_min_p", "eta_threshold", "min_p_threshold", "truncate",
           "CoS", "CoSContrastive", "Lenience", "Mars", "MarsState", "register_threshold_hook",
           "threshold_hooks", "MatchedBaseline", "matched_baseline", "PathRule",
           "PathDecision", "NodePathRule", "as_path_rule", "verify_path_batch", "Block",
           "TreeRule", "TreeDecision", "NodeTreeRule", "as_tree_rule", "verify_tree_rule_batch",
           "Traversal", "Fuzzy", "Fly", "MarsBlock"]
