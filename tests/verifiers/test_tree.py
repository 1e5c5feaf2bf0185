"""Tree utilities and the generic tree driver on hand-built trees."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.decoding import tree as tr
from specjax.models import kv_cache as kvc
from tests import helpers
from tests.helpers import tiny_pair


def test_static_tree_layout():
  parents, depths, ranks = tr.static_tree([[0, 0], [1], [0], [0, 1], [0, 0, 0]])
  # sorted by depth then rank: [0], [1], [0,0], [0,1], [0,0,0]
  np.testing.assert_array_equal(parents, [0, 0, 1, 1, 3])
  np.testing.assert_array_equal(depths, [1, 1, 2, 2, 3])
  np.testing.assert_array_equal(ranks, [0, 1, 0, 1, 0])
  with pytest.raises(ValueError, match="no parent path"):
    tr.static_tree([[0, 1]])
  with pytest.raises(ValueError, match="unique"):
    tr.static_tree([[0], [0]])


def test_ancestor_mask_and_depths():
  parents = jnp.array([0, 0, 0, 1, 1, 3])  # tree indices incl. root
  m = np.asarray(tr.ancestor_mask(parents))
  expect = np.eye(6, dtype=bool)
  for i, anc in {1: [0], 2: [0], 3: [1, 0], 4: [1, 0], 5: [3, 1, 0]}.items():
    expect[i, anc] = True
  np.testing.assert_array_equal(m, expect)
  # The numpy mask of a static tree (what the tree drafters use at trace time) is the same.
  static = tr.static_ancestor_mask(np.array([0, 0, 1, 1, 3]))
  assert isinstance(static, np.ndarray) and static.dtype == bool
  np.testing.assert_array_equal(static, expect)
  rng = np.random.RandomState(0)
  for n in (1, 4, 9):
    node_parents = np.array([rng.randint(0, j + 1) for j in range(n)])  # parents[j] <= j
    np.testing.assert_array_equal(tr.static_ancestor_mask(node_parents),
                                  np.asarray(tr.ancestor_mask(tr.with_root(node_parents))))


@pytest.mark.parametrize("prefix_lengths", [(7, 7), (3, 9)])
def test_tree_forward_matches_path_forward(prefix_lengths):
  """Each tree node's logits equal a causal forward over prefix + its root path,
  for rows of different prefix lengths and a prompt as long as the tree."""
  target, tp, _, _ = tiny_pair(vocab=32)
  apply = jax.jit(target.apply)
  parents_nodes, depths_nodes, _ = tr.static_tree([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
  n = len(parents_nodes)
  tree_par = jnp.asarray(np.concatenate([[0], parents_nodes]))
  depths = np.concatenate([[0], depths_nodes])
  rs = np.random.RandomState(0)
  b = len(prefix_lengths)
  tokens = rs.randint(0, 32, size=(b, n + 1))
  prefixes = [rs.randint(0, 32, size=l) for l in prefix_lengths]
  s = 32
  cache = target.init_cache(b, s)
  pmax = max(prefix_lengths)
  ptoks = np.zeros((b, pmax), np.int32)
  for i, p in enumerate(prefixes):
    ptoks[i, :len(p)] = p
  out = apply(tp, jnp.asarray(ptoks), jnp.broadcast_to(jnp.arange(pmax), (b, pmax)), cache)
  cache = kvc.commit(out.cache, jnp.asarray(prefix_lengths))
  lens = jnp.asarray(prefix_lengths)
  mask = jnp.broadcast_to(tr.ancestor_mask(tree_par), (b, n + 1, n + 1))
  o = apply(tp, jnp.asarray(tokens), lens[:, None] + jnp.asarray(depths)[None], cache,
                   attn_mask=mask)
  anc = np.asarray(tr.ancestor_mask(tree_par))
  seqs = [np.concatenate([prefixes[row], tokens[row, np.nonzero(anc[node])[0]]])
          for row in range(b) for node in range(n + 1)]  # prefix + root..node path
  longest = max(len(q) for q in seqs)
  batch = np.zeros((len(seqs), longest), np.int32)
  for i, q in enumerate(seqs):
    batch[i, :len(q)] = q
  ref = apply(tp, jnp.asarray(batch), jnp.broadcast_to(jnp.arange(longest), batch.shape),
                     target.init_cache(len(seqs), s),
                     logits_index=jnp.asarray([[len(q) - 1] for q in seqs])).logits[:, 0]
  np.testing.assert_allclose(o.logits.reshape(len(seqs), -1), ref, atol=1e-4)


def test_gather_path_then_decode_matches_plain_decode():
  """After committing an accepted tree path, the cache equals one built by a
  plain causal forward over the same tokens (rows with different paths)."""
  target, tp, _, _ = tiny_pair(vocab=32)
  apply = jax.jit(target.apply)
  parents_nodes, depths_nodes, _ = tr.static_tree([[0], [1], [0, 0], [1, 0], [1, 0, 0]])
  tree_par = jnp.asarray(np.concatenate([[0], parents_nodes]))
  depths = np.concatenate([[0], depths_nodes])
  tokens = jnp.asarray(np.random.RandomState(1).randint(0, 32, size=(2, 6)))
  cache = target.init_cache(2, 24)
  pre = jnp.asarray([[3, 4, 5, 6], [7, 8, 0, 0]])
  lens = jnp.asarray([4, 2])
  cache = kvc.commit(apply(tp, pre, jnp.broadcast_to(jnp.arange(4), (2, 4)), cache).cache,
                     lens)
  mask = jnp.broadcast_to(tr.ancestor_mask(tree_par), (2, 6, 6))
  o = apply(tp, tokens, lens[:, None] + jnp.asarray(depths)[None], cache, attn_mask=mask)
  path = jnp.asarray([[1, 3, 0], [2, 4, 5]])  # row 0: nodes 1,3 ; row 1: nodes 2,4,5
  nacc = jnp.asarray([2, 3])
  c2 = kvc.gather_path(o.cache, path, nacc)
  np.testing.assert_array_equal(c2.lengths, lens + 1 + nacc)
  nxt = apply(tp, jnp.asarray([[9], [9]]), c2.lengths[:, None], c2).logits[:, 0]
  for row, (p, l) in enumerate([([3, 4, 5, 6], 4), ([7, 8], 2)]):
    seq = p + [int(tokens[row, 0])] + [int(tokens[row, j]) for j in path[row, :nacc[row]]] + [9]
    ref = apply(tp, jnp.asarray(seq)[None], jnp.arange(len(seq))[None],
                       target.init_cache(1, 24)).logits[0, -1]
    np.testing.assert_allclose(nxt[row], ref, atol=1e-4)


def _enumerate_tree(rule, z, p, q, x, parent, uniforms_grid):
  """Exact emitted-token distribution of the tree driver by summing over the
  acceptance outcomes of every node (small trees only)."""
  n1 = x.shape[0]
  v = z.shape[1]
  total = np.zeros(v)
  # Each node is decided by one uniform; acceptance of node j has probability a_j
  # given the state, which depends on history: recurse.
  def walk(cur, state, tried, prob):
    children = [j for j in range(1, n1) if int(parent[j]) == cur and j > tried]
    if not children:
      total[:] += prob * np.asarray(rule.correction(state))
      return
    j = children[0]
    a = float(rule.accept_prob(state, q[j], x[j]))
    if a > 0:
      walk(j, rule.init(z[j], p[j]), 0, prob * a)
    if a < 1:
      walk(cur, rule.on_reject(state, q[j], x[j]), j, prob * (1 - a))
  walk(0, rule.init(z[0], p[0]), 0, 1.0)
  return total


def test_verify_tree_distribution_matches_enumeration_and_chain_equivalence():
  v = 6
  rs = np.random.RandomState(0)
  parent = jnp.asarray([0, 0, 0, 1, 1, 2])
  x = jnp.asarray([0, 1, 2, 1, 3, 0])
  z = jnp.asarray(rs.randn(6, v) * 2, jnp.float32)
  p = jax.nn.softmax(z)
  q = jax.nn.one_hot(x, v)
  rule = verifiers.get("lossless")
  exact = _enumerate_tree(rule, z, p, q, x, parent, None)
  # Lossless: the first emitted token (root's) ... the *path+token* law is what
  # the driver samples; check the first token of the output = first accepted
  # child or the emitted token, against p[0].
  n = 40000
  keys = jax.random.split(jax.random.key(0), n)
  us = jax.random.uniform(jax.random.key(1), (n, 6))
  res = jax.jit(jax.vmap(lambda u, k: helpers.verify_tree(rule, z, p, q, x, parent, u, k)))(us, keys)
  first = np.where(np.asarray(res.num_accepted) > 0, np.asarray(x)[np.asarray(res.path[:, 0])],
                   np.asarray(res.token))
  freq = np.bincount(first, minlength=v) / n
  # TV tolerance: E[TV] <= 0.5 sqrt(V / n) ~ 0.006; 0.02 is > 3x that (McDiarmid: P < 1e-6).
  assert 0.5 * np.abs(freq - np.asarray(p[0])).sum() < 0.02
  # P(no root child accepted) = 1 - p(x_1) - p(x_2) for one-hot lossless siblings.
  none = np.asarray(res.num_accepted) == 0
  assert abs(none.mean() - (1 - float(p[0, 1]) - float(p[0, 2]))) < 0.01  # ~4 sigma at n=40000
  # The final emitted token's law matches the exact enumeration over the tree.
  tok_freq = np.bincount(np.asarray(res.token), minlength=v) / n
  assert 0.5 * np.abs(tok_freq - exact).sum() < 0.02
  # A chain-shaped tree gives exactly the chain driver's result for the same uniforms.
  chain_par = jnp.asarray([0, 0, 1, 2])
  xc = jnp.asarray([0, 2, 1, 4])
  zc, pc = z[:4], p[:4]
  qc = jax.nn.one_hot(xc, v)
  u = jax.random.uniform(jax.random.key(100), (200, 4))
  kk = jax.random.split(jax.random.key(200), 200)
  t = jax.jit(jax.vmap(lambda u, k: helpers.verify_tree(rule, zc, pc, qc, xc, chain_par, u, k)))(u, kk)
  c = jax.jit(jax.vmap(lambda u, k: helpers.verify_chain(rule, zc, pc, qc[1:], xc[1:], u[1:], k)))(u, kk)
  np.testing.assert_array_equal(t.num_accepted, c.num_accepted)
  assert 0 < np.asarray(c.num_accepted).mean() < 3  # both outcomes occur
  np.testing.assert_allclose(t.emit_probs, c.emit_probs, atol=1e-6)
  np.testing.assert_array_equal(t.token, c.token)
  assert exact.sum() == pytest.approx(1.0)
