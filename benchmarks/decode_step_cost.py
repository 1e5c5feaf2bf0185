r"""Per-step cost of a decode forward on a real model: inside a jitted loop that
carries the KV cache (as generate() and the speculative loop do), vs one bare
jitted forward, vs generate() per token.

    python -m benchmarks.decode_step_cost --cache_length=1024

Used to measure the KV-cache-as-scan-carry change (RESULTS.md, the section
on the KV cache as a scan carry): run it with ``specjax/models/{transformer,kv_cache}.py`` as of commit
6c1a87e ("KV cache as a scan carry") and as of its parent.
"""

from __future__ import annotations

import dataclasses
import time

from absl import app

from experiments.common import knobs, specs


@dataclasses.dataclass(frozen=True)
class DecodeStepCostSpec:
  """The cache and the timed loop of this benchmark."""
  cache_length: int = knobs.knob(1024, "KV cache slots")
  timed_steps: int = knobs.knob(32, "forwards per timed loop")

  def __post_init__(self):
    knobs.check_int(self, "cache_length", 200)
    knobs.check_int(self, "timed_steps", 1)


SPECS = knobs.Specs(specs.ModelSpec, specs.TimingSpec, DecodeStepCostSpec,
                    presets=dict(model="smollm2-135m-instruct", repeats=3))


@dataclasses.dataclass(frozen=True)
class Run:
  """This benchmark's specs, by name."""
  model: specs.ModelSpec
  timing: specs.TimingSpec
  bench: DecodeStepCostSpec


def define_flags():
  """The flags of this binary, defined on its main path only."""
  SPECS.define()


def main(argv):
  del argv
  r = Run(*SPECS.build())
  import jax
  import jax.numpy as jnp
  import numpy as np

  from benchmarks.common import forward_latency
  from specjax.decoding.autoregressive import generate
  from specjax.models import kv_cache as kvc
  from specjax.models import registry

  lm = registry.load_model(r.model.model)
  m, p, s, steps = lm.model, lm.params, r.bench.cache_length, r.bench.timed_steps

  def loop(params, cache, tok):
    def body(_, c):
      cache, tok = c
      o = m.apply(params, tok[:, None], cache.lengths[:, None], cache)
      cache = kvc.commit(o.cache, jnp.ones((1,), jnp.int32))
      return cache, jnp.argmax(o.logits[:, 0], -1).astype(jnp.int32)
    return jax.lax.fori_loop(0, steps, body, (cache, tok))

  f = jax.jit(loop, donate_argnums=(1,))

  def fresh():
    return kvc.commit(m.init_cache(1, s), jnp.full((1,), 100, jnp.int32))

  tok = jnp.ones((1,), jnp.int32)
  jax.block_until_ready(f(p, fresh(), tok))
  ts = []
  for _ in range(r.timing.repeats):
    c = jax.block_until_ready(fresh())
    t0 = time.perf_counter()
    jax.block_until_ready(f(p, c, tok))
    ts.append(time.perf_counter() - t0)
  print(f"S={s}: jitted loop of {steps} forwards: {np.median(ts) / steps * 1e3:.1f} ms/step")
  print(f"S={s}: forward_latency (loop of 4, T=1): "
        f"{forward_latency(m, p, 1, 1, 100, s, repeats=10) * 1e3:.1f} ms")
  prompt = [lm.tokenizer.encode("hello world").ids]
  g = lambda: generate(m, p, prompt, max_new_tokens=64, eos_token_id=None, cache_length=s)
  jax.block_until_ready(g().tokens)
  ts = []
  for _ in range(r.timing.repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(g().tokens)
    ts.append(time.perf_counter() - t0)
  print(f"S={s}: generate() 64 tokens: {np.median(ts) / 64 * 1e3:.1f} ms/token")


if __name__ == "__main__":
  define_flags()
  app.run(main)
