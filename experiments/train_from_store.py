r"""Train an EAGLE-3 head, an EAGLE-1 head or a distilled draft LM from a feature
store (``experiments/extract_features.py``) instead of running the target per
batch; export it.

  python -m experiments.train_from_store --config=experiments/configs/from_store.py:eagle3
  python -m experiments.train_from_store --config=experiments/configs/from_store.py:eagle1
  python -m experiments.train_from_store --config=experiments/configs/from_store.py:draft \
      [--config.train.num_steps=N] [--config.train.time_budget_s=S] [--config.workdir=DIR]
  # export the latest checkpoint of a run (e.g. a copied snapshot) without training:
  python -m experiments.train_from_store --config=...:eagle3 --config.workdir=DIR \
      --config.train.export_only=True

The target is loaded for its identity (file sha256, checked against the
store's), its embedding / LM head (heads) or its weights (the draft LM's init)
and its tokenizer (draft export). Rerunning the same command resumes exactly
from the latest checkpoint, on the same shards of the store.

Writes under the workdir: ``checkpoints/`` (orbax), ``training.json`` (store,
target sha256, shards, tokens seen, steps, losses, evals, draft-vocabulary
coverage), ``draft_vocab.npy`` (EAGLE-3 draft ids, reused on resume) and the
export: ``head/`` (published EAGLE layout, ``target_sha256`` in config.json) or
``hf/`` (HF Llama + tokenizer.json, for transformers assisted generation) and, when
the draft shares the target's embedding (the default), ``asset/`` -- the form
shipped in ``specjax/models/assets/<target>/draft`` (no embedding).
"""

from __future__ import annotations

import os

from absl import logging



def _optim(c):
  from specjax.training import optim
  return optim.OptimConfig(learning_rate=c.optim.learning_rate,
                           warmup_steps=min(c.optim.warmup_steps, c.train.num_steps - 1),
                           total_steps=c.train.num_steps, min_lr_ratio=c.optim.min_lr_ratio,
                           weight_decay=c.optim.weight_decay, b1=c.optim.b1, b2=c.optim.b2,
                           grad_clip=c.optim.grad_clip)


def open_store(c, lm):
  """The feature store of ``lm`` (refused when it holds another target's features)."""
  from specjax.models import registry
  from specjax.training import features
  path = c.store or os.path.join(registry.cache_root(), "features",
                                 f"{lm.name}-{lm.sha256[:12]}")
  return features.FeatureStore(path, expect_sha256=lm.sha256)


def batchers(c, store, feature_layers, workdir):
  """Train / held-out StoreBatchers; a resumed run reads its recorded shard count."""
  from specjax.training import loop, store_batching
  num_shards = c.data.num_shards
  prev = loop.read_training_json(workdir)
  if prev is not None and not num_shards:
    num_shards = prev["data"]["num_shards"]
  cfg = store_batching.StoreBatchConfig(
      window=c.data.window, batch_size=c.data.batch_size, feature_layers=tuple(feature_layers),
      top_k=c.data.top_k, eval_permille=c.data.eval_permille, num_shards=num_shards)
  return (store_batching.StoreBatcher(store, cfg, "train"),
          store_batching.StoreBatcher(store, cfg, "heldout") if c.data.eval_permille else None)


def eagle_setup(c, lm, store, workdir):
  """``(loss, frozen, init_params, train, heldout, record, export)`` for a head."""
  import numpy as np

  from specjax.models import eagle, eagle_io
  from specjax.models.transformer import Model
  from specjax.training import draft_vocab, store_losses
  from specjax.training import eagle as train_eagle
  kw = {"target_layers": tuple(c.head.target_layers)} if c.head.target_layers else {}
  hcfg = eagle.EagleConfig.for_target(
      lm.config, c.kind, intermediate_size=c.head.intermediate_size or None,
      draft_vocab_size=(c.head.draft_vocab_size or None) if c.kind == "eagle3" else None, **kw)
  head = eagle.EagleHead(hcfg)
  train, heldout = batchers(c, store, hcfg.target_layers, workdir)
  record = {"kind": c.kind, "head_config": eagle_io.config_to_json(hcfg),
            "head_params": hcfg.num_params()}
  draft_ids = d2t = t2d = None
  if c.kind == "eagle3":
    vocab_file = os.path.join(workdir, "draft_vocab.npy")
    counts = draft_vocab.argmax_counts(train, hcfg.vocab_size)
    record["draft_vocab_coverage"] = draft_vocab.coverage(
        counts, tuple(c.head.coverage_sizes) + (hcfg.draft_vocab_size,))
    if hcfg.reduced_vocab:
      if os.path.isfile(vocab_file):
        draft_ids = np.load(vocab_file, allow_pickle=False)
      else:
        eos = lm.config.eos_token_id
        always = () if eos is None else (eos if isinstance(eos, tuple) else (eos,))
        draft_ids = draft_vocab.draft_vocab(counts, hcfg.draft_vocab_size, always)
        os.makedirs(workdir, exist_ok=True)
        np.save(vocab_file, draft_ids, allow_pickle=False)
      d2t, t2d = eagle.vocab_maps(draft_ids, hcfg.vocab_size)
    logging.info("draft vocabulary coverage of the target argmax: %s",
                 record["draft_vocab_coverage"])
  tcfg = train_eagle.EagleTrainConfig(
      num_steps=c.train.num_steps, reg_weight=c.train.reg_weight, ce_weight=c.train.ce_weight,
      feature_noise=c.train.feature_noise, ttt_steps=c.train.ttt_steps, decay=c.train.decay)
  target = Model(lm.config.replace(hidden_layers=()))
  loss = store_losses.EagleStoreLoss(
      head, target, tcfg, None if draft_ids is None else tuple(int(i) for i in draft_ids))
  frozen = store_losses.frozen_target_params(target, lm.params)
  export_dir = c.export.dir or os.path.join(workdir, "head")

  def export(params):
    eagle_io.save_eagle(export_dir, hcfg, params, d2t, t2d, dtype=c.export.dtype,
                     extra_config={"target_sha256": lm.sha256, "target_name": lm.name,
                                   "feature_store": store.dir})
    eagle_io.load_eagle(export_dir, lm.config, expect_target_sha256=lm.sha256)  # round trip
    return export_dir

  return loss, frozen, head.init_params, train, heldout, record, export


def draft_setup(c, lm, store, workdir):
  """``(loss, frozen, init_params, train, heldout, record, export)`` for the draft LM.

  With ``draft.train_embedding`` False the embedding stays the target's (``frozen``)
  and the export is the shipping form (``asset/``: layers and norm only,
  :mod:`specjax.models.drafter_assets`) plus a complete HF directory (``hf/``)."""
  from specjax.models import drafter_assets, hf
  from specjax.training import distill
  from specjax.training import lm as lm_train
  dcfg = distill.draft_config(lm.config, c.draft.num_layers)
  layers = tuple(c.draft.init_layers) or distill.spread_layers(lm.config.num_hidden_layers,
                                                               c.draft.num_layers)
  model = lm_train.training_model(dcfg, c.draft.precision)
  train, heldout = batchers(c, store, (), workdir)
  target_params = lm.params
  full_init = lambda key: distill.init_from_target(dcfg, lm.model, target_params, layers,
                                                   None if c.draft.copy_layers else key)
  shared = {} if c.draft.train_embedding else distill.split_shared(full_init(None))[1]
  init = lambda key: distill.split_shared(full_init(key))[0] if shared else full_init(key)
  record = {"kind": "draft", "draft_config": hf.config_to_hf(dcfg),
            "draft_params": dcfg.num_params(), "train_embedding": bool(c.draft.train_embedding),
            "init_layers": list(layers) if c.draft.copy_layers else "random"}
  export_dir = c.export.dir or os.path.join(workdir, "hf")

  def export(params):
    full = {**shared, **params}
    distill.export_draft(export_dir, dcfg, full, lm.tokenizer, lm.sha256, c.export.dtype)
    if shared:
      names = ["model.embed_tokens.weight"]
      asset = os.path.join(os.path.dirname(export_dir.rstrip("/")), "asset")
      drafter_assets.save_draft(asset, dcfg, full, target_sha256=lm.sha256,
                                target_name=lm.name, shared=tuple(names), dtype=c.export.dtype)
      drafter_assets.load_draft(asset, lm.model, lm.params, target_sha256=lm.sha256)
    return export_dir

  return distill.DistillLoss(model), shared, init, train, heldout, record, export


def run(c) -> dict:
  from specjax.models import registry
  from specjax.training import store_trainer
  lm = registry.load_model(c.target)
  store = open_store(c, lm)
  workdir = c.workdir or f"/tmp/specjax_runs/{c.name}"
  setup = draft_setup if c.kind == "draft" else eagle_setup
  loss, frozen, init, train, heldout, record, export = setup(c, lm, store, workdir)
  record.update(target_name=lm.name, target_sha256=lm.sha256, config=c.to_dict())
  scfg = store_trainer.StoreTrainConfig(
      num_steps=c.train.num_steps, init_seed=c.train.init_seed, data_seed=c.data.seed,
      eval_every=c.train.eval_every, eval_batches=c.train.eval_batches,
      checkpoint_every=c.train.checkpoint_every, log_every=c.train.log_every)
  trainer = store_trainer.StoreTrainer(loss, frozen, init, _optim(c), scfg, train, heldout,
                                       workdir, record=record, progress=c.train.progress)
  logging.info("%s from %s: %d train windows (%d shards), %d held-out", c.kind, store.dir,
               train.num_windows, train.num_shards, heldout.num_windows if heldout else 0)
  if c.train.export_only:  # export (and evaluate) the latest checkpoint, no training
    trainer.init_or_restore()
    if trainer.resumed_from is None:
      raise FileNotFoundError(f"train.export_only: no checkpoint in {workdir}/checkpoints")
    trainer.train(stop_after=trainer.resumed_from)
  else:
    trainer.train(time_budget_s=c.train.time_budget_s or None)
  trainer.record["export_dir"] = export(trainer.state.params)
  trainer.record["final_eval"] = trainer.evaluate()
  trainer.write_training_json()
  trainer.close()
  out = trainer.summary()
  logging.info("done: step %d, %.3f s/step, final eval %s, exported to %s", out["steps"],
               out["seconds_per_step"], out["final_eval"], out["export_dir"])
  return out


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_config_binary(run, "Feature-store training config file.")
