r"""Train an EAGLE-3 head, an EAGLE-1 head or a distilled draft LM from a feature
store (``experiments/extract_features.py``) instead of running the target per
batch; export it.

  python -m experiments.train_from_store --config=experiments/configs/from_store.py:eagle3
  python -m experiments.train_from_store --config=experiments/configs/from_store.py:eagle1
  python -m experiments.train_from_store --config=experiments/configs/from_store.py:draft \
      [--config.train.num_steps=N] [--config.train.time_budget_s=S] [--config.workdir=DIR]
  # a mixture of stores, each part cut to half the target-token budget:
  python -m experiments.train_from_store --config=...:eagle3 --config.store=DIR_A,DIR_B \
      --config.data.max_target_tokens=96000 --config.workdir=DIR
  # continue training an exported head (same config and draft vocabulary) on new data:
  python -m experiments.train_from_store --config=...:eagle3 --config.store=DIR \
      --config.head.init_from=specjax/models/assets/smollm2-135m-instruct/eagle3
  # ... or the shipped draft LM (same number of layers):
  python -m experiments.train_from_store --config=...:draft --config.store=DIR \
      --config.draft.init_from=specjax/models/assets/smollm2-135m-instruct/draft
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

import dataclasses
import os
from typing import Any, Callable, Optional

from absl import logging



def _optim(c):
  from specjax.training import optim
  return optim.OptimConfig(learning_rate=c.optim.learning_rate,
                           warmup_steps=min(c.optim.warmup_steps, c.train.num_steps - 1),
                           total_steps=c.train.num_steps, min_lr_ratio=c.optim.min_lr_ratio,
                           weight_decay=c.optim.weight_decay, b1=c.optim.b1, b2=c.optim.b2,
                           grad_clip=c.optim.grad_clip)


def store_paths(c, lm) -> list:
  """The feature stores a run trains on: ``c.store`` -- one directory, or several
  separated by commas (a mixture, each part given ``max_target_tokens / parts``)
  -- or, when empty, ``<cache>/features/<target>-<sha12>`` (the ShareGPT store)."""
  from specjax.models import registry
  paths = [p.strip() for p in c.store.split(",") if p.strip()]
  return paths or [os.path.join(registry.cache_root(), "features", f"{lm.name}-{lm.sha256[:12]}")]


def open_stores(c, lm) -> list:
  """The feature stores of ``lm`` (refused when one holds another target's features)."""
  from specjax.training import features
  return [features.FeatureStore(p, expect_sha256=lm.sha256) for p in store_paths(c, lm)]


def batchers(c, stores, feature_layers, workdir):
  """Train / held-out batchers (:class:`MixedBatcher` over several stores); a resumed
  run reads its recorded shard counts."""
  from specjax.training import loop, store_batching
  prev = loop.read_training_json(workdir)
  counts = [c.data.num_shards] * len(stores)
  if prev is not None and not c.data.num_shards:
    rec = prev["data"]["num_shards"]
    counts = list(rec) if isinstance(rec, list) else [rec]
    if len(counts) != len(stores):
      raise ValueError(f"workdir {workdir} trained on {len(counts)} stores; c.store names "
                       f"{len(stores)}. Use another workdir.")
  budget = c.data.max_target_tokens // len(stores)

  def make(store, n, split):
    cfg = store_batching.StoreBatchConfig(
        window=c.data.window, batch_size=c.data.batch_size, feature_layers=tuple(feature_layers),
        top_k=c.data.top_k, eval_permille=c.data.eval_permille, num_shards=n,
        max_target_tokens=budget)
    return store_batching.StoreBatcher(store, cfg, split)

  def split(name):
    parts = [make(st, n, name) for st, n in zip(stores, counts)]
    return parts[0] if len(parts) == 1 else store_batching.MixedBatcher(parts)

  return split("train"), split("heldout") if c.data.eval_permille else None


def _check_same_config(flag: str, path: str, got: dict, want: dict, ignore=()) -> None:
  """Refuse a drafter to continue from (``flag`` = ``path``) whose config ``got``
  differs from this run's ``want`` in any key but ``ignore``."""
  diff = sorted(k for k in set(got) | set(want)
                if k not in ignore and got.get(k) != want.get(k))
  if diff:
    raise ValueError(f"{flag}={path!r}: its config differs from this run's in "
                     f"{diff} ({[got.get(k) for k in diff]} vs {[want.get(k) for k in diff]})")


def initial_head(path: str, lm, hcfg):
  """``(params, draft_ids)`` of the exported head at ``path`` to continue training
  from (``c.head.init_from``): it must be a head for this target with this run's
  configuration; its draft vocabulary (sorted target ids, None for a full one) is
  kept, so the continued head drafts over the same ids."""
  import numpy as np

  from specjax.models import eagle_io
  head, params, d2t = eagle_io.load_eagle(path, lm.config, dtype="float32",
                                          expect_target_sha256=lm.sha256)
  _check_same_config("head.init_from", path, eagle_io.config_to_json(head.config),
                     eagle_io.config_to_json(hcfg))
  ids = None if d2t is None else np.asarray(d2t, np.int64) + np.arange(len(d2t))
  return params, ids


def eagle_setup(c, lm, stores, workdir):
  """``(loss, frozen, init_params, train, heldout, record, export)`` for a head
  (initialised at random, or from ``c.head.init_from``: an exported head)."""
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
  train, heldout = batchers(c, stores, hcfg.target_layers, workdir)
  record = {"kind": c.kind, "head_config": eagle_io.config_to_json(hcfg),
            "head_params": hcfg.num_params(), "init_from": c.head.init_from or None}
  start = initial_head(c.head.init_from, lm, hcfg) if c.head.init_from else None
  draft_ids = d2t = t2d = None
  if c.kind == "eagle3":
    vocab_file = os.path.join(workdir, "draft_vocab.npy")
    counts = draft_vocab.argmax_counts(train, hcfg.vocab_size)
    record["draft_vocab_coverage"] = draft_vocab.coverage(
        counts, tuple(c.head.coverage_sizes) + (hcfg.draft_vocab_size,))
    if hcfg.reduced_vocab:
      if os.path.isfile(vocab_file):
        draft_ids = np.load(vocab_file, allow_pickle=False)
      elif start is not None:
        draft_ids = start[1]
        os.makedirs(workdir, exist_ok=True)
        np.save(vocab_file, draft_ids, allow_pickle=False)
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
                                   "feature_store": ",".join(st.dir for st in stores)})
    eagle_io.load_eagle(export_dir, lm.config, expect_target_sha256=lm.sha256)  # round trip
    return export_dir

  init = head.init_params if start is None else (lambda key: start[0])
  return loss, frozen, init, train, heldout, record, export


def initial_draft(path: str, lm, dcfg) -> dict:
  """Float32 params of the draft LM at ``path`` to continue training from
  (``c.draft.init_from``): a draft in the shipped form (``asset/`` of a run, or
  ``specjax/models/assets/<target>/draft``: the target's embedding not stored,
  :func:`specjax.models.drafter_assets.load_draft`) trained for this target, with
  this run's configuration (``dcfg``: layers, widths)."""
  from specjax.models import drafter_assets, hf
  if drafter_assets.SHARED_KEY not in drafter_assets.read_config(path):
    raise ValueError(f"draft.init_from={path!r} is not a draft LM in the shipped form (its "
                     f"config.json has no {drafter_assets.SHARED_KEY!r}); pass the asset/ "
                     "directory of a draft run or a shipped draft")
  model, params = drafter_assets.load_draft(path, lm.model, lm.params, target_sha256=lm.sha256)
  _check_same_config("draft.init_from", path, hf.config_to_hf(model.config),
                     hf.config_to_hf(dcfg), ignore=("torch_dtype",))
  return params


def draft_setup(c, lm, stores, workdir):
  """``(loss, frozen, init_params, train, heldout, record, export)`` for the draft LM
  (initialised from target layers, or from ``c.draft.init_from``: a draft LM).

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
  train, heldout = batchers(c, stores, (), workdir)
  target_params = lm.params
  start = initial_draft(c.draft.init_from, lm, dcfg) if c.draft.init_from else None
  full_init = lambda key: start if start is not None else distill.init_from_target(
      dcfg, lm.model, target_params, layers, None if c.draft.copy_layers else key)
  shared = {} if c.draft.train_embedding else distill.split_shared(full_init(None))[1]
  init = lambda key: distill.split_shared(full_init(key))[0] if shared else full_init(key)
  record = {"kind": "draft", "draft_config": hf.config_to_hf(dcfg),
            "draft_params": dcfg.num_params(), "train_embedding": bool(c.draft.train_embedding),
            "init_layers": (None if c.draft.init_from else
                            list(layers) if c.draft.copy_layers else "random"),
            "init_from": c.draft.init_from or None}
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


@dataclasses.dataclass
class Built:
  """A run's pieces: the trainer (not started), the export function and the
  target / stores / setup outputs a caller may reuse (e.g. to evaluate a trained
  head on another store's held-out windows)."""

  trainer: Any
  export: Callable
  lm: Any
  stores: list
  feature_layers: tuple
  workdir: str


def build(c, eval_batcher=None, progress: Optional[bool] = None) -> Built:
  """The trainer of config ``c`` (restores nothing yet); ``eval_batcher`` replaces
  the run's own held-out batcher."""
  from specjax.models import registry
  from specjax.training import store_trainer
  lm = registry.load_model(c.target)
  stores = open_stores(c, lm)
  workdir = c.workdir or f"/tmp/specjax_runs/{c.name}"
  setup = draft_setup if c.kind == "draft" else eagle_setup
  loss, frozen, init, train, heldout, record, export = setup(c, lm, stores, workdir)
  record.update(target_name=lm.name, target_sha256=lm.sha256, config=c.to_dict())
  scfg = store_trainer.StoreTrainConfig(
      num_steps=c.train.num_steps, init_seed=c.train.init_seed, data_seed=c.data.seed,
      eval_every=c.train.eval_every, eval_batches=c.train.eval_batches,
      checkpoint_every=c.train.checkpoint_every, log_every=c.train.log_every)
  trainer = store_trainer.StoreTrainer(
      loss, frozen, init, _optim(c), scfg, train, eval_batcher or heldout, workdir,
      record=record, progress=c.train.progress if progress is None else progress)
  logging.info("%s from %s: %d train windows (%s shards), %d held-out", c.kind,
               ",".join(st.dir for st in stores), train.num_windows, train.num_shards,
               heldout.num_windows if heldout else 0)
  layers = tuple(getattr(train.config, "feature_layers", ()))
  return Built(trainer, export, lm, stores, layers, workdir)


def run(c) -> dict:
  b = build(c)
  trainer = b.trainer
  if c.train.export_only:  # export (and evaluate) the latest checkpoint, no training
    trainer.init_or_restore()
    if trainer.resumed_from is None:
      raise FileNotFoundError(f"train.export_only: no checkpoint in {b.workdir}/checkpoints")
    trainer.train(stop_after=trainer.resumed_from)
  else:
    trainer.train(time_budget_s=c.train.time_budget_s or None)
  trainer.record["export_dir"] = b.export(trainer.state.params)
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
