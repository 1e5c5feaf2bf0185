"""Per-file and slowest-test tables from a pytest ``--durations=0`` log.

    python -m pytest -q --durations=0 > /tmp/durations.txt
    python -m tests.durations_table /tmp/durations.txt          # markdown to stdout

Sums setup + call + teardown per test and per file (module-scoped fixtures are
charged to the first test that uses them, as pytest reports them).
"""

from __future__ import annotations

import collections
import re
import sys

_LINE = re.compile(r"^\s*([0-9.]+)s (setup|call|teardown)\s+(\S+)")
_SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed).*) in ([0-9.]+)s")


def parse(text: str) -> dict:
  """``{"tests": {nodeid: seconds}, "summary": str, "wall_s": float}``."""
  tests = collections.defaultdict(float)
  summary, wall = "", float("nan")
  for line in text.splitlines():
    m = _LINE.match(line)
    if m:
      tests[m.group(3)] += float(m.group(1))
      continue
    s = _SUMMARY.search(line)
    if s and ("passed" in s.group(1) or "failed" in s.group(1)):
      summary, wall = s.group(1), float(s.group(2))
  return {"tests": dict(tests), "summary": summary, "wall_s": wall}


def markdown(parsed: dict, top: int = 25) -> str:
  tests = parsed["tests"]
  files = collections.defaultdict(lambda: [0.0, 0])
  for nodeid, sec in tests.items():
    f = files[nodeid.split("::")[0]]
    f[0] += sec
    f[1] += 1
  total = sum(v[0] for v in files.values())
  out = [f"Run: {parsed['summary']}, wall {parsed['wall_s']:.0f} s; "
         f"sum of per-test times {total:.0f} s.", "",
         "| file | tests | seconds | share |", "|---|---:|---:|---:|"]
  for name, (sec, n) in sorted(files.items(), key=lambda kv: -kv[1][0]):
    out.append(f"| {name} | {n} | {sec:.1f} | {100 * sec / max(total, 1e-9):.1f}% |")
  out += ["", f"Slowest {top} tests:", "", "| test | seconds |", "|---|---:|"]
  for nodeid, sec in sorted(tests.items(), key=lambda kv: -kv[1])[:top]:
    out.append(f"| {nodeid} | {sec:.1f} |")
  return "\n".join(out)


def main(argv: list[str]) -> None:
  if len(argv) != 2:
    raise SystemExit(f"usage: python -m tests.durations_table DURATIONS_LOG (got {argv[1:]})")
  with open(argv[1]) as f:
    print(markdown(parse(f.read())))


if __name__ == "__main__":
  main(sys.argv)
