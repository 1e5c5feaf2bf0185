"""Peer test: a published-layout EAGLE-1 head WITH q/k/v biases
(the layout of EAGLE-1 heads for Qwen2 targets: ``qkv_bias: true`` and
``layers.0.self_attn.{q,k,v}_proj.bias``) loads through :func:`load_eagle` and
computes what the reference PyTorch formulas compute from the same tensors.

The reference is written here from the EAGLE-1 paper / published layer, not
from specjax: ``x = fc(cat(embed(x_{t+1}), f_t))``; decoder layer 0 without
input norm: ``x = x + o_proj(attn(q_proj(x) + b_q, k_proj(x) + b_k, v_proj(x) + b_v))``
with rotate-half RoPE, GQA and causal softmax(q k^T / sqrt(d)); then
``x = x + down(silu(gate(n)) * up(n))`` with ``n = RMSNorm(x) * w``; logits =
``x @ lm_head^T`` of the target.  A head whose biases were dropped differs
from the reference by far more than the tolerance (checked too), so the test
would catch a loader that ignores them.

Two-layer heads are refused with a clear error (tests/decoding/test_bad_input.py).
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from specjax.models import eagle_io, safetensors_io  # noqa: E402

pytestmark = pytest.mark.peer

H, HEADS, KV, D, I, V = 32, 4, 2, 8, 48, 40
B, T = 2, 7


def _published_tensors(seed=0):
  rs = np.random.RandomState(seed)
  n = lambda *s: (0.2 * rs.randn(*s)).astype(np.float32)
  pre = "layers.0."
  t = {"fc.weight": n(H, 2 * H), "fc.bias": n(H),
       pre + "self_attn.q_proj.weight": n(HEADS * D, H), pre + "self_attn.q_proj.bias": n(HEADS * D),
       pre + "self_attn.k_proj.weight": n(KV * D, H), pre + "self_attn.k_proj.bias": n(KV * D),
       pre + "self_attn.v_proj.weight": n(KV * D, H), pre + "self_attn.v_proj.bias": n(KV * D),
       pre + "self_attn.o_proj.weight": n(H, HEADS * D),
       pre + "mlp.gate_proj.weight": n(I, H), pre + "mlp.up_proj.weight": n(I, H),
       pre + "mlp.down_proj.weight": n(H, I),
       pre + "post_attention_layernorm.weight": (1 + n(H)).astype(np.float32),
       "embed_tokens.weight": n(V, H)}  # shipped by EAGLE-1 heads; the target's is used
  return t


def _published_config():
  return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
          "vocab_size": V, "hidden_size": H, "intermediate_size": I, "num_hidden_layers": 1,
          "num_attention_heads": HEADS, "num_key_value_heads": KV, "rms_norm_eps": 1e-6,
          "rope_theta": 10000.0, "max_position_embeddings": 64, "bias": True,
          "qkv_bias": True}


def _reference(t, emb, feat, lm_head):
  """Published EAGLE-1 forward in torch over T entries at positions 0..T-1 -> logits."""
  tt = {k: torch.tensor(v) for k, v in t.items()}
  pre = "layers.0.self_attn."
  x = torch.nn.functional.linear(torch.cat([emb, feat], -1), tt["fc.weight"], tt["fc.bias"])
  q = torch.nn.functional.linear(x, tt[pre + "q_proj.weight"], tt[pre + "q_proj.bias"])
  k = torch.nn.functional.linear(x, tt[pre + "k_proj.weight"], tt[pre + "k_proj.bias"])
  v = torch.nn.functional.linear(x, tt[pre + "v_proj.weight"], tt[pre + "v_proj.bias"])
  q = q.view(B, T, HEADS, D).transpose(1, 2)
  k = k.view(B, T, KV, D).transpose(1, 2)
  v = v.view(B, T, KV, D).transpose(1, 2)
  inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
  ang = torch.arange(T, dtype=torch.float32)[:, None] * inv[None, :]
  cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
  rot = lambda a: torch.cat([-a[..., D // 2:], a[..., :D // 2]], -1)
  q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
  k = k.repeat_interleave(HEADS // KV, dim=1)
  v = v.repeat_interleave(HEADS // KV, dim=1)
  s = q @ k.transpose(-1, -2) / D ** 0.5
  s = s.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
  a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, HEADS * D)
  x = x + torch.nn.functional.linear(a, tt[pre + "o_proj.weight"])
  m = "layers.0.mlp."
  nx = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
  nx = nx * tt["layers.0.post_attention_layernorm.weight"]
  g = torch.nn.functional.silu(torch.nn.functional.linear(nx, tt[m + "gate_proj.weight"]))
  u = torch.nn.functional.linear(nx, tt[m + "up_proj.weight"])
  x = x + torch.nn.functional.linear(g * u, tt[m + "down_proj.weight"])
  return (x @ lm_head).numpy()


def _specjax_logits(path, emb, feat, lm_head):
  from specjax.models.config import ModelConfig
  target_cfg = ModelConfig(vocab_size=V, hidden_size=H, intermediate_size=I, num_hidden_layers=2,
                           num_attention_heads=HEADS, num_key_value_heads=KV, head_dim=D)
  head, params, _ = eagle_io.load_eagle(path, target_cfg)
  assert head.config.qkv_bias and head.config.fc_bias and head.config.target_layers == (2,)
  out = head.apply(params, jnp.asarray(emb), jnp.asarray(feat),
                   jnp.broadcast_to(jnp.arange(T), (B, T)), head.init_cache(B, T))
  return np.asarray(head.draft_logits(params, out.hidden, jnp.asarray(lm_head))), head, params


def test_eagle1_head_with_qkv_bias_matches_reference(tmp_path):
  from safetensors.numpy import save_file
  t = _published_tensors()
  save_file(t, str(tmp_path / "model.safetensors"))
  json.dump(_published_config(), open(tmp_path / "config.json", "w"))
  rs = np.random.RandomState(1)
  emb = rs.randn(B, T, H).astype(np.float32)
  feat = rs.randn(B, T, H).astype(np.float32)
  lm_head = (0.3 * rs.randn(H, V)).astype(np.float32)
  ref = _reference(t, torch.tensor(emb), torch.tensor(feat), torch.tensor(lm_head))
  got, head, params = _specjax_logits(str(tmp_path), emb, feat, lm_head)
  np.testing.assert_allclose(got, ref, atol=2e-4, rtol=2e-4)
  # Power: the same head with its q/k/v biases zeroed is far from the reference.
  zeroed = jax.tree_util.tree_map_with_path(
      lambda p, x: jnp.zeros_like(x) if "proj']['bias" in jax.tree_util.keystr(p) else x, params)
  out = head.apply(zeroed, jnp.asarray(emb), jnp.asarray(feat),
                   jnp.broadcast_to(jnp.arange(T), (B, T)), head.init_cache(B, T))
  wrong = np.asarray(head.draft_logits(zeroed, out.hidden, jnp.asarray(lm_head)))
  assert np.abs(wrong - ref).max() > 100 * 2e-4
  # Round trip: save_eagle writes the biases back under the published names.
  eagle_io.save_eagle(str(tmp_path / "re"), head.config, params)
  back = safetensors_io.read_safetensors(str(tmp_path / "re" / "model.safetensors"))
  np.testing.assert_array_equal(back["layers.0.self_attn.k_proj.bias"],
                                t["layers.0.self_attn.k_proj.bias"])
