"""Speculative Verification evaluated as the SV paper did it: calibrate on
calibration prompts, then decode DISJOINT held-out prompts of each set
(ShareGPT = chat, HumanEval = code) with SV against fixed-K speculative
decoding and target-only, at several batch sizes.

One run (:func:`run`):

1. Calibration (``experiments.sv.calibrate.run``, the one definition of record
   collection, table fits and the latency profile): fixed-K speculative
   decoding on ``calib_prompts`` prompts logs ``(S, A, accepted)``, fits the
   ``(S, A)`` table and the S-only table, reports ``H(X)``, ``H(X|S)``,
   ``H(X|S,A)`` pooled and per prompt set, and profiles the target's verify
   latency at the swept batch sizes and this run's cache length.  Or reuse a
   calibration directory (``calibration_dir``), identity-checked.
2. Evaluation prompts per set: ``load_chat_prompts(..., exclude=<calibration
   sources>)`` -- disjoint from the calibration prompts by construction.  All
   prompts are padded to one width, so each (method, batch size) compiles once.
3. For each batch size B and method -- target-only ``generate``, fixed K =
   1..K, SV (row mode, the paper's gamma search) with each table signal ("SA",
   the paper's table; "S", exact under lossless) -- one warm-up call (compile),
   then every batch of B prompts of every set timed once.  Per (set, B,
   method): tau, verified drafts per target call, target tokens processed per
   emitted token, goodput (emitted tokens / s, prefill included), the seconds of
   every timed call (``call_seconds``; at B = 1 one per prompt) and every prompt's
   counts (``per_prompt``: emitted, target calls, accepted, verified), the
   distribution of chosen gammas (``SpecStats.gamma_counts``), the
   companion's share of an SV step, and ``timed_lowerings``: programs JAX
   built inside the timed calls (0 unless something recompiled there;
   :class:`specjax.compiled_code.count_lowerings`, a warning is logged).

Row ``i`` of a set is global row ``i`` at every batch size (per-row RNG), so a
prompt draws the same random stream whatever B is.  Lossless verification, so
every method samples the target's distribution; EOS stops rows (``stop_at_eos``).

Model sets: a real model (chat prompt sets), ``"default"`` (one set,
``"heldout"``: held-out code prefixes; calibration windows come from the
leading half of the held-out stream, disjointness is not checked) or
``"tiny"`` (random models and prompts, smoke tests: the set names label
groups of random prompts).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import numpy as np

from experiments.common.prompts import DEFAULT_PROMPT_SETS, PROMPT_SETS
from specjax.policies.sv import TABLE_SIGNALS

PAPER_IG = {"chat": (1.38, 0.91), "code": (1.78, 1.42)}  # H(X) -> H(X|S,A), docs/spec.md §7
BINNINGS = ("quantile", "fixed")


@dataclasses.dataclass(frozen=True)
class SweepConfig:
  """What :func:`run` does (flags of ``benchmarks/sv_batch_sweep.py``).

  Attributes:
    model: "default", "tiny" or a real model (e.g. "smollm2-135m-instruct").
    drafter: real model: "draft" (its shipped draft LM) or "eagle3".
    companion: real model: "early_exit:N" (its first N layers) or "lm:SPEC" (a separate
      LM: "lm:draft" the shipped draft LM, "lm:DIR" a trained one).
    prompt_sets: real model: sets of ``experiments.common.prompts.PROMPT_SETS``.
    k: SV's K and the largest fixed K.
    fixed_ks: fixed-K baselines; () = 1..k.
    table_signals: SV variants, subset of ("SA", "S").
    binning: "quantile" or "fixed" calibration table.
    mode: SV mode, "row" (the paper's per-row search) or "batch".
    batch_sizes: swept B.
    eval_prompts: held-out prompts per set (a multiple of every B).
    max_new_tokens: tokens per evaluation row.
    temperature: target / draft / companion temperature.
    stop_at_eos: rows stop at the model's EOS (else every row emits max_new_tokens).
    calib_prompts, calib_new_tokens, calib_batch: calibration run size.
    prompt_len: longest chat prompt (tokens); default/tiny: prompt window length.
    calibration_dir: reuse this ``calibrate_sv`` workdir ("" = calibrate into
      ``<workdir>/calibration``).
    workdir: where the calibration goes.
    profile_repeats: timed calls per latency-profile point.
    profile_fit: "linear" (:meth:`LatencyProfile.linear_fit`) or "raw".
    companion_timing: time the companion forward per B (companion share).
    seed: prompts, RNG and tiny models.
  """

  model: str = "default"
  drafter: str = "draft"
  companion: str = "early_exit:8"
  prompt_sets: tuple = DEFAULT_PROMPT_SETS
  k: int = 7
  fixed_ks: tuple = ()
  table_signals: tuple = TABLE_SIGNALS
  binning: str = "quantile"
  mode: str = "row"
  batch_sizes: tuple = (1, 4, 8)
  eval_prompts: int = 8
  max_new_tokens: int = 48
  temperature: float = 1.0
  stop_at_eos: bool = True
  calib_prompts: int = 32
  calib_new_tokens: int = 64
  calib_batch: int = 16
  prompt_len: int = 256
  calibration_dir: str = ""
  workdir: str = "/tmp/specjax_runs/sv_eval"
  profile_repeats: int = 5
  profile_fit: str = "linear"
  companion_timing: bool = True
  seed: int = 0

  @property
  def real(self) -> bool:
    return self.model not in ("default", "tiny")

  @property
  def ks(self) -> tuple:
    return tuple(self.fixed_ks) or tuple(range(1, self.k + 1))

  @property
  def sets(self) -> tuple:
    return ("heldout",) if self.model == "default" else tuple(self.prompt_sets)


def validate(cfg: SweepConfig) -> None:
  """ValueError naming the first bad setting (before any model is loaded)."""
  def bad(msg):
    raise ValueError(msg)
  if not (isinstance(cfg.k, int) and cfg.k >= 1):
    bad(f"k={cfg.k!r} must be an integer >= 1")
  if not cfg.batch_sizes or any(not isinstance(b, int) or b < 1 for b in cfg.batch_sizes):
    bad(f"batch_sizes={list(cfg.batch_sizes)} must be positive integers")
  if len(set(cfg.batch_sizes)) != len(cfg.batch_sizes):
    bad(f"batch_sizes={list(cfg.batch_sizes)} has duplicates")
  for name in ("eval_prompts", "max_new_tokens", "calib_prompts", "calib_new_tokens",
               "calib_batch", "prompt_len", "profile_repeats"):
    v = getattr(cfg, name)
    if not (isinstance(v, int) and v >= 1):
      bad(f"{name}={v!r} must be an integer >= 1")
  odd = [b for b in cfg.batch_sizes if cfg.eval_prompts % b]
  if odd:
    bad(f"eval_prompts={cfg.eval_prompts} (per set) is not a multiple of batch size(s) {odd}; "
        f"every batch holds B prompts of one set")
  out = [k for k in cfg.ks if not (isinstance(k, int) and 1 <= k <= cfg.k)]
  if out:
    bad(f"fixed_ks {out} must be integers in [1, k={cfg.k}]")
  sig = [s for s in cfg.table_signals if s not in TABLE_SIGNALS]
  if sig or not cfg.table_signals:
    bad(f"table_signals={list(cfg.table_signals)}: choose from {TABLE_SIGNALS}")
  if cfg.binning not in BINNINGS:
    bad(f"binning={cfg.binning!r}: choose from {BINNINGS}")
  if cfg.mode not in ("row", "batch"):
    bad(f"mode={cfg.mode!r}: choose 'row' or 'batch'")
  if cfg.profile_fit not in ("linear", "raw"):
    bad(f"profile_fit={cfg.profile_fit!r}: choose 'linear' or 'raw'")
  if not cfg.temperature >= 0:
    bad(f"temperature={cfg.temperature!r} must be >= 0")
  if cfg.model != "default":
    ps = [s for s in cfg.prompt_sets if s not in PROMPT_SETS]
    if ps or not cfg.prompt_sets:
      bad(f"prompt_sets={list(cfg.prompt_sets)}: choose from {PROMPT_SETS}")
    if len(set(cfg.prompt_sets)) != len(cfg.prompt_sets):
      bad(f"prompt_sets={list(cfg.prompt_sets)} has duplicates")
  if cfg.real:
    if cfg.drafter not in ("draft", "eagle3"):
      bad(f"drafter={cfg.drafter!r}: choose 'draft' or 'eagle3'")
    from experiments.common.model_sets import parse_companion
    try:
      parse_companion(cfg.companion)
    except ValueError as e:
      bad(str(e))
    if cfg.calib_prompts < len(cfg.prompt_sets):
      bad(f"calib_prompts={cfg.calib_prompts} gives some prompt set no calibration prompt")
  if cfg.calibration_dir and not os.path.isfile(os.path.join(cfg.calibration_dir,
                                                             "report.json")):
    bad(f"calibration_dir={cfg.calibration_dir!r} holds no report.json (run "
        "experiments.calibrate_sv there, or leave it empty to calibrate in this run)")


def cache_length(cfg: SweepConfig, prompt_width: int) -> int:
  """KV slots of every evaluation run and of the latency profile."""
  return prompt_width + cfg.max_new_tokens + cfg.k + 1


def calibration_config(cfg: SweepConfig, cache_len: int):
  """The ``experiments/configs/sv.py`` config that ``calibrate_sv.run`` gets."""
  from experiments.configs.sv import get_config
  c = get_config()
  c.name = "sv_eval_calibration"
  c.workdir = os.path.join(cfg.workdir, "calibration")
  c.models, c.drafter, c.companion, c.seed = cfg.model, cfg.drafter, cfg.companion, cfg.seed
  c.num_draft, c.temperature, c.companion_temperature = cfg.k, cfg.temperature, cfg.temperature
  c.data.num_prompts, c.data.max_new_tokens = cfg.calib_prompts, cfg.calib_new_tokens
  c.data.batch_size, c.data.prompt_len = cfg.calib_batch, cfg.prompt_len
  c.data.prompt_sets = tuple(cfg.sets) if cfg.model != "default" else c.data.prompt_sets
  c.profile.batch_sizes = tuple(sorted(cfg.batch_sizes))
  c.profile.cache_length = cache_len
  c.profile.repeats = cfg.profile_repeats
  if cfg.model == "tiny":
    c.table.fixed_bins = c.table.quantile_bins = 3
  return c


def _reused_calibration(cfg: SweepConfig):
  """The calibration config and report of ``cfg.calibration_dir``."""
  import ml_collections
  with open(os.path.join(cfg.calibration_dir, "report.json")) as f:
    report = json.load(f)
  c = ml_collections.ConfigDict(report["config"])
  if int(c.num_draft) != cfg.k:
    raise ValueError(f"calibration_dir has K={c.num_draft}, this run k={cfg.k}")
  c.workdir = cfg.calibration_dir
  return c, report


def eval_prompts(cfg: SweepConfig, c_cal, models, vocab_size: int) -> dict:
  """``{set: [token-id lists]}``: ``eval_prompts`` held-out prompts per set, disjoint
  from the calibration prompts (real model: by source; tiny: other seeds, ragged
  as chat prompts are: lengths rising evenly from ``prompt_len // 4`` to ``prompt_len``)."""
  if cfg.model == "tiny":
    lengths = np.linspace(max(1, cfg.prompt_len // 4), cfg.prompt_len, cfg.eval_prompts)
    return {s: [np.random.RandomState(cfg.seed + 1 + i).randint(0, vocab_size, int(n)).tolist()
                for n in lengths.round()]
            for i, s in enumerate(cfg.sets)}
  if cfg.model == "default":
    from experiments.common.prompts import load_eval_prompts
    return {"heldout": [list(p.ids) for p in load_eval_prompts(cfg.eval_prompts,
                                                               seed=cfg.seed)]}
  from experiments.sv.calibrate import calibration_chat_prompts
  from experiments.common.prompts import load_chat_prompts
  ms = models["set"]
  calib = {p.source for p in calibration_chat_prompts(c_cal, ms)}
  out = {}
  for s in cfg.sets:
    got = load_chat_prompts(ms.encode_chat, cfg.eval_prompts, sets=(s,),
                            max_tokens=cfg.prompt_len, seed=cfg.seed, exclude=calib)
    assert not calib & {p.source for p in got}
    out[s] = [list(p.ids) for p in got]
  return out


def _pad(prompts: list, width: int, vocab_size: int):
  from specjax.decoding.prompts import prepare_prompts
  return prepare_prompts(prompts, vocab_size, bucket=width)


def _concat_stats(stats: list) -> dict:
  """``SpecStats.summary()`` of the rows of several results."""
  from specjax.decoding.loop_state import SpecStats
  import jax
  host = [jax.device_get(s) for s in stats]
  cat = SpecStats(*[np.concatenate([getattr(h, f.name) for h in host])
                    for f in dataclasses.fields(SpecStats)])
  return cat.summary()


def method_names(cfg: SweepConfig) -> list:
  return (["target"] + [f"fixed_{k}" for k in cfg.ks] +
          [f"sv_{s}" for s in cfg.table_signals])


def _method_call(cfg: SweepConfig, method: str, b: int, models: dict, tables: dict, profile,
                 common: dict):
  """``call(tokens, lengths, row_offset) -> result`` of one method at batch size ``b``:
  target-only ``generate``, a fixed-K chain, or SV with a table of one signal set."""
  import jax
  from experiments.sv.calibrate import chain_drafter
  from specjax import verifiers
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.speculative import speculative_generate
  from specjax.policies.sv import SpeculativeVerification

  (target, tp), (_, dp), (comp, cp) = (models[n] for n in ("target", "draft", "companion"))
  samp, key = common["sampling"], jax.random.key(cfg.seed)
  if method == "target":
    return lambda toks, lens, off: generate(target, tp, (toks, lens), key=key, row_offset=off,
                                            **common)
  verifier = verifiers.get("lossless")
  if method.startswith("fixed_"):
    drafter = chain_drafter(models, int(method.split("_")[1]), samp)[0]
    return lambda toks, lens, off: speculative_generate(
        target, tp, drafter, dp, verifier, (toks, lens), key=key, row_offset=off, **common)
  sig = method.split("_")[1]
  policy = SpeculativeVerification(cfg.k, companion=comp, companion_sampling=samp,
                                   mode=cfg.mode, table_signals=sig)
  pparams = policy.make_params(cp, tables[sig], profile, b)
  drafter = chain_drafter(models, cfg.k, samp)[0]
  return lambda toks, lens, off: speculative_generate(
      target, tp, drafter, dp, verifier, (toks, lens), key=key, row_offset=off, policy=policy,
      policy_params=pparams, **common)


def _stats_fields(method: str, stats: list, steps: int, calls: int) -> dict:
  """tau, verify and acceptance columns of a row (target-only: tau 1)."""
  if method == "target":
    return dict(tau=1.0, verified_per_call=0.0, processed_per_emitted=1.0, target_calls=calls)
  sm = _concat_stats(stats)
  out = dict(tau=sm["tau"], verified_per_call=sm["verified_per_call"],
             processed_per_emitted=sm["processed_per_emitted"],
             target_calls=sm["target_calls"], steps=steps,
             accept_rate_per_position=sm["accept_rate_per_position"])
  if method.startswith("sv_"):
    counts = np.asarray(sm["gamma_counts"], np.float64)
    out["gamma_counts"] = sm["gamma_counts"]
    out["gamma_dist"] = (counts / max(counts.sum(), 1)).tolist()
  return out


# the per-prompt counts a row keeps (``per_prompt``; target-only verifies nothing): emitted
# tokens, target calls, accepted drafts and drafts offered to the target
PER_PROMPT = ("emitted", "target_calls", "accepted", "verified")


def _per_prompt(res, method: str) -> dict:
  """``{count: [one value per row of the call]}`` (:data:`PER_PROMPT`)."""
  import jax
  emitted = np.asarray(jax.device_get(res.lengths)).astype(int).tolist()
  if method == "target":
    calls = np.asarray(jax.device_get(res.target_calls)).astype(int).tolist()
    return dict(emitted=emitted, target_calls=calls, accepted=[0] * len(calls),
                verified=[0] * len(calls))
  st = jax.device_get(res.stats)
  return dict(emitted=emitted, target_calls=np.asarray(st.target_calls).astype(int).tolist(),
              accepted=np.asarray(st.accepted).astype(int).tolist(),
              verified=np.asarray(st.verified_tokens).astype(int).tolist())


def _timed_rows(call, method: str, b: int, padded: dict, log) -> list:
  """Warm ``call`` up (compile), then time it over every set's prompts in batches of
  ``b``; one row per set."""
  import jax
  from specjax import compiled_code
  t0 = time.time()
  first = next(iter(padded.values()))
  jax.block_until_ready(call(first[0][:b], first[1][:b], 0))  # compile + warm-up
  warm = time.time() - t0
  rows = []
  for s, (toks, lens) in padded.items():
    steps, stats = 0, []
    per_prompt, call_seconds = {name: [] for name in PER_PROMPT}, []
    with compiled_code.count_lowerings() as built:  # the timed calls build no program
      for i in range(0, toks.shape[0], b):
        t0 = time.perf_counter()
        res = jax.block_until_ready(call(toks[i:i + b], lens[i:i + b], i))
        call_seconds.append(time.perf_counter() - t0)
        if method != "target":
          stats.append(res.stats)
          steps += int(np.max(np.asarray(res.stats.target_calls)))
        for name, values in _per_prompt(res, method).items():
          per_prompt[name] += values
    wall, emitted, calls = sum(call_seconds), sum(per_prompt["emitted"]), sum(
        per_prompt["target_calls"])
    if built.count:
      log(f"warning: {s} B={b} {method}: {built.count} program(s) built inside the timed "
          "calls; the timing includes compilation")
    row = dict(set=s, batch=b, method=method, prompts=int(toks.shape[0]),
               emitted=emitted, seconds=wall, goodput=emitted / wall,
               warmup_seconds=warm, timed_lowerings=built.count,
               call_seconds=call_seconds, per_prompt=per_prompt)
    row.update(_stats_fields(method, stats, steps, calls))
    rows.append(row)
    log(f"{s} B={b} {method}: {row['goodput']:.1f} tok/s, tau {row['tau']:.2f}, "
        f"verified/call {row['verified_per_call']:.2f}, processed/emitted "
        f"{row['processed_per_emitted']:.2f} ({wall:.0f}s + warm-up {warm:.0f}s)")
  return rows


def evaluate(cfg: SweepConfig, models: dict, tables: dict, profile, prompts: dict,
             log=print) -> list:
  """Decode every set's prompts with every method at every B; one row per (set, B,
  method) (module docstring).  ``tables``: ``{signal: CalibrationTable}``."""
  from benchmarks.common import forward_latency
  from specjax import compiled_code
  from specjax.decoding.prompts import bucket_length
  from specjax.distributions import SamplingConfig

  target, (comp, cp) = models["target"][0], models["companion"]
  width = bucket_length(max(len(p) for ps in prompts.values() for p in ps))
  cache_len = cache_length(cfg, width)
  padded = {s: _pad(ps, width, target.config.vocab_size) for s, ps in prompts.items()}
  # prompt_bucket=width: every batch runs the program the warm-up compiled (without it
  # the bucket follows each batch's longest prompt and timed calls could compile).
  common = dict(max_new_tokens=cfg.max_new_tokens,
                sampling=SamplingConfig(temperature=float(cfg.temperature)),
                eos_token_id="config" if cfg.stop_at_eos else None,
                cache_length=cache_len, prompt_bucket=width)
  rows = []
  for b in sorted(cfg.batch_sizes):
    for method in method_names(cfg):
      compiled_code.release_if_crowded()  # one program per (B, method); stay under the map limit
      call = _method_call(cfg, method, b, models, tables, profile, common)
      rows += _timed_rows(call, method, b, padded, log)
    if cfg.companion_timing and any(m.startswith("sv_") for m in method_names(cfg)):
      ctx = width // 2 + cfg.max_new_tokens // 2
      t_comp = forward_latency(comp, cp, b, cfg.k + 2, ctx, cache_len, repeats=5)
      for r in rows:
        if r["batch"] == b and r["method"].startswith("sv_"):
          r["companion_forward_s"] = t_comp
          r["companion_share"] = t_comp / (r["seconds"] / max(r["steps"], 1))
  return rows


def summarize(rows: list) -> list:
  """Per (set, B): speedups of each method over target-only and SV's over the best
  fixed K (adds ``speedup`` to every row; returns one summary per (set, B))."""
  out = []
  keys = sorted({(r["set"], r["batch"]) for r in rows}, key=lambda t: (t[0], t[1]))
  for s, b in keys:
    group = [r for r in rows if r["set"] == s and r["batch"] == b]
    base = next((r["goodput"] for r in group if r["method"] == "target"), None)
    for r in group:
      r["speedup"] = r["goodput"] / base if base else None
    fixed = [r for r in group if r["method"].startswith("fixed_")]
    best = max(fixed, key=lambda r: r["goodput"]) if fixed else None
    entry = {"set": s, "batch": b, "target_goodput": base,
             "best_fixed": best["method"] if best else None,
             "best_fixed_goodput": best["goodput"] if best else None}
    for r in group:
      if r["method"].startswith("sv_"):
        entry[f"{r['method']}_vs_best_fixed"] = r["goodput"] / best["goodput"] if best else None
    out.append(entry)
  return out


def info_rows(cal_report: dict, binning: str) -> list:
  """Information gain per prompt set (and pooled) from the calibration report."""
  out = []
  for table, sig in ((binning, "SA"), (f"{binning}_S", "S")):
    entry = cal_report["tables"][table]
    for s, info in list(entry.get("info_by_set", {}).items()) + [("all", entry["info"])]:
      out.append(dict(set=s, signals=sig, n=info["n"], accept_rate=info["accept_rate"],
                      H_X=info["H_X"], H_X_given_S=info["H_X_given_S"],
                      H_X_given_SA=info["H_X_given_SA"], ig_S_frac=info["ig_S_frac"],
                      ig_frac=info["ig_frac"], num_bins=info["num_bins"]))
  return out


def markdown(report: dict) -> str:
  """The report's tables (information gain per set; methods per set and B)."""
  lines = [f"Information gain of the companion signals (calibration records, "
           f"{report['config']['binning']} bins; SV paper: chat IG/H(X) = "
           f"{1 - PAPER_IG['chat'][1] / PAPER_IG['chat'][0]:.0%}, code "
           f"{1 - PAPER_IG['code'][1] / PAPER_IG['code'][0]:.0%})", "",
           "| set | records | accept rate | H(X) bits | H(X\\|S) | H(X\\|S,A) | IG(S)/H(X) | "
           "IG(S,A)/H(X) |", "|---|---|---|---|---|---|---|---|"]
  for r in report["information"]:
    if r["signals"] == "SA":
      lines.append(f"| {r['set']} | {r['n']} | {r['accept_rate']:.3f} | {r['H_X']:.4f} | "
                   f"{r['H_X_given_S']:.4f} | {r['H_X_given_SA']:.4f} | "
                   f"{100 * r['ig_S_frac']:.1f}% | {100 * r['ig_frac']:.1f}% |")
  lines += ["", "| set | B | method | tau | verified/call | processed/emitted | goodput tok/s | "
            "x target | gamma distribution (0..K) | companion share |",
            "|---|---|---|---|---|---|---|---|---|---|"]
  for r in report["rows"]:
    dist = (" ".join(f"{v:.2f}" for v in r["gamma_dist"]) if "gamma_dist" in r else "")
    share = f"{100 * r['companion_share']:.0f}%" if "companion_share" in r else ""
    sp = f"{r['speedup']:.2f}" if r.get("speedup") else ""
    lines.append(f"| {r['set']} | {r['batch']} | {r['method']} | {r['tau']:.2f} | "
                 f"{r['verified_per_call']:.2f} | {r['processed_per_emitted']:.2f} | "
                 f"{r['goodput']:.1f} | {sp} | {dist} | {share} |")
  return "\n".join(lines)


def run(cfg: SweepConfig, log=print) -> dict:
  """Calibrate (or reuse a calibration), evaluate, summarize (module docstring)."""
  import jax
  from experiments.sv import calibrate as calibrate_sv
  from specjax import verifiers
  from specjax.decoding.prompts import bucket_length
  from specjax.policies import calibration as cal
  from specjax.policies import latency as lat_lib

  from specjax import provenance

  validate(cfg)
  stamp = provenance.stamp()
  t_start = time.time()
  c_cal = calibration_config(cfg, 0)
  models = calibrate_sv.load_models(c_cal)
  target, draft, comp = (models[n] for n in ("target", "draft", "companion"))
  vocab = target[0].config.vocab_size
  if cfg.calibration_dir:
    c_cal, cal_report = _reused_calibration(cfg)
  prompts = eval_prompts(cfg, c_cal, models, vocab)
  width = bucket_length(max(len(p) for ps in prompts.values() for p in ps))
  cache_len = cache_length(cfg, width)
  if not cfg.calibration_dir:
    c_cal = calibration_config(cfg, cache_len)
    log(f"calibrating into {c_cal.workdir} ...")
    cal_report = calibrate_sv.run(c_cal, models=models)
  ident = cal.triple_id(*target, *draft, *comp)
  rule = repr(verifiers.get("lossless"))
  tables = {}
  for sig in cfg.table_signals:
    name = cfg.binning if sig == "SA" else f"{cfg.binning}_S"
    fitted, _ = cal.load_table(os.path.join(c_cal.workdir, f"table_{name}"), models=ident,
                               verifier=rule)
    tables[sig] = fitted.table()
  profile = lat_lib.load_profile(os.path.join(c_cal.workdir, "profile.json"),
                                 model_config=target[0].config, cache_length=cache_len)
  if cfg.profile_fit == "linear":
    profile = profile.linear_fit()
  log(f"calibration: {cal_report['num_records']} records, tau {cal_report['tokens_per_call']:.2f}"
      f" [{time.time() - t_start:.0f}s]")
  rows = evaluate(cfg, models, tables, profile, prompts, log=log)
  report = {"config": dataclasses.asdict(cfg), "device": jax.devices()[0].device_kind,
            "calibration_dir": c_cal.workdir,
            "calibration": {k: cal_report[k] for k in ("num_records", "accept_rate",
                                                       "tokens_per_call", "prompt_sets",
                                                       "records_per_set")
                            if k in cal_report},
            "eval_prompts": {s: len(p) for s, p in prompts.items()},
            "prompt_width": width, "cache_length": cache_len,
            "profile": profile.to_json(), "information": info_rows(cal_report, cfg.binning),
            "rows": rows, "summary": summarize(rows)}
  report["markdown"] = markdown(report)
  report["wall_seconds"] = time.time() - t_start
  report["model_ids"] = ident  # params hashes of the triple (also for random models)
  sources = dict(models["set"].sources) if "set" in models else None
  return provenance.stamped(report, stamp, sources)


def write_figures(report: dict, fig_dir: str, suffix: str) -> list:
  """``sv_goodput_<suffix>.png`` (speedup over target-only per method, one panel per
  set, one line per B) and ``sv_gammas_<suffix>.png`` (chosen-gamma distributions of
  SV per set and B).  Returns the files written."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  rows, sets = report["rows"], list(report["eval_prompts"])
  batches = sorted({r["batch"] for r in rows})
  methods = list(dict.fromkeys(r["method"] for r in rows))
  os.makedirs(fig_dir, exist_ok=True)
  files = []
  fig, axes = plt.subplots(1, len(sets), figsize=(5.5 * len(sets), 3.6), squeeze=False)
  for ax, s in zip(axes[0], sets):
    for b in batches:
      by = {r["method"]: r.get("speedup") or 0.0 for r in rows
            if r["set"] == s and r["batch"] == b}
      ax.plot(range(len(methods)), [by.get(m, np.nan) for m in methods], "o-", label=f"B={b}")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks(range(len(methods)), [m.replace("fixed_", "K=") for m in methods],
                  rotation=45)
    ax.set_title(f"{s}: goodput / target-only")
    ax.legend(fontsize=8)
  fig.tight_layout()
  files.append(os.path.join(fig_dir, f"sv_goodput_{suffix}.png"))
  fig.savefig(files[-1], dpi=120)
  plt.close(fig)
  sv = [m for m in methods if m.startswith("sv_")]
  if sv:
    fig, axes = plt.subplots(len(sv), len(sets), figsize=(5 * len(sets), 2.8 * len(sv)),
                             squeeze=False)
    for i, m in enumerate(sv):
      for j, s in enumerate(sets):
        ax = axes[i][j]
        for n, b in enumerate(batches):
          r = next(r for r in rows if r["set"] == s and r["batch"] == b and r["method"] == m)
          g = np.arange(len(r["gamma_dist"]))
          w = 0.8 / len(batches)
          ax.bar(g + (n - (len(batches) - 1) / 2) * w, r["gamma_dist"], w, label=f"B={b}")
        ax.set_title(f"{s}, {m}: chosen gamma")
        ax.set_xlabel("gamma")
        ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(os.path.join(fig_dir, f"sv_gammas_{suffix}.png"))
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)
  return files
