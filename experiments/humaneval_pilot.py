r"""Which HumanEval prompt style makes the target most capable: the pilot's summary.

Reads the records of target-only runs of :mod:`experiments.humaneval_eval` (greedy,
T = 0) and, where given, screening records of :mod:`experiments.humaneval_screen`
(sampled), one directory per prompt style, and writes ``pilot.md`` and
``pilot.json`` to ``--output_dir``: per style pass@1 with a 95% bootstrap interval
over problems, the outcome of every answer (pass / fail / error / timeout, mean
length, answers at the token cap), the paired difference of the styles over the
problems both ran (one bootstrap resample for both, with its SD and minimum
detectable effect at 80% power), and the choice: completion when its paired greedy
difference to the (first) chat run is positive, else chat -- the target's most
capable setting, which gives the quality comparisons the most problems with a pass to
lose. Labels are styles, optionally tagged (``chat@384``: a run with another cap).
No model, no sandbox: only records.

    python -m experiments.humaneval_pilot \
        --greedy=chat:benchmarks/results/humaneval_pilot/chat,completion:benchmarks/results/humaneval_pilot/completion \
        --output_dir=benchmarks/results/humaneval_pilot
"""

from __future__ import annotations

import dataclasses
import json
import os

from absl import app

from experiments.common import knobs, specs
from experiments.humaneval.specs import STYLES


def parse_dirs(entries, flag: str = "") -> dict:
  """``["label:dir", ...]`` -> ``{label: dir}`` in order; a label is a style of
  :data:`STYLES`, optionally with a tag after ``@`` (e.g. ``chat@384`` for a run with
  another token cap); raises ValueError naming the entry (and ``--flag`` when given)."""
  out = {}
  for e in entries:
    label, sep, path = e.partition(":")
    if not sep or label.partition("@")[0] not in STYLES or not path:
      raise ValueError((f"--{flag} " if flag else "") + f"entry {e!r}: give label:dir with "
                       f"label a style in {STYLES} (optionally style@tag)")
    out[label] = path
  return out


@dataclasses.dataclass(frozen=True)
class HumanEvalPilotSpec:
  """The runs the pilot compares: one directory of records per prompt style."""
  greedy: tuple[str, ...] = knobs.knob((), "label:dir of a target-only greedy humaneval_eval "
                                       "run (its humaneval.jsonl); label a style, optionally "
                                       "style@tag; at least one is needed")
  sampled: tuple[str, ...] = knobs.knob((), "label:dir of a humaneval_screen run (its "
                                        "screen.jsonl)")

  def __post_init__(self):
    for name in ("greedy", "sampled"):
      try:
        parse_dirs(getattr(self, name))
      except ValueError as e:
        raise knobs.KnobError(name, getattr(self, name), str(e)) from None


SPECS = knobs.Specs(HumanEvalPilotSpec, specs.OutputDirSpec,
                    presets=dict(output_dir="benchmarks/results/humaneval_pilot"))


def define_flags():
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


def style_cell(records: list[dict], temperature: float = 0.0) -> dict:
  """The target-only cell of :func:`experiments.humaneval.summary.cells` at ``temperature``
  (records of other methods or temperatures ignored)."""
  from experiments.humaneval.summary import TARGET, cells
  recs = [r for r in records if r["config"].get("method", TARGET) == TARGET
          and float(r["config"]["temperature"]) == temperature]
  return cells(recs).get((TARGET, temperature), {})


def style_row(cell: dict, max_new_tokens: int | None) -> dict:
  """pass@1 [95% CI], problems, samples per problem and :func:`outcomes` of one cell."""
  import numpy as np

  from experiments.common.bootstrap import bootstrap_ci
  from experiments.humaneval.summary import outcomes, pass_scores
  sc = pass_scores(cell)
  lo, hi = bootstrap_ci(list(sc.values()))
  return {"problems": len(cell), "samples_per_problem":
          float(np.mean([len(d["passed"]) for d in cell.values()])),
          "pass@1": float(np.mean(list(sc.values()))), "ci95": [lo, hi],
          "problems_with_a_pass": int(sum(v > 0 for v in sc.values())),
          "outcomes": outcomes(cell, max_new_tokens)}


def compare(cells: dict, max_new_tokens: dict) -> dict:
  """Rows per label, the paired difference completion - <chat label> over the problems
  both ran, for every chat label, and the choice: completion when its paired difference
  to the FIRST chat label is positive, else that chat label (a tie keeps chat, the
  current default). Pass@1 of runs over different problem sets is not compared."""
  from experiments.humaneval.summary import paired_difference, pass_scores
  rows = {s: style_row(c, max_new_tokens.get(s)) for s, c in cells.items() if c}
  chats = [s for s in rows if s.partition("@")[0] == "chat"]
  diffs = {}
  if "completion" in rows:
    for s in chats:
      diffs[s] = paired_difference(pass_scores(cells["completion"]), pass_scores(cells[s]))
  if chats and "completion" in rows:
    d = diffs[chats[0]]
    choice = "completion" if d is not None and d["diff"] > 0 else chats[0]
  else:
    choice = next(iter(rows), None)
  return {"rows": rows, "completion_minus": diffs, "choice": choice,
          "choice_against": chats[0] if chats else None}


def _records(path: str, name: str) -> tuple[list[dict], list[dict]]:
  from experiments.common import sweep
  f = os.path.join(path, name)
  if not os.path.isfile(f):
    raise app.UsageError(f"no records at {f}")
  recs = sweep.load_records(f)
  return recs, [r.get("provenance") for r in recs[:1]]


def _cap(records: list[dict]) -> int | None:
  import re
  m = re.search(r"-n(\d+)-", records[0]["key"]) if records else None
  return int(m.group(1)) if m else None


def markdown(greedy: dict, sampled: dict | None) -> str:
  lines = ["| prompts | T | problems | samples/problem | pass@1 [95% CI] | problems with a pass "
           "| pass | fail | error | timeout | mean tokens | at cap |",
           "|:---|---:|---:|---:|:---|---:|---:|---:|---:|---:|---:|---:|"]
  for t, block in (("0", greedy), ("> 0", sampled or {"rows": {}})):
    for s, r in block["rows"].items():
      o = r["outcomes"]
      mean = "-" if o["mean_tokens"] is None else f"{o['mean_tokens']:.0f}"
      lines.append(f"| {s} | {t} | {r['problems']} | {r['samples_per_problem']:.0f} | "
                   f"{r['pass@1']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}] | "
                   f"{r['problems_with_a_pass']} | {o['pass']} | {o['fail']} | {o['error']} | "
                   f"{o['timeout']} | {mean} | {o['at_cap']} |")
  lines += ["", "Paired differences over the problems both runs have (one bootstrap resample "
            "for both; * = the 95% interval excludes 0):", ""]
  for t, block in (("0", greedy), ("> 0", sampled)):
    for s, d in ((block or {}).get("completion_minus") or {}).items():
      if d:
        star = " *" if d["excludes_zero"] else ""
        lines.append(f"- T {t}: completion - {s} = {d['diff']:+.3f} [{d['ci95'][0]:+.3f}, "
                     f"{d['ci95'][1]:+.3f}]{star} over {d['problems']} problems (SD "
                     f"{d['sd']:.3f}, MDE at 80% power {d['mde80']:.3f})")
  lines += ["", f"Chosen style (paired greedy difference against {greedy['choice_against']}): "
                f"**{greedy['choice']}**."]
  return "\n".join(lines) + "\n"


def build_run():
  """``(pilot, output)`` specs of the parsed flags; at least one greedy run is needed
  (a bad value is ``app.UsageError``)."""
  pilot, out = SPECS.build()
  if not pilot.greedy:
    raise app.UsageError("--greedy: give at least one style:dir")
  return pilot, out


def main():
  pilot, out = build_run()
  gdirs, sdirs = parse_dirs(pilot.greedy), parse_dirs(pilot.sampled)
  from specjax import provenance
  stamp = provenance.stamp()
  gcells, gcaps, sources = {}, {}, {}
  for s, d in gdirs.items():
    recs, prov = _records(d, "humaneval.jsonl")
    gcells[s], gcaps[s] = style_cell(recs, 0.0), _cap(recs)
    sources[f"greedy:{s}"] = {"records": os.path.join(d, "humaneval.jsonl"),
                              "batches": len(recs), "provenance": prov}
  greedy = compare(gcells, gcaps)
  sampled = None
  if sdirs:
    from experiments.humaneval.screen import records_of
    scells, scaps = {}, {}
    for s, d in sdirs.items():
      recs, prov = _records(d, "screen.jsonl")
      recs = records_of(recs, "screen")
      t = float(recs[0]["config"]["temperature"]) if recs else 1.0
      scells[s], scaps[s] = style_cell(recs, t), _cap(recs)
      sources[f"sampled:{s}"] = {"records": os.path.join(d, "screen.jsonl"),
                                 "batches": len(recs), "provenance": prov}
    sampled = compare(scells, scaps)
  text = ("HumanEval prompt-style pilot (target only, SmolLM2-135M-Instruct unless the "
          "records say otherwise)\n\n" + markdown(greedy, sampled))
  os.makedirs(out.output_dir, exist_ok=True)
  with open(os.path.join(out.output_dir, "pilot.md"), "w") as f:
    f.write(text)
  with open(os.path.join(out.output_dir, "pilot.json"), "w") as f:
    json.dump({"greedy": greedy, "sampled": sampled, "sources": sources,
               "provenance": provenance.finish(stamp)}, f, indent=1)
  print(text)


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(main, define_flags=define_flags)
