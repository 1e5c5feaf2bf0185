r"""Build (or extend) the target feature store over ShareGPT training conversations.

    python -m experiments.extract_features --max_tokens=1000000     # resumable
    python -m experiments.extract_features --max_tokens=2000000     # extends the same store

The ShareGPT ``train`` split (:mod:`specjax.data.sharegpt`, sha256 id split) in
file order, through the target's chat template and tokenizer with the assistant
loss mask (:mod:`specjax.data.chat_tokenize`), cut to ``--max_len`` tokens, runs
through the target; :mod:`specjax.training.features` stores the hidden states at
``--hidden_layers`` and the top-k next-token log-probs. Kill it at any time: a
rerun with the same flags continues after the last whole shard. The store lives
outside the repo (default ``~/.cache/specjax/features/<model>-<sha12>``); this
command rebuilds it from scratch when it is gone.
"""

from __future__ import annotations

import os

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("model", "smollm2-135m-instruct", "target: registered name or .gguf / HF dir")
  flags.DEFINE_string("out_dir", "", "store directory (default ~/.cache/specjax/features/"
                      "<model>-<sha12>)")
  flags.DEFINE_integer("max_tokens", 1_000_000, "stop once the store holds this many tokens")
  flags.DEFINE_integer("max_len", 1024, "tokens per conversation (longer ones are cut)")
  flags.DEFINE_integer("top_k", 64, "stored next-token candidates per position")
  flags.DEFINE_integer("seqs_per_shard", 32, "conversations per shard (resume granularity)")
  flags.DEFINE_list("hidden_layers", [], "layer inputs to store; default (2, L//2, L-3, L): "
                    "EAGLE-3's low/mid/high fusion inputs and the final feature (EAGLE-1)")
  flags.DEFINE_float("heldout_fraction", 0.05, "ShareGPT held-out fraction (never stored)")


def default_layers(num_layers: int) -> tuple:
  return (2, num_layers // 2, num_layers - 3, num_layers)


def check_flags():
  for name in ("max_tokens", "max_len", "top_k", "seqs_per_shard"):
    if getattr(FLAGS, name) < 1:
      raise app.UsageError(f"--{name}={getattr(FLAGS, name)} must be >= 1")
  try:
    layers = tuple(int(x) for x in FLAGS.hidden_layers)
  except ValueError:
    raise app.UsageError(f"--hidden_layers={FLAGS.hidden_layers} must be integers") from None
  if not 0 < FLAGS.heldout_fraction < 1:
    raise app.UsageError(f"--heldout_fraction={FLAGS.heldout_fraction} must be in (0, 1)")
  if FLAGS.out_dir and os.path.isfile(FLAGS.out_dir):
    raise app.UsageError(f"--out_dir={FLAGS.out_dir!r} is a file")
  return layers


def main():
  layers = check_flags()
  from specjax.data import chat_tokenize, sharegpt
  from specjax.models import registry
  from specjax.training import features

  lm = registry.load_model(FLAGS.model)
  n_layers = lm.config.num_hidden_layers
  layers = layers or default_layers(n_layers)
  if any(not 0 <= l <= n_layers for l in layers):
    raise app.UsageError(f"--hidden_layers={list(layers)} must lie in [0, {n_layers}]")
  lm = registry.load_model(FLAGS.model, hidden_layers=layers)
  out_dir = FLAGS.out_dir or os.path.join(registry.cache_root(), "features",
                                          f"{lm.name}-{lm.sha256[:12]}")
  cfg = features.FeatureStoreConfig(hidden_layers=layers, top_k=FLAGS.top_k,
                                    seqs_per_shard=FLAGS.seqs_per_shard, max_len=FLAGS.max_len)
  convs = sharegpt.iter_conversations(split="train", heldout_fraction=FLAGS.heldout_fraction)
  seqs = chat_tokenize.tokenize_conversations(convs, lm.tokenizer, lm.chat_template,
                                              max_len=FLAGS.max_len)
  source = (f"sharegpt train split (heldout_fraction={FLAGS.heldout_fraction}), chat template, "
            f"max_len={FLAGS.max_len}")
  m = features.build_feature_store(out_dir, lm.model, lm.params, seqs, config=cfg,
                                   target_sha256=lm.sha256, target_name=lm.name,
                                   max_tokens=FLAGS.max_tokens, source=source)
  rate = m["num_tokens"] / max(m.get("seconds", 0.0), 1e-9)
  print(f"{out_dir}: {m['num_tokens']} tokens in {m['num_sequences']} sequences, "
        f"{len(m['shards'])} shards ({rate:.0f} tokens/s over all sessions)")


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(main, define_flags=define_flags)
