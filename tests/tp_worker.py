"""One process of the 2-process ``jax.distributed`` test
(tests/decoding/test_tensor_parallel.py::test_two_processes_give_the_single_process_tokens).

    python -m tests.tp_worker COORDINATOR NUM_PROCESSES PROCESS_ID OUT_JSON   # from the repo root

Joins the run with 2 local CPU devices, shards the tiny models over a
``data=2 x model=2`` mesh spanning both processes, and writes the tokens it
received (every row, gathered from both processes) to OUT_JSON.
"""

import json
import sys


PROGRAMS = ("generate/sampled", "chain/sampled", "tree/greedy")


def runs(mesh):
  """Token lists of PROGRAMS on the tiny Llama pair (``mesh=None``: one device)."""
  from tests.decoding.test_tensor_parallel import MODELS, _pair, _prompts, run_program
  cfg, seed, prompt_seed, rows = MODELS["llama"]
  target, tp, dp = _pair(cfg, seed=seed)
  prompts = _prompts(rows, cfg.vocab_size, seed=prompt_seed)
  return {p: run_program(p, target, tp, dp, prompts, mesh) for p in PROGRAMS}


def main(coordinator: str, num_processes: str, process_id: str, out: str) -> None:
  from specjax import distributed
  distributed.initialize(coordinator, int(num_processes), int(process_id), local_device_count=2)
  import jax

  from specjax.decoding import parallel

  tokens = runs(parallel.make_mesh(2, 2))
  with open(out, "w") as f:
    json.dump({"devices": jax.device_count(), "local_devices": jax.local_device_count(),
               "tokens": tokens}, f)


if __name__ == "__main__":
  main(*sys.argv[1:])
