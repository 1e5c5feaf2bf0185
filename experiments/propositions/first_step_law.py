r"""Exact law of the first speculative token on real contexts, and its distance to
the rule's matched baseline.

The speculative loop's first step starts from the context ``c = prompt + t1``
(``t1``: the token the target's prefill emitted).  Given ``c``, the law of the
first token the verifier emits is a function of the target's logits at ``c`` and
of what the drafter proposes there -- nothing else -- and
:mod:`specjax.analysis.induced` computes it exactly (docs/spec.md §6):

* a chain with sampled drafts (T > 0): ``x_1 ~ q_1``, the closed O(V) form
  (``sampled_form="closed"``; every registered rule is rejection-invariant);
* a chain with a greedy draft: the one deterministic candidate ``x_1`` with the
  drafter's node distribution at position 1 (CoS reads it);
* a tree: the root's children as the drafter proposed them (an EAGLE-2 dynamic
  tree keeps between 0 and top_k of them), tried in node order with the root's
  node distribution -- strict before relaxed for MARS, as the loop's tree walk does.

:func:`first_step_laws` runs the loop's own prefill (:func:`speculative_init`,
same key and row ids, so ``t1`` is the token the loop would emit) and the
drafter's first proposal, then this enumeration.  :func:`first_token_divergence`
averages ``KL(P_rule(. | c) || p_A(. | c))`` and the total variation over the
contexts (several ``t1`` per prompt), with bootstrap intervals over prompts.
Unlike a histogram of sampled tokens this has no sampling error given the
contexts, so it resolves small distances at a 49k vocabulary with a few dozen
contexts; ``tests/experiments/test_first_step_law.py`` checks it against the real loop.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["FirstStepLaws", "first_step_laws", "first_token_divergence"]


@dataclasses.dataclass(frozen=True)
class FirstStepLaws:
  """Per row (context): [B] / [B, V] numpy arrays.

  Attributes:
    first: the prefill token ``t1`` that ends the context.
    law: the exact law of the first verified token given the context.
    baseline: the matched baseline's law there (``matched_baseline(rule, sampling)``:
      the rule's truncation as a target processor; plain ``p`` for rules without one).
    accept_rate: probability that the first token is an accepted draft.
    relaxed_rate: probability of a relaxed acceptance (MARS; 0 for strict rules).
  """

  first: np.ndarray
  law: np.ndarray
  baseline: np.ndarray
  accept_rate: np.ndarray
  relaxed_rate: np.ndarray


def first_step_laws(target, target_params, drafter, draft_params, verifier, sampling,
                    prompts, *, key, row_offset: int = 0,
                    prompt_bucket: int | None = None) -> FirstStepLaws:
  """Exact first-speculative-token laws of ``verifier`` with ``drafter`` (module docstring).

  Args:
    target, target_params, drafter, draft_params, verifier, sampling: as for
      :func:`specjax.decoding.speculative.speculative_generate`.
    prompts: token-id lists or ``(tokens [B, P], lengths [B])``; repeat a prompt to
      get several contexts (different ``t1``) at T > 0.
    key: the PRNG key of the loop whose contexts these are; row ``i`` uses the
      stream of global row ``row_offset + i``.
    prompt_bucket: as for ``speculative_generate``.

  Raises ``ValueError`` / ``TypeError`` naming a bad argument (the loop's own
  checks), and for a sampled-draft rule without a closed form (none registered).
  """
  from specjax.analysis.induced import rejection_invariant
  from specjax.checks import check_int, check_key
  from specjax.decoding.prompts import prepare_prompts
  from specjax.decoding.speculative import loop_target, validate_pair
  from specjax.distributions import SamplingConfig
  from specjax.verifiers.baselines import matched_baseline
  validate_pair(target, drafter, verifier)
  if not isinstance(sampling, SamplingConfig):
    raise TypeError(f"sampling must be a SamplingConfig, got {type(sampling).__name__}")
  check_key("key", key)
  check_int("row_offset", row_offset, low=0)
  sampled = not drafter.tree and not drafter.sampling.greedy
  if sampled and not rejection_invariant(verifier):
    raise ValueError(f"verifier={verifier!r}: the exact law of sampled chain drafts needs a "
                     "rule with a closed form (specjax.analysis.induced.rejection_invariant)")
  base_sampling = matched_baseline(verifier, sampling).sampling  # raises for a rule without one
  tokens, lengths = prepare_prompts(prompts, target.config.vocab_size, min_bucket=prompt_bucket)
  cache_length = tokens.shape[1] + drafter.tokens_per_step + 1
  row_ids = jnp.arange(tokens.shape[0], dtype=jnp.int32) + row_offset
  out = _first_step(loop_target(target, drafter), drafter, verifier, sampling, base_sampling,
                    target_params, draft_params, jnp.asarray(tokens), jnp.asarray(lengths), key,
                    row_ids, cache_length=cache_length, sampled=sampled)
  return FirstStepLaws(*(np.asarray(a, np.float64 if a.dtype.kind == "f" else a.dtype)
                         for a in out))


@functools.partial(jax.jit, static_argnames=("target", "cache_length", "sampled"))
def _first_step(target, drafter, verifier, sampling, base_sampling, target_params, draft_params,
                tokens, lengths, key, row_ids, *, cache_length: int, sampled: bool):
  from specjax.analysis.induced import induced_parts
  from specjax.decoding.autoregressive import row_key
  from specjax.decoding.speculative import make_loop, speculative_init
  from specjax.distributions import probs_from_logits
  loop = make_loop(target, drafter, None, 2, (), cache_length)
  inputs, state = speculative_init(loop, drafter, verifier, sampling, target_params,
                                   draft_params, None, tokens, lengths, key, row_ids)
  keys = row_key(key, row_ids, state.step)  # the loop's first step draws from these
  split = jax.vmap(lambda kk: jax.random.split(kk, 3))(keys)
  proposal, _ = drafter.propose(inputs.draft_params, state.drafter, state.prev, state.last,
                                split[:, 0])
  cache = state.target_cache
  z = target.apply(target_params, state.last[:, None], cache.lengths[:, None], cache
                   ).logits[:, 0].astype(jnp.float32)  # [B, V] target logits at c
  p = probs_from_logits(z, sampling)
  q_node = proposal.q if proposal.q_node is None else proposal.q_node
  if sampled:  # x_1 ~ q_1
    parts = induced_parts(verifier, z, p, proposal.q[:, 0], draft="sampled",
                          sampled_form="closed")
  else:
    if drafter.tree:  # the root's children in node order; -1 = not a root child
      cands = jnp.where(proposal.parents == 0, proposal.tokens, -1)
    else:  # a greedy chain: its first draft
      cands = proposal.tokens[:, :1]
    parts = induced_parts(verifier, z, p, q_node[:, 0], draft="topk", candidates=cands)
  return (state.last, parts.dist, probs_from_logits(z, base_sampling), parts.accept_rate,
          parts.relaxed_rate)


def first_token_divergence(target, target_params, drafter, draft_params, verifier, sampling,
                           prompts: Sequence[Sequence[int]], *, contexts_per_prompt: int, key,
                           batch_size: int = 0, prompt_bucket: int | None = None) -> dict:
  """Mean exact ``KL(P_rule || p_A)`` and TV of the first speculative token over
  ``len(prompts) * contexts_per_prompt`` contexts (each prompt repeated: its rows draw
  different ``t1`` at T > 0).

  Returns ``{"kl", "tv", "accept", "relaxed", "contexts", "kl_ci", "tv_ci"}``: means
  over contexts, 95% bootstrap intervals over prompts (a prompt's contexts resampled
  together; None with one prompt); ``kl`` is inf when some context has mass outside
  the baseline's support (a soft gate).
  """
  from experiments.common.row_stats import ci, ratio_of_sums
  from specjax.checks import check_int
  check_int("contexts_per_prompt", contexts_per_prompt, low=1)
  rows = [list(p) for p in prompts for _ in range(contexts_per_prompt)]
  bs = batch_size or len(rows)
  parts = [first_step_laws(target, target_params, drafter, draft_params, verifier, sampling,
                           rows[i:i + bs], key=key, row_offset=i, prompt_bucket=prompt_bucket)
           for i in range(0, len(rows), bs)]
  law = np.concatenate([x.law for x in parts])
  base = np.concatenate([x.baseline for x in parts])
  from specjax.analysis import divergences
  kl = np.asarray(divergences.kl(law, base), np.float64)  # inf outside the baseline's support
  tv = np.asarray(divergences.tv(law, base), np.float64)
  out = {"kl": float(kl.mean()), "tv": float(tv.mean()),
         "accept": float(np.concatenate([x.accept_rate for x in parts]).mean()),
         "relaxed": float(np.concatenate([x.relaxed_rate for x in parts]).mean()),
         "contexts": len(rows)}
  prompt_of = np.repeat(np.arange(len(prompts)), contexts_per_prompt)
  for name, vals in (("kl", kl), ("tv", tv)):
    pairs = np.zeros((len(prompts), 2))
    np.add.at(pairs, prompt_of, np.stack([vals, np.ones_like(vals)], -1))
    out[f"{name}_ci"] = ci(pairs, ratio_of_sums) if np.isfinite(vals).all() else None
  return out
