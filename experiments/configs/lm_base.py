"""Shared base of the LM training configs (``experiments/train_lm.py``).

Every shipped default model uses the same data section, hence one tokenizer
(``data.tokenizer_path``, trained on first use from the train split).
"""

import ml_collections


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.name = "lm"
  c.workdir = ""  # default /tmp/specjax_runs/<name>

  c.data = ml_collections.ConfigDict()
  c.data.root = ""  # "" = the running interpreter's stdlib (specjax.data.corpus)
  c.data.heldout_fraction = 0.05
  c.data.split_seed = 0
  c.data.vocab_size = 4096
  c.data.tokenizer_path = "/tmp/specjax_data/bpe4096/tokenizer.json"  # trained if missing
  c.data.cache_dir = "/tmp/specjax_data/bpe4096"  # tokenized streams (.npy)
  c.data.seq_len = 256
  c.data.batch_size = 8
  c.data.seed = 0

  c.model = ml_collections.ConfigDict()
  c.model.model_type = "llama"
  c.model.hidden_size = 128
  c.model.intermediate_size = 384
  c.model.num_hidden_layers = 1
  c.model.num_attention_heads = 4
  c.model.num_key_value_heads = 2
  c.model.head_dim = 32
  c.model.rope_theta = 10000.0
  c.model.rms_norm_eps = 1e-6
  c.model.tie_word_embeddings = True
  c.model.max_position_embeddings = 1024

  c.optim = ml_collections.ConfigDict()
  c.optim.learning_rate = 3e-3
  c.optim.warmup_steps = 50
  c.optim.min_lr_ratio = 0.1
  c.optim.weight_decay = 0.1
  c.optim.b1 = 0.9
  c.optim.b2 = 0.95
  c.optim.grad_clip = 1.0

  c.train = ml_collections.ConfigDict()
  c.train.num_steps = 400
  c.train.precision = "float32"  # or "bfloat16" (activations; master params fp32)
  c.train.init_seed = 0
  c.train.eval_every = 200
  c.train.eval_batches = 16
  c.train.final_eval_windows = 512  # first 512 held-out windows (131072 tokens)
  c.train.checkpoint_every = 100
  c.train.log_every = 25
  c.train.progress = True
  c.train.stop_after = 0  # >0: checkpoint and stop at this step (a planned "kill")

  c.export = ml_collections.ConfigDict()
  c.export.dir = ""  # "" = <workdir>/hf
  c.export.dtype = "float32"
  c.export.samples = ("def ", "import os\n", "class ")
  c.export.sample_tokens = 64
  return c
