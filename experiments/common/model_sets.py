"""One loader for the models an experiment runs: a target, its draft LM, its
EAGLE head and a companion, by name.

* ``"default"``: the small models trained on the Python standard library that
  ship in ``specjax/models/assets`` (fast; what the test suite uses);
* ``"tiny"`` / ``"stand_in"``: random models for smoke tests on the default
  tokenizer (tiny: target and a perturbed copy as the draft, built by a
  :class:`TinySpec` -- the analyses and SV calibration use their own, over 64
  random token ids; stand_in: the real default draft and a random target of the
  default target's architecture, which validates a full-size run and fills the
  compile cache; its numbers mean nothing);
* a checkpoint pair directory: ``<dir>/target`` and ``<dir>/draft`` Hugging Face
  checkpoints (what ``experiments/train_lm.py`` writes);
* a real model -- a name in :data:`specjax.models.registry.REAL_MODELS` (e.g.
  ``"smollm2-135m-instruct"``), a ``.gguf`` file or an HF directory -- with the
  drafters shipped for it (:mod:`specjax.models.drafter_assets`), or any drafter
  directories given instead.

    ms = load_model_set("smollm2-135m-instruct")         # target + shipped draft + EAGLE-3
    ms = load_model_set("default", eagle="eagle1")
    ms = load_model_set("tiny", eagle="", companion="companion", tiny=TinySpec(vocab_size=64))
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
    companion, companion_params: the SV companion LM (None when not requested).
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
  companion: Any = None
  companion_params: Any = None
  chat_template: Any = None
  sha256: str = ""
  sources: dict = dataclasses.field(default_factory=dict)

  @property
  def vocab_size(self) -> int:
    return self.target.config.vocab_size

  @property
  def is_chat(self) -> bool:
    return self.chat_template is not None

  def draft_sources(self, target_params=None):
    """The set's :class:`~specjax.decoding.drafter_factory.DraftSources` (EAGLE drafter
    params made against ``target_params``, default the set's own)."""
    from specjax.decoding.drafter_factory import DraftSources
    tp = self.target_params if target_params is None else target_params
    return DraftSources.build(self.target, tp, self.draft, self.draft_params, self.eagle)

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


def _checkpoint_pair_set(path: str, draft: str, dtype: str) -> ModelSet:
  """``<path>/target`` (and ``<path>/draft``) HF checkpoints; the tokenizer is the first
  ``tokenizer.json`` found in them, else the default tokenizer."""
  from specjax.models import defaults, hf
  tdir = os.path.join(path, "target")
  t, tp = hf.load_pretrained(tdir, dtype=dtype)
  ms = ModelSet(path, t, tp, None, sources={"target": tdir})
  ddir = os.path.join(path, "draft") if draft in ("draft", "") else draft
  if draft:
    ms.draft, ms.draft_params = hf.load_pretrained(ddir, dtype=dtype)
    ms.sources["draft"] = ddir
  found = [d for d in (tdir, ddir) if os.path.isfile(os.path.join(d, hf.TOKENIZER_FILE))]
  ms.tokenizer = (hf.load_tokenizer(os.path.join(found[0], hf.TOKENIZER_FILE)) if found
                  else defaults.default_tokenizer())
  return ms


def is_checkpoint_pair(path: str) -> bool:
  """Whether ``path`` is a checkpoint pair directory (holds ``target/``)."""
  return os.path.isdir(os.path.join(path, "target"))


def perturbed(params, seed, noise: float):
  """``params`` + ``noise`` * N(0, 1) on every matrix (vectors kept): a cheap draft.
  ``seed``: an int or a PRNG key."""
  import jax
  key = jax.random.key(seed) if isinstance(seed, int) else seed
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(key, len(leaves))
  return jax.tree.unflatten(tree, [l + noise * jax.random.normal(k, l.shape) if l.ndim > 1
                                   else l for l, k in zip(leaves, keys)])


@dataclasses.dataclass(frozen=True)
class TinySpec:
  """How the random ``"tiny"`` set is built: a one-layer target (hidden 32, MLP 64, two
  heads and one KV head of 16) whose matrices are scaled by ``scale`` (peaked
  distributions); the draft and the companion are the target plus noise on every
  matrix (:func:`perturbed`).

  Attributes:
    vocab_size: 0 = the default tokenizer's (the set carries that tokenizer); else
      that many random token ids and no tokenizer.
    scale: factor on the target's initial matrices.
    draft_noise, companion_noise: noise of the draft / companion (``"companion"``).
    eos_token_id: of the config (None: no EOS).
    keys: "seeds": target key(seed), draft key(seed + 1), companion key(seed + 2);
      "split": one jitted draw of target and draft from ``split(key(seed))`` (the
      recipe of :mod:`experiments.common.contexts`).
  """

  vocab_size: int = 0
  scale: float = 4.0
  draft_noise: float = 0.3
  companion_noise: float = 0.0
  eos_token_id: Optional[int] = 0
  keys: str = "seeds"


def _tiny_set(spec: TinySpec, seed: int, companion: bool) -> ModelSet:
  import jax
  from specjax.models import defaults
  from specjax.models.config import ModelConfig
  from specjax.models.transformer import Model
  tok = defaults.default_tokenizer() if not spec.vocab_size else None
  m = Model(ModelConfig(vocab_size=spec.vocab_size or tok.get_vocab_size(), hidden_size=32,
                        intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                        num_key_value_heads=1, head_dim=16, eos_token_id=spec.eos_token_id))
  scaled = lambda params: jax.tree.map(lambda x: x * spec.scale if x.ndim > 1 else x, params)
  if spec.keys == "split":
    if companion:
      raise ValueError("TinySpec(keys='split') has no companion")

    @jax.jit
    def draw(key):
      kt, kd = jax.random.split(key)
      tp = scaled(m.init_params(kt))
      return tp, perturbed(tp, kd, spec.draft_noise)

    tp, dp = draw(jax.random.key(seed))
  elif spec.keys == "seeds":
    tp = scaled(m.init_params(jax.random.key(seed)))
    dp = perturbed(tp, seed + 1, spec.draft_noise)
  else:
    raise ValueError(f"TinySpec.keys={spec.keys!r}; choose 'seeds' or 'split'")
  ms = ModelSet("tiny", m, tp, tok, m, dp)
  if companion:
    ms.companion, ms.companion_params = m, perturbed(tp, seed + 2, spec.companion_noise)
  return ms


def _stand_in_set(seed: int) -> ModelSet:
  """``"stand_in"`` (see the module docstring), no drafter heads."""
  import jax
  from specjax.models import defaults, hf
  from specjax.models.transformer import Model
  from experiments.configs.target import get_config as target_train_config
  d, dp = defaults.load_default("draft")
  cfg = json.loads(open(os.path.join(defaults.default_model_dir("draft"), hf.CONFIG_FILE)).read())
  m = target_train_config().model
  cfg.update({k: m[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                "num_attention_heads", "num_key_value_heads", "head_dim")})
  t = Model(hf.config_from_hf(cfg, dtype="float32", param_dtype="float32"))
  return ModelSet("stand_in", t, t.init_params(jax.random.key(seed)), defaults.default_tokenizer(),
                  d, dp, sources={"draft": defaults.default_model_dir("draft")})


COMPANION_FORMS = ("early_exit:N (the target's first N layers with its norm and head)",
                   "lm:SPEC (a language model over the target's vocabulary: SPEC 'draft' is "
                   "the shipped draft LM, or a directory as for draft)")


def parse_companion(companion: str) -> tuple[str, str]:
  """A real target's companion spec as ``(kind, argument)``: ``("early_exit", "N")`` or
  ``("lm", SPEC)``; ValueError naming the value and :data:`COMPANION_FORMS` otherwise."""
  kind, _, arg = str(companion).partition(":")
  if (kind == "early_exit" and arg.isdigit() and int(arg) >= 1) or (kind == "lm" and arg):
    return kind, arg
  raise ValueError(f"companion={companion!r}; give " + " or ".join(COMPANION_FORMS))


def _early_exit_layers(companion: str, name: str) -> int:
  """N of ``"early_exit:N"``; 0 for ``""``, ``"lm:SPEC"`` or a shipped / random
  ``"companion"``."""
  if not companion or (companion == "companion" and name in ("default", "tiny")):
    return 0
  kind, arg = parse_companion(companion)
  return int(arg) if kind == "early_exit" else 0


def load_model_set(name: str = "smollm2-135m-instruct", *, draft: str = "draft",
                   eagle: str = "eagle3", companion: str = "", dtype: str = "float32",
                   seed: int = 0, tiny: TinySpec = TinySpec()) -> ModelSet:
  """Load a target and its drafters.

  Args:
    name: "default", "tiny", "stand_in", a checkpoint pair directory or a real model
      (registry name, ``.gguf`` file, HF directory).
    draft: "draft" (the shipped draft LM), a directory (a shipped-form draft or a
      complete HF checkpoint), or "" for none.
    eagle: "eagle3" / "eagle1" (shipped heads), a head directory, or "" for none.
    companion: "" (none), "companion" (the default set's shipped companion; for
      "tiny" a perturbed copy of the target), "early_exit:N" (the target's first N
      layers with its norm and head, :mod:`specjax.models.early_exit`) or, for a real
      target, "lm:SPEC" (a separate LM over the target's vocabulary, loaded as ``draft``
      is: "lm:draft" is the shipped draft LM, "lm:DIR" a trained one).
    dtype: "float32" | "bfloat16" (float32 is the fast choice on CPUs).
    seed: init seed of the random "tiny" / "stand_in" models.
    tiny: how "tiny" is built (shapes, scale, noise, key recipe).

  Raises FileNotFoundError naming what is missing (and how to get it) and
  ValueError for a drafter trained for another target or a bad companion spec.
  """
  exit_layers = _early_exit_layers(companion, name)
  lm_companion = str(companion).startswith("lm:") and name not in ("default", *RANDOM_SETS)
  ms = _load_target_and_drafters(name, draft, eagle, dtype, seed, tiny,
                                 bool(companion) and not exit_layers and not lm_companion)
  if lm_companion:
    spec = parse_companion(companion)[1]
    ms.companion, ms.companion_params, path = _load_draft_lm(ms, spec, dtype)
    ms.sources["companion"] = f"lm:{path}"
  if exit_layers:
    from specjax.models.early_exit import early_exit
    ms.companion, ms.companion_params = early_exit(ms.target, ms.target_params, exit_layers)
    ms.sources["companion"] = companion
  return ms


def _load_draft_lm(ms: ModelSet, spec: str, dtype: str) -> tuple:
  """``(model, params, path)`` of a draft-form LM for the real target of ``ms``: ``spec``
  "draft" (the shipped draft LM) or a directory (a shipped-form draft completed from the
  target's embedding, or a complete HF checkpoint of the target's vocabulary)."""
  from specjax.models import hf
  path = drafter_assets.resolve(ms.name, spec)
  if drafter_assets.SHARED_KEY in drafter_assets.read_config(path):
    model, params = drafter_assets.load_draft(path, ms.target, ms.target_params,
                                              target_sha256=ms.sha256, dtype=dtype)
  else:
    model, params = hf.load_pretrained(path, dtype=dtype)
    if model.config.vocab_size != ms.target.config.vocab_size:
      raise ValueError(f"LM {path} has vocab_size={model.config.vocab_size}, the target "
                       f"{ms.target.config.vocab_size}")
  return model, params, path


def _load_target_and_drafters(name, draft, eagle, dtype, seed, tiny, companion) -> ModelSet:
  if name == "default":
    ms = _default_set(draft, eagle, dtype)
    if companion:
      from specjax.models import defaults
      ms.companion, ms.companion_params = defaults.load_default("companion", dtype=dtype)
      ms.sources["companion"] = defaults.default_model_dir("companion")
    return ms
  if name in RANDOM_SETS or is_checkpoint_pair(name):
    if name in RANDOM_SETS:
      ms = _tiny_set(tiny, seed, companion) if name == "tiny" else _stand_in_set(seed)
      if not draft:
        ms.draft, ms.draft_params = None, None
    else:
      ms = _checkpoint_pair_set(name, draft, dtype)
    if eagle:
      from specjax.models.eagle_io import load_eagle
      ms.eagle = tuple(load_eagle(eagle, ms.target.config, dtype=dtype)[:3])
      ms.sources["eagle"] = eagle
    return ms
  from specjax.models import registry
  lm = registry.load_model(name, dtype=dtype)
  ms = ModelSet(lm.name, lm.model, lm.params, lm.tokenizer, chat_template=lm.chat_template,
                sha256=lm.sha256, sources={"target": lm.path})
  if draft:
    ms.draft, ms.draft_params, ms.sources["draft"] = _load_draft_lm(ms, draft, dtype)
  if eagle:
    path = drafter_assets.resolve(lm.name, eagle)
    ms.eagle = tuple(drafter_assets.load_head(path, lm.model, target_sha256=lm.sha256,
                                              dtype=dtype))
    ms.sources["eagle"] = path
  return ms
