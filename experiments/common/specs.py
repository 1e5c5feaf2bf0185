"""The run specs the experiment and benchmark binaries share: each knob defined
once, with its one default (taken from the library object it configures where
the library has one) and its check (experiments/common/knobs.py).

A binary takes the specs it needs, adds one spec of its own knobs (named after
the binary, defined in its module), and states its run sizes as presets::

    SPECS = knobs.Specs(specs.ModelSpec, specs.GenerationSpec, MySpec,
                        presets=dict(model="smollm2-135m-instruct", max_new_tokens=96,
                                     batch_size=1))
    model, gen, mine = SPECS.build()     # typed, validated; bad values: UsageError

Groups (a knob sits in the smallest group of knobs that always go together):
what runs (:class:`ModelSpec`, :class:`DraftSpec`, :class:`EagleSpec`, :class:`ParamDtypeSpec`,
:class:`DtypeSpec`), how it drafts (:class:`DrafterSpec`, :class:`ChainSpec`,
:class:`EagleTreeSpec`, :class:`SuffixTreeSpec`, :class:`StaticTreeSpec`,
:class:`AdaptSpec`), how it verifies and samples (:class:`RuleSpec`,
:class:`PolicySpec`, :class:`TemperaturesSpec`, :class:`TemperatureSpec`,
:class:`SeedsSpec`, :class:`SeedSpec`), on what (:class:`PromptSpec`,
:class:`NumPromptsSpec`, :class:`NewTokensSpec`, :class:`BatchSpec`,
:class:`ContextSpec`), how it is timed (:class:`TimingSpec`, :class:`ProfileSpec`,
:class:`ThreadsSpec`, :class:`BatchSizesSpec`, :class:`TokensSpec`), where it
runs (:class:`MeshSpec`) and where results go (:class:`OutputSpec`,
:class:`OutputDirSpec`, :class:`WorkdirSpec`). A family of binaries keeps its
shared specs next to it (experiments/humaneval/specs.py, the feature-store
binaries' spec in experiments/common/store_spec.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

from experiments.common.knobs import (KnobError, check_float, check_int, check_numbers,
                                      check_subset, knob)


def _library_default(cls_path: str, field: str):
  """The default of a library dataclass's field: the knob's one default."""
  import importlib
  module, name = cls_path.rsplit(".", 1)
  cls = getattr(importlib.import_module(module), name)
  return {f.name: f.default for f in dataclasses.fields(cls)}[field]


# ---- what runs ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """The target model."""
  model: str = knob(help="target: a registered real model (smollm2-135m-instruct), a .gguf "
                    "file, a Hugging Face checkpoint directory, 'default' (the small "
                    "embedded stdlib models) or a random set for tests ('tiny', "
                    "'stand_in'; where the binary takes them)", preset=True)

  def __post_init__(self):
    from experiments.common.model_sets import RANDOM_SETS
    from specjax.models import registry
    if (self.model not in ("default", *RANDOM_SETS) and self.model not in registry.REAL_MODELS
        and not os.path.exists(self.model)):
      raise KnobError("model", self.model, f"not 'default', a random set {RANDOM_SETS}, a "
                      f"registered model {sorted(registry.REAL_MODELS)} or an existing "
                      f".gguf file / HF dir")

  @property
  def is_default(self) -> bool:
    """The small embedded models (not a real checkpoint)."""
    return self.model == "default"


def _check_shipped(spec, name: str, shipped: tuple) -> None:
  v = getattr(spec, name)
  if v not in shipped + ("none",) and not os.path.isdir(v):
    raise KnobError(name, v, f"give {' / '.join(shipped)}, 'none' or a directory")


@dataclasses.dataclass(frozen=True)
class DraftSpec:
  """The draft LM shipped for (or given with) the target."""
  draft: str = knob("draft", "draft LM: 'draft' (the one shipped for --model), a directory, "
                    "or 'none'")

  def __post_init__(self):
    _check_shipped(self, "draft", ("draft",))


@dataclasses.dataclass(frozen=True)
class EagleSpec:
  """The EAGLE head shipped for (or given with) the target."""
  eagle: str = knob("eagle3", "EAGLE head: 'eagle3' / 'eagle1' (shipped for --model), a "
                    "directory, or 'none'")

  def __post_init__(self):
    _check_shipped(self, "eagle", ("eagle1", "eagle3"))


@dataclasses.dataclass(frozen=True)
class ParamDtypeSpec:
  """How the target's weights are stored."""
  param_dtype: str = knob("float32", "the target's weights; bfloat16: the float32 model "
                          "with bfloat16 weights (float32 activations and accumulation; "
                          "docs/speed.md)", choices=("float32", "bfloat16"))


@dataclasses.dataclass(frozen=True)
class DtypeSpec:
  """The dtype the model computes in."""
  dtype: str = knob("float32", "activations (and weights, unless a binary stores them "
                    "apart)", choices=("float32", "bfloat16"))


# ---- how it drafts ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DrafterSpec:
  """Which drafters run."""
  drafters: tuple[str, ...] = knob(
      help="drafter kinds (specjax.decoding.drafter_factory): chain (draft LM), tree (static "
      "tree of the draft LM), eagle_chain, eagle_tree (EAGLE head, EAGLE-2 dynamic tree), "
      "lookup_chain (prompt lookup), suffix_tree (SuffixDecoding-style frequency tree) -- "
      "these two need no model -- rsd_tree / eagle_rsd_tree (--tree_paths with children "
      "drawn without replacement: RSD), lookup_eagle_chain (per round and row, prompt "
      "lookup's drafts where it matched, else the EAGLE chain's) and adaptive (the main "
      "job's row: lookup_eagle_chain under the cost-aware policy, from this machine's "
      "measured costs and the shipped acceptance tables)", preset=True)

  def __post_init__(self):
    from specjax.decoding.drafter_factory import allowed_names
    check_subset(self, "drafters", allowed_names())


@dataclasses.dataclass(frozen=True)
class ChainSpec:
  """A chain's draft length."""
  k: int = knob(help="draft length K of chains", preset=True)

  def __post_init__(self):
    check_int(self, "k", 1)


_EAGLE = "specjax.decoding.eagle_trees.EagleTreeDrafter"
_SUFFIX = "specjax.decoding.suffix_drafter.SuffixTreeDrafter"


@dataclasses.dataclass(frozen=True)
class EagleTreeSpec:
  """The EAGLE-2 dynamic tree (specjax.decoding.eagle_trees.EagleTreeDrafter)."""
  eagle_depth: int = knob(5, "EAGLE-2 dynamic tree: draft depth")
  eagle_top_k: int = knob(_library_default(_EAGLE, "top_k"),
                          "EAGLE-2 dynamic tree: children per expanded node")
  eagle_total_tokens: int = knob(_library_default(_EAGLE, "total_tokens"),
                                 "EAGLE-2 dynamic tree: draft nodes verified per step")

  def __post_init__(self):
    for name in ("eagle_depth", "eagle_top_k", "eagle_total_tokens"):
      check_int(self, name, 1)


@dataclasses.dataclass(frozen=True)
class SuffixTreeSpec:
  """The suffix tree (specjax.decoding.suffix_drafter.SuffixTreeDrafter)."""
  suffix_depth: int = knob(_library_default(_SUFFIX, "depth"), "suffix_tree: tree depth")
  suffix_total_tokens: int = knob(_library_default(_SUFFIX, "total_tokens"),
                                  "suffix_tree: draft nodes verified per step")

  def __post_init__(self):
    check_int(self, "suffix_depth", 1)
    check_int(self, "suffix_total_tokens", 1)


_DEFAULT_TREE = "[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0, 0]]"


@dataclasses.dataclass(frozen=True)
class StaticTreeSpec:
  """A static draft tree given by rank paths."""
  tree_paths: str = knob(_DEFAULT_TREE, "static tree (tree, rsd_tree, eagle_rsd_tree) as a "
                         "JSON list of rank paths")

  def __post_init__(self):
    self.paths()

  def paths(self) -> tuple:
    """``tree_paths`` as a tuple of rank-path tuples."""
    try:
      paths = tuple(tuple(int(r) for r in p) for p in json.loads(self.tree_paths))
      if not paths or any(not p or min(p) < 0 for p in paths):
        raise ValueError
    except (ValueError, TypeError):
      raise KnobError("tree_paths", self.tree_paths, "give a non-empty JSON list of rank "
                      "paths, e.g. [[0], [1], [0, 0]]") from None
    return paths


@dataclasses.dataclass(frozen=True)
class AdaptSpec:
  """Online adaptation of the EAGLE head (docs/spec.md §4)."""
  adapt: str = knob(help="EAGLE rows frozen ('none') and / or adapting their drafts online to "
                    "each conversation ('online[:every=8:learning_rate=...]', "
                    "specjax.decoding.adaptation.OnlineAdaptation), comma-separated",
                    preset=True)

  def __post_init__(self):
    from experiments.common.rows import parse_adapt
    try:
      parse_adapt(self.adapt)
    except (ValueError, TypeError) as e:
      raise KnobError("adapt", self.adapt, str(e)) from None

  def modes(self) -> list:
    """``[(name, hparams), ...]`` (:func:`experiments.common.rows.parse_adapt`)."""
    from experiments.common.rows import parse_adapt
    return parse_adapt(self.adapt)


# ---- how it verifies and samples ----------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RuleSpec:
  """The verification rules compared."""
  verifiers: str = knob("lossless, mars:theta=0.9", "comma-separated rules, each "
                        "name[:hparam=value[:...]] (docs/rules.md)")

  def __post_init__(self):
    from experiments.common.rows import parse_rules
    try:
      parse_rules(self.verifiers)
    except ValueError as e:
      raise KnobError("verifiers", self.verifiers, str(e)) from None


@dataclasses.dataclass(frozen=True)
class PolicySpec:
  """Verify-length policies (docs/spec.md §5)."""
  policies: str = knob("none", "verify-length policies, comma-separated, each "
                       "name[:hparam=value[:...]]: 'none' (verify all K drafts) and/or "
                       "'adaedl' (AdaEDL early draft stopping; e.g. adaedl:lam=0.6); a "
                       "policy adds rows for the model-based chains")

  def check(self, k: int) -> None:
    """The policies are valid for chains of ``k`` drafts (KnobError otherwise)."""
    from experiments.common.rows import parse_policies
    try:
      parse_policies(self.policies, k)
    except ValueError as e:
      raise KnobError("policies", self.policies, str(e)) from None


@dataclasses.dataclass(frozen=True)
class TemperaturesSpec:
  """The sampling temperatures a run sweeps."""
  temperatures: tuple[float, ...] = knob(help="sampling temperatures (drafter and target), "
                                         "comma-separated", preset=True)

  def __post_init__(self):
    if not self.temperatures:
      raise KnobError("temperatures", (), "give at least one temperature, e.g. 0,1")
    check_numbers(self, "temperatures", 0.0)


@dataclasses.dataclass(frozen=True)
class TemperatureSpec:
  """One sampling temperature."""
  temperature: float = knob(help="sampling temperature (0 = greedy)", preset=True)

  def __post_init__(self):
    check_float(self, "temperature", 0.0)


@dataclasses.dataclass(frozen=True)
class SeedsSpec:
  """Repeated sampled runs."""
  seeds: int = knob(help="runs per prompt at T > 0 (one at T = 0)", preset=True)

  def __post_init__(self):
    check_int(self, "seeds", 1)


# ---- on what ------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PromptSpec:
  """The held-out chat prompts of a real model (experiments/common/prompts.py)."""
  prompt_sets: tuple[str, ...] = knob(("sharegpt", "humaneval"), "held-out ShareGPT first "
                                      "turns (sharegpt), HumanEval problems (humaneval) "
                                      "and/or ShareGPT chats up to a later user turn "
                                      "(multiturn), split evenly")
  max_prompt_tokens: int = knob(256, "longest rendered chat prompt")

  def __post_init__(self):
    from experiments.common.prompts import PROMPT_SETS
    check_subset(self, "prompt_sets", PROMPT_SETS)
    check_int(self, "max_prompt_tokens", 8)


@dataclasses.dataclass(frozen=True)
class NumPromptsSpec:
  """How many prompts."""
  num_prompts: int = knob(help="prompts: in all (split evenly over --prompt_sets), or per "
                          "prompt set where the binary's docstring says so", preset=True)

  def __post_init__(self):
    check_int(self, "num_prompts", 0)


@dataclasses.dataclass(frozen=True)
class CalibrationPromptsSpec:
  """The held-out prompts acceptance tables are fitted on."""
  calibration_prompts: int = knob(help="held-out prompts the acceptance tables are fitted on, "
                                  "disjoint from the evaluation prompts (the fit on half, its "
                                  "calibration error on the other half)", preset=True)

  def __post_init__(self):
    check_int(self, "calibration_prompts", 2)


@dataclasses.dataclass(frozen=True)
class EvaluationPromptsSpec:
  """The evaluation prompts a fit on held-out prompts stays clear of."""
  evaluation_prompts: int = knob(32, "the first prompts of the sets, kept out of the "
                                 "calibration (the main job and the speed records "
                                 "evaluate on at most the first 16)")

  def __post_init__(self):
    check_int(self, "evaluation_prompts", 0)


@dataclasses.dataclass(frozen=True)
class NewTokensSpec:
  """How much is generated."""
  max_new_tokens: int = knob(help="tokens generated per prompt", preset=True)

  def __post_init__(self):
    check_int(self, "max_new_tokens", 0)


@dataclasses.dataclass(frozen=True)
class BatchSpec:
  """Rows per call."""
  batch_size: int = knob(help="rows per call (0 = all prompts in one batch)", preset=True)

  def __post_init__(self):
    check_int(self, "batch_size", 0)


@dataclasses.dataclass(frozen=True)
class SeedSpec:
  """The run's PRNG seed."""
  seed: int = knob(0, "PRNG seed (sampling, prompt selection, random weights)")


@dataclasses.dataclass(frozen=True)
class ContextSpec:
  """The longest context a row may reach."""
  max_context: int = knob(help="longest context (prompt + generated tokens) of a row",
                          preset=True)

  def __post_init__(self):
    check_int(self, "max_context", 8)


# ---- how it is timed ----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TimingSpec:
  """Timed repeats (medians are reported)."""
  repeats: int = knob(help="timing repeats (the median is reported)", preset=True)

  def __post_init__(self):
    check_int(self, "repeats", 1)


@dataclasses.dataclass(frozen=True)
class ProfileSpec:
  """The cost profile of the adaptive policies (docs/spec.md §8)."""
  profile_repeats: int = knob(5, "timed repeats per cost-profile point (median)")

  def __post_init__(self):
    check_int(self, "profile_repeats", 1)


@dataclasses.dataclass(frozen=True)
class ThreadsSpec:
  """CPU threads of a peer framework timed side by side."""
  threads: int = knob(2, "torch intra-op threads (the peer gets what JAX gets)")

  def __post_init__(self):
    check_int(self, "threads", 1)


@dataclasses.dataclass(frozen=True)
class BatchSizesSpec:
  """Batch sizes a benchmark sweeps."""
  batch_sizes: tuple[int, ...] = knob(help="rows per call, comma-separated", preset=True)

  def __post_init__(self):
    if not self.batch_sizes or min(self.batch_sizes) < 1:
      raise KnobError("batch_sizes", self.batch_sizes, "give integers >= 1, comma-separated")


@dataclasses.dataclass(frozen=True)
class TokensSpec:
  """Forward widths (new tokens per row) a micro-benchmark sweeps."""
  tokens: tuple[int, ...] = knob(help="new tokens per row, comma-separated", preset=True)

  def __post_init__(self):
    if not self.tokens or min(self.tokens) < 1:
      raise KnobError("tokens", self.tokens, "give integers >= 1, comma-separated")


# ---- where it runs and where results go ---------------------------------------------------

@dataclasses.dataclass(frozen=True)
class MeshSpec:
  """Data- and tensor-parallel devices (specjax.distributed)."""
  mesh_data: int = knob(0, "data-parallel devices (0 = no mesh, plain jit)")
  mesh_model: int = knob(1, "tensor-parallel devices: weights and KV caches sharded over a "
                         "'model' mesh axis (needs --mesh_data)")

  def __post_init__(self):
    check_int(self, "mesh_data", 0)
    check_int(self, "mesh_model", 1)
    if self.mesh_model > 1 and not self.mesh_data:
      raise KnobError("mesh_model", self.mesh_model, "needs a mesh: give --mesh_data (rows; "
                      "1 for tensor parallelism only)")


@dataclasses.dataclass(frozen=True)
class OutputSpec:
  """One JSON record file."""
  output: str = knob(help="write the run's JSON record here ('' = print only)", preset=True)

  def __post_init__(self):
    if self.output and os.path.isdir(self.output):
      raise KnobError("output", self.output, "is a directory; give a file path")


@dataclasses.dataclass(frozen=True)
class OutputDirSpec:
  """A directory of records and reports."""
  output_dir: str = knob(help="where the run's records, tables and figures go", preset=True)

  def __post_init__(self):
    if self.output_dir and os.path.exists(self.output_dir) and not os.path.isdir(
        self.output_dir):
      raise KnobError("output_dir", self.output_dir, "is a file; give a directory")


@dataclasses.dataclass(frozen=True)
class WorkdirSpec:
  """A run directory (checkpoints, caches)."""
  workdir: str = knob(help="run directory (checkpoints, caches)", preset=True)
