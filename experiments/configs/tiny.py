"""Tiny smoke-test config (seconds on a CPU): 1 layer, hidden 32, short sequences."""

from experiments.configs.lm_base import base_config


def get_config():
  c = base_config()
  c.name = "tiny"
  c.model.update(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=16)
  c.data.seq_len = 32
  c.data.batch_size = 4
  c.optim.warmup_steps = 2
  c.train.num_steps = 6
  c.train.eval_every = 3
  c.train.eval_batches = 2
  c.train.final_eval_windows = 16
  c.train.checkpoint_every = 3
  c.train.log_every = 1
  c.train.progress = False
  c.export.sample_tokens = 8
  return c
