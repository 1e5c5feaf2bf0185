"""The speed tables: ``benchmarks/speculative.py``'s rows
(``benchmarks/results/{batch_sweep,tree_shapes}_smollm2.json``,
``small_models_drafters.json``), ``benchmarks/layer_stack.py``'s and
``benchmarks/attention_chunk.py``'s records (``layer_stack.json``,
``attention_chunk.json``), and ``experiments/benchmark.py``'s timed records -- README
command 1's (:data:`MAIN_JOB`) and the speed records (:data:`SPEED_RECORD` and its
reruns) -- with their families of verdicts (:func:`speed_families`); all in
``benchmarks/RESULTS.md``, and the speed claims that read them (section 5 of
``docs/results.md``)."""

from __future__ import annotations

import functools
import os

from experiments.common.row_stats import paired_speed_gain, round_cost_in_steps
from experiments.results.commands import benchmark_rerun
from experiments.results.families import Family, Test, family_note
from experiments.results.markdown import RESULTS, span
from experiments.results.markdown import ci as _ci
from experiments.results.markdown import gain_cell as _gain_cell
from experiments.results.markdown import speedup_cell as _speedup_cell
from experiments.results.markdown import path as _path
from experiments.results.markdown import table as _table
from experiments.results.records import jsonl, load_json


def _spec_rows(rel: str) -> list[dict]:
  return load_json(rel)["rows"]


def batch_sweep_table() -> str:
  rows = [[str(r["batch"]), f"{r['tau']:.2f}", f"{r['tokens_per_s_target_only']:.1f}",
           f"{r['tokens_per_s_speculative']:.1f}", f"{r['speedup']:.2f}",
           f"{r['generate_step_ms']:.1f}",
           f"{r['iteration_ms']:.1f} ({r['draft_ms']:.1f} + {r['verify_ms']:.1f})",
           f"{r['verify_ms'] / r['t_target_1_ms']:.2f}", f"{r['draft_ms'] / r['t_target_1_ms']:.2f}",
           f"{r['iteration_ms'] / r['generate_step_ms']:.2f}",
           "yes" if r["greedy_identical"] else "no"]
          for r in _spec_rows(f"{RESULTS}/batch_sweep_smollm2.json")]
  return _table(["batch", "tau", "target-only tok/s", "speculative tok/s", "speedup",
                 "generate step ms", "iteration ms (draft + verify)", "verify / 1-token forward",
                 "draft / 1-token forward", "break-even tau = iteration / step",
                 "greedy identical"], rows)


def _nodes(r: dict) -> str:
  parts = r["drafter"].split(":")
  return parts[1] if parts[0].endswith("_tree") and len(parts) > 1 else str(r["k"])


def tree_shapes_table() -> str:
  rows = [[r["drafter"], _nodes(r), f"{r['tau']:.2f}", f"{r['speedup']:.2f}",
           f"{r['iteration_ms']:.1f} ({r['draft_ms']:.1f} + {r['verify_ms']:.1f})",
           f"{r['verify_ms'] / r['generate_step_ms']:.2f}",
           f"{r['iteration_ms'] / r['generate_step_ms']:.2f}"]
          for r in _spec_rows(f"{RESULTS}/tree_shapes_smollm2.json")]
  return _table(["drafter", "nodes verified", "tau", "speedup", "iteration ms (draft + verify)",
                 "verify / generate step", "break-even tau"], rows)


def small_models_table() -> str:
  rows = [[r["drafter"], f"{r['tau']:.2f}", f"{r['speedup']:.2f}",
           f"{r['iteration_ms']:.2f} ({r['draft_ms']:.2f} + {r['verify_ms']:.2f})",
           f"{r['generate_step_ms']:.2f}", f"{r['iteration_ms'] / r['generate_step_ms']:.1f}"]
          for r in _spec_rows(f"{RESULTS}/small_models_drafters.json")]
  return _table(["drafter", "tau", "speedup", "iteration ms (draft + verify)",
                 "generate step ms", "break-even tau"], rows)


def layer_stack_table() -> str:
  """Rolled vs unrolled layers (``benchmarks/layer_stack.py``): first-call (compile)
  and run seconds per model and workload, and the unrolled / rolled ratios."""
  rec = load_json(f"{RESULTS}/layer_stack.json")
  rows = []
  for r in rec["rows"]:
    ro, un = r["modes"]["rolled"], r["modes"]["unrolled"]
    rows.append([f"{r['model']} ({r['layers']} layers)", r["workload"],
                 f"{ro['first_call_cpu_s']:.1f} / {un['first_call_cpu_s']:.1f}",
                 f"{un['first_call_cpu_s'] / ro['first_call_cpu_s']:.2f}x",
                 f"{1e3 * ro['run_s']:.0f} / {1e3 * un['run_s']:.0f}",
                 f"{un['run_s'] / ro['run_s']:.2f}x",
                 "yes" if r["same_tokens"] else "NO"])
  return _table(["model", "workload", "first call CPU s (rolled / unrolled)",
                 "unrolled / rolled", "run ms (rolled / unrolled)", "unrolled / rolled",
                 "same tokens"], rows)


def attention_chunk_table() -> str:
  """Decode-step cost against cache slots (``benchmarks/attention_chunk.py``): whole-cache
  attention against chunked attention, per batch size."""
  rec = load_json(f"{RESULTS}/attention_chunk.json")
  rows = []
  for r in rec["rows"]:
    full, chunked = r["ms_per_step"]["whole cache"], r["ms_per_step"]["chunks of 256"]
    rows.append([str(r["batch"]), f"{r['cache_slots']:,}", f"{full:.1f}", f"{chunked:.1f}",
                 f"{full / chunked:.2f}x", "yes" if r["same_tokens"] else "NO"])
  return _table(["batch", "cache slots", "ms per step, whole cache",
                 "ms per step, chunks of 256", "whole / chunked", "same tokens"], rows)


MAIN_JOB = f"{RESULTS}/benchmark_smollm2/benchmark.jsonl"
SPEED_RECORD = f"{RESULTS}/speed_smollm2/benchmark.jsonl"
# The same command rerun with the decode-phase speedup (prefill timed apart).
SPEED_RECORD_DECODE = f"{RESULTS}/speed_smollm2_decode/benchmark.jsonl"
# the EAGLE-3 drafters again after the head was continued on on-policy text
SPEED_RECORD_ONPOLICY_HEAD = f"{RESULTS}/speed_smollm2_onpolicy_head/benchmark.jsonl"
# Every drafter again with 256 new tokens per prompt (decode phase and end to end).
SPEED_RECORD_256 = f"{RESULTS}/speed_smollm2_256/benchmark.jsonl"


def _row_key(r: dict) -> tuple:
  c = r["config"]
  return (c["drafter"], c["method"], c["temperature"])


@functools.lru_cache(maxsize=None)
def speed_families(rel: str) -> tuple:
  """The two families of a timed ``experiments/benchmark.py`` record: every
  speculative row's speedup against 1, and every lossy row's tokens/s against
  lossless on the same drafter and T (:mod:`experiments.results.families`)."""
  recs = [r for r in jsonl(rel) if r["config"]["kind"] == "spec"]
  lossless = {(r["config"]["drafter"], r["config"]["temperature"]): r["result"] for r in recs
              if r["config"]["method"] == "lossless"}
  speed = [Test(_row_key(r), r["result"]["speedup_pooled"]["speedup"],
                tuple(r["result"]["speedup_pooled"]["ci95"]), 1.0,
                r["result"]["speedup_pooled"]["mde80"]) for r in recs]
  gains = []
  for r in recs:
    ref = lossless.get((r["config"]["drafter"], r["config"]["temperature"]))
    if ref is not None and r["config"]["method"] != "lossless":
      g = paired_speed_gain(r["result"], ref)
      gains.append(Test(_row_key(r), g["diff"], tuple(g["ci95"]), 0.0, g["mde80"]))
  return (Family("speedup vs 1", "every speculative row's speedup over target-only, both "
                 "temperatures", tuple(speed), up="faster", down="slower"),
          Family("vs lossless", "every lossy row's tokens/s against lossless on the same "
                 "drafter and T", tuple(gains)))


def benchmark_table(rel: str, verdicts: bool = True) -> str:
  """``experiments/benchmark.py``'s rows from the record ``rel``: tau with its interval
  over prompts, tokens/s, the target-only tokens/s the row's speedup divides by (the
  machine's drift between rows shows there), speedup over target-only (with its
  interval over prompts when the record has per-prompt timings; one repeat of the old
  records: none), with per-prompt timings also a lossy row's tokens/s against lossless
  on the same drafter and each round's cost in target decode steps (the break-even
  tau: speedup = tau / cost), agreement with target greedy at T = 0, and each row's
  wall time. ``verdicts=False``: intervals and MDEs without verdicts (a record with
  too few prompts to decide anything, e.g. the main job's)."""
  recs = jsonl(rel)
  timed = all("speedup_pooled" in r["result"] for r in recs if r["config"]["kind"] == "spec")
  families = speed_families(rel) if timed and verdicts else None
  repeats = sorted({len(r["result"].get("speedup_per_repeat", [])) for r in recs
                    if r["config"]["kind"] == "spec"})
  lossless = {(r["config"]["drafter"], r["config"]["temperature"]): r["result"] for r in recs
              if r["config"]["kind"] == "spec" and r["config"]["method"] == "lossless"}
  decode = all("speedup_decode" in r["result"] for r in recs if r["config"]["kind"] == "spec")
  rows = []
  for r in recs:
    cfg, res = r["config"], r["result"]
    spec = cfg["kind"] == "spec"
    tau = (f"{res['tau']:.2f} {_ci(res['tau_ci'], '.2f')}" if spec and res.get("tau_ci")
           else f"{res['tau']:.2f}" if spec else "-")
    agree = f"{res['agree_exact']:.2f}" if cfg["temperature"] == 0 else "-"
    target_tps = res.get("target_tokens_per_s", res["tokens_per_s"] if not spec else None)
    row = [cfg["drafter"], cfg["method"], f"{cfg['temperature']:g}", tau,
           f"{res['tokens_per_s']:.1f}", "-" if target_tps is None else f"{target_tps:.1f}",
           _speedup_cell(res, verdicts and not families) if spec else "1"]
    if spec and families:
      row[-1] += f": {families[0].verdict(_row_key(r))}"
    if decode:  # prefill and first token taken off both sides (no verdict: not a family)
      dp = res.get("speedup_decode_pooled")
      row.append("1" if not spec else f"{dp['speedup']:.2f} {_ci(dp['ci95'], '.2f')}" if dp
                 else f"{res['speedup_decode']:.2f}")
    if timed:  # a lossy rule's tokens/s against lossless on the same drafter, prompts, keys
      ref = lossless.get((cfg["drafter"], cfg["temperature"]))
      row.append("-" if not spec or ref is None or cfg["method"] == "lossless"
                 else _gain_cell(paired_speed_gain(res, ref), False)
                 + (f": {families[1].verdict(_row_key(r))}" if families else ""))
      row.append(f"{round_cost_in_steps(res):.2f}" if spec else "-")
    rows.append(row + [agree, f"{res['wall_s']:.0f}"])
  prov = recs[0]["provenance"]
  end = recs[-1]["provenance"]
  cmd = benchmark_rerun(recs)
  command = (f"`{cmd.rerun}` (recorded as `{cmd.recorded}`; {cmd.why})" if cmd.pinned
             else f"`{cmd.recorded}`")
  note = (f"\n\nRecord `{rel}`: {command} at commit "
          f"`{(prov['git_commit'] or '?')[:10]}`, {prov['cpus']} CPUs, load "
          f"{prov['load_average'][0]:.2f} at the start and "
          f"{end['load_average_end'][0]:.2f} at the end (1-minute averages); rows' wall "
          f"times sum to {sum(x['result']['wall_s'] for x in recs):.0f} s.")
  verdict = ": verdict vs 1" if verdicts else ""
  head = (f"speedup [95% CI over prompts], MDE (80% power){verdict}" if timed else
          f"speedup ({'one repeat' if repeats == [1] else 'median of repeats'})")
  vs = ([f"tokens/s vs lossless on the same drafter - 1 [95% CI, paired], MDE (80% power)"
         f"{': verdict' if verdicts else ''}",
         "round cost in target decode steps (= break-even tau)"] if timed else [])
  if not verdicts:
    note += (f" {recs[0]['result'].get('num_rows', '?')} prompts: intervals and MDEs only, "
             "no verdicts (too few prompts to decide anything).")
  if families:
    note += "\n\n" + family_note(*families)
  dec = ["decode-phase speedup [95% CI over prompts]"] if decode else []
  return _table(["drafter", "rule", "T", "tau [95% CI over prompts]", "tokens/s",
                 "target-only tokens/s beside it", head, *dec, *vs,
                 "agrees with target greedy", "row wall s"], rows) + note


def adaptive_usage_table(rel: str = MAIN_JOB) -> str:
  """Where the cost-aware rows of a main-job record drafted: per row, the share of its
  rounds drafted by each source (prompt lookup / the EAGLE-3 chain), the share at each
  verify length n = 0..K (0: a plain decode step), and the round cost curves the run
  measured for each source (``experiments/common/adaptive.py``)."""
  from experiments.results.records import jsonl
  rows = []
  for r in jsonl(rel):
    c, x = r["config"], r["result"]
    if c.get("policy") != "cost_aware" or "source_share" not in x:
      continue
    shares = " / ".join(f"{v:.2f}" for v in x["source_share"])
    costs = " / ".join(" ".join(f"{v:.2f}" for v in cost) for cost in x["round_cost"])
    rows.append([c["drafter"], c["method"], f"{c['temperature']:g}", shares,
                 " ".join(f"{v:.2f}" for v in x["gamma_share"]), costs,
                 " / ".join(f"{e:.3f}" for e in x["calibration_ece"])])
  return _table(["drafter", "rule", "T", "rounds by lookup / chain",
                 "rounds at n = 0..K", "c(0..K) steps, lookup / chain rounds",
                 "held-out ECE of the tables, lookup / chain"], rows)


def main_job_table() -> str:
  """README command 1's rows (``experiments/benchmark.py``, defaults), and the whole
  command's wall time in a fresh clone when the record beside them has it
  (``benchmarks/fresh_clone_main_job.sh``)."""
  out = benchmark_table(MAIN_JOB, verdicts=False)
  fresh = f"{os.path.dirname(MAIN_JOB)}/fresh_clone.json"
  if os.path.exists(_path(fresh)):
    f = load_json(fresh)
    by_script = f.get("written_by") == "benchmarks/fresh_clone_main_job.sh"
    how = ("" if by_script else "; written by hand, not by the script, so exploratory: "
           + f.get("note", "the record does not say how"))
    out += (f"\n\nREADME command 1 in a fresh clone, venv and caches (`{fresh}`, "
            f"`benchmarks/fresh_clone_main_job.sh`, commit `{f['git_commit'][:10]}`): install "
            f"{f['install_s']} s, main job {f['job_s']} s, **{f['total_s']} s in all** "
            f"({f['total_s'] / 60:.1f} minutes; {f['cpus']} CPUs, load "
            f"{f['load_average'][0]:.2f} at the start{how}).")
  return out


def claims_speed() -> str:
  """Section 5 of docs/results.md: the speed records that are committed."""
  small = _spec_rows(f"{RESULTS}/small_models_drafters.json")
  batch = _spec_rows(f"{RESULTS}/batch_sweep_smollm2.json")
  trees = _spec_rows(f"{RESULTS}/tree_shapes_smollm2.json")
  b1 = next(r for r in batch if r["batch"] == 1)
  rows = [
      ["small models, every drafter, batch 1, T = 0", f"`{RESULTS}/small_models_drafters.json`",
       f"speedup {span([r['speedup'] for r in small])}x at tau "
       f"{span([r['tau'] for r in small])}; break-even tau "
       f"{span([r['iteration_ms'] / r['generate_step_ms'] for r in small], '.1f')}"],
      ["SmolLM2, EAGLE-3 chain K = 2, T = 0, batch 1 ... 16", f"`{RESULTS}/batch_sweep_smollm2.json`",
       f"speedup {b1['speedup']:.2f}x at batch 1 (tau {b1['tau']:.2f}, break-even "
       f"{b1['iteration_ms'] / b1['generate_step_ms']:.2f}), "
       f"{span([r['speedup'] for r in batch if r['batch'] > 1])}x at batch 2-16"],
      ["SmolLM2, EAGLE-3 chain K = 4 and four tree shapes, one prompt, batch 1",
       f"`{RESULTS}/tree_shapes_smollm2.json`",
       "; ".join(f"{r['drafter']} {r['speedup']:.2f}x (tau {r['tau']:.2f})" for r in trees)],
  ]
  if os.path.exists(_path(SPEED_RECORD)):
    rows += _speed_record_rows(SPEED_RECORD, "every drafter")
  if os.path.exists(_path(SPEED_RECORD_ONPOLICY_HEAD)):
    rows += _speed_record_rows(SPEED_RECORD_ONPOLICY_HEAD,
                               "EAGLE-3 head continued on on-policy text")
  if os.path.exists(_path(SPEED_RECORD_256)):
    rows += _speed_record_rows(SPEED_RECORD_256, "every drafter", 256)
  return _table(["measurement", "record", "result (interval over prompts and MDE where the "
                 "record has per-prompt timings, the verdict corrected over the record's "
                 f"family '{speed_families(SPEED_RECORD)[0].name}' as in its own table; "
                 "else one run, no interval)"], rows)


def _speed_record_rows(rel: str, what: str, new_tokens: int = 128) -> list[list[str]]:
  """Per temperature, every lossless drafter's speedup in record ``rel`` (main-job
  settings at ``new_tokens`` new tokens per prompt) with its interval over prompts."""
  recs = [r for r in jsonl(rel)
          if r["config"]["kind"] == "spec" and r["config"]["method"] == "lossless"]
  n = recs[0]["result"]["speedup_pooled"]["batches"]
  rows = []
  for t in sorted({r["config"]["temperature"] for r in recs}):
    family = speed_families(rel)[0]
    cells = [f"{r['config']['drafter']} {_speedup_cell(r['result'], False)}: "
             f"{family.verdict(_row_key(r))} (tau {r['result']['tau']:.2f})"
             for r in recs if r["config"]["temperature"] == t]
    rows.append([f"SmolLM2, {what}, lossless, {n} prompts, main-job settings at {new_tokens} "
                 f"new tokens, T = {t:g}", f"`{rel}`", "; ".join(cells)])
  return rows
