"""Evaluate comparison rows: run target-only ``generate()`` and
``speculative_generate()`` on the same prompts and keys, time them (paired
repeats, compile excluded) and measure quality (:mod:`experiments.compare.quality`).

* :class:`Context` / :func:`load_context` -- models, drafters, prompts and mesh of a
  run (:mod:`experiments.common.run_context`, shared with ``experiments/benchmark.py``);
* :func:`build` -- a spec row's drafter, verifier and target sampling;
  :func:`build_policy` -- its verify-length policy (``row["policy"]``, e.g. AdaEDL);
* :func:`evaluate_row` -- one row's result (tau, speedup, quality, first-token KL, with
  bootstrap intervals over prompts from :mod:`experiments.common.row_stats`), or
  ``{"skipped": reason}`` for a rule the row's drafter cannot serve;
* :func:`run_rows` -- run or resume rows into a JSONL file (:mod:`experiments.common.sweep`);
* :func:`run_line_sweep` -- rows, then the table and line plots of a one-axis sweep.

The speedup protocol and columns are described in ``experiments/compare_verifiers.py``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from absl import logging

from experiments.compare import quality
from experiments.common import reports, row_stats, sweep
from experiments.common.rows import draft_depth, tree_paths, validate_config
from experiments.common.run_context import Context, load_context  # noqa: F401  (public here too)


def _sampling(t: float):
  from specjax.distributions import SamplingConfig
  return SamplingConfig(temperature=float(t))


def build(ctx: Context, row: dict):
  """``(drafter, draft_params, verifier, target_sampling)`` of a spec row (the drafter
  from :func:`specjax.decoding.drafter_factory.make_drafter`)."""
  from specjax import verifiers
  from specjax.decoding.drafter_factory import (STATIC_TREE_KINDS, drafter_kind, is_tree,
                                                make_drafter, needs)
  from specjax.verifiers.baselines import matched_baseline
  samp = _sampling(row["temperature"])
  rule = verifiers.get(row["rule"], **row["hparams"])
  if row["baseline"]:
    base = matched_baseline(rule, samp)
    verifier, target_samp = base.verifier, base.sampling
  else:
    verifier, target_samp = rule, samp
  d = row["drafter"]
  if needs(d) == "eagle" and ctx.eagle is None:
    raise ValueError(f"drafter {d!r} needs config.eagle_dir")
  suffix = d == "suffix_tree"
  static = drafter_kind(d) in STATIC_TREE_KINDS  # top-k or RSD children: config.tree_paths
  adapt = None
  if row.get("adapt") is not None:
    from specjax.decoding.adaptation import OnlineAdaptation
    adapt = OnlineAdaptation(**row["adapt"])
  size = ({"depth": draft_depth(row)} if is_tree(d)  # old tree records: num_draft
          else {"num_draft": int(row["num_draft"])})
  drafter, params = make_drafter(
      d, samp, ctx.sources, **size, top_k=int(ctx.c.eagle_top_k),
      total_tokens=int(row.get("total_tokens", 16)) if suffix else int(ctx.c.eagle_total_tokens),
      paths=tree_paths(ctx.c) if static else None, adapt=adapt)
  return drafter, params, verifier, target_samp


def build_policy(ctx: Context, row: dict) -> tuple:
  """``(policy, policy_params, info)`` of a spec row (``(None, None, {})`` without one),
  from :func:`specjax.policies.factory.make_policy` for the row's K -- the cost-aware
  policy from this machine's measured round costs and the shipped acceptance tables
  (:mod:`experiments.common.adaptive`; ``info`` holds them for the row's record).  A
  policy serves chains only: a tree row (no K) has none, and ``ValueError`` says why
  when one asks for one (:func:`specjax.policies.factory.unsupported`)."""
  from specjax.policies.factory import make_policy, unsupported
  name, hparams = row.get("policy", "none"), row.get("policy_hparams", {})
  why = unsupported(name, row["drafter"])  # "" for "none"
  if why:
    raise ValueError(f"row {row.get('key', row['method'])!r}: {why}")
  if name == "cost_aware":
    from experiments.common import adaptive
    d = ctx.c.data
    prompt = max(int(d.get("prompt_bucket", 0) or 0), max(len(p) for p in ctx.prompt_ids))
    cache_length = prompt + int(d.max_new_tokens) + int(row["num_draft"]) + 1
    return adaptive.cost_aware(ctx, row, cache_length)
  # "none" ignores K: (None, None) for a tree row, which has no num_draft
  return (*make_policy(name, int(row.get("num_draft", 0)), **hparams), {})


def _plain_call(ctx: Context, drafter, sampling, max_new: int, bs: int, bucket):
  """The speculative side of a row whose ``speculation`` is ``"off"`` (no verify length
  can pay here: :func:`experiments.common.adaptive.cost_aware`): target-only decoding
  at the row's sampling, its result shaped as the loop's, every round a plain step
  (``SpecStats.plain``)."""
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.loop_state import SpecStats
  from specjax.decoding.speculative import SpecResult

  def call(batch, key, bi):
    g = generate(ctx.target, ctx.target_params, batch, max_new_tokens=max_new,
                 sampling=sampling, key=key, row_offset=bi * bs, mesh=ctx.mesh,
                 prompt_bucket=bucket)
    stats = SpecStats.plain(g.target_calls, drafter.max_accepted, drafter.max_accepted + 1,
                            drafter.num_sources)
    return SpecResult(g.tokens, g.lengths, g.finish_reason, stats)
  return call


def _timed(fn):
  import jax
  t0 = time.perf_counter()
  out = fn()
  jax.block_until_ready(out)
  return out, time.perf_counter() - t0


def _target_sampling_for(row):
  """The target-only reference runs at the row's temperature without processors."""
  return _sampling(row["temperature"])


def _warm_up(ctx: Context, name, fn, batches: list, key, bucket) -> float:
  """Compile, excluded from timing: one call of ``fn(batch, key, batch_index)`` per
  compiled program, i.e. per (``name``, padded prompt bucket) not yet run in this
  context; returns the seconds spent."""
  from specjax.decoding.prompts import bucket_length
  t0 = time.perf_counter()
  for bi, b in enumerate(batches):
    k = (name, len(b), bucket_length(max(bucket or 1, *map(len, b))))
    if k not in ctx.cache:
      _timed(lambda: fn(b, key, bi))
      ctx.cache[k] = True
  return time.perf_counter() - t0


@dataclasses.dataclass
class _Repeats:
  """Per-repeat seconds and tokens/s of both sides, their outputs ([repeat * batches]
  [rows] token lists), the speculative / target-only speed ratios, and per batch
  ([repeat][batch]) the tokens and seconds of both sides (the pairs a speedup
  interval over prompts resamples)."""

  t_target: list = dataclasses.field(default_factory=list)
  rate_target: list = dataclasses.field(default_factory=list)
  t_spec: list = dataclasses.field(default_factory=list)
  rate_spec: list = dataclasses.field(default_factory=list)
  ratios: list = dataclasses.field(default_factory=list)
  outs_target: list = dataclasses.field(default_factory=list)
  outs_spec: list = dataclasses.field(default_factory=list)
  batch_target: list = dataclasses.field(default_factory=list)  # [repeat][batch] (tokens, s)
  batch_spec: list = dataclasses.field(default_factory=list)


def _paired_repeats(ctx: Context, keys: list, batches: list, bs: int, run_target, run_spec,
                    target_name, sums) -> _Repeats:
  """Timed, paired repeats: per batch target-only and speculative, in alternating
  order (target first where repeat + batch is even, speculative first where it is
  odd: **our choice**, so that an order effect -- target-only timed against itself
  at batch 64 read well above 1 -- does not sit on one side of every ratio);
  ``run_spec`` None: target-only rows.  With ``timing.target_per_row`` off
  the target-only run of a (sampling, repeat, batch) is the context's first one,
  shared by every row.  ``sums``: a :class:`row_stats.SpecSums` the speculative
  stats are added to."""
  per_row = bool(ctx.c.timing.get("target_per_row", True))
  out = _Repeats()

  def time_target(b, key, ri, bi):
    if per_row or (target_name, ri, bi) not in ctx.cache:
      g, dt = _timed(lambda: run_target(b, key, bi))
      ctx.cache[target_name, ri, bi] = (g.to_lists(), dt)
    return ctx.cache[target_name, ri, bi]

  for ri, key in enumerate(keys):
    out.batch_target.append([])
    out.batch_spec.append([])
    for bi, b in enumerate(batches):
      spec_first = run_spec is not None and (ri + bi) % 2 == 1
      if spec_first:
        r, dt_spec = _timed(lambda: run_spec(b, key, bi))
      lists, dt = time_target(b, key, ri, bi)
      out.batch_target[-1].append((sum(map(len, lists)), dt))
      out.outs_target.append(lists)
      if run_spec is not None:
        if not spec_first:
          r, dt_spec = _timed(lambda: run_spec(b, key, bi))
        lists = r.to_lists()
        out.batch_spec[-1].append((sum(map(len, lists)), dt_spec))
        out.outs_spec.append(lists)
        sums.add(r.stats, bi * bs, len(b))
    nt, tt = map(sum, zip(*out.batch_target[-1]))
    out.t_target.append(tt)
    out.rate_target.append(nt / tt)
    if run_spec is not None:
      ns, ts = map(sum, zip(*out.batch_spec[-1]))
      out.t_spec.append(ts)
      out.rate_spec.append(ns / ts)
      out.ratios.append((ns / ts) / (nt / tt))
  return out


def _prefill_seconds(ctx: Context, batches: list, keys: list, max_new: int, bucket) -> list:
  """``[repeat][batch]`` seconds of the target's prefill and first token of each batch,
  in the cache length of the batch's full generation (``generate`` with one new token:
  prefill only, no loop step); shared by every row of the context (the prefill does
  not depend on the row).  Subtracted from both sides' times it leaves the decode
  phase; the speculative side's drafter prefill stays in its decode phase (a
  conservative split: it makes the speculative decode phase slightly slower)."""
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.prompts import prepare_prompts, resolve_cache_length
  out = []
  for ri, key in enumerate(keys):
    out.append([])
    for bi, b in enumerate(batches):
      if ("prefill", ri, bi) not in ctx.cache:
        tokens, lengths = prepare_prompts(b, ctx.target.config.vocab_size, min_bucket=bucket)
        cache_length, _ = resolve_cache_length(lengths, tokens.shape[1], max_new, None)
        run = lambda: generate(ctx.target, ctx.target_params, b, max_new_tokens=1, key=key,
                               prompt_bucket=bucket, cache_length=cache_length, mesh=ctx.mesh,
                               eos_token_id=None)
        if ("prefill_compiled", bi) not in ctx.cache:
          _timed(run)  # compile once per batch shape
          ctx.cache["prefill_compiled", bi] = True
        ctx.cache["prefill", ri, bi] = _timed(run)[1]
      out[-1].append(ctx.cache["prefill", ri, bi])
  return out


def _minus_prefill(batch_timing: list, prefill: list) -> list:
  """``[repeat][batch]`` (tokens, seconds) pairs with each batch's prefill seconds taken
  off: the decode phase."""
  return [[(n, s - p) for (n, s), p in zip(row, prow)] for row, prow in zip(batch_timing, prefill)]


def _build_spec(ctx: Context, row: dict):
  """``(drafter, draft params, verifier, target sampling, policy, policy params, policy
  info)`` of a spec row, or the reason it cannot run: an undefined rule / drafter pair,
  or no acceptance table shipped for its setup."""
  from specjax.decoding.speculative import node_dist_missing
  drafter, dparams, verifier, tsamp = build(ctx, row)
  try:
    policy, pparams, info = build_policy(ctx, row)
  except FileNotFoundError as e:
    return str(e)
  return node_dist_missing(drafter, verifier) or (drafter, dparams, verifier, tsamp, policy,
                                                   pparams, info)


def evaluate_row(ctx: Context, row: dict) -> dict:
  """Run one row; returns its JSON-able result (see module docstring)."""
  import jax
  import numpy as np
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.speculative import speculative_generate

  c = ctx.c
  d = c.data
  prompts = ctx.prompt_ids
  n = len(prompts)
  bs = int(d.batch_size) or n
  batches = [prompts[i:i + bs] for i in range(0, n, bs)]
  max_new = int(d.max_new_tokens)
  key0 = jax.random.key(int(c.seed))
  keys = [jax.random.fold_in(key0, r) for r in range(int(c.timing.repeats))]
  gsamp = _target_sampling_for(row)
  # data.prompt_bucket > 0: every batch padded to at least it (one program per row);
  # 0: each batch to its own power-of-two bucket (less prefill, a program per bucket).
  bucket = int(d.get("prompt_bucket", 0)) or None

  def run_target(batch, key, bi):
    return generate(ctx.target, ctx.target_params, batch, max_new_tokens=max_new, sampling=gsamp,
                    key=key, row_offset=bi * bs, mesh=ctx.mesh, prompt_bucket=bucket)

  spec = row["kind"] == "spec"
  run_spec = policy = None
  if spec:
    built = _build_spec(ctx, row)
    if isinstance(built, str):  # a stated reason in the table, no crash
      return {"skipped": built}
    drafter, dparams, verifier, tsamp, policy, pparams, policy_info = built

    def spec_call(batch, key, bi):
      return speculative_generate(ctx.target, ctx.target_params, drafter, dparams, verifier,
                                  batch, max_new_tokens=max_new, sampling=tsamp, key=key,
                                  row_offset=bi * bs, mesh=ctx.mesh, prompt_bucket=bucket,
                                  policy=policy, policy_params=pparams)
    run_spec = (spec_call if policy_info.get("speculation", "on") == "on"
                else _plain_call(ctx, drafter, tsamp, max_new, bs, bucket))
  samp_json = sweep.canonical_json(dataclasses.asdict(gsamp))
  compile_target = _warm_up(ctx, ("target", samp_json), run_target, batches, keys[0], bucket)
  compile_spec = (_warm_up(ctx, ("spec", row["key"]), run_spec, batches, keys[0], bucket)
                  if spec else 0.0)
  sums = row_stats.SpecSums(n)
  rep = _paired_repeats(ctx, keys, batches, bs, run_target, run_spec, ("target_run", samp_json),
                        sums)
  prefill = _prefill_seconds(ctx, batches, keys, max_new, bucket)
  outs = rep.outs_spec if spec else rep.outs_target
  flat = [row_ for batch in outs for row_ in batch]  # [repeat][prompt], repeat-major
  res: dict[str, Any] = {
      "num_rows": len(flat), "generated_tokens": int(sum(map(len, flat))),
      "mean_length": float(np.mean([len(x) for x in flat])),
      "target_time_s": float(np.median(rep.t_target)), "compile_target_s": compile_target,
      "target_tokens_per_s": float(np.median(rep.rate_target)),
      "tokens_per_s": float(np.median(rep.rate_spec if spec else rep.rate_target)),
  }
  if spec:
    res.update(sums.result())
    res.update(policy_info)
    res.update({"spec_time_s": float(np.median(rep.t_spec)), "compile_spec_s": compile_spec,
                "speedup": float(np.median(rep.ratios)), "speedup_per_repeat": rep.ratios,
                "batch_timing": {"spec": rep.batch_spec, "target": rep.batch_target}})
    decode_spec, decode_target = (_minus_prefill(b, prefill) for b in (rep.batch_spec,
                                                                        rep.batch_target))
    res.update({"prefill_s": prefill, "speedup_decode": float(np.median(
        [sum(t for _, t in bt) / sum(t for _, t in bs_) for bs_, bt in zip(decode_spec,
                                                                           decode_target)]))})
    if len(batches) >= 2:
      res.update(_intervals(ctx, batches, rep, decode_spec, decode_target))
  res.update(_quality(ctx, row, flat, rep.outs_target[:len(batches)], n))
  # The first-token law is the node rules' induced law; path rules (block) have their
  # own exact analysis (specjax.analysis.path_law), not wired into this table yet; a
  # verify-length policy changes the law of a lossy rule (fewer drafts offered), which
  # the first-token analysis does not model, so policy rows get none.
  if (row["temperature"] > 0 and c.kl.enabled and spec and not _is_path_rule(verifier)
      and policy is None):
    res.update(_first_token_kl(ctx, row, drafter, dparams, verifier, tsamp))
  return res


MIN_SET_BATCHES = 4  # prompt batches a set needs for its own interval


def _intervals(ctx: Context, batches: list, rep, decode_spec: list, decode_target: list
               ) -> dict:
  """The speedups' intervals over prompt batches: end to end, decode phase, and the
  decode phase per prompt set where there are several (:func:`_per_prompt_set`)."""
  out = {"speedup_pooled": row_stats.speedup_interval(rep.batch_spec, rep.batch_target),
         "speedup_decode_pooled": row_stats.speedup_interval(decode_spec, decode_target)}
  per_set = _per_prompt_set(ctx, batches, decode_spec, decode_target)
  if per_set:
    out["speedup_decode_per_set"] = per_set
  return out


def _per_prompt_set(ctx: Context, batches: list, decode_spec: list, decode_target: list) -> dict:
  """Decode-phase speedup with its interval per prompt set (``data.prompt_sets``),
  ``{set: speedup_interval}``, over the batches of that set; empty unless the prompts
  come from two or more sets and every batch from one set; a set gets one with at least
  :data:`MIN_SET_BATCHES` batches (**our choice**: a bootstrap over fewer has a handful
  of distinct resamples -- the main job's 2 prompts per set get none)."""
  sets = [getattr(p, "prompt_set", None) for p in ctx.prompts]
  if None in sets or len(set(sets)) < 2:
    return {}
  of_batch, i = [], 0
  for b in batches:
    names = set(sets[i:i + len(b)])
    i += len(b)
    if len(names) != 1:
      return {}
    of_batch.append(names.pop())
  out = {}
  for name in dict.fromkeys(of_batch):
    idx = [j for j, s in enumerate(of_batch) if s == name]
    if len(idx) >= MIN_SET_BATCHES:
      out[name] = row_stats.speedup_interval(*([[rep[j] for j in idx] for rep in side]
                                               for side in (decode_spec, decode_target)))
  return out


def _quality(ctx: Context, row: dict, flat: list, ref_batches: list, n: int) -> dict:
  """Quality of ``flat`` ([repeat][prompt] token lists) with intervals over prompts;
  ``ref_batches``: the first repeat's target-only outputs (greedy reference at T = 0).

  Repeats whose outputs are all identical to the first (every greedy rule) are
  scored once: the same values, a third of the target forwards."""
  import numpy as np
  c = ctx.c
  res: dict[str, Any] = {}
  nrep = len(flat) // n
  same = all(flat[r * n:(r + 1) * n] == flat[:n] for r in range(1, nrep))
  scored = flat[:n] if same else flat
  res["repeats_identical"] = bool(same)
  prompts = ctx.prompt_ids * (len(scored) // n)
  ll = quality.target_loglik(ctx.target, ctx.target_params, prompts, scored,
                             batch_size=int(c.quality_batch_size))
  res["loglik"] = ll["mean"]
  res["loglik_ci"] = row_stats.loglik_ci(ll["per_row"], list(map(len, scored)), n)
  # (log-likelihood sum, tokens) per prompt, for paired comparisons between rows
  res["loglik_per_prompt"] = row_stats.loglik_per_prompt(ll["per_row"], list(map(len, scored)),
                                                         n)
  eos = ctx.eos if ctx.eos is not None else []
  eos = [eos] if isinstance(eos, int) else list(eos)
  texts, ended = quality.decode_completions(ctx.tokenizer, scored, eos)
  if ctx.code_prompts:
    ptexts = [p.text for p in ctx.prompts] * (len(scored) // n)
    ok = [float(quality.parses(p, t, e)) for p, t, e in zip(ptexts, texts, ended)]
    res["parse_frac"] = float(np.mean(ok)) if ok else float("nan")
    res["parse_frac_ci"] = row_stats.fraction_ci(ok, n)
  res["eos_frac"] = float(np.mean(ended))
  if row["temperature"] == 0:
    ref = [r for batch in ref_batches for r in batch]
    agree = quality.greedy_agreement(flat[:len(ref)], ref)
    res["agree_exact"], res["agree_prefix"] = agree["exact"], agree["prefix"]
    res["agree_exact_ci"] = row_stats.fraction_ci(
        [float(list(o) == list(r)) for o, r in zip(flat[:len(ref)], ref)], n)
  res["sample_completion"] = texts[0][:200] if texts else ""
  return res


def _is_path_rule(verifier) -> bool:
  from specjax.verifiers.path import PathRule
  return isinstance(verifier, PathRule)


def _first_token_kl(ctx: Context, row, drafter, dparams, verifier, tsamp) -> dict:
  """Exact first-speculative-token KL / TV of the row's verifier to its matched baseline
  at ``kl.num_prompts x kl.contexts`` of the loop's contexts
  (:func:`experiments.propositions.first_step_law.first_token_divergence`)."""
  import jax
  from experiments.propositions.first_step_law import first_token_divergence
  kc = ctx.c.kl
  key = jax.random.fold_in(jax.random.key(int(ctx.c.seed)), 10_000)
  bucket = int(ctx.c.data.get("prompt_bucket", 0)) or None
  out = first_token_divergence(ctx.target, ctx.target_params, drafter, dparams, verifier, tsamp,
                               ctx.prompt_ids[:int(kc.num_prompts)],
                               contexts_per_prompt=int(kc.contexts), key=key,
                               prompt_bucket=bucket)
  return {f"first_{k}": v for k, v in out.items()}


def run_rows(c, rows: list[dict], name: str | None = None, ctx: Context | None = None
             ) -> tuple[list[dict], str]:
  """Run (or resume) ``rows``; returns ``(records, jsonl path)``."""
  workdir = c.workdir or f"/tmp/specjax_runs/{c.name}"
  os.makedirs(workdir, exist_ok=True)
  path = os.path.join(workdir, f"{name or c.name}.jsonl")
  state = {"ctx": ctx}

  def evaluate(row):
    if state["ctx"] is None:  # lazily: a fully resumed sweep loads nothing
      state["ctx"] = load_context(c)
    t0 = time.time()
    res = evaluate_row(state["ctx"], row)
    res["wall_s"] = time.time() - t0
    logging.info("%s: %s", row["key"], {k: v for k, v in res.items()
                                        if k in ("tau", "speedup", "loglik", "parse_frac",
                                                 "relaxed_rate", "first_kl")})
    return res

  records = sweep.run_sweep(rows, evaluate, path, desc=name or c.name,
                            progress=bool(c.progress))
  return records, path


def enable_compile_cache(c) -> None:
  """Persistent XLA compilation cache: reruns and sibling sweeps skip recompiles."""
  d = c.get("compile_cache_dir", "")
  if d:
    import jax
    jax.config.update("jax_compilation_cache_dir", d)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def run_and_report(c, rows: list[dict], title: str, plot_fn=None) -> dict:
  """Run (or resume) ``rows``, write the table and figure, print the table."""
  validate_config(c)
  enable_compile_cache(c)
  records, path = run_rows(c, rows)
  files = reports.write_reports(c, records, c.name, title, plot_fn=plot_fn)
  logging.info("wrote %s, %s, %s", path, files["markdown"], files["figure"])
  print(reports.markdown_table(records))
  return {"records": records, "jsonl": path, **files}


def run_line_sweep(c, rows: list[dict], title: str, x_of, xlabel: str) -> dict:
  """:func:`run_and_report` with one line plot per metric against ``x_of(row)``
  (``sweep_theta``, ``sweep_k`` and ``sweep_temperature``)."""
  return run_and_report(c, rows, title, plot_fn=lambda r, p, t: reports.plot_lines(
      r, p, t, x_of, xlabel))
