r"""Build (or extend) the target feature store over ShareGPT training conversations.

    python -m experiments.extract_features --max_tokens=1000000     # resumable
    python -m experiments.extract_features --max_tokens=2000000     # extends the same store

The ShareGPT ``train`` split (:mod:`specjax.data.sharegpt`, sha256 id split) in
file order, through the target's chat template and tokenizer with the assistant
loss mask (:mod:`specjax.data.chat_tokenize`), cut to ``--max_context`` tokens, runs
through the target; :mod:`specjax.training.features` stores the hidden states at
``--hidden_layers`` and the top-k next-token log-probs. Kill it at any time: a
rerun with the same flags continues after the last whole shard. The store lives
outside the repo (``--output_dir``; default ``~/.cache/specjax/features/<model>-<sha12>``);
this command rebuilds it from scratch when it is gone.
"""

from __future__ import annotations

import dataclasses
import os

from absl import app

from experiments.common import knobs, specs
from experiments.common.store_spec import StoreSpec

SPECS = knobs.Specs(
    specs.ModelSpec, specs.OutputDirSpec, StoreSpec, specs.ContextSpec,
    presets=dict(model="smollm2-135m-instruct",
                 output_dir="",  # '': ~/.cache/specjax/features/<model>-<sha12>
                 max_tokens=1_000_000,
                 max_context=1024))  # tokens per conversation (longer ones are cut)


@dataclasses.dataclass(frozen=True)
class Run:
  """This binary's specs, by name."""
  model: specs.ModelSpec
  output: specs.OutputDirSpec
  store: StoreSpec
  context: specs.ContextSpec


def define_flags():
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  return Run(*SPECS.build())


def main():
  r = build_run()
  from specjax.data import chat_tokenize, sharegpt
  from specjax.models import registry
  from specjax.training import features

  st, max_len = r.store, r.context.max_context
  lm = registry.load_model(r.model.model)
  try:
    layers = st.layers(lm.config.num_hidden_layers)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  lm = registry.load_model(r.model.model, hidden_layers=layers)
  out_dir = r.output.output_dir or os.path.join(registry.cache_root(), "features",
                                                f"{lm.name}-{lm.sha256[:12]}")
  cfg = features.FeatureStoreConfig(hidden_layers=layers, top_k=st.top_k,
                                    seqs_per_shard=st.seqs_per_shard, max_len=max_len)
  convs = sharegpt.iter_conversations(split="train", heldout_fraction=st.heldout_fraction)
  seqs = chat_tokenize.tokenize_conversations(convs, lm.tokenizer, lm.chat_template,
                                              max_len=max_len)
  # The store's header (checked on resume): keep its wording.
  source = (f"sharegpt train split (heldout_fraction={st.heldout_fraction}), chat template, "
            f"max_len={max_len}")
  m = features.build_feature_store(out_dir, lm.model, lm.params, seqs, config=cfg,
                                   target_sha256=lm.sha256, target_name=lm.name,
                                   max_tokens=st.max_tokens, source=source)
  rate = m["num_tokens"] / max(m.get("seconds", 0.0), 1e-9)
  print(f"{out_dir}: {m['num_tokens']} tokens in {m['num_sequences']} sequences, "
        f"{len(m['shards'])} shards ({rate:.0f} tokens/s over all sessions)")


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(main, define_flags=define_flags)
