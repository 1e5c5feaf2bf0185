"""Verifier comparison (``experiments/compare_verifiers.py``), and the base config of the
theta / K / temperature sweeps.

Defaults are small enough for a few minutes on 2 CPU cores with the embedded
default models; raise ``data.num_prompts``, ``data.max_new_tokens``,
``timing.repeats`` and ``kl.contexts`` for bigger runs.  ``models=tiny`` runs
everything on random tiny models (smoke test, seconds).

``--config=experiments/configs/compare.py:smollm2``: SmolLM2-135M-Instruct with the
shipped draft LM and EAGLE-3 head (:func:`smollm2`), every rule of
:data:`DEFAULT_RULES` x {chain, eagle_chain, eagle_tree} x T in {0, 1}.
"""

import ml_collections

# Every registered rule; lossy ones at the hyperparameters of the papers' sweeps
# (MARS theta 0.9; CoS / lenience in the middle of {0.2..0.8}; p_base and eps
# such that the matched min-p / eta baselines are exact; Fuzzy speculative decoding at
# the authors' usage example, JS threshold 0.4, docs/lossy_path_rules.md).
DEFAULT_RULES = ("lossless, greedy, mars:theta=0.9, spec_cascade:p_base=0.3, typical:eps=0.09, "
                 "cos:lam=0.4, cos_contrastive:mu=0.5, lenience:l=0.5, fuzzy:threshold=0.4")

# A static top-k tree of depth 4 (9 nodes): 3 root children, the best one expanded.
DEFAULT_TREE = "[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0, 0]]"


def get_config(variant: str = ""):
  c = ml_collections.ConfigDict()
  c.name = "compare_verifiers"
  c.workdir = ""  # default /tmp/specjax_runs/<name>
  c.figures_dir = ""  # where the figure goes ("" = workdir), e.g. docs/figures
  # "default" | "tiny" (random, smoke test) | "stand_in" (random target) | a checkpoint
  # pair dir | a real model: "smollm2-135m-instruct", a .gguf file or an HF dir
  c.models = "default"
  # The target's weights: "float32", or "bfloat16" (bfloat16 weights of the float32 model,
  # float32 activations and accumulation: specjax.models.transformer.cast_weights); the
  # target-only rows run the same cast target, so every speedup is against it.
  c.param_dtype = "float32"
  c.draft = "draft"  # the set's / shipped draft LM, a directory, or "" (no chain / tree rows)
  c.seed = 0
  c.progress = True
  c.mesh_data = 0  # rows over a "data" mesh axis (0 = no mesh)
  c.mesh_model = 1  # target / draft LM tensor parallel over a "model" axis

  c.rules = DEFAULT_RULES  # "all" = every registered rule with default hyperparameters
  c.drafters = ("chain", "tree")
  c.temperatures = (0.0, 1.0)
  c.matched_baselines = True  # baseline:<rule> rows for spec_cascade / typical at T > 0
  # Verify-length policies, comma-separated (specjax.policies.factory): "none" (verify
  # every draft) and/or e.g. "adaedl" / "adaedl:lam=0.6:min_draft=0" (AdaEDL, chain
  # drafters only; docs/spec.md §5); each adds rows for the chain drafters it serves.
  c.policies = "none"
  # EAGLE rows frozen ("none") and / or adapting online to each conversation ("online" or
  # "online:every=8:learning_rate=0.003", specjax.decoding.adaptation); comma-separated.
  c.adapt = "none"
  c.num_draft = 4  # K (chain)
  c.tree_paths = DEFAULT_TREE  # JSON list of rank paths (LMTreeDrafter)
  # An EAGLE head (adds eagle_chain / eagle_tree rows): "eagle3" / "eagle1" (shipped for
  # models), a head directory, or "" (none)
  c.eagle_dir = ""
  c.eagle_depth = 4
  c.eagle_top_k = 4
  c.eagle_total_tokens = 12
  # The model-free suffix tree (suffix_tree rows; lookup_chain uses num_draft).
  c.suffix_depth = 4
  c.suffix_total_tokens = 16

  c.data = ml_collections.ConfigDict()
  c.data.root = ""  # "" = the interpreter's stdlib (the default models' corpus)
  c.data.heldout_fraction = 0.05
  c.data.split_seed = 0
  c.data.prompt_seed = 0
  c.data.num_prompts = 8
  c.data.min_prompt_tokens = 24
  c.data.max_prompt_tokens = 96
  c.data.max_new_tokens = 48
  c.data.batch_size = 0  # rows per call; 0 = all prompts in one batch
  c.data.prompt_bucket = 0  # > 0: pad every batch to at least this (one compiled program)
  c.data.prompt_sets = ("sharegpt", "humaneval")  # chat models: held-out chat prompts

  c.timing = ml_collections.ConfigDict()
  c.timing.repeats = 3  # paired (target-only, speculative) timings; also quality samples
  c.timing.target_per_row = True  # False: time target-only once per (T, repeat, batch)

  c.kl = ml_collections.ConfigDict()
  c.kl.enabled = True  # speculative rows at T > 0: exact first-token KL / TV to the baseline
  c.kl.num_prompts = 2
  c.kl.contexts = 16  # contexts (first tokens t1) per prompt: one batch of num_prompts x contexts

  c.quality_batch_size = 16
  c.compile_cache_dir = "/tmp/specjax_jax_cache"  # "" disables the persistent XLA cache
  if variant == "smollm2":
    smollm2(c)
    c.name = "compare_verifiers_smollm2"
  elif variant:
    raise ValueError(f"unknown config variant {variant!r}; use '' or 'smollm2'")
  return c


def smollm2(c):
  """SmolLM2-135M-Instruct with its shipped drafters (distilled 1-layer draft LM,
  EAGLE-3 head): chain, eagle_chain and the 24-node EAGLE-2 dynamic tree of
  ``experiments/acceptance.py`` (depth 5, top_k 8); held-out ShareGPT + HumanEval
  chat prompts; batch 1, prompts padded to 256 tokens (one program per row); speedup
  = median of 3 paired repeats; at T > 0 the repeats are 3 seeds.  Shared by the
  sweeps' smollm2 variants; the figure goes to docs/figures.

  Size: 4 prompts x 32 new tokens x 3 repeats per row; the comparison is 62 rows
  (9 rules x 3 drafters x 2 T, 6 matched baselines, 2 target-only), ~40 min on
  the 2-core machine alone (~40 s per row).  The first-token KL / TV are exact per
  context (:mod:`experiments.propositions.first_step_law`) over 4 prompts x 16 contexts.  Scale
  ``data.num_prompts`` / ``data.max_new_tokens`` up on a bigger machine."""
  c.models = "smollm2-135m-instruct"
  c.draft = "draft"
  c.eagle_dir = "eagle3"
  c.drafters = ("chain", "eagle_chain", "eagle_tree")
  c.num_draft = 4
  c.eagle_depth, c.eagle_top_k, c.eagle_total_tokens = 5, 8, 24
  c.figures_dir = "docs/figures"
  d = c.data
  d.prompt_sets = ("sharegpt", "humaneval")
  d.num_prompts = 4
  d.max_prompt_tokens = 256
  d.prompt_bucket = 256
  d.max_new_tokens = 32
  d.batch_size = 1
  c.timing.repeats = 3
  c.kl.num_prompts = 4
  c.kl.contexts = 16
  c.quality_batch_size = 6
  return c
