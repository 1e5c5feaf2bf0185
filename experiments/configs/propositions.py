"""Config of ``experiments/lossy_propositions.py`` (docs/spec.md §6).

``--config=experiments/configs/propositions.py`` runs in a few minutes on 2
CPU cores with the default models; ``...propositions.py:tiny`` is the smoke
test (random tiny models, seconds); ``...propositions.py:big`` is for an
accelerator (more contexts, exact sampled enumeration on all of them).

``...propositions.py:smollm2`` -- the real model:
SmolLM2-135M-Instruct (registry) as target and its shipped distilled draft LM,
teacher-forced on held-out ShareGPT conversations in the chat template,
assistant positions only (:mod:`experiments.common.contexts`), both at T = 0.7 (the
temperature of "Revisiting Lossy Verification"); gamma = 10 (its plain-SD
setting).  Figures go straight to ``docs/figures/lossy_*_smollm2.png``
(``figures_dir`` / ``figure_prefix`` / ``figure_suffix``); records and
``tables.md`` to ``output_dir``.

  The V^2 question (V = 49,152).  What costs V^2 per context is the exact
  sum over a *sampled* draft x ~ q of the correction after rejecting x:
  part (a) ``sd`` (every rule x q_ref family x t) and part (d) ``mars`` with
  sampled drafts.  Everything else is O(k V) or O(V): EAGLE top-k drafts (b),
  truncation and alignment (c), greedy-draft MARS and the margin statistics.
  Choice: ``sampled_form = "closed"`` -- the same sum in O(V), exact (not a
  subsample, not an approximation), valid because for every rule used here
  (lossless, MARS over lossless, SpecCascade, typical acceptance hard and soft)
  the correction after a rejection does not depend on the rejected token
  (:func:`specjax.analysis.induced.rejection_invariant`; checked against the
  V^2 enumeration in tests/analysis/test_sampled_closed_form.py).  A rule outside that
  set raises instead of silently costing 2.4e9 operations per context.  So the
  sampled parts use all contexts (``real.sd_contexts = real.num_positions``).

  Size: 1,500 assistant positions from the first 48 held-out conversations
  (<= 512 tokens each).  Measured on the ``smollm2_smoke`` variant (256
  positions, 8 conversations; 2 shared CPU cores): 223 CPU-seconds in all
  (building contexts 46 s wall; per part, wall at ~37% of the machine: sd 132 s,
  eagle 227 s, mars 39 s, truncation 5 s, alignment 9 s, margins 140 s before
  its top-2 search became O(V)); the analysis scales linearly in the positions,
  so this size is ~15-20 minutes on the machine alone (every run's ``tables.md``
  has the per-part wall and CPU seconds).  Peak memory ~3 GB (a [1500, 49152]
  float32 array is 0.29 GB; the context set holds four).
"""

import os

import ml_collections

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _synthetic() -> ml_collections.ConfigDict:
  """The synthetic context families."""
  s = ml_collections.ConfigDict()
  s.num_contexts = 256
  s.vocab = 64
  s.concentration = 0.3  # p ~ Dirichlet(concentration 1_V) for (a)-(c)
  s.draft_noise = 1.0  # q = softmax(log p + noise N(0, 1)) for (c), (d)
  s.logit_shift = 5.0  # MARS / margins: z = shift + scale N(0, 1) (LM-like offset)
  s.logit_scale = 2.0
  return s


def _real() -> ml_collections.ConfigDict:
  """The real contexts (:mod:`experiments.common.contexts`)."""
  r = ml_collections.ConfigDict()
  r.num_positions = 1000
  r.num_windows = None  # windows (conversations) read; None: num_positions / 8
  r.seq_len = 128
  r.min_position = 8
  r.temperature = 1.0
  r.draft_temperature = 1.0
  r.batch_size = 8
  # Sampled-draft enumerations cost V^2 per context: they use the first
  # ``sd_contexts`` positions (a uniform subsample); deterministic drafts use all.
  r.sd_contexts = 64
  r.cache_dir = "/tmp/specjax_data/bpe4096"
  return r


def _base() -> ml_collections.ConfigDict:
  """The default variant: the embedded models, a few minutes on 2 CPU cores."""
  c = ml_collections.ConfigDict()
  c.name = "lossy_propositions"
  # "default" (specjax.models.defaults), "tiny" (random tiny models, random text),
  # "none" (synthetic families only) or a directory with target/ and draft/ checkpoints.
  c.models = "default"
  c.output_dir = "/tmp/specjax_runs/lossy_propositions"
  c.seed = 0
  # Which parts to run: sd (a), eagle (b), truncation and alignment (c), mars (d), margins.
  c.parts = ("sd", "eagle", "truncation", "alignment", "mars", "margins")
  c.sources = ("synthetic", "real")
  c.figures = True
  # Figures go to <figures_dir or output_dir>/<figure_prefix><name><figure_suffix>.png.
  c.figures_dir = ""
  c.figure_prefix = ""
  c.figure_suffix = ""
  c.progress = True  # tqdm bar of the sweep runner
  # Sampled-draft sums (parts sd, mars): "enumerate" (V^2 per context, any rule) or
  # "closed" (the same sum in O(V), rules of specjax.analysis.induced.rejection_invariant).
  c.sampled_form = "enumerate"

  # Truncation rules for (a)/(b): "registry_name:key=value,key=value".
  c.rules = ("spec_cascade:p_base=0.3", "typical:eps=0.09", "typical:eps=0.09,gate=soft")
  # q_t = (1 - t) p + t q_ref; t = 0 is a perfect drafter.
  c.ts = (1.0, 0.8, 0.6, 0.4, 0.2, 0.1, 0.05, 0.02, 0.0)
  c.eagle_top_k = (1, 4)

  # (c) truncation sweeps (docs/spec.md §7: p_base in {0.1..0.9}, eta in {0.05..0.25}).
  c.p_base_values = (0.1, 0.3, 0.5, 0.7, 0.9)
  c.eta_values = (0.05, 0.1, 0.15, 0.2, 0.25)
  c.gamma = 5
  # Alignment ratios of the Lemma 1 sweep: q_rho = rho p + (1 - rho) q (rho = 1: q = p).
  c.rhos = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0)

  # (d) MARS.
  c.thetas = (0.5, 0.7, 0.8, 0.85, 0.9, 0.92, 0.95, 0.98)
  c.mars_drafts = ("sampled", "top1")
  c.theta = 0.9  # headline threshold of the margin statistics

  c.synthetic = _synthetic()
  c.real = _real()
  c.chunk_size = 64
  c.context_batch = 32  # contexts per lax.map step in the enumerations (memory)
  return c


def _tiny(c) -> None:
  """Smoke test: random tiny models, seconds."""
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


def _big(c) -> None:
  """For an accelerator: more contexts, exact sampled enumeration on all of them."""
  c.output_dir = "/tmp/specjax_runs/lossy_propositions_big"
  c.real.num_positions = 4000
  c.real.sd_contexts = 4000
  c.real.batch_size = 32
  c.synthetic.num_contexts = 2048
  c.synthetic.vocab = 256
  c.context_batch = 256


def _smollm2(c, smoke: bool = False) -> None:
  """SmolLM2-135M-Instruct and its shipped draft LM (module docstring)."""
  c.models = "smollm2-135m-instruct"
  c.output_dir = "/tmp/specjax_runs/lossy_propositions_smollm2"
  c.sources = ("real",)
  c.figures_dir = os.path.join(_REPO, "docs", "figures")
  c.figure_prefix = "lossy_"
  c.figure_suffix = "_smollm2"
  c.sampled_form = "closed"
  c.gamma = 10
  c.eagle_top_k = (1, 4)
  c.rhos = (0.0, 0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.85, 0.9, 0.95, 1.0)
  c.real.temperature = 0.7
  c.real.draft_temperature = 0.7
  c.real.num_positions = 1500
  c.real.num_windows = 48
  c.real.sd_contexts = 1500
  c.real.seq_len = 512
  c.real.min_position = 0  # only assistant positions are sampled anyway
  c.real.batch_size = 4
  c.context_batch = 64
  if smoke:  # the same code paths at 1/8 size, figures not in docs/
    c.output_dir = "/tmp/specjax_runs/lossy_propositions_smollm2_smoke"
    c.figures_dir = ""
    c.real.num_positions = 256
    c.real.num_windows = 8
    c.real.sd_contexts = 256


VARIANTS = {"tiny": _tiny, "big": _big, "smollm2": _smollm2,
            "smollm2_smoke": lambda c: _smollm2(c, smoke=True)}


def get_config(variant: str = ""):
  if variant and variant not in VARIANTS:
    raise ValueError(f"unknown config variant {variant!r}; use '', 'tiny', 'big', 'smollm2' or "
                     "'smollm2_smoke'")
  c = _base()
  if variant:
    VARIANTS[variant](c)
  return c
