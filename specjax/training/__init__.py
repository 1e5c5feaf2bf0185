"""optax training of LMs (and, later, EAGLE heads) with orbax checkpoints.

Reusable pieces: :mod:`optim` (AdamW + warmup/cosine), :mod:`state`
(TrainState pytree), :mod:`checkpoint` (orbax manager holding the train
state + JSON data state + metrics); :mod:`lm` is the LM trainer built on them.
"""
