"""Default companion LM: Llama, 2 layers, hidden 192 (between draft and target)."""

from experiments.configs.lm_base import base_config


def get_config():
  c = base_config()
  c.name = "companion"
  c.model.update(hidden_size=192, intermediate_size=512, num_hidden_layers=2,
                 num_attention_heads=6, num_key_value_heads=2, head_dim=32)
  c.data.batch_size = 8
  c.optim.learning_rate = 3e-3
  c.train.num_steps = 480
  return c
