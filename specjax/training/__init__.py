"""optax training of LMs, EAGLE heads and draft LMs with orbax checkpoints.

Reusable pieces: :mod:`optim` (AdamW + warmup/cosine), :mod:`state`
(TrainState pytree), :mod:`checkpoint` (orbax manager holding the train
state + JSON data state + metrics), :mod:`loop` (THE training loop: jitted
donated step, progress, checkpoint / exact resume, eval cadence, time budget,
training.json); :mod:`lm` is the LM trainer and :mod:`eagle` the EAGLE trainer
that runs the target in the step, both on :mod:`loop`.

From a feature store (:mod:`features`, built once per target): :mod:`store_batching`
(windows, target mask, held-out split), :mod:`target_dist` (dense / top-k target
distribution), :mod:`store_losses` (EAGLE-1/3 losses on stored features),
:mod:`distill` (the draft LM), :mod:`draft_vocab` (EAGLE-3 draft vocabulary and its
coverage) and :mod:`store_trainer` (the trainer for all three, on :mod:`loop`).
"""
