"""Speculative Verification calibration (``experiments/calibrate_sv.py``).

Default: the embedded (target, draft, companion) models, sampling at T = 1,
lossless verification, K = 7; calibration prompts are windows of the first
half of the held-out token stream (evaluate SV on the second half:
``data.calib_fraction``).  ``--config.models=tiny`` runs the whole pipeline on
random tiny models in seconds (smoke test).
"""

import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.name = "sv_calibration"
  c.workdir = ""  # default /tmp/specjax_runs/<name>
  c.models = "default"  # "default" (specjax.models.defaults) | "tiny" (random, smoke test)
  #   | a real model, e.g. "smollm2-135m-instruct" (then drafter / companion below apply)
  c.drafter = "draft"  # real target: "draft" (shipped draft LM) | "eagle3" (shipped head)
  c.companion = "early_exit:8"  # real target: the target's first N layers + its norm and head
  #   | "lm:draft" (the shipped draft LM; with drafter "eagle3") | "lm:DIR" (a trained LM)
  c.seed = 0

  c.num_draft = 7  # K
  c.temperature = 1.0  # target and drafter
  c.draft_temperature = -1.0  # < 0: same as temperature
  c.companion_temperature = 1.0
  c.verifier = "lossless"
  c.verifier_hparams = ml_collections.ConfigDict()  # e.g. {"theta": 0.9} for mars

  c.data = ml_collections.ConfigDict()
  c.data.root = ""  # "" = the interpreter's stdlib (as the default models were trained)
  c.data.heldout_fraction = 0.05
  c.data.split_seed = 0
  c.data.tokenizer_path = ""  # "" = the default models' tokenizer (default_tokenizer())
  c.data.cache_dir = "/tmp/specjax_data/bpe4096"
  c.data.calib_fraction = 0.5  # prompts come from this leading part of the held-out stream
  c.data.num_prompts = 256
  c.data.prompt_len = 48
  c.data.max_new_tokens = 96
  c.data.batch_size = 16
  c.data.fit_fraction = 0.8  # rows used to fit; the rest give a held-out log loss
  c.data.prompt_sets = ("sharegpt", "humaneval")  # real target: chat prompts (prompt_len = max)

  c.table = ml_collections.ConfigDict()
  c.table.fixed_bins = 5  # per axis (the SV paper's Table 1 uses 5 x 5)
  c.table.quantile_bins = 8  # per axis, adaptive
  c.table.alpha = 1.0  # Laplace
  c.table.prior = 0.5  # or "marginal"

  c.profile = ml_collections.ConfigDict()
  c.profile.enabled = True
  c.profile.batch_sizes = (1, 4, 16, 64)
  c.profile.cache_length = 0  # 0 = prompt_len + max_new_tokens + 2 (K + 1)
  c.profile.repeats = 5
  return c
