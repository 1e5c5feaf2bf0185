r"""Train a small LM on a text corpus; export it in Hugging Face format.

  python -m experiments.train_lm --config=experiments/configs/target.py \
      [--config.workdir=/tmp/specjax_runs/target] [--config.train.num_steps=900]

Rerunning the same command resumes exactly from the latest checkpoint; a
larger ``--config.train.num_steps`` continues a finished run (the cosine
schedule is a function of the step, so it then follows the new horizon), and
``--config.train.stop_after=N`` checkpoints and stops at step N.  Resuming a
workdir with a changed model config stops with a ValueError naming the first
leaf whose shape differs; use a new ``--config.workdir`` or the original config.

Writes under the workdir: ``checkpoints/`` (orbax), ``hf/`` (config.json, model.safetensors,
tokenizer.json via ``hf.save_pretrained``) and ``metrics.json`` (losses,
held-out loss/perplexity, tokens/s, wall time, greedy samples).
"""

from __future__ import annotations

import json
import math
import os
import time

from absl import logging



def model_config_from(c, vocab_size: int, eos_id: int):
  from specjax.models.config import ModelConfig
  return ModelConfig(vocab_size=vocab_size, eos_token_id=eos_id, **dict(c.model))


def prepare_data(c):
  """``(tokenizer, train Batcher, held-out Batcher)`` for config ``c``."""
  from specjax.data import batching, corpus
  from specjax.data import tokenizer as tok_lib
  cc = corpus.CorpusConfig(root=c.data.root, heldout_fraction=c.data.heldout_fraction,
                           split_seed=c.data.split_seed)
  tok = tok_lib.load_or_train(
      c.data.tokenizer_path, lambda: (t for _, t in corpus.read_documents(cc, "train")),
      vocab_size=c.data.vocab_size)
  if tok.get_vocab_size() > c.data.vocab_size:  # BPE may stop early on a tiny corpus
    raise ValueError(f"tokenizer at {c.data.tokenizer_path} has vocab "
                     f"{tok.get_vocab_size()} > data.vocab_size={c.data.vocab_size}")
  cache = c.data.cache_dir or None
  train = batching.Batcher(batching.load_token_stream(cc, "train", tok, cache),
                           c.data.seq_len, c.data.batch_size)
  heldout = batching.Batcher(batching.load_token_stream(cc, "heldout", tok, cache),
                             c.data.seq_len, c.data.batch_size)
  return tok, train, heldout


def build_trainer(c, train, heldout, vocab_size: int, eos_id: int):
  from specjax.training import lm, optim
  mcfg = model_config_from(c, vocab_size, eos_id)
  ocfg = optim.OptimConfig(learning_rate=c.optim.learning_rate,
                           warmup_steps=c.optim.warmup_steps, total_steps=c.train.num_steps,
                           min_lr_ratio=c.optim.min_lr_ratio, weight_decay=c.optim.weight_decay,
                           b1=c.optim.b1, b2=c.optim.b2, grad_clip=c.optim.grad_clip)
  tcfg = lm.LMTrainConfig(num_steps=c.train.num_steps, precision=c.train.precision,
                          init_seed=c.train.init_seed, data_seed=c.data.seed,
                          eval_every=c.train.eval_every, eval_batches=c.train.eval_batches,
                          checkpoint_every=c.train.checkpoint_every,
                          log_every=c.train.log_every)
  workdir = c.workdir or f"/tmp/specjax_runs/{c.name}"
  return lm.LMTrainer(mcfg, ocfg, tcfg, train, heldout, workdir,
                      progress=c.train.progress), workdir


def run(c) -> dict:
  """Train (or resume) per config ``c``, export, and return the metrics dict."""
  import numpy as np

  from specjax.data import tokenizer as tok_lib
  from specjax.decoding.autoregressive import generate
  from specjax.models import hf
  t0 = time.time()
  tok, train, heldout = prepare_data(c)
  eos = tok_lib.eos_id(tok)
  trainer, workdir = build_trainer(c, train, heldout, tok.get_vocab_size(), eos)
  logging.info("model %s: %.2fM params; train stream %d tokens, held-out %d tokens",
               c.name, trainer.model_config.num_params() / 1e6, len(train.stream),
               len(heldout.stream))
  trainer.train(stop_after=c.train.stop_after or None)
  train_wall = time.time() - t0

  # Final held-out evaluation: the first ``final_eval_windows`` windows of the held-out
  # stream, in batches of 8, whatever the training batch size (comparable across models).
  from specjax.data.batching import Batcher
  final_batches = Batcher(heldout.stream, c.data.seq_len, 8).eval_batches(
      max(1, c.train.final_eval_windows // 8))
  final_loss = trainer.mean_loss(final_batches)

  export_dir = c.export.dir or os.path.join(workdir, "hf")
  export_cfg = trainer.model_config.replace(dtype="float32", param_dtype=c.export.dtype)
  hf.save_pretrained(export_dir, export_cfg, trainer.state.params, tokenizer=tok,
                     dtype=c.export.dtype)

  # Greedy samples from the exported model (checks the export round trip too).
  model, params = hf.load_pretrained(export_dir)
  prompts = list(c.export.samples)
  res = generate(model, params, [tok.encode(p).ids for p in prompts],
                 max_new_tokens=c.export.sample_tokens)
  samples = [{"prompt": p, "completion": tok.decode(ids)}
             for p, ids in zip(prompts, res.to_lists())]

  metrics = {
      "name": c.name, "config": c.to_dict(), "num_params": trainer.model_config.num_params(),
      "steps": int(trainer.state.step), "resumed_from": trainer.resumed_from,
      "train_tokens": int(trainer.state.step) * train.batch_size * train.seq_len,
      "epochs": train.epoch_of(trainer.data_state),
      "tokens_per_second": trainer.tokens_per_second(),
      "train_seconds_measured": trainer.timing["train_seconds"],
      "wall_seconds_this_process": train_wall,
      "final_train_loss": float(np.mean(trainer.history[-20:])),
      "heldout_loss": final_loss, "heldout_ppl": math.exp(final_loss),
      "heldout_eval_tokens": len(final_batches) * 8 * heldout.seq_len,
      "evals": trainer.evals, "train_loss_history": trainer.history,
      "export_dir": export_dir, "samples": samples,
  }
  with open(os.path.join(workdir, "metrics.json"), "w") as f:
    json.dump(metrics, f, indent=2)
  trainer.close()
  logging.info("done: held-out loss %.4f ppl %.2f, %.0f tok/s, exported to %s",
               final_loss, math.exp(final_loss), metrics["tokens_per_second"], export_dir)
  for s in samples:
    logging.info("sample %r -> %r", s["prompt"], s["completion"])
  return metrics


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_config_binary(run, "LM training config file.")
