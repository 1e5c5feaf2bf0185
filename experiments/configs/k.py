"""Draft-length sweep, MARS vs lossless (``experiments/sweep_k.py``)."""

from experiments.configs.compare import get_config as _base


def get_config():
  c = _base()
  c.name = "sweep_k"
  c.ks = (1, 2, 4, 6, 8)
  c.rules = "lossless, mars:theta=0.9"
  c.temperatures = (1.0,)
  c.kl.enabled = False
  return c
