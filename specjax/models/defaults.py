"""The embedded default model set: a target, an independent draft LM and a
companion LM (Llama architecture, one shared byte-level BPE tokenizer),
trained by us on the Python standard library -- see ``assets/README.md``.

They load through the same :func:`specjax.models.hf.load_pretrained` as any
Hugging Face checkpoint::

    model, params = load_default("target")
    tok = default_tokenizer()
"""

from __future__ import annotations

import os

from specjax.models import hf

DEFAULT_NAMES = ("target", "draft", "companion")


def assets_dir() -> str:
  """Directory holding the default models (``<name>/config.json`` etc.)."""
  return os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets")


def default_model_dir(name: str) -> str:
  """Checkpoint directory of one default model."""
  if name not in DEFAULT_NAMES:
    raise ValueError(f"unknown default model {name!r}; choose one of {DEFAULT_NAMES}")
  return os.path.join(assets_dir(), name)


def load_default(name: str, dtype: str = "float32", **config_overrides):
  """``(Model, params)`` of default model ``name`` ("target" | "draft" | "companion").

  ``dtype`` and ``config_overrides`` (e.g. ``hidden_layers=(4,)``) are passed to
  :func:`specjax.models.hf.load_pretrained`.
  """
  return hf.load_pretrained(default_model_dir(name), dtype=dtype, **config_overrides)


def default_tokenizer():
  """The ``tokenizers.Tokenizer`` shared by all default models (each directory holds
  an identical copy; the target's is read when present)."""
  for name in DEFAULT_NAMES:
    path = os.path.join(default_model_dir(name), hf.TOKENIZER_FILE)
    if os.path.isfile(path):
      return hf.load_tokenizer(path)
  raise FileNotFoundError(f"no default model tokenizer under {assets_dir()}")
