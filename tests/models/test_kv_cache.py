"""KV cache (no torch): per-row writes (write_tokens), commit, gather_path on
ragged rows, and the model-level contract that a tree-masked forward equals a
plain causal forward over each root->node path."""

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import kv_cache as kvc
from specjax.models.config import ModelConfig
from specjax.models.transformer import Model
from tests.helpers import random_params

L, B, S, H, D = 2, 3, 10, 1, 2


def _filled(lengths):
  """A cache whose entry at (layer l, row b, slot s) is [100 l + 10 b + s, -(...)]."""
  l, b, s = np.meshgrid(np.arange(L), np.arange(B), np.arange(S), indexing="ij")
  code = (100 * l + 10 * b + s).astype(np.float32)
  k = np.stack([code, -code], -1)[:, :, :, None, :]  # [L, B, S, 1, 2]
  return kvc.KVCache(jnp.asarray(k), jnp.asarray(k + 0.5), jnp.asarray(lengths, jnp.int32))


def test_init_cache():
  c = kvc.init_cache(L, B, S, H, D, jnp.bfloat16)
  assert c.k.shape == c.v.shape == (L, B, S, H, D) and c.k.dtype == jnp.bfloat16
  assert c.lengths.dtype == jnp.int32 and np.asarray(c.lengths).tolist() == [0] * B
  assert (c.max_length, c.batch_size) == (S, B)


def test_write_tokens_at_per_row_offsets():
  """One layer's T new entries land at each row's cursor; other layers and slots
  are untouched; slots past S are dropped."""
  lengths = np.array([0, 3, 7])
  c = _filled(lengths)
  new = -np.arange(1, B * 2 * H * D + 1, dtype=np.float32).reshape(B, 2, H, D)
  k = np.asarray(kvc.write_tokens(c.k, 1, jnp.asarray(new), c.lengths))
  k0 = np.asarray(c.k)
  np.testing.assert_array_equal(k[0], k0[0])  # another layer
  for b, o in enumerate(lengths):
    np.testing.assert_array_equal(k[1, b, o:o + 2], new[b])
    untouched = np.r_[0:o, o + 2:S]
    np.testing.assert_array_equal(k[1, b, untouched], k0[1, b, untouched])
  full = np.asarray(kvc.write_tokens(c.k, 0, jnp.asarray(new), jnp.asarray([S - 1] * B)))
  np.testing.assert_array_equal(full[0, :, S - 1], new[:, 0])  # the second token is dropped


def test_commit():
  c = kvc.init_cache(L, B, S, H, D)
  c = kvc.commit(c, jnp.array([2, 0, 5]))
  assert np.asarray(c.lengths).tolist() == [2, 0, 5]
  c = kvc.commit(c, jnp.array([1, 3, 0], jnp.int8))  # any int dtype; stays int32
  assert np.asarray(c.lengths).tolist() == [3, 3, 5] and c.lengths.dtype == jnp.int32
  # the next write lands at each row's committed cursor
  k = np.asarray(kvc.write_tokens(c.k, 0, jnp.ones((B, 1, H, D)), c.lengths))
  assert k[0, 0, 3].min() == 1 and k[0, 1, 3].min() == 1 and k[0, 2, 5].min() == 1


def test_gather_path_ragged_rows():
  """Rows with different prefix lengths and different accepted path lengths
  (including 0): the path nodes move to contiguous slots after the root."""
  lengths = np.array([2, 0, 4])
  # node j of row b's tree was written at slot lengths[b] + j; root is node 0
  path = np.array([[3, 5, 0], [1, 0, 0], [2, 4, 5]])
  num = np.array([2, 0, 3])
  c = _filled(lengths)
  g = kvc.gather_path(c, jnp.asarray(path), jnp.asarray(num))
  assert np.asarray(g.lengths).tolist() == (lengths + 1 + num).tolist()
  k, k0, v, v0 = map(np.asarray, (g.k, c.k, g.v, c.v))
  for b in range(B):
    o = lengths[b]
    np.testing.assert_array_equal(k[:, b, :o + 1], k0[:, b, :o + 1])  # prefix + root kept
    for i in range(num[b]):
      np.testing.assert_array_equal(k[:, b, o + 1 + i], k0[:, b, o + path[b, i]])
      np.testing.assert_array_equal(v[:, b, o + 1 + i], v0[:, b, o + path[b, i]])
    rest = np.arange(o + 1 + num[b], S)  # beyond the committed path: untouched
    np.testing.assert_array_equal(k[:, b, rest], k0[:, b, rest])


def test_gather_path_is_jittable():
  c = _filled(np.array([1, 1, 1]))
  f = jax.jit(kvc.gather_path)
  g = f(c, jnp.array([[2, 1], [1, 0], [0, 0]]), jnp.array([2, 1, 0]))
  assert np.asarray(g.lengths).tolist() == [4, 3, 2]
  np.testing.assert_array_equal(np.asarray(g.k)[:, 0, 2], np.asarray(c.k)[:, 0, 3])


# --- model level: tree attention == causal attention along each path ----------

CFG = ModelConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  rope_scaling=(("factor", 4.0), ("high_freq_factor", 4.0),
                                ("low_freq_factor", 1.0),
                                ("original_max_position_embeddings", 8),
                                ("rope_type", "llama3")))
MODEL = Model(CFG)


PARENTS = [-1, 0, 0, 1, 1, 3, 2]  # node 0 is the root (the last committed-next token)


def _ancestors(i):
  out = []
  while i >= 0:
    out.append(i)
    i = PARENTS[i]
  return out[::-1]  # root .. i


def test_tree_masked_forward_equals_causal_path_forward():
  params = random_params(MODEL)
  apply = jax.jit(MODEL.apply)
  rs = np.random.RandomState(0)
  n = len(PARENTS)
  prefix_lens = np.array([3, 6])
  prefixes = [rs.randint(0, 64, size=p).tolist() for p in prefix_lens]
  tree_toks = rs.randint(0, 64, size=(2, n))
  depth = np.array([len(_ancestors(i)) - 1 for i in range(n)])
  mask = np.zeros((n, n), bool)
  for i in range(n):
    mask[i, _ancestors(i)] = True

  # prefill the ragged prefixes (right padded), commit, then one tree forward
  width, cache_len = 8, 24
  pad = np.zeros((2, width), np.int32)
  for b, p in enumerate(prefixes):
    pad[b, :len(p)] = p
  pos = jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), (2, width))
  cache = kvc.commit(apply(params, jnp.asarray(pad), pos, MODEL.init_cache(2, cache_len)).cache,
                     jnp.asarray(prefix_lens))
  tree_pos = jnp.asarray(prefix_lens[:, None] + depth[None, :], jnp.int32)
  tree = apply(params, jnp.asarray(tree_toks, jnp.int32), tree_pos, cache,
               jnp.broadcast_to(jnp.asarray(mask), (2, n, n)))
  assert np.asarray(tree.cache.lengths).tolist() == prefix_lens.tolist()  # written, not committed

  # reference: plain causal forward over prefix + root..node, fixed width (one compile)
  ref_w = 16
  ref_pos = jnp.broadcast_to(jnp.arange(ref_w, dtype=jnp.int32), (2, ref_w))
  empty = MODEL.init_cache(2, ref_w)

  def plain_last_logits(seqs):
    toks = np.zeros((2, ref_w), np.int32)
    for b, s in enumerate(seqs):
      toks[b, :len(s)] = s
    logits = np.asarray(apply(params, jnp.asarray(toks), ref_pos, empty).logits)
    return [logits[b, len(s) - 1] for b, s in enumerate(seqs)]

  tree_logits = np.asarray(tree.logits)
  for i in range(n):
    seqs = [prefixes[b] + tree_toks[b, _ancestors(i)].tolist() for b in range(2)]
    for b, ref in enumerate(plain_last_logits(seqs)):
      np.testing.assert_allclose(tree_logits[b, i], ref, atol=1e-4, rtol=0)
  # the mask matters: sibling subtrees see different contexts
  assert np.abs(tree_logits[:, 3] - tree_logits[:, 6]).max() > 1e-2

  # accept root->1->3->5 in row 0 and root->2 in row 1, gather, then decode the
  # next token: it must see exactly prefix + accepted path
  path = jnp.array([[1, 3, 5], [2, 0, 0]])
  num = jnp.array([3, 1])
  cache = kvc.gather_path(tree.cache, path, num)
  assert np.asarray(cache.lengths).tolist() == (prefix_lens + 1 + np.array([3, 1])).tolist()
  nxt = rs.randint(0, 64, size=2)
  out = apply(params, jnp.asarray(nxt[:, None], jnp.int32), cache.lengths[:, None], cache)
  seqs = [prefixes[0] + tree_toks[0, [0, 1, 3, 5]].tolist() + [int(nxt[0])],
          prefixes[1] + tree_toks[1, [0, 2]].tolist() + [int(nxt[1])]]
  for b, ref in enumerate(plain_last_logits(seqs)):
    np.testing.assert_allclose(np.asarray(out.logits[b, 0]), ref, atol=1e-4, rtol=0)
