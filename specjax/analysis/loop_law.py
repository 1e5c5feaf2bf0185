"""Exact law of the first n tokens the decoding LOOP emits, rounds repeated, for any rule.

docs/lossy_path_rules.md, "Exact analysis of a lossy rule".  :func:`chain_law` gives one
round: the emitted block, and the first K+1 tokens when the block is followed by exact
target sampling.  That is the right object for a *lossless* rule (by induction every
round keeps the target's law), but not for a lossy one: the loop does not continue
with the target, it starts another round of the same rule from the new prefix.  This
module composes rounds exactly:

    start(()) = 1
    for every prefix s with start(s) > 0 (shortest first), every emitted block b of the
    round that starts at s (probability B_s(b), from chain_law):
        start(s + b) += start(s) B_s(b)            if |s + b| < n
        law((s + b)[:n]) += start(s) B_s(b)        otherwise

``law`` is the law of the first n emitted tokens; ``target`` is
``prod_j P(s_j | s_<j)``.  A lossless rule gives ``law = target``; a lossy rule's
quality cost is ``KL(law || target)`` (:func:`loop_kl`), the KL to its matched
baseline when ``p_fn`` is the target *after* the baseline's processors (the repo's
matched baselines, ``verifiers.matched_baseline``; for FLy and Fuzzy speculative
decoding it is the target itself).  The target and the drafter are functions of the
whole sequence so far (prompt excluded), so a round's tables depend on where it starts.

Cost: ``sum_{m<n} V^m`` rounds of :func:`chain_law` (``V^K`` drafts each), batched per
prefix length -- V <= ~4, n <= ~4, K <= ~3.  Pure math; no model is loaded.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.analysis.path_law import chain_law, chain_tables


@dataclasses.dataclass(frozen=True)
class LoopLaw:
  """Attributes:
    law: [V]*n float64, the law of the first n tokens the loop emits.
    target: [V]*n float64, the target's joint law of n tokens.
    expected_rounds: E[number of rounds started before n tokens are emitted].
  """

  law: np.ndarray
  target: np.ndarray
  expected_rounds: float


def _round_blocks(rule, prefixes, p_fn, q_fn, num_draft, vocab, z_fn) -> list:
  """``block[t]`` arrays ``[B]+[V]*(t+1)`` (float64) of one round at each prefix."""
  def shifted(fn, pre):
    return None if fn is None else (lambda s: fn(pre + tuple(s)))

  tabs = [chain_tables(shifted(p_fn, pre), shifted(q_fn, pre), num_draft, vocab,
                       z_fn=shifted(z_fn, pre)) for pre in prefixes]
  stacked = jax.tree.map(lambda *a: jnp.stack(a), *tabs)
  law = chain_law(rule, stacked)
  return [np.asarray(b, np.float64) for b in law.block]


def _target_law(p_fn, vocab: int, n: int) -> np.ndarray:
  out = np.zeros((vocab,) * n)
  for seq in itertools.product(range(vocab), repeat=n):
    out[seq] = functools.reduce(lambda acc, j: acc * float(p_fn(seq[:j])[seq[j]]),
                                range(n), 1.0)
  return out


def _check(num_draft, vocab, num_tokens):
  for name, val in (("num_draft", num_draft), ("vocab", vocab), ("num_tokens", num_tokens)):
    if not (isinstance(val, int) and val >= 1):
      raise ValueError(f"{name}={val!r} must be an integer >= 1")


def loop_law(rule, p_fn: Callable[[tuple], Sequence[float]],
             q_fn: Callable[[tuple], Sequence[float]], num_draft: int, vocab: int,
             num_tokens: int, z_fn: Callable[[tuple], Sequence[float]] | None = None
             ) -> LoopLaw:
  """The exact law of the first ``num_tokens`` tokens of the decoding loop (module docstring).

  Args:
    rule: a node rule (token-level verification) or a chain path rule.
    p_fn: ``sequence -> [V]`` the target's next-token distribution after ``sequence``
      (a tuple of emitted tokens, any length below ``num_tokens + num_draft``).
    q_fn: ``sequence -> [V]`` the drafter's (what drafts are drawn from and, for rules
      with ``needs_node_dist``, the node distribution: sampled drafts).
    num_draft: K drafts per round.
    vocab: V.
    num_tokens: n, the tokens whose joint law is returned.
    z_fn: optional ``sequence -> [V]`` raw target logits (default ``log p``).
  """
  _check(num_draft, vocab, num_tokens)
  n, v = num_tokens, vocab
  law = np.zeros((v,) * n)
  start = {(): 1.0}
  rounds = 0.0
  for m in range(n):
    prefixes = sorted(s for s in start if len(s) == m and start[s] > 0)
    if not prefixes:
      continue
    blocks = _round_blocks(rule, prefixes, p_fn, q_fn, num_draft, v, z_fn)
    for b, pre in enumerate(prefixes):
      mass = start[pre]
      rounds += mass
      for blk in blocks:
        for idx in zip(*np.nonzero(blk[b])):
          seq, w = pre + tuple(int(i) for i in idx), mass * blk[b][idx]
          if len(seq) >= n:
            law[seq[:n]] += w
          else:
            start[seq] = start.get(seq, 0.0) + w
  return LoopLaw(law=law, target=_target_law(p_fn, v, n), expected_rounds=rounds)


def loop_kl(loop: LoopLaw) -> float:
  """``KL(law || target)`` in nats (``inf`` where the loop emits what the target cannot)."""
  law, tgt = loop.law.ravel(), loop.target.ravel()
  pos = law > 0
  if np.any(pos & (tgt <= 0)):
    return float("inf")
  return float(max(0.0, np.sum(law[pos] * (np.log(law[pos]) - np.log(tgt[pos])))))
