r"""Train an EAGLE-1 or EAGLE-3 draft head on a frozen target; export it in the
published EAGLE safetensors layout and measure its acceptance.

  python -m experiments.train_eagle --config=experiments/configs/eagle1.py
  python -m experiments.train_eagle --config=experiments/configs/eagle3.py \
      [--config.target=/path/to/hf_target] [--config.export.dir=specjax/models/assets/eagle3]

Writes under the workdir: ``checkpoints/`` (orbax; rerunning the same command
resumes from the latest one), ``head/`` (config.json + model.safetensors, the
published names: fc.*, layers.0.* / midlayer.*, norm, lm_head, d2t/t2d) and
``metrics.json`` (config, loss history, held-out losses / top-1 agreement,
greedy speculative tau of the exported head, chain and EAGLE-2 tree).
"""

from __future__ import annotations

import json
import os
import sys
import time

from absl import logging



def load_target(c):
  """``(Model, params, checkpoint_dir)`` of the target named by ``c.target``."""
  from specjax.models import defaults, hf
  path = defaults.default_model_dir("target") if c.target == "default" else c.target
  model, params = hf.load_pretrained(path)
  return model, params, path


def head_config(c, target_config):
  from specjax.models.eagle import EagleConfig
  kw = {}
  if c.head.target_layers:
    kw["target_layers"] = tuple(c.head.target_layers)
  return EagleConfig.for_target(
      target_config, c.kind, intermediate_size=c.head.intermediate_size or None,
      draft_vocab_size=(c.head.draft_vocab_size or None) if c.kind == "eagle3" else None, **kw)


def prepare_data(c, target_dir: str):
  """``(tokenizer, train Batcher, held-out Batcher)`` over the LM corpus, encoded with
  the target's own ``tokenizer.json`` when its directory has one (else
  ``c.data.tokenizer_path``, trained on first use as in train_lm)."""
  from specjax.data import batching, corpus
  from specjax.data import tokenizer as tok_lib
  from specjax.models import hf
  cc = corpus.CorpusConfig(root=c.data.root, heldout_fraction=c.data.heldout_fraction,
                           split_seed=c.data.split_seed)
  tok_file = os.path.join(target_dir, "tokenizer.json")
  if os.path.isfile(tok_file):
    tok = hf.load_tokenizer(tok_file)
  else:
    tok = tok_lib.load_or_train(
        c.data.tokenizer_path, lambda: (t for _, t in corpus.read_documents(cc, "train")),
        vocab_size=c.data.vocab_size)
  cache = c.data.cache_dir or None
  train = batching.Batcher(batching.load_token_stream(cc, "train", tok, cache),
                           c.data.seq_len, c.data.batch_size)
  heldout = batching.Batcher(batching.load_token_stream(cc, "heldout", tok, cache),
                             c.data.seq_len, c.data.batch_size)
  return tok, train, heldout


def measure_acceptance(c, target, target_params, head, head_params, d2t, heldout, eos):
  """Greedy speculative decoding with the head on held-out prompts: tau per mode."""
  import numpy as np

  from specjax import verifiers
  from specjax.decoding.drafter_factory import DraftSources, make_drafter
  from specjax.distributions import SamplingConfig
  from specjax.decoding.speculative import speculative_generate
  greedy = SamplingConfig(temperature=0.0)
  stream = heldout.stream
  n, plen = c.eval.num_prompts, c.eval.prompt_len
  starts = np.linspace(0, len(stream) - plen - 1, n).astype(int)
  prompts = [stream[s:s + plen].tolist() for s in starts]
  sources = DraftSources.build(target, target_params, eagle=(head, head_params, d2t))
  drafter, params = make_drafter("eagle_chain", greedy, sources, num_draft=c.eval.num_draft)
  modes = {"chain": drafter}
  if c.eval.tree_depth:
    modes["tree"] = make_drafter("eagle_tree", greedy, sources, depth=c.eval.tree_depth,
                                 top_k=c.eval.tree_top_k,
                                 total_tokens=c.eval.tree_total_tokens)[0]
  out = {}
  for name, drafter in modes.items():
    t0 = time.time()
    res = speculative_generate(target, target_params, drafter, params, verifiers.get("lossless"),
                               prompts, max_new_tokens=c.eval.max_new_tokens, sampling=greedy,
                               eos_token_id=None)
    s = res.stats.summary()
    out[name] = {"tau": s["tau"], "target_calls": s["target_calls"], "accepted": s["accepted"],
                 "accept_rate_per_position": s["accept_rate_per_position"],
                 "seconds_incl_compile": time.time() - t0}
    if name == "chain":
      out[name]["num_draft"] = drafter.num_draft
    else:
      out[name].update(depth=drafter.depth, top_k=drafter.top_k,
                       total_tokens=drafter.total_tokens)
    logging.info("acceptance %s: tau %.3f", name, s["tau"])
  if c.eval.compare_draft_lm:  # the independent default draft LM on the same prompts
    from specjax.models import defaults
    if os.path.isdir(defaults.default_model_dir("draft")):
      dm, dp = defaults.load_default("draft")
      if dm.config.vocab_size == target.config.vocab_size:
        drafter, _ = make_drafter("chain", greedy, DraftSources(target.config.vocab_size, dm, dp),
                                  num_draft=c.eval.num_draft)
        res = speculative_generate(target, target_params, drafter, dp,
                                   verifiers.get("lossless"), prompts,
                                   max_new_tokens=c.eval.max_new_tokens, sampling=greedy,
                                   eos_token_id=None)
        s = res.stats.summary()
        out["draft_lm_chain"] = {"tau": s["tau"], "num_draft": c.eval.num_draft,
                                 "accept_rate_per_position": s["accept_rate_per_position"]}
        logging.info("acceptance draft LM chain: tau %.3f", s["tau"])
  return out


def run(c) -> dict:
  import numpy as np

  from specjax.data import tokenizer as tok_lib
  from specjax.models import eagle, eagle_io
  from specjax.training import eagle as train_eagle
  from specjax.training import optim

  t0 = time.time()
  target, target_params, target_dir = load_target(c)
  tok, train, heldout = prepare_data(c, target_dir)
  if tok.get_vocab_size() > target.config.vocab_size:
    raise ValueError(f"tokenizer vocab {tok.get_vocab_size()} > target vocab "
                     f"{target.config.vocab_size}")
  eos = tok_lib.eos_id(tok)
  hcfg = head_config(c, target.config)
  head = eagle.EagleHead(hcfg)
  draft_ids = d2t = t2d = None
  if hcfg.reduced_vocab:
    draft_ids = eagle.frequent_vocab(train.stream, hcfg.vocab_size, hcfg.draft_vocab_size,
                                     always=(eos,))
    d2t, t2d = eagle.vocab_maps(draft_ids, hcfg.vocab_size)
    coverage = float(np.isin(train.stream, draft_ids).mean())
  else:
    coverage = 1.0
  ocfg = optim.OptimConfig(learning_rate=c.optim.learning_rate,
                           warmup_steps=c.optim.warmup_steps, total_steps=c.train.num_steps,
                           min_lr_ratio=c.optim.min_lr_ratio, weight_decay=c.optim.weight_decay,
                           b1=c.optim.b1, b2=c.optim.b2, grad_clip=c.optim.grad_clip)
  tcfg = train_eagle.EagleTrainConfig(
      num_steps=c.train.num_steps, init_seed=c.train.init_seed, data_seed=c.data.seed,
      reg_weight=c.train.reg_weight, ce_weight=c.train.ce_weight,
      feature_noise=c.train.feature_noise, ttt_steps=c.train.ttt_steps, decay=c.train.decay,
      eval_every=c.train.eval_every, eval_batches=c.train.eval_batches,
      checkpoint_every=c.train.checkpoint_every, log_every=c.train.log_every)
  workdir = c.workdir or f"/tmp/specjax_runs/{c.name}"
  trainer = train_eagle.EagleTrainer(head, target, target_params, ocfg, tcfg, train, heldout,
                                     workdir, draft_ids=draft_ids, progress=c.train.progress)
  logging.info("%s head: %.3fM params (target %s, layers %s, draft vocab %d covering %.1f%% of "
               "train tokens)", hcfg.kind, hcfg.num_params() / 1e6, target_dir,
               hcfg.target_layers, hcfg.draft_vocab_size, 100 * coverage)
  trainer.train(time_budget_s=c.train.time_budget_s or None)
  train_wall = time.time() - t0
  final_eval = trainer.evaluate()

  export_dir = c.export.dir or os.path.join(workdir, "head")
  eagle_io.save_eagle(export_dir, hcfg, trainer.state.params, d2t, t2d, dtype=c.export.dtype)
  head2, params2, d2t2 = eagle_io.load_eagle(export_dir, target.config)  # round trip
  acceptance = measure_acceptance(c, target, target_params, head2, params2, d2t2, heldout, eos)

  hist = trainer.history
  metrics = {
      "name": c.name, "kind": hcfg.kind, "command": " ".join(sys.argv),
      "config": c.to_dict(), "target": target_dir, "head_params": hcfg.num_params(),
      "target_layers": list(hcfg.target_layers), "draft_vocab_size": hcfg.draft_vocab_size,
      "draft_vocab_coverage": coverage, "steps": int(trainer.state.step),
      "resumed_from": trainer.resumed_from,
      "train_tokens": int(trainer.state.step) * train.batch_size * train.seq_len,
      "train_seconds_measured": trainer.timing["train_seconds"],
      "wall_seconds_this_process": train_wall,
      "first_train_metrics": hist[0] if hist else None,
      "final_train_metrics": ({k: float(np.mean([h[k] for h in hist[-20:]])) for k in hist[-1]}
                              if hist else None),
      "final_eval": final_eval, "evals": trainer.evals,
      "train_loss_history": [h["loss"] for h in hist],
      "acceptance_greedy": acceptance, "export_dir": export_dir,
      "export_bytes": os.path.getsize(os.path.join(export_dir, eagle_io.WEIGHTS_FILE)),
  }
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "metrics.json"), "w") as f:
    json.dump(metrics, f, indent=2)
  trainer.close()
  logging.info("done: %s", json.dumps({k: metrics[k] for k in (
      "steps", "final_eval", "acceptance_greedy", "export_bytes")}))
  return metrics


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_config_binary(run, "EAGLE training config file.")
