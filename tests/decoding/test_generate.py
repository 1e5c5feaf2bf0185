"""Target-only generate(): stopping (EOS per row, max_new_tokens, cache full),
agreement with a plain greedy reference, one compilation per prompt bucket,
reproducible per-row sampling, and input validation."""

import dataclasses
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.decoding import autoregressive as ar
from specjax.decoding.autoregressive import CACHE_FULL, EOS, MAX_TOKENS, generate
from specjax.distributions import SamplingConfig
from specjax.models.config import ModelConfig
from specjax.models.transformer import Model
from tests.helpers import random_params

VOCAB = 64
CFG = ModelConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, eos_token_id=None)
MODEL = Model(CFG)
PARAMS = random_params(MODEL)
_rs = np.random.RandomState(0)
PROMPTS = [_rs.randint(0, VOCAB, size=n).tolist() for n in (3, 9, 5, 12)]
N_NEW = 10
GREEDY = SamplingConfig(temperature=0.0)


@pytest.fixture(scope="module")
def no_eos():
  """Greedy continuations without EOS (the reference every stopping test cuts)."""
  return generate(MODEL, PARAMS, PROMPTS, max_new_tokens=N_NEW, eos_token_id=None)


def test_greedy_matches_plain_forward_argmax(no_eos):
  """Each generated token is the argmax of a cache-free causal forward over
  prompt + tokens so far (right-padded to a fixed width: one compile)."""
  width = 32
  seqs = [list(p) for p in PROMPTS]
  fwd = jax.jit(MODEL.apply)
  pos = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (len(seqs), width))
  cache = MODEL.init_cache(len(seqs), width)
  for _ in range(N_NEW):
    toks = np.zeros((len(seqs), width), np.int32)
    for i, s in enumerate(seqs):
      toks[i, :len(s)] = s
    logits = np.asarray(fwd(PARAMS, jnp.asarray(toks), pos, cache).logits)
    for i, s in enumerate(seqs):
      s.append(int(logits[i, len(s) - 1].argmax()))
  expected = [s[len(p):] for s, p in zip(seqs, PROMPTS)]
  assert no_eos.to_lists() == expected
  assert np.asarray(no_eos.lengths).tolist() == [N_NEW] * 4
  assert np.asarray(no_eos.finish_reason).tolist() == [MAX_TOKENS] * 4
  # N_NEW - 1 decode forwards per row (target_calls excludes the prefill)
  assert np.asarray(no_eos.target_calls).tolist() == [N_NEW - 1] * 4
  # the rows are not trivially constant: the test exercises real choices
  assert len({t for row in expected for t in row}) > 4


def test_eos_stops_each_row(no_eos):
  ref = no_eos.to_lists()
  eos = ref[0][3]  # a token row 0 emits (at step 3 or earlier)
  first = ref[0].index(eos)
  res = generate(MODEL, PARAMS, PROMPTS, max_new_tokens=N_NEW, eos_token_id=eos)
  got = res.to_lists()
  reasons = np.asarray(res.finish_reason).tolist()
  assert got[0] == ref[0][:first + 1] and reasons[0] == EOS
  for row, r_ref, reason in zip(got, ref, reasons):
    if eos in r_ref:
      cut = r_ref.index(eos) + 1
      assert row == r_ref[:cut] and reason == EOS
    else:
      assert row == r_ref and reason == MAX_TOKENS
  # rows that stopped early leave zeros after their length
  toks, lens = np.asarray(res.tokens), np.asarray(res.lengths)
  for i in range(len(PROMPTS)):
    assert (toks[i, lens[i]:] == 0).all()
  np.testing.assert_array_equal(res.target_calls, lens - 1)  # per row, while it ran


def test_eos_from_config_and_list(no_eos):
  ref = no_eos.to_lists()
  a, b = ref[1][2], ref[2][4]
  m = Model(CFG.replace(eos_token_id=(a, b)))
  res = generate(m, PARAMS, PROMPTS, max_new_tokens=N_NEW)  # eos_token_id="config"
  for row, r_ref in zip(res.to_lists(), ref):
    stops = [r_ref.index(e) for e in (a, b) if e in r_ref]
    assert row == (r_ref[:min(stops) + 1] if stops else r_ref)


def test_max_new_tokens_one():
  res = generate(MODEL, PARAMS, PROMPTS, max_new_tokens=1, eos_token_id=None)
  assert np.asarray(res.lengths).tolist() == [1] * 4
  assert np.asarray(res.finish_reason).tolist() == [MAX_TOKENS] * 4
  assert np.asarray(res.target_calls).tolist() == [0] * 4  # the prefill's token only


def test_cache_full_signal(no_eos):
  """A row whose cache fills stops with CACHE_FULL after cache_length - prompt + 1
  tokens (the last token is returned, it needs no slot), a prefix of the
  unconstrained output."""
  ref = no_eos.to_lists()
  cache_length = 14
  res = generate(MODEL, PARAMS, PROMPTS, max_new_tokens=N_NEW, eos_token_id=None,
                 cache_length=cache_length)
  lens = np.asarray(res.lengths).tolist()
  reasons = np.asarray(res.finish_reason).tolist()
  for p, row, r_ref, n, reason in zip(PROMPTS, res.to_lists(), ref, lens, reasons):
    room = cache_length - len(p) + 1
    assert n == min(N_NEW, room)
    assert reason == (CACHE_FULL if room < N_NEW else MAX_TOKENS)
    assert row == r_ref[:n]
  assert CACHE_FULL in reasons and MAX_TOKENS in reasons
  assert np.asarray(res.target_calls).tolist() == [n - 1 for n in lens]
  # every row stops on a full cache: still one forward pass per token of the
  # longest row (no extra pass just to notice the cache is full)
  res = generate(MODEL, PARAMS, PROMPTS[1:3], max_new_tokens=N_NEW, eos_token_id=None,
                 cache_length=13)
  assert np.asarray(res.finish_reason).tolist() == [CACHE_FULL, CACHE_FULL]
  assert np.asarray(res.lengths).tolist() == [13 - 9 + 1, 13 - 5 + 1]
  assert res.to_lists() == [ref[1][:5], ref[2][:9]]
  assert np.asarray(res.target_calls).tolist() == [4, 8]


def test_one_compile_per_prompt_bucket():
  """Prompts of different lengths within one bucket (<= 16 tokens) reuse one
  compilation; a longer prompt (next bucket) compiles once more."""
  fn = ar._generate
  kw = dict(max_new_tokens=4, eos_token_id=None)
  rs = np.random.RandomState(1)
  generate(MODEL, PARAMS, [rs.randint(0, VOCAB, 2).tolist()] * 2, **kw)
  base = fn._cache_size()
  for lens in [(1, 16), (7, 3), (11, 11), (16, 5)]:
    generate(MODEL, PARAMS, [rs.randint(0, VOCAB, n).tolist() for n in lens], **kw)
    assert fn._cache_size() == base, f"recompiled for prompt lengths {lens}"
  generate(MODEL, PARAMS, [rs.randint(0, VOCAB, 17).tolist(), [1]], **kw)
  assert fn._cache_size() == base + 1


SAMPLED = SamplingConfig(temperature=1.0, top_k=20)


def test_sampling_reproducible_and_row_streams_independent_of_batch():
  key = jax.random.key(42)
  kw = dict(max_new_tokens=8, sampling=SAMPLED, eos_token_id=None)
  a = generate(MODEL, PARAMS, PROMPTS, key=key, **kw).to_lists()
  b = generate(MODEL, PARAMS, PROMPTS, key=key, **kw).to_lists()
  assert a == b
  c = generate(MODEL, PARAMS, PROMPTS, key=jax.random.key(43), **kw).to_lists()
  assert a != c
  # rows 2 and 3 alone, as global rows 2 and 3: the same streams
  d = generate(MODEL, PARAMS, PROMPTS[2:], key=key, row_offset=2, **kw).to_lists()
  assert d == a[2:]
  # without the offset they would be rows 0 and 1's streams: different samples
  e = generate(MODEL, PARAMS, PROMPTS[2:], key=key, **kw).to_lists()
  assert e != a[2:]
  # identical prompts in different rows draw different samples (per-row streams)
  f = generate(MODEL, PARAMS, [PROMPTS[0]] * 2, key=key, **kw).to_lists()
  assert f[0] == a[0] and f[1] != f[0]


# --- input validation ----------------------------------------------------------

def test_prompt_longer_than_cache():
  with pytest.raises(ValueError, match="prompt of 9 tokens does not fit the cache of length 8"):
    generate(MODEL, PARAMS, [[1, 2], [3] * 9], max_new_tokens=4, cache_length=8)
  with pytest.raises(ValueError, match="does not fit the cache of length 8"):
    generate(MODEL, PARAMS, [[3] * 8], max_new_tokens=4, cache_length=8)  # no room to generate
  with pytest.raises(ValueError, match="cache_length=0 must be a positive integer"):
    generate(MODEL, PARAMS, [[3]], max_new_tokens=4, cache_length=0)


def test_token_id_out_of_vocab():
  with pytest.raises(ValueError, match=r"prompt 1 has token ids outside \[0, 64\).*max 64"):
    generate(MODEL, PARAMS, [[1, 2], [5, 64]], max_new_tokens=2)
  with pytest.raises(ValueError, match=r"prompt 0 has token ids outside \[0, 64\).*min -1"):
    generate(MODEL, PARAMS, [[-1, 2]], max_new_tokens=2)


def test_bad_prompts_and_arguments():
  with pytest.raises(ValueError, match="prompts is empty"):
    generate(MODEL, PARAMS, [], max_new_tokens=2)
  with pytest.raises(ValueError, match="prompt 1 is empty"):
    generate(MODEL, PARAMS, [[1], []], max_new_tokens=2)
  with pytest.raises(ValueError, match="max_new_tokens=0 must be an integer >= 1"):
    generate(MODEL, PARAMS, [[1]], max_new_tokens=0)
  with pytest.raises(ValueError, match="PRNG key is required"):
    generate(MODEL, PARAMS, [[1]], max_new_tokens=2, sampling=SamplingConfig(temperature=1.0))
  with pytest.raises(ValueError, match="sampling must be a SamplingConfig"):
    generate(MODEL, PARAMS, [[1]], max_new_tokens=2, sampling={"temperature": 0.0})
  with pytest.raises(ValueError, match=r"tokens \[B, P\] and lengths \[B\]"):
    generate(MODEL, PARAMS, (np.zeros((2, 4), np.int32), np.array([1, 2, 3])), max_new_tokens=2)


def test_array_prompts_equal_list_prompts(no_eos):
  width = 16
  toks = np.zeros((len(PROMPTS), width), np.int32)
  for i, p in enumerate(PROMPTS):
    toks[i, :len(p)] = p
  lens = np.array([len(p) for p in PROMPTS], np.int32)
  res = generate(MODEL, PARAMS, (toks, lens), max_new_tokens=N_NEW, eos_token_id=None)
  assert res.to_lists() == no_eos.to_lists()


def test_prepared_decode_params(no_eos):
  """Params prepared once with Model.decode_params (per-layer trees, the CPU default)
  are accepted and give the same tokens; a wrong layer count is refused."""
  unrolled = dataclasses.replace(MODEL, layer_stack="unrolled")
  prepared = unrolled.decode_params(PARAMS)
  out = generate(unrolled, prepared, PROMPTS, max_new_tokens=N_NEW, eos_token_id=None)
  np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(no_eos.tokens))
  bad = {**prepared, "layers": prepared["layers"][:1]}
  with pytest.raises(ValueError, match="do not fit"):
    generate(unrolled, bad, PROMPTS, max_new_tokens=2)
