"""Config of ``experiments/lossy_propositions.py`` (SPEC §6, issue 7).

``--config=experiments/configs/propositions.py`` runs in a few minutes on 2
CPU cores with the default models; ``...propositions.py:tiny`` is the smoke
test (random tiny models, seconds); ``...propositions.py:big`` is for an
accelerator (more contexts, exact sampled enumeration on all of them).
"""

import ml_collections


def get_config(variant: str = ""):
  c = ml_collections.ConfigDict()
  c.name = "lossy_propositions"
  # "default" (specjax.models.defaults), "tiny" (random tiny models, random text),
  # "none" (synthetic families only) or a directory with target/ and draft/ checkpoints.
  c.models = "default"
  c.output_dir = "/tmp/specjax_runs/lossy_propositions"
  c.seed = 0
  # Which parts to run: sd (a), eagle (b), truncation (c), mars (d), margins.
  c.parts = ("sd", "eagle", "truncation", "mars", "margins")
  c.sources = ("synthetic", "real")
  c.figures = True
  c.progress = True  # tqdm bar of the sweep runner

  # Truncation rules for (a)/(b): "registry_name:key=value,key=value".
  c.rules = ("spec_cascade:p_base=0.3", "typical:eps=0.09", "typical:eps=0.09,gate=soft")
  # q_t = (1 - t) p + t q_ref; t = 0 is a perfect drafter.
  c.ts = (1.0, 0.8, 0.6, 0.4, 0.2, 0.1, 0.05, 0.02, 0.0)
  c.eagle_top_k = (1, 4)

  # (c) truncation sweeps (REFERENCES.md: p_base in {0.1..0.9}, eta in {0.05..0.25}).
  c.p_base_values = (0.1, 0.3, 0.5, 0.7, 0.9)
  c.eta_values = (0.05, 0.1, 0.15, 0.2, 0.25)
  c.gamma = 5

  # (d) MARS.
  c.thetas = (0.5, 0.7, 0.8, 0.85, 0.9, 0.92, 0.95, 0.98)
  c.mars_drafts = ("sampled", "top1")
  c.theta = 0.9  # headline threshold of the margin statistics

  # Synthetic families.
  c.synthetic = ml_collections.ConfigDict()
  c.synthetic.num_contexts = 256
  c.synthetic.vocab = 64
  c.synthetic.concentration = 0.3  # p ~ Dirichlet(concentration 1_V) for (a)-(c)
  c.synthetic.draft_noise = 1.0  # q = softmax(log p + noise N(0, 1)) for (c), (d)
  c.synthetic.logit_shift = 5.0  # MARS / margins: z = shift + scale N(0, 1) (LM-like offset)
  c.synthetic.logit_scale = 2.0

  # Real contexts (experiments.contexts).
  c.real = ml_collections.ConfigDict()
  c.real.num_positions = 1000
  c.real.seq_len = 128
  c.real.min_position = 8
  c.real.temperature = 1.0
  c.real.draft_temperature = 1.0
  c.real.batch_size = 8
  # Sampled-draft enumerations cost V^2 per context: they use the first
  # ``sd_contexts`` positions (a uniform subsample); deterministic drafts use all.
  c.real.sd_contexts = 64
  c.real.cache_dir = "/tmp/specjax_data/bpe4096"

  c.chunk_size = 64
  c.context_batch = 32  # contexts per lax.map step in the enumerations (memory)

  if variant == "tiny":
    c.models = "tiny"
    c.progress = False
    c.output_dir = "/tmp/specjax_runs/lossy_propositions_tiny"
    c.rules = ("spec_cascade:p_base=0.3", "typical:eps=0.09")
    c.ts = (1.0, 0.5, 0.0)
    c.eagle_top_k = (1,)
    c.p_base_values = (0.1, 0.5)
    c.eta_values = (0.05, 0.2)
    c.thetas = (0.8, 0.9, 0.95)
    c.synthetic.num_contexts = 16
    c.synthetic.vocab = 16
    c.real.num_positions = 24
    c.real.seq_len = 16
    c.real.min_position = 2
    c.real.sd_contexts = 8
    c.real.batch_size = 4
    c.chunk_size = 16
    c.context_batch = None
  elif variant == "big":
    c.output_dir = "/tmp/specjax_runs/lossy_propositions_big"
    c.real.num_positions = 4000
    c.real.sd_contexts = 4000
    c.real.batch_size = 32
    c.synthetic.num_contexts = 2048
    c.synthetic.vocab = 256
    c.context_batch = 256
  elif variant:
    raise ValueError(f"unknown config variant {variant!r}; use '', 'tiny' or 'big'")
  return c
