"""The cost-aware policy of a run's rows (``policy="cost_aware"``; the main job's
``adaptive`` row): this machine's round costs, measured once per run before the first
such row, and the acceptance tables shipped with the drafters
(:mod:`experiments.common.shipped_tables`), per row's drafter, rule, temperature and K.

* prompt lookup (``lookup_chain``): its table, ``c(n)`` of lookup alone;
* the EAGLE chain (``eagle_chain``): its table, ``c(n)`` of the chain stopping under
  the gate;
* both, chosen per round and row (``lookup_eagle_chain``): both tables and the two
  curves of :meth:`~specjax.policies.cost_profile.RoundCostProfile.source_costs`.

The profile is timed at the run's typical context (the prompts' mean length plus
half the new tokens), cache length and batch size (what a verify over n + 1 tokens
costs against a decode step depends on the rows it carries), with greedy drafts
(**our choice**: sampling a draft costs the same order), and kept in every row's result (``cost_profile``)
with the tables' calibration errors.

The profile's model of a round (its forward and its drafting) leaves out the loop's
own work -- the rule, the commits, the lookup match, the statistics -- which grows
with the batch; :func:`with_overhead` measures it once per run through the loop
itself and adds it to every ``c(n)``.  When the best fixed verify length's rate
(:func:`specjax.policies.cost_aware.fixed_length_rate`) does not clear the run's
:func:`specjax.policies.cost_aware.speculation_rule` -- one row reads the tables' most
confident bins against 1, a batch their prior against 1 plus a margin -- the row's
``speculation`` is ``"off"``: the binary decodes it target-only
(docs/spec.md §5, "When speculation cannot pay").

The rows of a prompt batch are priced together (:func:`price_group`): one verify
length per step for the batch, every row paying its cost -- the batch's forward
runs over its longest offer, so rows that chose alone would let one eager row
set every row's cost.
"""

from __future__ import annotations

import numpy as np

SERVED = ("lookup_chain", "eagle_chain", "lookup_eagle_chain")  # drafters it has tables for
PROFILE_KEY = "cost_profile"


def profile(ctx, k: int, cache_length: int):
  """The run's :class:`~specjax.policies.cost_profile.RoundCostProfile` for K (measured at
  the first call, then kept in ``ctx.cache``)."""
  key = (PROFILE_KEY, k, cache_length)
  if key not in ctx.cache:
    from specjax.decoding.drafter_factory import make_drafter
    from specjax.distributions import SamplingConfig
    from specjax.policies import cost_profile
    greedy = SamplingConfig(temperature=0.0)
    sources = {name: make_drafter(name, greedy, ctx.sources, num_draft=k)
               for name in ("lookup_chain", "eagle_chain")}
    prompts = ctx.prompt_ids
    context = int(np.mean([len(p) for p in prompts])) + int(ctx.c.data.max_new_tokens) // 2
    batch = min(int(ctx.c.data.get("batch_size", 0)) or len(prompts), len(prompts))
    ctx.cache[key] = cost_profile.measure(ctx.target, ctx.target_params, sources, prompts[0],
                                          k=k, cache_length=cache_length, batch=batch,
                                          context=min(context, cache_length - k - 1))
  return ctx.cache[key]


def _tables(ctx, sources: tuple, row: dict) -> list:
  """``[(FittedAcceptance, metadata)]`` of the shipped tables of ``sources`` for the row."""
  from experiments.common.shipped_tables import load_shipped
  from specjax import provenance
  hashes = ctx.cache.get("model_hashes")
  if hashes is None:
    hashes = ctx.cache["model_hashes"] = provenance.model_hashes(ctx.model_sources)
  return [load_shipped(ctx.model_name, hashes, s, row["rule"], dict(row["hparams"]),
                       float(row["temperature"]), int(row["num_draft"])) for s in sources]


def cost_aware(ctx, row: dict, cache_length: int) -> tuple:
  """``(policy, params, info)`` of a cost-aware row: ``info`` holds the profile and the
  tables' held-out calibration errors for the row's record.  ``ValueError`` for a
  drafter without shipped tables, ``FileNotFoundError`` for a missing table."""
  from specjax.decoding.drafter_factory import drafter_kind
  from specjax.policies import cost_aware as ca
  d, k = drafter_kind(row["drafter"]), int(row["num_draft"])
  if d not in SERVED:
    raise ValueError(f"the cost-aware policy needs acceptance tables; they are shipped for "
                     f"{', '.join(SERVED)}, not drafter {d!r}")
  sources = ("lookup_chain", "eagle_chain") if d == "lookup_eagle_chain" else (d,)
  tables = _tables(ctx, sources, row)  # before the profile: a missing table fails fast
  prof = with_overhead(ctx, d, profile(ctx, k, cache_length))
  if d == "lookup_eagle_chain":
    costs = prof.source_costs("lookup_chain", "eagle_chain")
    params = ca.make_source_params(*[ca.make_params(t.table(), c)
                                     for (t, _), c in zip(tables, costs)])
  else:
    costs = (prof.round_cost(d),)
    params = ca.make_params(tables[0][0].table(), costs[0])
  group = price_group(ctx)
  policy = ca.CostAwareLength(k, group_size=group)
  rates = {}
  for estimate in ca.RATE_ESTIMATES:
    rate, source, n = ca.fixed_length_rate(params, policy.buckets, estimate)
    rates[estimate] = {"rate": round(rate, 4), "source": sources[source], "n": n}
  rule = ca.speculation_rule(prof.batch)
  info = {"cost_profile": prof.to_json(), "round_cost": [np.round(c, 4).tolist() for c in costs],
          "calibration_ece": [m["reliability"]["ece"] for _, m in tables],
          "group_size": "batch" if group is None else group,
          "prior_rate": rates["prior"], "best_rate": rates["best"],
          "speculation_rule": rule.to_json(),
          "speculation": "on" if rule.speculates(rates[rule.estimate]["rate"]) else "off"}
  return policy, params, info


def plain_costs(prof, d: str) -> float:
  """The profile's modelled ``c(0)`` of drafter ``d``'s plain round (before overhead):
  the round a policy that never offers leaves (the choosing drafter's falls to the
  EAGLE chain, which drafts once before its gate stops it)."""
  if d == "lookup_eagle_chain":
    return float(prof.source_costs("lookup_chain", "eagle_chain")[1][0])
  return float(prof.round_cost(d)[0])


def with_overhead(ctx, d: str, prof):
  """``prof`` with the loop's own cost per round (``RoundCostProfile.overhead``),
  measured once per run and drafter kind at the profile's batch and cache length:
  the loop of drafter ``d`` with a policy that never offers a draft, against
  target-only decoding (:func:`specjax.policies.cost_profile.loop_overhead`)."""
  import dataclasses
  key = ("loop_overhead", d, prof.k, prof.cache_length)
  if key not in ctx.cache:
    from specjax.decoding.drafter_factory import make_drafter
    from specjax.distributions import SamplingConfig
    from specjax.policies import acceptance, cost_aware as ca, cost_profile
    drafter, dparams = make_drafter(d, SamplingConfig(temperature=0.0), ctx.sources,
                                    num_draft=prof.k)
    never = ca.make_params(acceptance.constant_table([0.0] * prof.k), prof.round_cost(
        "eagle_chain" if d != "lookup_chain" else d))
    plain = ca.make_source_params(never, never) if d == "lookup_eagle_chain" else never
    ctx.cache[key] = cost_profile.loop_overhead(
        prof, plain_costs(prof, d), ctx.target, ctx.target_params, drafter, dparams,
        ctx.prompt_ids[0], plain_policy=ca.CostAwareLength(prof.k), plain_params=plain)
  return dataclasses.replace(prof, overhead=ctx.cache[key])


def price_group(ctx):
  """The policy's ``group_size``: None (the prompt batch chooses one verify length per
  step and every row pays for it, as the batch's one forward does) on one ``data``
  device; 1 (each row alone) when rows are split over several, where a group of the
  whole batch would straddle devices."""
  mesh = ctx.mesh
  return None if mesh is None or mesh.shape.get("data", 1) == 1 else 1
