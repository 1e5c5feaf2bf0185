"""EAGLE-3 head for the default target (a CPU budget of ~12 minutes): fused
layers (1, 2, 3) of the 4-layer target, training-time test over 4 steps,
2048-token draft vocabulary (93% of the train tokens), MLP 384 -- 1.34M
params, 2.7 MB in bf16."""

from experiments.configs.eagle_base import eagle_base


def get_config():
  c = eagle_base("eagle3")
  c.head.draft_vocab_size = 2048
  c.head.intermediate_size = 384
  c.train.num_steps = 400
  c.train.time_budget_s = 840.0
  c.train.ttt_steps = 4
  return c
