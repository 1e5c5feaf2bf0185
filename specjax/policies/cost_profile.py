"""What a speculative round costs on this machine, in target decode steps, per verify
length and drafting source: the cost curve ``c(n)`` the cost-aware policy reads
(docs/spec.md §5, "Cost-aware draft length"), measured by the run itself in about a
minute before it decodes.

Measured round-robin (:func:`~specjax.policies.timers.interleaved_medians`, so every
timer sees the same background load), at one context length and cache length:

* ``forward[n]``: the target's forward over ``n + 1`` new tokens per row over its
  forward over one (the verify bucket covering n drafts, n = 0..K), made
  non-decreasing (timing noise removed);
* ``drafting[name]``: one drafting step of each source (its ``propose`` and
  ``commit``, K drafts) in the same steps (a marginal cost, so a nearly free step
  such as prompt lookup's can time at or below 0: it is kept at 0).

A source that drafts step by step under the policy's gate (the draft LM, EAGLE
chains: ``Drafter.gates_drafting``) pays ``max(n, 1) / K`` of its K-draft step when
n drafts are offered (the first draft is always made); one that drafts all K at once
(prompt lookup) pays all of it:

    c(n) = forward[n] + drafting * (max(n, 1) / K  if gated  else 1).

A drafter that chooses between sources each round
(:class:`~specjax.decoding.source_choice.SourceChoiceDrafter`) runs prompt lookup and
the chain's first step every round, so its two curves are
``c_lookup(n) = forward[n] + lookup + chain / K`` and ``c_chain(n) = forward[n] +
lookup + chain max(n, 1) / K`` (:meth:`RoundCostProfile.source_costs`).

**Our choice:** a profile is measured by the run that uses it and kept in its
record, never shipped: the costs are the machine's and its load's.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from specjax.checks import check_int


@dataclasses.dataclass(frozen=True)
class RoundCostProfile:
  """Attributes:
    k: K, the drafts per round.
    context: committed tokens per row while timing; cache_length: its cache slots.
    step_s: seconds of one decode step (the target's forward over one token).
    forward: ``[K+1]`` the forward over ``n + 1`` tokens, in steps (n = 0..K).
    drafting: ``{source: its K-draft drafting step, in steps}``.
    gated: ``{source: whether it drafts step by step under the gate}``.
    device: the timing device's kind.
    batch: rows per forward while timing (a step is the forward over one token per
      row of that many rows: at batch B a verify over n + 1 tokens is B (n + 1) tokens).
    forward_wide: ``{n: the forward over n tokens, in steps}`` for the wider forwards
      a caller asked for (a tree's node budgets beyond K + 1), timed in the same
      round-robin as ``forward``; empty by default.
    overhead: what a round of the speculative loop costs beyond its forward and its
      drafting, in steps (the rule, the commits, the loop's own work), added to every
      ``c(n)``; 0 until measured (:func:`loop_overhead`).
  """

  k: int
  context: int
  cache_length: int
  step_s: float
  forward: tuple
  drafting: dict
  gated: dict
  device: str
  batch: int = 1
  forward_wide: dict = dataclasses.field(default_factory=dict)
  overhead: float = 0.0

  def __post_init__(self):  # a record's JSON keys are strings: back to token counts
    object.__setattr__(self, "forward_wide",
                       {int(n): float(v) for n, v in self.forward_wide.items()})

  def round_cost(self, source: str) -> np.ndarray:
    """``c(n)``, n = 0..K, of a round drafted by ``source`` alone (module docstring)."""
    if source not in self.drafting:
      raise ValueError(f"source={source!r} was not profiled; profiled: "
                       f"{', '.join(sorted(self.drafting))}")
    share = (np.maximum(np.arange(self.k + 1), 1) / self.k if self.gated[source]
             else np.ones(self.k + 1))
    return np.asarray(self.forward) + self.drafting[source] * share + self.overhead

  def source_costs(self, lookup: str, chain: str) -> tuple[np.ndarray, np.ndarray]:
    """``(c_lookup, c_chain)`` of a drafter choosing between ``lookup`` and ``chain``
    each round (module docstring)."""
    for name in (lookup, chain):
      if name not in self.drafting:
        raise ValueError(f"source={name!r} was not profiled; profiled: "
                         f"{', '.join(sorted(self.drafting))}")
    base = np.asarray(self.forward) + self.drafting[lookup] + self.overhead
    steps = np.maximum(np.arange(self.k + 1), 1) / self.k
    return base + self.drafting[chain] / self.k, base + self.drafting[chain] * steps

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


def measure(target, target_params, sources: dict, prompt_ids, *, k: int, cache_length: int,
            context: int, repeats: int = 5, batch: int = 1,
            wide_tokens: tuple = ()) -> RoundCostProfile:
  """Profile this machine (module docstring).

  Args:
    target, target_params: the target model and its params.
    sources: ``{name: (drafter, draft_params)}`` -- each a chain drafter of K drafts.
    prompt_ids: one prompt (token ids) the drafters' steps run after.
    k: K; cache_length: the cache slots of the timed calls; context: the committed
      tokens of the timed forwards (the run's typical context).
    repeats: round-robin rounds (the median is kept).
    batch: rows per timed call (the run's batch size; the prompt repeated per row).
    wide_tokens: forward widths beyond K + 1 to time as well (``forward_wide``).
  """
  import jax

  from specjax.decoding.prompts import prepare_prompts
  from specjax.decoding.speculative import loop_target
  from specjax.policies.timers import draft_timer, forward_timer, interleaved_medians
  check_int("k", k, low=1)
  check_int("repeats", repeats, low=1)
  check_int("batch", batch, low=1)
  for name, (drafter, _) in sources.items():
    if drafter.tree or drafter.max_accepted != k:
      raise ValueError(f"source {name!r} must be a chain drafter of K={k} drafts")
  decoded = target.decode_params(target_params)
  tokens, lengths = prepare_prompts([list(prompt_ids)] * batch, target.config.vocab_size)
  wide = tuple(sorted({int(n) for n in wide_tokens}))
  if any(n <= k + 1 for n in wide) or (wide and context + wide[-1] > cache_length):
    raise ValueError(f"wide_tokens={wide_tokens!r} must all exceed K + 1 = {k + 1} and fit "
                     f"the cache after the context ({context} + n <= {cache_length})")
  timers = {("forward", n): forward_timer(target, decoded, batch, n + 1, context, cache_length,
                                          inner=4) for n in range(k + 1)}
  for n in wide:
    timers["wide", n] = forward_timer(target, decoded, batch, n, context, cache_length, inner=4)
  for name, (drafter, params) in sources.items():
    timers["draft", name] = draft_timer(drafter, params, loop_target(target, drafter),
                                        target_params, tokens, lengths, cache_length)
  med = interleaved_medians(timers, repeats)
  step = med["forward", 0]
  forward = np.maximum.accumulate([med["forward", n] / step for n in range(k + 1)])
  return RoundCostProfile(
      k, int(context), int(cache_length), float(step), tuple(float(f) for f in forward),
      {name: max(0.0, float(med["draft", name] / step)) for name in sources},  # noise < 0
      {name: bool(d.gates_drafting) for name, (d, _) in sources.items()},
      jax.devices()[0].device_kind, int(batch),
      {n: float(med["wide", n] / step) for n in wide})


def loop_overhead(profile: RoundCostProfile, modelled_plain: float, target, target_params,
                  drafter, draft_params, prompt_ids, *, plain_policy, plain_params,
                  new_tokens: int = 16, repeats: int = 3, prompt_tokens: int = 16) -> float:
  """What a round of the speculative loop costs beyond the profile's model, in steps:
  the loop run with ``plain_policy`` / ``plain_params`` (a policy that never offers a
  draft, so every round is a plain step through the whole loop: drafting up to its
  first gate, the verify over one token, the rule, the commits) against target-only
  decoding, over ``new_tokens - 1`` decode steps of ``profile.batch`` copies of
  the first ``prompt_tokens`` of ``prompt_ids`` (**our choice**: a short prompt
  keeps the prefills this subtracts cheap; the cache keeps ``profile.cache_length``
  slots), greedy, round-robin medians of ``repeats``:

      real c(0) = (spec(m) - spec(1)) / (gen(m) - gen(1)),  m = new_tokens,

  (one token each per row and step; the m = 1 calls are the prefill and the first
  token), minus ``modelled_plain``, the profile's own ``c(0)`` of the source that
  drafts such a round (before any overhead).  Kept at 0 when noise makes it negative.
  """
  from specjax import verifiers
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.speculative import speculative_generate
  from specjax.policies.timers import call_timer, interleaved_medians
  check_int("new_tokens", new_tokens, low=2)
  check_int("repeats", repeats, low=1)
  check_int("prompt_tokens", prompt_tokens, low=1)
  prompts = [list(prompt_ids)[:prompt_tokens]] * profile.batch
  kw = dict(eos_token_id=None, cache_length=profile.cache_length)

  def spec(m):
    return lambda: speculative_generate(target, target_params, drafter, draft_params,
                                        verifiers.get("lossless"), prompts, max_new_tokens=m,
                                        policy=plain_policy, policy_params=plain_params, **kw)

  def gen(m):
    return lambda: generate(target, target_params, prompts, max_new_tokens=m, **kw)

  med = interleaved_medians({(name, m): call_timer(make(m)) for name, make in
                             (("spec", spec), ("gen", gen)) for m in (1, new_tokens)}, repeats)
  real = ((med["spec", new_tokens] - med["spec", 1])
          / max(med["gen", new_tokens] - med["gen", 1], 1e-9))
  return max(0.0, float(real - modelled_plain))
