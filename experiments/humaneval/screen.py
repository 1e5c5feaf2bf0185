"""The screen-then-sample HumanEval design (``experiments/humaneval_screen.py``, whose
docstring states it): the stage configurations and their PRNG keys, the screening
selection and the predicted power of the paired stage, the paired summary, and one
run of a stage with its records and report (:func:`run_screen`).

Tests import the statistics and record helpers from here
(tests/experiments/test_humaneval_screen.py); ``experiments/humaneval_pilot.py`` reads
screening records with :func:`records_of`."""

from __future__ import annotations

import dataclasses
import json
import os
from statistics import NormalDist

import numpy as np

from experiments.humaneval import methods as humaneval_methods
from experiments.humaneval.methods import Method

STAGES = ("screen", "paired")
MDE_FACTOR = NormalDist().inv_cdf(0.975) + NormalDist().inv_cdf(0.80)  # ~2.80


# --------------------------------------------------------------------------- design


def problem_key(seed: int, problem_index: int):
  """The PRNG key of one problem; its sample ``s`` is row ``s`` of that key's
  per-row streams (``row_offset = s`` in the decoding loops)."""
  import jax
  return jax.random.fold_in(jax.random.key(seed), problem_index)


def sample_blocks(start: int, stop: int, batch_size: int) -> list[tuple[int, int]]:
  """``[start, stop)`` cut into consecutive blocks of at most ``batch_size`` samples."""
  if batch_size < 1 or not 0 <= start <= stop:
    raise ValueError(f"need batch_size >= 1 and 0 <= start <= stop, got batch_size="
                     f"{batch_size}, start={start}, stop={stop}")
  return [(a, min(a + batch_size, stop)) for a in range(start, stop, batch_size)]


def stage_configs(stage: str, problems: list[int], methods: list[Method], *, temperature: float,
                  screen_samples: int, paired_samples: int, batch_size: int, settings: str,
                  fingerprints: dict | None = None, round_tokens: int = 0) -> list[dict]:
  """One configuration per (method, problem, block of samples) of a stage.

  ``screen``: the target only, samples ``[0, screen_samples)`` of every problem in
  ``problems`` (indices into the problem list). ``paired``: every method (the target
  first) on ``problems`` (the selected ones), samples ``[screen_samples,
  screen_samples + paired_samples)``: every method's block has a target block with
  the same problem and samples, hence the same keys (:func:`problem_key`; with
  ``round_tokens > 0`` for the first round only, see
  :func:`experiments.humaneval.methods.run_method`). The record key holds
  ``settings`` (model hash, style, cap, seed), the stage, the method with its
  fingerprint, T, the rounds, the problem and the block."""
  if stage not in STAGES:
    raise ValueError(f"stage={stage!r}: allowed {STAGES}")
  if temperature <= 0:
    raise ValueError(f"temperature={temperature!r} must be > 0 (screening needs samples)")
  if stage == "screen":
    methods, (lo, hi) = [Method(humaneval_methods.TARGET)], (0, screen_samples)
  else:
    methods = [Method(humaneval_methods.TARGET)] + [m for m in methods if not m.is_target]
    lo, hi = screen_samples, screen_samples + paired_samples
  out = []
  for m in methods:
    fp = "" if m.is_target else (fingerprints or {}).get(m.spec, "")
    for i in problems:
      for a, b in sample_blocks(lo, hi, batch_size):
        c = {"key": f"{settings}-{stage}-{m.spec}-{fp}-T{temperature:g}-r{round_tokens}-P{i}"
                    f"-s{a}-{b}",
             "stage": stage, "method": m.spec, "temperature": float(temperature),
             "problem": int(i), "start": a, "stop": b, "sample": a,
             "round_tokens": int(round_tokens)}
        out.append(c)
  return out


def records_of(records: list[dict], stage: str) -> list[dict]:
  return [r for r in records if r["config"].get("stage") == stage]


def screen_counts(records: list[dict], samples: int | None = None) -> dict:
  """``{task_id: (passes, samples)}`` over the screening records (target only);
  with ``samples`` given, only problems whose screening is complete (exactly that many
  distinct samples) are kept."""
  seen: dict = {}
  for r in records_of(records, "screen"):
    for p in r["result"]["problems"]:
      seen.setdefault(p["task_id"], {})[int(p["sample"])] = bool(p["passed"])
  out = {t: (sum(s.values()), len(s)) for t, s in seen.items()}
  if samples is not None:
    out = {t: cn for t, cn in out.items() if cn[1] == samples}
  return out


def select_problems(counts: dict) -> list[str]:
  """Task ids whose screening pass count is strictly between 0 and the sample count,
  in task order."""
  def index(t):
    return int(t.rsplit("/", 1)[1]) if "/" in t else t
  return sorted((t for t, (c, n) in counts.items() if 0 < c < n), key=index)


def predicted_mde(counts: dict, paired_samples: int) -> dict | None:
  """The paired stage's SD of per-problem differences and MDE at 80% power if the
  method changed nothing, from the screening counts of the selected problems.

  Each selected problem's difference of two pass fractions over ``paired_samples``
  samples each has variance ``2 p (1 - p) / S`` when the two methods' samples are
  independent (pairing the keys can only lower it), with ``p (1 - p)`` estimated
  without bias by ``c (n - c) / (n (n - 1))``; the SD is the root of the mean variance
  over the ``m`` selected problems and ``MDE = 2.80 SD / sqrt(m)``. None when nothing
  is selected."""
  if paired_samples < 1:
    raise ValueError(f"paired_samples={paired_samples!r} must be >= 1")
  sel = [counts[t] for t in select_problems(counts)]
  if not sel:
    return None
  var = np.array([2.0 * c * (n - c) / (n * (n - 1)) / paired_samples for c, n in sel])
  sd = float(np.sqrt(var.mean()))
  return {"problems": len(sel), "paired_samples": int(paired_samples), "sd": sd,
          "mde80": float(MDE_FACTOR * sd / np.sqrt(len(sel)))}


def screen_report(counts: dict, paired_samples: tuple[int, ...] = (20, 40)) -> dict:
  """The screening in numbers: problems screened, never / sometimes / always passed,
  the target's sampled pass@1 over all screened problems (unbiased, with a bootstrap
  interval) and over the selected ones, the selected task ids and
  :func:`predicted_mde` for each paired sample count."""
  from experiments.common.bootstrap import bootstrap_ci
  if not counts:
    raise ValueError("no complete screening record: run --stage=screen first")
  rates = np.array([c / n for c, n in counts.values()])
  sel = select_problems(counts)
  lo, hi = bootstrap_ci(rates)
  return {"screened": len(counts), "never": int(sum(c == 0 for c, _ in counts.values())),
          "always": int(sum(c == n for c, n in counts.values())), "selected": len(sel),
          "pass@1": float(rates.mean()), "ci95": [lo, hi],
          "selected_pass@1": float(np.mean([counts[t][0] / counts[t][1] for t in sel]))
          if sel else None,
          "selected_tasks": sel,
          "predicted": [predicted_mde(counts, s) for s in paired_samples]}


def paired_summary(records: list[dict], selected: list[str], max_new_tokens: int | None = None
                   ) -> tuple[list[dict], list[dict]]:
  """``(rows, power)`` of the paired stage: :func:`experiments.humaneval.summary.summarize`
  (pass@1, paired differences to the target and matched baselines, tau, outcomes) and
  :func:`~experiments.humaneval.summary.power_rows` (SD, MDE, verdicts) over the paired
  records of the ``selected`` problems only."""
  from experiments.humaneval.summary import gap_contrasts, power_rows, summarize
  keep = set(selected)
  recs = []
  for r in records_of(records, "paired"):
    probs = [p for p in r["result"]["problems"] if p["task_id"] in keep]
    if probs:
      cfg = {k: v for k, v in r["config"].items() if k != "method" or v != "target"}
      recs.append({**r, "config": cfg, "result": {**r["result"], "problems": probs}})
  if not recs:
    return [], []
  rows = summarize(recs, max_new_tokens=max_new_tokens)
  return rows, power_rows(rows, gap_contrasts(rows, recs))


def report_markdown(title: str, screen: dict, rows: list[dict], power: list[dict]) -> str:
  from experiments.humaneval.summary import markdown
  lines = [title, "", "Screening (target only):", "",
           "| screened | never passed | always passed | selected (0 < c < n) | pass@1 [95% CI] "
           "| pass@1 on the selected |", "|---:|---:|---:|---:|:---|:---|",
           f"| {screen['screened']} | {screen['never']} | {screen['always']} | "
           f"{screen['selected']} | {screen['pass@1']:.3f} [{screen['ci95'][0]:.3f}, "
           f"{screen['ci95'][1]:.3f}] | "
           + ("-" if screen["selected_pass@1"] is None else f"{screen['selected_pass@1']:.3f}")
           + " |", "", "Predicted power of the paired stage under no effect (independent "
           "samples; SD of the per-problem difference, MDE = 2.80 SD / sqrt(selected)):", "",
           "| paired samples per problem and method | selected | SD | MDE (80% power) |",
           "|---:|---:|---:|---:|"]
  for p in screen["predicted"]:
    if p is not None:
      lines.append(f"| {p['paired_samples']} | {p['problems']} | {p['sd']:.3f} | "
                   f"{p['mde80']:.3f} |")
  lines += ["", "Selected: " + (", ".join(screen["selected_tasks"]) or "none")]
  if rows:
    lines += ["", markdown(rows, "Paired stage (selected problems only; fresh samples, the "
                                 "same keys for every method):").rstrip("\n")]
  return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- a run


def make_evaluate(target, target_params, sources, prompts, methods, *, seed: int,
                  max_new_tokens: int, finish=None, stopped=None, eos=()):
  """``evaluate(config) -> {"problems": [...]}``: one call of the config's method on
  samples ``[start, stop)`` of problem ``config["problem"]`` (``prompts[problem]``
  repeated), keyed by :func:`problem_key`; each row becomes ``{"task_id", "sample",
  "tokens", ...}`` and ``finish(problem, rows)`` (the decoded answers and sandbox
  verdicts; None: only the tokens are kept, ``"ids"``). ``config["round_tokens"]``,
  ``stopped`` and ``eos`` go to :func:`experiments.humaneval.methods.run_method`."""
  by_spec = {m.spec: m for m in methods}
  by_spec.setdefault(humaneval_methods.TARGET, Method(humaneval_methods.TARGET))
  built: dict = {}

  def evaluate(c):
    i, a, b = c["problem"], c["start"], c["stop"]
    m = by_spec[c["method"]]
    rows, stats = humaneval_methods.run_method(
        m, target, target_params, sources, [prompts[i]] * (b - a), temperature=c["temperature"],
        key=problem_key(seed, i), row_offset=a, max_new_tokens=max_new_tokens, built=built,
        round_tokens=c.get("round_tokens", 0), stopped=stopped, eos=eos)
    out = finish(i, rows) if finish is not None else [{"ids": list(map(int, r))} for r in rows]
    for s, (o, r) in enumerate(zip(out, rows)):
      o.update({"sample": a + s, "tokens": len(r)})
      if stats is not None:
        o["accepted"], o["calls"] = int(stats[0][s]), int(stats[1][s])
    return {"problems": out}

  return evaluate


def _decoder(ms):
  eos = humaneval_methods.eos_ids(ms.target.config.eos_token_id)
  return lambda r: ms.tokenizer.decode([x for x in r if x not in eos], skip_special_tokens=True)


def _sandbox_finish(ms, problems, style: str, timeout_s: float):
  """``finish(problem, rows)``: decode, extract the program (style's rule), run it."""
  from specjax.data import humaneval, sandbox
  decode = _decoder(ms)
  box = sandbox.SandboxConfig(timeout_s=timeout_s)
  extract = humaneval.program_from_chat if style == "chat" else humaneval.program_from_completion

  def finish(i, rows):
    p = problems[i]
    texts = [decode(r) for r in rows]
    res = humaneval.evaluate([p], [[extract(p, t) for t in texts]], box)[0]
    return [{"task_id": p.task_id, "answer": t, "status": x.status, "passed": x.passed}
            for t, x in zip(texts, res)]

  return finish


class NoScreeningRecords(ValueError):
  """The records file holds no screening record of the run's settings."""


@dataclasses.dataclass(frozen=True)
class ScreenSettings:
  """One run of the design (the binary's flags of the same names).

  Attributes:
    model: the target (:func:`experiments.humaneval.run.load_run`).
    style: ``chat`` or ``completion`` prompts (:mod:`specjax.data.humaneval`).
    stage: ``screen`` or ``paired`` (:data:`STAGES`; ``paired`` resumes the screening).
    temperature: the sampling temperature of both stages (> 0).
    screen_samples, paired_samples: target samples per problem in the screening;
      fresh samples per selected problem and method in the paired stage.
    max_new_tokens, batch_size: tokens per answer; rows per call (consecutive
      samples of one problem).
    round_tokens, paired_round_tokens: decoding rounds of the screening and of the
      paired stage (0: one call; :func:`experiments.humaneval.methods.run_method`).
    limit, seed, timeout_s: first N problems; PRNG seed; sandbox limit per program.
  """

  model: str
  style: str
  stage: str
  temperature: float
  screen_samples: int
  paired_samples: int
  max_new_tokens: int
  batch_size: int
  round_tokens: int = 0
  paired_round_tokens: int = 0
  limit: int = 164
  seed: int = 0
  timeout_s: float = 10.0


def write_report(records, s: ScreenSettings, output_dir: str, ms_name: str, settings: str,
                 n_problems: int) -> str:
  """``screen.md`` and ``screen_summary.json`` in ``output_dir`` from the run's records;
  returns the markdown."""
  from specjax import provenance
  counts = screen_counts(records, s.screen_samples)
  screen = screen_report(counts, tuple(sorted({20, 40, s.paired_samples})))
  rows, power = paired_summary(records, screen["selected_tasks"], s.max_new_tokens)
  title = (f"HumanEval screen-then-sample ({s.style} prompts, {ms_name}, T = "
           f"{s.temperature:g}, max_new_tokens={s.max_new_tokens}, {n_problems} "
           f"problems; screening {s.screen_samples} samples, paired "
           f"{s.paired_samples} fresh samples per selected problem and method)")
  text = report_markdown(title, screen, rows, power)
  with open(os.path.join(output_dir, "screen.md"), "w") as f:
    f.write(text)
  with open(os.path.join(output_dir, "screen_summary.json"), "w") as f:
    json.dump(provenance.stamped({"settings": settings, "screen": screen, "counts": counts,
                                  "rows": rows, "power": power}, provenance.stamp()), f, indent=1)
  return text


def _run_evaluate(ms, problems, prompts, methods, s: ScreenSettings):
  """:func:`make_evaluate` of a loaded run: answers decoded, checked in the sandbox."""
  from specjax.data import humaneval
  decode = _decoder(ms)
  return make_evaluate(
      ms.target, ms.target_params, ms.draft_sources(), prompts, methods, seed=s.seed,
      max_new_tokens=s.max_new_tokens,
      finish=_sandbox_finish(ms, problems, s.style, s.timeout_s),
      stopped=((lambda r: humaneval.completion_stopped(decode(r)))
               if s.style == "completion" else None),
      eos=humaneval_methods.eos_ids(ms.target.config.eos_token_id))


def run_screen(s: ScreenSettings, methods: list[Method], output_dir: str,
               summarize_only: bool = False) -> str:
  """Run (or resume) the screening and, with ``stage="paired"``, the paired stage on
  the problems it selects; with ``summarize_only`` run nothing and summarize the
  finished records. Records go to ``output_dir/screen.jsonl``; returns the report
  (:func:`write_report`). Raises :class:`NoScreeningRecords` when no screening record
  of these settings exists."""
  from experiments.common import sweep
  from experiments.humaneval.run import load_run
  from specjax.data import humaneval
  path = os.path.join(output_dir, "screen.jsonl")
  problems, ms, prompts, fps = load_run(methods, model=s.model, limit=s.limit, style=s.style)
  os.makedirs(output_dir, exist_ok=True)
  settings = f"{ms.sha256[:8]}-{humaneval.PROMPT_FORMS[s.style]}-n{s.max_new_tokens}" \
             f"-seed{s.seed}"
  common = dict(temperature=s.temperature, screen_samples=s.screen_samples,
                paired_samples=s.paired_samples, batch_size=s.batch_size,
                settings=settings, fingerprints=fps)
  evaluate = _run_evaluate(ms, problems, prompts, methods, s)
  screen_cfgs = stage_configs("screen", list(range(len(problems))), methods, **common,
                              round_tokens=s.round_tokens)
  wanted = {c["key"] for c in screen_cfgs}
  if summarize_only:
    records = sweep.load_records(path)
  else:
    records = sweep.run_sweep(screen_cfgs, evaluate, path, desc="screen")
  if s.stage == "paired" and not summarize_only:
    counts = screen_counts([r for r in records if r["key"] in wanted], s.screen_samples)
    index = {p.task_id: i for i, p in enumerate(problems)}
    chosen = [index[t] for t in select_problems(counts)]
    print(f"paired stage: {len(chosen)} selected problems x {len(methods)} methods x "
          f"{s.paired_samples} samples")
    paired_cfgs = stage_configs("paired", chosen, methods, **common,
                                round_tokens=s.paired_round_tokens)
    wanted |= {c["key"] for c in paired_cfgs}
    records = records + sweep.run_sweep(paired_cfgs, evaluate, path, desc="paired")
  elif s.stage == "paired":
    wanted |= {r["key"] for r in records_of(records, "paired")
               if r["key"].startswith(settings)}
  records = [r for r in records if r["key"] in wanted]
  if not records_of(records, "screen"):
    raise NoScreeningRecords(f"no screening record of these settings in {path}")
  return write_report(records, s, output_dir, ms.name, settings, len(problems))
