"""Default draft LM: Llama, 1 layer, hidden 128 (an independent drafter)."""

from experiments.configs.lm_base import base_config


def get_config():
  c = base_config()
  c.name = "draft"
  c.model.update(hidden_size=128, intermediate_size=384, num_hidden_layers=1,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32)
  c.data.batch_size = 16
  c.optim.learning_rate = 3e-3
  c.train.num_steps = 400
  return c
