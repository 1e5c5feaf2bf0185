r"""Decode-step cost against KV-cache slots: attention over the whole static cache or
over the filled chunks only.

A decode step's attention reads the cache of every layer. With one einsum over all
S slots (``$SPECJAX_ATTENTION_CHUNK=0``) it reads every slot, filled or not; the
chunked attention (``specjax.models.transformer.chunked_attention``, the CPU
default) reads chunks of 256 slots up to the longest row. This benchmark runs
target-only ``generate()`` (greedy, EOS off) from short prompts (32 tokens) with a
cache of 256 and 2,048 slots, at batch 1 and 16, in both modes: the per-step
cost is the difference between a run of ``--long`` and one of ``--short`` new
tokens over their difference (defaults 80 and 16) (prefill and dispatch cancel), the median of
``--repeats`` runs with the modes timed round-robin. Both modes must give the same
tokens (``same_tokens``).

  python -m benchmarks.attention_chunk            # SmolLM2, ~10 min on 2 cores

The record (``--output``) carries the command, commit and machine load;
``python -m experiments.render_results`` renders its table into benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json
import os
import time

from absl import app, flags

from benchmarks.records import positive_ints, write_record

FLAGS = flags.FLAGS
MODES = {"whole cache": "0", "chunks of 256": "256"}


def define_flags():
  flags.DEFINE_string("model", "smollm2-135m-instruct", "registered model, .gguf or HF dir")
  flags.DEFINE_list("batches", ["1", "16"], "rows per call")
  flags.DEFINE_list("cache_slots", ["256", "2048"], "KV-cache slots per row")
  flags.DEFINE_integer("short", 16, "new tokens of the short run")
  flags.DEFINE_integer("long", 80, "new tokens of the long run")
  flags.DEFINE_integer("repeats", 3, "timed runs per cell and mode after a warm-up")
  flags.DEFINE_string("output", "benchmarks/results/attention_chunk.json", "JSON record")


def main(argv):
  del argv
  batches = positive_ints("batches", FLAGS.batches)
  slots = positive_ints("cache_slots", FLAGS.cache_slots)
  if not 1 <= FLAGS.short < FLAGS.long or FLAGS.repeats < 1:
    raise app.UsageError(f"need 1 <= --short={FLAGS.short} < --long={FLAGS.long} and "
                         f"--repeats={FLAGS.repeats} >= 1")
  if min(slots) < 32 + FLAGS.long:
    raise app.UsageError(f"--cache_slots={slots} must hold 32 prompt + {FLAGS.long} new tokens")
  import jax
  import numpy as np

  from specjax import provenance
  from specjax.decoding.autoregressive import generate
  from specjax.distributions import SamplingConfig
  from specjax.models import registry

  stamp = provenance.stamp()
  lm = registry.load_model(FLAGS.model)
  rows = []
  for b in batches:
    prompts = [[1 + (7 * i + j) % 1000 for j in range(32)] for i in range(b)]
    for s in slots:
      calls = {}
      for mode, chunk in MODES.items():
        # The variable is read when a forward is traced, and jit reuses traces of the
        # inner loop across outer functions: clear them, and compile ahead of time so
        # the timed calls hold their own executables.
        os.environ["SPECJAX_ATTENTION_CHUNK"] = chunk
        jax.clear_caches()
        for n in (FLAGS.short, FLAGS.long):
          fn = jax.jit(lambda p, n=n, s=s: generate(
              lm.model, p, prompts, max_new_tokens=n, sampling=SamplingConfig(temperature=0.0),
              eos_token_id=None, cache_length=s).tokens).lower(lm.params).compile()
          calls[mode, n] = (fn, np.asarray(fn(lm.params)))  # warm-up
      times = {k: [] for k in calls}
      for _ in range(FLAGS.repeats):
        for k, (fn, _) in calls.items():
          t0 = time.perf_counter()
          jax.block_until_ready(fn(lm.params))
          times[k].append(time.perf_counter() - t0)
      step = {mode: 1e3 * (np.median(times[mode, FLAGS.long]) - np.median(times[mode, FLAGS.short]))
              / (FLAGS.long - FLAGS.short) for mode in MODES}
      same = all(np.array_equal(calls["whole cache", n][1], calls["chunks of 256", n][1])
                 for n in (FLAGS.short, FLAGS.long))
      row = {"batch": b, "cache_slots": s, "ms_per_step": step, "same_tokens": same,
             "runs_s": {f"{m}|{n}": t for (m, n), t in times.items()}}
      rows.append(row)
      print(json.dumps({k: row[k] for k in ("batch", "cache_slots", "ms_per_step", "same_tokens")}),
            flush=True)
  os.environ.pop("SPECJAX_ATTENTION_CHUNK", None)
  record = {"benchmark": "attention_chunk", "model": FLAGS.model, "target_sha256": lm.sha256,
            "prompt_tokens": 32, "short": FLAGS.short, "long": FLAGS.long,
            "repeats": FLAGS.repeats, "provenance": provenance.finish(stamp), "rows": rows}
  write_record(FLAGS.output, record)


if __name__ == "__main__":
  define_flags()
  app.run(main)
