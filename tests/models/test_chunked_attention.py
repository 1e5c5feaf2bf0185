"""Length-bounded decode attention (specjax.models.transformer.chunked_attention): equal
to attending over the whole cache, whatever the chunking, and chosen by
$SPECJAX_ATTENTION_CHUNK."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models import kv_cache as kvc
from specjax.models import transformer as tr
from specjax.models.config import ModelConfig


def _case(b, t, s, seed=0, layers=2, layer=1):
  rs = np.random.RandomState(seed)
  qg = jnp.asarray(rs.randn(b, t, 2, 3, 8), jnp.float32)
  k_all = jnp.asarray(rs.randn(layers, b, s, 2, 8), jnp.float32)
  v_all = jnp.asarray(rs.randn(layers, b, s, 2, 8), jnp.float32)
  lengths = jnp.asarray(rs.randint(0, s - t + 1, b), jnp.int32)
  tree = jnp.asarray(rs.rand(b, t, t) < 0.5) | jnp.eye(t, dtype=bool)[None]
  mask = tr.visibility_mask(lengths, t, s, jnp.tril(tree))
  return qg, k_all, v_all, layer, mask, lengths


# (rows, new tokens, cache slots, chunk): one chunk, chunks dividing S, a last chunk that
# overlaps the one before (S = 700), a tree-sized T, a chunk as large as S.
@pytest.mark.parametrize("b,t,s,chunk", [(3, 1, 64, 64), (2, 1, 512, 128), (2, 5, 700, 256),
                                         (4, 24, 320, 64), (1, 9, 96, 96)])
def test_chunked_equals_full_attention(b, t, s, chunk):
  """Equal up to float rounding (atol 2e-6 on outputs of size ~1). Dropping the rule that a
  clamped last chunk ignores the slots before ``c * chunk`` counts them twice (S = 700)
  and fails here (checked by hand)."""
  qg, k_all, v_all, layer, mask, lengths = _case(b, t, s)
  full = tr.full_attention(qg, k_all[layer], v_all[layer], mask, jnp.float32)
  fn = jax.jit(tr.chunked_attention, static_argnums=(6, 7))
  got = fn(qg, k_all, v_all, layer, mask, jnp.max(lengths) + t, chunk, jnp.float32)
  np.testing.assert_allclose(np.asarray(got), np.asarray(full), atol=2e-6)


def test_chunks_past_the_extent_are_not_read():
  """Slots past the longest row + T are skipped: filling them with nan changes nothing
  (the full einsum would read them, and 0 * nan is nan)."""
  qg, k_all, v_all, layer, mask, lengths = _case(2, 1, 512, seed=1)
  lengths = jnp.asarray([40, 90], jnp.int32)
  mask = tr.visibility_mask(lengths, 1, 512, None)
  clean = tr.chunked_attention(qg, k_all, v_all, layer, mask, jnp.int32(91), 64, jnp.float32)
  poisoned_k = k_all.at[:, :, 128:].set(jnp.nan)
  poisoned_v = v_all.at[:, :, 128:].set(jnp.nan)
  got = tr.chunked_attention(qg, poisoned_k, poisoned_v, layer, mask, jnp.int32(91), 64,
                             jnp.float32)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(clean))
  assert np.isfinite(np.asarray(got)).all()


@pytest.mark.slow
def test_gradient_and_vmap_pass_through():
  """The chunk loop is a scan of conds: reverse-mode differentiable (training forwards of
  at most 64 tokens take this path) and vmappable, with the full path's gradient."""
  qg, k_all, v_all, layer, mask, lengths = _case(2, 3, 128, seed=2)
  ext = jnp.max(lengths) + 3
  g_chunk = jax.grad(lambda q: tr.chunked_attention(q, k_all, v_all, layer, mask, ext, 32,
                                                    jnp.float32).sum())(qg)
  g_full = jax.grad(lambda q: tr.full_attention(q, k_all[layer], v_all[layer], mask,
                                                jnp.float32).sum())(qg)
  np.testing.assert_allclose(np.asarray(g_chunk), np.asarray(g_full), atol=1e-5)
  batched = jax.vmap(lambda q: tr.chunked_attention(q[None], k_all[:, :1], v_all[:, :1], layer,
                                                    mask[:1], ext, 32, jnp.float32)[0])(qg[:1])
  np.testing.assert_allclose(np.asarray(batched),
                             np.asarray(tr.chunked_attention(qg[:1], k_all[:, :1], v_all[:, :1],
                                                             layer, mask[:1], ext, 32,
                                                             jnp.float32)), atol=1e-6)


def test_gradient_is_finite_where_a_query_sees_nothing_yet():
  """A query that sees no slot at all (a padding row in training) or none in its first
  chunk: every gradient stays finite, and where the query sees something it equals the
  full path's. Masking exp(sc - m) after the fact (m = -1e30 there, so exp overflows to
  inf) sends 0 * inf = nan back and fails here; that was a CI failure of training the
  draft LM from a store."""
  qg, k_all, v_all, layer, _, _ = _case(2, 3, 128, seed=3)
  mask = tr.visibility_mask(jnp.asarray([0, 70], jnp.int32), 3, 128, None)
  mask = mask.at[0, 1].set(False).at[1, :, :64].set(False)
  seen = np.asarray(mask.any(-1))  # [B, T]

  def loss(attend, q, k, v):
    out = attend(q, k, v)  # [B, T, KVH, G, D]
    return jnp.where(jnp.asarray(seen)[:, :, None, None, None], out, 0.0).sum()

  chunked = lambda q, k, v: tr.chunked_attention(q, k, v, layer, mask, jnp.int32(73), 32,
                                                 jnp.float32)
  full = lambda q, k, v: tr.full_attention(q, k[layer], v[layer], mask, jnp.float32)
  g_chunk = jax.jit(jax.grad(lambda *a: loss(chunked, *a), argnums=(0, 1, 2)))(qg, k_all, v_all)
  g_full = jax.jit(jax.grad(lambda *a: loss(full, *a), argnums=(0, 1, 2)))(qg, k_all, v_all)
  for got, want in zip(g_chunk, g_full):
    assert np.isfinite(np.asarray(got)).all()
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5)


@pytest.mark.parametrize("value,want", [("0", 0), ("128", 128), ("auto", 256), ("", 256)])
def test_resolve_attention_chunk(monkeypatch, value, want):
  monkeypatch.setenv("SPECJAX_ATTENTION_CHUNK", value)
  assert tr.resolve_attention_chunk() == (want if jax.default_backend() == "cpu" or value
                                          not in ("auto", "") else 0)


def test_bad_attention_chunk_is_named(monkeypatch):
  monkeypatch.setenv("SPECJAX_ATTENTION_CHUNK", "100")
  with pytest.raises(ValueError, match="SPECJAX_ATTENTION_CHUNK='100'.*one of"):
    tr.resolve_attention_chunk()


@pytest.mark.slow
def test_model_decode_forward_same_either_way(monkeypatch):
  """A model's decode forward (T = 3 over a 200-slot cache with ragged rows) gives the same
  logits with the whole-cache einsum and with chunks of 64."""
  cfg = ModelConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8)
  model = tr.Model(cfg)
  params = model.init_params(jax.random.key(0))
  rs = np.random.RandomState(3)
  cache = kvc.init_cache(2, 2, 200, 2, 8)
  cache = kvc.KVCache(jnp.asarray(rs.randn(*cache.k.shape), jnp.float32),
                      jnp.asarray(rs.randn(*cache.v.shape), jnp.float32),
                      jnp.asarray([17, 130], jnp.int32))
  tokens = jnp.asarray([[1, 2, 3], [4, 5, 6]])
  positions = cache.lengths[:, None] + jnp.arange(3)[None]
  out = {}
  for chunk in ("0", "64"):
    monkeypatch.setenv("SPECJAX_ATTENTION_CHUNK", chunk)
    out[chunk] = jax.jit(model.apply)(params, tokens, positions, cache).logits
  np.testing.assert_allclose(np.asarray(out["64"]), np.asarray(out["0"]), atol=1e-5)
