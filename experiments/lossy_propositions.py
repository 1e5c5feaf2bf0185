r"""Lossy-verification propositions (SPEC §6, issue 7), on synthetic and real contexts.

  python -m experiments.lossy_propositions --config=experiments/configs/propositions.py \
      [--output_dir=/tmp/props] [--checkpoint_dir=DIR_WITH_target_AND_draft]
  python -m experiments.lossy_propositions --config=experiments/configs/propositions.py:tiny

Parts (each on synthetic families and on real contexts of the default models):

(a) ``sd``: standard SD with a truncation rule, ``KL(P_SD || p_A)`` vs t for
    ``q_t = (1 - t) p + t u`` and for q interpolated from the real draft
    towards p (``family`` "uniform" / "draft") -- tends to 0 as t -> 0.
(b) ``eagle``: deterministic top-k drafts, ``KL(P_EAGLE || p_A)`` vs t,
    tending to ``E[log(Z_A / p(argmax))] > 0`` (recorded as ``limit``).
(c) ``truncation``: acceptance rate and block efficiency for (p, q), (p_A, q),
    (p_A, q_A) and the hard gate, across p_base (min-p) and eta sweeps, with
    the sign of the change in block efficiency.
(d) ``mars``: ``KL(P_MARS || p)`` vs theta (sampled and greedy top-1 drafts)
    and the share of strict rejections in ``r > theta``.
    ``margins``: logit- vs probability-ratio statistics
    (:mod:`specjax.analysis.margins`).

Output (``--output_dir``): ``records.jsonl`` -- one JSON line per
configuration ``{"key", "config", "result"}`` written by the generic resumable
runner :mod:`experiments.sweep` (atomic append; a restart skips configurations
whose key is already there -- the key includes a hash of the settings that
produce it; non-finite floats are stored as ``null``, i.e. ``KL = +inf``
appears as ``null``); PNG figures rebuilt from the records each run;
``tables.md`` (markdown tables); a summary table on stdout.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time

from absl import app, flags, logging

_CONFIG = None  # defined in __main__ only: importing this module defines no flags
_OUTPUT_DIR = None  # defined in __main__ only: importing this module defines no flags
_CHECKPOINT_DIR = None  # defined in __main__ only: importing this module defines no flags

RECORDS = "records.jsonl"


# --- records -------------------------------------------------------------------------


def settings_hash(settings: dict) -> str:
  return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()
                        ).hexdigest()[:10]


def parse_rule(spec: str):
  """``"name:k=v,k=v"`` -> (canonical spec, NodeRule).  Values: int, float, bool, None or str."""
  from specjax import verifiers
  name, _, rest = spec.partition(":")
  kw = {}
  for item in filter(None, (s.strip() for s in rest.split(","))):
    k, _, v = item.partition("=")
    v = v.strip()
    if v in ("True", "False", "true", "false"):
      val = v.lower() == "true"
    elif v in ("None", "none"):
      val = None
    else:
      try:
        val = int(v)
      except ValueError:
        try:
          val = float(v)
        except ValueError:
          val = v
    kw[k.strip()] = val
  rule = verifiers.get(name.strip(), **kw)
  canon = name.strip() + (":" + ",".join(f"{k}={kw[k]}" for k in sorted(kw)) if kw else "")
  return canon, rule


# --- contexts ------------------------------------------------------------------------


class Sources:
  """Lazily built context sets: ``"synthetic"`` (Dirichlet p), ``"synthetic_logits"``
  (Gaussian logits with an LM-like offset, for MARS) and ``"real"``."""

  def __init__(self, c, models: str):
    self.c = c
    self.models = models
    self._cache = {}

  def settings(self, source: str) -> dict:
    c = self.c
    if source == "real":
      return {"models": self.models, **{k: c.real[k] for k in
              ("num_positions", "seq_len", "min_position", "temperature",
               "draft_temperature", "sd_contexts")}, "seed": c.seed}
    return {"seed": c.seed, **c.synthetic.to_dict(), "family": source}

  def get(self, source: str):
    """``(z, p, q, q_sd_slice)``: arrays [B, V] and the number of contexts for V^2 work."""
    if source in self._cache:
      return self._cache[source]
    import jax
    import jax.numpy as jnp
    from specjax.analysis import propositions as props
    c = self.c
    s = c.synthetic
    if source == "synthetic":
      kp, kq = jax.random.split(jax.random.key(c.seed))
      z, p = props.dirichlet_contexts(kp, s.num_contexts, s.vocab, s.concentration)
      q = jax.nn.softmax(z + s.draft_noise * jax.random.normal(kq, z.shape), axis=-1)
      out = (z, p, q, s.num_contexts)
    elif source == "synthetic_logits":
      kp, kq = jax.random.split(jax.random.key(c.seed + 1))
      z, p = props.gaussian_logit_contexts(kp, s.num_contexts, s.vocab, scale=s.logit_scale,
                                           shift=s.logit_shift)
      q = jax.nn.softmax(z + s.draft_noise * jax.random.normal(kq, z.shape), axis=-1)
      out = (z, p, q, s.num_contexts)
    elif source == "real":
      from experiments import contexts as ctx_lib
      t0 = time.time()
      ms = ctx_lib.load_models(self.models, seed=c.seed)
      r = c.real
      ctx = ctx_lib.extract_contexts(
          ms, num_positions=r.num_positions, seq_len=r.seq_len, min_position=r.min_position,
          temperature=r.temperature, draft_temperature=r.draft_temperature,
          batch_size=r.batch_size, seed=c.seed, cache_dir=r.cache_dir)
      logging.info("real contexts: %d positions, V=%d (%.1fs)", ctx.num, ctx.vocab_size,
                   time.time() - t0)
      self._cache["real_contexts"] = ctx
      out = (jnp.asarray(ctx.z), jnp.asarray(ctx.p), jnp.asarray(ctx.q),
             min(r.sd_contexts, ctx.num))
    else:
      raise ValueError(source)
    self._cache[source] = out
    return out

  def real_contexts(self):
    self.get("real")
    return self._cache["real_contexts"]


# --- configurations ------------------------------------------------------------------


def _mean(x):
  import numpy as np
  x = np.asarray(x, np.float64)
  return [float(v) for v in x.mean(axis=-1)] if x.ndim > 1 else float(x.mean())


def _median(x):
  import numpy as np
  return [float(v) for v in np.median(np.asarray(x, np.float64), axis=-1)]


def plan(c, models: str, sources: Sources) -> list[dict]:
  """All configurations: dicts with ``key``, ``part``, ``source`` and their parameters."""
  out = []
  srcs = [s for s in c.sources if not (s == "real" and models == "none")]
  common = {"ts": list(c.ts), "chunk_size": c.chunk_size}

  def add(part, source, settings, **params):
    st = {"source": sources.settings(source), **settings}
    h = settings_hash(st)
    name = "|".join([part, source] + [f"{k}={params[k]}" for k in sorted(params)])
    out.append({"key": f"{name}|{h}", "part": part, "source": source, **params})

  for src in srcs:
    base_src = "synthetic" if src == "synthetic" else "real"
    families = ("uniform",) if src == "synthetic" else ("uniform", "draft")
    for spec in c.rules:
      canon, _ = parse_rule(spec)
      for fam in families:
        if "sd" in c.parts:
          add("sd", base_src, common, rule=canon, family=fam)
        if "eagle" in c.parts:
          for k in c.eagle_top_k:
            add("eagle", base_src, {"ts": list(c.ts)}, rule=canon, family=fam, top_k=int(k))
    if "truncation" in c.parts:
      if src == "synthetic":
        fams = ("noisy",)
      else:
        fams = ("draft",)
      for fam in fams:
        add("truncation", base_src, {"values": list(c.p_base_values), "gamma": c.gamma},
            kind="min_p", family=fam)
        add("truncation", base_src, {"values": list(c.eta_values), "gamma": c.gamma},
            kind="eta", family=fam)
    mars_src = "synthetic_logits" if src == "synthetic" else "real"
    if "mars" in c.parts:
      for d in c.mars_drafts:
        add("mars", mars_src, {"thetas": list(c.thetas), "chunk_size": c.chunk_size}, draft=d)
    if "margins" in c.parts:
      add("margins", mars_src, {"thetas": list(c.thetas), "theta": c.theta})
  return out


def run_config(cfg: dict, c, sources: Sources, output_dir: str) -> dict:
  """Compute one configuration's record."""
  import jax.numpy as jnp
  import numpy as np
  from specjax.analysis import divergences as dv
  from specjax.analysis import propositions as props

  z, p, q, n_sd = sources.get(cfg["source"])
  part = cfg["part"]
  rec = {k: v for k, v in cfg.items()}
  rec["models"] = sources.models if cfg["source"] == "real" else "synthetic"
  rec["vocab"] = int(z.shape[-1])
  cb = c.context_batch

  if part in ("sd", "eagle"):
    _, rule = parse_rule(cfg["rule"])
    q_ref = props.uniform_like(p) if cfg["family"] == "uniform" else q
    if part == "sd":
      zz, pp, qq = z[:n_sd], p[:n_sd], q_ref[:n_sd]
      curve = props.sd_kl_curve(rule, zz, pp, qq, list(c.ts), chunk_size=c.chunk_size,
                                context_batch=cb)
    else:
      zz, pp, qq = z, p, q_ref
      curve = props.eagle_kl_curve(rule, zz, pp, qq, list(c.ts), top_k=cfg["top_k"],
                                   context_batch=cb)
    mask = dv.matched_allowed_set(rule, pp)
    limit = props.eagle_kl_limit(pp, mask)
    rec.update(n=int(zz.shape[0]), ts=[float(t) for t in curve.ts],
               kl_mean=_mean(curve.kl), kl_median=_median(curve.kl),
               kl_reverse_mean=_mean(curve.kl_reverse), tv_mean=_mean(curve.tv),
               accept_mean=_mean(curve.accept_rate), limit=float(jnp.mean(limit)),
               allowed_size_mean=float(jnp.mean(jnp.sum(mask, -1))),
               allowed_mass_mean=float(jnp.mean(dv.allowed_mass(pp, mask))))
  elif part == "truncation":
    values = list(c.p_base_values if cfg["kind"] == "min_p" else c.eta_values)
    sw = props.truncation_sweep(p, q, cfg["kind"], values, gamma=c.gamma)
    d_paq = np.asarray(sw.delta_be_paq)
    d_paqa = np.asarray(sw.delta_be_paqa)
    rec.update(n=int(p.shape[0]), values=values, gamma=c.gamma,
               alpha_pq=_mean(sw.alpha_pq), alpha_paq=_mean(sw.alpha_paq),
               alpha_paqa=_mean(sw.alpha_paqa), alpha_gate=_mean(sw.alpha_gate),
               be_pq=float(sw.be_pq), be_paq=[float(x) for x in sw.be_paq],
               be_paqa=[float(x) for x in sw.be_paqa], be_gate=[float(x) for x in sw.be_gate],
               delta_be_paq=d_paq.tolist(), delta_be_paqa=d_paqa.tolist(),
               delta_be_gate=(np.asarray(sw.be_gate) - float(sw.be_pq)).tolist(),
               sign_delta_be_paq=np.sign(d_paq).astype(int).tolist(),
               sign_delta_be_paqa=np.sign(d_paqa).astype(int).tolist())
  elif part == "mars":
    if cfg["draft"] == "sampled":
      zz, pp, qq = z[:n_sd], p[:n_sd], q[:n_sd]
      sw = props.mars_sweep(zz, pp, qq, list(c.thetas), draft="sampled",
                            chunk_size=c.chunk_size, context_batch=cb)
    else:
      zz, pp, qq = z, p, q
      sw = props.mars_sweep(zz, pp, qq, list(c.thetas), draft="topk", top_k=1,
                            context_batch=cb)
    from specjax.analysis.induced import induced_parts
    from specjax.verifiers import Lossless
    kw = (dict(draft="sampled", chunk_size=c.chunk_size) if cfg["draft"] == "sampled"
          else dict(draft="topk", top_k=1))
    base = induced_parts(Lossless(), zz, pp, qq, context_batch=cb, **kw)
    rec.update(n=int(zz.shape[0]), thetas=[float(t) for t in sw.thetas],
               kl_mean=_mean(sw.kl), kl_median=_median(sw.kl), tv_mean=_mean(sw.tv),
               accept_mean=_mean(sw.accept_rate), relaxed_mean=_mean(sw.relaxed_rate),
               active_frac=_mean(sw.active.astype(jnp.float32)),
               strict_reject_mean=float(jnp.mean(sw.strict_reject)),
               reject_share=[float(x) for x in sw.reject_share],
               reject_given_active=[float(x) for x in sw.reject_given_active],
               lossless_accept_mean=float(jnp.mean(base.accept_rate)))
  elif part == "margins":
    from specjax.analysis import margins as mg
    temp = c.real.temperature if cfg["source"] == "real" else 1.0
    zn, pn, qn = np.asarray(z), np.asarray(p), np.asarray(q)
    rec["summary"] = mg.margin_summary(zn, q=qn, p=pn, temperature=temp, thetas=list(c.thetas),
                                       theta=c.theta)
    rec["n"] = int(zn.shape[0])
    if c.figures:  # the scatter needs the raw logits, so it is drawn now
      import matplotlib.pyplot as plt
      fig = mg.plot_ratio_scatter(zn, theta=c.theta, draft_token=qn.argmax(-1),
                                  title=f"z2 vs z1 ({cfg['source']})")
      fig.savefig(os.path.join(output_dir, f"margins_scatter_{cfg['source']}.png"), dpi=110)
      plt.close(fig)
  else:
    raise ValueError(part)
  return rec


# --- figures and summary -------------------------------------------------------------


def _nan_for_null(x):
  if x is None:
    return float("nan")
  if isinstance(x, list):
    return [_nan_for_null(v) for v in x]
  if isinstance(x, dict):
    return {k: _nan_for_null(v) for k, v in x.items()}
  return x


def flatten(records: list[dict]) -> list[dict]:
  """``{"key", "config", "result"}`` sweep records -> flat dicts (``null`` -> nan)."""
  out = []
  for r in records:
    if "config" in r and "result" in r:
      flat = {**r["config"], **_nan_for_null(r["result"]), "key": r["key"]}
    else:
      flat = _nan_for_null(dict(r))
    out.append(flat)
  return out


def _latest(records):
  """Flat records, last one per key."""
  out = {}
  for r in flatten(records):
    out[r["key"]] = r
  return list(out.values())


def make_figures(records: list[dict], output_dir: str) -> list[str]:
  """PNG figures from the records; returns the written paths."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from specjax.analysis import margins as mg
  written = []

  def save(fig, name):
    path = os.path.join(output_dir, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

  recs = _latest(records)
  for source in ("synthetic", "real"):
    kl = [r for r in recs if r["part"] in ("sd", "eagle") and r["source"] == source]
    rules = sorted({r["rule"] for r in kl})
    if rules:
      fig, axes = plt.subplots(2, len(rules), figsize=(4.6 * len(rules), 7.0), squeeze=False)
      for col, rule in enumerate(rules):
        ax, ax_tv = axes[0, col], axes[1, col]
        lim = None
        for r in sorted((r for r in kl if r["rule"] == rule),
                        key=lambda r: (r["part"], r["family"], r.get("top_k", 0))):
          label = ("SD" if r["part"] == "sd" else f"EAGLE top-{r['top_k']}") + \
              f", q_ref={r['family']}"
          ls = "-" if r["part"] == "sd" else "--"
          finite = [k if k is not None and math.isfinite(k) else float("nan")
                    for k in r["kl_mean"]]
          if any(math.isfinite(k) for k in finite):
            ax.plot(r["ts"], finite, ls, marker="o", ms=3, label=label)
          else:
            label += " (KL = inf)"
          ax_tv.plot(r["ts"], r["tv_mean"], ls, marker="o", ms=3, label=label)
          if r["part"] == "eagle":
            lim = r["limit"]
        if lim is not None:
          ax.axhline(lim, color="k", ls=":", lw=1,
                     label=f"E[log Z_A/p(argmax)] = {lim:.3f}")
        ax.set_ylabel("mean KL(P || p_A)  [nats]")
        ax.set_title(rule, fontsize=9)
        ax.legend(fontsize=6)
        ax_tv.set_xlabel("t  (q_t = (1-t) p + t q_ref; t=0: q = p)")
        ax_tv.set_ylabel("mean TV(P, p_A)")
        ax_tv.legend(fontsize=6)
      fig.suptitle(f"Truncation rules: SD vs EAGLE drafts ({source} contexts)")
      fig.tight_layout()
      save(fig, f"kl_vs_t_{source}.png")

    tr = [r for r in recs if r["part"] == "truncation" and r["source"] == source]
    if tr:
      fig, axes = plt.subplots(1, len(tr), figsize=(4.8 * len(tr), 3.6), squeeze=False)
      for ax, r in zip(axes[0], sorted(tr, key=lambda r: r["kind"])):
        ax.plot(r["values"], r["delta_be_paq"], "o-", label="(p_A, q) - (p, q)")
        ax.plot(r["values"], r["delta_be_paqa"], "s-", label="(p_A, q_A) - (p, q)")
        ax.plot(r["values"], r["delta_be_gate"], "^-", label="hard gate q(A) - (p, q)")
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xlabel("p_base" if r["kind"] == "min_p" else "eta (eps)")
        ax.set_ylabel(f"Delta block efficiency (gamma={r['gamma']})")
        ax.set_title(f"{r['kind']}: BE(p,q) = {r['be_pq']:.3f}", fontsize=9)
        ax.legend(fontsize=7)
      fig.suptitle(f"Block efficiency change under truncation ({source})")
      fig.tight_layout()
      save(fig, f"truncation_be_{source}.png")

  for source in ("synthetic_logits", "real"):
    ms = [r for r in recs if r["part"] == "mars" and r["source"] == source]
    if ms:
      fig, ax = plt.subplots(figsize=(5.8, 4))
      ax2 = ax.twinx()
      for r in sorted(ms, key=lambda r: r["draft"]):
        ax.plot(r["thetas"], r["kl_mean"], "o-", label=f"KL(P_MARS || p), {r['draft']} draft")
        ax2.plot(r["thetas"], r["reject_share"], "s--", alpha=0.7,
                 label=f"strict-rejection share r>theta, {r['draft']}")
      ax.set_xlabel("theta")
      ax.set_ylabel("mean KL to p [nats]")
      ax2.set_ylabel("share of strict rejections in r > theta")
      ax2.set_ylim(0, 1)
      h1, l1 = ax.get_legend_handles_labels()
      h2, l2 = ax2.get_legend_handles_labels()
      ax.legend(h1 + h2, l1 + l2, fontsize=6)
      ax.set_title(f"MARS theta sweep ({source})")
      fig.tight_layout()
      save(fig, f"mars_theta_{source}.png")
    mg_rec = [r for r in recs if r["part"] == "margins" and r["source"] == source]
    for r in mg_rec:
      save(mg.plot_histograms(r["summary"], title=f"margins ({source})"),
           f"margins_hist_{source}.png")
      save(mg.plot_theta_curves(r["summary"], title=f"MARS relaxation vs theta ({source})"),
           f"margins_theta_{source}.png")
  return written


def summary_table(records: list[dict], theta: float = 0.9) -> str:
  """A small text table of the headline numbers."""
  lines = []
  recs = _latest(records)
  lines.append(f"{'part':<10} {'source':<17} {'config':<44} {'result'}")
  for r in sorted(recs, key=lambda r: r["key"]):
    part, src = r["part"], r["source"]
    if part in ("sd", "eagle"):
      cfg = f"{r['rule']} q_ref={r['family']}" + (f" k={r['top_k']}" if part == "eagle" else "")
      kl_s = lambda x: "inf" if not math.isfinite(x) else f"{x:.4f}"  # null/nan = +inf
      res = (f"KL(t={r['ts'][0]:g})={kl_s(r['kl_mean'][0])} "
             f"KL(t={r['ts'][-1]:g})={kl_s(r['kl_mean'][-1])} "
             f"TV(t={r['ts'][-1]:g})={r['tv_mean'][-1]:.4f} eagle_limit={r['limit']:.4f}")
    elif part == "truncation":
      cfg = f"{r['kind']} {r['values']}"
      res = (f"BE(p,q)={r['be_pq']:.3f} dBE(pA,q)={[round(x, 3) for x in r['delta_be_paq']]} "
             f"dBE(pA,qA)={[round(x, 3) for x in r['delta_be_paqa']]}")
    elif part == "mars":
      i = min(range(len(r["thetas"])), key=lambda j: abs(r["thetas"][j] - theta))
      cfg = f"draft={r['draft']} theta={r['thetas'][i]:g}"
      res = (f"KL={r['kl_mean'][i]:.4f} accept {r['lossless_accept_mean']:.3f}->"
             f"{r['accept_mean'][i]:.3f} relaxed={r['relaxed_mean'][i]:.3f} "
             f"reject_share={r['reject_share'][i]:.3f}")
    elif part == "margins":
      s = r["summary"]
      cfg = f"theta={s['theta']} n={s['n']}"
      res = (f"neg_z1={s['frac_negative_top1']:.3f} relaxed={s['frac_relaxed']:.3f} "
             f"fig1d_P(rej|r>theta)={s.get('greedy_reject_rate_relaxed', float('nan')):.3f} "
             f"greedy_reject_share={s.get('greedy_reject_share', float('nan')):.3f} "
             f"rescued={s.get('greedy_rescued_share', float('nan')):.3f}")
    else:
      continue
    lines.append(f"{part:<10} {src:<17} {cfg:<44} {res}")
  return "\n".join(lines)


def markdown_tables(records: list[dict]) -> str:
  """Markdown tables of the records (for ``benchmarks/RESULTS.md``)."""
  recs = _latest(records)
  out = []
  f4 = lambda x: "inf" if x is None or not math.isfinite(x) else f"{x:.4f}"
  kl = sorted((r for r in recs if r["part"] in ("sd", "eagle")),
              key=lambda r: (r["source"], r["rule"], r["part"] != "sd", r["family"],
                             r.get("top_k", 0)))
  if kl:
    out += ["| source | rule | drafts | q_ref | n | KL(P‖p_A) t=1 | t=0.1 | t=0 | TV t=0 | "
            "E[log Z_A/p(argmax)] |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in kl:
      ts = r["ts"]
      i01 = min(range(len(ts)), key=lambda j: abs(ts[j] - 0.1))
      i1 = min(range(len(ts)), key=lambda j: abs(ts[j] - 1.0))
      i0 = min(range(len(ts)), key=lambda j: abs(ts[j]))
      d = "SD (sampled)" if r["part"] == "sd" else f"EAGLE top-{r['top_k']}"
      out.append(f"| {r['source']} | {r['rule']} | {d} | {r['family']} | {r['n']} | "
                 f"{f4(r['kl_mean'][i1])} | {f4(r['kl_mean'][i01])} | {f4(r['kl_mean'][i0])} | "
                 f"{f4(r['tv_mean'][i0])} | {f4(r['limit'])} |")
    out.append("")
  tr = sorted((r for r in recs if r["part"] == "truncation"),
              key=lambda r: (r["source"], r["kind"]))
  if tr:
    out += [f"| source | kind | value | alpha(p,q) | alpha(p_A,q) | alpha(p_A,q_A) | alpha gate "
            f"q(A) | BE(p,q) | dBE(p_A,q) | dBE(p_A,q_A) | dBE gate |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in tr:
      for i, v in enumerate(r["values"]):
        out.append(f"| {r['source']} | {r['kind']} | {v:g} | {r['alpha_pq']:.3f} | "
                   f"{r['alpha_paq'][i]:.3f} | {r['alpha_paqa'][i]:.3f} | "
                   f"{r['alpha_gate'][i]:.3f} | {r['be_pq']:.3f} | "
                   f"{r['delta_be_paq'][i]:+.3f} | {r['delta_be_paqa'][i]:+.3f} | "
                   f"{r['delta_be_gate'][i]:+.3f} |")
    out.append("")
  ms = sorted((r for r in recs if r["part"] == "mars"), key=lambda r: (r["source"], r["draft"]))
  if ms:
    out += ["| source | draft | n | theta | KL(P_MARS‖p) | TV | accept (lossless → MARS) | "
            "relaxed | positions r>theta | strict-rejection share r>theta |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in ms:
      for i, th in enumerate(r["thetas"]):
        out.append(f"| {r['source']} | {r['draft']} | {r['n']} | {th:g} | "
                   f"{f4(r['kl_mean'][i])} | {r['tv_mean'][i]:.4f} | "
                   f"{r['lossless_accept_mean']:.3f} → {r['accept_mean'][i]:.3f} | "
                   f"{r['relaxed_mean'][i]:.3f} | {r['active_frac'][i]:.3f} | "
                   f"{r['reject_share'][i]:.3f} |")
    out.append("")
  mg_recs = sorted((r for r in recs if r["part"] == "margins"), key=lambda r: r["source"])
  if mg_recs:
    out += ["| source | n | z1 < 0 | z1 median | r median | p2/p1 median | r > theta | "
            "greedy reject rate | P(greedy reject \\| r > theta) (Fig. 1d) | "
            "greedy rejections in r > theta | rescued by MARS | "
            "sampled rejection mass in r > theta |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in mg_recs:
      s = r["summary"]
      g = lambda k: (f"{s[k]:.3f}" if isinstance(s.get(k), float) and math.isfinite(s[k])
                     else "–")
      out.append(f"| {r['source']} | {s['n']} | {s['frac_negative_top1']:.3f} | "
                 f"{s['z1'].get('q50', float('nan')):.2f} | {s['ratio'].get('q50', float('nan')):.3f} | "
                 f"{s['prob_ratio'].get('q50', float('nan')):.3f} | {s['frac_relaxed']:.3f} "
                 f"(theta={s['theta']:g}) | {g('greedy_reject_rate')} | "
                 f"{g('greedy_reject_rate_relaxed')} | {g('greedy_reject_share')} | "
                 f"{g('greedy_rescued_share')} | {g('sampled_reject_share')} |")
    out.append("")
  return "\n".join(out)


# --- main ----------------------------------------------------------------------------


def run(c, output_dir: str, models: str) -> list[dict]:
  """Run every configuration not yet in ``<output_dir>/records.jsonl``; return all records.

  Uses :func:`experiments.sweep.run_sweep`; returns the sweep records
  (``{"key", "config", "result"}``) of this run's plan.
  """
  from experiments import sweep
  os.makedirs(output_dir, exist_ok=True)
  path = os.path.join(output_dir, RECORDS)
  sources = Sources(c, models)
  todo = plan(c, models, sources)

  def evaluate(cfg):
    t0 = time.time()
    rec = run_config(cfg, c, sources, output_dir)
    logging.info("done %s (%.1fs)", cfg["key"], time.time() - t0)
    return {k: v for k, v in rec.items() if k not in cfg}

  records = sweep.run_sweep(todo, evaluate, path, desc="propositions", progress=c.progress)
  if c.figures:
    for f in make_figures(records, output_dir):
      logging.info("figure %s", f)
  return records


def main(argv):
  del argv
  c = _CONFIG.value
  output_dir = _OUTPUT_DIR.value or c.output_dir
  models = _CHECKPOINT_DIR.value or c.models
  records = run(c, output_dir, models)
  print(summary_table(records, c.theta))
  md = markdown_tables(records)
  with open(os.path.join(output_dir, "tables.md"), "w") as f:
    f.write(md)
  print(f"\nrecords: {os.path.join(output_dir, RECORDS)}")


def _define_flags():
  """absl flags of this binary (not at import: several binaries share a process in tests)."""
  global _CONFIG
  _CONFIG = cli.define_config_file(
      "config", os.path.join(os.path.dirname(__file__), "configs", "propositions.py"),
      "Propositions config file.", lock_config=True)
  global _OUTPUT_DIR
  _OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Overrides config.output_dir.")
  global _CHECKPOINT_DIR
  _CHECKPOINT_DIR = flags.DEFINE_string(
      "checkpoint_dir", None, "Directory with target/ and draft/ HF checkpoints; overrides "
      "config.models (use 'tiny' for random tiny models).")


if __name__ == "__main__":
  from experiments import cli
  _define_flags()
  app.run(main, flags_parser=cli.parse_flags)
