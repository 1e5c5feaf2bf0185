"""Verification rules as swappable pure node rules (see ``base.py``)."""

from specjax.verifiers.base import (ChainResult, NodeRule, NodeState, TreeResult, check_range,
                                    residual, safe_ratio, verify_chain, verify_tree)
from specjax.verifiers.registry import available, get, register
from specjax.verifiers import lossless as _lossless  # noqa: F401  (registers)
from specjax.verifiers import greedy as _greedy  # noqa: F401
from specjax.verifiers.lossless import Lossless
from specjax.verifiers.greedy import Greedy

__all__ = ["ChainResult", "NodeRule", "NodeState", "TreeResult", "check_range", "residual",
           "safe_ratio", "verify_chain", "verify_tree", "available", "get", "register",
           "Lossless", "Greedy"]
