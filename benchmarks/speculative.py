"""Speculative vs target-only speed on the default models (issue 4).

For each (batch, temperature): tau, wall-clock speedup of
``speculative_generate`` over ``generate`` measured side by side in this run
(same prompts, EOS off so both emit exactly ``max_new_tokens`` per row,
compilation excluded), per-call timings and the loop efficiency

    ideal = tau * t_target(1) / (K * t_draft(1) + t_target(K + 1))
    efficiency = measured speedup / ideal

and, at batch 1 greedy, the same checkpoints through transformers assisted
generation (outputs must be identical) with the specjax / transformers ratio.

    python -m benchmarks.speculative            # defaults: batch 1,8; T 0,1; K 4
"""

from __future__ import annotations

import json
import os

from absl import app, flags
import jax
import numpy as np

from benchmarks.common import forward_latency, timed

FLAGS = flags.FLAGS
flags.DEFINE_string("target_dir", "", "HF checkpoint dir of the target (default: embedded target)")
flags.DEFINE_string("draft_dir", "", "HF checkpoint dir of the draft (default: embedded draft)")
flags.DEFINE_list("batch_sizes", ["1", "8"], "batch sizes")
flags.DEFINE_list("temperatures", ["0", "1"], "sampling temperatures")
flags.DEFINE_integer("k", 4, "draft length K")
flags.DEFINE_integer("max_new_tokens", 64, "tokens generated per row")
flags.DEFINE_integer("repeats", 3, "timed repetitions (median)")
flags.DEFINE_list("drafters", ["lm_chain"],
                  "lm_chain (independent draft LM), eagle1_chain, eagle3_chain, "
                  "eagle3_tree:N / eagle1_tree:N (EAGLE-2 dynamic tree with N nodes, depth K, "
                  "top_k 8); EAGLE rows need the embedded target")
flags.DEFINE_boolean("hf_peer", True, "also time transformers assisted generation (batch 1, greedy)")
flags.DEFINE_string("output", "benchmarks/results/speculative.json", "JSON output")


def load_models():
  from specjax.models import defaults, hf
  t_dir = FLAGS.target_dir or defaults.default_model_dir("target")
  d_dir = FLAGS.draft_dir or defaults.default_model_dir("draft")
  target, tp = hf.load_pretrained(t_dir)
  draft, dp = hf.load_pretrained(d_dir)
  tok = hf.load_tokenizer(t_dir)
  return t_dir, d_dir, target, tp, draft, dp, tok


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


def make_drafter(name, k, samp, draft, dp, target, tp):
  """``(drafter, params, t_draft_step_fn_or_None)`` for a --drafters entry."""
  from specjax.decoding.drafters import LMDrafter
  if name == "lm_chain":
    return LMDrafter(k, samp, draft), dp
  from specjax.decoding.eagle_drafter import EagleDrafter
  from specjax.models.eagle import load_default_eagle
  kind, _, rest = name.partition("_")
  head, hp, d2t = load_default_eagle(kind)[:3]
  params = EagleDrafter.make_params(hp, target, tp, d2t)
  if rest == "chain":
    return EagleDrafter(k, samp, head=head), params
  if rest.startswith("tree:"):
    n = int(rest.split(":")[1])
    return EagleDrafter(k, samp, head=head, tree_kind="dynamic", top_k=8, total_tokens=n), params
  raise ValueError(f"unknown drafter {name!r}")


def main(_):
  from experiments.prompts import load_eval_prompts
  from specjax import verifiers
  from specjax.decoding.autoregressive import generate
  from specjax.distributions import SamplingConfig
  from specjax.decoding.speculative import speculative_generate

  t_dir, d_dir, target, tp, draft, dp, tok = load_models()
  k, n_new = FLAGS.k, FLAGS.max_new_tokens
  rows = []
  max_b = max(int(b) for b in FLAGS.batch_sizes)
  all_prompts = [list(p.ids) for p in load_eval_prompts(max_b, tokenizer=tok)]
  for b in map(int, FLAGS.batch_sizes):
    prompts = all_prompts[:b]
    ctx = int(np.mean([len(p) for p in prompts])) + n_new // 2
    cache_len = 128 + n_new + k + 1
    t1 = forward_latency(target, tp, b, 1, ctx, cache_len)
    tk = forward_latency(target, tp, b, k + 1, ctx, cache_len)
    d1 = forward_latency(draft, dp, b, 1, ctx, cache_len)
    for temp in map(float, FLAGS.temperatures):
      samp = SamplingConfig(temperature=temp)
      key = jax.random.key(0)
      ar_sec, ar = timed(generate, target, tp, prompts, max_new_tokens=n_new, sampling=samp,
                         key=key, eos_token_id=None, repeats=FLAGS.repeats)
      for dname in FLAGS.drafters:
        drafter, dparams = make_drafter(dname, k, samp, draft, dp, target, tp)
        sp_sec, sp = timed(speculative_generate, target, tp, drafter, dparams,
                           verifiers.get("lossless"), prompts, max_new_tokens=n_new,
                           sampling=samp, key=key, eos_token_id=None, repeats=FLAGS.repeats)
        s = sp.stats.summary()
        speedup = ar_sec / sp_sec
        row = dict(batch=b, temperature=temp, drafter=dname, k=k, max_new_tokens=n_new,
                   tau=s["tau"], target_only_s=ar_sec, speculative_s=sp_sec, speedup=speedup,
                   tokens_per_s_target_only=b * n_new / ar_sec,
                   tokens_per_s_speculative=b * n_new / sp_sec,
                   greedy_identical=(sp.to_lists() == ar.to_lists()) if temp == 0 else None)
        if dname == "lm_chain":  # per-call timings of the draft LM: loop efficiency
          ideal = s["tau"] * t1 / (k * d1 + tk)
          row.update(t_target_1=t1, t_target_k1=tk, t_draft_1=d1, ideal_speedup=ideal,
                     loop_efficiency=speedup / ideal)
        if temp == 0 and b == 1 and FLAGS.hf_peer and dname == "lm_chain":
          hf_sec, hf_out = hf_assisted(t_dir, d_dir, prompts, n_new, k, FLAGS.repeats)
          row.update(hf_assisted_s=hf_sec, hf_identical=hf_out == sp.to_lists(),
                     specjax_over_hf_speed=hf_sec / sp_sec)
        rows.append(row)
        print(json.dumps({kk: (round(v, 4) if isinstance(v, float) else v)
                          for kk, v in row.items()}), flush=True)
  print()
  print("| drafter | batch | T | tau | target-only tok/s | speculative tok/s | speedup | ideal | "
        "loop eff. | specjax/HF assisted |")
  print("|---|---|---|---|---|---|---|---|---|---|")
  for r in rows:
    hf_ratio = f"{r['specjax_over_hf_speed']:.1f}x (identical={r['hf_identical']})" \
        if "specjax_over_hf_speed" in r else "-"
    ideal = f"{r['ideal_speedup']:.2f}" if "ideal_speedup" in r else "-"
    eff = f"{r['loop_efficiency']:.2f}" if "loop_efficiency" in r else "-"
    print(f"| {r['drafter']} | {r['batch']} | {r['temperature']:g} | {r['tau']:.2f} | "
          f"{r['tokens_per_s_target_only']:.0f} | {r['tokens_per_s_speculative']:.0f} | "
          f"{r['speedup']:.2f} | {ideal} | {eff} | {hf_ratio} |")
  os.makedirs(os.path.dirname(FLAGS.output) or ".", exist_ok=True)
  with open(FLAGS.output, "w") as f:
    json.dump(dict(target=t_dir, draft=d_dir, devices=str(jax.devices()), rows=rows), f, indent=2)


if __name__ == "__main__":
  app.run(main)
