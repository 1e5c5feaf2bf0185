"""THE drafter factory: a drafter name -> ``(Drafter, draft_params)``.

Every binary and benchmark builds its drafters here, so a name means the same
drafter everywhere.  The kinds (:data:`KINDS`)::

    chain         LMDrafter: the draft LM, a chain of K = num_draft drafts
    tree          LMTreeDrafter: the draft LM, a static tree of rank paths (``paths``)
    eagle_chain   EagleDrafter: the EAGLE head, a chain of K drafts
    eagle_tree    EagleDrafter: the EAGLE head, an EAGLE-2 dynamic tree
                  (``depth`` levels, ``top_k`` children per expanded node,
                  ``total_tokens`` nodes kept)
    lookup_chain  PromptLookupDrafter: prompt lookup, K copied drafts (no model)
    suffix_tree   SuffixTreeDrafter: SuffixDecoding-style frequency tree
                  (``depth``, ``total_tokens`` nodes; no model)
    rsd_tree      LMTreeDrafter: the draft LM, a static tree whose children are drawn
                  without replacement (RSD; ``paths``, or ``branching`` for RSD-C's
                  constant branching factors; docs/spec.md §4)
    eagle_rsd_tree  EagleDrafter: the EAGLE head, the same sampled static tree
    lookup_eagle_chain  SourceChoiceDrafter: each round and row, prompt lookup's K
                  drafts where it pays, else the EAGLE chain's (the choice:
                  specjax.decoding.source_choice)

``adaptive`` (the main job's row that runs ``lookup_eagle_chain`` under the cost-aware
policy) and the names the binaries documented before this module (:data:`ALIASES`):
``lm_chain`` / ``draft_chain`` (chain), ``eagle1_chain`` / ``eagle3_chain``
(eagle_chain), ``eagle1_tree`` / ``eagle3_tree`` (eagle_tree), and
``eagle1_rsd_tree`` / ``eagle3_rsd_tree`` (eagle_rsd_tree).  An alias that
names a head kind says which head the caller loads (:func:`eagle_head_kind`);
the factory itself builds from whatever head :class:`DraftSources` holds.

    src = DraftSources.build(target, target_params, draft=dm, draft_params=dp)
    drafter, params = make_drafter("chain", SamplingConfig(1.0), src, num_draft=4)
    out = speculative_generate(target, target_params, drafter, params, rule, prompts, ...)

An unknown name raises ``ValueError`` listing the allowed names; a name whose
model is missing from the sources raises ``ValueError`` naming what is missing.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from specjax.distributions import SamplingConfig

KINDS = ("chain", "tree", "eagle_chain", "eagle_tree", "lookup_chain", "suffix_tree",
         "rsd_tree", "eagle_rsd_tree", "lookup_eagle_chain")
TREE_KINDS = ("tree", "eagle_tree", "suffix_tree", "rsd_tree", "eagle_rsd_tree")
MODEL_FREE_KINDS = ("lookup_chain", "suffix_tree")
STATIC_TREE_KINDS = ("tree", "rsd_tree", "eagle_rsd_tree")  # built from rank paths (paths=)
ALIASES = {"lm_chain": "chain", "draft_chain": "chain",
           "eagle1_chain": "eagle_chain", "eagle3_chain": "eagle_chain",
           "eagle1_tree": "eagle_tree", "eagle3_tree": "eagle_tree",
           "eagle1_rsd_tree": "eagle_rsd_tree", "eagle3_rsd_tree": "eagle_rsd_tree",
           "adaptive": "lookup_eagle_chain"}
# What each kind is built from: "draft" (the draft LM), "eagle" (an EAGLE head) or None.
_NEEDS = {"chain": "draft", "tree": "draft", "eagle_chain": "eagle", "eagle_tree": "eagle",
          "lookup_chain": None, "suffix_tree": None, "rsd_tree": "draft",
          "eagle_rsd_tree": "eagle", "lookup_eagle_chain": "eagle"}


def allowed_names() -> tuple:
  """Every name :func:`make_drafter` takes: the kinds, then the aliases."""
  return KINDS + tuple(ALIASES)


def drafter_kind(name: str) -> str:
  """The kind (one of :data:`KINDS`) of a drafter name or alias.

  Raises ``ValueError`` naming the value and the allowed names.
  """
  key = str(name).strip().lower()
  if key in KINDS:
    return key
  if key in ALIASES:
    return ALIASES[key]
  raise ValueError(f"drafter={name!r} is unknown; allowed: {', '.join(allowed_names())}")


def is_tree(name: str) -> bool:
  """Whether the drafter proposes trees."""
  return drafter_kind(name) in TREE_KINDS


def needs(name: str) -> Optional[str]:
  """What the drafter is built from: ``"draft"`` (the draft LM), ``"eagle"`` (an EAGLE
  head) or None (model-free)."""
  return _NEEDS[drafter_kind(name)]


def eagle_head_kind(name: str) -> str:
  """The shipped head an alias names (``"eagle1"`` / ``"eagle3"``), else ``""``."""
  drafter_kind(name)
  head = str(name).strip().lower().partition("_")[0]
  return head if head in ("eagle1", "eagle3") else ""


@dataclasses.dataclass(frozen=True)
class DraftSources:
  """The models drafters are built from.

  Attributes:
    vocab_size: V, the target's vocabulary size (the model-free drafters' one-hot width).
    draft, draft_params: the independent draft LM and its params (None: absent).
    eagle: ``(EagleHead, drafter params)`` -- the params from
      ``EagleDrafter.make_params`` (None: absent).
  """

  vocab_size: int
  draft: Any = None
  draft_params: Any = None
  eagle: Optional[tuple] = None

  @classmethod
  def build(cls, target, target_params, draft=None, draft_params=None, eagle=None
            ) -> "DraftSources":
    """Sources for ``target``: ``eagle`` is the loaded form ``(head, head_params, d2t)``
    (d2t None for a full draft vocabulary); its drafter params (the head's plus the
    target's embedding / LM head) are made here."""
    made = None
    if eagle is not None:
      from specjax.decoding.eagle_drafter import EagleDrafter
      head, head_params, d2t = eagle
      made = (head, EagleDrafter.make_params(head_params, target, target_params, d2t))
    return cls(int(target.config.vocab_size), draft, draft_params, made)


def _check_sources(name: str, kind: str, sources: DraftSources) -> None:
  if not isinstance(sources, DraftSources):
    raise TypeError(f"sources must be a DraftSources, got {type(sources).__name__}")
  need = _NEEDS[kind]
  if need == "draft" and sources.draft is None:
    raise ValueError(f"drafter={name!r} needs a draft LM; sources.draft is None")
  if need == "eagle" and sources.eagle is None:
    raise ValueError(f"drafter={name!r} needs an EAGLE head; sources.eagle is None")


def make_drafter(name: str, sampling: SamplingConfig, sources: DraftSources, *,
                 num_draft: Optional[int] = None, depth: Optional[int] = None,
                 top_k: Optional[int] = None, total_tokens: Optional[int] = None,
                 paths: Optional[tuple] = None,
                 branching: Optional[tuple] = None, children: str = "sampled",
                 adapt=None) -> tuple:
  """``(drafter, draft_params)`` of a drafter name (module docstring).

  Args:
    name: one of :func:`allowed_names`.
    sampling: the processors drafts are drawn under (trees: only shapes ``q_node``;
      the model-free drafters draft deterministically and ignore it).
    sources: the models (:class:`DraftSources`).
    num_draft: K, a chain's drafts per step (required for chains).
    depth: a dynamic or suffix tree's depth (default ``num_draft``).
    top_k, total_tokens: a dynamic tree's children per expanded node and nodes kept;
      ``total_tokens`` is also the suffix tree's node count N (None: the drafter's
      own default, ``EagleTreeDrafter`` / ``SuffixTreeDrafter``).
    paths: the static tree's rank paths (``tree``, ``rsd_tree``, ``eagle_rsd_tree``;
      required for ``tree``).
    branching: the RSD kinds without ``paths``: RSD-C's children per node at each
      depth, e.g. ``(3, 2, 2)`` (``sampled_tree.constant_branching``).
    children: the RSD kinds: "sampled" (default) or "topk" -- the same tree with
      deterministic top-k children, for comparisons.
    adapt: the EAGLE kinds: an :class:`~specjax.decoding.adaptation.OnlineAdaptation`
      (the head's drafts adapt to each conversation while it serves), or None.

  Raises ``ValueError`` for an unknown name, a missing model or a bad size (the
  drafter's own checks name the argument).
  """
  kind = drafter_kind(name)
  _check_sources(name, kind, sources)
  if adapt is not None and _NEEDS[kind] != "eagle":
    raise ValueError(f"adapt= needs an EAGLE drafter (eagle_chain, eagle_tree, "
                     f"eagle_rsd_tree, lookup_eagle_chain); drafter={name!r} has no head to "
                     f"adapt")
  depth = num_draft if depth is None else depth
  if kind in ("rsd_tree", "eagle_rsd_tree"):
    from specjax.decoding.sampled_tree import constant_branching
    if (paths is None) == (branching is None):
      raise ValueError(f"drafter={name!r} needs exactly one of paths= (rank paths) or "
                       f"branching= (e.g. (3, 2, 2)); got paths={paths!r}, "
                       f"branching={branching!r}")
    paths = constant_branching(branching) if paths is None else paths
  if kind == "rsd_tree":
    from specjax.decoding.drafters import LMTreeDrafter
    return (LMTreeDrafter(sources.draft, paths=paths, sampling=sampling, children=children),
            sources.draft_params)
  if kind == "chain":
    from specjax.decoding.drafters import LMDrafter
    return LMDrafter(num_draft, sampling, sources.draft), sources.draft_params
  if kind == "tree":
    from specjax.decoding.drafters import LMTreeDrafter
    if paths is None:
      raise ValueError(f"drafter={name!r} (a static tree) needs paths=, e.g. ((0,), (1,), (0, 0))")
    return LMTreeDrafter(sources.draft, paths=paths, sampling=sampling), sources.draft_params
  if kind == "lookup_chain":
    from specjax.decoding.lookup_drafter import PromptLookupDrafter
    return PromptLookupDrafter(num_draft, vocab=sources.vocab_size), None
  if kind == "suffix_tree":
    from specjax.decoding.suffix_drafter import SuffixTreeDrafter
    sizes = {} if total_tokens is None else {"total_tokens": total_tokens}
    return SuffixTreeDrafter(sources.vocab_size, depth=depth, **sizes), None
  from specjax.decoding.eagle_drafter import EagleDrafter
  from specjax.decoding.eagle_trees import EagleStaticTreeDrafter, EagleTreeDrafter
  head, params = sources.eagle
  if kind == "eagle_chain":
    return EagleDrafter(num_draft, sampling, head=head, adapt=adapt), params
  if kind == "lookup_eagle_chain":
    from specjax.decoding.lookup_drafter import PromptLookupDrafter
    from specjax.decoding.source_choice import SourceChoiceDrafter
    return (SourceChoiceDrafter(PromptLookupDrafter(num_draft, vocab=sources.vocab_size),
                                EagleDrafter(num_draft, sampling, head=head, adapt=adapt)),
            SourceChoiceDrafter.make_params(params))
  if kind == "eagle_rsd_tree":
    return (EagleStaticTreeDrafter(sampling=sampling, head=head, tree_paths=paths,
                                   children=children, adapt=adapt), params)
  sizes = {k: v for k, v in (("top_k", top_k), ("total_tokens", total_tokens)) if v is not None}
  return (EagleTreeDrafter(depth=depth, sampling=sampling, head=head, adapt=adapt, **sizes),
          params)
