"""Small random models shared by the loop tests (no training, no files), the EAGLE
tests' target and heads, random chain tables, the martingale z-test of the lossless
tests, and the Monte Carlo of path-rule samplers against their exact laws."""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.config import ModelConfig
from specjax.models.transformer import Model

# ModelConfig fields of the model tests' 2-layer model (V = 64).
TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=8)
# The EAGLE tests' target config (4 layers, V = 32).
TC = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=8)
DRAFT_IDS = np.arange(0, TC.vocab_size, 2)  # a reduced 16-token draft vocabulary


def scaled_params(model: Model, seed: int, scale: float):
  """Random params with kernels scaled up so next-token distributions are peaked."""
  p = model.init_params(jax.random.key(seed))
  return jax.tree.map(lambda x: x * scale if x.ndim > 1 else x, p)


def tiny_pair(vocab: int = 32, eos: int | None = None, scale: float = 6.0, noise: float = 0.02,
              seed: int = 0):
  """A target and a draft LM of the *same* architecture whose params are the
  target's plus noise, so acceptance is neither ~0 nor ~1."""
  cfg = ModelConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=8, eos_token_id=eos)
  target, tp, dp = noisy_pair(cfg, seed, noise, scale)
  return target, tp, Model(cfg), dp


def noisy_pair(cfg: ModelConfig, seed: int = 0, noise: float = 0.02, scale: float = 6.0):
  """``(Model(cfg), target params, draft params)``: draft = target + noise, kernels
  scaled by ``scale`` so next-token distributions are peaked."""
  target = Model(cfg)
  tp = scaled_params(target, seed, scale)
  leaves, tree = jax.tree.flatten(tp)
  keys = jax.random.split(jax.random.key(seed + 100), len(leaves))
  dp = jax.tree.unflatten(tree, [l + noise * scale * jax.random.normal(k, l.shape)
                                 if l.ndim > 1 else l for l, k in zip(leaves, keys)])
  return target, tp, dp


def ragged_prompts(n: int, vocab: int, seed: int = 0, max_len: int = 13) -> list[list[int]]:
  """``n`` random prompts of 1..max_len - 1 tokens from ids 4..vocab - 1."""
  import numpy as np
  rs = np.random.RandomState(seed)
  return [rs.randint(4, vocab, size=rs.randint(1, max_len)).tolist() for _ in range(n)]


def random_params(model, seed=0, std=0.3):
  """O(1) weights (norm weights around 1) so generations are not constant."""
  rs = np.random.RandomState(seed)

  def make(path, s):
    noise = (std * rs.randn(*s.shape)).astype(np.float32)
    return jnp.asarray(1.0 + noise if "norm" in jax.tree_util.keystr(path) else noise)

  return jax.tree_util.tree_map_with_path(make, jax.eval_shape(model.init_params,
                                                               jax.random.key(0)))


def independent_draft(vocab: int = 32, eos: int | None = None, seed: int = 7):
  """A 1-layer draft LM with its own random params (different architecture)."""
  cfg = ModelConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32,
                    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                    head_dim=8, eos_token_id=eos)
  m = Model(cfg)
  return m, scaled_params(m, seed, 4.0)


def sharpened_noisy_pair(vocab: int = 32, seed: int = 7, sharpen: float = 1.5,
                         noise: float = 0.05):
  """``(model, target_params, draft_params)``: :func:`independent_draft`'s model with
  its weight matrices scaled by ``sharpen`` as target, and the target plus Gaussian
  noise on every matrix as draft (the verify-length policy tests' pair)."""
  model, tp = independent_draft(vocab=vocab, seed=seed)
  tp = jax.tree.map(lambda x: x * sharpen if x.ndim > 1 else x, tp)
  leaves, tree = jax.tree.flatten(tp)
  keys = jax.random.split(jax.random.key(1), len(leaves))
  dp = jax.tree.unflatten(tree, [l + noise * jax.random.normal(kk, l.shape) if l.ndim > 1
                                 else l for l, kk in zip(leaves, keys)])
  return model, tp, dp


def eagle_target():
  """The EAGLE tests' target: ``(Model(TC), params)``, kernels scaled so drafts are peaked."""
  target = Model(TC)
  return target, scaled_params(target, 0, 6.0)


def eagle_head(kind, reduced=False, seed=1, scale=3.0):
  """``(head, params, d2t)``: a random EAGLE head of ``kind`` for :data:`TC` (``reduced``:
  over the draft vocabulary :data:`DRAFT_IDS`)."""
  from specjax.models import eagle
  cfg = eagle.EagleConfig.for_target(TC, kind, draft_vocab_size=16 if reduced else None)
  head = eagle.EagleHead(cfg)
  p = head.init_params(jax.random.key(seed))
  p = jax.tree.map(lambda x: x * scale if x.ndim > 1 else x, p)  # peaked drafts
  d2t = eagle.vocab_maps(DRAFT_IDS, TC.vocab_size)[0] if reduced else None
  return head, p, d2t


def teacher_forced_probs(model: Model, params, prompt, generated, sampling):
  """Exact target distributions ``[B, n, V]`` at every generated position,
  given each row's own prefix (prompt + generated[:, :t])."""
  from specjax.distributions import probs_from_logits
  b, n = generated.shape
  seq = jnp.concatenate([jnp.broadcast_to(jnp.asarray(prompt), (b, len(prompt))), generated], 1)
  t = seq.shape[1]
  cache = model.init_cache(b, t)
  pos = jnp.broadcast_to(jnp.arange(t), (b, t))
  logits = model.apply(params, seq, pos, cache).logits
  return probs_from_logits(logits[:, len(prompt) - 1:len(prompt) - 1 + n], sampling)


def martingale_z(tokens, probs, lengths):
  """z-scores of sum_i (onehot(y_i) - p_i) over valid positions, per vocab entry.

  Under H0 (y_i ~ p_i given its prefix) each summand has mean 0 given the past,
  so by the martingale CLT z_v ~ N(0, 1) for every v.
  """
  v = probs.shape[-1]
  valid = (np.arange(tokens.shape[1])[None, :] < lengths[:, None])[..., None]
  onehot = np.eye(v)[tokens] * valid
  p = np.asarray(probs, np.float64) * valid
  num = (onehot - p).sum((0, 1))
  var = (p * (1 - p)).sum((0, 1))
  return np.where(var > 1e-9, num / np.sqrt(np.maximum(var, 1e-12)), 0.0)


# Random cases in numpy (no per-shape compile of jax's samplers).
def rand_dists(rng, shape, v, zero_frac=0.25, onehot_frac=0.15):
  """[*shape, V] Dirichlet(0.5) rows with ~zero_frac entries zeroed and ~onehot_frac one-hot rows."""
  d = rng.dirichlet(np.full(v, 0.5), size=shape)
  d = np.where(rng.random(d.shape) < zero_frac, 0.0, d)
  d[..., 0] += (d.sum(-1) == 0)  # keep a row that lost everything
  d = d / d.sum(-1, keepdims=True)
  onehot = np.eye(v)[rng.integers(0, v, size=shape)]
  return np.where((rng.random(shape) < onehot_frac)[..., None], onehot, d).astype(np.float32)


def rand_tables(seed, batch, v, k):
  """``(ChainTables, length [batch])`` of :func:`rand_dists` rows, a third of the chains full."""
  from specjax.analysis import path_law as pl
  rng = np.random.default_rng(seed)
  p = tuple(jnp.asarray(rand_dists(rng, (batch,) + (v,) * i, v)) for i in range(k + 1))
  q = tuple(jnp.asarray(rand_dists(rng, (batch,) + (v,) * i, v)) for i in range(k))
  length = rng.integers(1, k + 1, size=batch)
  length[: batch // 3] = k  # a third of the chains are full
  return pl.ChainTables(p=p, q=q), jnp.asarray(length, jnp.int32)


def path_decision_frequencies(pairs, z, p, q, x, length, key, num_samples: int):
  """Monte Carlo of path-rule samplers against exact laws (V small, rows [B]).

  For each ``(sampler, law_rule)`` of ``pairs`` and each row: the frequencies of the
  sampler's ``num_accepted`` over ``num_samples`` uniform vectors, the law rule's
  ``accept_length_law``, and ``max |emit_dist - emit_dists[num_accepted]|`` over the
  draws.  ``z, p [B, K+1, V]``, ``q [B, K, V]``, ``x [B, K]``, ``length [B]``.
  Returns three arrays ``[pairs, B, K+1]``, ``[pairs, B, K+1]``, ``[pairs, B]``;
  ``pairs`` and ``num_samples`` are static (one compile per set of rules).
  """
  return _path_decision_frequencies(tuple(pairs), num_samples, z, p, q, x, length, key)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _path_decision_frequencies(pairs, num_samples, z, p, q, x, length, key):
  b, k = x.shape
  u = jax.random.uniform(key, (b, num_samples, k))
  out = []
  for sampler, law_rule in pairs:
    def row(zz, pp, qq, xx, n, uu, s=sampler, r=law_rule):
      dec = jax.vmap(lambda ui: s.verify_path(zz, pp, qq, xx, ui, n))(uu)
      freq = jnp.bincount(dec.num_accepted, length=k + 1) / num_samples
      emits = r.emit_dists(zz, pp, qq, xx, n)
      return (freq, r.accept_length_law(zz, pp, qq, xx, n),
              jnp.max(jnp.abs(dec.emit_dist - emits[dec.num_accepted])))
    out.append(jax.vmap(row)(z, p, q, x, length, u))
  return tuple(jnp.stack(a) for a in zip(*out))


class ChainOutcome(NamedTuple):
  """One row of a node rule on a chain (see :func:`verify_chain`)."""

  num_accepted: jax.Array  # [] int32 leading drafts accepted
  token: jax.Array  # [] int32 the emitted token
  accepted: jax.Array  # [K] bool draft i accepted
  num_relaxed: jax.Array  # [] int32 acceptances only the relaxation allowed
  emit_probs: jax.Array  # [V] the distribution the token was drawn from


def verify_chain(rule, z, p, q, x, u, key, num_valid=None, q_node=None) -> ChainOutcome:
  """A node rule on one row's chain through the library's one chain driver
  (``NodePathRule(rule).verify_path``), the token drawn from its ``emit_dist`` with
  ``key`` as the loop draws it (z, p [K+1, V]; q [K, V]; x, u [K])."""
  from specjax.distributions import sample_from_probs
  from specjax.verifiers.path import NodePathRule
  dec = NodePathRule(rule).verify_path(z, p, q, x, u, length=num_valid, q_node=q_node)
  accepted = jnp.arange(x.shape[0]) < dec.num_accepted
  return ChainOutcome(dec.num_accepted, sample_from_probs(key, dec.emit_dist), accepted,
                      dec.num_relaxed, dec.emit_dist)


class TreeOutcome(NamedTuple):
  """One row of a node rule on a tree (see :func:`verify_tree`)."""

  path: jax.Array  # [N] int32 accepted nodes in depth order (root excluded), 0-padded
  num_accepted: jax.Array  # [] int32 the path's length
  token: jax.Array  # [] int32 the emitted token
  num_relaxed: jax.Array  # [] int32 relaxed acceptances along the path
  emit_probs: jax.Array  # [V] the distribution the token was drawn from


def verify_tree(rule, z, p, q, x, parent, u, key, valid=None, q_node=None) -> TreeOutcome:
  """A node rule on one row's tree through the library's one tree driver
  (``NodeTreeRule(rule).verify_tree_path``), the token drawn from its ``emit_dist``
  with ``key`` as the loop draws it (z, p, q [N+1, V]; x, parent, u [N+1])."""
  from specjax.distributions import sample_from_probs
  from specjax.verifiers.tree_rule import NodeTreeRule
  dec = NodeTreeRule(rule).verify_tree_path(z, p, q, x, parent, u, valid=valid, q_node=q_node)
  return TreeOutcome(dec.path[1:], dec.num_accepted, sample_from_probs(key, dec.emit_dist),
                     dec.num_relaxed, dec.emit_dist)
