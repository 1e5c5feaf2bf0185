r"""How much speculation a machine affords: the draft tree (Sequoia's node budget) and
the chain lengths the cost-aware policy chooses, on this CPU and on an accelerator-like
cost profile, from one acceptance model (docs/speed.md, "What the profile buys").

1. **Rank acceptance** (``specjax.policies.rank_acceptance``): greedy speculative
   decoding with the EAGLE-3 chain of ``--k`` drafts on ``--calibration_prompts``
   held-out chat prompts (disjoint from the first ``--evaluation_prompts``), every
   draft verified: ``P[d, r]``, the share of the reached positions at depth d where
   the target's token was the head's rank-r token (depths reached fewer than 100
   times pooled with the deepest one reached that often:
   ``rank_acceptance.positional_acceptance``).
2. **This machine's profile**: the target's forward over n = 1, 2, 4, ...,
   ``--max_nodes`` new tokens at the prompts' typical context, and the K = 4 round
   cost profile of the cost-aware policy (``specjax.policies.cost_profile``: the
   forward over 1..5 tokens, prompt lookup's and the EAGLE-3 chain's drafting step),
   all in target decode steps, round-robin medians of ``--profile_repeats``, one
   timer set (the wider forwards are the profile's ``forward_wide``).
3. **The accelerator-like profile** (synthetic; no accelerator is here): every
   forward up to ``--max_nodes`` tokens costs one step -- a memory-bound forward at
   batch 1 reads the same weights whatever the token count until it meets the
   compute bound -- and drafting costs what it costs here in steps (the head's
   bytes over the target's, the same on both).
4. **Per profile**: Sequoia's best tree for every budget and the best shape
   overall (``specjax.policies.tree_budget.choose_shape``: ``E / c``, a level of
   drafting costing one EAGLE-3 step), and the cost-aware policy (K = 4, the shipped
   tables, T = 0, lossless) run on the first ``--num_prompts`` evaluation prompts
   with each profile's cost curves: its share of rounds at each verify length, for the
   EAGLE-3 chain and for ``lookup_eagle_chain`` (with the share of rounds by source).

The rates of step 4 are the model's (tokens per target step, ``E / c``), not timings:
the accelerator's cannot be timed here, and this CPU's are in the main job.

    python -m benchmarks.tree_budget --output=benchmarks/results/tree_budget/smollm2.json
"""

from __future__ import annotations

import dataclasses

from absl import app
import numpy as np

from experiments.common import cli, knobs, specs


@dataclasses.dataclass(frozen=True)
class TreeBudgetSpec:
  """The acceptance model's ranks and the largest tree."""
  ranks: int = knobs.knob(8, "ranks of the head's distribution the acceptance model keeps "
                          "(children per tree node at most)")
  max_nodes: int = knobs.knob(64, "largest tree (nodes, the root included) and the largest "
                              "verify the profiles cover; a power of two")

  def __post_init__(self):
    knobs.check_int(self, "ranks", 1)
    knobs.check_int(self, "max_nodes", 2)
    if self.max_nodes & (self.max_nodes - 1):
      raise knobs.KnobError("max_nodes", self.max_nodes, "must be a power of two")


SPECS = knobs.Specs(specs.ModelSpec, specs.ChainSpec, specs.PromptSpec, specs.NumPromptsSpec,
                    specs.NewTokensSpec, specs.ProfileSpec, specs.OutputSpec,
                    specs.CalibrationPromptsSpec, specs.EvaluationPromptsSpec, TreeBudgetSpec,
                    presets=dict(model="smollm2-135m-instruct", k=6, num_prompts=4,
                                 max_new_tokens=96, calibration_prompts=16, output=""))
POLICY_K = 4  # the K of the shipped acceptance tables
POLICY_DRAFTERS = ("eagle_chain", "lookup_eagle_chain")
RANK_MIN_REACHED = 100  # positions a depth needs for its own row of P (pooled below it)


@dataclasses.dataclass(frozen=True)
class Run:
  """This benchmark's specs, by name."""
  model: specs.ModelSpec
  chain: specs.ChainSpec
  prompts: specs.PromptSpec
  num_prompts: specs.NumPromptsSpec
  new_tokens: specs.NewTokensSpec
  profile: specs.ProfileSpec
  output: specs.OutputSpec
  calibration: specs.CalibrationPromptsSpec
  held_out: specs.EvaluationPromptsSpec
  bench: TreeBudgetSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only."""
  SPECS.define()
  cli.define_decision_flag()


def build_run() -> Run:
  r = Run(*SPECS.build())
  if r.model.model != "smollm2-135m-instruct":
    raise app.UsageError(f"--model={r.model.model}: the acceptance tables this benchmark's "
                         f"policy reads are shipped for smollm2-135m-instruct only")
  if r.new_tokens.max_new_tokens < 2:
    raise app.UsageError(f"--max_new_tokens={r.new_tokens.max_new_tokens}: give at least 2")
  return r


def measure_ranks(r: Run, ms) -> np.ndarray:
  """Step 1: ``rank_counts`` of the greedy EAGLE-3 chain on the held-out prompts."""
  from experiments.common.prompts import held_out_chat_prompts
  from specjax import verifiers
  from specjax.decoding.drafter_factory import make_drafter
  from specjax.distributions import SamplingConfig
  from specjax.policies.rank_acceptance import collect_ranks
  greedy = SamplingConfig(temperature=0.0)
  prompts = [list(q.ids) for q in held_out_chat_prompts(
      ms.encode_chat, r.calibration.calibration_prompts, after=r.held_out.evaluation_prompts,
      sets=r.prompts.prompt_sets, max_tokens=r.prompts.max_prompt_tokens)]
  drafter, dparams = make_drafter("eagle_chain", greedy, ms.draft_sources(), num_draft=r.chain.k)
  return collect_ranks(ms.target, ms.target_params, drafter, dparams, verifiers.get("lossless"),
                       prompts, max_new_tokens=r.new_tokens.max_new_tokens, sampling=greedy,
                       ranks=r.bench.ranks)


def measure_profile(r: Run, ms, prompts: list) -> tuple:
  """Step 2: ``(verify sizes, their costs in steps, RoundCostProfile at K = 4)``."""
  from specjax.decoding.drafter_factory import make_drafter
  from specjax.distributions import SamplingConfig
  from specjax.policies import cost_profile
  n_max = r.bench.max_nodes
  context = int(np.mean([len(p) for p in prompts])) + r.new_tokens.max_new_tokens // 2
  cache = context + n_max + 8
  sizes = tuple(2 ** i for i in range(int(np.log2(n_max)) + 1))
  greedy = SamplingConfig(temperature=0.0)
  sources = {name: make_drafter(name, greedy, ms.draft_sources(), num_draft=POLICY_K)
             for name in ("lookup_chain", "eagle_chain")}
  prof = cost_profile.measure(ms.target, ms.target_params, sources, prompts[0], k=POLICY_K,
                              cache_length=cache, context=context,
                              repeats=r.profile.profile_repeats,
                              wide_tokens=tuple(n for n in sizes if n > POLICY_K + 1))
  return sizes, wide_steps(prof, sizes), prof


def wide_steps(prof, sizes: tuple) -> tuple:
  """The forward over each of ``sizes`` tokens in steps, from one timer set: the
  profile's ``forward`` up to K + 1 tokens, its ``forward_wide`` beyond (made
  non-decreasing, timing noise removed)."""
  at = {n + 1: f for n, f in enumerate(prof.forward)} | dict(prof.forward_wide)
  missing = [n for n in sizes if n not in at]
  if missing:
    raise ValueError(f"the profile has no forward over {missing} tokens (timed: {sorted(at)})")
  return tuple(float(v) for v in np.maximum.accumulate([at[n] for n in sizes]))


def shapes(p: np.ndarray, sizes: tuple, steps: tuple, draft_level: float, max_nodes: int
           ) -> dict:
  """Step 4, trees: the best shape, the best chain and the best tree per budget."""
  from specjax.policies import tree_budget as tb
  verify = tb.VerifyCost(sizes, steps)
  best, cands = tb.choose_shape(p, verify, draft_level, max_nodes=max_nodes)
  chains = [c for c in cands if set(c.plan.widths) <= {1}]
  plans = tb.optimal_trees(p, max_nodes)
  per_budget = [dict(_shape(tb.costed(plans[n - 1], verify, draft_level)), budget=n)
                for n in sizes if n > 1]
  return dict(best=_shape(best), best_chain=_shape(max(chains, key=lambda c: c.rate)),
              per_budget=per_budget)


def _shape(c) -> dict:
  return dict(nodes=c.plan.nodes, depth=c.plan.depth, widths=list(c.plan.widths),
              value=c.plan.value, cost=c.cost, rate=c.rate, parents=list(c.plan.parents),
              ranks=list(c.plan.ranks))


def policy_shares(r: Run, ms, prompts: list, prof) -> dict:
  """Step 4, chains: the cost-aware policy's rounds per verify length (and per source)
  under ``prof``'s curves, per drafter of :data:`POLICY_DRAFTERS`."""
  import jax

  from experiments.common.shipped_tables import load_shipped
  from specjax import provenance, verifiers
  from specjax.decoding.drafter_factory import make_drafter
  from specjax.decoding.speculative import speculative_generate
  from specjax.distributions import SamplingConfig
  from specjax.policies import cost_aware as ca
  greedy, hashes = SamplingConfig(temperature=0.0), provenance.model_hashes(dict(ms.sources))
  tables = {s: load_shipped(ms.name, hashes, s, "lossless", {}, 0.0, POLICY_K)[0].table()
            for s in ("lookup_chain", "eagle_chain")}
  out = {}
  for name in POLICY_DRAFTERS:
    drafter, dparams = make_drafter(name, greedy, ms.draft_sources(), num_draft=POLICY_K)
    if name == "lookup_eagle_chain":
      params = ca.make_source_params(*[ca.make_params(tables[s], c) for s, c in zip(
          ("lookup_chain", "eagle_chain"), prof.source_costs("lookup_chain", "eagle_chain"))])
    else:
      params = ca.make_params(tables[name], prof.round_cost(name))
    res = speculative_generate(ms.target, ms.target_params, drafter, dparams,
                               verifiers.get("lossless"), prompts,
                               max_new_tokens=r.new_tokens.max_new_tokens, sampling=greedy,
                               key=jax.random.key(0), policy=ca.CostAwareLength(POLICY_K),
                               policy_params=params)
    st = jax.device_get(res.stats)
    rounds = max(int(np.sum(st.target_calls)), 1)
    out[name] = dict(rounds=rounds, tau=(int(np.sum(st.accepted)) + rounds) / rounds,
                     gamma_share=(np.sum(st.gamma_counts, 0) / rounds).tolist(),
                     source_share=(np.sum(st.source_rounds, 0) / rounds).tolist())
  return out


def profiles(sizes: tuple, steps: tuple, prof) -> dict:
  """``{name: (verify steps per size, K = 4 RoundCostProfile)}``: this CPU's (step 2) and
  the accelerator-like one (step 3: flat forwards, the same drafting)."""
  flat = dataclasses.replace(prof, forward=(1.0,) * (POLICY_K + 1), device="synthetic",
                             forward_wide={n: 1.0 for n in prof.forward_wide})
  return {"this_cpu": (steps, prof), "accelerator_like": ((1.0,) * len(sizes), flat)}


def print_table(out: dict) -> None:
  print("| profile | verify 1, 2, 4, ... tokens (steps) | best tree: nodes, depth, widths | "
        "E / c | best chain: drafts, E / c | policy, EAGLE-3 chain: rounds at n = 0..4 |")
  print("|---|---|---|---|---|---|")
  for name, res in out["profiles"].items():
    b, c = res["trees"]["best"], res["trees"]["best_chain"]
    share = " ".join(f"{s:.2f}" for s in res["policy"]["eagle_chain"]["gamma_share"])
    print(f"| {name} | {' '.join(f'{s:.2f}' for s in res['verify_steps'])} | {b['nodes']}, "
          f"{b['depth']}, {b['widths']} | {b['value']:.2f} / {b['cost']:.2f} = "
          f"{b['rate']:.2f} | {c['depth']}, {c['rate']:.2f} | {share} |")


def main(_):
  from experiments.common.model_sets import load_model_set
  from experiments.common.prompts import load_chat_prompts
  from specjax import compiled_code, provenance
  from specjax.policies.rank_acceptance import positional_acceptance
  r = build_run()
  cli.apply_decision_flag()  # before anything is measured
  stamp = provenance.stamp()
  ms = load_model_set(r.model.model, draft="", eagle="eagle3")
  prompts = [list(q.ids) for q in load_chat_prompts(
      ms.encode_chat, r.num_prompts.num_prompts, sets=r.prompts.prompt_sets,
      max_tokens=r.prompts.max_prompt_tokens)]
  counts = measure_ranks(r, ms)
  compiled_code.release_compiled_programs()
  sizes, steps, prof = measure_profile(r, ms, prompts)
  compiled_code.release_compiled_programs()
  p = positional_acceptance(counts, RANK_MIN_REACHED)
  level = prof.drafting["eagle_chain"] / POLICY_K  # one head step: a tree level
  out = dict(benchmark="tree_budget", target=r.model.model, k=r.chain.k, ranks=r.bench.ranks,
             max_nodes=r.bench.max_nodes, calibration_prompts=r.calibration.calibration_prompts,
             evaluation_prompts=r.held_out.evaluation_prompts, policy_k=POLICY_K,
             policy_prompts=len(prompts), max_new_tokens=r.new_tokens.max_new_tokens,
             rank_counts=counts.tolist(), rank_acceptance=np.round(p, 6).tolist(),
             rank_min_reached=RANK_MIN_REACHED,
             verify_sizes=list(sizes), draft_level=level, profiles={})
  for name, (verify, pr) in profiles(sizes, steps, prof).items():
    out["profiles"][name] = dict(
        verify_steps=list(verify), cost_profile=pr.to_json(),
        trees=shapes(p, sizes, verify, level, r.bench.max_nodes),
        policy=policy_shares(r, ms, prompts, pr))
  print_table(out)
  if r.output.output:
    from benchmarks.records import write_record
    write_record(r.output.output, provenance.stamped(out, stamp, dict(ms.sources)))


if __name__ == "__main__":
  define_flags()
  app.run(main)
