"""The lossy-verification propositions (docs/spec.md §6) as a resumable sweep: which
configurations there are and how one is computed, on synthetic and real contexts.

Parts (each on synthetic families and on real contexts of the default models):

(a) ``sd``: standard SD with a truncation rule, ``KL(P_SD || p_A)`` vs t for
    ``q_t = (1 - t) p + t u`` and for q interpolated from the real draft
    towards p (``family`` "uniform" / "draft") -- tends to 0 as t -> 0.
(b) ``eagle``: deterministic top-k drafts, ``KL(P_EAGLE || p_A)`` vs t,
    tending to ``E[log(Z_A / p(argmax))] > 0`` (recorded as ``limit``).
(c) ``truncation``: acceptance rate and block efficiency for (p, q), (p_A, q),
    (p_A, q_A) and the hard gate, across p_base (min-p) and eta sweeps, with
    the sign of the change in block efficiency (the paper's Fig. 5: block
    efficiency across the truncation hyperparameter, at the real draft).
    ``alignment``: Lemma 1's split of that change, ``gain - loss``, and the net
    block-efficiency change against the draft-target alignment ratio rho
    (``q_rho = rho p + (1 - rho) q``), one curve per p_base / eps (Fig. 4).
(d) ``mars``: ``KL(P_MARS || p)`` vs theta (sampled and greedy top-1 drafts)
    and the share of strict rejections in ``r > theta``.
    ``margins``: logit- vs probability-ratio statistics
    (:mod:`specjax.analysis.margins`).

:func:`run` writes ``<output_dir>/records.jsonl`` -- one JSON line per
configuration ``{"key", "config", "result", "provenance"}`` written by the generic resumable
runner :mod:`experiments.common.sweep` (atomic append; a restart skips configurations
whose key is already there -- the key includes a hash of the settings that
produce it; non-finite floats are stored as ``null``, i.e. ``KL = +inf``
appears as ``null``) -- and rebuilds the figures of
:mod:`experiments.propositions.reports` from the records.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

from absl import logging

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
    self.seconds = {}  # wall time of building each context set

  def settings(self, source: str) -> dict:
    c = self.c
    if source == "real":
      extra = {k: c.real[k] for k in ("num_windows",) if c.real.get(k) is not None}
      return {"models": self.models, **{k: c.real[k] for k in
              ("num_positions", "seq_len", "min_position", "temperature",
               "draft_temperature", "sd_contexts")}, "seed": c.seed, **extra}
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
      from experiments.common import contexts as ctx_lib
      t0, c0 = time.time(), time.process_time()
      ms = ctx_lib.load_models(self.models, seed=c.seed)
      r = c.real
      ctx = ctx_lib.extract_contexts(
          ms, num_positions=r.num_positions, seq_len=r.seq_len, min_position=r.min_position,
          num_windows=r.get("num_windows"), temperature=r.temperature,
          draft_temperature=r.draft_temperature, batch_size=r.batch_size, seed=c.seed,
          cache_dir=r.cache_dir)
      self.seconds["real_contexts"] = time.time() - t0
      self.seconds["real_contexts_cpu"] = time.process_time() - c0
      logging.info("real contexts: %d positions, V=%d (%.1fs)", ctx.num, ctx.vocab_size,
                   self.seconds["real_contexts"])
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

  def windows(self, source: str):
    """``[N]`` the conversation (held-out window) each real context comes from, for
    intervals over conversations; None for synthetic contexts (independent draws)."""
    return self.real_contexts().window if source == "real" else None


# --- configurations ------------------------------------------------------------------


def _mean(x):
  import numpy as np
  x = np.asarray(x, np.float64)
  return [float(v) for v in x.mean(axis=-1)] if x.ndim > 1 else float(x.mean())


def window_sums(x, windows) -> dict:
  """Per-conversation sums of per-context values ``x [..., N]`` for the contexts'
  conversations ``windows [N]``: ``{"counts": [W], "sums": [..., W]}`` over the W
  conversations that hold a context (a record keeps them so that its readings get an
  interval over conversations, not only a mean over contexts)."""
  import numpy as np
  w = np.asarray(windows)
  ids, inverse, counts = np.unique(w, return_inverse=True, return_counts=True)
  x = np.asarray(x, np.float64)
  if x.shape[-1] != len(w):
    raise ValueError(f"values [..., {x.shape[-1]}] and windows [{len(w)}] differ in length")
  onehot = np.zeros((len(w), len(ids)))
  onehot[np.arange(len(w)), inverse] = 1.0
  return {"counts": counts.tolist(), "sums": (x @ onehot).tolist()}


def _median(x):
  import numpy as np
  return [float(v) for v in np.median(np.asarray(x, np.float64), axis=-1)]


def plan(c, models: str, sources: Sources) -> list[dict]:
  """All configurations: dicts with ``key``, ``part``, ``source`` and their parameters."""
  out = []
  srcs = [s for s in c.sources if not (s == "real" and models == "none")]
  form = sampled_form(c)
  form_setting = {} if form == "enumerate" else {"sampled_form": form}
  common = {"ts": list(c.ts), "chunk_size": c.chunk_size, **form_setting}

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
    if "alignment" in c.parts:
      fam = "noisy" if src == "synthetic" else "draft"
      for kind, values in (("min_p", c.p_base_values), ("eta", c.eta_values)):
        for trunc_q in (True, False):
          add("alignment", base_src, {"values": list(values), "rhos": list(c.rhos),
                                      "gamma": c.gamma},
              kind=kind, family=fam, truncate_draft=trunc_q)
    mars_src = "synthetic_logits" if src == "synthetic" else "real"
    if "mars" in c.parts:
      for d in c.mars_drafts:
        add("mars", mars_src, {"thetas": list(c.thetas), "chunk_size": c.chunk_size,
                               **(form_setting if d == "sampled" else {})}, draft=d)
    if "margins" in c.parts:
      add("margins", mars_src, {"thetas": list(c.thetas), "theta": c.theta})
  return out


def sampled_form(c) -> str:
  """The config's form of the sampled-draft sums: "enumerate" (V^2) or "closed" (O(V))."""
  return c.get("sampled_form", "enumerate")


def figure_path(c, output_dir: str, name: str) -> str:
  """Where the figure ``name`` (e.g. "kl_vs_t_real.png") is written:
  ``<figures_dir or output_dir>/<figure_prefix><stem><figure_suffix>.png``."""
  stem, ext = os.path.splitext(name)
  d = c.get("figures_dir") or output_dir
  os.makedirs(d, exist_ok=True)
  return os.path.join(d, f"{c.get('figure_prefix', '')}{stem}{c.get('figure_suffix', '')}{ext}")


def _kl_part(cfg: dict, c, z, p, q, n_sd: int) -> dict:
  """Parts (a) ``sd`` / (b) ``eagle``: the KL curve of a truncation rule vs t."""
  import jax.numpy as jnp
  from specjax.analysis import divergences as dv
  from specjax.analysis import propositions as props
  cb = c.context_batch
  _, rule = parse_rule(cfg["rule"])
  q_ref = props.uniform_like(p) if cfg["family"] == "uniform" else q
  if cfg["part"] == "sd":
    zz, pp, qq = z[:n_sd], p[:n_sd], q_ref[:n_sd]
    curve = props.sd_kl_curve(rule, zz, pp, qq, list(c.ts), chunk_size=c.chunk_size,
                              context_batch=cb, sampled_form=sampled_form(c))
  else:
    zz, pp, qq = z, p, q_ref
    curve = props.eagle_kl_curve(rule, zz, pp, qq, list(c.ts), top_k=cfg["top_k"],
                                 context_batch=cb)
  mask = dv.matched_allowed_set(rule, pp)
  limit = props.eagle_kl_limit(pp, mask)
  return dict(n=int(zz.shape[0]), ts=[float(t) for t in curve.ts],
              kl_mean=_mean(curve.kl), kl_median=_median(curve.kl),
              kl_reverse_mean=_mean(curve.kl_reverse), tv_mean=_mean(curve.tv),
              accept_mean=_mean(curve.accept_rate), limit=float(jnp.mean(limit)),
              allowed_size_mean=float(jnp.mean(jnp.sum(mask, -1))),
              allowed_mass_mean=float(jnp.mean(dv.allowed_mass(pp, mask))))


def _truncation_part(cfg: dict, c, p, q, windows=None) -> dict:
  """Part (c): block efficiency under truncation of the target and / or the draft; with
  the contexts' conversations ``windows``, their per-conversation acceptance sums."""
  import numpy as np
  from specjax.analysis import propositions as props
  values = list(c.p_base_values if cfg["kind"] == "min_p" else c.eta_values)
  sw = props.truncation_sweep(p, q, cfg["kind"], values, gamma=c.gamma)
  d_paq = np.asarray(sw.delta_be_paq)
  d_paqa = np.asarray(sw.delta_be_paqa)
  return dict(n=int(p.shape[0]), values=values, gamma=c.gamma,
              alpha_pq=_mean(sw.alpha_pq), alpha_paq=_mean(sw.alpha_paq),
              alpha_paqa=_mean(sw.alpha_paqa), alpha_gate=_mean(sw.alpha_gate),
              be_pq=float(sw.be_pq), be_paq=[float(x) for x in sw.be_paq],
              be_paqa=[float(x) for x in sw.be_paqa], be_gate=[float(x) for x in sw.be_gate],
              delta_be_paq=d_paq.tolist(), delta_be_paqa=d_paqa.tolist(),
              delta_be_gate=(np.asarray(sw.be_gate) - float(sw.be_pq)).tolist(),
              sign_delta_be_paq=np.sign(d_paq).astype(int).tolist(),
              sign_delta_be_paqa=np.sign(d_paqa).astype(int).tolist(),
              **({} if windows is None else {"by_window": {
                  "alpha_pq": window_sums(sw.alpha_pq, windows),
                  "alpha_paqa": window_sums(sw.alpha_paqa, windows)}}))


def _alignment_part(cfg: dict, c, p, q) -> dict:
  """Part (c): net block-efficiency change vs the draft-target alignment ratio."""
  import numpy as np
  from specjax.analysis import propositions as props
  values = list(c.p_base_values if cfg["kind"] == "min_p" else c.eta_values)
  sw = props.alignment_sweep(p, q, cfg["kind"], values, list(c.rhos), gamma=c.gamma,
                             truncate_draft=cfg["truncate_draft"])
  return dict(n=int(p.shape[0]), values=values, rhos=[float(r) for r in sw.rhos],
              gamma=c.gamma, alpha_pq=np.asarray(sw.alpha_pq).tolist(),
              alpha_trunc=np.asarray(sw.alpha_trunc).tolist(),
              gain=np.asarray(sw.gain).tolist(), loss=np.asarray(sw.loss).tolist(),
              be_pq=np.asarray(sw.be_pq).tolist(), be_trunc=np.asarray(sw.be_trunc).tolist(),
              delta_be=np.asarray(sw.delta_be).tolist(),
              sign_delta_be=np.sign(np.asarray(sw.delta_be)).astype(int).tolist())


def _mars_part(cfg: dict, c, z, p, q, n_sd: int, windows=None) -> dict:
  """Part (d): the MARS theta sweep against lossless verification; with the contexts'
  conversations ``windows``, the per-conversation acceptance sums of both."""
  import jax.numpy as jnp
  from specjax.analysis import propositions as props
  cb = c.context_batch
  if cfg["draft"] == "sampled":
    zz, pp, qq = z[:n_sd], p[:n_sd], q[:n_sd]
    sw = props.mars_sweep(zz, pp, qq, list(c.thetas), draft="sampled",
                          chunk_size=c.chunk_size, context_batch=cb,
                          sampled_form=sampled_form(c))
  else:
    zz, pp, qq = z, p, q
    sw = props.mars_sweep(zz, pp, qq, list(c.thetas), draft="topk", top_k=1,
                          context_batch=cb)
  from specjax.analysis.induced import induced_parts
  from specjax.verifiers import Lossless
  kw = (dict(draft="sampled", chunk_size=c.chunk_size, sampled_form=sampled_form(c))
        if cfg["draft"] == "sampled" else dict(draft="topk", top_k=1))
  base = induced_parts(Lossless(), zz, pp, qq, context_batch=cb, **kw)
  by_window = {} if windows is None else {"by_window": {
      "accept": window_sums(sw.accept_rate, windows[:zz.shape[0]]),
      "lossless_accept": window_sums(base.accept_rate, windows[:zz.shape[0]])}}
  return dict(n=int(zz.shape[0]), thetas=[float(t) for t in sw.thetas], **by_window,
              kl_mean=_mean(sw.kl), kl_median=_median(sw.kl), tv_mean=_mean(sw.tv),
              accept_mean=_mean(sw.accept_rate), relaxed_mean=_mean(sw.relaxed_rate),
              active_frac=_mean(sw.active.astype(jnp.float32)),
              strict_reject_mean=float(jnp.mean(sw.strict_reject)),
              reject_share=[float(x) for x in sw.reject_share],
              reject_given_active=[float(x) for x in sw.reject_given_active],
              lossless_accept_mean=float(jnp.mean(base.accept_rate)))


def _margins_part(cfg: dict, c, z, p, q, output_dir: str) -> dict:
  """The margin statistics (and their scatter figure, drawn from the raw logits)."""
  import numpy as np
  from specjax.analysis import margins as mg
  temp = c.real.temperature if cfg["source"] == "real" else 1.0
  zn, pn, qn = np.asarray(z), np.asarray(p), np.asarray(q)
  out = {"summary": mg.margin_summary(zn, q=qn, p=pn, temperature=temp, thetas=list(c.thetas),
                                     theta=c.theta), "n": int(zn.shape[0])}
  if c.figures:  # the scatter needs the raw logits, so it is drawn now
    import matplotlib.pyplot as plt
    fig = mg.plot_ratio_scatter(zn, theta=c.theta, draft_token=qn.argmax(-1),
                                title=f"z2 vs z1 ({cfg['source']})")
    fig.savefig(figure_path(c, output_dir, f"margins_scatter_{cfg['source']}.png"), dpi=110)
    plt.close(fig)
  return out


def run_config(cfg: dict, c, sources: Sources, output_dir: str) -> dict:
  """Compute one configuration's record."""
  z, p, q, n_sd = sources.get(cfg["source"])
  part = cfg["part"]
  rec = {k: v for k, v in cfg.items()}
  rec["models"] = sources.models if cfg["source"] == "real" else "synthetic"
  rec["vocab"] = int(z.shape[-1])
  if part in ("sd", "eagle"):
    rec.update(_kl_part(cfg, c, z, p, q, n_sd))
  elif part == "truncation":
    rec.update(_truncation_part(cfg, c, p, q, sources.windows(cfg["source"])))
  elif part == "alignment":
    rec.update(_alignment_part(cfg, c, p, q))
  elif part == "mars":
    rec.update(_mars_part(cfg, c, z, p, q, n_sd, sources.windows(cfg["source"])))
  elif part == "margins":
    rec.update(_margins_part(cfg, c, z, p, q, output_dir))
  else:
    raise ValueError(part)
  return rec


# --- the sweep -----------------------------------------------------------------------


def run(c, output_dir: str, models: str) -> list[dict]:
  """Run every configuration not yet in ``<output_dir>/records.jsonl``; return all records.

  Uses :func:`experiments.common.sweep.run_sweep`; returns the sweep records
  (``{"key", "config", "result", "provenance"}``) of this run's plan.
  """
  from experiments.common import sweep
  os.makedirs(output_dir, exist_ok=True)
  path = os.path.join(output_dir, RECORDS)
  sources = Sources(c, models)
  todo = plan(c, models, sources)

  def evaluate(cfg):
    t0, c0 = time.time(), time.process_time()
    rec = run_config(cfg, c, sources, output_dir)
    took = time.time() - t0
    logging.info("done %s (%.1fs)", cfg["key"], took)
    rec["seconds"] = took  # includes building a context set on its first use
    rec["cpu_seconds"] = time.process_time() - c0  # all threads: load-independent
    rec["contexts_seconds"] = sources.seconds.pop("real_contexts", 0.0)
    rec["contexts_cpu_seconds"] = sources.seconds.pop("real_contexts_cpu", 0.0)
    return {k: v for k, v in rec.items() if k not in cfg}

  records = sweep.run_sweep(todo, evaluate, path, desc="propositions", progress=c.progress)
  if c.figures:
    from experiments.propositions.reports import make_figures
    for f in make_figures(records, output_dir,
                          path_of=lambda name: figure_path(c, output_dir, name)):
      logging.info("figure %s", f)
  return records
