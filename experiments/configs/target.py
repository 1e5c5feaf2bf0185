"""Default target LM: Llama, 4 layers, hidden 256."""

from experiments.configs.lm_base import base_config


def get_config():
  c = base_config()
  c.name = "target"
  c.model.update(hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                 num_attention_heads=8, num_key_value_heads=4, head_dim=32)
  c.data.batch_size = 8
  c.optim.learning_rate = 2e-3
  c.optim.warmup_steps = 40
  c.train.num_steps = 800
  return c
