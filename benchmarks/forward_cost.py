r"""Forward cost curve of a target: t(T) / t(1) for T new tokens per row.

Speculative decoding pays where verifying T = K + 1 tokens costs little more
than decoding one: this table says, for each weights dtype, context and batch
size, how many tokens one forward can score before the cost grows. Each cell is
the median of ``--repeats`` timings of a jitted loop of forwards carrying the
KV cache, per forward (``benchmarks.common.forward_timer``: cache writes in
place, logits fed back; ``C`` committed tokens in a cache of ``C + 64`` slots),
compile excluded; every cell's timer runs once per round, round-robin
(``interleaved_medians``), so the ratios within one run compare like with like.
The machine's 1-minute load average is printed with the table. ``--output``:
also a JSON record of the cells with the weights' sha256 and the run's
provenance (:mod:`specjax.provenance`).

``--param_dtypes=float32,bfloat16`` times the float32 model and the same model
with bfloat16 weights (``cast_weights``: activations float32, matmuls reading
bfloat16 and accumulating in float32) side by side.

  python -m benchmarks.forward_cost                                # SmolLM2-135M
  python -m benchmarks.forward_cost --batch_sizes=1 --contexts=128,450,900 \
      --tokens=1,2,3,5,9 --param_dtypes=float32,bfloat16 --repeats=7
  python -m benchmarks.forward_cost --model=default --batch_sizes=1,8
"""

from __future__ import annotations

import dataclasses
import os
import time

from absl import app

from benchmarks.records import write_record
from experiments.common import knobs, specs

DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class ForwardCostSpec:
  """The contexts of the cost curve and the weights' storage dtypes timed side by side."""
  contexts: tuple[int, ...] = knobs.knob((128,), "committed tokens per row before the "
                                         "forward, comma-separated")
  param_dtypes: tuple[str, ...] = knobs.knob(
      (), "weights' storage dtypes timed side by side (default: --dtype); bfloat16 weights "
      "of a float32 model multiply in mixed precision "
      "(specjax.models.transformer.cast_weights)")

  def __post_init__(self):
    if not self.contexts or min(self.contexts) < 1:
      raise knobs.KnobError("contexts", self.contexts, "give integers >= 1, comma-separated")
    knobs.check_subset(self, "param_dtypes", DTYPES, nonempty=False)


SPECS = knobs.Specs(specs.ModelSpec, specs.DtypeSpec, specs.TokensSpec, specs.BatchSizesSpec,
                    specs.TimingSpec, specs.OutputSpec, ForwardCostSpec,
                    presets=dict(model="smollm2-135m-instruct", tokens=(1, 2, 4, 8, 16, 32, 64),
                                 batch_sizes=(1, 4, 16), repeats=5, output=""))


@dataclasses.dataclass(frozen=True)
class Run:
  """This benchmark's specs, by name."""
  model: specs.ModelSpec
  dtype: specs.DtypeSpec
  tokens: specs.TokensSpec
  batch_sizes: specs.BatchSizesSpec
  timing: specs.TimingSpec
  output: specs.OutputSpec
  bench: ForwardCostSpec


def define_flags():
  """The flags of this binary, defined on its main path only."""
  SPECS.define()
  from experiments.common import cli
  cli.define_decision_flag()


def _load(r: Run):
  """``(model, params, name, source)`` of ``--model`` computing in ``--dtype``."""
  dtype = r.dtype.dtype
  if r.model.is_default:
    from specjax.models.defaults import default_model_dir, load_default
    model, params = load_default("target", dtype=dtype)
    return model, params, "embedded default target", default_model_dir("target")
  from specjax.models import registry
  lm = registry.load_model(r.model.model, dtype=dtype)
  return lm.model, lm.params, lm.name, lm.path


def main(argv):
  del argv
  r = Run(*SPECS.build())
  from experiments.common import cli
  cli.apply_decision_flag()  # --decision: refuse a dirty tree, before anything is measured
  tokens, batches = list(r.tokens.tokens), list(r.batch_sizes.batch_sizes)
  contexts, dtype, repeats = list(r.bench.contexts), r.dtype.dtype, r.timing.repeats
  weights = list(r.bench.param_dtypes) or [dtype]
  import jax

  from benchmarks.common import forward_timer, interleaved_medians
  from specjax import provenance
  from specjax.models.transformer import cast_weights
  stamp = provenance.stamp()
  model, params, name, source = _load(r)
  models = {w: ((model, params) if w == dtype else cast_weights(model, params, w))
            for w in weights}
  # decode form once per weights dtype (a timer given stored params makes its own copy)
  models = {w: (m, m.decode_params(p)) for w, (m, p) in models.items()}
  print(f"model: {name} ({model.config.num_params() / 1e6:.1f}M params, {dtype} "
        f"activations; weights {', '.join(weights)}), jax {jax.__version__} on "
        f"{jax.default_backend()} ({os.cpu_count()} CPUs); median of {repeats} "
        f"round-robin rounds per cell")
  load0, t0 = os.getloadavg()[0], time.perf_counter()
  timers = {(w, c, b, t): forward_timer(*models[w], b, t, c, c + 64, inner=4)
            for w in weights for c in contexts for b in batches for t in tokens}
  table = interleaved_medians(timers, repeats)
  load1 = os.getloadavg()[0]
  print(f"1-min load average {load0:.1f} before, {load1:.1f} after; "
        f"{time.perf_counter() - t0:.0f} s\n")
  base = table[weights[0], contexts[0], batches[0], 1] if 1 in tokens else None
  print("| weights | context | batch | " + " | ".join(f"T={t}" for t in tokens) + " |")
  print("|---|---:|---:|" + "---:|" * len(tokens))
  for (w, c, b) in dict.fromkeys(k[:3] for k in table):
    ref = table[w, c, b, tokens[0]]
    cells = [f"{table[w, c, b, t] * 1e3:.1f} ms ({table[w, c, b, t] / ref:.2f}x)" for t in tokens]
    print(f"| {w} | {c} | {b} | " + " | ".join(cells) + " |")
  print(f"\ncells: median forward time (ratio to T={tokens[0]} of the same row)")
  if base is not None:
    print(f"first row's T=1 = {base * 1e3:.1f} ms")
  if r.output.output:
    cells = [{"param_dtype": w, "context": c, "batch": b, "tokens": t, "forward_s": v}
             for (w, c, b, t), v in table.items()]
    record = provenance.stamped({"benchmark": "forward_cost", "model": name, "dtype": dtype,
                                 "param_dtypes": weights, "contexts": contexts,
                                 "repeats": repeats, "cells": cells}, stamp,
                                {"target": source})
    write_record(r.output.output, record)


if __name__ == "__main__":
  define_flags()
  app.run(main)
