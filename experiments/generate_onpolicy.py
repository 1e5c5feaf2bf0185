r"""Build (or extend) the on-policy feature store: the target answers ShareGPT
training prompts itself, and the store records its features during generation.

    python -m experiments.generate_onpolicy --max_tokens=4000000     # resumable

Every user turn of the ShareGPT ``train`` split (:mod:`specjax.data.sharegpt`,
the same sha256 id split as ``extract_features``), with the conversation so far
as context, is answered by the target (:mod:`specjax.training.onpolicy`); shard
``i`` samples at ``--temperatures[i % n]`` (0 = greedy). ``--max_tokens``
bounds the *generated* tokens (loss mask 1). Kill it at any time: a rerun with
the same flags continues after the last whole shard. The store lives outside
the repo (default ``~/.cache/specjax/features/onpolicy-<model>-<sha12>``); the
answers of every shard are also kept in ``data/onpolicy/<model>-<sha12>/``
(:mod:`specjax.training.transcripts`, ~2 bytes per token, committed), so on a
machine without the store this command rebuilds the transcribed shards by a
forward pass (no sampling) and generates only the rest.
"""

from __future__ import annotations

import os

from absl import app, flags

FLAGS = flags.FLAGS
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def define_flags():
  flags.DEFINE_string("model", "smollm2-135m-instruct", "target: registered name or .gguf / HF dir")
  flags.DEFINE_string("out_dir", "", "store directory (default ~/.cache/specjax/features/"
                      "onpolicy-<model>-<sha12>)")
  flags.DEFINE_string("transcripts_dir", "", "where each shard's answers are kept, small "
                      "enough to commit (default data/onpolicy/<model>-<sha12> in this "
                      "repository; 'none' keeps none): transcribed shards are rebuilt by a "
                      "forward pass instead of generated again")
  flags.DEFINE_integer("max_tokens", 4_000_000, "stop once the store holds this many "
                       "generated tokens")
  flags.DEFINE_list("temperatures", ["0", "0.7", "1"], "sampling temperature of shard i is "
                    "temperatures[i % n] (0 = greedy)")
  flags.DEFINE_integer("max_new_tokens", 512, "longest answer")
  flags.DEFINE_integer("max_context", 512, "user turns with a longer templated context are "
                       "skipped")
  flags.DEFINE_integer("batch_size", 16, "rows generated together")
  flags.DEFINE_integer("seqs_per_shard", 32, "user turns per shard (resume granularity)")
  flags.DEFINE_integer("top_k", 64, "stored next-token candidates per position")
  flags.DEFINE_list("hidden_layers", [], "layer inputs to store; default (2, L//2, L-3, L) as "
                    "extract_features")
  flags.DEFINE_float("heldout_fraction", 0.05, "ShareGPT held-out fraction (never used)")
  flags.DEFINE_integer("seed", 0, "base PRNG seed")


def check_flags():
  for name in ("max_tokens", "max_new_tokens", "max_context", "batch_size", "seqs_per_shard",
               "top_k"):
    if getattr(FLAGS, name) < 1:
      raise app.UsageError(f"--{name}={getattr(FLAGS, name)} must be >= 1")
  try:
    temps = tuple(float(t) for t in FLAGS.temperatures)
    layers = tuple(int(x) for x in FLAGS.hidden_layers)
  except ValueError:
    raise app.UsageError(f"--temperatures={FLAGS.temperatures} must be numbers and "
                         f"--hidden_layers={FLAGS.hidden_layers} integers") from None
  if not temps or any(t < 0 for t in temps):
    raise app.UsageError(f"--temperatures={FLAGS.temperatures} must be numbers >= 0")
  if not 0 < FLAGS.heldout_fraction < 1:
    raise app.UsageError(f"--heldout_fraction={FLAGS.heldout_fraction} must be in (0, 1)")
  for name in ("out_dir", "transcripts_dir"):
    if getattr(FLAGS, name) and os.path.isfile(getattr(FLAGS, name)):
      raise app.UsageError(f"--{name}={getattr(FLAGS, name)!r} is a file")
  return temps, layers


def main():
  temps, layers = check_flags()
  from experiments.extract_features import default_layers
  from specjax.data import sharegpt
  from specjax.models import registry
  from specjax.training import features, onpolicy

  lm = registry.load_model(FLAGS.model)
  n_layers = lm.config.num_hidden_layers
  layers = layers or default_layers(n_layers)
  if any(not 0 <= l <= n_layers for l in layers) or n_layers not in layers:
    raise app.UsageError(f"--hidden_layers={list(layers)} must lie in [0, {n_layers}] and "
                         f"include {n_layers} (the final feature)")
  lm = registry.load_model(FLAGS.model, hidden_layers=layers)
  out_dir = FLAGS.out_dir or os.path.join(registry.cache_root(), "features",
                                          f"onpolicy-{lm.name}-{lm.sha256[:12]}")
  transcripts_dir = FLAGS.transcripts_dir or os.path.join(
      REPO_ROOT, "data", "onpolicy", f"{lm.name}-{lm.sha256[:12]}")
  if transcripts_dir == "none":
    transcripts_dir = None
  mix = onpolicy.GenerationMix(temperatures=temps, max_new_tokens=FLAGS.max_new_tokens,
                               max_context=FLAGS.max_context, batch_size=FLAGS.batch_size,
                               seed=FLAGS.seed)
  cfg = features.FeatureStoreConfig(hidden_layers=layers, top_k=FLAGS.top_k,
                                    seqs_per_shard=FLAGS.seqs_per_shard,
                                    max_len=FLAGS.max_context + FLAGS.max_new_tokens)
  convs = sharegpt.iter_conversations(split="train", heldout_fraction=FLAGS.heldout_fraction)
  prompts = onpolicy.user_turn_prompts(convs, lm.encode_chat, FLAGS.max_context)
  source = (f"sharegpt train split (heldout_fraction={FLAGS.heldout_fraction}), every user turn "
            f"with the conversation so far, answered by the target")
  m = onpolicy.build_onpolicy_store(out_dir, lm.model, lm.params, prompts, config=cfg, mix=mix,
                                    target_sha256=lm.sha256, target_name=lm.name,
                                    eos_token_id=lm.config.eos_token_id,
                                    max_loss_tokens=FLAGS.max_tokens, source=source,
                                    transcripts_dir=transcripts_dir)
  rate = m["num_loss_tokens"] / max(m.get("seconds", 0.0), 1e-9)
  print(f"{out_dir}: {m['num_loss_tokens']} generated tokens ({m['num_tokens']} stored) in "
        f"{m['num_sequences']} turns, {len(m['shards'])} shards ({rate:.0f} generated tokens/s "
        f"over all sessions)")


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(main, define_flags=define_flags)
