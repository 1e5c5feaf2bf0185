"""Drafters trained for a real target, shipped inside the package.

Layout: ``specjax/models/assets/<target name>/<kind>/`` with ``config.json``,
``model.safetensors`` (bfloat16) and ``training.json`` (data, tokens, steps,
losses, the target's file sha256), one directory per kind:

* ``eagle3`` / ``eagle1``: a head in the published EAGLE layout
  (:func:`specjax.models.eagle_io.save_eagle`; the embedding and, for EAGLE-1, the
  LM head are the target's, as in the papers);
* ``draft``: an independent draft LM (:mod:`specjax.training.distill`) stored
  *without* the tensors it shares with the target (its embedding, tied to its
  LM head: 57 MB for SmolLM2 in bfloat16). ``config.json`` is an HF Llama
  config plus ``target_sha256`` and ``shared_from_target`` (the HF tensor names
  to take from the target); :func:`load_draft` completes it from the target's
  params, :func:`export_draft_hf` writes a complete HF directory (for
  transformers' assisted generation).

Every loader checks the recorded ``target_sha256`` against the target's file
hash and refuses a drafter trained for another target with a clear error.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import eagle_io, hf
from specjax.models.config import ModelConfig, resolve_dtype
from specjax.models.safetensors_io import write_safetensors
from specjax.models.transformer import Model

KINDS = ("eagle3", "eagle1", "draft")
TRAINING_FILE = "training.json"
SHARED_KEY = "shared_from_target"


def assets_root() -> str:
  return os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")


def drafter_dir(target_name: str, kind: str) -> str:
  """``assets/<target_name>/<kind>`` (it may not exist: see :func:`available`)."""
  if kind not in KINDS:
    raise ValueError(f"drafter kind {kind!r}; choose one of {KINDS}")
  return os.path.join(assets_root(), target_name, kind)


def available(target_name: str) -> tuple:
  """The kinds shipped for ``target_name`` (those with a ``config.json``)."""
  return tuple(k for k in KINDS
               if os.path.isfile(os.path.join(drafter_dir(target_name, k), hf.CONFIG_FILE)))


def resolve(target_name: str, kind_or_path: str) -> str:
  """A shipped kind for ``target_name`` or a directory path -> the directory."""
  if kind_or_path in KINDS:
    path = drafter_dir(target_name, kind_or_path)
    if not os.path.isfile(os.path.join(path, hf.CONFIG_FILE)):
      raise FileNotFoundError(
          f"no {kind_or_path!r} drafter is shipped for target {target_name!r} (shipped: "
          f"{list(available(target_name)) or 'none'}); train one with "
          f"experiments/train_from_store.py or pass a directory")
    return path
  if not os.path.isdir(kind_or_path):
    raise FileNotFoundError(f"drafter {kind_or_path!r} is neither a kind {KINDS} nor a "
                            "directory")
  return kind_or_path


def read_config(path: str) -> dict:
  f = os.path.join(path, hf.CONFIG_FILE)
  if not os.path.isfile(f):
    raise FileNotFoundError(f"missing file: {f}")
  with open(f) as fh:
    return json.load(fh)


# --------------------------------------------------------------------------- draft LM


def save_draft(path: str, config: ModelConfig, params, *, target_sha256: str,
               target_name: str = "", shared: tuple = ("model.embed_tokens.weight",),
               dtype: str = "bfloat16", training: Optional[dict] = None) -> None:
  """Write a draft LM without the HF tensors ``shared`` with the target."""
  os.makedirs(path, exist_ok=True)
  dt = resolve_dtype(dtype)
  tensors = hf.tensors_from_params(config, params)
  unknown = [n for n in shared if n not in tensors]
  if unknown:
    raise ValueError(f"shared={unknown} are not tensors of this draft ({sorted(tensors)[:4]}...)")
  tensors = {k: v for k, v in tensors.items() if k not in shared}
  d = hf.config_to_hf(config)
  d.update(torch_dtype=jnp.dtype(dt).name, target_sha256=target_sha256,
           target_name=target_name, **{SHARED_KEY: list(shared)})
  with open(os.path.join(path, hf.CONFIG_FILE), "w") as f:
    json.dump(d, f, indent=2)
  write_safetensors(os.path.join(path, hf.WEIGHTS_FILE), tensors, dtype=dt)
  if training is not None:
    with open(os.path.join(path, TRAINING_FILE), "w") as f:
      json.dump(training, f, indent=1)


def load_draft(path: str, target: Model, target_params, *, target_sha256: Optional[str],
               dtype: str = "float32") -> tuple[Model, dict]:
  """``(Model, params)`` of a draft saved by :func:`save_draft`, its shared tensors
  taken from ``target_params``. Refuses a draft trained for another target
  (``target_sha256`` None skips that check) or one whose shapes do not fit."""
  d = read_config(path)
  eagle_io.check_target_sha256(d, target_sha256, path, what="draft LM")
  shared = list(d.get(SHARED_KEY, []))
  cfg = hf.config_from_hf(d, dtype=dtype, param_dtype=dtype,
                          tokenizer_fingerprint=target.config.tokenizer_fingerprint)
  if cfg.vocab_size != target.config.vocab_size or (
      shared and cfg.hidden_size != target.config.hidden_size):
    raise ValueError(f"draft {path} (vocab {cfg.vocab_size}, hidden {cfg.hidden_size}) cannot "
                     f"share tensors with this target (vocab {target.config.vocab_size}, "
                     f"hidden {target.config.hidden_size})")
  tensors = dict(hf._load_tensors(path))
  target_tensors = {"model.embed_tokens.weight": target_params["embed_tokens"]["embedding"]}
  if not target.config.tie_word_embeddings and "lm_head" in target_params:
    target_tensors["lm_head.weight"] = target_params["lm_head"]["kernel"].T
  for name in shared:
    if name in tensors:
      raise ValueError(f"draft {path} stores {name!r} although it lists it as shared")
    if name not in target_tensors:
      raise ValueError(f"draft {path} shares {name!r}, which the target does not have")
    tensors[name] = np.asarray(jax.device_get(target_tensors[name]), np.float32)
  return Model(cfg), hf.params_from_tensors(cfg, tensors, dtype)


def export_draft_hf(path: str, out_dir: str, target: Model, target_params, tokenizer, *,
                    target_sha256: Optional[str], dtype: str = "float32") -> str:
  """A complete HF directory of the draft at ``path`` (shared tensors filled in),
  with ``tokenizer.json``: what ``AutoModelForCausalLM.from_pretrained`` loads."""
  model, params = load_draft(path, target, target_params, target_sha256=target_sha256)
  hf.save_pretrained(out_dir, model.config, params, tokenizer=tokenizer, dtype=dtype)
  return out_dir


def load_head(path: str, target: Model, *, target_sha256: Optional[str],
              dtype: str = "float32"):
  """``(EagleHead, params, d2t)`` of a shipped or trained head, checked against the target."""
  return eagle_io.load_eagle(path, target.config, dtype=dtype, expect_target_sha256=target_sha256)
