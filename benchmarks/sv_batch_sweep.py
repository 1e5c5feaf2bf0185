"""Speculative Verification batch sweep on the default models (issue 8).

For each batch size B (T = 1, EOS off so every row emits exactly
``max_new_tokens``): goodput (generated tokens / s) of target-only
``generate``, fixed-K ``speculative_generate`` and SV
(``SpeculativeVerification`` row mode), tau, verified drafts per call, target
tokens processed per emitted token (``stats.summary()["processed_per_emitted"]``)
and the companion overhead share.

Calibration: a quick in-script run (``collect_records`` on ``--calib_prompts``
held-out prompts, seed 1, disjoint from the evaluation prompts drawn with seed 0;
quantile bins) unless ``--table`` points at a saved table (``table_quantile`` from
``experiments.calibrate_sv``; identity-checked against the models).  The latency
profile (target verify forward, gamma = 0..K) is measured here for the swept
batch sizes; by default (``--profile_fit=linear``) each batch size's medians are
replaced by a non-decreasing least-squares line in gamma, because single noisy
points on a loaded CPU (e.g. gamma = 1 slower than gamma = 2) stall SV's goodput
hill-climb at gamma = 0.

Companion overhead share: the companion's forward over ``K + 2`` tokens per row
(what ``SpeculativeVerification.signals`` runs each step) is timed separately
as a jitted call (``benchmarks.common.forward_latency``, median, compile
excluded) at batch B; the SV step time is the SV wall time divided by the number
of loop steps (the largest per-row ``target_calls``; prefill is included in the
wall time, so the step time is slightly overestimated and the share slightly
underestimated).  share = t_companion / t_step.

    python -m benchmarks.sv_batch_sweep                     # batch 1,8,32,64; K 4; 32 tokens
"""

from __future__ import annotations

import json
import os
import time

from absl import app, flags
import jax
import numpy as np

from benchmarks.common import forward_latency, timed

FLAGS = flags.FLAGS
flags.DEFINE_list("batch_sizes", ["1", "8", "32", "64"], "batch sizes")
flags.DEFINE_integer("k", 4, "draft length K")
flags.DEFINE_float("temperature", 1.0, "target / draft / companion temperature")
flags.DEFINE_integer("max_new_tokens", 32, "tokens generated per row")
flags.DEFINE_integer("repeats", 1, "timed repetitions after one warm-up (median)")
flags.DEFINE_string("table", "", "saved calibration table path (without extension); "
                    "default: quick calibration in this run")
flags.DEFINE_integer("calib_prompts", 8, "prompts for the quick calibration")
flags.DEFINE_integer("calib_new_tokens", 48, "tokens per calibration prompt")
flags.DEFINE_integer("quantile_bins", 3, "quantile bins per axis for the quick calibration")
flags.DEFINE_enum("mode", "row", ["row", "batch"], "SV mode")
flags.DEFINE_integer("profile_repeats", 5, "timed calls per latency-profile point")
flags.DEFINE_enum("profile_fit", "linear", ["linear", "raw"],
                  "linear: replace each batch size's measured latencies by a least-squares line "
                  "in gamma (non-decreasing, denoises CPU timings that would stall the goodput "
                  "hill-climb); raw: the medians as measured")
flags.DEFINE_string("output", "benchmarks/results/sv_batch_sweep.json", "JSON output")


def main(_):
  from experiments.prompts import load_eval_prompts
  from specjax import verifiers
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.drafters import LMDrafter
  from specjax.distributions import SamplingConfig
  from specjax.decoding.speculative import speculative_generate
  from specjax.models.defaults import default_tokenizer, load_default
  from specjax.policies import calibration as cal
  from specjax.policies import latency as lat_lib
  from specjax.policies.sv import SpeculativeVerification, uninformative_table
  from specjax.policies.sv_collect import collect_records

  t_start = time.time()
  (target, tp), (draft, dp), (comp, cp) = (load_default(n) for n in
                                            ("target", "draft", "companion"))
  tok = default_tokenizer()
  k, n_new = FLAGS.k, FLAGS.max_new_tokens
  samp = SamplingConfig(temperature=FLAGS.temperature)
  verifier = verifiers.get("lossless")
  drafter = LMDrafter(k, samp, draft)
  policy = SpeculativeVerification(k, companion=comp, companion_sampling=samp, mode=FLAGS.mode)
  batch_sizes = sorted(int(b) for b in FLAGS.batch_sizes)

  # --- calibration table ---
  calib_info = {}
  if FLAGS.table:
    fitted, meta = cal.load_table(FLAGS.table, models=cal.triple_id(target, tp, draft, dp, comp, cp))
    calib_info = {"source": FLAGS.table}
  else:
    t0 = time.time()
    calib = [list(p.ids) for p in load_eval_prompts(FLAGS.calib_prompts, tokenizer=tok, seed=1)]
    pp0 = policy.make_params(cp, uninformative_table(), np.ones(k + 1), len(calib))
    rec = collect_records(target, tp, drafter, dp, policy, pp0, verifier, calib,
                          max_new_tokens=FLAGS.calib_new_tokens, sampling=samp,
                          key=jax.random.key(1))
    s, a, x = rec["S"], rec["A"], rec["accepted"].astype(np.int64)
    se = cal.quantile_edges(s, FLAGS.quantile_bins)
    ae = cal.quantile_edges(a, FLAGS.quantile_bins)
    fitted = cal.fit_table(s, a, x, se, ae)
    info = cal.information_report(s, a, x, se, ae)
    calib_info = {"source": "in-script", "records": int(len(x)), "accept_rate": float(x.mean()),
                  "tau": float(rec["tokens_per_call"]), "info": info,
                  "p_hat": fitted.p_hat.tolist(), "seconds": time.time() - t0}
    print(f"calibration: {len(x)} records, accept {x.mean():.3f}, IG(S,A) {info['ig_SA']:.4f} "
          f"of H(X) {info['H_X']:.4f} bits ({time.time() - t0:.0f}s)", flush=True)
  table = fitted.table()

  # --- prompts and latency profile ---
  all_prompts = [list(p.ids) for p in load_eval_prompts(max(batch_sizes), tokenizer=tok, seed=0)]
  max_prompt = max(len(p) for p in all_prompts)
  cache_len = 128 + n_new + k + 1
  t0 = time.time()
  prof = lat_lib.measure_profile(target, tp, batch_sizes=batch_sizes, gammas=list(range(k + 1)),
                                 cache_length=cache_len,
                                 context_length=min(max_prompt + n_new // 2, cache_len - k - 1),
                                 repeats=FLAGS.profile_repeats)
  print(f"latency profile ({time.time() - t0:.0f}s):", flush=True)
  for b, row in zip(prof.batch_sizes, prof.latency_s):
    print(f"  B={b}: " + " ".join(f"{1e3 * v:.2f}" for v in row) + " ms (gamma 0..K, measured)",
          flush=True)
  raw_profile = prof.to_json()
  if FLAGS.profile_fit == "linear":
    import dataclasses
    g = np.asarray(prof.gammas, np.float64)
    fitted_rows = []
    for row in prof.latency_s:
      slope, icpt = np.polyfit(g, np.asarray(row), 1)
      slope = max(slope, 0.0)
      icpt = float(np.mean(row) - slope * g.mean())
      fitted_rows.append(tuple(float(max(icpt + slope * v, 1e-6)) for v in g))
    prof = dataclasses.replace(prof, latency_s=tuple(fitted_rows))
    for b, row in zip(prof.batch_sizes, prof.latency_s):
      print(f"  B={b}: " + " ".join(f"{1e3 * v:.2f}" for v in row) + " ms (linear fit)",
            flush=True)

  rows = []
  for b in batch_sizes:
    prompts = all_prompts[:b]
    key = jax.random.key(0)
    common = dict(max_new_tokens=n_new, sampling=samp, key=key, eos_token_id=None)
    ar_sec, _ = timed(generate, target, tp, prompts, repeats=FLAGS.repeats, **common)
    fx_sec, fx = timed(speculative_generate, target, tp, drafter, dp, verifier, prompts,
                       repeats=FLAGS.repeats, **common)
    pparams = policy.make_params(cp, table, prof, b)
    sv_sec, sv = timed(speculative_generate, target, tp, drafter, dp, verifier, prompts,
                       policy=policy, policy_params=pparams, repeats=FLAGS.repeats, **common)
    ctx = int(np.mean([len(p) for p in prompts])) + n_new // 2
    t_comp = forward_latency(comp, cp, b, k + 2, ctx, cache_len, repeats=5)
    sv_steps = int(np.max(np.asarray(sv.stats.target_calls)))
    fx_steps = int(np.max(np.asarray(fx.stats.target_calls)))
    fs, ss = fx.stats.summary(), sv.stats.summary()
    row = dict(batch=b, k=k, temperature=FLAGS.temperature, max_new_tokens=n_new,
               generate_s=ar_sec, fixed_s=fx_sec, sv_s=sv_sec,
               goodput_generate=b * n_new / ar_sec, goodput_fixed=b * n_new / fx_sec,
               goodput_sv=b * n_new / sv_sec,
               tau_fixed=fs["tau"], tau_sv=ss["tau"],
               verified_per_call_fixed=fs["verified_per_call"],
               verified_per_call_sv=ss["verified_per_call"],
               processed_per_emitted_fixed=fs["processed_per_emitted"],
               processed_per_emitted_sv=ss["processed_per_emitted"],
               steps_fixed=fx_steps, steps_sv=sv_steps,
               step_s_fixed=fx_sec / max(fx_steps, 1), step_s_sv=sv_sec / max(sv_steps, 1),
               companion_forward_s=t_comp,
               companion_share=t_comp / (sv_sec / max(sv_steps, 1)),
               latency_profile_s=list(prof.latency_vector(b, k)))
    rows.append(row)
    print(f"B={b}: generate {row['goodput_generate']:.1f} tok/s | fixed {row['goodput_fixed']:.1f} "
          f"(tau {fs['tau']:.2f}) | SV {row['goodput_sv']:.1f} (tau {ss['tau']:.2f}, verified/call "
          f"{ss['verified_per_call']:.2f}) | companion share {row['companion_share']:.2f} "
          f"[{time.time() - t_start:.0f}s]", flush=True)

  lines = ["| B | generate tok/s | fixed-K tok/s | SV tok/s | tau fixed / SV | verified/call "
           "fixed / SV | processed/emitted fixed / SV | companion fwd ms | SV step ms | "
           "companion share |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for r in rows:
    lines.append(
        f"| {r['batch']} | {r['goodput_generate']:.1f} | {r['goodput_fixed']:.1f} | "
        f"{r['goodput_sv']:.1f} | {r['tau_fixed']:.2f} / {r['tau_sv']:.2f} | "
        f"{r['verified_per_call_fixed']:.2f} / {r['verified_per_call_sv']:.2f} | "
        f"{r['processed_per_emitted_fixed']:.2f} / {r['processed_per_emitted_sv']:.2f} | "
        f"{1e3 * r['companion_forward_s']:.2f} | {1e3 * r['step_s_sv']:.2f} | "
        f"{100 * r['companion_share']:.0f}% |")
  print("\n".join(lines))
  out = {"device": jax.devices()[0].device_kind, "platform": jax.devices()[0].platform,
         "flags": {f: FLAGS[f].value for f in ("batch_sizes", "k", "temperature", "max_new_tokens",
                                               "repeats", "table", "calib_prompts",
                                               "calib_new_tokens", "quantile_bins", "mode",
                                               "profile_repeats", "profile_fit")},
         "calibration": calib_info, "profile": prof.to_json(), "profile_measured": raw_profile,
         "rows": rows,
         "markdown": "\n".join(lines), "wall_seconds": time.time() - t_start}
  os.makedirs(os.path.dirname(os.path.abspath(FLAGS.output)), exist_ok=True)
  with open(FLAGS.output, "w") as f:
    json.dump(out, f, indent=2, default=str)
  print(f"wrote {FLAGS.output} ({out['wall_seconds']:.0f}s)")


if __name__ == "__main__":
  app.run(main)
