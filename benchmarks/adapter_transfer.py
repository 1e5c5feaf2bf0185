r"""What a carried adapter does to text unlike its session's: the EAGLE-3 head's online
adapter (docs/spec.md §4, "Online adaptation"), learned over a held-out multi-turn
chat, carried into other text (HumanEval problems, the first turns of other
conversations) -- against the frozen head and a fresh adapting head on the same
prompts.

The sessions are :mod:`benchmarks.online_adaptation`'s (the same draw for the same
``--seed``, ``--turns``, ``--min_turns``, ``--max_new_tokens`` and ``--max_context``),
answered greedily turn after turn by the adapting chain alone (greedy answers are the
target's whatever the drafts are), its state carried from turn to turn.  After the
last turn the session's adapter (its parameters: **our choice** -- what the session
learned, without its pending window of chat entries or Adam's moments, which a new
conversation would not inherit) is carried into ``--unlike_prompts`` held-out
prompts of ``--unlike_sets`` (HumanEval problems and held-out ShareGPT first turns of
other conversations), all in one batch (per-row adapters: the rows do not
affect each other), each answered greedily to ``--unlike_new_tokens`` tokens by the
adapting chain starting from it, as a served session that moved on to new text
would.  The frozen head and a fresh adapting head (from the frozen head, as a new
session starts) answer the same prompts once.

Per prompt and arm the record keeps target calls, accepted drafts and the accepted
and offered counts per draft position (position 1's acceptance is the head's
agreement with the target's greedy token: "held-out agreement").  No timing: nothing
here is a speed.  The record is written after every session and a rerun of the same
command resumes it (the settings must match).

    python -m benchmarks.adapter_transfer --sessions=6 --turns=8 --min_turns=8 \
        --max_new_tokens=256 --max_context=4096 --seed=1 --decision \
        --output=benchmarks/results/online_adaptation/smollm2_transfer.json
"""

from __future__ import annotations

import dataclasses
import json
import os

from absl import app

from benchmarks import online_adaptation as oa
from experiments.common import knobs, specs
from experiments.common.prompts import PROMPT_SETS


UNLIKE_SETS = tuple(s for s in PROMPT_SETS if s != "multiturn")


@dataclasses.dataclass(frozen=True)
class TransferSpec:
  """The unlike text the adapter is carried into."""
  unlike_sets: tuple[str, ...] = knobs.knob(("humaneval", "sharegpt"), "prompt sets of the "
                                            "unlike text: HumanEval problems and / or held-out "
                                            "ShareGPT first turns (split evenly)")
  unlike_prompts: int = knobs.knob(16, "held-out unlike prompts, split over the sets (one batch)")
  unlike_new_tokens: int = knobs.knob(128, "tokens answered per unlike prompt")

  def __post_init__(self):
    knobs.check_subset(self, "unlike_sets", UNLIKE_SETS)
    knobs.check_int(self, "unlike_prompts", len(self.unlike_sets or ()) or 1)
    knobs.check_int(self, "unlike_new_tokens", 2)


SPECS = knobs.Specs(specs.ModelSpec, specs.ChainSpec, specs.AdaptSpec, specs.NewTokensSpec,
                    specs.ContextSpec, specs.SeedSpec, specs.OutputSpec,
                    oa.OnlineAdaptationSpec, TransferSpec,
                    presets=dict(model="smollm2-135m-instruct", k=4,
                                 adapt="online:every=4:learning_rate=0.03",
                                 max_new_tokens=256, max_context=4096, output=""))


@dataclasses.dataclass(frozen=True)
class Run:
  """This benchmark's specs, by name."""
  model: specs.ModelSpec
  chain: specs.ChainSpec
  adapt: specs.AdaptSpec
  new_tokens: specs.NewTokensSpec
  context: specs.ContextSpec
  seed: specs.SeedSpec
  output: specs.OutputSpec
  bench: oa.OnlineAdaptationSpec
  transfer: TransferSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only."""
  SPECS.define()
  from experiments.common import cli
  cli.define_decision_flag()


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  r = Run(*SPECS.build())
  try:
    oa.online_adaptation(r.adapt)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r


def settings(r: Run, cfg) -> dict:
  """What a record depends on: a resumed record must match it."""
  return dict(oa.session_settings(r, cfg), unlike_sets=list(r.transfer.unlike_sets),
              unlike_prompts=r.transfer.unlike_prompts,
              unlike_new_tokens=r.transfer.unlike_new_tokens)


def load_setup(r: Run) -> dict:
  """Models, the frozen and adapting chains (greedy), the sessions' conversations and
  the unlike prompts (no ShareGPT first turn of a conversation a session could be:
  :func:`session_pool`)."""
  import jax

  from experiments.common.model_sets import load_model_set
  from experiments.common.prompts import load_chat_prompts
  from specjax import verifiers
  from specjax.decoding.drafter_factory import make_drafter
  from specjax.distributions import SamplingConfig
  cfg = oa.online_adaptation(r.adapt)
  ms = load_model_set(r.model.model, draft="", eagle="eagle3")
  greedy = SamplingConfig(temperature=0.0)
  frozen = make_drafter("eagle_chain", greedy, ms.draft_sources(), num_draft=r.chain.k)
  adapting = make_drafter("eagle_chain", greedy, ms.draft_sources(), num_draft=r.chain.k,
                          adapt=cfg)
  conversations = oa.sessions(r, ms.encode_chat)
  unlike = load_chat_prompts(ms.encode_chat, r.transfer.unlike_prompts,
                             sets=r.transfer.unlike_sets, exclude=session_pool(r))
  return dict(ms=ms, cfg=cfg, rule=verifiers.get("lossless"), frozen=frozen,
              adapting=adapting, greedy=greedy, key=jax.random.key(r.seed.seed),
              conversations=conversations, unlike=unlike)


def session_pool(r: Run) -> set:
  """``sharegpt:<id>`` of every held-out conversation a session could be drawn from
  (``--min_turns`` user turns or more), whatever ``--sessions`` is: the unlike prompts
  exclude them all, so they stay the same when a record is resumed with more sessions."""
  from specjax.data import eval_prompts
  return {f"sharegpt:{p[0].id}" for p in eval_prompts.heldout_multiturn_prompts(seed=r.seed.seed)
          if sum(m["role"] == "user" for m in p[0].messages) >= r.bench.min_turns}


def _generate(setup: dict, drafter: tuple, prompts: list, max_new_tokens: int,
              adapter=None):
  from specjax.decoding.speculative import speculative_generate
  ms = setup["ms"]
  d, params = drafter
  if adapter is not None:
    params = dict(params, adapter=adapter)
  return speculative_generate(ms.target, ms.target_params, d, params, setup["rule"], prompts,
                              max_new_tokens=max_new_tokens, sampling=setup["greedy"],
                              key=setup["key"])


def per_prompt(result) -> list[dict]:
  """One dict per row of a result: target calls, accepted drafts, and the accepted and
  offered counts per draft position."""
  import numpy as np
  st = result.stats
  calls, acc = np.asarray(st.target_calls), np.asarray(st.accepted)
  ac, oc = np.asarray(st.accept_counts), np.asarray(st.offered_counts)
  return [dict(target_calls=int(calls[i]), accepted=int(acc[i]),
               accept_counts=ac[i].astype(int).tolist(),
               offered_counts=oc[i].astype(int).tolist()) for i in range(len(calls))]


def tiled(adapter_params, rows: int):
  """A one-row :class:`~specjax.decoding.adaptation.AdapterParams` repeated over ``rows``
  rows (the same learned adapter for every unlike prompt)."""
  import jax
  import jax.numpy as jnp
  for leaf in jax.tree.leaves(adapter_params):
    if leaf.shape[0] != 1:
      raise ValueError(f"a session's adapter has {leaf.shape[0]} rows; expected 1")
  return jax.tree.map(lambda x: jnp.repeat(x, rows, axis=0), adapter_params)


def run_session(r: Run, setup: dict, conv) -> dict:
  """One session answered by the adapting chain, then its adapter carried into the
  unlike prompts: ``{"turns": [...], "served": tokens, "carried": per prompt}``."""
  state, turns = None, []

  def answer(turn: int, ids: list) -> list:
    nonlocal state
    out = _generate(setup, setup["adapting"], [ids], r.new_tokens.max_new_tokens, state)
    state, tokens = out.adapter, out.to_lists()[0]
    turns.append(dict(turn=turn, tokens=len(tokens), tau=out.stats.summary()["tau"]))
    return tokens

  oa.replay(r, setup["ms"], conv, answer)
  served = sum(t["tokens"] for t in turns)
  prompts = [list(p.ids) for p in setup["unlike"]]
  carried = _generate(setup, setup["adapting"], prompts, r.transfer.unlike_new_tokens,
                      tiled(state.params, len(prompts)))
  return dict(turns=turns, served=served, carried=per_prompt(carried))


def baselines(r: Run, setup: dict) -> dict:
  """The frozen head's and a fresh adapting head's per-prompt counts on the unlike
  prompts (the same whatever the session)."""
  prompts = [list(p.ids) for p in setup["unlike"]]
  n = r.transfer.unlike_new_tokens
  return {"frozen": per_prompt(_generate(setup, setup["frozen"], prompts, n)),
          "fresh": per_prompt(_generate(setup, setup["adapting"], prompts, n))}


def resume_from(path: str, want: dict) -> dict | None:
  """The record at ``path`` (None when there is none); UsageError when its settings
  differ from this run's (naming each)."""
  if not path or not os.path.exists(path):
    return None
  with open(path) as f:
    rec = json.load(f)
  oa.check_same_settings(path, rec["settings"], want)
  return rec


def main(_):
  from benchmarks.records import write_record
  from experiments.common import cli
  from specjax import provenance
  r = build_run()
  cli.apply_decision_flag()
  stamp = provenance.stamp()
  setup = load_setup(r)
  want = settings(r, setup["cfg"])
  rec = resume_from(r.output.output, want)
  body = dict(benchmark="adapter_transfer", settings=want,
              prompts=[p.source for p in setup["unlike"]], sessions=[])
  parts = []
  if rec is not None:
    if rec["prompts"] != body["prompts"]:
      raise app.UsageError(f"--output={r.output.output} was taken on other unlike prompts; "
                           "name a new --output to start afresh")
    body.update(baselines=rec["baselines"], sessions=rec["sessions"])
    parts = rec["parts"]
  else:
    body["baselines"] = baselines(r, setup)
  done, ran = {s["session"] for s in body["sessions"]}, []
  for s, conv in enumerate(setup["conversations"]):
    if s in done:
      continue
    body["sessions"].append(dict(session=s, conversation=conv.id,
                                 **run_session(r, setup, conv)))
    ran.append(s)
    print(f"session {s}: served {body['sessions'][-1]['served']} tokens", flush=True)
    if r.output.output:  # after every session: a killed run resumes from here
      record = provenance.stamped(dict(body), stamp, dict(setup["ms"].sources))
      record["parts"] = parts + [dict(record["provenance"], sessions=list(ran))]
      write_record(r.output.output, record)


if __name__ == "__main__":
  define_flags()
  app.run(main)
