"""Speculative vs target-only speed, and where a loop iteration's time goes.

For each (batch, temperature, drafter): tau, the wall-clock speedup of
``speculative_generate`` over ``generate`` measured side by side in this run
(same prompts and cache length, EOS off so both emit exactly
``max_new_tokens`` per row, compilation excluded), and the loop breakdown:

    iteration = (time(max_new_tokens) - time(1 token)) / loop iterations
    draft     = one draft step (K tokens or a tree) + the drafter's commit
    verify    = one target forward over K + 1 (or N + 1) tokens
    overhead  = iteration - (draft + verify)
    loop efficiency = (draft + verify) / iteration

where the 1-token run is prefill plus the first token (no loop iteration), and
draft and verify are each timed inside a jitted ``lax.fori_loop`` that carries
(and donates) their cache, as the real loop runs them, with their cache writes
and on the params the loop uses (``benchmarks.common``: ``draft_timer``,
``forward_timer``; marginal cost: 1 + n steps minus 1 step, over n).  Every
timer runs once per round, round-robin, and reports the median over
``--repeats`` rounds, so all see the same background load.  Target-only
``generate()`` gets the same breakdown against a bare 1-token forward.  At
batch 1, greedy, the same checkpoints also run through transformers assisted
generation (outputs must be identical) for the specjax / transformers ratio.

    python -m benchmarks.speculative            # defaults: batch 1,8; T 0,1; K 4
    python -m benchmarks.speculative --model=smollm2-135m-instruct \
        --random_draft_layers=1 --batch_sizes=1 --temperatures=0   # tau = 1: pure loop cost
    python -m benchmarks.speculative --model=smollm2-135m-instruct \
        --loop_drafters=lm_chain,eagle3_chain --batch_sizes=1,2,4,8,16   # shipped drafters, chat prompts

``--model=default`` (the preset) is the embedded target and draft (or the HF
checkpoints ``--target_dir`` / ``--draft_dir``); a real ``--model`` brings its shipped
draft LM and EAGLE-3 head.  ``--loop_drafters`` are this benchmark's drafter entries
(:data:`DRAFTER_KINDS` and the trees ``eagle3_tree:N[:TOP_K]``, ``suffix_tree:N``), not
the drafter-factory kinds of ``--drafters``.
"""

from __future__ import annotations

import dataclasses
import json
import os

from absl import app
import jax
import numpy as np

from benchmarks.common import call_timer, draft_timer, forward_timer, interleaved_medians
from experiments.common import cli, knobs, specs

# The chains by name; trees carry their node count (drafter_factory names, "lm_chain" = "chain").
DRAFTER_KINDS = ("lm_chain", "eagle1_chain", "eagle3_chain", "lookup_chain",
                 "lookup_eagle_chain")
_TREE_SYNTAX = ("a tree is eagle3_tree:N or eagle3_tree:N:TOP_K (eagle1_tree alike) or "
                "suffix_tree:N, with positive integers N (nodes) and TOP_K")


@dataclasses.dataclass(frozen=True)
class SpeculativeSpec:
  """This benchmark's own knobs: where the default models come from, the drafter
  entries it times, and the transformers peer."""
  target_dir: str = knobs.knob("", "--model=default: HF checkpoint dir of the target "
                               "('' = the embedded target)")
  draft_dir: str = knobs.knob("", "HF checkpoint dir of the draft LM ('' = the embedded draft, "
                              "or the one shipped for a real --model)")
  random_draft_layers: int = knobs.knob(
      0, "> 0: the draft LM is a random model of the target's architecture with this many "
      "layers (tau ~ 1: times the loop itself; overrides --draft_dir)")
  loop_drafters: tuple[str, ...] = knobs.knob(
      ("lm_chain",), "drafter entries timed: lm_chain (independent draft LM), eagle1_chain, "
      "eagle3_chain, eagle3_tree:N[:TOP_K] / eagle1_tree:N[:TOP_K] (EAGLE-2 dynamic tree with N "
      "nodes, depth K, TOP_K children per expanded node, default 8); EAGLE rows need the "
      "embedded target or a real --model (EAGLE-3 only); model-free: lookup_chain (prompt "
      "lookup, K drafts), suffix_tree:N (SuffixDecoding-style tree, N nodes, depth K)")
  hf_peer: bool = knobs.knob(True, "also time transformers assisted generation (batch 1, "
                             "greedy, lm_chain, HF checkpoint dirs)")

  def __post_init__(self):
    knobs.check_int(self, "random_draft_layers", 0)
    if not self.loop_drafters:
      raise knobs.KnobError("loop_drafters", (), "give at least one drafter entry")
    for name in self.loop_drafters:
      problem = drafter_name_problem(name)
      if problem:
        raise knobs.KnobError("loop_drafters", self.loop_drafters, f"entry {name!r} {problem}")


SPECS = knobs.Specs(
    specs.ModelSpec, specs.PromptSpec, specs.ChainSpec, specs.TemperaturesSpec,
    specs.BatchSizesSpec, specs.NewTokensSpec, specs.TimingSpec, specs.OutputSpec,
    SpeculativeSpec,
    presets=dict(model="default",  # the embedded target / draft (or --target_dir, --draft_dir)
                 k=4, temperatures=(0.0, 1.0), batch_sizes=(1, 8), max_new_tokens=64,
                 repeats=7,  # timed rounds: every timer runs once per round, round-robin
                 output="benchmarks/results/speculative.json"))


@dataclasses.dataclass(frozen=True)
class Run:
  """The benchmark's specs, by name."""
  model: specs.ModelSpec
  prompts: specs.PromptSpec
  chain: specs.ChainSpec
  temperatures: specs.TemperaturesSpec
  batch_sizes: specs.BatchSizesSpec
  new_tokens: specs.NewTokensSpec
  timing: specs.TimingSpec
  output: specs.OutputSpec
  loop: SpeculativeSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  r = Run(*SPECS.build())
  try:
    knobs.check_int(r.new_tokens, "max_new_tokens", 2)  # a loop step is (time(n) - time(1))
    eagle1 = [d for d in r.loop.loop_drafters if d.startswith("eagle1")]
    if eagle1 and not r.model.is_default:
      raise knobs.KnobError("loop_drafters", r.loop.loop_drafters, f"{eagle1}: a real --model "
                            "ships only an EAGLE-3 head (use eagle3_chain or eagle3_tree:N)")
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r


def load_models(r: Run):
  """``(t_dir, d_dir, target, tp, draft, dp, tok, model_set)``; a dir is None when
  the model has no HF checkpoint directory (then there is no transformers peer).
  ``model_set`` (:func:`experiments.common.model_sets.load_model_set`) is set for a real
  ``--model``: its shipped draft LM and EAGLE-3 head are the drafters."""
  from specjax.models import defaults, hf
  from specjax.models.transformer import Model
  loop, ms = r.loop, None
  if not r.model.is_default:
    from experiments.common.model_sets import load_model_set
    needs_eagle = any(d.startswith("eagle") for d in loop.loop_drafters)
    ms = load_model_set(r.model.model, draft="" if loop.random_draft_layers > 0
                        else (loop.draft_dir or "draft"),
                        eagle="eagle3" if needs_eagle else "")
    # No transformers peer here (benchmarks/assisted_vs_hf.py times it for real targets).
    t_dir, target, tp, tok = None, ms.target, ms.target_params, ms.tokenizer
  else:
    t_dir = loop.target_dir or defaults.default_model_dir("target")
    target, tp = hf.load_pretrained(t_dir)
    tok = hf.load_tokenizer(t_dir)
  if loop.random_draft_layers > 0:
    draft = Model(target.config.replace(num_hidden_layers=loop.random_draft_layers))
    return t_dir, None, target, tp, draft, draft.init_params(jax.random.key(1)), tok, ms
  if ms is not None:
    return None, None, target, tp, ms.draft, ms.draft_params, tok, ms
  d_dir = loop.draft_dir or defaults.default_model_dir("draft")
  draft, dp = hf.load_pretrained(d_dir)
  return t_dir, d_dir, target, tp, draft, dp, tok, ms


def draft_label(random_draft_layers: int, d_dir, model_set) -> str:
  """What the draft LM of the run was, for the JSON output."""
  if random_draft_layers > 0:
    return f"random {random_draft_layers}-layer"
  if model_set is not None:
    return f"shipped for {model_set.name}" + (" (EAGLE rows: its EAGLE-3 head)"
                                              if model_set.eagle is not None else "")
  return d_dir


def model_sources(t_dir, d_dir, model_set) -> dict:
  """``{name: path}`` of the weights the run loaded (a model set's sources, else the HF
  directories; ``None`` for a random draft)."""
  if model_set is not None:
    return dict(model_set.sources)
  return {"target": t_dir, "draft": d_dir}


def output_record(rows: list, target: str, draft: str, sources: dict, stamp: dict) -> dict:
  """The JSON record of a run: its models, devices and rows, with the sha256 of every
  model's weights and the run's provenance (:func:`specjax.provenance.stamped`)."""
  from specjax import provenance
  return provenance.stamped(dict(target=target, draft=draft, devices=str(jax.devices()),
                                 rows=rows), stamp, sources)


def hf_assisted(t_dir, d_dir, prompts, max_new_tokens, k, repeats):
  """Median seconds and outputs of transformers greedy assisted generation, one prompt at a time."""
  import time
  import torch
  from transformers import AutoModelForCausalLM
  torch.set_num_threads(os.cpu_count() or 1)
  tm = AutoModelForCausalLM.from_pretrained(t_dir, dtype=torch.float32).eval()
  dm = AutoModelForCausalLM.from_pretrained(d_dir, dtype=torch.float32).eval()
  dm.generation_config.num_assistant_tokens = k
  dm.generation_config.num_assistant_tokens_schedule = "constant"
  dm.generation_config.assistant_confidence_threshold = 0.0
  outs, times = [], []
  def run():
    res = []
    for p in prompts:
      ids = torch.tensor([p])
      with torch.inference_mode():
        o = tm.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=dm,
                        do_sample=False, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                        eos_token_id=None, pad_token_id=0)
      res.append(o[0, len(p):].tolist())
    return res
  outs = run()  # warm-up
  for _ in range(repeats):
    t0 = time.perf_counter()
    outs = run()
    times.append(time.perf_counter() - t0)
  return float(np.median(times)), outs


def _tree_values(name: str):
  """``(total_tokens, top_k)`` of a ``KIND:N[:TOP_K]`` entry (TOP_K default 8), or None."""
  try:
    values = [int(f) for f in name.split(":")[1:]]
  except ValueError:
    return None
  if len(values) not in (1, 2) or min(values) < 1:
    return None
  return values[0], (values[1] if len(values) == 2 else 8)


def parse_tree_spec(name: str, flag: str = "loop_drafters") -> tuple:
  """``(total_tokens, top_k)`` of a ``eagleX_tree:N[:TOP_K]`` entry (TOP_K default 8);
  ``UsageError`` naming ``--flag`` otherwise."""
  values = _tree_values(name)
  if values is None:
    raise app.UsageError(f"--{flag} entry {name!r}: {_TREE_SYNTAX}")
  return values


def drafter_name_problem(name: str) -> str:
  """What is wrong with a drafter entry ('' if nothing): :data:`DRAFTER_KINDS`,
  ``eagle1_tree:N[:TOP_K]``, ``eagle3_tree:N[:TOP_K]`` or ``suffix_tree:N``."""
  if name in DRAFTER_KINDS:
    return ""
  if name.startswith(("eagle1_tree:", "eagle3_tree:")) or (
      name.startswith("suffix_tree:") and name.count(":") == 1):  # suffix: N, the node count
    return "" if _tree_values(name) is not None else f"is not valid: {_TREE_SYNTAX}"
  return (f"is not one of {', '.join(DRAFTER_KINDS)}, eagle1_tree:N[:TOP_K], "
          "eagle3_tree:N[:TOP_K], suffix_tree:N")


def check_drafter_names(names, flag: str = "loop_drafters") -> None:
  """Refuse an unknown drafter entry before any model is loaded (``UsageError``
  naming ``--flag`` and the entry)."""
  for name in names:
    problem = drafter_name_problem(name)
    if problem:
      raise app.UsageError(f"--{flag} entry {name!r} {problem}")


def make_drafter(name, k, samp, draft, dp, target, tp, model_set=None):
  """``(drafter, params)`` for a drafter entry (``--loop_drafters``) -- ``k`` drafts
  per step for a chain, ``k`` levels for a tree -- from
  :func:`specjax.decoding.drafter_factory.make_drafter` (EAGLE rows: the head shipped
  for the real ``model_set``'s target, else the embedded default heads)."""
  from specjax.decoding import drafter_factory
  kind = name.partition(":")[0]
  n, top_k = parse_tree_spec(name) if ":" in name else (24, 8)  # trees only
  eagle = None
  if drafter_factory.needs(kind) == "eagle":
    # lookup_eagle_chain names no head: it takes the EAGLE-3 head as eagle3_chain does
    head = drafter_factory.eagle_head_kind(kind) or "eagle3"
    if model_set is not None:
      if head != "eagle3":
        raise app.UsageError(f"drafter {name!r}: a real --model ships only an EAGLE-3 head "
                             "(use eagle3_chain or eagle3_tree:N)")
      eagle = model_set.eagle
    else:
      from experiments.common.model_sets import load_model_set
      eagle = load_model_set("default", draft="", eagle=head).eagle
  sources = drafter_factory.DraftSources.build(target, tp, draft, dp, eagle)
  size = {"depth": k} if drafter_factory.is_tree(kind) else {"num_draft": k}
  return drafter_factory.make_drafter(kind, samp, sources, top_k=top_k, total_tokens=n, **size)


def _ms(sec: float) -> float:
  return round(sec * 1e3, 3)


def _chat_or_code_prompts(ms, tok, n: int, prompts: specs.PromptSpec) -> list:
  """``n`` held-out prompts: chat prompts of ``--prompt_sets`` (ShareGPT + HumanEval) for a
  real chat target, else code prefixes of the stdlib corpus."""
  from experiments.common.prompts import load_chat_prompts, load_eval_prompts
  if ms is not None and ms.is_chat:
    return [list(p.ids) for p in load_chat_prompts(ms.encode_chat, n, sets=prompts.prompt_sets,
                                                   max_tokens=prompts.max_prompt_tokens)]
  return [list(p.ids) for p in load_eval_prompts(n, tokenizer=tok)]


def _timing_row(r: Run, b: int, temp: float, dname: str, cache_len: int, med: dict, sp,
                ar) -> dict:
  """One output row from the medians ``med`` of the timers and the two runs' results
  (module docstring: iteration = (time(n) - time(1)) / iterations, ...)."""
  k, n_new = r.chain.k, r.new_tokens.max_new_tokens
  ar_sec, sp_sec, t1, verify, d_step = (med["gen"], med["spec"], med["fwd1"],
                                        med["verify"], med["draft"])
  ar_step = (ar_sec - med["gen_first"]) / (n_new - 1)
  iters = int(np.max(sp.stats.target_calls))
  it = (sp_sec - med["spec_first"]) / iters
  s = sp.stats.summary()
  speedup = ar_sec / sp_sec
  return dict(batch=b, temperature=temp, drafter=dname, k=k, max_new_tokens=n_new,
              cache_length=cache_len, tau=s["tau"], target_only_s=ar_sec,
              speculative_s=sp_sec, speedup=speedup,
              tokens_per_s_target_only=b * n_new / ar_sec,
              tokens_per_s_speculative=b * n_new / sp_sec,
              greedy_identical=(sp.to_lists() == ar.to_lists()) if temp == 0 else None,
              # target-only generate(): one loop step vs a bare 1-token forward
              t_target_1_ms=_ms(t1), generate_step_ms=_ms(ar_step),
              generate_overhead_ms=_ms(ar_step - t1),
              generate_overhead_share=(ar_step - t1) / t1,
              generate_loop_efficiency=t1 / ar_step,
              # speculative: one loop iteration vs its draft + verify pieces
              iterations=iters, iteration_ms=_ms(it), draft_ms=_ms(d_step),
              verify_ms=_ms(verify), overhead_ms=_ms(it - d_step - verify),
              overhead_share_of_verify=(it - d_step - verify) / verify,
              loop_efficiency=(d_step + verify) / it, iteration_over_verify=it / verify)


def _print_tables(rows: list) -> None:
  """The speed table and the loop-breakdown table (markdown)."""
  print()
  print("| drafter | batch | T | tau | target-only tok/s | speculative tok/s | speedup | "
        "specjax/HF assisted |")
  print("|---|---|---|---|---|---|---|---|")
  for r in rows:
    hf_ratio = f"{r['specjax_over_hf_speed']:.1f}x (identical={r['hf_identical']})" \
        if "specjax_over_hf_speed" in r else "-"
    print(f"| {r['drafter']} | {r['batch']} | {r['temperature']:g} | {r['tau']:.2f} | "
          f"{r['tokens_per_s_target_only']:.0f} | {r['tokens_per_s_speculative']:.0f} | "
          f"{r['speedup']:.2f} | {hf_ratio} |")
  print()
  print("| drafter | batch | T | iteration ms | draft ms | verify ms | overhead ms "
        "(share of verify) | loop eff. | generate step ms | 1-token fwd ms | generate overhead "
        "ms (share) | generate eff. |")
  print("|---|---|---|---|---|---|---|---|---|---|---|---|")
  for r in rows:
    print(f"| {r['drafter']} | {r['batch']} | {r['temperature']:g} | {r['iteration_ms']:.2f} | "
          f"{r['draft_ms']:.2f} | {r['verify_ms']:.2f} | {r['overhead_ms']:.2f} "
          f"({r['overhead_share_of_verify']:.0%}) | {r['loop_efficiency']:.2f} | "
          f"{r['generate_step_ms']:.2f} | {r['t_target_1_ms']:.2f} | "
          f"{r['generate_overhead_ms']:.2f} ({r['generate_overhead_share']:.0%}) | "
          f"{r['generate_loop_efficiency']:.2f} |")


def run() -> None:
  """Time every (batch, temperature, drafter) row and write ``--output``."""
  from specjax import verifiers
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.prompts import prepare_prompts
  from specjax.distributions import SamplingConfig
  from specjax.decoding.speculative import speculative_generate
  from specjax.models.transformer import Model

  from specjax import provenance

  r = build_run()
  stamp = provenance.stamp()
  t_dir, d_dir, target, tp, draft, dp, tok, ms = load_models(r)
  k, n_new, reps = r.chain.k, r.new_tokens.max_new_tokens, r.timing.repeats
  names, temps = r.loop.loop_drafters, r.temperatures.temperatures
  rows = []
  all_prompts = _chat_or_code_prompts(ms, tok, max(r.batch_sizes.batch_sizes), r.prompts)
  lossless = verifiers.get("lossless")
  for b in r.batch_sizes.batch_sizes:
    prompts = all_prompts[:b]
    p_tokens, p_lengths = prepare_prompts(prompts, target.config.vocab_size)
    ctx = int(np.mean([len(p) for p in prompts])) + n_new // 2
    drafters = {}
    for temp in temps:
      samp = SamplingConfig(temperature=temp)
      for dname in names:
        drafters[temp, dname] = make_drafter(dname, k, samp, draft, dp, target, tp, ms)
    # One cache length for every call of this batch size: attention reads all slots.
    cache_len = (max(128, max(len(p) for p in prompts)) + n_new
                 + max(d.tokens_per_step for d, _ in drafters.values()))
    fwd1 = forward_timer(target, tp, b, 1, ctx, cache_len)
    for temp in temps:
      samp = SamplingConfig(temperature=temp)
      key = jax.random.key(0)
      gen = lambda m: generate(target, tp, prompts, max_new_tokens=m, sampling=samp, key=key,
                               eos_token_id=None, cache_length=cache_len)
      ar = gen(n_new)
      for dname in names:
        drafter, dparams = drafters[temp, dname]
        spec = lambda m: speculative_generate(
            target, tp, drafter, dparams, lossless, prompts, max_new_tokens=m, sampling=samp,
            key=key, eos_token_id=None, cache_length=cache_len)
        sp = spec(n_new)
        t_target = target
        if drafter.target_hidden_layers:
          t_target = Model(target.config.replace(hidden_layers=tuple(drafter.target_hidden_layers)))
        # Every timer runs round-robin with the others (same background load).
        med = interleaved_medians(dict(
            gen=call_timer(gen, n_new), gen_first=call_timer(gen, 1),
            spec=call_timer(spec, n_new), spec_first=call_timer(spec, 1), fwd1=fwd1,
            verify=forward_timer(t_target, tp, b, drafter.tokens_per_step, ctx, cache_len),
            draft=draft_timer(drafter, dparams, t_target, tp, p_tokens, p_lengths, cache_len)),
            rounds=reps)
        row = _timing_row(r, b, temp, dname, cache_len, med, sp, ar)
        if temp == 0 and b == 1 and r.loop.hf_peer and dname == "lm_chain" and t_dir and d_dir:
          hf_sec, hf_out = hf_assisted(t_dir, d_dir, prompts, n_new, k, reps)
          row.update(hf_assisted_s=hf_sec, hf_identical=hf_out == sp.to_lists(),
                     specjax_over_hf_speed=hf_sec / row["speculative_s"])
        rows.append(row)
        print(json.dumps({kk: (round(v, 4) if isinstance(v, float) else v)
                          for kk, v in row.items()}), flush=True)
  _print_tables(rows)
  record = output_record(rows, t_dir or r.model.model,
                         draft_label(r.loop.random_draft_layers, d_dir, ms),
                         model_sources(t_dir, d_dir, ms), stamp)
  if r.output.output:
    os.makedirs(os.path.dirname(r.output.output) or ".", exist_ok=True)
    with open(r.output.output, "w") as f:
      json.dump(record, f, indent=2)


if __name__ == "__main__":
  cli.run_binary(run, define_flags=define_flags)
