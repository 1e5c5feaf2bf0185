"""Temperature sweep (``experiments/sweep_temperature.py``)."""

from experiments.configs.compare import get_config as _base


def get_config():
  c = _base()
  c.name = "sweep_temperature"
  c.sweep_temperatures = (0.0, 0.5, 0.7, 1.0)
  c.rules = "lossless, mars:theta=0.9"
  c.drafters = ("chain",)
  c.kl.enabled = False
  return c
