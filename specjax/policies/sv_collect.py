"""Log ``(S, A, accepted)`` records for SV calibration by running ordinary
speculative decoding (every row verifies all K drafts) on calibration prompts.

One jitted step function does, for every row: draft K tokens (the drafter),
score them with the companion (:meth:`SpeculativeVerification.signals`), run
the target over ``[last, x_1..x_K]``, verify with the chain driver, commit
``n + 1`` tokens and roll the drafter and companion back -- the same
sequence as :func:`specjax.decoding.speculative.speculative_generate` with a
fixed verify length.  A host loop calls it until every row is done (EOS,
``max_new_tokens`` or a full cache); the host round trip per step is fine for
an offline calibration run.

A record is kept for each position the verifier reached: positions
``i <= n`` of a step that accepted ``n`` drafts (``i < K``).  Later positions
were never tried (after a rejection the target's context changed), so
``P(accept | reached, S, A)`` is what the records estimate.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.autoregressive import prefill, row_key
from specjax.decoding.drafters import Drafter
from specjax.decoding.prompts import eos_tuple, prepare_prompts
from specjax.distributions import SamplingConfig, probs_from_logits, sample_logits
from specjax.models import kv_cache as kvc
from specjax.models.transformer import Model
from specjax.policies.sv import SpeculativeVerification
from specjax.verifiers.base import NodeRule, verify_chain


# ``drafter``, ``verifier`` and ``sampling`` are traced pytree arguments
# (specjax.hyperparams): a temperature or theta sweep compiles each step once.
@functools.partial(jax.jit, static_argnames=("target", "policy", "cache_length"))
def _start(target: Model, drafter: Drafter, policy: SpeculativeVerification, target_params,
           draft_params, policy_params, tokens, lengths, key, row_ids, sampling: SamplingConfig,
           *, cache_length: int):
  t_cache, logits, t_hidden = prefill(target, target_params, tokens, lengths, cache_length)
  first, _ = jax.vmap(lambda kk, l: sample_logits(kk, l, sampling))(
      row_key(key, row_ids, 0), logits)
  d_state = drafter.prefill(draft_params, tokens, lengths, cache_length, t_hidden)
  c_state = policy.init(policy_params, tokens, lengths, cache_length)
  prev = jnp.take_along_axis(tokens, (lengths - 1)[:, None], 1)[:, 0]
  return dict(t_cache=t_cache, d_state=d_state, c_state=c_state, prev=prev, last=first)


@functools.partial(jax.jit, static_argnames=("target", "policy"))
def _step(target: Model, drafter: Drafter, policy: SpeculativeVerification, verifier: NodeRule,
          target_params, draft_params, policy_params, s, active, key, row_ids, step,
          sampling: SamplingConfig):
  k = drafter.num_draft
  keys = row_key(key, row_ids, step)
  split = jax.vmap(lambda kk: jax.random.split(kk, 3))(keys)
  t_cache = s["t_cache"]
  x, q, q_node, d_state = drafter.draft(draft_params, s["d_state"], s["prev"], s["last"],
                                        split[:, 0])
  q_node = q if q_node is None else q_node
  sig_s, sig_a, p_hat, c_state = policy.signals(policy_params, s["c_state"], s["prev"],
                                                s["last"], x, q)
  t_in = jnp.concatenate([s["last"][:, None], x], axis=1)
  pos = t_cache.lengths[:, None] + jnp.arange(k + 1)[None, :]
  o = target.apply(target_params, t_in, pos, t_cache)
  p = probs_from_logits(o.logits, sampling)
  u = jax.vmap(lambda kk: jax.random.uniform(kk, (k,)))(split[:, 1])
  res = jax.vmap(lambda zz, pp, qq, xx, uu, kk, qn: verify_chain(verifier, zz, pp, qq, xx, uu,
                                                                 kk, q_node=qn))(
      o.logits, p, q, x, u, split[:, 2], q_node)
  nacc = res.num_accepted
  t_cache = kvc.commit(o.cache, jnp.where(active, nacc + 1, 0))
  committed = jnp.concatenate([s["last"][:, None], x], 1)  # [B, K+1]: last + accepted drafts
  hid = o.hidden_states if drafter.target_hidden_layers else None  # [n_sel, B, K+1, H]
  d_state = drafter.commit(d_state, t_cache.lengths, committed,
                           jnp.where(active, nacc + 1, 0), hid)
  c_state = policy.commit(c_state, t_cache.lengths)
  last_acc = jnp.take_along_axis(x, jnp.maximum(nacc - 1, 0)[:, None], 1)[:, 0]
  prev = jnp.where(active, jnp.where(nacc > 0, last_acc, s["last"]), s["prev"])
  last = jnp.where(active, res.token, s["last"])
  reached = (jnp.arange(k)[None, :] <= nacc[:, None]) & active[:, None]
  new = jnp.concatenate([x, res.token[:, None]], 1)  # the emitted token lands at index nacc
  new = jnp.where(jnp.arange(k + 1)[None, :] == nacc[:, None], res.token[:, None], new)
  emitted = jnp.arange(k + 1)[None, :] <= nacc[:, None]
  state = dict(t_cache=t_cache, d_state=d_state, c_state=c_state, prev=prev, last=last)
  rec = dict(S=sig_s, A=sig_a, p_hat=p_hat, accepted=res.accepted, reached=reached,
             num_accepted=nacc)
  return state, rec, new, emitted


def collect_records(target: Model, target_params, drafter: Drafter, draft_params,
                    policy: SpeculativeVerification, policy_params, verifier: NodeRule, prompts,
                    *, max_new_tokens: int, sampling: SamplingConfig, key=None,
                    eos_token_id="config", cache_length: int | None = None,
                    row_offset: int = 0) -> dict:
  """Run fixed-K speculative decoding and return the calibration records.

  Args:
    policy: an SV policy (only its companion and ``signals`` are used; the
      table in ``policy_params`` only fills the ``p_hat`` column).
    prompts: token-id lists or ``(tokens [B, P], lengths [B])``.
    max_new_tokens: tokens per row (a row stops at EOS, this count or a full cache).

  Returns a dict of numpy arrays, one entry per reached position:
  ``S, A, p_hat`` float32, ``accepted`` int8, ``position`` (0-based draft index),
  ``row`` (global row index), ``step``; plus ``tokens_per_call`` and ``calls``.
  """
  if policy.num_draft != drafter.num_draft:
    raise ValueError(f"policy K={policy.num_draft} != drafter K={drafter.num_draft}")
  if key is None:
    key = jax.random.key(0)
  if drafter.target_hidden_layers != target.config.hidden_layers:
    # The drafter decides which target features the loop carries (as speculative_generate).
    target = Model(target.config.replace(hidden_layers=tuple(drafter.target_hidden_layers)))
  k = drafter.num_draft
  eos = eos_tuple(target.config.eos_token_id if eos_token_id == "config" else eos_token_id)
  tokens, lengths = prepare_prompts(prompts, target.config.vocab_size)
  if cache_length is None:
    cache_length = tokens.shape[1] + max_new_tokens + 2 * (k + 1)
  b = tokens.shape[0]
  row_ids = jnp.arange(b, dtype=jnp.int32) + row_offset
  s = _start(target, drafter, policy, target_params, draft_params, policy_params,
             jnp.asarray(tokens), jnp.asarray(lengths), key, row_ids, sampling,
             cache_length=int(cache_length))
  n = np.ones(b, np.int64)
  last = np.asarray(s["last"])
  active = ~np.isin(last, np.asarray(eos, np.int64)) & (n < max_new_tokens)
  out = {name: [] for name in ("S", "A", "p_hat", "accepted", "position", "row", "step")}
  calls = accepted_total = 0
  step = 1
  while active.any():
    room = np.asarray(s["t_cache"].lengths) + k + 1 <= cache_length
    active &= room
    if not active.any():
      break
    s, rec, new, emitted = _step(target, drafter, policy, verifier, target_params, draft_params,
                                 policy_params, s, jnp.asarray(active), key, row_ids,
                                 jnp.int32(step), sampling)
    rec = jax.device_get(rec)
    reached = rec["reached"]
    ri, pi = np.nonzero(reached)
    out["S"].append(rec["S"][ri, pi])
    out["A"].append(rec["A"][ri, pi])
    out["p_hat"].append(rec["p_hat"][ri, pi])
    out["accepted"].append(rec["accepted"][ri, pi].astype(np.int8))
    out["position"].append(pi.astype(np.int32))
    out["row"].append((ri + row_offset).astype(np.int32))
    out["step"].append(np.full(ri.shape, step, np.int32))
    calls += int(active.sum())
    accepted_total += int(rec["num_accepted"][active].sum())
    new, emitted = np.asarray(new), np.asarray(emitted)
    hit = emitted & np.isin(new, np.asarray(eos, np.int64)) if eos else np.zeros_like(emitted)
    n = n + np.where(active, rec["num_accepted"] + 1, 0)
    active &= ~hit.any(1) & (n < max_new_tokens)
    step += 1
  res = {name: np.concatenate(v) if v else np.zeros((0,)) for name, v in out.items()}
  res["calls"] = calls
  res["tokens_per_call"] = (accepted_total + calls) / max(calls, 1)
  return res
