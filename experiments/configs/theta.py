"""MARS theta sweep (``experiments/sweep_theta.py``): the paper's grid 0.84..0.96.

``...theta.py:smollm2``: SmolLM2-135M-Instruct, MARS on the EAGLE-3 chain and the
24-node EAGLE-2 dynamic tree, theta in {0.8, 0.85, 0.9, 0.95, 0.98}, T in {0, 1}
(the comparison's smollm2 settings, :func:`experiments.configs.compare.smollm2`);
figure ``docs/figures/sweep_theta_smollm2.png``;
26 rows, 10.8 min on the 2-core machine alone
(MARS compiles once per drafter and T: theta is traced).
"""

from experiments.configs.compare import get_config as _base
from experiments.configs.compare import smollm2


def get_config(variant: str = ""):
  c = _base()
  c.name = "sweep_theta"
  c.thetas = (0.84, 0.88, 0.9, 0.92, 0.96)
  c.mars_hparams = {}  # extra Mars fields, e.g. {"guard": False}
  c.drafters = ("chain",)
  c.temperatures = (1.0,)
  c.kl.enabled = False  # --config.kl.enabled=True adds the first-token KL (one compile per row)
  if variant == "smollm2":
    smollm2(c)
    c.name = "sweep_theta_smollm2"
    c.thetas = (0.8, 0.85, 0.9, 0.95, 0.98)
    c.drafters = ("eagle_chain", "eagle_tree")
    c.temperatures = (0.0, 1.0)
  elif variant:
    raise ValueError(f"unknown config variant {variant!r}; use '' or 'smollm2'")
  return c
