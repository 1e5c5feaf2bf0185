"""Tiny smoke test of experiments/train_eagle.py (seconds): pass --config.target=<dir>."""

from experiments.configs.eagle_base import eagle_base


def get_config(kind="eagle3"):
  c = eagle_base(kind or "eagle3")
  c.name = f"{c.kind}_tiny"
  c.data.seq_len = 32
  c.data.batch_size = 2
  c.head.draft_vocab_size = 256 if c.kind == "eagle3" else 0
  c.train.num_steps = 4
  c.train.ttt_steps = 2
  c.train.eval_every = 2
  c.train.eval_batches = 1
  c.train.checkpoint_every = 2
  c.train.log_every = 1
  c.train.progress = False
  c.optim.warmup_steps = 1
  c.eval.num_prompts = 2
  c.eval.prompt_len = 8
  c.eval.max_new_tokens = 8
  c.eval.num_draft = 2
  c.eval.tree_depth = 2
  c.eval.tree_top_k = 2
  c.eval.tree_total_tokens = 4
  c.eval.compare_draft_lm = False
  return c
