"""Draft-length sweep, MARS vs lossless (``experiments/sweep_k.py``).

``...k.py:smollm2``: SmolLM2-135M-Instruct, lossless and MARS (theta 0.9) on the
EAGLE-3 chain, K in {1, 2, 3, 4, 6, 8}, T in {0, 1} (the comparison's smollm2
settings, :func:`experiments.configs.compare.smollm2`); figure
``docs/figures/sweep_k_smollm2.png``;
26 rows (a compile per K); at 12 prompts x 64 tokens (the committed record's command
in benchmarks/RESULTS.md) 41 min on the 2-core machine alone.
"""

from experiments.configs.compare import get_config as _base
from experiments.configs.compare import smollm2


def get_config(variant: str = ""):
  c = _base()
  c.name = "sweep_k"
  c.ks = (1, 2, 4, 6, 8)
  c.rules = "lossless, mars:theta=0.9"
  c.drafters = ("chain",)  # chain drafters only: "chain" (draft LM), "eagle_chain"
  c.temperatures = (1.0,)
  c.kl.enabled = False
  if variant == "smollm2":
    smollm2(c)
    c.name = "sweep_k_smollm2"
    c.ks = (1, 2, 3, 4, 6, 8)
    c.drafters = ("eagle_chain",)
    c.temperatures = (0.0, 1.0)
  elif variant:
    raise ValueError(f"unknown config variant {variant!r}; use '' or 'smollm2'")
  return c
