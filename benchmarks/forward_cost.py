r"""Forward cost curve of a target: t(T) / t(1) for T new tokens per row.

Speculative decoding pays where verifying T = K + 1 tokens costs little more
than decoding one: this table says, for each batch size, how many tokens one
forward can score before the cost grows. Each cell is the median of
``--repeats`` timings of a jitted loop of 4 forwards carrying the KV cache, per
forward (``benchmarks.common.forward_latency``: cache writes in place, logits
fed back; ``--context`` committed tokens in a cache of ``--context + 64``
slots), compile excluded; the machine's 1-minute load
average is printed with the table. ``--output``: also a JSON record of the cells
with the weights' sha256 and the run's provenance (:mod:`specjax.provenance`).

  python -m benchmarks.forward_cost                                # SmolLM2-135M
  python -m benchmarks.forward_cost --model=default --batch_sizes=1,8
"""

from __future__ import annotations

import os
import time

from absl import app, flags

from benchmarks.records import positive_ints, write_record

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("model", "smollm2-135m-instruct", "registered real model, .gguf file, "
                      "HF dir, or 'default' (the embedded small target)")
  flags.DEFINE_list("tokens", ["1", "2", "4", "8", "16", "32", "64"], "new tokens per row (T)")
  flags.DEFINE_list("batch_sizes", ["1", "4", "16"], "rows per forward")
  flags.DEFINE_integer("context", 128, "committed tokens per row before the forward")
  flags.DEFINE_integer("repeats", 5, "timed forwards per cell (median)")
  flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "params and activations")
  flags.DEFINE_string("output", "", "also write the cells as a JSON record here ('' = no)")


def main(argv):
  del argv
  tokens = positive_ints("tokens", FLAGS.tokens)
  batches = positive_ints("batch_sizes", FLAGS.batch_sizes)
  if FLAGS.context < 1 or FLAGS.repeats < 1:
    raise app.UsageError("--context and --repeats must be >= 1")
  import jax

  from benchmarks.common import forward_latency
  from specjax import provenance
  stamp = provenance.stamp()
  if FLAGS.model == "default":
    from specjax.models.defaults import default_model_dir, load_default
    model, params = load_default("target", dtype=FLAGS.dtype)
    name, source = "embedded default target", default_model_dir("target")
  else:
    from specjax.models import registry
    lm = registry.load_model(FLAGS.model, dtype=FLAGS.dtype)
    model, params, name, source = lm.model, lm.params, lm.name, lm.path
  cfg = model.config
  print(f"model: {name} ({cfg.num_params() / 1e6:.1f}M params, {FLAGS.dtype}), context "
        f"{FLAGS.context}, jax {jax.__version__} on {jax.default_backend()} "
        f"({os.cpu_count()} CPUs); median of {FLAGS.repeats} forwards per cell")
  load0, t0 = os.getloadavg()[0], time.perf_counter()
  table = {}
  for b in batches:
    for t in tokens:
      table[b, t] = forward_latency(model, params, b, t, FLAGS.context, FLAGS.context + 64,
                                    repeats=FLAGS.repeats)
  load1 = os.getloadavg()[0]
  print(f"1-min load average {load0:.1f} before, {load1:.1f} after; "
        f"{time.perf_counter() - t0:.0f} s\n")
  print("| batch | " + " | ".join(f"T={t}" for t in tokens) + " |")
  print("|---:|" + "---:|" * len(tokens))
  for b in batches:
    base = table[b, tokens[0]]
    cells = [f"{table[b, t] * 1e3:.1f} ms ({table[b, t] / base:.2f}x)" for t in tokens]
    print(f"| {b} | " + " | ".join(cells) + " |")
  print(f"\ncells: median forward time (ratio to T={tokens[0]} at the same batch)")
  if FLAGS.output:
    cells = [{"batch": b, "tokens": t, "forward_s": table[b, t]} for b in batches for t in tokens]
    record = provenance.stamped({"benchmark": "forward_cost", "model": name, "dtype": FLAGS.dtype,
                                 "context": FLAGS.context, "repeats": FLAGS.repeats,
                                 "cells": cells}, stamp, {"target": source})
    write_record(FLAGS.output, record)


if __name__ == "__main__":
  define_flags()
  app.run(main)
