"""Write small GGUF files from random transformers models, the way llama.cpp's
``convert_hf_to_gguf.py`` lays them out (tensor names, metadata keys, the
Llama q/k row permutation, tied output omitted), with ``gguf.GGUFWriter``.

The tokenizer is a real byte-level BPE trained here on a few lines of text
(vocabulary ``VOCAB``: 3 control tokens, the 256 byte symbols and merges), so
tokenizer import can be tested offline against transformers' GGUF tokenizer.
"""

from __future__ import annotations

import json

import numpy as np

VOCAB = 320
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
                 "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
_CORPUS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.",
    "import os\nimport sys\n\nfor line in sys.stdin:\n    print(line.strip())\n",
    "In 2024, 1234 people answered the question: what is the answer? They said 42!",
] * 8


def train_tokenizer():
  """A byte-level BPE ``tokenizers.Tokenizer`` with exactly VOCAB entries."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator(_CORPUS, trainer)
  assert tok.get_vocab_size() <= VOCAB
  return tok


def _permute(w, n_head):
  """llama.cpp's convert_hf_to_gguf ``LlamaModel.permute`` (forward direction)."""
  return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
          .swapaxes(1, 2).reshape(w.shape))


_LAYER = {
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.bias": "attn_output.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight", "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}


def write_gguf(path, hf_config: dict, state: dict, tokenizer, qtype: str = "F32",
               drop: tuple = (), extra_tensors: dict | None = None, arch: str | None = None):
  """Write ``state`` (HF names -> float32 numpy) as a GGUF file.

  qtype: "F32" | "F16" | "Q8_0" for 2-D weights (norms and biases stay F32, as
  llama.cpp keeps 1-D tensors in F32). ``drop``: GGUF tensor names to leave out;
  ``extra_tensors``: name -> (raw bytes array [rows, bytes per row], raw_dtype)
  written as is.
  """
  import gguf
  arch = arch or hf_config["model_type"]
  c = hf_config
  w = gguf.GGUFWriter(str(path), arch)
  heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
  head_dim = c.get("head_dim") or c["hidden_size"] // heads
  w.add_name("tiny-" + arch)
  w.add_block_count(c["num_hidden_layers"])
  w.add_context_length(c["max_position_embeddings"])
  w.add_embedding_length(c["hidden_size"])
  w.add_feed_forward_length(c["intermediate_size"])
  w.add_head_count(heads)
  w.add_head_count_kv(kv)
  w.add_key_length(head_dim)
  w.add_value_length(head_dim)
  w.add_rope_dimension_count(head_dim)
  w.add_rope_freq_base(float(c.get("rope_theta", 10000.0)))
  w.add_layer_norm_rms_eps(float(c["rms_norm_eps"]))
  w.add_vocab_size(c["vocab_size"])
  w.add_file_type({"F32": 0, "F16": 1, "Q8_0": 7}[qtype])
  # tokenizer, as llama.cpp writes a byte-level BPE vocabulary
  tj = json.loads(tokenizer.to_str())
  vocab = tj["model"]["vocab"]
  tokens = [None] * c["vocab_size"]
  for t, i in vocab.items():
    tokens[i] = t
  for i in range(len(tokens)):
    if tokens[i] is None:
      tokens[i] = f"[PAD{i}]"
  types = [3 if t in SPECIALS else (5 if t.startswith("[PAD") else 1) for t in tokens]
  merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
  w.add_tokenizer_model("gpt2")
  w.add_tokenizer_pre("default")
  w.add_token_list(tokens)
  w.add_token_types(types)
  w.add_token_merges(merges)
  w.add_bos_token_id(1)
  w.add_eos_token_id(2)
  w.add_chat_template(CHAT_TEMPLATE)

  def put(name, arr):
    if name in drop:
      return
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if arr.ndim == 1 or qtype == "F32":
      w.add_tensor(name, arr)
    elif qtype == "F16":
      w.add_tensor(name, arr.astype(np.float16))
    else:
      qt = gguf.GGMLQuantizationType.Q8_0
      w.add_tensor(name, gguf.quants.quantize(arr, qt), raw_dtype=qt)  # byte shape

  put("token_embd.weight", state["model.embed_tokens.weight"])
  put("output_norm.weight", state["model.norm.weight"])
  if "lm_head.weight" in state and not c.get("tie_word_embeddings", False):
    put("output.weight", state["lm_head.weight"])
  for i in range(c["num_hidden_layers"]):
    for hname, gname in _LAYER.items():
      key = f"model.layers.{i}.{hname}"
      if key not in state:
        continue
      arr = state[key]
      if arch == "llama" and gname.startswith("attn_q."):
        arr = _permute(arr, heads)
      elif arch == "llama" and gname.startswith("attn_k."):
        arr = _permute(arr, kv)
      put(f"blk.{i}.{gname}", arr)
  for name, (raw, raw_dtype) in (extra_tensors or {}).items():
    w.add_tensor(name, raw, raw_dtype=raw_dtype)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return str(path)
