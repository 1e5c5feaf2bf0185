"""An independent draft LM distilled from the target's stored next-token
distributions (vanilla speculative decoding's drafter, Leviathan et al. 2023 /
Chen et al. 2023; distillation as in DistillSpec, Zhou et al. 2024, Sec. 3 --
forward KL to the target on the training data).

Choice of architecture: the target's own shapes (hidden size, heads, MLP,
vocabulary, tied embeddings, RoPE) with few layers, initialised from the
target -- embedding and final norm copied, the ``num_layers`` decoder layers
copied from target layers spread evenly over its depth (first and last
included), or drawn at random (``copy_layers=False``). Keeping the hidden size
makes the embedding copy exact (no projection) and the draft a *truncated
target* from step 0 (a miscalibrated one: on SmolLM2 its first-step CE is ~68
nats, falling to ~12 within 5 warmup steps); the draft shares
the target's tokenizer, so transformers' assisted generation accepts it.

The embedding (input and tied output) stays the target's and is not trained
by default (:data:`SHARED_FROM_TARGET`, passed to the loss as ``frozen``): the
draft then ships as its decoder layers and final norm only (7 MB per SmolLM2
layer in bfloat16, against 57 MB for its own 49,152 x 576 embedding) and is
completed from the target's file at load time
(:mod:`specjax.models.drafter_assets`).

Loss at every target position s (``mask[s] = 1``: the next token is an
assistant token): ``CE(p_s, q_s) = -sum_{v in top-k} p_s(v) log q_s(v)``, with
``p_s`` the stored top-k renormalised -- forward KL to ``p_s`` up to its
constant entropy.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.config import ModelConfig
from specjax.models.transformer import Model
from specjax.training import target_dist


def draft_config(target_config: ModelConfig, num_layers: int = 2, **overrides) -> ModelConfig:
  """The draft LM's config: ``target_config`` with ``num_layers`` layers, tied
  embeddings, no feature outputs, float32 (``overrides``: any ModelConfig field)."""
  if not (isinstance(num_layers, int) and 1 <= num_layers <= target_config.num_hidden_layers):
    raise ValueError(f"num_layers={num_layers!r} must lie in [1, target layers="
                     f"{target_config.num_hidden_layers}]")
  fields = dict(num_hidden_layers=num_layers, hidden_layers=(), tie_word_embeddings=True,
                dtype="float32", param_dtype="float32")
  fields.update(overrides)
  return target_config.replace(**fields)


def spread_layers(num_target_layers: int, num_layers: int) -> tuple:
  """``num_layers`` target layer indices spread evenly over ``[0, L-1]`` (both ends)."""
  return tuple(int(i) for i in np.round(np.linspace(0, num_target_layers - 1, num_layers)))


def init_from_target(config: ModelConfig, target: Model, target_params,
                     layers: Optional[tuple] = None, key: Optional[jax.Array] = None):
  """Draft params copied from the target (module docstring): embedding, final norm
  and the decoder layers ``layers`` (default :func:`spread_layers`), float32.
  With ``key``, the decoder layers are instead drawn at random (``Model.init_params``)
  and only the embedding and final norm are copied."""
  tc = target.config
  if config.hidden_size != tc.hidden_size or config.vocab_size != tc.vocab_size:
    raise ValueError(f"init_from_target needs the target's hidden_size/vocab_size "
                     f"({tc.hidden_size}/{tc.vocab_size}); the draft has "
                     f"{config.hidden_size}/{config.vocab_size}")
  layers = spread_layers(tc.num_hidden_layers, config.num_hidden_layers) if layers is None \
      else tuple(layers)
  if len(layers) != config.num_hidden_layers or not all(
      0 <= l < tc.num_hidden_layers for l in layers):
    raise ValueError(f"layers={layers} must be {config.num_hidden_layers} indices in "
                     f"[0, {tc.num_hidden_layers})")
  shapes = jax.eval_shape(Model(config).init_params, jax.random.key(0))
  idx = np.asarray(layers)
  if key is None:
    stack = jax.tree.map(lambda x: x[idx], target_params["layers"])
  else:
    stack = Model(config).init_params(key)["layers"]
  params = {"embed_tokens": target_params["embed_tokens"], "norm": target_params["norm"],
            "layers": stack}
  if jax.tree.structure(params) != jax.tree.structure(shapes):
    raise ValueError("draft and target params differ in structure: "
                     f"{jax.tree.structure(shapes)} vs {jax.tree.structure(params)}")
  return jax.tree.map(lambda x, s: jnp.asarray(x, jnp.float32).reshape(s.shape), params, shapes)


# Draft params taken from the target, not trained (the embedding, tied to the LM head).
SHARED_FROM_TARGET = ("embed_tokens",)


def split_shared(params) -> tuple[dict, dict]:
  """``(trainable, shared)``: the :data:`SHARED_FROM_TARGET` entries go to ``shared``."""
  trainable = {k: v for k, v in params.items() if k not in SHARED_FROM_TARGET}
  shared = {k: v for k, v in params.items() if k in SHARED_FROM_TARGET}
  return trainable, shared


def _wmean(x, w):
  return jnp.sum(x * w) / jnp.maximum(jnp.sum(w), 1.0)


@dataclasses.dataclass(frozen=True)
class DistillLoss:
  """``loss(params, frozen, batch, key) -> (loss, metrics)`` of the draft LM
  ``model`` on a store batch; the model's params are ``frozen | params``
  (``frozen``: the target's shared embedding, or ``{}`` when all are trained)."""

  model: Model

  def __call__(self, params, frozen, batch, key=None):
    params = {**frozen, **params}
    tokens = jnp.asarray(batch["tokens"], jnp.int32)  # [B, T]
    mask = jnp.asarray(batch["mask"], jnp.float32)  # [B, T]
    b, t = tokens.shape
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
    logits = self.model.apply(params, tokens, pos, self.model.init_cache(b, t)).logits
    logq = jax.nn.log_softmax(logits.astype(jnp.float32), -1)  # [B, T, V]
    dist = target_dist.from_topk(batch["topk_ids"], batch["topk_logp"])
    ce = _wmean(target_dist.cross_entropy(dist, logq), mask)
    acc = _wmean((jnp.argmax(logq, -1) == target_dist.top1(dist)).astype(jnp.float32), mask)
    nxt = jnp.concatenate([tokens[:, 1:], jnp.zeros((b, 1), jnp.int32)], 1)
    nll = _wmean(-jnp.take_along_axis(logq, nxt[..., None], -1)[..., 0], mask)
    return ce, {"loss": ce, "acc0": acc, "nll": nll}


def export_draft(path: str, config: ModelConfig, params, tokenizer, target_sha256: str,
                 dtype: str = "bfloat16") -> None:
  """HF directory (config.json, model.safetensors, tokenizer.json) loadable by
  transformers as an assistant model; config.json records ``specjax_target_sha256``."""
  from specjax.models import hf
  cfg = config.replace(dtype="float32", param_dtype=dtype)
  hf.save_pretrained(path, cfg, params, tokenizer=tokenizer, dtype=dtype)
  cfg_path = os.path.join(path, hf.CONFIG_FILE)
  with open(cfg_path) as f:
    d = json.load(f)
  d["specjax_target_sha256"] = target_sha256
  with open(cfg_path, "w") as f:
    json.dump(d, f, indent=2)
