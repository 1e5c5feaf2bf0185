"""The context of an evaluation run: models, drafters, prompts and mesh -- ONE
builder for ``experiments/compare_verifiers.py``, the sweeps and
``experiments/benchmark.py``.

* :func:`check_sources` -- ``models`` / ``draft`` / ``eagle_dir`` /
  ``data.prompt_sets`` / mesh settings checked before any model loads;
* :func:`load_context` -- the :class:`Context` (one
  :func:`experiments.common.model_sets.load_model_set` call);
* :func:`drafter_dirs`, :func:`weights_fingerprint` -- which drafter files a
  run uses, and a hash of their weights for the run settings (a retrained
  package never reuses stale rows).

Config keys read (``experiments/configs/compare.py``):

* ``models``: ``"default"`` (the small embedded stdlib models), ``"tiny"`` /
  ``"stand_in"`` (random; smoke tests), a checkpoint pair directory
  (``<dir>/target``, ``<dir>/draft``), or a real model -- a registered name
  such as ``"smollm2-135m-instruct"``, a ``.gguf`` file or an HF directory;
* ``draft``: ``"draft"`` (the set's own / shipped draft LM), a directory, or
  ``""`` / ``"none"``;
* ``eagle_dir``: ``""`` (no EAGLE rows), ``"eagle3"`` / ``"eagle1"`` (the head
  shipped for ``models``: default and real models) or a head directory;
* ``data.prompt_sets``: chat prompt sets of a real (chat) model: held-out
  ShareGPT first turns and / or HumanEval problems (:func:`experiments.common.prompts.
  load_chat_prompts`); models without a chat template get held-out code
  prefixes of the stdlib corpus (:func:`experiments.common.prompts.load_eval_prompts`),
  and only those report the parse fraction (``Context.code_prompts``);
* ``mesh_data`` / ``mesh_model``: rows over a ``data`` axis, the target and
  draft LM tensor parallel over ``model`` (0 = no mesh).

Only the drafters the rows use are loaded: the draft LM for ``chain`` /
``tree`` rows, the EAGLE head when ``eagle_dir`` is set.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import Any

from absl import logging

SHIPPED_HEADS = ("eagle1", "eagle3")
NONE = ("", "none")


@dataclasses.dataclass
class Context:
  """Everything shared by the rows of one run (models, prompts, caches)."""

  c: Any
  target: Any
  target_params: Any
  draft: Any
  draft_params: Any
  tokenizer: Any
  prompts: list  # EvalPrompt or ChatPrompt (``.ids``, ``.text``)
  eagle: Any = None  # (head, drafter params) or None
  mesh: Any = None  # optional jax.sharding.Mesh: rows sharded over its "data" axis
  cache: dict = dataclasses.field(default_factory=dict)
  code_prompts: bool = True  # prompts are code prefixes: report the parse fraction
  model_name: str = ""  # the model set's name (shipped assets are keyed by it)
  model_sources: dict = dataclasses.field(default_factory=dict)  # where each model came from

  @property
  def prompt_ids(self) -> list[list[int]]:
    return [list(p.ids) for p in self.prompts]

  @property
  def eos(self):
    return self.target.config.eos_token_id

  @property
  def sources(self):
    """The run's :class:`~specjax.decoding.drafter_factory.DraftSources`."""
    from specjax.decoding.drafter_factory import DraftSources
    return DraftSources(int(self.target.config.vocab_size), self.draft, self.draft_params,
                        self.eagle)


# --------------------------------------------------------------------------- sources


def _kind(c) -> str:
  """"default" | "random" (tiny / stand_in) | "pair" (checkpoint pair) | "real"."""
  from experiments.common.model_sets import RANDOM_SETS, is_checkpoint_pair
  m = c.models
  if m == "default":
    return "default"
  if m in RANDOM_SETS:
    return "random"
  if isinstance(m, str) and is_checkpoint_pair(m):
    return "pair"
  return "real"


def drafters_used(c) -> tuple[bool, bool]:
  """``(needs draft LM, needs EAGLE head)`` of the rows of ``c``."""
  drafters = [c.drafters] if isinstance(c.drafters, str) else list(c.drafters)
  from specjax.decoding.drafter_factory import needs
  need_draft = any(needs(d) == "draft" for d in drafters) and c.draft not in NONE
  return need_draft, bool(c.eagle_dir) and c.eagle_dir not in NONE


def prompt_sets(c) -> tuple:
  """``data.prompt_sets`` as a tuple (a tuple or a comma-separated string)."""
  s = c.data.get("prompt_sets", ("sharegpt", "humaneval"))
  if isinstance(s, str):
    s = [x.strip() for x in s.split(",") if x.strip()]
  return tuple(s)


def check_sources(c) -> None:
  """ValueError naming the key, the value and what is allowed for every model
  source, prompt set and mesh setting -- before any model loads."""
  from experiments.common.prompts import PROMPT_SETS
  from specjax.checks import check_int
  from specjax.models import registry
  kind = _kind(c)
  if not isinstance(c.models, str) or (kind == "real" and c.models not in registry.REAL_MODELS
                                       and not os.path.exists(c.models)):
    raise ValueError(f"models={c.models!r}: give 'default', 'tiny', 'stand_in', a checkpoint "
                     f"pair directory (<dir>/target), a registered model "
                     f"{sorted(registry.REAL_MODELS)}, or an existing .gguf file / HF directory")
  need_draft, need_eagle = drafters_used(c)
  drafters = [c.drafters] if isinstance(c.drafters, str) else list(c.drafters)
  if c.draft not in NONE + ("draft",) and not os.path.isdir(c.draft):
    raise ValueError(f"draft={c.draft!r}: give 'draft' (the draft LM of models={c.models!r}), "
                     f"a directory, or '' / 'none'")
  if kind == "random" and c.draft not in NONE + ("draft",):
    raise ValueError(f"draft={c.draft!r}: models={c.models!r} has its own draft LM; give "
                     f"'draft' or ''")
  if c.eagle_dir not in NONE + SHIPPED_HEADS and not os.path.isdir(c.eagle_dir):
    raise ValueError(f"eagle_dir={c.eagle_dir!r}: give {' / '.join(SHIPPED_HEADS)} (the head "
                     f"shipped for models={c.models!r}), a head directory, or ''")
  if c.eagle_dir in SHIPPED_HEADS and kind in ("random", "pair"):
    raise ValueError(f"eagle_dir={c.eagle_dir!r}: no head is shipped for models={c.models!r}; "
                     f"give a head directory")
  from specjax.decoding.drafter_factory import needs
  for d in drafters:
    if needs(d) == "eagle" and not need_eagle:
      raise ValueError(f"drafters={tuple(drafters)} has {d!r} but eagle_dir={c.eagle_dir!r}; "
                       f"give eagle_dir ('eagle3', 'eagle1' or a head directory)")
  if any(needs(d) == "draft" for d in drafters) and not need_draft:
    raise ValueError(f"drafters={tuple(drafters)} needs a draft LM but draft={c.draft!r}; "
                     f"give draft='draft' or a directory")
  sets = prompt_sets(c)
  if not sets or any(s not in PROMPT_SETS for s in sets):
    raise ValueError(f"data.prompt_sets={c.data.get('prompt_sets')!r}: choose one or more of "
                     f"{PROMPT_SETS}")
  check_int("mesh_data", c.get("mesh_data", 0), low=0)
  check_int("mesh_model", c.get("mesh_model", 1), low=1)
  if c.get("mesh_model", 1) > 1 and not c.get("mesh_data", 0):
    raise ValueError(f"mesh_model={c.mesh_model} needs a mesh: give mesh_data (1 for tensor "
                     f"parallelism only)")
  drafter_dirs(c)  # a shipped kind that is not shipped for this model: named here


def _real_name(c) -> str:
  from specjax.models import registry
  return c.models if c.models in registry.REAL_MODELS else os.path.basename(
      os.path.normpath(c.models))


def drafter_dirs(c) -> dict:
  """``{"draft": dir, "eagle": dir}`` of the drafters the rows use ("" when none or
  random); raises ValueError naming the key when a shipped kind is missing."""
  need_draft, need_eagle = drafters_used(c)
  kind = _kind(c)
  out = {"draft": "", "eagle": ""}
  for key, value, need in (("draft", c.draft, need_draft), ("eagle_dir", c.eagle_dir, need_eagle)):
    name = "draft" if key == "draft" else "eagle"
    if not need:
      continue
    if os.path.isdir(value):
      out[name] = value
    elif kind == "random":  # the set's own random draft LM: nothing on disk
      continue
    elif kind == "default":
      from specjax.models.defaults import assets_dir, default_model_dir
      out[name] = default_model_dir("draft") if value == "draft" else os.path.join(assets_dir(),
                                                                                   value)
    elif kind == "pair":
      out[name] = os.path.join(c.models, "draft")
    else:
      from specjax.models import drafter_assets
      try:
        out[name] = drafter_assets.resolve(_real_name(c), value)
      except FileNotFoundError as e:
        raise ValueError(f"{key}={value!r}: {e}") from None
  return out


@functools.lru_cache(maxsize=16)
def _file_sha(path: str, size: int, mtime_ns: int) -> str:
  del size, mtime_ns  # cache key only: a replaced file is hashed again
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 22), b""):
      h.update(block)
  return h.hexdigest()[:12]


def weights_fingerprint(c) -> str:
  """Short hashes of the drafters' weight files ("draft=<sha>|eagle=<sha>"; "" parts
  for none), so a retrained package never reuses stale rows."""
  parts = []
  for name, d in sorted(drafter_dirs(c).items()):
    f = os.path.join(d, "model.safetensors") if d else ""
    sha = ""
    if f and os.path.isfile(f):
      st = os.stat(f)
      sha = _file_sha(f, st.st_size, st.st_mtime_ns)
    parts.append(f"{name}={sha}")
  return "|".join(parts)


# --------------------------------------------------------------------------- loading


def make_mesh(c):
  """The ``(data, model)`` mesh of ``mesh_data`` / ``mesh_model`` (None without)."""
  if not c.get("mesh_data", 0):
    return None
  from specjax.decoding import parallel
  try:
    return parallel.make_mesh(int(c.mesh_data), int(c.get("mesh_model", 1)))
  except ValueError as e:
    raise ValueError(f"mesh_data={c.mesh_data}, mesh_model={c.get('mesh_model', 1)}: {e}") from None


def load_prompts(c, ms) -> tuple[list, bool]:
  """``(prompts, code_prompts)``: chat prompts for a chat model, else code prefixes."""
  from experiments.common import prompts as prompts_lib
  d = c.data
  if ms.is_chat:
    return prompts_lib.load_chat_prompts(ms.encode_chat, d.num_prompts, sets=prompt_sets(c),
                                         max_tokens=d.max_prompt_tokens,
                                         seed=d.prompt_seed), False
  from specjax.data.corpus import CorpusConfig
  return prompts_lib.load_eval_prompts(
      d.num_prompts, tokenizer=ms.tokenizer, max_tokens=d.max_prompt_tokens,
      min_tokens=d.min_prompt_tokens, seed=d.prompt_seed,
      corpus=CorpusConfig(root=d.root, heldout_fraction=d.heldout_fraction,
                          split_seed=d.split_seed)), True


def load_context(c, mesh=None) -> Context:
  """Models, drafters, prompts (and mesh) of a run: see the module docstring.
  ``mesh``: a ready mesh (else built from ``mesh_data`` / ``mesh_model``)."""
  from experiments.common.model_sets import load_model_set
  from specjax.decoding.eagle_drafter import EagleDrafter
  check_sources(c)
  mesh = mesh if mesh is not None else make_mesh(c)
  need_draft, need_eagle = drafters_used(c)
  ms = load_model_set(c.models, draft=c.draft if need_draft else "",
                      eagle=c.eagle_dir if need_eagle else "", seed=int(c.seed))
  prompts, code = load_prompts(c, ms)
  target, tp, dp = ms.target, ms.target_params, ms.draft_params
  if c.get("param_dtype", "float32") != "float32":  # every row, target-only included
    from specjax.models.transformer import cast_weights
    target, tp = cast_weights(target, tp, c.param_dtype)
  if mesh is not None:
    from specjax.decoding import parallel
    tp = parallel.shard_params(target, tp, mesh)  # tensor parallel over "model"
    if ms.draft is not None:
      dp = parallel.shard_params(ms.draft, dp, mesh)
  eagle = None
  if ms.eagle is not None:
    head, hp, d2t = ms.eagle
    if mesh is not None:  # EAGLE heads are small: replicated (their shared embedding stays
      from specjax.decoding import parallel  # sharded like the target's)
      hp = parallel.replicate(hp, mesh)
    eagle = (head, EagleDrafter.make_params(hp, target, tp, d2t))
  logging.info("model set %s: %s; %d %s prompts", ms.name, ms.sources, len(prompts),
               "code" if code else "chat")
  return Context(c, target, tp, ms.draft, dp, ms.tokenizer, prompts, eagle, mesh=mesh,
                 code_prompts=code, model_name=ms.name, model_sources=dict(ms.sources))
