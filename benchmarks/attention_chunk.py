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

import dataclasses
import json
import os
import time

from absl import app

from benchmarks.records import write_record
from experiments.common import knobs, specs

MODES = {"whole cache": "0", "chunks of 256": "256"}
PROMPT_TOKENS = 32


@dataclasses.dataclass(frozen=True)
class AttentionChunkSpec:
  """The cache sizes and the two run lengths whose difference is the decode step."""
  cache_slots: tuple[int, ...] = knobs.knob((256, 2048), "KV-cache slots per row, "
                                            "comma-separated")
  short: int = knobs.knob(16, "new tokens of the short run")
  long: int = knobs.knob(80, "new tokens of the long run")

  def __post_init__(self):
    if not self.cache_slots or min(self.cache_slots) < 1:
      raise knobs.KnobError("cache_slots", self.cache_slots, "give integers >= 1, "
                            "comma-separated")
    knobs.check_int(self, "short", 1)
    if self.long <= self.short:
      raise knobs.KnobError("long", self.long, f"must be > --short={self.short}")
    if min(self.cache_slots) < PROMPT_TOKENS + self.long:
      raise knobs.KnobError("cache_slots", self.cache_slots, f"must hold {PROMPT_TOKENS} "
                            f"prompt + --long={self.long} new tokens")


SPECS = knobs.Specs(specs.ModelSpec, specs.BatchSizesSpec, specs.TimingSpec,
                    specs.OutputSpec, AttentionChunkSpec,
                    presets=dict(model="smollm2-135m-instruct", batch_sizes=(1, 16), repeats=3,
                                 output="benchmarks/results/attention_chunk.json"))


@dataclasses.dataclass(frozen=True)
class Run:
  """This benchmark's specs, by name."""
  model: specs.ModelSpec
  batch_sizes: specs.BatchSizesSpec
  timing: specs.TimingSpec
  output: specs.OutputSpec
  bench: AttentionChunkSpec


def define_flags():
  """The flags of this binary, defined on its main path only."""
  SPECS.define()
  from experiments.common import cli
  cli.define_decision_flag()


def main(argv):
  del argv
  r = Run(*SPECS.build())
  from experiments.common import cli
  cli.apply_decision_flag()  # --decision: refuse a dirty tree, before anything is measured
  short, long, repeats = r.bench.short, r.bench.long, r.timing.repeats
  import jax
  import numpy as np

  from specjax import provenance
  from specjax.decoding.autoregressive import generate
  from specjax.distributions import SamplingConfig
  from specjax.models import registry

  stamp = provenance.stamp()
  lm = registry.load_model(r.model.model)
  rows = []
  for b in r.batch_sizes.batch_sizes:
    prompts = [[1 + (7 * i + j) % 1000 for j in range(PROMPT_TOKENS)] for i in range(b)]
    for s in r.bench.cache_slots:
      calls = {}
      for mode, chunk in MODES.items():
        # The variable is read when a forward is traced, and jit reuses traces of the
        # inner loop across outer functions: clear them, and compile ahead of time so
        # the timed calls hold their own executables.
        os.environ["SPECJAX_ATTENTION_CHUNK"] = chunk
        jax.clear_caches()
        for n in (short, long):
          fn = jax.jit(lambda p, n=n, s=s: generate(
              lm.model, p, prompts, max_new_tokens=n, sampling=SamplingConfig(temperature=0.0),
              eos_token_id=None, cache_length=s).tokens).lower(lm.params).compile()
          calls[mode, n] = (fn, np.asarray(fn(lm.params)))  # warm-up
      times = {k: [] for k in calls}
      for _ in range(repeats):
        for k, (fn, _) in calls.items():
          t0 = time.perf_counter()
          jax.block_until_ready(fn(lm.params))
          times[k].append(time.perf_counter() - t0)
      step = {mode: 1e3 * (np.median(times[mode, long]) - np.median(times[mode, short]))
              / (long - short) for mode in MODES}
      same = all(np.array_equal(calls["whole cache", n][1], calls["chunks of 256", n][1])
                 for n in (short, long))
      row = {"batch": b, "cache_slots": s, "ms_per_step": step, "same_tokens": same,
             "runs_s": {f"{m}|{n}": t for (m, n), t in times.items()}}
      rows.append(row)
      print(json.dumps({k: row[k] for k in ("batch", "cache_slots", "ms_per_step", "same_tokens")}),
            flush=True)
  os.environ.pop("SPECJAX_ATTENTION_CHUNK", None)
  record = {"benchmark": "attention_chunk", "model": r.model.model, "target_sha256": lm.sha256,
            "prompt_tokens": PROMPT_TOKENS, "short": short, "long": long,
            "repeats": repeats, "provenance": provenance.finish(stamp), "rows": rows}
  if r.output.output:
    write_record(r.output.output, record)


if __name__ == "__main__":
  define_flags()
  app.run(main)
