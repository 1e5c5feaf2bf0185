"""The main job's rows on every prompt set (ShareGPT first turns, HumanEval, multi-turn
chat), with intervals per set: ``experiments/benchmark.py`` with
``--prompt_sets=sharegpt,humaneval,multiturn`` and enough prompts per set for an
interval (benchmarks/RESULTS.md, "On every prompt set")."""

from __future__ import annotations

from experiments.results.families import Family, Test, family_note
from experiments.results.markdown import RESULTS
from experiments.results.markdown import ci as _ci
from experiments.results.markdown import table as _table
from experiments.results.records import jsonl

SETS_RECORD = f"{RESULTS}/benchmark_smollm2_sets/benchmark.jsonl"


def _key(r: dict) -> tuple:
  c = r["config"]
  return (c["drafter"], c["method"], c["temperature"])


def per_set_family(rel: str = SETS_RECORD) -> Family:
  """Every speculative row's decode-phase speedup against 1 on every prompt set."""
  tests = []
  for r in jsonl(rel):
    for name, s in r["result"].get("speedup_decode_per_set", {}).items():
      tests.append(Test(_key(r) + (name,), s["speedup"], tuple(s["ci95"]), 1.0, s["mde80"]))
  return Family("decode speedup per prompt set", "every speculative row's decode-phase "
                "speedup over target-only on each prompt set, both temperatures",
                tuple(tests), up="faster", down="slower")


def per_set_table(rel: str = SETS_RECORD) -> str:
  """Per row (drafter, rule, T): the decode-phase speedup with its 95% interval over
  the set's prompts and the family's corrected verdict, on each prompt set, and over
  all prompts (the pooled cell of the main table, repeated for reading across)."""
  recs = [r for r in jsonl(rel) if r["config"]["kind"] == "spec"]
  fam = per_set_family(rel)
  sets = list(dict.fromkeys(n for r in recs for n in r["result"].get("speedup_decode_per_set",
                                                                   {})))
  if not sets:
    raise ValueError(f"{rel}: no row has per-set speedups (speedup_decode_per_set); rerun "
                     f"experiments.benchmark with two or more --prompt_sets")
  rows = []
  for r in recs:
    per = r["result"].get("speedup_decode_per_set", {})
    cells = []
    for name in sets:
      s = per.get(name)
      cells.append("-" if s is None else f"{s['speedup']:.2f} {_ci(s['ci95'], '.2f')}: "
                   f"{fam.verdict(_key(r) + (name,))}")
    pooled = r["result"]["speedup_decode_pooled"]
    rows.append([r["config"]["drafter"], r["config"]["method"],
                 f"{r['config']['temperature']:g}", *cells,
                 f"{pooled['speedup']:.2f} {_ci(pooled['ci95'], '.2f')}"])
  n = {name: next(r["result"]["speedup_decode_per_set"][name]["batches"] for r in recs
                  if name in r["result"].get("speedup_decode_per_set", {})) for name in sets}
  head = [f"{name} ({n[name]} prompts)" for name in sets]
  return (_table(["drafter", "rule", "T", *head, "all prompts"], rows) + "\n\n"
          + "Decode-phase speedup over target-only [95% CI over the set's prompts]: "
          "verdict vs 1. " + family_note(fam))
