"""Speculative decoding with an independent draft LM: specjax vs transformers'
assisted generation, same weights, same prompts, batch 1, greedy.

* target: SmolLM2-135M-Instruct (``--model``), float32 -- transformers loads the
  same dequantized weights from specjax's GGUF cache directory;
* draft: the distilled draft LM shipped for it (``--draft``), completed from the
  target's embedding and written as an HF directory
  (:func:`specjax.models.drafter_assets.export_draft_hf`) for transformers;
* specjax: ``speculative_generate`` with ``LMDrafter(K)`` and lossless
  verification at T = 0; transformers: ``generate(assistant_model=draft,
  do_sample=False)`` with ``num_assistant_tokens=K`` and the ``constant``
  schedule (transformers' default grows and shrinks K heuristically; fixing it
  makes both sides draft the same K per step);
* also target-only greedy ``generate()`` on both sides, for the speedups.

Every call is timed to completion, the four programs interleaved per repeat
(median of ``--repeats``; one warm-up each, compile excluded and reported).
Held-out ShareGPT and HumanEval chat prompts (``--num_prompts``, half each),
``--max_new_tokens`` per prompt, stopping at EOS on both sides. Reported:
tokens/s of each, specjax/transformers ratios, and whether the four outputs
are identical per prompt (all four equal target greedy when both are lossless;
float32 differences between the two libraries can flip a near-tie).

  python benchmarks/assisted_vs_hf.py [--num_prompts=4 --max_new_tokens=128 --k=4]
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time

from absl import app

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:
  sys.path.insert(0, _REPO)

from experiments.common import knobs, specs  # noqa: E402  (after the path fix above)

SPECS = knobs.Specs(specs.ModelSpec, specs.DraftSpec, specs.ChainSpec,
                    specs.NumPromptsSpec, specs.NewTokensSpec, specs.TimingSpec,
                    specs.ThreadsSpec,
                    presets=dict(model="smollm2-135m-instruct", k=4, num_prompts=4,
                                 max_new_tokens=128, repeats=3))


@dataclasses.dataclass(frozen=True)
class Run:
  """This benchmark's specs, by name (``--eagle`` is not used: no EAGLE head runs)."""
  model: specs.ModelSpec
  draft: specs.DraftSpec
  chain: specs.ChainSpec
  num_prompts: specs.NumPromptsSpec
  new_tokens: specs.NewTokensSpec
  timing: specs.TimingSpec
  threads: specs.ThreadsSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  r = Run(*SPECS.build())
  try:
    if r.model.is_default:
      raise knobs.KnobError("model", r.model.model, "give a registered real model or a "
                            ".gguf file (transformers loads its weights)")
    if r.draft.draft == "none":
      raise knobs.KnobError("draft", "none", "this benchmark needs a draft LM: 'draft' "
                            "(shipped) or a shipped-form directory")
    knobs.check_int(r.num_prompts, "num_prompts", 1)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r


def _round_robin(sides: dict, prompts: list, repeats: int) -> tuple:
  """``(compile_s, times, outs)``: a warm-up pass of every side over every prompt (every
  bucket compiles), then ``repeats`` rounds, every side once per round (the same
  background load for all); ``times[name]``: ``(seconds, tokens)`` per round."""
  compile_s = {}
  for name, fn in sides.items():  # warm-up: every prompt once (every bucket compiles)
    t0 = time.perf_counter()
    for p in prompts:
      fn(p)
    compile_s[name] = time.perf_counter() - t0
  times = {k: [] for k in sides}
  outs = {k: None for k in sides}
  for _ in range(repeats):
    for name, fn in sides.items():
      t0 = time.perf_counter()
      rows = [fn(p) for p in prompts]
      times[name].append((time.perf_counter() - t0, sum(map(len, rows))))
      outs[name] = rows
  return compile_s, times, outs


def _hf_models(r: Run, lm):
  """transformers target and draft (the shipped draft LM exported with the target's
  shared embedding), the draft set up as a constant-K assistant."""
  import torch
  import transformers

  from specjax.models import drafter_assets, registry
  draft_dir = drafter_assets.resolve(lm.name, r.draft.draft)
  hf_draft = os.path.join(registry.cache_root(), "drafters",
                          f"{lm.name}-{lm.sha256[:12]}-draft-hf")
  drafter_assets.export_draft_hf(draft_dir, hf_draft, lm.model, lm.params, lm.tokenizer,
                                 target_sha256=lm.sha256)
  t_hf = transformers.AutoModelForCausalLM.from_pretrained(lm.hf_dir,
                                                           torch_dtype=torch.float32).eval()
  d_hf = transformers.AutoModelForCausalLM.from_pretrained(hf_draft,
                                                           torch_dtype=torch.float32).eval()
  d_hf.generation_config.num_assistant_tokens = r.chain.k
  d_hf.generation_config.num_assistant_tokens_schedule = "constant"
  return t_hf, d_hf


def main(argv):
  del argv
  r = build_run()
  import jax
  import torch

  from experiments.common.model_sets import load_model_set
  from experiments.common.prompts import load_chat_prompts
  from specjax import verifiers
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.drafter_factory import make_drafter
  from specjax.decoding.speculative import speculative_generate
  from specjax.distributions import SamplingConfig
  from specjax.models import registry

  torch.set_num_threads(r.threads.threads)
  lm = registry.load_model(r.model.model)
  ms = load_model_set(r.model.model, draft=r.draft.draft, eagle="")
  t_hf, d_hf = _hf_models(r, lm)
  eos = lm.config.eos_token_id
  eos = eos[0] if isinstance(eos, (tuple, list)) else eos
  prompts = [list(p.ids)
             for p in load_chat_prompts(ms.encode_chat, r.num_prompts.num_prompts)]
  n = r.new_tokens.max_new_tokens
  drafter, _ = make_drafter("chain", SamplingConfig(0.0), ms.draft_sources(),
                            num_draft=r.chain.k)
  rule = verifiers.get("lossless")

  def sj_target(p):
    res = generate(ms.target, ms.target_params, [p], max_new_tokens=n)
    jax.block_until_ready(res.tokens)
    return res.to_lists()[0]

  def sj_spec(p):
    res = speculative_generate(ms.target, ms.target_params, drafter, ms.draft_params, rule,
                               [p], max_new_tokens=n)
    jax.block_until_ready(res.tokens)
    return res.to_lists()[0]

  def hf_call(p, assistant):
    ids = torch.tensor([p])
    kw = dict(max_new_tokens=n, do_sample=False, eos_token_id=eos, pad_token_id=eos,
              attention_mask=torch.ones_like(ids))
    if assistant:
      kw["assistant_model"] = d_hf
    with torch.inference_mode():
      out = t_hf.generate(ids, **kw)[0, len(p):].tolist()
    return out[:out.index(eos) + 1] if eos in out else out

  sides = {"specjax target": sj_target, "specjax spec": sj_spec,
           "hf target": lambda p: hf_call(p, False), "hf assisted": lambda p: hf_call(p, True)}
  compile_s, times, outs = _round_robin(sides, prompts, r.timing.repeats)
  load = os.getloadavg()[0]
  print(f"\n{lm.name} target, shipped draft LM ({ms.draft.config.num_hidden_layers} layer), "
        f"K={r.chain.k}, {len(prompts)} prompts x {n} new tokens, batch 1, greedy, "
        f"{r.timing.repeats} rounds; load average {load:.2f}")
  print("| program | tokens/s (median) | warm-up s |")
  print("|---|---|---|")
  rate = {}
  for name in sides:
    rate[name] = statistics.median(tok / s for s, tok in times[name])
    print(f"| {name} | {rate[name]:.1f} | {compile_s[name]:.1f} |")
  print(f"\nspecjax spec / hf assisted tokens/s: {rate['specjax spec'] / rate['hf assisted']:.2f}")
  print(f"speedup over own target-only: specjax {rate['specjax spec'] / rate['specjax target']:.2f}, "
        f"transformers {rate['hf assisted'] / rate['hf target']:.2f}")
  same = [outs["specjax spec"][i] == outs["specjax target"][i] == outs["hf assisted"][i]
          == outs["hf target"][i] for i in range(len(prompts))]
  print(f"identical outputs (all four) per prompt: {same}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
