r"""Build (or extend) the on-policy feature store: the target answers ShareGPT
training prompts itself, and the store records its features during generation.

    python -m experiments.generate_onpolicy --max_tokens=4000000     # resumable

Every user turn of the ShareGPT ``train`` split (:mod:`specjax.data.sharegpt`,
the same sha256 id split as ``extract_features``), with the conversation so far
as context (at most ``--max_turn_context`` tokens), is answered by the target
(:mod:`specjax.training.onpolicy`); shard ``i`` samples at ``--temperatures[i % n]``
(0 = greedy). ``--max_tokens`` bounds the *generated* tokens (loss mask 1). Kill it
at any time: a rerun with the same flags continues after the last whole shard. The
store lives outside the repo (``--output_dir``; default
``~/.cache/specjax/features/onpolicy-<model>-<sha12>``); the answers of every shard
are also kept in ``data/onpolicy/<model>-<sha12>/``
(:mod:`specjax.training.transcripts`, ~2 bytes per token, committed), so on a
machine without the store this command rebuilds the transcribed shards by a
forward pass (no sampling) and generates only the rest.
"""

from __future__ import annotations

import dataclasses
import os

from absl import app

from experiments.common import knobs, specs
from experiments.common.store_spec import StoreSpec

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class GenerateOnpolicySpec:
  """Which user turns are answered and where their answers are kept."""
  max_turn_context: int = knobs.knob(512, "user turns whose templated context (the "
                                     "conversation so far) is longer are skipped")
  transcripts_dir: str = knobs.knob(
      "", "where each shard's answers are kept, small enough to commit (default "
      "data/onpolicy/<model>-<sha12> in this repository; 'none' keeps none): transcribed "
      "shards are rebuilt by a forward pass instead of generated again")

  def __post_init__(self):
    knobs.check_int(self, "max_turn_context", 1)
    if self.transcripts_dir and os.path.isfile(self.transcripts_dir):
      raise knobs.KnobError("transcripts_dir", self.transcripts_dir, "is a file")


SPECS = knobs.Specs(
    specs.ModelSpec, specs.OutputDirSpec, StoreSpec, specs.TemperaturesSpec,
    specs.NewTokensSpec, specs.BatchSpec, specs.SeedSpec, GenerateOnpolicySpec,
    presets=dict(model="smollm2-135m-instruct",
                 output_dir="",  # '': ~/.cache/specjax/features/onpolicy-<model>-<sha12>
                 max_tokens=4_000_000,  # generated tokens
                 temperatures=(0.0, 0.7, 1.0),  # shard i samples at temperatures[i % n]
                 max_new_tokens=512,  # longest answer
                 batch_size=16))  # rows generated together


@dataclasses.dataclass(frozen=True)
class Run:
  """This binary's specs, by name."""
  model: specs.ModelSpec
  output: specs.OutputDirSpec
  store: StoreSpec
  temperatures: specs.TemperaturesSpec
  new_tokens: specs.NewTokensSpec
  batch: specs.BatchSpec
  seed: specs.SeedSpec
  onpolicy: GenerateOnpolicySpec


def define_flags():
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``):
  an answer and a batch take at least one token and one row here."""
  r = Run(*SPECS.build())
  try:
    knobs.check_int(r.new_tokens, "max_new_tokens", 1)
    knobs.check_int(r.batch, "batch_size", 1)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r


def main():
  r = build_run()
  from specjax.data import sharegpt
  from specjax.models import registry
  from specjax.training import features, onpolicy

  st, max_context, max_new = r.store, r.onpolicy.max_turn_context, r.new_tokens.max_new_tokens
  lm = registry.load_model(r.model.model)
  try:
    layers = st.layers(lm.config.num_hidden_layers, need_final=True)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  lm = registry.load_model(r.model.model, hidden_layers=layers)
  out_dir = r.output.output_dir or os.path.join(registry.cache_root(), "features",
                                                f"onpolicy-{lm.name}-{lm.sha256[:12]}")
  transcripts_dir = r.onpolicy.transcripts_dir or os.path.join(
      REPO_ROOT, "data", "onpolicy", f"{lm.name}-{lm.sha256[:12]}")
  if transcripts_dir == "none":
    transcripts_dir = None
  mix = onpolicy.GenerationMix(temperatures=r.temperatures.temperatures,
                               max_new_tokens=max_new, max_context=max_context,
                               batch_size=r.batch.batch_size, seed=r.seed.seed)
  cfg = features.FeatureStoreConfig(hidden_layers=layers, top_k=st.top_k,
                                    seqs_per_shard=st.seqs_per_shard,
                                    max_len=max_context + max_new)
  convs = sharegpt.iter_conversations(split="train", heldout_fraction=st.heldout_fraction)
  prompts = onpolicy.user_turn_prompts(convs, lm.encode_chat, max_context)
  source = (f"sharegpt train split (heldout_fraction={st.heldout_fraction}), every user turn "
            f"with the conversation so far, answered by the target")
  m = onpolicy.build_onpolicy_store(out_dir, lm.model, lm.params, prompts, config=cfg, mix=mix,
                                    target_sha256=lm.sha256, target_name=lm.name,
                                    eos_token_id=lm.config.eos_token_id,
                                    max_loss_tokens=st.max_tokens, source=source,
                                    transcripts_dir=transcripts_dir)
  rate = m["num_loss_tokens"] / max(m.get("seconds", 0.0), 1e-9)
  print(f"{out_dir}: {m['num_loss_tokens']} generated tokens ({m['num_tokens']} stored) in "
        f"{m['num_sequences']} turns, {len(m['shards'])} shards ({rate:.0f} generated tokens/s "
        f"over all sessions)")


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(main, define_flags=define_flags)
