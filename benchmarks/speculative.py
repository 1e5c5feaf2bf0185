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
    python -m benchmarks.speculative --target=smollm2-135m-instruct \
        --random_draft_layers=1 --batch_sizes=1 --temperatures=0   # tau = 1: pure loop cost
    python -m benchmarks.speculative --target=smollm2-135m-instruct \
        --drafters=lm_chain,eagle3_chain --batch_sizes=1,2,4,8,16   # shipped drafters, chat prompts
"""

from __future__ import annotations

import json
import os

from absl import app, flags
import jax
import numpy as np

from benchmarks.common import call_timer, draft_timer, forward_timer, interleaved_medians

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  flags.DEFINE_string("target_dir", "", "HF checkpoint dir of the target (default: embedded "
                      "target)")
  flags.DEFINE_string("draft_dir", "", "HF checkpoint dir of the draft (default: embedded draft)")
  flags.DEFINE_string("target", "", "registered model name, .gguf or HF dir for the target "
                      "(specjax.models.registry.load_model; overrides --target_dir)")
  flags.DEFINE_integer("random_draft_layers", 0,
                       "> 0: the draft LM is a random model of the target's architecture with "
                       "this many layers (tau ~ 1: times the loop itself; overrides --draft_dir)")
  flags.DEFINE_list("batch_sizes", ["1", "8"], "batch sizes")
  flags.DEFINE_list("temperatures", ["0", "1"], "sampling temperatures")
  flags.DEFINE_integer("k", 4, "draft length K")
  flags.DEFINE_integer("max_new_tokens", 64, "tokens generated per row")
  flags.DEFINE_integer("repeats", 7, "timed rounds (median; every timer runs once per "
                       "round, round-robin)")
  flags.DEFINE_list("drafters", ["lm_chain"],
                    "lm_chain (independent draft LM), eagle1_chain, eagle3_chain, "
                    "eagle3_tree:N[:TOP_K] / eagle1_tree:N[:TOP_K] (EAGLE-2 dynamic tree with N "
                    "nodes, depth K, TOP_K children per expanded node, default 8); EAGLE rows need "
                    "the embedded target or a real --target; model-free: lookup_chain (prompt "
                    "lookup, K drafts), suffix_tree:N (SuffixDecoding-style tree, N nodes, "
                    "depth K)")
  flags.DEFINE_boolean("hf_peer", True, "also time transformers assisted generation (batch 1, "
                       "greedy)")
  flags.DEFINE_integer("max_prompt_tokens", 256, "real --target: longest rendered chat prompt")
  flags.DEFINE_string("output", "benchmarks/results/speculative.json", "JSON output")


def load_models():
  """``(t_dir, d_dir, target, tp, draft, dp, tok, model_set)``; a dir is None when
  the model has no HF checkpoint directory (then there is no transformers peer).
  ``model_set`` (:func:`experiments.common.model_sets.load_model_set`) is set for a real
  ``--target``: its shipped draft LM and EAGLE-3 head are the drafters."""
  from specjax.models import defaults, hf
  from specjax.models.transformer import Model
  ms = None
  if FLAGS.target:
    from experiments.common.model_sets import load_model_set
    needs_eagle = any(d.startswith("eagle") for d in FLAGS.drafters)
    ms = load_model_set(FLAGS.target, draft="" if FLAGS.random_draft_layers > 0
                        else (FLAGS.draft_dir or "draft"),
                        eagle="eagle3" if needs_eagle else "")
    # No transformers peer here (benchmarks/assisted_vs_hf.py times it for real targets).
    t_dir, target, tp, tok = None, ms.target, ms.target_params, ms.tokenizer
  else:
    t_dir = FLAGS.target_dir or defaults.default_model_dir("target")
    target, tp = hf.load_pretrained(t_dir)
    tok = hf.load_tokenizer(t_dir)
  if FLAGS.random_draft_layers > 0:
    draft = Model(target.config.replace(num_hidden_layers=FLAGS.random_draft_layers))
    return t_dir, None, target, tp, draft, draft.init_params(jax.random.key(1)), tok, ms
  if ms is not None:
    return None, None, target, tp, ms.draft, ms.draft_params, tok, ms
  d_dir = FLAGS.draft_dir or defaults.default_model_dir("draft")
  draft, dp = hf.load_pretrained(d_dir)
  return t_dir, d_dir, target, tp, draft, dp, tok, ms


def draft_label(d_dir, model_set) -> str:
  """What the draft LM of the run was, for the JSON output."""
  if FLAGS.random_draft_layers > 0:
    return f"random {FLAGS.random_draft_layers}-layer"
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


def parse_tree_spec(name: str) -> tuple:
  """``(total_tokens, top_k)`` of a ``eagleX_tree:N[:TOP_K]`` entry (TOP_K default 8)."""
  fields = name.split(":")[1:]
  try:
    values = [int(f) for f in fields]
  except ValueError:
    values = []
  if len(values) not in (1, 2) or min(values) < 1:
    raise app.UsageError(f"--drafters entry {name!r}: a tree is eagle3_tree:N or "
                         "eagle3_tree:N:TOP_K with positive integers N (nodes) and TOP_K")
  return values[0], (values[1] if len(values) == 2 else 8)


# The chains by name; trees carry their node count (drafter_factory names, "lm_chain" = "chain").
DRAFTER_KINDS = ("lm_chain", "eagle1_chain", "eagle3_chain", "lookup_chain")


def check_drafter_names(names) -> None:
  """Refuse an unknown --drafters entry before any model is loaded."""
  for name in names:
    if name in DRAFTER_KINDS:
      continue
    if name.startswith(("eagle1_tree:", "eagle3_tree:")):
      parse_tree_spec(name)
      continue
    if name.startswith("suffix_tree:") and name.count(":") == 1:
      parse_tree_spec(name)  # N, the node count
      continue
    raise app.UsageError(f"--drafters entry {name!r} is not one of {', '.join(DRAFTER_KINDS)}, "
                         "eagle1_tree:N[:TOP_K], eagle3_tree:N[:TOP_K], suffix_tree:N")


def make_drafter(name, k, samp, draft, dp, target, tp, model_set=None):
  """``(drafter, params)`` for a --drafters entry, from
  :func:`specjax.decoding.drafter_factory.make_drafter` (EAGLE rows: the head shipped
  for the real ``model_set``'s target, else the embedded default heads)."""
  from specjax.decoding import drafter_factory
  kind = name.partition(":")[0]
  n, top_k = parse_tree_spec(name) if ":" in name else (24, 8)  # trees only
  eagle = None
  if drafter_factory.needs(kind) == "eagle":
    head = drafter_factory.eagle_head_kind(kind)
    if model_set is not None:
      if head != "eagle3":
        raise app.UsageError(f"--drafters entry {name!r}: a real --target ships only an "
                             "EAGLE-3 head (use eagle3_chain or eagle3_tree:N)")
      eagle = model_set.eagle
    else:
      from experiments.common.model_sets import load_model_set
      eagle = load_model_set("default", draft="", eagle=head).eagle
  sources = drafter_factory.DraftSources.build(target, tp, draft, dp, eagle)
  return drafter_factory.make_drafter(kind, samp, sources, num_draft=k, top_k=top_k,
                                      total_tokens=n)


def _ms(sec: float) -> float:
  return round(sec * 1e3, 3)


def _chat_or_code_prompts(ms, tok, n: int) -> list:
  """``n`` held-out prompts: ShareGPT + HumanEval chat prompts for a real chat target,
  else code prefixes of the stdlib corpus."""
  from experiments.common.prompts import load_chat_prompts, load_eval_prompts
  if ms is not None and ms.is_chat:
    return [list(p.ids) for p in load_chat_prompts(ms.encode_chat, n,
                                                   max_tokens=FLAGS.max_prompt_tokens)]
  return [list(p.ids) for p in load_eval_prompts(n, tokenizer=tok)]


def _timing_row(b: int, temp: float, dname: str, cache_len: int, med: dict, sp, ar) -> dict:
  """One output row from the medians ``med`` of the timers and the two runs' results
  (module docstring: iteration = (time(n) - time(1)) / iterations, ...)."""
  k, n_new = FLAGS.k, FLAGS.max_new_tokens
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


def main(_):
  from specjax import verifiers
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.prompts import prepare_prompts
  from specjax.distributions import SamplingConfig
  from specjax.decoding.speculative import speculative_generate
  from specjax.models.transformer import Model

  from specjax import provenance

  check_drafter_names(FLAGS.drafters)
  stamp = provenance.stamp()
  t_dir, d_dir, target, tp, draft, dp, tok, ms = load_models()
  k, n_new, reps = FLAGS.k, FLAGS.max_new_tokens, FLAGS.repeats
  rows = []
  all_prompts = _chat_or_code_prompts(ms, tok, max(int(b) for b in FLAGS.batch_sizes))
  lossless = verifiers.get("lossless")
  for b in map(int, FLAGS.batch_sizes):
    prompts = all_prompts[:b]
    p_tokens, p_lengths = prepare_prompts(prompts, target.config.vocab_size)
    ctx = int(np.mean([len(p) for p in prompts])) + n_new // 2
    drafters = {}
    for temp in map(float, FLAGS.temperatures):
      samp = SamplingConfig(temperature=temp)
      for dname in FLAGS.drafters:
        drafters[temp, dname] = make_drafter(dname, k, samp, draft, dp, target, tp, ms)
    # One cache length for every call of this batch size: attention reads all slots.
    cache_len = (max(128, max(len(p) for p in prompts)) + n_new
                 + max(d.tokens_per_step for d, _ in drafters.values()))
    fwd1 = forward_timer(target, tp, b, 1, ctx, cache_len)
    for temp in map(float, FLAGS.temperatures):
      samp = SamplingConfig(temperature=temp)
      key = jax.random.key(0)
      gen = lambda m: generate(target, tp, prompts, max_new_tokens=m, sampling=samp, key=key,
                               eos_token_id=None, cache_length=cache_len)
      ar = gen(n_new)
      for dname in FLAGS.drafters:
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
        row = _timing_row(b, temp, dname, cache_len, med, sp, ar)
        if temp == 0 and b == 1 and FLAGS.hf_peer and dname == "lm_chain" and t_dir and d_dir:
          hf_sec, hf_out = hf_assisted(t_dir, d_dir, prompts, n_new, k, reps)
          row.update(hf_assisted_s=hf_sec, hf_identical=hf_out == sp.to_lists(),
                     specjax_over_hf_speed=hf_sec / row["speculative_s"])
        rows.append(row)
        print(json.dumps({kk: (round(v, 4) if isinstance(v, float) else v)
                          for kk, v in row.items()}), flush=True)
  _print_tables(rows)
  record = output_record(rows, t_dir or FLAGS.target, draft_label(d_dir, ms),
                         model_sources(t_dir, d_dir, ms), stamp)
  os.makedirs(os.path.dirname(FLAGS.output) or ".", exist_ok=True)
  with open(FLAGS.output, "w") as f:
    json.dump(record, f, indent=2)


if __name__ == "__main__":
  define_flags()
  app.run(main)
