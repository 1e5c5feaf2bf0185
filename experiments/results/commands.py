"""The command that reruns a record, which is not always the command it recorded.

A record stamps the command line as typed (:func:`specjax.provenance.command_line`).
When a flag was left at its default and the default has changed since, that command
no longer reproduces the record. :func:`benchmark_rerun` reads what the record
itself shows (the token cap its longest answers reached) and pins it, so the
command printed under a table reruns the record today; the recorded command is
printed beside it, unedited. :func:`moved_output_rerun` does the same for a record
whose rows were moved to another directory after the run, and
:func:`acceptance_tree_rerun` for an acceptance record whose EAGLE-2 tree size was the
default of its day. The record file is never changed.
"""

from __future__ import annotations

import dataclasses
import os
import shlex

# experiments/benchmark.py's --max_new_tokens default for a real model; a record that
# reached another cap without the flag needs it pinned
from experiments.benchmark import REAL_MAX_NEW_TOKENS as BENCHMARK_MAX_NEW_TOKENS


@dataclasses.dataclass(frozen=True)
class RerunCommand:
  """``recorded``: the command as stamped; ``rerun``: the command that reproduces the
  record today; ``pinned``: the flags added and ``why`` (empty when none)."""

  recorded: str
  rerun: str
  pinned: tuple = ()
  why: str = ""


def token_cap(records: list[dict]) -> int | None:
  """The ``max_new_tokens`` a benchmark record ran at: the longest answer of any row
  with an answer that did not end at EOS (``eos_frac < 1``), from the per-prompt
  token counts of ``batch_timing``; None when every answer ended at EOS or the record
  has no per-prompt counts (the cap cannot be read)."""
  caps = []
  for r in records:
    res = r["result"]
    timing = res.get("batch_timing")
    if not timing or res.get("eos_frac", 1.0) >= 1.0:
      continue
    caps += [n for side in timing.values() for rep in side for n, _ in rep]
  return max(caps) if caps else None


def benchmark_rerun(records: list[dict]) -> RerunCommand:
  """The rerun command of an ``experiments/benchmark.py`` record (its first record's
  stamp): ``--max_new_tokens`` pinned when the command lacks it and the record's cap
  differs from today's default (:data:`BENCHMARK_MAX_NEW_TOKENS`)."""
  if not records or "provenance" not in records[0]:
    raise ValueError("records: a non-empty benchmark record with a provenance stamp is needed")
  cmd = records[0]["provenance"]["command"]
  flags_given = {a.split("=")[0] for a in shlex.split(cmd)}
  cap = token_cap(records)
  if "--max_new_tokens" in flags_given or cap is None or cap == BENCHMARK_MAX_NEW_TOKENS:
    return RerunCommand(cmd, cmd)
  flag = f"--max_new_tokens={cap}"
  why = (f"`{flag}` pinned from the record: its answers that did not end at EOS have "
         f"{cap} tokens, and the flag's default is {BENCHMARK_MAX_NEW_TOKENS} today")
  return RerunCommand(cmd, f"{cmd} {flag}", (flag,), why)


def moved_output_rerun(command: str, rel: str) -> RerunCommand:
  """The rerun command of a record whose rows were moved after the run: the recorded
  ``--output_dir`` replaced by the directory the record is committed in (``rel``'s
  directory); unchanged when they agree or the command names none."""
  here = os.path.dirname(rel)
  args = shlex.split(command)
  old = next((a.split("=", 1)[1] for a in args if a.startswith("--output_dir=")), None)
  if old is None or os.path.normpath(old) == os.path.normpath(here):
    return RerunCommand(command, command)
  rerun = " ".join(shlex.quote(f"--output_dir={here}") if a.startswith("--output_dir=")
                   else shlex.quote(a) for a in args)
  return RerunCommand(command, rerun, (f"--output_dir={here}",),
                      f"its rows were written to `{old}` and moved into `{here}`")


def acceptance_tree_rerun(command: str, records: list[dict]) -> RerunCommand:
  """The rerun command of ``experiments/acceptance.py`` records (``records``: those the
  command wrote): ``--eagle_total_tokens`` pinned when the command lacks it and the
  EAGLE-2 tree its cells ran differs from today's default
  (:class:`experiments.common.specs.EagleTreeSpec`; 24 before the run specs, 16 since).
  Every cell's key but the suffix tree's holds ``tree=depth,top_k,total_tokens``."""
  import dataclasses as dc

  from experiments.common.specs import EagleTreeSpec
  args = shlex.split(command)
  if "experiments.acceptance" not in args or any(
      a.split("=")[0] == "--eagle_total_tokens" for a in args):
    return RerunCommand(command, command)
  trees = {part for r in records if r["config"].get("kind") != "suffix_tree"
           for part in r["key"].split("|") if part.startswith("tree=")}
  default = {f.name: f.default for f in dc.fields(EagleTreeSpec)}["eagle_total_tokens"]
  totals = {t.split(",")[-1] for t in trees}
  if len(totals) != 1 or int(next(iter(totals))) == default:
    return RerunCommand(command, command)
  flag = f"--eagle_total_tokens={next(iter(totals))}"
  why = (f"`{flag}` pinned from the record: its cells' keys show "
         f"{', '.join(f'`{t}`' for t in sorted(trees))}, and the flag's default is {default} "
         "today")
  return RerunCommand(command, f"{command} {flag}", (flag,), why)


def rerun_lines(records: list[dict], rel: str) -> str:
  """``Commands: `...`; `...`.`` -- every distinct recorded command of ``records`` in
  order, each as it reruns (:func:`moved_output_rerun`, then
  :func:`acceptance_tree_rerun`), with what was changed."""
  seen = dict.fromkeys(r["provenance"]["command"] for r in records if r.get("provenance"))
  parts = []
  for cmd in seen:
    moved = moved_output_rerun(cmd, rel)
    tree = acceptance_tree_rerun(moved.rerun, [
        r for r in records if r.get("provenance", {}).get("command") == cmd])
    why = "; ".join(w for w in (moved.why, tree.why) if w)
    parts.append(f"`{tree.rerun}`" + (f" (recorded as `{cmd}`: {why})" if why else ""))
  return "Commands: " + "; ".join(parts) + "." if parts else ""
