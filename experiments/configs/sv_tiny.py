"""SV calibration smoke test on random tiny models (seconds on a CPU)."""

from experiments.configs.sv import get_config as _base


def get_config():
  c = _base()
  c.name = "sv_tiny"
  c.models = "tiny"
  c.num_draft = 4
  c.data.num_prompts = 8
  c.data.prompt_len = 8
  c.data.max_new_tokens = 24
  c.data.batch_size = 8
  c.table.fixed_bins = 3
  c.table.quantile_bins = 3
  c.profile.batch_sizes = (1, 8)
  c.profile.repeats = 2
  return c
