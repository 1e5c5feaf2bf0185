"""Training EAGLE heads on a frozen target's features.

Each loss is defined once on the target's outputs (``*_loss_on_features``:
features, next-token distribution as a :class:`~specjax.training.target_dist.TargetDist`,
per-position weights). :class:`EagleTrainer` runs the frozen target inside the
jitted train step and calls them with the dense distribution and unit weights;
:mod:`specjax.training.store_losses` calls them with features and top-k read from
a feature store and the assistant-token mask. Then:

* EAGLE-1 (Li et al. 2024, Sec. 4): entry t reads (embed(x_{t+1}), f_t) and
  predicts f_{t+1}.  Loss = ``reg_weight`` * smooth-L1(out_t, f_{t+1}) +
  ``ce_weight`` * CE(p_{t+1}, softmax(lm_head(out_t))) where p is the target's
  next-token distribution (the published weights are 1.0 and 0.1).
  Optional uniform feature noise (the paper's data augmentation).
* EAGLE-3 (Li et al. 2025, Sec. 3 "training-time test"): step 0 reads the fused
  target features; step j >= 1 reads the head's own step j-1 output at the same
  entry together with the embedding of the true token j positions further on,
  at RoPE position t + j.  An entry at step j attends to the step-0 entries
  0..t (the committed context) and to its own entries of steps 1..j (its
  ancestors at test time).  Loss = sum_j ``decay**j`` * CE(p_{t+1+j} restricted
  to the draft vocabulary, draft distribution), positions whose target argmax
  lies outside the draft vocabulary masked (as the published recipe).

:class:`EagleTrainer` runs on the shared loop (:mod:`specjax.training.loop`):
optax AdamW (:mod:`optim`), orbax checkpoints holding the head state, the data
state and metrics, and exact resume (batches are a pure function of the data
state; the target is frozen).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.data.batching import Batcher
from specjax.models.eagle import EagleHead, target_lm_head
from specjax.models.transformer import Model
from specjax.training import loop
from specjax.training import optim as optim_lib
from specjax.training import state as state_lib
from specjax.training import target_dist


@dataclasses.dataclass(frozen=True)
class EagleTrainConfig(loop.LoopConfig):
  """The loop's settings (:class:`~specjax.training.loop.LoopConfig`) plus

  Attributes:
    reg_weight, ce_weight: EAGLE-1 loss weights (feature regression, CE).
    feature_noise: EAGLE-1 uniform noise half-width added to input features (0 = off).
    ttt_steps: EAGLE-3 training-time-test steps; decay: their weight ratio (0.8).
  """

  num_steps: int = 500
  eval_every: int = 100
  eval_batches: int = 4
  reg_weight: float = 1.0
  ce_weight: float = 0.1
  feature_noise: float = 0.0
  ttt_steps: int = 7
  decay: float = 0.8

  def __post_init__(self):
    super().__post_init__()
    if self.ttt_steps < 1:
      raise ValueError(f"ttt_steps={self.ttt_steps} must be >= 1")
    if not 0 < self.decay <= 1:
      raise ValueError(f"decay={self.decay} must lie in (0, 1]")


def target_for_head(target: Model, head: EagleHead) -> Model:
  """The target configured to return the features the head reads."""
  return Model(target.config.replace(hidden_layers=tuple(head.config.target_layers)))


def target_features(target: Model, target_params, tokens):
  """Frozen target forward: ``(hidden [n_sel, B, T, H], logits [B, T, V])``, no gradient."""
  b, t = tokens.shape
  pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  out = target.apply(target_params, tokens, pos, target.init_cache(b, t))
  return jax.lax.stop_gradient(out.hidden_states), jax.lax.stop_gradient(out.logits)


def _smooth_l1(x, y):
  d = jnp.abs(x - y)
  return jnp.where(d < 1.0, 0.5 * d * d, d - 0.5)


def _wmean(x, w):
  """Mean of ``x`` weighted by ``w`` (same shape; 0 when all weights are 0)."""
  return jnp.sum(x * w) / jnp.maximum(jnp.sum(w), 1.0)


def eagle1_loss(head: EagleHead, target: Model, params, target_params, tokens, cfg,
                noise_key=None):
  """EAGLE-1 loss on ``tokens [B, T]``, target run in the step. Returns (loss, metrics)."""
  hid, logits = target_features(target, target_params, tokens)
  return eagle1_loss_on_features(head, target, params, target_params, tokens, hid,
                                 target_dist.dense(logits), jnp.ones(tokens.shape, jnp.float32),
                                 cfg, noise_key)


def eagle1_loss_on_features(head: EagleHead, target: Model, params, target_params, tokens, hid,
                            dist: target_dist.TargetDist, mask, cfg, noise_key=None):
  """EAGLE-1 loss (Li et al. 2024, Sec. 4.1-4.2) given the target's outputs.

  Entry t reads ``(embed(x_{t+1}), f_t)`` and its output is trained towards
  ``f_{t+1}`` (smooth-L1 regression) and, through the target's LM head, towards
  the target's distribution ``p_{t+1}`` (cross-entropy):
  ``L = reg_weight * L_reg + ce_weight * L_cls`` (the paper's 1.0 / 0.1).

  Args:
    tokens: [B, T] int32.
    hid: [n_sel, B, T, H] target features; ``hid[-1]`` is the final normed feature f.
    dist: the target's next-token distribution at every position ``[B, T, k]``.
    mask: [B, T] float weight of position s as a target (entry t = s - 1 is
      weighted by ``mask[t + 1]``): 1 everywhere on the on-the-fly path, the
      assistant-token mask on the feature-store path.
    target_params: needs only the target's embedding (and LM head if untied).
  Returns (loss, metrics).
  """
  f = hid[-1]  # [B, T, H] final normed feature
  b, t = tokens.shape
  feats = f[:, :-1]
  if cfg.feature_noise and noise_key is not None:
    feats = feats + jax.random.uniform(noise_key, feats.shape, feats.dtype, -cfg.feature_noise,
                                       cfg.feature_noise)
  emb = target.embed(target_params, tokens[:, 1:])
  pos = jnp.broadcast_to(jnp.arange(t - 1, dtype=jnp.int32), (b, t - 1))
  out = head.apply(params, emb, feats, pos, head.init_cache(b, t - 1)).hidden
  w = jnp.asarray(mask, jnp.float32)[:, 1:]  # [B, T-1]
  reg_i = jnp.mean(_smooth_l1(out.astype(jnp.float32), f[:, 1:].astype(jnp.float32)), -1)
  reg = _wmean(reg_i, w)
  z = head.draft_logits(params, out, target_lm_head(target.config, target_params))
  p = target_dist.window(dist, 1, t - 1)
  ce = _wmean(target_dist.cross_entropy(p, jax.nn.log_softmax(z, axis=-1)), w)
  acc = _wmean((jnp.argmax(z, -1) == target_dist.top1(p)).astype(jnp.float32), w)
  loss = cfg.reg_weight * reg + cfg.ce_weight * ce
  return loss, {"loss": loss, "reg": reg, "ce": ce, "acc0": acc}


def ttt_mask(t: int, step: int, slots: int):
  """Bool ``[t, slots]``: what entry i of training-time-test step ``step`` sees.

  Slots ``s*t + i`` hold step s's entry i: step 0 entries 0..i (causal
  context) and step 1..``step`` entries at the same index i (its ancestors).
  """
  s = np.arange(slots)
  blk, idx = s // t, s % t
  i = np.arange(t)[:, None]
  ctx = (blk[None] == 0) & (idx[None] <= i)
  own = (blk[None] >= 1) & (blk[None] <= step) & (idx[None] == i)
  return jnp.asarray(ctx | own)


def eagle3_loss(head: EagleHead, target: Model, params, target_params, tokens, cfg,
                draft_ids=None, noise_key=None):
  """EAGLE-3 training-time-test loss on ``tokens [B, T]``, target run in the step.

  draft_ids: [V_draft] int32 target ids of the draft vocabulary (None = all).
  """
  hid, logits = target_features(target, target_params, tokens)
  return eagle3_loss_on_features(head, target, params, target_params, tokens, hid,
                                 target_dist.dense(logits), jnp.ones(tokens.shape, jnp.float32),
                                 cfg, draft_ids, noise_key)


def eagle3_loss_on_features(head: EagleHead, target: Model, params, target_params, tokens, hid,
                            dist: target_dist.TargetDist, mask, cfg, draft_ids=None,
                            noise_key=None):
  """EAGLE-3 training-time-test loss (Li et al. 2025, Sec. 3.2-3.3) given the
  target's outputs. ``L = sum_j decay**j * CE_j`` over ``cfg.ttt_steps`` unrolled
  draft steps; step j's entry i is trained towards ``p_{i+1+j}`` restricted to
  the draft vocabulary, weighted by ``mask[i+1+j]`` and masked where the
  target's argmax lies outside the draft vocabulary.

  Args:
    tokens: [B, T] int32; hid: [n_sel, B, T, Ht] the fused low/mid/high features.
    dist: target next-token distribution ``[B, T, k]`` (dense or stored top-k).
    mask: [B, T] float weight of position s as a target (see eagle1_loss_on_features).
    draft_ids: [V_draft] int32 sorted target ids of the draft vocabulary (None = all).
  Returns (loss, metrics with ce{j} / acc{j} per step).
  """
  b, t = tokens.shape
  n = t - 1  # entries per step
  steps = min(cfg.ttt_steps, n)
  g = head.project(params, hid[:, :, :-1])  # [B, n, H]
  index = None
  if draft_ids is not None:
    index = target_dist.draft_index(draft_ids, head.config.vocab_size)
  w_all = jnp.concatenate([jnp.asarray(mask, jnp.float32), jnp.zeros((b, steps))], 1)
  cache = head.init_cache(b, n)  # grows by n slots per step: step j sees (j + 1) * n slots
  pad_tok = jnp.concatenate([tokens, jnp.zeros((b, steps), tokens.dtype)], 1)
  h = g
  total, metrics = 0.0, {}
  for j in range(steps):
    if j:
      grow = lambda x: jnp.concatenate([x, jnp.zeros(x.shape[:2] + (n,) + x.shape[3:], x.dtype)],
                                       2)
      cache = dataclasses.replace(cache, k=grow(cache.k), v=grow(cache.v))
    slots = (j + 1) * n
    toks = pad_tok[:, 1 + j:1 + j + n]  # entry i reads x_{i+1+j}
    pos = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32) + j, (b, n))
    vis = jnp.broadcast_to(ttt_mask(n, j, slots)[None], (b, n, slots))
    cur = dataclasses.replace(cache, lengths=jnp.full((b,), j * n, jnp.int32))
    out = head.apply(params, target.embed(target_params, toks), h, pos, cur, mask=vis)
    cache = out.cache
    h = out.hidden
    z = head.draft_logits(params, h)  # [B, n, Vd]
    p = target_dist.window(dist, 1 + j, n)  # p_{i+1+j}
    valid = (jnp.arange(n) + 1 + j <= t - 1)[None, :]  # target position exists
    if index is not None:
      p, in_draft = target_dist.to_draft_vocab(p, draft_ids, index)
      valid = valid & in_draft
    w = valid.astype(jnp.float32) * w_all[:, 1 + j:1 + j + n]
    ce = _wmean(target_dist.cross_entropy(p, jax.nn.log_softmax(z, -1)), w)
    acc = _wmean((jnp.argmax(z, -1) == target_dist.top1(p)).astype(jnp.float32), w)
    total = total + cfg.decay ** j * ce
    metrics[f"ce{j}"] = ce
    metrics[f"acc{j}"] = acc
  metrics["loss"] = total
  return total, metrics


def make_loss_fn(head: EagleHead, target: Model, cfg: EagleTrainConfig, draft_ids=None):
  """``loss_fn(params, target_params, tokens, key) -> (loss, metrics)``."""
  if head.config.kind == "eagle1":
    return lambda p, tp, tok, key: eagle1_loss(head, target, p, tp, tok, cfg, key)
  return lambda p, tp, tok, key: eagle3_loss(head, target, p, tp, tok, cfg, draft_ids, key)


@functools.lru_cache(maxsize=8)
def _compiled(head: EagleHead, target: Model, cfg: EagleTrainConfig,
              optim_cfg: optim_lib.OptimConfig, draft_ids: Optional[tuple]):
  """Jitted (train step, eval fn), shared by trainers of the same static setup
  (a resumed run in the same process does not recompile)."""
  ids = None if draft_ids is None else jnp.asarray(draft_ids, jnp.int32)
  loss_fn = make_loss_fn(head, target, cfg, ids)
  step = loop.make_train_step(loss_fn, optim_lib.make_optimizer(optim_cfg))
  return step, jax.jit(lambda p, tp, tok: loss_fn(p, tp, tok, None)[1])


class EagleTrainer(loop.TrainLoop):
  """One head run on :class:`~specjax.training.loop.TrainLoop`: ``trainer.train()``
  initialises or restores the latest checkpoint under ``workdir/checkpoints`` and
  trains to ``cfg.num_steps``. ``trainer.history`` holds per-step metrics dicts
  (restored ones included)."""

  def __init__(self, head: EagleHead, target: Model, target_params,
               optim_cfg: optim_lib.OptimConfig, cfg: EagleTrainConfig, train_batcher: Batcher,
               eval_batcher: Optional[Batcher] = None, workdir: Optional[str] = None,
               draft_ids=None, progress: bool = True):
    self.head, self.optim_cfg = head, optim_cfg
    self.target = target_for_head(target, head)
    self.target_params = target_params
    self.draft_ids = None if draft_ids is None else jnp.asarray(draft_ids, jnp.int32)
    self.eval_batcher = eval_batcher
    self._train_step, self._eval = _compiled(
        head, self.target, cfg, optim_cfg,
        None if draft_ids is None else tuple(int(i) for i in np.asarray(draft_ids)))
    eval_set = (eval_batcher.eval_batches(cfg.eval_batches or None)
                if eval_batcher is not None and cfg.eval_batches else [])
    super().__init__(cfg, optim_lib.make_optimizer(optim_cfg), train_batcher, eval_set, workdir,
                     progress, timing={"train_seconds": 0.0, "train_tokens": 0},
                     desc=f"train {head.config.kind}")

  def init_state(self) -> state_lib.TrainState:
    params = self.head.init_params(jax.random.key(self.cfg.init_seed))
    return state_lib.create(params, self.optimizer)

  def run_step(self, state, batch, key):
    return self._train_step(state, self.target_params, batch["tokens"], key)

  def eval_metrics(self, batch) -> dict:
    return self._eval(self.state.params, self.target_params, batch["tokens"])
