r"""Calibrate Speculative Verification for a (target, draft, companion) triple
(the binary is ``experiments/calibrate_sv.py``; :func:`run` does the work).

Steps (docs/spec.md §5):
1. Run ordinary speculative decoding (all K drafts verified) on calibration
   prompts -- windows of the leading ``data.calib_fraction`` of the held-out
   token stream -- logging ``(S, A, accepted)`` for every reached draft
   position (:func:`specjax.policies.sv_collect.collect_records`).
2. Fit ``P_hat(accept | S, A)`` on a fixed grid and on adaptive quantile bins
   (Laplace smoothing) and save both with the triple's identifiers, the
   verifier and the sampling settings (``table_fixed.{npz,json}``,
   ``table_quantile.{npz,json}``); and the same on S alone
   (``table_fixed_S``, ``table_quantile_S``: one A bin, for
   ``SpeculativeVerification(table_signals="S")``, which keeps lossless
   verification exact -- :mod:`specjax.policies.sv`, "Exactness").
3. Report ``H(X)``, ``H(X|S)``, ``H(X|S,A)`` and the information gains for
   both binnings, plus the held-out log loss of tables fitted on
   ``data.fit_fraction`` of the rows (plug-in entropies are optimistic).
4. Measure the target's verify-latency profile on this machine
   (``profile.json``).

Everything goes to ``<workdir>/report.json`` as well, with the run's provenance
(command, git commit, machine load); the records themselves to
``<workdir>/records.npz`` (compressed, a few tens of KB per thousand records), from
which :mod:`experiments.sv.information` gives the gains an interval over prompts.
"""

from __future__ import annotations

import json
import os
import time

from absl import logging

from experiments.common.model_sets import TinySpec, load_model_set


# The smoke-test "tiny" triple: 64 random token ids, target matrices x5, draft = target +
# 0.05 N(0, 1) (key seed + 1), companion = target + 0.03 N(0, 1) (key seed + 2).
TINY = TinySpec(vocab_size=64, scale=5.0, draft_noise=0.05, companion_noise=0.03,
                eos_token_id=None)


def _refuse_drafter_as_companion(c):
  raise ValueError(f"companion={c.companion!r} is the drafter={c.drafter!r} LM itself: its "
                   "signals S and A are 1 at every draft; use drafter='eagle3' beside it, "
                   "or an early exit / another LM as the companion")


def load_models(c):
  """``{name: (model, params)}`` for target, draft and companion (and ``"set"``, the
  :class:`~experiments.common.model_sets.ModelSet`, for a real target), from
  :func:`experiments.common.model_sets.load_model_set`.

  ``c.models``: "default" (the embedded stdlib triple), "tiny" (random, smoke
  test: :data:`TINY`) or a real model (registry name / ``.gguf`` / HF dir) with
  ``c.drafter`` ("draft": its shipped draft LM, "eagle3": its shipped EAGLE-3 head)
  and ``c.companion`` ("early_exit:N": the target's first N layers with its norm and
  head, :mod:`specjax.models.early_exit`; "lm:SPEC": a separate LM over the target's
  vocabulary, e.g. "lm:draft", the shipped draft LM, beside the EAGLE-3 drafter).

  A companion that is the drafting LM itself is refused: with P_c = P_d its signals
  are S = sum_v min(P_d, P_c) = 1 and A = min(1, P_c(x) / P_d(x)) = 1 at every draft,
  so they carry no information.
  """
  real = c.models not in ("default", "tiny")
  if real and c.drafter not in ("draft", "eagle3"):
    raise ValueError(f"drafter={c.drafter!r}; choose 'draft' or 'eagle3'")
  eagle = real and c.drafter == "eagle3"
  if real and not eagle and c.companion == "lm:draft":  # before loading; a path: below
    _refuse_drafter_as_companion(c)
  ms = load_model_set(c.models, draft="" if eagle else "draft", eagle="eagle3" if eagle else "",
                      companion=c.companion if real else "companion", seed=int(c.seed),
                      tiny=TINY)
  if real and not eagle and ms.sources.get("companion") == f"lm:{ms.sources.get('draft')}":
    _refuse_drafter_as_companion(c)
  out = {"target": (ms.target, ms.target_params), "draft": (ms.draft, ms.draft_params),
         "companion": (ms.companion, ms.companion_params)}
  if eagle:
    from specjax.decoding.eagle_drafter import EagleDrafter
    head, hp, d2t = ms.eagle
    out["draft"] = (head, EagleDrafter.make_params(hp, ms.target, ms.target_params, d2t))
  if real:
    out["set"] = ms
  return out


def chain_drafter(models: dict, k: int, sampling) -> tuple:
  """``(drafter, params)``: a chain of ``k`` drafts from ``models["draft"]`` -- the draft
  LM, or the EAGLE head :func:`load_models` put there
  (:func:`specjax.decoding.drafter_factory.make_drafter`)."""
  from specjax.decoding.drafter_factory import DraftSources, make_drafter
  from specjax.models.eagle import EagleHead
  draft, dp = models["draft"]
  vocab = models["target"][0].config.vocab_size
  if isinstance(draft, EagleHead):
    return make_drafter("eagle_chain", sampling, DraftSources(vocab, eagle=(draft, dp)),
                        num_draft=k)
  return make_drafter("chain", sampling, DraftSources(vocab, draft, dp), num_draft=k)


def calibration_chat_prompts(c, ms) -> list:
  """The calibration :class:`~experiments.common.prompts.ChatPrompt` s of a real target:
  ``data.num_prompts`` held-out ShareGPT + HumanEval chat prompts (as the SV paper
  calibrated on its evaluation tasks' prompts), split evenly over ``data.prompt_sets``."""
  from experiments.common.prompts import load_chat_prompts
  d = c.data
  return load_chat_prompts(ms.encode_chat, d.num_prompts, sets=tuple(d.prompt_sets),
                           max_tokens=d.prompt_len, seed=c.seed)


def calibration_prompts(c, vocab_size: int, models=None):
  """``(prompts, set_names, row_sets)``: the calibration prompts -- ``[num_prompts,
  prompt_len]`` int32 (held-out windows, or random for tiny), or for a real target a
  list of chat prompts (:func:`calibration_chat_prompts`) -- the prompt-set names and
  each row's index into them.  Real target: ``data.prompt_sets``; tiny: the same
  names label an even split of the random rows (smoke tests of the per-set
  reports); the default models: one set, ``"heldout"``."""
  import numpy as np
  from experiments.common.prompts import set_shares
  d = c.data
  if c.models == "tiny":
    names = tuple(d.prompt_sets)
    rows = np.repeat(np.arange(len(names)), set_shares(d.num_prompts, names))
    return (np.random.RandomState(c.seed).randint(0, vocab_size, (d.num_prompts, d.prompt_len)),
            names, rows)
  if models is not None and "set" in models:
    chat = calibration_chat_prompts(c, models["set"])
    names = tuple(d.prompt_sets)
    return ([list(p.ids) for p in chat], names,
            np.asarray([names.index(p.prompt_set) for p in chat]))
  from specjax.data import batching, corpus
  from specjax.models.defaults import default_tokenizer
  if d.tokenizer_path:
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(d.tokenizer_path)
  else:
    tok = default_tokenizer()
  cc = corpus.CorpusConfig(root=d.root, heldout_fraction=d.heldout_fraction,
                           split_seed=d.split_seed)
  stream = batching.load_token_stream(cc, "heldout", tok, d.cache_dir or None)
  region = int(len(stream) * d.calib_fraction)
  if region < d.prompt_len + 1:
    raise ValueError(f"calibration region of {region} tokens is shorter than one prompt")
  starts = np.linspace(0, region - d.prompt_len - 1, d.num_prompts).astype(np.int64)
  return (np.stack([stream[s:s + d.prompt_len] for s in starts]).astype(np.int32),
          ("heldout",), np.zeros(d.num_prompts, np.int64))


def _collect_records(c, models, drafter, policy, pparams, verifier, sampling, prompts, row_sets
                     ) -> tuple:
  """Speculative decoding of the calibration prompts with the companion's signals
  recorded: ``(columns {S, A, accepted, position, row, step, prompt_set}, target
  calls, tokens per call)``."""
  import jax
  import numpy as np

  from specjax.policies.sv_collect import collect_records
  (target, tp), (_, dp) = models["target"], models["draft"]
  d = c.data
  recs, calls, tok_calls = [], 0, 0.0
  for i in range(0, len(prompts), d.batch_size):
    batch = prompts[i:i + d.batch_size]
    r = collect_records(target, tp, drafter, dp, policy, pparams, verifier, list(batch),
                        max_new_tokens=d.max_new_tokens, sampling=sampling,
                        key=jax.random.key(c.seed), row_offset=i)
    recs.append(r)
    calls += r["calls"]
    tok_calls += r["tokens_per_call"] * r["calls"]
    logging.info("batch %d: %d records, tau %.3f", i // d.batch_size, len(r["S"]),
                 r["tokens_per_call"])
  cols = {n: np.concatenate([r[n] for r in recs]) for n in ("S", "A", "accepted", "position",
                                                          "row", "step")}
  cols["prompt_set"] = np.asarray(row_sets)[cols["row"]]  # index into set_names
  return cols, calls, tok_calls / max(calls, 1)


def _compact(cols: dict) -> dict:
  """The records in the smallest dtypes that hold them (``records.npz`` is committed with
  a run's report: :mod:`experiments.sv.information` reads it): signals float32, the
  verdict and draft position int8, rows and steps int32."""
  import numpy as np
  kinds = {"S": np.float32, "A": np.float32, "accepted": np.int8, "position": np.int8,
           "row": np.int32, "step": np.int32, "prompt_set": np.int8}
  return {n: np.asarray(v).astype(kinds.get(n, np.asarray(v).dtype)) for n, v in cols.items()}


def _binnings(c, s, a) -> dict:
  """``{name: (S edges, A edges)}``: fixed and quantile bins, each also S-only (one A
  bin: ``SpeculativeVerification(table_signals="S")``)."""
  import numpy as np

  from specjax.policies import calibration as cal
  one_bin = np.asarray([0.0, 1.0])
  return {
      "fixed": (cal.fixed_edges(c.table.fixed_bins), cal.fixed_edges(c.table.fixed_bins)),
      "quantile": (cal.quantile_edges(s, c.table.quantile_bins),
                   cal.quantile_edges(a, c.table.quantile_bins)),
      "fixed_S": (cal.fixed_edges(c.table.fixed_bins), one_bin),
      "quantile_S": (cal.quantile_edges(s, c.table.quantile_bins), one_bin),
  }


def _table_entry(c, workdir, name, edges, cols, set_names, ident, fit) -> dict:
  """Fit, save and report one binning's table: information (all records and per prompt
  set) and the held-out log loss of a table fitted on the ``fit`` rows."""
  import numpy as np

  from specjax.policies import calibration as cal
  s, a, x = cols["S"], cols["A"], cols["accepted"].astype(np.int64)
  se, ae = edges
  fitted = cal.fit_table(s, a, x, se, ae, alpha=c.table.alpha, prior=c.table.prior)
  files = cal.save_table(os.path.join(workdir, f"table_{name}"), fitted,
                         dict(ident, binning=name))
  info = cal.information_report(s, a, x, se, ae)
  entry = {"files": files, "info": info, "s_edges": fitted.s_edges.tolist(),
           "a_edges": fitted.a_edges.tolist(), "p_hat": fitted.p_hat.tolist(),
           "counts": fitted.counts.tolist()}
  # Information gain per prompt set (the SV paper's chat vs code), on the same bins.
  entry["info_by_set"] = cal.information_by_group(s, a, x, cols["prompt_set"], set_names,
                                                  se, ae)
  for set_name, si in entry["info_by_set"].items():
    logging.info("  %s: H(X)=%.4f IG(S)/H=%.1f%% IG(S,A)/H=%.1f%% (%d records)", set_name,
                 si["H_X"], 100 * si["ig_S_frac"], 100 * si["ig_frac"], si["n"])
  heldout = ~fit
  if fit.any() and heldout.any():
    marg = float(x[fit].mean())
    part = cal.fit_table(s[fit], a[fit], x[fit], se, ae, alpha=c.table.alpha,
                         prior=c.table.prior)
    entry["heldout_log_loss_bits"] = cal.log_loss_bits(part.predict(s[heldout], a[heldout]),
                                                       x[heldout])
    entry["heldout_log_loss_marginal_bits"] = cal.log_loss_bits(
        np.full(heldout.sum(), marg), x[heldout])
    entry["heldout_records"] = int(heldout.sum())
  logging.info("%s bins %s: H(X)=%.4f H(X|S)=%.4f H(X|S,A)=%.4f IG=%.4f (%.1f%%)", name,
               info["num_bins"], info["H_X"], info["H_X_given_S"], info["H_X_given_SA"],
               info["ig_SA"], 100 * info["ig_frac"])
  return entry


def _profile_report(c, target, tp, k: int, workdir: str) -> dict:
  """Measure and save the target's latency profile (``c.profile``)."""
  from specjax.policies import latency as lat_lib
  d = c.data
  cache_length = c.profile.cache_length or (d.prompt_len + d.max_new_tokens + 2 * (k + 1))
  prof = lat_lib.measure_profile(target, tp, batch_sizes=list(c.profile.batch_sizes),
                                 gammas=list(range(k + 1)), cache_length=int(cache_length),
                                 repeats=int(c.profile.repeats))
  return {"file": lat_lib.save_profile(os.path.join(workdir, "profile.json"), prof),
          "device": prof.device, "batch_sizes": list(prof.batch_sizes),
          "latency_ms": [[1e3 * v for v in row] for row in prof.latency_s]}


def run(c, models=None) -> dict:
  """Calibrate (module docstring); ``models``: :func:`load_models`' dict when the caller
  already loaded them (e.g. ``benchmarks/sv_batch_sweep.py``)."""
  import numpy as np

  from specjax import verifiers
  from specjax.distributions import SamplingConfig
  from specjax.policies import calibration as cal
  from specjax.policies.sv import SpeculativeVerification, uninformative_table

  from specjax import provenance
  t0, stamp = time.time(), provenance.stamp()
  workdir = c.workdir or f"/tmp/specjax_runs/{c.name}"
  os.makedirs(workdir, exist_ok=True)
  models = models or load_models(c)
  (target, tp), (draft, dp), (comp, cp) = (models[n] for n in ("target", "draft", "companion"))
  k = int(c.num_draft)
  sampling = SamplingConfig(temperature=float(c.temperature))
  dt = c.temperature if c.draft_temperature < 0 else c.draft_temperature
  draft_sampling = SamplingConfig(temperature=float(dt))
  comp_sampling = SamplingConfig(temperature=float(c.companion_temperature))
  verifier = verifiers.get(c.verifier, **dict(c.verifier_hparams))
  drafter, _ = chain_drafter(models, k, draft_sampling)
  policy = SpeculativeVerification(k, companion=comp, companion_sampling=comp_sampling)
  d = c.data
  pparams = policy.make_params(cp, uninformative_table(), np.ones(k + 1), d.batch_size)

  prompts, set_names, row_sets = calibration_prompts(c, target.config.vocab_size, models)
  cols, calls, tokens_per_call = _collect_records(c, models, drafter, policy, pparams, verifier,
                                                  sampling, prompts, row_sets)
  np.savez_compressed(os.path.join(workdir, "records.npz"), **_compact(cols))
  x = cols["accepted"].astype(np.int64)
  ident = {
      "models": cal.triple_id(target, tp, draft, dp, comp, cp),
      "verifier": repr(verifier),
      "sampling": {"target": repr(sampling), "draft": repr(draft_sampling),
                   "companion": repr(comp_sampling)},
      "num_draft": k,
      "model_source": c.models,
      "drafter": c.get("drafter", "draft"), "companion": c.get("companion", "companion"),
  }
  report = {"config": c.to_dict(), "identity": ident, "num_records": int(len(x)),
            "accept_rate": float(x.mean()), "tokens_per_call": tokens_per_call,
            "target_calls": calls, "prompt_sets": list(set_names),
            "records_per_set": {n: int(np.sum(cols["prompt_set"] == i))
                                for i, n in enumerate(set_names)},
            "accept_rate_per_position": [float(x[cols["position"] == i].mean())
                                         if np.any(cols["position"] == i) else None
                                         for i in range(k)],
            "tables": {}}
  # Tables on all records; held-out check on a row split.
  fit = cols["row"] < int(round(len(prompts) * d.fit_fraction))
  for name, edges in _binnings(c, cols["S"], cols["A"]).items():
    report["tables"][name] = _table_entry(c, workdir, name, edges, cols, set_names, ident, fit)
  if c.profile.enabled:
    report["profile"] = _profile_report(c, target, tp, k, workdir)
  report["wall_seconds"] = time.time() - t0
  report["provenance"] = provenance.finish(stamp)
  with open(os.path.join(workdir, "report.json"), "w") as f:
    json.dump(report, f, indent=2, default=str)
  logging.info("wrote %s (%d records, accept rate %.3f, tau %.3f)",
               os.path.join(workdir, "report.json"), len(x), report["accept_rate"],
               report["tokens_per_call"])
  return report
