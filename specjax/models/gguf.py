"""GGUF import: a llama.cpp model file -> specjax ``ModelConfig`` + params, a
``tokenizers.Tokenizer`` and the chat template, all from the file alone.

The file is read with the ``gguf`` package (the llama.cpp project's own Python
reader). Every tensor type that package can dequantize (F32, F16, BF16, Q8_0,
Q4_0, Q4_1, Q5_*, K-quants, IQ-quants ...) is expanded to float32 and then
cast to the requested dtype. Tensors are renamed to the Hugging Face layout and
go through :func:`specjax.models.hf.params_from_tensors`, so there is one
name/shape check for both formats::

    model, params = load_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", dtype="bfloat16")
    tok = load_gguf_tokenizer(path)            # tokenizers.Tokenizer
    chat = load_gguf_chat_template(path)       # ChatTemplate or None

llama.cpp's converter permutes the rows of Llama q/k projections (it stores
RoPE's rotate-half pairs interleaved, GPT-J style); :func:`unpermute_qk`
undoes that so the HF rotate-half RoPE of ``transformer.py`` applies. Qwen2
and Qwen3 are written unpermuted.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import numpy as np

from specjax.models import hf
from specjax.models.chat_template import ChatTemplate
from specjax.models.config import ModelConfig, resolve_dtype
from specjax.models.transformer import Model

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")

# GGUF tensor name (per layer, after "blk.{i}.") -> HF name (after "model.layers.{i}.")
_LAYER_NAMES = {
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.bias": "self_attn.o_proj.bias",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
# llama.cpp token types (llama_token_type)
_TOKEN_NORMAL, _TOKEN_UNKNOWN, _TOKEN_CONTROL, _TOKEN_USER_DEFINED = 1, 2, 3, 4


# ----------------------------------------------------------------------------- reading


class GGUFFile:
  """An opened GGUF file: ``metadata`` (key -> python value) and lazy tensors.

  The tensors stay memory-mapped until :meth:`tensor` dequantizes one.
  """

  def __init__(self, path: str):
    import gguf
    path = os.fspath(path)
    if not os.path.isfile(path):
      raise FileNotFoundError(f"GGUF file does not exist: {path}")
    try:
      reader = gguf.GGUFReader(path, "r")
    except Exception as e:  # the reader raises ValueError / IndexError / struct errors
      raise ValueError(f"cannot read GGUF file {path} (truncated or not a GGUF file?): "
                       f"{type(e).__name__}: {e}") from None
    self.path = path
    self._reader = reader
    self.metadata = {k: _field_value(f) for k, f in reader.fields.items()}
    self.tensors = {t.name: t for t in reader.tensors}
    for t in reader.tensors:
      end = t.data_offset + t.n_bytes
      if end > os.path.getsize(path):
        raise ValueError(f"GGUF file {path} is truncated: tensor {t.name!r} ends at byte "
                         f"{end}, file has {os.path.getsize(path)} bytes")

  @property
  def architecture(self) -> str:
    return self.require("general.architecture")

  def require(self, key: str):
    if key not in self.metadata:
      raise ValueError(f"GGUF file {self.path} lacks metadata key {key!r}")
    return self.metadata[key]

  def tensor(self, name: str) -> np.ndarray:
    """Dequantized float32 tensor in the HF orientation (``[out, in]`` for matrices)."""
    import gguf
    if name not in self.tensors:
      raise ValueError(f"GGUF file {self.path} is missing tensor {name!r}")
    t = self.tensors[name]
    try:
      arr = gguf.quants.dequantize(t.data, t.tensor_type)
    except NotImplementedError:
      raise ValueError(f"tensor {name!r} has type {t.tensor_type.name}, which the installed "
                       f"gguf package cannot dequantize") from None
    shape = tuple(int(s) for s in reversed(t.shape))  # GGUF lists ne[0] (columns) first
    return np.asarray(arr, dtype=np.float32).reshape(shape)


def _field_value(field) -> Any:
  """A GGUF metadata field as a python scalar, str or list."""
  import gguf
  types = field.types
  if not types:
    return None
  if types[0] == gguf.GGUFValueType.ARRAY:
    if len(types) > 1 and types[1] == gguf.GGUFValueType.STRING:
      return [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
    return [field.parts[i].tolist()[0] for i in field.data]
  if types[0] == gguf.GGUFValueType.STRING:
    return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")
  return field.parts[field.data[0]].tolist()[0]


# ----------------------------------------------------------------------------- config


def _f32(x) -> float:
  """A float32 metadata value as the shortest decimal that round-trips (1e-05, not
  9.99999974e-06), i.e. the value the original HF config held."""
  return float(str(np.float32(x)))


def config_from_gguf(f: GGUFFile, **overrides) -> ModelConfig:
  """``ModelConfig`` from GGUF metadata (``{arch}.block_count`` etc.)."""
  arch = f.architecture
  if arch not in SUPPORTED_ARCHITECTURES:
    raise ValueError(f"GGUF architecture {arch!r} ({f.path}) is not supported; specjax "
                     f"loads {SUPPORTED_ARCHITECTURES}")
  m = f.metadata
  get = lambda k, default=None: m.get(f"{arch}.{k}", default)
  req = lambda k: f.require(f"{arch}.{k}")
  hidden = int(req("embedding_length"))
  heads = int(req("attention.head_count"))
  kv_heads = get("attention.head_count_kv", heads)
  if isinstance(kv_heads, list):
    raise ValueError(f"per-layer head_count_kv {kv_heads} is not supported")
  head_dim = int(get("attention.key_length", get("rope.dimension_count", hidden // heads)))
  if get("attention.value_length", head_dim) != head_dim:
    raise ValueError("attention.value_length != key_length is not supported")
  rot = get("rope.dimension_count", head_dim)
  if rot != head_dim:
    raise ValueError(f"partial rotary embeddings (rope.dimension_count={rot} < head_dim="
                     f"{head_dim}) are not supported")
  if "rope_freqs.weight" in f.tensors:
    raise ValueError("GGUF tensor 'rope_freqs.weight' (llama3-style RoPE frequency factors) "
                     "is not supported; convert from the HF checkpoint instead")
  scaling = None
  kind = get("rope.scaling.type", "none")
  if kind == "linear":
    scaling = (("factor", float(req("rope.scaling.factor"))), ("rope_type", "linear"))
  elif kind not in ("none", None):
    raise ValueError(f"GGUF rope.scaling.type={kind!r} is not supported; only 'linear'")
  vocab = get("vocab_size")
  if vocab is None:
    vocab = len(f.require("tokenizer.ggml.tokens"))
  tied = "output.weight" not in f.tensors
  layers = int(req("block_count"))
  fields = dict(
      model_type=arch, vocab_size=int(vocab), hidden_size=hidden,
      intermediate_size=int(req("feed_forward_length")), num_hidden_layers=layers,
      num_attention_heads=heads, num_key_value_heads=int(kv_heads), head_dim=head_dim,
      rope_theta=_f32(get("rope.freq_base", 10000.0)), rope_scaling=scaling,
      rms_norm_eps=_f32(req("attention.layer_norm_rms_epsilon")),
      tie_word_embeddings=tied,
      qkv_bias="blk.0.attn_q.bias" in f.tensors,
      o_bias="blk.0.attn_output.bias" in f.tensors,
      qk_norm="blk.0.attn_q_norm.weight" in f.tensors,
      max_position_embeddings=int(get("context_length", 2048)),
      bos_token_id=m.get("tokenizer.ggml.bos_token_id"),
      eos_token_id=m.get("tokenizer.ggml.eos_token_id"))
  fields.update(overrides)
  return ModelConfig(**fields)


# ----------------------------------------------------------------------------- tensors


def unpermute_qk(w: np.ndarray, n_heads: int) -> np.ndarray:
  """Undo llama.cpp's ``permute`` of a Llama q/k projection ``[n_heads*head_dim, in]``.

  The converter reorders each head's rows from rotate-half order (first half,
  second half) to interleaved pairs; this reshapes ``[heads, head_dim/2, 2, in]``
  back to ``[heads, 2, head_dim/2, in]``.
  """
  rows = w.shape[0]
  if rows % (2 * n_heads):
    raise ValueError(f"cannot unpermute a q/k tensor of {rows} rows over {n_heads} heads")
  return (w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:])
          .swapaxes(1, 2).reshape(w.shape))


def hf_tensors_from_gguf(f: GGUFFile, cfg: ModelConfig) -> dict[str, np.ndarray]:
  """All model tensors, dequantized to float32 and renamed to HF names."""
  per_layer = [g for g, h in _LAYER_NAMES.items()
               if not h.endswith((".bias", "q_norm.weight", "k_norm.weight"))
               or (cfg.qkv_bias and h.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias")))
               or (cfg.o_bias and h.endswith("o_proj.bias"))
               or (cfg.qk_norm and h.endswith(("q_norm.weight", "k_norm.weight")))]
  needed = {"token_embd.weight", "output_norm.weight"}
  if not cfg.tie_word_embeddings:
    needed.add("output.weight")
  needed |= {f"blk.{i}.{g}" for i in range(cfg.num_hidden_layers) for g in per_layer}
  missing = sorted(needed - set(f.tensors))
  if missing:
    raise ValueError(f"GGUF file {f.path} is missing tensor(s) {missing[:5]}"
                     + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
  out: dict[str, np.ndarray] = {}
  for name in sorted(needed):
    arr = f.tensor(name)
    if name.startswith("blk."):
      _, i, rest = name.split(".", 2)
      if cfg.model_type == "llama" and rest in ("attn_q.weight", "attn_q.bias"):
        arr = unpermute_qk(arr, cfg.num_attention_heads)
      elif cfg.model_type == "llama" and rest in ("attn_k.weight", "attn_k.bias"):
        arr = unpermute_qk(arr, cfg.num_key_value_heads)
      out[f"model.layers.{i}.{_LAYER_NAMES[rest]}"] = arr
    else:
      out[_GLOBAL_NAMES[name]] = arr
  for name, arr in out.items():
    if not np.all(np.isfinite(arr)):
      raise ValueError(f"GGUF tensor for {name!r} in {f.path} holds NaN or inf values")
  return out


def load_gguf(path: str, dtype: str = "float32", **config_overrides):
  """Load a GGUF model file. Returns ``(Model, params)``.

  Args:
    path: the ``.gguf`` file (architecture llama, qwen2 or qwen3).
    dtype: "float32" | "bfloat16" | "float16": params and activations.
    **config_overrides: ModelConfig fields, e.g. ``hidden_layers=(2, 15, 27, 30)``.
  """
  resolve_dtype(dtype)
  f = GGUFFile(path)
  if "tokenizer_fingerprint" not in config_overrides and "tokenizer.ggml.tokens" in f.metadata:
    config_overrides["tokenizer_fingerprint"] = hf.tokenizer_fingerprint(tokenizer_from_gguf(f))
  cfg = config_from_gguf(f, dtype=dtype, param_dtype=dtype, **config_overrides)
  params = hf.params_from_tensors(cfg, hf_tensors_from_gguf(f, cfg), dtype)
  return Model(cfg), params


# ----------------------------------------------------------------------------- tokenizer


# llama.cpp pre-tokenizer types (tokenizer.ggml.pre) -> the split regexes of the
# HF tokenizers they were converted from. "smollm" = digits split one by one,
# then the GPT-2 regex (SmolLM/SmolLM2's tokenizer.json).
_GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = {
    "default": ("gpt2", _GPT2_SPLIT), "gpt2": ("gpt2", _GPT2_SPLIT),
    "smollm": ("digits", _GPT2_SPLIT),
    "llama-bpe": ("none", _LLAMA3_SPLIT), "llama3": ("none", _LLAMA3_SPLIT),
    "qwen2": ("none", _QWEN2_SPLIT), "deepseek-r1-qwen": ("none", _QWEN2_SPLIT),
}


def tokenizer_from_gguf(f: GGUFFile):
  """A ``tokenizers.Tokenizer`` equivalent to the file's byte-level BPE tokenizer.

  Vocabulary, merges, token types (control tokens become special added tokens,
  user-defined ones plain added tokens) and the pre-tokenizer named by
  ``tokenizer.ggml.pre`` (see ``PRE_TOKENIZERS``). SentencePiece ("llama") GGUF
  vocabularies are refused with a clear error.
  """
  from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
  kind = f.require("tokenizer.ggml.model")
  if kind != "gpt2":
    raise ValueError(f"GGUF tokenizer.ggml.model={kind!r} is not supported; specjax builds "
                     "byte-level BPE ('gpt2') tokenizers from GGUF metadata")
  pre = f.metadata.get("tokenizer.ggml.pre", "default")
  if pre not in PRE_TOKENIZERS:
    raise ValueError(f"GGUF pre-tokenizer tokenizer.ggml.pre={pre!r} is not supported; "
                     f"choose one of {sorted(PRE_TOKENIZERS)}")
  tokens = f.require("tokenizer.ggml.tokens")
  merges = f.require("tokenizer.ggml.merges")
  types = f.metadata.get("tokenizer.ggml.token_type") or [_TOKEN_NORMAL] * len(tokens)
  alphabet = set(pre_tokenizers.ByteLevel.alphabet())  # GPT-2's 256 byte symbols
  vocab = {tok: i for i, tok in enumerate(tokens)}
  bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges],
                   fuse_unk=False, byte_fallback=False)
  tok = Tokenizer(bpe)
  digits, split = PRE_TOKENIZERS[pre]
  steps = []
  if digits == "digits":
    steps.append(pre_tokenizers.Digits(individual_digits=True))
  steps.append(pre_tokenizers.Split(Regex(split), behavior="isolated"))
  steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
  tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
  tok.decoder = decoders.ByteLevel()
  # control tokens match whole, as in llama.cpp; one spelled outside the byte
  # alphabet is a converter mislabel and stays an ordinary vocabulary entry
  special = [AddedToken(t, special=True, normalized=False)
             for t, ty in zip(tokens, types) if ty == _TOKEN_CONTROL and set(t) <= alphabet]
  tok.add_special_tokens(special)
  user = [AddedToken(t, special=False, normalized=False)
          for t, ty in zip(tokens, types) if ty == _TOKEN_USER_DEFINED]
  if user:
    tok.add_tokens(user)
  if tok.get_vocab_size() != len(tokens):
    raise ValueError(f"tokenizer built from {f.path} has {tok.get_vocab_size()} tokens, "
                     f"the file lists {len(tokens)}")
  return tok


def chat_template_from_gguf(f: GGUFFile) -> Optional[ChatTemplate]:
  """The file's ``tokenizer.chat_template`` (None if it has none), with its BOS/EOS strings."""
  src = f.metadata.get("tokenizer.chat_template")
  if not src:
    return None
  tokens = f.metadata.get("tokenizer.ggml.tokens") or []
  name = lambda key: (tokens[f.metadata[key]] if f.metadata.get(key) is not None
                      and 0 <= f.metadata[key] < len(tokens) else "")
  return ChatTemplate(src, bos_token=name("tokenizer.ggml.bos_token_id"),
                      eos_token=name("tokenizer.ggml.eos_token_id"))


def load_gguf_tokenizer(path: str):
  """``tokenizers.Tokenizer`` from a GGUF file's metadata."""
  return tokenizer_from_gguf(GGUFFile(path))


def load_gguf_chat_template(path: str) -> Optional[ChatTemplate]:
  """The chat template stored in a GGUF file, or None."""
  return chat_template_from_gguf(GGUFFile(path))


def gguf_to_hf(path: str, out_dir: str, dtype: str = "float32") -> str:
  """Export a GGUF model as an HF directory (config.json, model.safetensors,
  tokenizer.json, tokenizer_config.json with the chat template) that
  transformers and :func:`specjax.models.hf.load_pretrained` load."""
  import json
  f = GGUFFile(path)
  cfg = config_from_gguf(f, dtype=dtype, param_dtype=dtype)
  params = hf.params_from_tensors(cfg, hf_tensors_from_gguf(f, cfg), dtype)
  hf.save_pretrained(out_dir, cfg, params, tokenizer=tokenizer_from_gguf(f), dtype=dtype)
  chat = chat_template_from_gguf(f)
  tokens = f.metadata.get("tokenizer.ggml.tokens") or []
  tc = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
  for key, meta in (("bos_token", "tokenizer.ggml.bos_token_id"),
                    ("eos_token", "tokenizer.ggml.eos_token_id"),
                    ("unk_token", "tokenizer.ggml.unknown_token_id"),
                    ("pad_token", "tokenizer.ggml.padding_token_id")):
    if f.metadata.get(meta) is not None:
      tc[key] = tokens[f.metadata[meta]]
  if chat is not None:
    tc["chat_template"] = chat.source
  with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as fh:
    json.dump(tc, fh, indent=2)
  return out_dir
