"""The decode loops' forms of a forward: the read-only forward of a bucketed verify
(``Model.apply(write_cache=False)`` + ``kv_cache.write_layers``), the fused gate / up
projection of ``Model.decode_params``, and bfloat16 weights of a float32 model
(``cast_weights``: mixed-precision matmuls)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.decoding.autoregressive import generate
from specjax.decoding.drafters import LMDrafter
from specjax.decoding.speculative import speculative_generate
from specjax.distributions import SamplingConfig
from specjax.models import kv_cache as kvc
from specjax.models.config import ModelConfig
from specjax.models.transformer import (Model, cast_weights, fuse_projections, matmul,
                                        split_projections)
from tests.helpers import TINY, random_params


def _setup(tie: bool, layer_stack: str, t: int = 3):
  model = Model(ModelConfig(**TINY, hidden_layers=(0, 2), tie_word_embeddings=tie),
                layer_stack=layer_stack)
  params = model.decode_params(random_params(model))
  toks = jnp.asarray(np.random.RandomState(1).randint(0, 64, (2, t)), jnp.int32)
  cache = kvc.commit(model.init_cache(2, 16), jnp.array([3, 6]))
  cache = kvc.KVCache(cache.k + 0.5, cache.v - 0.25, cache.lengths)  # committed slots != 0
  pos = cache.lengths[:, None] + jnp.arange(t)
  return model, params, toks, pos, cache


@pytest.mark.parametrize("tie, layer_stack", [(True, "unrolled"), (False, "rolled")])
def test_read_only_forward_is_the_writing_forward(tie, layer_stack):
  """Same logits and hidden states bit for bit, the cache passed back unwritten, and
  the returned keys / values written by ``write_layers`` give the writing forward's
  cache (every committed slot exactly; the new slots up to XLA's rounding of RoPE in
  another fusion).  With a tree mask too.  Broken variant caught: attention that
  ignores the overlay (reads the unwritten slots) changes the logits."""
  model, params, toks, pos, cache = _setup(tie, layer_stack)
  mask = jnp.broadcast_to(jnp.tril(jnp.ones((3, 3), bool)).at[2, 1].set(False), (2, 3, 3))
  for attn_mask in (None, mask):
    write = jax.jit(lambda p: model.apply(p, toks, pos, cache, attn_mask))(params)
    read = jax.jit(lambda p: model.apply(p, toks, pos, cache, attn_mask,
                                         write_cache=False))(params)
    np.testing.assert_array_equal(np.asarray(read.logits), np.asarray(write.logits))
    np.testing.assert_array_equal(np.asarray(read.hidden_states),
                                  np.asarray(write.hidden_states))
    np.testing.assert_array_equal(np.asarray(read.cache.k), np.asarray(cache.k))
    assert write.new_kv is None and read.new_kv[0].shape == (2, 2, 3, 2, 8)
    written = kvc.write_layers(cache, *read.new_kv)
    for got, want in ((written.k, write.cache.k), (written.v, write.cache.v)):
      np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
      np.testing.assert_array_equal(np.asarray(got)[:, 0, :3], np.asarray(want)[:, 0, :3])


def test_write_layers_writes_at_each_cursor_and_drops_past_the_end():
  cache = kvc.KVCache(jnp.zeros((2, 2, 5, 1, 1)), jnp.zeros((2, 2, 5, 1, 1)),
                      jnp.array([1, 3], jnp.int32))
  new = jnp.arange(1, 13, dtype=jnp.float32).reshape(2, 2, 3, 1, 1)  # [L, B, T=3, 1, 1]
  out = kvc.write_layers(cache, new, -new)
  k = np.asarray(out.k)[..., 0, 0]
  np.testing.assert_array_equal(k[0], [[0, 1, 2, 3, 0], [0, 0, 0, 4, 5]])  # slot 5 dropped
  np.testing.assert_array_equal(k[1], [[0, 7, 8, 9, 0], [0, 0, 0, 10, 11]])
  np.testing.assert_array_equal(np.asarray(out.v), -np.asarray(out.k))
  np.testing.assert_array_equal(np.asarray(out.lengths), [1, 3])  # written, not committed


def test_fused_projections_round_trip():
  model = Model(ModelConfig(**TINY), layer_stack="unrolled")
  layer = jax.tree.map(lambda w: w[0], random_params(model)["layers"])
  fused = fuse_projections(layer)
  assert "gate_up_proj" in fused["mlp"] and "gate_proj" not in fused["mlp"]
  assert fused["mlp"]["gate_up_proj"]["kernel"].shape == (32, 2, 64)
  assert fuse_projections(fused) is not None and "gate_up_proj" in fuse_projections(fused)["mlp"]
  back = split_projections(fused, model.config)
  for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(layer)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_matmul_mixed_precision():
  """Weights in the compute dtype: nn.Dense's product.  Narrower weights: the
  activations rounded to the weights' dtype and float32 accumulation -- exactly
  the float32 product of the rounded operands (all products and sums of bfloat16
  inputs here are exact in float32); a single row (padded to two on CPU) equals the
  same row of a batch.  Broken variant caught: accumulating in bfloat16."""
  rs = np.random.RandomState(0)
  x = jnp.asarray(rs.randint(-64, 64, (3, 64)), jnp.float32) / 64  # exact in bfloat16
  w = jnp.asarray(rs.randint(-8, 8, (64, 5)), jnp.float32) / 8     # sums need ~15 bits
  np.testing.assert_array_equal(np.asarray(matmul(x, w, jnp.float32)), np.asarray(x @ w))
  got = matmul(x, w.astype(jnp.bfloat16), jnp.float32)
  assert got.dtype == jnp.float32
  np.testing.assert_array_equal(np.asarray(got), np.asarray(x @ w))
  np.testing.assert_array_equal(np.asarray(matmul(x[1:2], w.astype(jnp.bfloat16), jnp.float32)),
                                np.asarray(got[1:2]))
  np.testing.assert_array_equal(  # w [out, in]
      np.asarray(matmul(x, w.T.astype(jnp.bfloat16), jnp.float32, w_contract=1)), np.asarray(got))


@pytest.mark.slow  # ~10 s (default-suite budget); the mixed matmul tests stay in the default suite
def test_bfloat16_weights_model():
  """``cast_weights``: bfloat16 params, float32 activations and logits, close to the
  float32 model; its greedy speculative output equals its own greedy target-only
  output (the cast model is the target)."""
  model = Model(ModelConfig(**TINY), layer_stack="unrolled")
  params = random_params(model, std=0.1)
  bmodel, bparams = cast_weights(model, params, "bfloat16")
  assert bmodel.config.param_dtype == "bfloat16" and bmodel.config.dtype == "float32"
  assert all(w.dtype == jnp.bfloat16 for w in jax.tree.leaves(bparams))
  cache = model.init_cache(1, 8)
  toks, pos = jnp.array([[3, 9, 1]]), jnp.arange(3)[None]
  f32 = model.apply(params, toks, pos, cache).logits
  b16 = bmodel.apply(bmodel.decode_params(bparams), toks, pos, bmodel.init_cache(1, 8)).logits
  assert b16.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(b16), np.asarray(f32), atol=0.05)
  prompts = [[1, 2, 3], [4, 5]]
  ref = generate(bmodel, bparams, prompts, max_new_tokens=8, eos_token_id=None).to_lists()
  drafter = LMDrafter(2, SamplingConfig(temperature=0.0), model)  # a float32 drafter
  out = speculative_generate(bmodel, bparams, drafter, params, verifiers.get("lossless"),
                             prompts, max_new_tokens=8, eos_token_id=None).to_lists()
  assert out == ref
