"""One loader for the models an experiment runs: a target, its draft LM and its
EAGLE head, by name.

* ``"default"``: the small models trained on the Python standard library that
  ship in ``specjax/models/assets`` (fast; what the test suite uses);
* ``"tiny"`` / ``"stand_in"``: random models for smoke tests on the default
  tokenizer (tiny: target and a perturbed copy as the draft; stand_in: the real
  default draft and a random target of the default target's architecture, which
  validates a full-size run and fills the compile cache; its numbers mean nothing);
* a real model -- a name in :data:`specjax.models.registry.REAL_MODELS` (e.g.
  ``"smollm2-135m-instruct"``), a ``.gguf`` file or an HF directory -- with the
  drafters shipped for it (:mod:`specjax.models.drafter_assets`), or any drafter
  directories given instead.

    ms = load_model_set("smollm2-135m-instruct")         # target + shipped draft + EAGLE-3
    ms = load_model_set("default", eagle="eagle1")
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

from specjax.models import drafter_assets

RANDOM_SETS = ("tiny", "stand_in")


@dataclasses.dataclass
class ModelSet:
  """Attributes:
    name: the set's name ("default" or the target's registry name / path basename).
    target, target_params: the target Model and its params.
    tokenizer: ``tokenizers.Tokenizer`` of the target.
    draft, draft_params: the independent draft LM (None when not requested / absent).
    eagle: ``(EagleHead, head params, d2t)`` (None when not requested / absent).
    chat_template: the target's ChatTemplate (None for the default models).
    sha256: the target file's hash ("" for the default models).
    sources: where each model came from (for records).
  """

  name: str
  target: Any
  target_params: Any
  tokenizer: Any
  draft: Any = None
  draft_params: Any = None
  eagle: Optional[tuple] = None
  chat_template: Any = None
  sha256: str = ""
  sources: dict = dataclasses.field(default_factory=dict)

  @property
  def is_chat(self) -> bool:
    return self.chat_template is not None

  def encode_chat(self, messages) -> list[int]:
    if self.chat_template is None:
      raise ValueError(f"model set {self.name!r} has no chat template")
    text = self.chat_template.render(list(messages), add_generation_prompt=True)
    return self.tokenizer.encode(text, add_special_tokens=False).ids


def _default_set(draft: str, eagle: str, dtype: str) -> ModelSet:
  from specjax.models import defaults, hf
  from specjax.models.eagle_io import load_eagle
  t, tp = defaults.load_default("target", dtype=dtype)
  ms = ModelSet("default", t, tp, defaults.default_tokenizer(),
                sources={"target": defaults.default_model_dir("target")})
  if draft:
    path = defaults.default_model_dir("draft") if draft == "draft" else draft
    ms.draft, ms.draft_params = hf.load_pretrained(path, dtype=dtype)
    ms.sources["draft"] = path
  if eagle:
    path = os.path.join(defaults.assets_dir(), eagle) if eagle in ("eagle1", "eagle3") else eagle
    ms.eagle = tuple(load_eagle(path, t.config, dtype=dtype)[:3])
    ms.sources["eagle"] = path
  return ms


def perturbed(params, seed: int, noise: float):
  """``params`` + ``noise`` * N(0, 1) on every matrix (vectors kept): a cheap draft."""
  import jax
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  return jax.tree.unflatten(tree, [l + noise * jax.random.normal(k, l.shape) if l.ndim > 1
                                   else l for l, k in zip(leaves, keys)])


def _random_set(name: str, seed: int) -> ModelSet:
  """``"tiny"`` or ``"stand_in"`` (see the module docstring), no drafter heads."""
  import jax
  from specjax.models import defaults, hf
  from specjax.models.transformer import Model
  tok = defaults.default_tokenizer()
  if name == "tiny":
    from specjax.models.config import ModelConfig
    m = Model(ModelConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
                          num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                          head_dim=16, eos_token_id=0))
    tp = jax.tree.map(lambda x: x * 4.0 if x.ndim > 1 else x, m.init_params(jax.random.key(seed)))
    return ModelSet("tiny", m, tp, tok, m, perturbed(tp, seed + 1, 0.3))
  from experiments.configs.target import get_config as target_train_config
  d, dp = defaults.load_default("draft")
  cfg = json.loads(open(os.path.join(defaults.default_model_dir("draft"), hf.CONFIG_FILE)).read())
  m = target_train_config().model
  cfg.update({k: m[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "num_key_value_heads", "head_dim")})
  t = Model(hf.config_from_hf(cfg, dtype="float32", param_dtype="float32"))
  return ModelSet("stand_in", t, t.init_params(jax.random.key(seed)), tok, d, dp,
                  sources={"draft": defaults.default_model_dir("draft")})


def load_model_set(name: str = "smollm2-135m-instruct", *, draft: str = "draft",
                   eagle: str = "eagle3", dtype: str = "float32", seed: int = 0) -> ModelSet:
  """Load a target and its drafters.

  Args:
    name: "default", "tiny", "stand_in" or a real model (registry name, ``.gguf``
      file, HF directory).
    draft: "draft" (the shipped draft LM), a directory (a shipped-form draft or a
      complete HF checkpoint), or "" for none.
    eagle: "eagle3" / "eagle1" (shipped heads), a head directory, or "" for none.
    dtype: "float32" | "bfloat16" (float32 is the fast choice on CPUs).
    seed: init seed of the random "tiny" / "stand_in" models.

  Raises FileNotFoundError naming what is missing (and how to get it) and
  ValueError for a drafter trained for another target.
  """
  if name == "default":
    return _default_set(draft, eagle, dtype)
  if name in RANDOM_SETS:
    ms = _random_set(name, seed)
    if eagle:
      from specjax.models.eagle_io import load_eagle
      ms.eagle = tuple(load_eagle(eagle, ms.target.config, dtype=dtype)[:3])
      ms.sources["eagle"] = eagle
    return ms
  from specjax.models import hf, registry
  lm = registry.load_model(name, dtype=dtype)
  ms = ModelSet(lm.name, lm.model, lm.params, lm.tokenizer, chat_template=lm.chat_template,
                sha256=lm.sha256, sources={"target": lm.path})
  if draft:
    path = drafter_assets.resolve(lm.name, draft)
    if drafter_assets.SHARED_KEY in drafter_assets.read_config(path):
      ms.draft, ms.draft_params = drafter_assets.load_draft(path, lm.model, lm.params,
                                                            target_sha256=lm.sha256, dtype=dtype)
    else:
      ms.draft, ms.draft_params = hf.load_pretrained(path, dtype=dtype)
      if ms.draft.config.vocab_size != lm.config.vocab_size:
        raise ValueError(f"draft {path} has vocab_size={ms.draft.config.vocab_size}, the "
                         f"target {lm.config.vocab_size}")
    ms.sources["draft"] = path
  if eagle:
    path = drafter_assets.resolve(lm.name, eagle)
    ms.eagle = tuple(drafter_assets.load_head(path, lm.model, target_sha256=lm.sha256,
                                              dtype=dtype))
    ms.sources["eagle"] = path
  return ms
