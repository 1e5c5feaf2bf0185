"""The shipped SmolLM2 drafters (the EAGLE-3 head and the draft LM): their size, their
training stages and their held-out agreement with the target's argmax, from
``specjax/models/assets/smollm2-135m-instruct/{eagle3,draft}/training.json``
(``benchmarks/RESULTS.md``)."""

from __future__ import annotations

import os

from experiments.results.markdown import table as _table
from experiments.results.records import load_json


def drafters_table() -> str:
  """The shipped SmolLM2 drafters, from their ``training.json``."""
  rows = []
  base = "specjax/models/assets/smollm2-135m-instruct"
  for kind, label in (("eagle3", "EAGLE-3 head"), ("draft", "draft LM")):
    t = load_json(f"{base}/{kind}/training.json")
    if kind == "eagle3":
      cfg = t["head_config"]
      params = f"{t['head_params'] / 1e6:.2f}M"
      extra = (f"draft vocabulary {cfg['draft_vocab_size']:,} "
               f"({100 * t['draft_vocab_coverage'][str(cfg['draft_vocab_size'])]:.1f}% argmax "
               f"coverage of the last stage's store), TTT {t['config']['train']['ttt_steps']}")
    else:
      cfg = t["draft_config"]
      emb = cfg["vocab_size"] * cfg["hidden_size"]
      params = f"{(t['draft_params'] - emb) / 1e6:.2f}M (+ the target's {emb / 1e6:.1f}M embedding)"
      first = [*t.get("lineage", []), t][0]  # the stage that initialised it
      extra = (f"{cfg['num_hidden_layers']} decoder layer, init from target layers "
               f"{first['init_layers']}")
    stages = [*t.get("lineage", []), t]  # oldest first (experiments/ship_drafter.py)
    rows.append([f"{label}: {extra}", params,
                 ", then ".join(f"{s['steps']:,} steps, {s['tokens_seen'] / 1e6:.2f}M window "
                                f"tokens of `{os.path.basename(s['data']['store'])}`"
                                for s in stages),
                 "; ".join(f"{s['final_eval']['eval_acc0']:.3f} (after stage {i + 1}, its "
                           f"store's held-out windows)" for i, s in enumerate(stages))
                 if len(stages) > 1 else
                 f"{t['final_eval']['eval_acc0']:.3f} (step {t['final_eval']['step']})"])
  return _table(["drafter", "params shipped", "training (stages)",
                 "held-out top-1 vs target argmax"], rows)
