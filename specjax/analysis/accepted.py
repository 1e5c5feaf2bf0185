"""One entry point for the exact law of a verification round and its expected
number of accepted tokens, for ANY rule (node, path or tree) on a chain or a
static tree (docs/path_rules.md, "Exact expected acceptance: one entry point").

``round_law(rule, tables, tree=None, children="sampled", length=None)``
dispatches on the rule's kind (:func:`specjax.verifiers.registry.kind_of`:
``"node"``, ``"path"`` or ``"tree"``) and on the draft's shape:

=================  ============================================  ======================================
draft              node / tree rule                              path rule (block)
=================  ============================================  ======================================
chain (``tree``    :func:`~specjax.analysis.path_law.chain_law`   :func:`~specjax.analysis.path_law.chain_law`
is None)           (node rules as token-level verification,
                   tree rules on the one-path tree)
static tree        :func:`~specjax.analysis.tree_law.static_tree_law`  refused: a chain-only rule
(``tree`` = rank   (children ``"topk"`` or ``"sampled"``, as the
paths)             drafters fill them)
=================  ============================================  ======================================

A chain's drafts are sampled, ``x_i ~ Q_i(. | x_<i)``; a deterministic
(greedy) chain is the static tree ``((0,), (0, 0), ...)`` with
``children="topk"``.  ``expected_accepted`` returns ``E[tau]`` per context
(eq. (1) of docs/path_rules.md "Exact analysis": ``sum_x P(x) sum_t t
P(tau = t | x)``); tokens per target call is ``E[tau] + 1``.  Nothing is
sampled: every draft or filling is enumerated, so V and the tree are small.
"""

from __future__ import annotations

from typing import Optional, Sequence

import jax

from specjax.analysis.path_law import ChainLaw, ChainTables, chain_law
from specjax.analysis.tree_law import CHILDREN, static_tree_law
from specjax.verifiers.registry import kind_of


def round_law(rule, tables: ChainTables, tree: Optional[Sequence[Sequence[int]]] = None,
              children: str = "sampled", length=None) -> ChainLaw:
  """Exact laws of one verification round by ``rule`` (module docstring).

  Args:
    rule: any rule: a node rule (``verifiers.get("lossless")``), a path rule
      (``"block"``) or a tree rule (``"traversal"``).
    tables: :class:`ChainTables` (leading axes = contexts) with K = the chain's
      length or the tree's depth.
    tree: None for a chain of K drafts, or the static tree's rank paths
      (``((0,), (1,), (0, 0))``, the drafters' ``paths``).
    children: trees only: ``"sampled"`` (drawn without replacement) or
      ``"topk"`` (the drafters' ``children`` option).
    length: chains only: int or [...] ints in 0..K, the drafts offered.

  Returns:
    :class:`~specjax.analysis.path_law.ChainLaw` (``expected_accepted``,
    ``accept_length``, ``block``, ``first_tokens``, ``target``, ``lossless_gap``).
  """
  kind = kind_of(rule)
  if tree is None:
    return chain_law(rule, tables, length)
  if length is not None:
    raise ValueError(f"length={length!r} is read only for chains (tree=None); a tree's "
                     f"nodes are all offered")
  if children not in CHILDREN:
    raise ValueError(f"children={children!r}; choose one of {tuple(CHILDREN)}")
  if kind == "path":
    raise ValueError(f"rule={rule!r} is a path rule (kind 'path'): it verifies chains only; "
                     f"pass tree=None, or use a tree rule such as 'traversal' on trees")
  return static_tree_law(rule, tables, tree, children)


def expected_accepted(rule, tables: ChainTables,
                      tree: Optional[Sequence[Sequence[int]]] = None,
                      children: str = "sampled", length=None) -> jax.Array:
  """[...] exact expected number of accepted drafts per round, ``E[tau]``, for any
  rule on a chain (``tree=None``) or a static tree (same arguments as :func:`round_law`)."""
  return round_law(rule, tables, tree, children, length).expected_accepted
