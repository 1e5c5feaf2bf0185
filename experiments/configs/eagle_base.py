"""Shared base of the EAGLE head configs (``experiments/train_eagle.py``).

The data section is the LM configs' one (same corpus, split and windows); the
tokenizer is the target's own ``tokenizer.json`` when its directory has one.
"""

import ml_collections

from experiments.configs.lm_base import base_config


def eagle_base(kind: str) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.name = kind
  c.kind = kind  # "eagle1" | "eagle3"
  c.workdir = ""  # default /tmp/specjax_runs/<name>
  c.target = "default"  # "default" (specjax.models.defaults) or a HF checkpoint directory

  c.data = base_config().data
  c.data.seq_len = 128
  c.data.batch_size = 8

  c.head = ml_collections.ConfigDict()
  c.head.intermediate_size = 0  # 0 = the target's
  c.head.draft_vocab_size = 0  # 0 = the full target vocabulary (EAGLE-3 only)
  c.head.target_layers = ()  # () = (L,) for EAGLE-1, default_eagle3_layers(L) for EAGLE-3

  c.optim = ml_collections.ConfigDict()
  c.optim.learning_rate = 3e-3
  c.optim.warmup_steps = 30
  c.optim.min_lr_ratio = 0.1
  c.optim.weight_decay = 0.0
  c.optim.b1 = 0.9
  c.optim.b2 = 0.95
  c.optim.grad_clip = 1.0

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 600
  c.train.time_budget_s = 0.0  # > 0: stop (and checkpoint) after this much wall time
  c.train.init_seed = 0
  c.train.reg_weight = 1.0
  c.train.ce_weight = 0.1
  c.train.feature_noise = 0.0
  c.train.ttt_steps = 7
  c.train.decay = 0.8
  c.train.eval_every = 100
  c.train.eval_batches = 4
  c.train.checkpoint_every = 50
  c.train.log_every = 25
  c.train.progress = True

  c.export = ml_collections.ConfigDict()
  c.export.dir = ""  # "" = <workdir>/head
  c.export.dtype = "bfloat16"

  c.eval = ml_collections.ConfigDict()  # acceptance of the exported head (greedy)
  c.eval.num_prompts = 16
  c.eval.prompt_len = 64
  c.eval.max_new_tokens = 64
  c.eval.num_draft = 5  # chain K
  c.eval.tree_depth = 5  # EAGLE-2 dynamic tree (0 = skip)
  c.eval.tree_top_k = 8
  c.eval.tree_total_tokens = 32
  c.eval.compare_draft_lm = True  # also report the default draft LM's chain tau
  return c
