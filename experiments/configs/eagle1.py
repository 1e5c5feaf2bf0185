"""EAGLE-1 head for the default target (a CPU budget of ~12 minutes).

Head = one target-shaped layer (hidden 256, MLP 768): 0.92M params, 1.8 MB in bf16.
"""

from experiments.configs.eagle_base import eagle_base


def get_config():
  c = eagle_base("eagle1")
  c.train.num_steps = 1200
  c.train.time_budget_s = 840.0
  c.train.feature_noise = 0.1
  c.optim.warmup_steps = 50
  return c
