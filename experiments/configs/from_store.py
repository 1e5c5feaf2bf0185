"""Training from a feature store (``experiments/train_from_store.py``):
``--config=experiments/configs/from_store.py:eagle3`` (or ``:eagle1``, ``:draft``).

Defaults are for SmolLM2-135M-Instruct and its store of ShareGPT features
(``experiments/extract_features.py``): windows of 512 tokens, batches of 8, the
published head shapes (one target-shaped decoder layer), EAGLE-3 over an 8k
draft vocabulary with 7 training-time-test steps, a 1-layer draft LM initialised
from the target (its embedding shared with the target, not trained).

Measured on the 2-core CPU while the feature extraction ran (window 512, batch
8, niced): EAGLE-3 ~51 s/step (16k vocabulary, 12 GB peak RSS), EAGLE-1 ~6.1
s/step (5.3 GB), draft LM ~5.0 s/step (4.9 GB).
"""

import ml_collections

KINDS = ("eagle1", "eagle3", "draft")


def get_config(kind="eagle3"):
  kind = kind or "eagle3"
  if kind not in KINDS:
    raise ValueError(f"config kind {kind!r}; choose one of {KINDS}")
  c = ml_collections.ConfigDict()
  c.kind = kind
  c.name = f"{kind}_from_store"
  c.workdir = ""  # "" = /tmp/specjax_runs/<name>
  c.target = "smollm2-135m-instruct"  # registry name, .gguf or HF directory
  # "" = <cache>/features/<target name>-<sha256[:12]>; several directories separated by
  # commas train on their mixture (experiments/drafter_data.py compares such runs)
  c.store = ""

  c.data = ml_collections.ConfigDict()
  c.data.window = 512
  c.data.batch_size = 8
  c.data.top_k = 0  # 0 = all stored candidates
  c.data.eval_permille = 20
  c.data.num_shards = 0  # 0 = all shards now (a resumed run reuses its recorded count)
  # > 0: train on the stream-order windows holding this many target tokens (split evenly
  # over the stores of a mixture); 0 = all
  c.data.max_target_tokens = 0
  c.data.seed = 0

  c.head = ml_collections.ConfigDict()
  c.head.intermediate_size = 0  # 0 = the target's
  # EAGLE-3 draft vocabulary (0 = full). 8192: its LM head is ~2/3 of a step's FLOPs at
  # 16384; on the first 4 shards of the SmolLM2 store the 4096 / 8192 most frequent argmax
  # ids cover 96.2% / 100% of target positions (training.json records it per run).
  c.head.draft_vocab_size = 8192 if kind == "eagle3" else 0
  c.head.coverage_sizes = (4096, 8192, 16384)
  c.head.target_layers = ()  # () = (L,) for EAGLE-1, (2, L//2, L-3) for EAGLE-3
  # an exported head directory to continue training from (its config and draft vocabulary
  # must be this run's); "" = random initialisation
  c.head.init_from = ""

  c.draft = ml_collections.ConfigDict()
  # One layer: the draft ships without its embedding (the target's, frozen), 7.1 MB per
  # SmolLM2 layer in bfloat16 against the 60 MB asset budget (the EAGLE-3 head takes 20 MB).
  c.draft.num_layers = 1
  c.draft.train_embedding = False
  c.draft.copy_layers = True  # False: random decoder layers (embedding and norm still copied)
  c.draft.init_layers = ()  # () = spread evenly over the target (first and last included)
  c.draft.precision = "float32"
  # a draft LM in the shipped form (a run's asset/ or the shipped draft) to continue
  # training from (its config must be this run's); "" = initialise from the target
  c.draft.init_from = ""

  c.optim = ml_collections.ConfigDict()
  c.optim.learning_rate = 1e-3 if kind == "draft" else 3e-4
  c.optim.warmup_steps = 100
  c.optim.min_lr_ratio = 0.1
  c.optim.weight_decay = 0.0
  c.optim.b1 = 0.9
  c.optim.b2 = 0.95
  c.optim.grad_clip = 0.5

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 4000
  c.train.time_budget_s = 0.0  # > 0: stop (and checkpoint) after this much wall time
  c.train.init_seed = 0
  c.train.reg_weight = 1.0  # EAGLE-1
  c.train.ce_weight = 0.1  # EAGLE-1
  c.train.feature_noise = 0.0  # EAGLE-1 uniform input-feature noise half-width
  c.train.ttt_steps = 7  # EAGLE-3
  c.train.decay = 0.8  # EAGLE-3
  c.train.eval_every = 250
  c.train.eval_batches = 8
  c.train.checkpoint_every = 100
  c.train.log_every = 25
  c.train.progress = True
  c.train.export_only = False  # True: export the latest checkpoint without training

  c.export = ml_collections.ConfigDict()
  c.export.dir = ""  # "" = <workdir>/head (heads) or <workdir>/hf (draft LM)
  c.export.dtype = "bfloat16"
  return c
