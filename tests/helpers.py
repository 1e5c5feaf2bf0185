"""Small random models shared by the loop tests (no training, no files)."""

import jax
import jax.numpy as jnp

from specjax.models.config import ModelConfig
from specjax.models.transformer import Model


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


def independent_draft(vocab: int = 32, eos: int | None = None, seed: int = 7):
  """A 1-layer draft LM with its own random params (different architecture)."""
  cfg = ModelConfig(vocab_size=vocab, hidden_size=16, intermediate_size=32,
                    num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                    head_dim=8, eos_token_id=eos)
  m = Model(cfg)
  return m, scaled_params(m, seed, 4.0)


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
