"""Where decode time goes on this machine: the forward cost curve per weights dtype and
context (``benchmarks/forward_cost.py``), and one speculative round split into draft,
verify and everything else, in target decode steps, with decode-phase and end-to-end
speedups (``benchmarks/round_cost.py``); the cost-aware draft length beside fixed K
(``benchmarks/adaptive_length.py``).

Records: ``benchmarks/results/forward_cost/smollm2_b1.json``,
``benchmarks/results/round_cost/smollm2_{float32,bfloat16}.json``, and the matmul
formulations and XLA:CPU backends tried for the verify forward,
``benchmarks/results/verify_matmul/*.json`` (``benchmarks/verify_matmul.py``).
"""

from __future__ import annotations

import glob
import json
import os
import shlex

from experiments.results.markdown import RESULTS, path, table

FORWARD_COST = f"{RESULTS}/forward_cost/smollm2_b1.json"
ROUND_COST = tuple(f"{RESULTS}/round_cost/smollm2_{w}.json" for w in ("float32", "bfloat16"))


def _load(rel: str) -> dict:
  with open(path(rel)) as f:
    return json.load(f)


def forward_cost_table(rel: str = FORWARD_COST) -> str:
  """One row per (weights, context) at batch 1: each T's median forward time, its ratio
  to T = 1 of the same row, and -- for bfloat16 weights -- to the float32 model's
  T = 1 at the same context (a bfloat16 verify against a float32 decode step)."""
  rec = _load(rel)
  cells = {(c["param_dtype"], c["context"], c["tokens"]): c["forward_s"]
           for c in rec["cells"] if c["batch"] == 1}
  tokens = sorted({t for _, _, t in cells})
  rows = []
  for w in rec["param_dtypes"]:
    for ctx in rec["contexts"]:
      one = cells[w, ctx, 1]
      f32 = cells.get(("float32", ctx, 1))
      row = [w, str(ctx)]
      for t in tokens:
        s = cells[w, ctx, t]
        cell = f"{s * 1e3:.1f} ms ({s / one:.2f}x)"
        if w != "float32" and f32:
          cell += f" / {s / f32:.2f}x f32"
        row.append(cell)
      rows.append(row)
  return table(["weights", "context", *[f"T={t}" for t in tokens]], rows)


def round_cost_table(rels: tuple = ROUND_COST) -> str:
  """One row per (weights, temperature, drafter, rule): tau, the round and its parts in
  target decode steps of the same weights, the decode-phase and end-to-end speedups
  over target-only decoding of the same weights, and the target step in ms."""
  rows = []
  for rel in rels:
    if not os.path.exists(path(rel)):
      continue
    rec = _load(rel)
    for r in rec["rows"]:
      rows.append([rec["param_dtype"], f"{r['temperature']:g}", r["drafter"], r["rule"],
                   f"{r['tau']:.2f}", f"{r['round_steps']:.2f}", f"{r['draft_steps']:.2f}",
                   f"{r['verify_steps']:.2f}", f"{r['other_steps']:+.2f}",
                   f"{r['speedup_decode']:.2f}x", f"{r['speedup_end_to_end']:.2f}x",
                   f"{r['step_ms']:.1f}"])
  return table(["weights", "T", "drafter", "rule", "tau", "round (steps)", "draft", "verify",
                "other", "decode speedup", "end-to-end speedup", "step ms"], rows)


ADAPTIVE_LENGTH = f"{RESULTS}/adaptive_length/smollm2.json"
ADAPTIVE_SOURCES = f"{RESULTS}/adaptive_length/smollm2_sources.json"


def _per_source(value, fmt) -> str:
  """A row's value, or ``lookup / chain`` for a drafter choosing between sources."""
  if isinstance(value, list) and value and isinstance(value[0], list):
    return " / ".join(" ".join(format(c, fmt) for c in v) for v in value)
  if isinstance(value, list) and value and not isinstance(value[0], (int, float)):
    return " / ".join(format(v, fmt) for v in value)
  if isinstance(value, list):
    return " ".join(format(c, fmt) for c in value)
  return format(value, fmt)


def adaptive_length_table(rel: str = ADAPTIVE_LENGTH) -> str:
  """One row per (temperature, drafter, rule): the measured round cost curve c(0..K),
  the held-out calibration error, tau and the decode-phase speedup of fixed K and of
  the cost-aware length, the latter's end-to-end speedup and its share of rounds at
  each verify length n = 0..K (``benchmarks/adaptive_length.py``).  A drafter choosing
  between sources (``lookup_eagle_chain``) shows both sources' curves and ECEs
  (``lookup / chain``) and the share of rounds each source drafted, fixed (the choice
  without a policy: lookup wherever it matched) and cost-aware."""
  rec = _load(rel)
  sources = any(isinstance(r["calibration_ece"], list) for r in rec["rows"])
  rows = []
  for r in rec["rows"]:
    f, a = r["fixed"], r["adaptive"]
    ece = r["calibration_ece"]
    row = [f"{r['temperature']:g}", r["drafter"], r["rule"],
           _per_source(r["round_cost"], ".2f"),
           " / ".join(f"{e:.3f}" for e in ece) if isinstance(ece, list) else f"{ece:.3f}",
           f"{f['tau']:.2f}", f"{f['speedup_decode']:.2f}x",
           f"{a['tau']:.2f}", f"{a['speedup_decode']:.2f}x",
           f"{a['speedup_end_to_end']:.2f}x",
           " ".join(f"{s:.2f}" for s in a["gamma_share"])]
    if sources:
      share = lambda x: (" / ".join(f"{s:.2f}" for s in x["source_share"])
                         if len(x.get("source_share", [])) > 1 else "-")
      row += [share(f), share(a)]
    rows.append(row)
  head = ["T", "drafter", "rule", "c(0..K) steps", "ECE", "fixed tau",
          "fixed decode speedup", "cost-aware tau", "cost-aware decode speedup",
          "cost-aware end to end", "cost-aware rounds at n = 0..K"]
  if sources:
    head += ["fixed rounds by lookup / chain", "cost-aware rounds by lookup / chain"]
  return table(head, rows)


SHIPPED_ACCEPTANCE = "specjax/models/assets/smollm2-135m-instruct/acceptance"


def shipped_acceptance_files() -> tuple:
  """The acceptance tables shipped for SmolLM2 (paths relative to the repository)."""
  return tuple(sorted(os.path.relpath(f, path(".")) for f in
                      glob.glob(os.path.join(path(SHIPPED_ACCEPTANCE), "*.json"))))


def shipped_acceptance_table() -> str:
  """One row per shipped acceptance table (``python -m experiments.calibrate_acceptance``):
  its source, rule, T, K, the records it was fitted on, each position's acceptance rate
  when reached (the table's prior) and the calibration error on the held-out half."""
  rows = []
  for rel in shipped_acceptance_files():
    with open(path(rel)) as f:
      t = json.load(f)
    v = dict(t["verifier"])
    rule = v.pop("rule") + (f"({','.join(f'{k}={x}' for k, x in sorted(v.items()))})" if v
                            else "")
    rel_ = t["reliability"]
    rows.append([t["drafter"], rule, f"{t['temperature']:g}", f"{t['k']}",
                 f"{t['num_records']}", " ".join(f"{p:.2f}" for p in t["prior"]),
                 f"{rel_['ece']:.3f} ({rel_['records']} records)"])
  return table(["source", "rule", "T", "K", "records (all prompts)",
                "acceptance when reached, positions 1..K", "held-out ECE"], rows)


VERIFY_MATMUL = f"{RESULTS}/verify_matmul"


def verify_matmul_table(rel: str = VERIFY_MATMUL) -> str:
  """One row per (XLA flags, formulation) of every record in ``rel``: each T's median
  time, its ratio to T = 1 of the row and to float32 ``x @ W`` at T = 1 of the same
  record (the float32 decode step's matmuls)."""
  rows = []
  for f in sorted(glob.glob(os.path.join(path(rel), "*.json"))):
    with open(f) as fh:
      rec = json.load(fh)
    cells = {(c["formulation"], c["tokens"]): c["seconds"] for c in rec["cells"]}
    tokens = sorted({t for _, t in cells})
    ref = cells.get(("f32", 1))
    for kind in dict.fromkeys(k for k, _ in cells):
      one = cells[kind, tokens[0]]
      row = [f"`{rec['xla_flags']}`" if rec["xla_flags"] else "(default)", kind]
      for t in tokens:
        s = cells[kind, t]
        row.append(f"{s * 1e3:.1f} ms ({s / one:.2f}x" + (f"; {s / ref:.2f}x f32 T=1)" if ref
                                                           else ")"))
      rows.append(row)
  return table(["XLA flags", "formulation", *[f"T={t}" for t in tokens]], rows)


TREE_BUDGET = f"{RESULTS}/tree_budget/smollm2.json"
_PROFILE_NAMES = {"this_cpu": "this CPU (measured)",
                  "accelerator_like": "accelerator-like (verify flat up to the largest size)"}


def _shares(values) -> str:
  return " ".join(f"{v:.2f}" for v in values)


def tree_budget_table(rel: str = TREE_BUDGET) -> str:
  """``benchmarks/tree_budget.py``: per profile, the verify cost curve, the best tree
  (Sequoia's dynamic program, ``E / c``) and the best chain, and the cost-aware policy's
  share of rounds at n = 0..K for the EAGLE-3 chain and for ``lookup_eagle_chain``
  (with its share of rounds by source); then each budget's best tree under both
  profiles, and the measured rank acceptance."""
  rec = _load(rel)
  rows = []
  for name, res in rec["profiles"].items():
    b, c, pol = res["trees"]["best"], res["trees"]["best_chain"], res["policy"]
    both = pol["lookup_eagle_chain"]
    rows.append([_PROFILE_NAMES.get(name, name), _shares(res["verify_steps"]),
                 (f"{b['nodes']} nodes, depth {b['depth']}, widths {b['widths']}"
                  if b["nodes"] > 1 else "none: the plain decode step"),
                 f"{b['value']:.2f} / {b['cost']:.2f} = **{b['rate']:.2f}**",
                 f"K = {c['depth']}: {c['rate']:.2f}", _shares(pol["eagle_chain"]["gamma_share"]),
                 f"{_shares(both['gamma_share'])} (lookup / chain {_shares(both['source_share'])})"])
  sizes = " ".join(str(n) for n in rec["verify_sizes"])
  out = table(["profile", f"verify over {sizes} tokens, in steps", "best tree",
               "tokens / round / cost = per step", "best chain, per step",
               f"cost-aware EAGLE-3 chain: rounds at n = 0..{rec['policy_k']}",
               "cost-aware lookup_eagle_chain: rounds at n = 0..K"], rows)
  budget_rows = []
  names = list(rec["profiles"])
  per = {n: {b["budget"]: b for b in rec["profiles"][n]["trees"]["per_budget"]} for n in names}
  for budget in sorted(per[names[0]]):
    cells = [f"{per[n][budget]['value']:.2f} / {per[n][budget]['cost']:.2f} = "
             f"{per[n][budget]['rate']:.2f}" for n in names]
    budget_rows.append([str(budget), f"{per[names[0]][budget]['depth']}",
                        str(per[names[0]][budget]["widths"]), *cells])
  out += "\n\n" + table(["node budget", "depth", "widths", *[
      f"{_PROFILE_NAMES.get(n, n)}: E / c = per step" for n in names]], budget_rows)
  p = rec["rank_acceptance"]
  reached = [sum(c) for c in rec["rank_counts"]]
  out += "\n\n" + table(["depth", "positions reached", *[f"rank {r + 1}" for r in range(
      min(4, len(p[0])))], f"ranks 1-{len(p[0])}"],
      [[str(d + 1), str(reached[d]), *[f"{v:.3f}" for v in row[:4]], f"{sum(row):.3f}"]
       for d, row in enumerate(p)])
  return out + (f"\n\nRank acceptance: greedy EAGLE-3 chain of K = {rec['k']} on "
                f"{rec['calibration_prompts']} held-out chat prompts (after the first "
                f"{rec['evaluation_prompts']}), {rec['max_new_tokens']} new tokens (depths reached "
                f"fewer than {rec['rank_min_reached']} times pooled with the deepest one reached "
                f"that often); policy "
                f"rounds: K = {rec['policy_k']}, T = 0, lossless, the shipped tables, the "
                f"first {rec['policy_prompts']} evaluation prompts; one drafting level costs "
                f"{rec['draft_level']:.3f} steps in both profiles. Rates are the model's "
                f"(E / c), not timings.")


# the adaptive row at batch 32 / 64, by how the policy priced a round: rows alone (each
# at its own bucket), the batch as one group, then with the loop's own work per round
# measured and speculation off where no length pays (by the tables' prior), then the
# same with speculation off only where even their most confident bins cannot pay, timed
# over three repeats of a longer decode phase (batch 32 only):
# (pricing, the records' directory suffix, batch sizes)
ADAPTIVE_BATCH_STAGES = (("rows alone", "", (32, 64)),
                         ("batch as one group", "_grouped", (32, 64)),
                         ("one group, loop overhead measured", "_costed", (32, 64)),
                         ("the same, off only by the best bins; 3 repeats of 128 tokens", "_repeats",
                          (32,)),
                         ("the same, a batch off unless its prior clears 1 + margin", "_margin",
                          (32,)))
ADAPTIVE_BATCH = tuple(f"{RESULTS}/benchmark_smollm2_b{b}{suffix}/benchmark.jsonl"
                       for _, suffix, sizes in ADAPTIVE_BATCH_STAGES for b in sizes)


def _pricing(rel: str) -> str:
  for name, suffix, _ in reversed(ADAPTIVE_BATCH_STAGES):
    if f"{suffix}/benchmark.jsonl" in rel:
      return name
  raise ValueError(f"{rel!r} is none of the adaptive-batch records")


def real_round_steps(result: dict, batch: int, max_new_tokens: int) -> float:
  """A batch round's decode-phase seconds over the target-only decode step's, from a
  benchmark row's record: the speculative decode time (prefill off) over the batch's
  rounds (each prompt batch runs until its slowest row is done: the most rounds any
  of its rows took) against the target-only decode time over ``max_new_tokens - 1``
  steps per prompt batch (a row that reached the cap set it), summed over batches and
  repeats."""
  import numpy as np
  timing, prefill = result["batch_timing"], result["prefill_s"]
  calls = np.asarray(result["target_calls_per_prompt"], np.float64) / len(timing["spec"])
  rounds = [calls[i:i + batch].max() for i in range(0, len(calls), batch)]
  spec = tgt = 0.0
  for rep_spec, rep_tgt, rep_pre in zip(timing["spec"], timing["target"], prefill):
    spec += sum(t - p for (_, t), p in zip(rep_spec, rep_pre))
    tgt += sum(t - p for (_, t), p in zip(rep_tgt, rep_pre))
  reps = len(timing["spec"])
  return (spec / (reps * sum(rounds))) / (tgt / (reps * len(rounds) * (max_new_tokens - 1)))


def adaptive_batch_table(rels: tuple = ADAPTIVE_BATCH) -> str:
  """The main job's ``adaptive`` row at large batch sizes (one record per B and pricing
  stage, :data:`ADAPTIVE_BATCH_STAGES`): the cost profile it measured at that batch
  size (and the loop's own work per round, where measured), whether it speculated (and
  the rate that decided it, against its threshold: :func:`_deciding_rate`), its
  decode-phase (with each repeat's where the run repeated its timing) and end-to-end
  speedups over target-only in the same run, tau, and its rounds by verify length and
  by source."""
  from experiments.results.records import jsonl
  rows = []
  for rel in rels:
    for r in jsonl(rel):
      c, x = r["config"], r["result"]
      if c.get("policy") != "cost_aware":
        continue
      prof = x["cost_profile"]
      over = prof.get("overhead")
      spec = f"{x['speculation']} ({_deciding_rate(x)})" if "prior_rate" in x else "on"
      cap = int(_command_flag(r["provenance"]["command"], "max_new_tokens"))
      rows.append([str(prof["batch"]), _pricing(rel),
                   " ".join(f"{v:.2f}" for v in prof["forward"]),
                   f"{prof['drafting']['eagle_chain']:.2f}",
                   "-" if over is None else f"{over:.2f}", spec, f"{x['tau']:.2f}",
                   f"{real_round_steps(x, prof['batch'], cap):.2f}",
                   _decode_speedup(x), f"{x['speedup']:.2f}x",
                   _shares(x["gamma_share"]), _shares(x["source_share"])])
  return table(["B", "pricing", "verify over 1..K+1 tokens, steps (measured at B)",
                "EAGLE-3 chain's K-draft step, steps", "loop's own work per round, steps",
                "speculation (rate that decided)", "tau", "a batch round in the run, steps",
                "decode speedup", "end-to-end speedup", "rounds at n = 0..K",
                "rounds by lookup / chain"], rows)


def _deciding_rate(result: dict) -> str:
  """The rate that decided whether a cost-aware row speculated, against its threshold:
  the record's own rule where it holds one, else (older records) the tables' most
  confident bins where recorded, else their prior, against 1."""
  rule = result.get("speculation_rule")
  if rule is None:
    estimate = "best" if "best_rate" in result else "prior"
    rule = {"estimate": estimate, "threshold": 1.0}
  rate = result[f"{rule['estimate']}_rate"]["rate"]
  return f"{rule['estimate']} {rate:.2f} against {rule['threshold']:.2f}"


def _decode_speedup(result: dict) -> str:
  """The decode-phase speedup (the median over timing repeats of target-only's decode
  seconds over the speculative side's, as the benchmark computes it), followed by each
  repeat's where the run repeated its timing: two prompt batches per run are too few
  for an interval, the repeats show the spread."""
  timing, prefill = result["batch_timing"], result["prefill_s"]
  if len(timing["spec"]) < 2:
    return f"{result['speedup_decode']:.2f}x"
  per = [sum(t - p for (_, t), p in zip(tgt, pre)) / sum(t - p for (_, t), p in zip(spec, pre))
         for spec, tgt, pre in zip(timing["spec"], timing["target"], prefill)]
  return f"{result['speedup_decode']:.2f}x (repeats {', '.join(f'{v:.2f}' for v in per)})"


def _command_flag(command: str, name: str) -> str:
  """The value of ``--name=value`` in a recorded command line."""
  for arg in shlex.split(command):
    if arg.startswith(f"--{name}="):
      return arg.split("=", 1)[1]
  raise ValueError(f"the command {command!r} has no --{name}=")


TABLES = {
    "adaptive_batch_smollm2": adaptive_batch_table,
    "tree_budget_smollm2": tree_budget_table,
    "verify_matmul": verify_matmul_table,
    "forward_cost_b1": forward_cost_table,
    "round_cost_smollm2": round_cost_table,
    "adaptive_length_smollm2": adaptive_length_table,
    "adaptive_sources_smollm2": lambda: adaptive_length_table(ADAPTIVE_SOURCES),
    "shipped_acceptance_smollm2": shipped_acceptance_table,
}
