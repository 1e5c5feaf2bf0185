r"""What online adaptation costs per round, apart from what it changes: the EAGLE-3
chain frozen and adapting with an adapter that learns nothing, side by side.

An adapting drafter does two things a frozen one does not: every round it keeps the
round's entries (the head's outputs it computed anyway, and their labels: about two
passes over the target's vocabulary), and every ``every`` rounds it maps the window's
outputs to the frozen head's draft logits and takes Adam steps
(``specjax.decoding.adaptation``).  With ``learning_rate`` at
:data:`NULL_LEARNING_RATE` the same computation runs -- the same shapes, the same
schedule, every op -- but the adapter moves by about that much per step, so its
drafts, and therefore its rounds, are the frozen head's: the time between the two is
the adaptation's own cost, whatever it would have gained.  The run checks that the
rounds are the same (greedy, so the tokens are too).

For each ``--adapt`` mode (``online:...``; its learning rate is replaced), batch 1,
``--num_prompts`` held-out chat prompts (``--prompt_sets``), each call at ``n`` and 1
new tokens (the 1-token call is the prefill and first token; decode phase = n - 1),
every call once per round, round-robin, median of ``--repeats`` rounds: target-only
``generate``, the frozen chain and each mode's null adapter.  EOS is off.  The record
has per prompt the decode-phase seconds of every call, the rounds (target calls) and
the updates each null adapter took.

    python -m benchmarks.adaptation_cost --decision \
        --output=benchmarks/results/online_adaptation/smollm2_cost.json
"""

from __future__ import annotations

import dataclasses
import os

from absl import app

from experiments.common import knobs, specs

# Adam moves each coordinate by about the learning rate per step: 1e-9 leaves the
# draft logits within ~1e-6 of the frozen head's after a thousand updates.
NULL_LEARNING_RATE = 1e-9

SPECS = knobs.Specs(specs.ModelSpec, specs.ChainSpec, specs.AdaptSpec, specs.PromptSpec,
                    specs.NumPromptsSpec, specs.NewTokensSpec, specs.TimingSpec,
                    specs.OutputSpec,
                    presets=dict(model="smollm2-135m-instruct", k=4,
                                 adapt=("online:every=4:learning_rate=0.03, "
                                        "online:every=4:learning_rate=0.03:label_top_k=8"),
                                 num_prompts=8, max_new_tokens=128, repeats=3, output=""))


@dataclasses.dataclass(frozen=True)
class Run:
  """This benchmark's specs, by name."""
  model: specs.ModelSpec
  chain: specs.ChainSpec
  adapt: specs.AdaptSpec
  prompts: specs.PromptSpec
  num_prompts: specs.NumPromptsSpec
  new_tokens: specs.NewTokensSpec
  timing: specs.TimingSpec
  output: specs.OutputSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only."""
  SPECS.define()
  from experiments.common import cli
  cli.define_decision_flag()


def null_adaptations(adapt: specs.AdaptSpec) -> dict:
  """``{mode label: OnlineAdaptation}`` of every ``online`` mode of ``--adapt`` with its
  learning rate set to :data:`NULL_LEARNING_RATE`; ``KnobError`` without one."""
  from specjax.decoding.adaptation import OnlineAdaptation
  out = {}
  for name, hp in adapt.modes():
    if name != "online":
      continue
    cfg = OnlineAdaptation(**dict(hp, learning_rate=NULL_LEARNING_RATE))
    label = ":".join(f"{k}={v}" for k, v in sorted(hp.items()) if k != "learning_rate")
    out[f"online:{label}" if label else "online"] = cfg
  if not out:
    raise knobs.KnobError("adapt", adapt.adapt, "give one or more online[:hparam=value[:...]] "
                          "modes (their learning rates are replaced)")
  return out


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  r = Run(*SPECS.build())
  try:
    null_adaptations(r.adapt)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r


def load_setup(r: Run) -> dict:
  from experiments.common.model_sets import load_model_set
  from experiments.common.prompts import load_chat_prompts
  from specjax.decoding.drafter_factory import make_drafter
  from specjax.distributions import SamplingConfig
  ms = load_model_set(r.model.model, draft="", eagle="eagle3")
  greedy = SamplingConfig(temperature=0.0)
  drafters = {"frozen": make_drafter("eagle_chain", greedy, ms.draft_sources(),
                                     num_draft=r.chain.k)}
  for label, cfg in null_adaptations(r.adapt).items():
    drafters[label] = make_drafter("eagle_chain", greedy, ms.draft_sources(),
                                   num_draft=r.chain.k, adapt=cfg)
  prompts = load_chat_prompts(ms.encode_chat, r.num_prompts.num_prompts,
                              sets=r.prompts.prompt_sets,
                              max_tokens=r.prompts.max_prompt_tokens)
  return dict(ms=ms, drafters=drafters, prompts=prompts)


def run_prompt(r: Run, setup: dict, ids: list) -> dict:
  """One prompt's row: decode-phase seconds of every call, rounds, updates."""
  from specjax import verifiers
  from specjax.decoding.autoregressive import generate
  from specjax.decoding.speculative import speculative_generate
  from specjax.policies.timers import call_timer, interleaved_medians
  ms, n = setup["ms"], r.new_tokens.max_new_tokens
  lossless = verifiers.get("lossless")
  calls = {"target": lambda m: generate(ms.target, ms.target_params, [ids], max_new_tokens=m,
                                        eos_token_id=None)}
  for name, (drafter, params) in setup["drafters"].items():
    calls[name] = (lambda d, p: lambda m: speculative_generate(
        ms.target, ms.target_params, d, p, lossless, [ids], max_new_tokens=m,
        eos_token_id=None))(drafter, params)
  outs = {name: fn(n) for name, fn in calls.items()}
  tokens = {name: o.to_lists()[0] for name, o in outs.items()}
  if any(t != tokens["target"] for t in tokens.values()):
    raise RuntimeError("greedy outputs differ between target-only and the chains")
  row = {"tokens": len(tokens["target"]), "calls": {}}
  for name, out in outs.items():
    if name == "target":
      continue
    row["calls"][name] = dict(target_calls=int(out.stats.target_calls[0]),
                              updates=(0 if out.adapter is None else
                                       int(out.adapter.updates[0])))
  timers = {(name, m): call_timer(fn, m) for name, fn in calls.items() for m in (n, 1)}
  med = interleaved_medians(timers, r.timing.repeats)
  row["decode_s"] = {name: med[name, n] - med[name, 1] for name in calls}
  return row


def summarize(rows: list) -> dict:
  """Per null adapter: its decode-phase time over the frozen chain's minus 1 (the share
  of decode time adaptation adds), the added seconds per round in target decode steps,
  and whether its rounds were the frozen chain's on every prompt."""
  total = lambda name: sum(r["decode_s"][name] for r in rows)
  rounds = sum(r["calls"]["frozen"]["target_calls"] for r in rows)
  step = total("target") / max(sum(r["tokens"] - 1 for r in rows), 1)
  out = {}
  for name in rows[0]["calls"]:
    if name == "frozen":
      continue
    same = all(r["calls"][name]["target_calls"] == r["calls"]["frozen"]["target_calls"]
               for r in rows)
    extra = total(name) - total("frozen")
    out[name] = dict(share=extra / total("frozen"), steps_per_round=extra / rounds / step,
                     same_rounds=same,
                     updates=sum(r["calls"][name]["updates"] for r in rows))
  return out


def main(_):
  from benchmarks.records import write_record
  from experiments.common import cli
  from specjax import provenance
  r = build_run()
  cli.apply_decision_flag()
  stamp = provenance.stamp()
  setup = load_setup(r)
  rows = []
  for p in setup["prompts"]:
    rows.append(dict(source=p.source, **run_prompt(r, setup, list(p.ids))))
    print(f"{p.source}: " + ", ".join(f"{k} {v:.2f} s" for k, v in rows[-1]["decode_s"].items()),
          flush=True)
  body = dict(benchmark="adaptation_cost", target=r.model.model, k=r.chain.k,
              adapt=r.adapt.adapt, null_learning_rate=NULL_LEARNING_RATE,
              max_new_tokens=r.new_tokens.max_new_tokens, repeats=r.timing.repeats,
              prompts=rows, summary=summarize(rows), load_end=os.getloadavg()[0])
  print(body["summary"])
  if r.output.output:
    write_record(r.output.output,
                 provenance.stamped(body, stamp, dict(setup["ms"].sources)))


if __name__ == "__main__":
  define_flags()
  app.run(main)
