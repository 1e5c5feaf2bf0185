"""MARS theta sweep (``experiments/sweep_theta.py``): the paper's grid 0.84..0.96."""

from experiments.configs.compare import get_config as _base


def get_config():
  c = _base()
  c.name = "sweep_theta"
  c.thetas = (0.84, 0.88, 0.9, 0.92, 0.96)
  c.mars_hparams = {}  # extra Mars fields, e.g. {"guard": False}
  c.drafters = ("chain",)
  c.temperatures = (1.0,)
  c.kl.enabled = False  # --config.kl.enabled=True adds the first-token KL (one compile per row)
  return c
