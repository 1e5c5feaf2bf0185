r"""Which matmul formulation makes a forward over T = 1..9 tokens cost what its bytes cost?

A stand-in for SmolLM2-135M's weights -- 30 layers of [576 -> 960] (q | k | v),
[576 -> 576] (o), [576 -> 3072] (gate | up), [1536 -> 576] (down) and the tied
[49152, 576] LM head, 538 MB in float32 -- multiplied by T rows under ``jax.jit`` in
several formulations, timed round-robin (median of ``--repeats``), each T's ratio to
T = 1 of the same formulation and to float32 ``x @ W`` at T = 1:

* ``f32``: float32 ``x @ W`` with ``W [in, out]`` (the models' layout);
* ``f32_split2``: each weight stored as two column halves, two independent dots
  (XLA:CPU may run them on both cores);
* ``f32_rows``: one matrix-vector product per row (T passes over W, the later ones
  from cache);
* ``bf16``: bfloat16 weights, the activations rounded to bfloat16, float32
  accumulation (``preferred_element_type``); a single row padded to two
  (``specjax.models.transformer.matmul``);
* ``bf16_unpadded``: the same without the padding (XLA:CPU's slow M = 1 path).

XLA's CPU backends are process-wide flags: rerun with e.g.
``XLA_FLAGS=--xla_cpu_use_onednn=true`` (or ``--xla_cpu_experimental_xnn_fusion_type=dot``,
``--xla_cpu_experimental_ynn_fusion_type=dot``, ``--xla_cpu_multi_thread_eigen=false``)
to compare; the record keeps the flags it ran under.

    python -m benchmarks.verify_matmul --output=benchmarks/results/verify_matmul/default.json
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time

from benchmarks.records import write_record
from experiments.common import cli, knobs, specs

FORMULATIONS = ("f32", "f32_split2", "f32_rows", "bf16", "bf16_unpadded")
H, F, L, V, QKV = 576, 1536, 30, 49152, 960


@dataclasses.dataclass(frozen=True)
class VerifyMatmulSpec:
  """Which matmul formulations are timed (module docstring)."""
  formulations: tuple[str, ...] = knobs.knob(FORMULATIONS, f"of {', '.join(FORMULATIONS)}")

  def __post_init__(self):
    knobs.check_subset(self, "formulations", FORMULATIONS)


SPECS = knobs.Specs(specs.TokensSpec, specs.TimingSpec, specs.OutputSpec, VerifyMatmulSpec,
                    presets=dict(tokens=(1, 2, 3, 5, 9),  # rows per product (T)
                                 repeats=9,  # timed rounds (median; round-robin)
                                 output=""))


@dataclasses.dataclass(frozen=True)
class Run:
  """The benchmark's specs, by name."""
  tokens: specs.TokensSpec
  timing: specs.TimingSpec
  output: specs.OutputSpec
  matmul: VerifyMatmulSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()
  from experiments.common import cli
  cli.define_decision_flag()


def _weights(kind: str):
  """Per layer ``{"qkv", "o", "gu", "d"}`` and the LM head ``[H, V]`` in ``kind``'s form."""
  import jax
  import jax.numpy as jnp
  key = jax.random.key(0)
  dt = jnp.bfloat16 if kind.startswith("bf16") else jnp.float32

  def w(i, shape):
    return (0.02 * jax.random.normal(jax.random.fold_in(key, i), shape)).astype(dt)

  def split(x):
    return [x[:, :x.shape[1] // 2], x[:, x.shape[1] // 2:]] if kind == "f32_split2" else x

  layers = [{n: split(w(10 * i + j, s)) for j, (n, s) in enumerate(
      (("qkv", (H, QKV)), ("o", (H, H)), ("gu", (H, 2 * F)), ("d", (F, H))))}
      for i in range(L)]
  return layers, split(w(9999, (H, V)))


def _product(kind: str):
  import jax
  import jax.numpy as jnp
  from jax import lax
  dims = (((1,), (0,)), ((), ()))

  def one(x, w):
    if kind.startswith("bf16"):
      x = x.astype(jnp.bfloat16)
      if kind == "bf16" and x.shape[0] == 1:
        return lax.dot_general(jnp.concatenate([x, x]), w, dims,
                               preferred_element_type=jnp.float32)[:1]
      return lax.dot_general(x, w, dims, preferred_element_type=jnp.float32)
    if kind == "f32_rows":
      return jnp.concatenate([lax.dot_general(x[t:t + 1], w, dims) for t in range(x.shape[0])])
    return lax.dot_general(x, w, dims)

  def mm(x, w):
    return jnp.concatenate([one(x, p) for p in w], 1) if isinstance(w, list) else one(x, w)

  def forward(x, layers, head):
    for p in layers:
      qkv = mm(x, p["qkv"])
      x = x + mm(qkv[:, :H] + jnp.tile(qkv[:, H:H + 192] + qkv[:, H + 192:], 3), p["o"])
      gu = mm(x, p["gu"])
      x = x + mm(jax.nn.silu(gu[:, :F]) * gu[:, F:], p["d"])
    return mm(x, head)
  return jax.jit(forward)


def run() -> None:
  """Time every (formulation, T), print the table, write ``--output``."""
  r = Run(*SPECS.build())
  from experiments.common import cli
  cli.apply_decision_flag()  # --decision: refuse a dirty tree, before anything is measured
  tokens, kinds, repeats = r.tokens.tokens, r.matmul.formulations, r.timing.repeats
  import jax
  import jax.numpy as jnp

  from specjax import provenance
  stamp = provenance.stamp()
  calls = {}
  for kind in kinds:
    layers, head = _weights(kind)
    fn = _product(kind)
    for t in tokens:
      x = jnp.full((t, H), 0.01, jnp.float32)
      fn(x, layers, head).block_until_ready()
      calls[kind, t] = (fn, x, layers, head)
  times = {k: [] for k in calls}
  for _ in range(repeats):
    for k, (fn, x, layers, head) in calls.items():
      t0 = time.perf_counter()
      fn(x, layers, head).block_until_ready()
      times[k].append(time.perf_counter() - t0)
  med = {k: statistics.median(v) for k, v in times.items()}
  ref = med.get(("f32", 1))
  xla_flags = os.environ.get("XLA_FLAGS", "")
  print(f"XLA_FLAGS={xla_flags!r}; jax {jax.__version__}; median of {repeats} rounds\n")
  print("| formulation | " + " | ".join(f"T={t}" for t in tokens) + " |")
  print("|---|" + "---:|" * len(tokens))
  for kind in kinds:
    one = med[kind, tokens[0]]
    print(f"| {kind} | " + " | ".join(
        f"{med[kind, t] * 1e3:.1f} ms ({med[kind, t] / one:.2f}x"
        + (f", {med[kind, t] / ref:.2f}x f32 T=1)" if ref else ")") for t in tokens) + " |")
  if r.output.output:
    cells = [{"formulation": k, "tokens": t, "seconds": s} for (k, t), s in med.items()]
    write_record(r.output.output, provenance.stamped(dict(
        benchmark="verify_matmul", xla_flags=xla_flags, repeats=repeats, cells=cells),
        stamp, {}))


if __name__ == "__main__":
  cli.run_binary(run, define_flags=define_flags)
