"""Verifier comparison (``experiments/compare_verifiers.py``), and the base config of the
theta / K / temperature sweeps.

Defaults are small enough for a few minutes on 2 CPU cores with the embedded
default models; raise ``data.num_prompts``, ``data.max_new_tokens``,
``timing.repeats`` and ``kl.samples`` for bigger runs.  ``models=tiny`` runs
everything on random tiny models (smoke test, seconds).
"""

import ml_collections

# Every registered rule; lossy ones at the hyperparameters of the papers' sweeps
# (MARS theta 0.9; CoS / lenience in the middle of {0.2..0.8}; p_base and eps
# such that the matched min-p / eta baselines are exact).
DEFAULT_RULES = ("lossless, greedy, mars:theta=0.9, spec_cascade:p_base=0.3, typical:eps=0.09, "
                 "cos:lam=0.4, cos_contrastive:mu=0.5, lenience:l=0.5")

# A static top-k tree of depth 4 (9 nodes): 3 root children, the best one expanded.
DEFAULT_TREE = "[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0, 0]]"


def get_config():
  c = ml_collections.ConfigDict()
  c.name = "compare_verifiers"
  c.workdir = ""  # default /tmp/specjax_runs/<name>
  c.models = "default"  # "default" | "tiny" (random, smoke test) | "stand_in" (random target)
  c.seed = 0
  c.progress = True

  c.rules = DEFAULT_RULES  # "all" = every registered rule with default hyperparameters
  c.drafters = ("chain", "tree")
  c.temperatures = (0.0, 1.0)
  c.matched_baselines = True  # baseline:<rule> rows for spec_cascade / typical at T > 0
  c.num_draft = 4  # K (chain)
  c.tree_paths = DEFAULT_TREE  # JSON list of rank paths (LMTreeDrafter)
  c.eagle_dir = ""  # a trained EAGLE head (adds eagle_chain / eagle_tree rows)
  c.eagle_depth = 4
  c.eagle_top_k = 4
  c.eagle_total_tokens = 12

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

  c.timing = ml_collections.ConfigDict()
  c.timing.repeats = 3  # paired (target-only, speculative) timings; also quality samples

  c.kl = ml_collections.ConfigDict()
  c.kl.enabled = True  # T > 0 rows only
  c.kl.num_prompts = 2
  c.kl.samples = 256  # samples per prompt (one batch of num_prompts * samples rows)
  c.kl.min_count = 8

  c.quality_batch_size = 16
  c.compile_cache_dir = "/tmp/specjax_jax_cache"  # "" disables the persistent XLA cache
  return c
