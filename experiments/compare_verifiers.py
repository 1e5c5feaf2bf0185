r"""Compare every registered verification rule on one set of models and prompts.

  python -m experiments.compare_verifiers --config=experiments/configs/compare.py
  python -m experiments.compare_verifiers --config=experiments/configs/compare.py \
      --config.models=tiny --config.workdir=/tmp/cmp_tiny          # smoke test
  python -m experiments.compare_verifiers --config=experiments/configs/compare.py \
      --config.data.num_prompts=32 --config.data.max_new_tokens=128 --config.timing.repeats=5

One table row per (method, drafter, temperature):

* methods: ``target`` (target-only ``generate()``, the reference), every rule
  in ``config.rules`` (default: every registered rule, lossy ones at the
  hyperparameters of ``configs/compare.py``), and the matched truncation
  baselines ``baseline:<rule>`` (the rule's truncation as a logits processor +
  lossless verification; T > 0 only -- at T = 0 they equal lossless);
* drafters: ``chain`` (:class:`LMDrafter`, K sampled drafts, q = the draft
  LM's distribution), ``tree`` (:class:`LMTreeDrafter`, a static top-k tree,
  q = one-hot), and ``eagle_chain`` / ``eagle_tree`` (EAGLE head, dynamic
  tree) when ``config.eagle_dir`` names a trained head;
* columns: tau (tokens per target call), speedup over ``generate()``,
  relaxed-acceptance rate, and the quality metrics of
  :mod:`experiments.quality` (target log-likelihood per token, parse
  fraction, agreement with target greedy at T = 0, first-speculative-token
  KL / TV to the matched baseline at T > 0).

**Speedup protocol.**  Both programs are compiled first (a warm-up call each,
excluded; the compile time is recorded).  Then ``timing.repeats`` times, on
the same batch of prompts and the same PRNG key (one per repeat):
``generate()`` then ``speculative_generate()``, each timed to
``block_until_ready``.  Speedup = median over repeats of the paired
throughput ratio (generated tokens / second, speculative over target-only);
pairing and the median make it robust to load drifting on a shared machine.
All repeats' outputs feed the quality metrics (at T > 0 each repeat is a new
sample).  Rows of the batch run together (``data.batch_size``).

First-token divergence (T > 0, ``kl.*``): one extra call per row with
``kl.num_prompts x kl.samples`` rows and ``max_new_tokens = 2``; the
target-only row runs the same estimator on exact target samples -- its value
is the estimator's noise floor.

Models: ``models="default"`` (the embedded target + draft), ``"tiny"`` (random
tiny models on the real tokenizer and prompts; smoke tests) or ``"stand_in"``
(the real draft and a random target of the default target's architecture:
validates a full-size run and fills the persistent compile cache,
``compile_cache_dir``, before the trained target exists).

Results: ``<workdir>/<name>.jsonl`` (one record per row, via
:mod:`experiments.sweep`: rerunning resumes, finished rows are skipped; the
key includes a hash of the run settings, so changed settings never reuse stale
rows), ``<name>.md`` (markdown table) and ``<name>.png`` (tau / speedup vs
quality).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import time
from typing import Any

from absl import logging

from experiments import quality, sweep


# --------------------------------------------------------------------------- methods


def parse_rules(spec: str) -> list[tuple[str, dict]]:
  """``"lossless, mars:theta=0.9, cos:lam=0.4"`` -> ``[(name, hparams), ...]``.

  ``all`` expands to every registered rule with default hyperparameters
  (entries listed explicitly override it).  Values are parsed as JSON
  (``true``, ``null``, numbers), else kept as strings.
  """
  from specjax import verifiers
  out: dict[str, dict] = {}
  for item in [s.strip() for s in re.split(r"[,;]\s*(?![^()]*\))", spec) if s.strip()]:
    name, *kvs = item.split(":")
    name = name.strip().lower()
    if name == "all":
      for n in verifiers.available():
        out.setdefault(n, {})
      continue
    hp = {}
    for kv in kvs:
      k, eq, v = kv.partition("=")
      if not eq or not k.strip():
        raise ValueError(f"verifier spec {item!r}: {kv!r} is not hparam=value "
                         f"(e.g. mars:theta=0.9)")
      try:
        hp[k.strip()] = json.loads(v)
      except json.JSONDecodeError:
        hp[k.strip()] = v.strip()
    rule = verifiers.get(name, **hp)  # validates and converts ("0.9" -> 0.9) early
    out[name] = {k: getattr(rule, k) for k in hp}  # the converted values, never strings
  return list(out.items())


DRAFTERS = ("chain", "tree", "eagle_chain", "eagle_tree")


def validate_config(c) -> None:
  """Check every setting a run reads, before any model loads or row runs.

  Raises ``ValueError`` / ``TypeError`` naming the config field, the value and
  what is allowed (rules are checked by :func:`parse_rules`).
  """
  from specjax.checks import check_int, check_range, coerce_number
  drafters = [c.drafters] if isinstance(c.drafters, str) else list(c.drafters)
  bad = [d for d in drafters if d not in DRAFTERS]
  if bad:
    raise ValueError(f"drafters={bad} unknown; choose from {DRAFTERS}")
  temps = [c.temperatures] if isinstance(c.temperatures, (str, int, float)) else c.temperatures
  if not len(temps):
    raise ValueError("temperatures is empty; give at least one, e.g. 0,1")
  for t in temps:
    check_range("temperatures entry", coerce_number("temperatures entry", t, float), low=0.0)
  check_int("num_draft (K)", c.num_draft, low=1)
  try:
    paths = _tree_paths(c)
  except (ValueError, TypeError) as e:
    raise ValueError(f"tree_paths={c.tree_paths!r} is not a JSON list of rank paths such as "
                     f"[[0], [1], [0, 0]]: {e}") from None
  if "tree" in drafters:
    from specjax.decoding.tree import static_tree
    static_tree(paths)
  if c.eagle_dir and not os.path.isdir(c.eagle_dir):
    raise ValueError(f"eagle_dir={c.eagle_dir!r} is not a directory")
  for name in ("num_prompts", "max_new_tokens"):
    check_int(f"data.{name}", c.data[name], low=1)
  check_int("data.batch_size", c.data.batch_size, low=0)
  check_int("timing.repeats", c.timing.repeats, low=1)
  workdir = c.workdir or f"/tmp/specjax_runs/{c.name}"
  if os.path.exists(workdir) and not os.path.isdir(workdir):
    raise ValueError(f"workdir={workdir!r} exists and is not a directory; results go "
                     f"into a directory")


def method_label(rule: str, hparams: dict, baseline: bool = False) -> str:
  hp = ",".join(f"{k}={v}" for k, v in sorted(hparams.items()))
  s = f"{rule}({hp})" if hp else rule
  return f"baseline:{s}" if baseline else s


def settings_hash(c) -> str:
  """Hash of everything but the method axes: a row key never survives a settings change."""
  d = c.to_dict() if hasattr(c, "to_dict") else dict(c)
  keep = {k: d[k] for k in ("models", "seed", "data", "timing", "kl", "tree_paths", "eagle_dir",
                            "eagle_total_tokens", "eagle_top_k", "eagle_depth") if k in d}
  return hashlib.sha256(sweep.canonical_json(keep).encode()).hexdigest()[:10]


def make_row(c, *, kind: str, drafter: str, temperature: float, num_draft: int,
             rule: str = "lossless", hparams: dict | None = None, baseline: bool = False,
             extra: dict | None = None) -> dict:
  """One sweep configuration (a table row)."""
  hparams = dict(hparams or {})
  label = "target" if kind == "target" else method_label(rule, hparams, baseline)
  row = {"kind": kind, "method": label, "rule": rule, "hparams": hparams,
         "baseline": bool(baseline), "drafter": drafter if kind != "target" else "-",
         "temperature": float(temperature), "num_draft": int(num_draft) if kind != "target" else 0}
  row.update(extra or {})
  axes = sweep.canonical_json({k: row[k] for k in sorted(row)})
  row["key"] = f"{label}|{row['drafter']}|T={row['temperature']:g}|K={row['num_draft']}|" \
               f"{hashlib.sha256(axes.encode()).hexdigest()[:8]}|{settings_hash(c)}"
  return row


def default_rows(c) -> list[dict]:
  """The comparison's rows: target, every rule x drafter x T, matched baselines."""
  validate_config(c)
  rows = []
  rules = parse_rules(c.rules)
  drafters = list(c.drafters)
  if c.eagle_dir:
    drafters += [d for d in ("eagle_chain", "eagle_tree") if d not in drafters]
  for t in c.temperatures:
    rows.append(make_row(c, kind="target", drafter="-", temperature=t, num_draft=0))
    for d in drafters:
      k = _drafter_depth(c, d)
      for name, hp in rules:
        rows.append(make_row(c, kind="spec", drafter=d, temperature=t, num_draft=k, rule=name,
                             hparams=hp))
      if t > 0 and c.matched_baselines:
        for name, hp in rules:
          if name in ("spec_cascade", "typical"):
            rows.append(make_row(c, kind="spec", drafter=d, temperature=t, num_draft=k,
                                 rule=name, hparams=hp, baseline=True))
  return rows


def _tree_paths(c) -> tuple:
  return tuple(tuple(int(r) for r in p) for p in json.loads(c.tree_paths))


def _drafter_depth(c, drafter: str) -> int:
  if drafter == "tree":
    return max(len(p) for p in _tree_paths(c))
  if drafter == "eagle_tree":
    return int(c.eagle_depth)
  return int(c.num_draft)


# --------------------------------------------------------------------------- context


@dataclasses.dataclass
class Context:
  """Everything shared by the rows of one run (models, prompts, caches)."""

  c: Any
  target: Any
  target_params: Any
  draft: Any
  draft_params: Any
  tokenizer: Any
  prompts: list  # EvalPrompt
  eagle: Any = None  # (head, drafter params) or None
  mesh: Any = None  # optional jax.sharding.Mesh: rows sharded over its "data" axis
  cache: dict = dataclasses.field(default_factory=dict)
  code_prompts: bool = True  # prompts are code prefixes: report the parse fraction

  @property
  def prompt_ids(self) -> list[list[int]]:
    return [list(p.ids) for p in self.prompts]

  @property
  def eos(self):
    return self.target.config.eos_token_id


def _perturbed(params, seed: int, noise: float):
  import jax
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [l + noise * jax.random.normal(k, l.shape) if l.ndim > 1
                                   else l for l, k in zip(leaves, keys)])


def load_models(c, vocab_size: int):
  """``(target, target_params, draft, draft_params)``: the default models, or random tiny
  ones (``models="tiny"``: same vocabulary, draft = target + noise) for smoke tests."""
  if c.models == "default":
    from specjax.models.defaults import load_default
    t, tp = load_default("target")
    d, dp = load_default("draft")
    return t, tp, d, dp
  if c.models == "stand_in":
    # The real draft and a RANDOM target of the default target's architecture
    # (experiments/configs/target.py sizes on the draft's config.json): validates the
    # pipeline at full size and fills the persistent compile cache (same shapes, same HLO)
    # before the trained target exists.  Its numbers mean nothing.
    import jax
    from experiments.configs.target import get_config as target_train_config
    from specjax.models import hf
    from specjax.models.defaults import default_model_dir, load_default
    from specjax.models.transformer import Model
    d, dp = load_default("draft")
    with open(os.path.join(default_model_dir("draft"), "config.json")) as f:
      cfg = json.load(f)
    m = target_train_config().model
    cfg.update({k: m[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                  "num_attention_heads", "num_key_value_heads", "head_dim")})
    t = Model(hf.config_from_hf(cfg, dtype="float32", param_dtype="float32"))
    return t, t.init_params(jax.random.key(c.seed)), d, dp
  if c.models == "tiny":
    import jax
    from specjax.models.config import ModelConfig
    from specjax.models.transformer import Model
    m = Model(ModelConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                          num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=16, eos_token_id=0))
    tp = jax.tree.map(lambda x: x * 4.0 if x.ndim > 1 else x, m.init_params(jax.random.key(c.seed)))
    return m, tp, m, _perturbed(tp, c.seed + 1, 0.3)
  raise ValueError(f"models={c.models!r}; choose 'default', 'tiny' or 'stand_in'")


def load_context(c) -> Context:
  from experiments.prompts import load_eval_prompts
  from specjax.data.corpus import CorpusConfig
  from specjax.models.defaults import default_tokenizer
  tok = default_tokenizer()
  d = c.data
  prompts = load_eval_prompts(d.num_prompts, tokenizer=tok, max_tokens=d.max_prompt_tokens,
                              min_tokens=d.min_prompt_tokens, seed=d.prompt_seed,
                              corpus=CorpusConfig(root=d.root,
                                                  heldout_fraction=d.heldout_fraction,
                                                  split_seed=d.split_seed))
  t, tp, dm, dp = load_models(c, tok.get_vocab_size())
  eagle = None
  if c.eagle_dir:
    from specjax.decoding.eagle_drafter import EagleDrafter
    from specjax.models.eagle import load_eagle
    head, hp, d2t = load_eagle(c.eagle_dir, t.config)[:3]
    eagle = (head, EagleDrafter.make_params(hp, t, tp, d2t))
  return Context(c, t, tp, dm, dp, tok, prompts, eagle)


# --------------------------------------------------------------------------- one row


def _sampling(t: float):
  from specjax.distributions import SamplingConfig
  return SamplingConfig(temperature=float(t))


def build(ctx: Context, row: dict):
  """``(drafter, draft_params, verifier, target_sampling)`` of a spec row."""
  from specjax import verifiers
  from specjax.decoding.drafters import LMDrafter, LMTreeDrafter
  from specjax.verifiers.baselines import matched_baseline
  samp = _sampling(row["temperature"])
  rule = verifiers.get(row["rule"], **row["hparams"])
  if row["baseline"]:
    base = matched_baseline(rule, samp)
    verifier, target_samp = base.verifier, base.sampling
  else:
    verifier, target_samp = rule, samp
  k = row["num_draft"]
  d = row["drafter"]
  if d == "chain":
    return LMDrafter(k, samp, ctx.draft), ctx.draft_params, verifier, target_samp
  if d == "tree":
    return (LMTreeDrafter(ctx.draft, paths=_tree_paths(ctx.c), sampling=samp), ctx.draft_params,
            verifier, target_samp)
  if d in ("eagle_chain", "eagle_tree"):
    if ctx.eagle is None:
      raise ValueError(f"drafter {d!r} needs config.eagle_dir")
    from specjax.decoding.eagle_drafter import EagleDrafter
    head, params = ctx.eagle
    if d == "eagle_chain":
      return EagleDrafter(k, samp, head=head), params, verifier, target_samp
    return (EagleDrafter(depth=k, sampling=samp, head=head, tree_kind="dynamic",
                         top_k=int(ctx.c.eagle_top_k),
                         total_tokens=int(ctx.c.eagle_total_tokens)), params, verifier,
            target_samp)
  raise ValueError(f"unknown drafter {d!r}")


def _timed(fn):
  import jax
  t0 = time.perf_counter()
  out = fn()
  jax.block_until_ready(out)
  return out, time.perf_counter() - t0


def _target_sampling_for(row):
  """The target-only reference runs at the row's temperature without processors."""
  return _sampling(row["temperature"])


def evaluate_row(ctx: Context, row: dict) -> dict:
  """Run one row; returns its JSON-able result (see module docstring)."""
  import jax
  import numpy as np
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.speculative import speculative_generate

  c = ctx.c
  d = c.data
  prompts = ctx.prompt_ids
  bs = int(d.batch_size) or len(prompts)
  batches = [prompts[i:i + bs] for i in range(0, len(prompts), bs)]
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
  if spec:
    drafter, dparams, verifier, tsamp = build(ctx, row)

    def run_spec(batch, key, bi):
      return speculative_generate(ctx.target, ctx.target_params, drafter, dparams, verifier,
                                  batch, max_new_tokens=max_new, sampling=tsamp, key=key,
                                  row_offset=bi * bs, mesh=ctx.mesh, prompt_bucket=bucket)
  # --- warm-up (compile), excluded from timing: one call per compiled program, i.e. per
  # (program, padded prompt bucket) not yet run in this context.
  def warm(name, fn):
    from specjax.decoding.prompts import bucket_length
    t0 = time.perf_counter()
    for bi, b in enumerate(batches):
      k = (name, len(b), bucket_length(max(bucket or 1, *map(len, b))))
      if k not in ctx.cache:
        _timed(lambda: fn(b, keys[0], bi))
        ctx.cache[k] = True
    return time.perf_counter() - t0

  compile_target = warm(("target", sweep.canonical_json(dataclasses.asdict(gsamp))), run_target)
  compile_spec = warm(("spec", row["key"]), run_spec) if spec else 0.0
  # --- timed, paired repeats.
  ratios, t_target, t_spec, rate_target, rate_spec = [], [], [], [], []
  outs_target, outs_spec = [], []
  calls = acc = relaxed = verified = 0
  acc_pos = off_pos = None
  for key in keys:
    tt = ts = 0.0
    nt = ns = 0
    for bi, b in enumerate(batches):
      g, dt = _timed(lambda: run_target(b, key, bi))
      tt += dt
      lists = g.to_lists()
      nt += sum(map(len, lists))
      outs_target.append(lists)
      if spec:
        r, dt = _timed(lambda: run_spec(b, key, bi))
        ts += dt
        lists = r.to_lists()
        ns += sum(map(len, lists))
        outs_spec.append(lists)
        st = r.stats
        calls += int(np.sum(st.target_calls))
        acc += int(np.sum(st.accepted))
        relaxed += int(np.sum(st.relaxed))
        verified += int(np.sum(st.verified_tokens))
        a, o = np.sum(np.asarray(st.accept_counts), 0), np.sum(np.asarray(st.offered_counts), 0)
        acc_pos = a if acc_pos is None else acc_pos + a
        off_pos = o if off_pos is None else off_pos + o
    t_target.append(tt)
    rate_target.append(nt / tt)
    if spec:
      t_spec.append(ts)
      rate_spec.append(ns / ts)
      ratios.append((ns / ts) / (nt / tt))
  outs = outs_spec if spec else outs_target
  flat = [row_ for batch in outs for row_ in batch]
  nrep = len(keys)
  flat_prompts = prompts * nrep  # outs are [repeat][batch][row] in prompt order
  res: dict[str, Any] = {
      "num_rows": len(flat), "generated_tokens": int(sum(map(len, flat))),
      "mean_length": float(np.mean([len(x) for x in flat])),
      "target_time_s": float(np.median(t_target)), "compile_target_s": compile_target,
      "target_tokens_per_s": float(np.median(rate_target)),
      "tokens_per_s": float(np.median(rate_spec if spec else rate_target)),
  }
  if spec:
    res.update({
        "tau": (acc + calls) / max(calls, 1), "target_calls": calls, "accepted": acc,
        "relaxed": relaxed, "relaxed_rate": relaxed / max(acc, 1),
        "verified_per_call": verified / max(calls, 1),
        "accept_rate_per_position": (acc_pos / np.maximum(off_pos, 1)).tolist(),
        "spec_time_s": float(np.median(t_spec)), "compile_spec_s": compile_spec,
        "speedup": float(np.median(ratios)), "speedup_per_repeat": ratios,
    })
  # --- quality.
  ll = quality.target_loglik(ctx.target, ctx.target_params, flat_prompts, flat,
                             batch_size=int(c.quality_batch_size))
  res["loglik"] = ll["mean"]
  eos = ctx.eos if ctx.eos is not None else []
  eos = [eos] if isinstance(eos, int) else list(eos)
  texts, ended = quality.decode_completions(ctx.tokenizer, flat, eos)
  ptexts = [p.text for p in ctx.prompts] * nrep
  if ctx.code_prompts:
    res["parse_frac"] = quality.parse_fraction(ptexts, texts, ended)
  res["eos_frac"] = float(np.mean(ended))
  if row["temperature"] == 0:
    ref = [r for batch in outs_target[:len(batches)] for r in batch]
    agree = quality.greedy_agreement(flat[:len(ref)], ref)
    res["agree_exact"], res["agree_prefix"] = agree["exact"], agree["prefix"]
  if row["temperature"] > 0 and c.kl.enabled:
    if spec:
      res.update(_first_token_kl(ctx, row, drafter, dparams, verifier, tsamp))
    else:  # the exact sampler's value: the plug-in estimator's noise floor
      res.update(_first_token_kl(ctx, row, None, None, None, gsamp))
  res["sample_completion"] = texts[0][:200] if texts else ""
  return res


def _first_token_kl(ctx: Context, row, drafter, dparams, verifier, tsamp) -> dict:
  """Many samples of the first ``kl.num_prompts`` prompts, ``max_new_tokens = 2``
  (``drafter=None``: target-only samples, compared with p -- the noise floor)."""
  import jax
  import numpy as np
  from specjax import verifiers
  from specjax.decoding.speculative import speculative_generate
  kc = ctx.c.kl
  base_prompts = ctx.prompt_ids[:int(kc.num_prompts)]
  rows = [p for p in base_prompts for _ in range(int(kc.samples))]
  key = jax.random.fold_in(jax.random.key(int(ctx.c.seed)), 10_000)
  if drafter is None:  # target-only generate(): exact samples of p
    from specjax.decoding.autoregressive import generate
    r = generate(ctx.target, ctx.target_params, rows, max_new_tokens=2, sampling=tsamp, key=key)
  else:
    r = speculative_generate(ctx.target, ctx.target_params, drafter, dparams, verifier, rows,
                             max_new_tokens=2, sampling=tsamp, key=key)
  toks, lens = np.asarray(r.tokens), np.asarray(r.lengths)
  keep = lens >= 2
  rule = verifiers.get(row["rule"], **row["hparams"])
  # The matched baseline of the *rule* (a baseline row compares with itself: lossless).
  out = quality.first_token_divergence(
      ctx.target, ctx.target_params, rule, _sampling(row["temperature"]),
      [p for p, k in zip(rows, keep) if k], toks[keep, 0].tolist(), toks[keep, 1].tolist(),
      min_count=int(kc.min_count))
  return {f"first_{k}": v for k, v in out.items()}


# --------------------------------------------------------------------------- reporting


def _fmt(x, spec=".3f"):
  if x is None or (isinstance(x, float) and math.isnan(x)):
    return "–"
  return format(x, spec)


COLUMNS = [("method", "method", None), ("drafter", "drafter", None), ("T", "temperature", "g"),
           ("K", "num_draft", "d"), ("tau", "tau", ".2f"), ("speedup", "speedup", ".2f"),
           ("relaxed", "relaxed_rate", ".3f"), ("loglik/tok", "loglik", ".3f"),
           ("parse", "parse_frac", ".2f"), ("agree (T=0)", "agree_exact", ".2f"),
           ("KL1 vs base", "first_kl", ".3f"), ("KL1-MM", "first_kl_mm", ".3f"),
           ("TV1 vs base", "first_tv", ".3f")]


def markdown_table(records: list[dict], columns=COLUMNS) -> str:
  head = "| " + " | ".join(c[0] for c in columns) + " |"
  sep = "|" + "|".join("---" for _ in columns) + "|"
  lines = [head, sep]
  for r in records:
    cfg, res = r["config"], r["result"]
    cells = []
    for _, field, spec in columns:
      v = cfg.get(field, res.get(field))
      if field in res:
        v = res[field]
      cells.append(str(v) if spec is None else _fmt(v, spec))
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def plot_quality_vs_speed(records: list[dict], path: str, title: str = "") -> str:
  """Two panels per temperature: tau and speedup (x) vs target log-lik/token (y)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  temps = sorted({r["config"]["temperature"] for r in records})
  fig, axes = plt.subplots(2, len(temps), figsize=(6 * len(temps), 9), squeeze=False)
  markers = {"chain": "o", "tree": "s", "eagle_chain": "^", "eagle_tree": "D", "-": "*"}
  for j, t in enumerate(temps):
    rows = [r for r in records if r["config"]["temperature"] == t]
    tgt = [r for r in rows if r["config"]["kind"] == "target"]
    for i, xfield in enumerate(("tau", "speedup")):
      ax = axes[i, j]
      if tgt:
        ax.axhline(tgt[0]["result"]["loglik"], color="gray", ls="--", lw=1,
                   label="target-only")
      for r in rows:
        if r["config"]["kind"] != "spec":
          continue
        x, y = r["result"].get(xfield), r["result"].get("loglik")
        if x is None or y is None:
          continue
        ax.scatter([x], [y], marker=markers.get(r["config"]["drafter"], "o"))
        ax.annotate(f"{r['config']['method']} [{r['config']['drafter']}]", (x, y), fontsize=6,
                    xytext=(3, 3), textcoords="offset points")
      ax.set_xlabel(xfield)
      ax.set_ylabel("target log-lik / token")
      ax.set_title(f"{title} T={t:g}")
      ax.grid(alpha=0.3)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


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


def write_reports(c, records, name: str, title: str = "", plot_fn=None) -> dict:
  workdir = c.workdir or f"/tmp/specjax_runs/{c.name}"
  md = os.path.join(workdir, f"{name}.md")
  with open(md, "w") as f:
    f.write(markdown_table(records) + "\n")
  png = os.path.join(workdir, f"{name}.png")
  (plot_fn or plot_quality_vs_speed)(records, png, title)
  return {"markdown": md, "figure": png}


def plot_lines(records: list[dict], path: str, title: str, x_of, xlabel: str,
               metrics=("tau", "speedup", "loglik", "parse_frac")) -> str:
  """One panel per metric: a line per (method family, drafter) against ``x_of(config)``;
  target-only rows are drawn dashed (a line when x varies with them, e.g. T)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 4), squeeze=False)
  series: dict[str, list] = {}
  for r in records:
    cfg = r["config"]
    name = cfg.get("series") or (cfg["method"] if cfg["kind"] == "target"
                                 else f"{cfg['method']} [{cfg['drafter']}]")
    series.setdefault(name, []).append((x_of(cfg), r["result"]))
  for ax, m in zip(axes[0], metrics):
    for name, pts in series.items():
      pts = sorted((x, res.get(m)) for x, res in pts if res.get(m) is not None)
      if not pts:
        continue
      xs, ys = zip(*pts)
      is_target = name.startswith("target")
      style = dict(ls="--", color="gray") if is_target else dict(marker="o")
      if len(xs) == 1:  # a reference (target-only, lossless): a horizontal line
        ax.axhline(ys[0], lw=1, label=name,
                   **(style if is_target else dict(ls=":", color="black")))
      else:
        ax.plot(xs, ys, label=name, **style)
    ax.set_xlabel(xlabel)
    ax.set_title(m)
    ax.grid(alpha=0.3)
  axes[0][0].legend(fontsize=7)
  fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def run_line_sweep(c, rows: list[dict], title: str, x_of, xlabel: str) -> dict:
  """Run (or resume) a one-axis sweep and write its table and line plots
  (shared by ``sweep_theta``, ``sweep_k`` and ``sweep_temperature``)."""
  validate_config(c)
  enable_compile_cache(c)
  records, path = run_rows(c, rows)
  files = write_reports(c, records, c.name, title,
                        plot_fn=lambda r, p, t: plot_lines(r, p, t, x_of, xlabel))
  print(markdown_table(records))
  logging.info("wrote %s, %s, %s", path, files["markdown"], files["figure"])
  return {"records": records, "jsonl": path, **files}


def enable_compile_cache(c) -> None:
  """Persistent XLA compilation cache: reruns and sibling sweeps skip recompiles."""
  d = c.get("compile_cache_dir", "")
  if d:
    import jax
    jax.config.update("jax_compilation_cache_dir", d)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def run(c) -> dict:
  enable_compile_cache(c)
  rows = default_rows(c)
  records, path = run_rows(c, rows)
  files = write_reports(c, records, c.name, "verifiers")
  logging.info("wrote %s, %s, %s", path, files["markdown"], files["figure"])
  print(markdown_table(records))
  return {"records": records, "jsonl": path, **files}


if __name__ == "__main__":
  from experiments import cli
  cli.run_config_binary(run, "comparison config file.", default="experiments/configs/compare.py")
