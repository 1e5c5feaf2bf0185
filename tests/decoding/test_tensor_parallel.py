"""Tensor parallelism: logical axes -> one rules table -> params and
KV caches over the ``model`` mesh axis; same tokens on any (data, model) mesh;
per-device parameter memory; multi-process ``jax.distributed`` on localhost."""

import json
import os
import socket
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from specjax import distributed, verifiers
from specjax.decoding import parallel
from specjax.decoding.autoregressive import generate
from specjax.decoding.drafters import LMDrafter, LMTreeDrafter
from specjax.decoding.speculative import speculative_generate
from specjax.distributions import SamplingConfig
from specjax.models import sharding
from specjax.models.config import ModelConfig
from specjax.models.transformer import Model
from tests.helpers import noisy_pair

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GREEDY = SamplingConfig(temperature=0.0)
SAMPLED = SamplingConfig(temperature=1.0)
SMOLLM2_135M = ModelConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                           num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                           head_dim=64, tie_word_embeddings=True)


def _pair(cfg: ModelConfig, seed: int = 0, noise: float = 0.02, scale: float = 6.0):
  """Target and draft of one architecture (draft = target + noise), peaked enough
  that TP's reordered float sums cannot flip a token."""
  return noisy_pair(cfg, seed, noise, scale)


# 4 heads / 2 KV heads: on model=4 the KV heads do not divide (replicated), on 2 they do.
LLAMA_TINY = ModelConfig(vocab_size=32, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=8, qkv_bias=True)
# SmolLM2-shaped: 9 query heads, 3 KV heads, tied embeddings.
SMOL_TINY = ModelConfig(vocab_size=48, hidden_size=36, intermediate_size=48,
                        num_hidden_layers=1, num_attention_heads=9, num_key_value_heads=3,
                        head_dim=4, tie_word_embeddings=True)


def _prompts(n, vocab, seed=0, max_len=9):
  rs = np.random.RandomState(seed)
  return [rs.randint(4, vocab, size=rs.randint(1, max_len)).tolist() for _ in range(n)]


def _abstract(cfg):
  model = Model(cfg)
  return model, jax.eval_shape(model.init_params, jax.random.key(0))


def _specs(cfg, model_axis):
  model, params = _abstract(cfg)
  mesh = parallel.make_mesh(1, model_axis)
  shard = parallel.param_shardings(model, params, mesh)
  return {jax.tree_util.keystr(p): tuple(s.spec)
          for p, s in jax.tree_util.tree_flatten_with_path(shard)[0]}


# ---- the declaration and the rules --------------------------------------------------------

@pytest.mark.parametrize("flags", [{}, dict(qkv_bias=True, o_bias=True), dict(qk_norm=True),
                                   dict(tie_word_embeddings=True)])
def test_every_param_declares_its_logical_axes(flags):
  model, params = _abstract(ModelConfig(**flags))
  axes = model.logical_axes(params)
  for (path, leaf), names in zip(jax.tree_util.tree_flatten_with_path(params)[0],
                                 jax.tree.leaves(axes, is_leaf=lambda x: isinstance(x, P))):
    assert len(names) == leaf.ndim, jax.tree_util.keystr(path)
    assert names[0] == "layers" or "layers" not in jax.tree_util.keystr(path)
  # decode_params form (per-layer trees): no "layers" dim
  layer0 = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape[1:], s.dtype), params["layers"])
  unrolled = {**params, "layers": (layer0, layer0)}
  assert all("layers" not in tuple(n) for n in jax.tree.leaves(
      model.logical_axes(unrolled), is_leaf=lambda x: isinstance(x, P)))
  with pytest.raises(ValueError, match="no declared logical axes"):
    model.logical_axes({**params, "extra": {"w": jnp.zeros((2, 2))}})


def test_rules_shard_whole_heads_only():
  q, k, o = ("['layers']['self_attn']['q_proj']['kernel']",
             "['layers']['self_attn']['k_proj']['kernel']",
             "['layers']['self_attn']['o_proj']['kernel']")
  gate, down = "['layers']['mlp']['gate_proj']['kernel']", "['layers']['mlp']['down_proj']['kernel']"
  emb, norm = "['embed_tokens']['embedding']", "['layers']['input_layernorm']['weight']"
  three = _specs(SMOLLM2_135M, 3)  # 9 and 3 heads divide 3: everything but norms sharded
  assert three[q] == (None, None, "model") and three[k] == (None, None, "model")
  assert three[o] == (None, "model", None) and three[down] == (None, "model", None)
  assert three[gate] == (None, None, "model") and three[emb] == ("model", None)
  assert three[norm] == (None, None)
  for m in (2, 4):  # 576 = 9 x 64 divides 2 and 4, but 9 heads do not: replicated, not split
    spec = _specs(SMOLLM2_135M, m)
    assert spec[q] == spec[k] == spec[o] == (None, None, None)
    assert spec[gate] == (None, None, "model") and spec[emb] == ("model", None)
  # a custom table: vocab replicated, mlp only
  model, params = _abstract(SMOLLM2_135M)
  custom = parallel.param_shardings(model, params, parallel.make_mesh(1, 2),
                                    rules={"mlp": "model"})
  assert custom["embed_tokens"]["embedding"].spec == P(None, None)
  assert custom["layers"]["mlp"]["up_proj"]["kernel"].spec == P(None, None, "model")


def test_decode_form_fuses_gate_up_on_each_device():
  """The unrolled decode form stacks gate | up per layer (``fuse_projections``).
  On a model-parallel mesh the stacked kernel keeps the parts' split of the MLP
  dim, and making it compiles to no collective: each device stacks its own
  columns.  Broken variant caught: concatenating along the split dim (a
  cross-device permutation inside the loop, which deadlocked XLA:CPU's
  8-device tree loop at the default optimisation level)."""
  model = Model(LLAMA_TINY, layer_stack="unrolled")
  _, params, _ = _pair(LLAMA_TINY)
  mesh = parallel.make_mesh(2, 4)
  tp = parallel.shard_params(model, params, mesh)
  decode = jax.jit(model.decode_params)
  hlo = decode.lower(tp).compile().as_text()
  for op in ("collective-permute", "all-gather", "all-to-all", "all-reduce"):
    assert op not in hlo, op
  kernel = decode(tp)["layers"][0]["mlp"]["gate_up_proj"]["kernel"]
  assert kernel.shape == (LLAMA_TINY.hidden_size, 2, LLAMA_TINY.intermediate_size)
  assert kernel.sharding.is_equivalent_to(NamedSharding(mesh, P(None, None, "model")), 3)
  specs = parallel.param_shardings(model, decode(tp), mesh)
  assert specs["layers"][0]["mlp"]["gate_up_proj"]["kernel"].spec == P(None, None, "model")


@pytest.mark.parametrize("cfg,model_axis,kv_split", [(LLAMA_TINY, 2, True),
                                                      (LLAMA_TINY, 4, False),
                                                      (SMOL_TINY, 3, True),
                                                      (SMOL_TINY, 2, False)])
def test_kv_cache_split_over_kv_heads_inside_the_loop(cfg, model_axis, kv_split):
  """Model.init_cache under run_sharded's shard_map (manual over data): the
  cache's KV-head dim goes over ``model`` when the heads divide, else replicated."""
  model = Model(cfg)
  mesh = parallel.make_mesh(8 // model_axis if 8 % model_axis == 0 else 2, model_axis)
  fn = jax.jit(jax.shard_map(lambda: model.init_cache(2, 16).k, mesh=mesh, in_specs=(),
                             out_specs=P("data"), axis_names=frozenset({"data"}),
                             check_vma=False))
  k = fn()
  want = P("data", None, None, "model" if kv_split else None, None)
  assert k.sharding.is_equivalent_to(NamedSharding(mesh, want), k.ndim), k.sharding
  assert k.addressable_shards[0].data.shape[3] == cfg.num_key_value_heads // (
      model_axis if kv_split else 1)


# ---- bad input ----------------------------------------------------------------------------

def test_bad_mesh_and_rules_are_value_errors_naming_the_argument():
  target, tp, _ = _pair(LLAMA_TINY)
  with pytest.raises(ValueError, match=r"data=3 x model=4 needs 12 devices; 8 are available"):
    parallel.make_mesh(3, 4)
  with pytest.raises(ValueError, match=r"model=0 must be a positive integer"):
    parallel.make_mesh(2, 0)
  with pytest.raises(ValueError, match=r"model=16 exceeds the 8 available devices"):
    parallel.make_mesh(model=16)
  data_only = Mesh(np.asarray(jax.devices()[:2]), ("data",))
  with pytest.raises(ValueError, match=r"mesh axes \['model'\].*lacks"):
    parallel.shard_params(target, tp, data_only)
  rows_only = Mesh(np.asarray(jax.devices()[:2]), ("rows",))
  with pytest.raises(ValueError, match=r"mesh has axes \('rows',\); it needs axes \('data',\)"):
    generate(target, tp, [[1, 2]], max_new_tokens=2, mesh=rows_only)
  with pytest.raises(TypeError, match=r"model goes first"):
    parallel.shard_params(tp, parallel.make_mesh(4, 2), None)
  with pytest.raises(ValueError, match=r"rules entry \('mlp',\)"):
    parallel.shard_params(target, tp, parallel.make_mesh(4, 2), rules=[("mlp",)])
  with pytest.raises(ValueError, match=r"num_processes=0 must be a positive integer"):
    distributed.check_args("localhost:1234", 0, 0)
  with pytest.raises(ValueError, match=r"process_id=2 must be an integer in \[0, 2\)"):
    distributed.check_args("localhost:1234", 2, 2)
  with pytest.raises(ValueError, match=r"coordinator_address='localhost' must be 'host:port'"):
    distributed.check_args("localhost", 2, 0)


# ---- memory -------------------------------------------------------------------------------

def _sharded_zeros(model, mesh):
  """Params of ``model`` (zeros) created directly in their TP placement."""
  abstract = jax.eval_shape(model.init_params, jax.random.key(0))
  shardings = parallel.param_shardings(model, abstract, mesh)
  return jax.jit(lambda: jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), abstract),
                 out_shardings=shardings)()


def _memory(cfg, model_axis):
  """(max bytes on one device, bytes of the sharded leaves on one device, total
  bytes of the sharded leaves, total bytes of the replicated leaves)."""
  model = Model(cfg)
  params = _sharded_zeros(model, parallel.make_mesh(1, model_axis))
  per_dev = parallel.bytes_per_device(params)
  leaves = jax.tree.leaves(params)
  split = [l for l in leaves if any(a is not None for a in l.sharding.spec)]
  whole = [l for l in leaves if all(a is None for a in l.sharding.spec)]
  dev0 = jax.devices()[0]
  split_dev0 = sum(s.data.nbytes for l in split for s in l.addressable_shards if s.device == dev0)
  return (max(per_dev.values()), split_dev0, sum(l.nbytes for l in split),
          sum(l.nbytes for l in whole))


@pytest.mark.parametrize("cfg,model_axis", [(LLAMA_TINY, 2), (LLAMA_TINY, 4), (SMOL_TINY, 3),
                                            (SMOL_TINY, 2)])
def test_sharded_weights_take_one_over_model_per_device(cfg, model_axis):
  peak, split_dev, split_total, whole = _memory(cfg, model_axis)
  assert split_total > 0
  assert split_dev * model_axis == split_total  # each sharded weight: 1/model per device
  assert peak == whole + split_total // model_axis


def test_smollm2_135m_per_device_parameter_memory(capsys):
  """The SmolLM2-135M shape (float32) on model = 1, 2, 3, 4: measured from the
  arrays' addressable shards (zeros created in place: no 540 MB host copy)."""
  total = SMOLLM2_135M.num_params() * 4
  rows = []
  for m in (1, 2, 3, 4):
    peak, split_dev, split_total, whole = _memory(SMOLLM2_135M, m)
    assert split_dev * m == split_total and peak == whole + split_total // m
    rows.append((m, peak, whole, split_total))
  assert rows[0][1] == total
  assert rows[2][1] < total / 3 * 1.01  # model=3: attention, MLP, vocab all split
  assert rows[1][1] > total / 2 * 1.1  # model=2: 9 heads do not divide, attention replicated
  with capsys.disabled():
    print("\nSmolLM2-135M float32 params per device (MB): " + ", ".join(
        f"model={m}: {peak / 1e6:.1f} (replicated {whole / 1e6:.1f} + sharded "
        f"{split_total / 1e6:.1f}/{m})" for m, peak, whole, split_total in rows))


# ---- same tokens on any mesh --------------------------------------------------------------

PROGRAMS = ("generate/greedy", "generate/sampled", "chain/greedy", "chain/sampled",
            "tree/greedy", "tree/sampled")
MODELS = {"llama": (LLAMA_TINY, 0, 1, 7), "smol": (SMOL_TINY, 2, 3, 4)}  # cfg, seeds, rows


def run_program(program, target, tp, dp, prompts, mesh):
  """One of PROGRAMS (generate, or speculative with a chain / static tree of the
  draft LM; greedy or T = 1) -> token lists; params sharded when ``mesh``."""
  if mesh is not None:
    tp = parallel.shard_params(target, tp, mesh)
    dp = parallel.shard_params(target, dp, mesh)
  kind, name = program.split("/")
  samp = GREEDY if name == "greedy" else SAMPLED
  kw = dict(max_new_tokens=10, eos_token_id=None, key=jax.random.key(5), mesh=mesh,
            sampling=samp)
  if kind == "generate":
    return generate(target, tp, prompts, **kw).to_lists()
  drafter = (LMDrafter(3, samp, target) if kind == "chain" else
             LMTreeDrafter(target, paths=((0,), (1,), (0, 0)), sampling=GREEDY))
  return speculative_generate(target, tp, drafter, dp, verifiers.get("lossless"), prompts,
                              **kw).to_lists()


@pytest.fixture(scope="module")
def reference():
  """Single-device tokens per (model, program), computed once on first use."""
  cache = {}

  def get(model_name, program):
    cfg, seed, prompt_seed, rows = MODELS[model_name]
    target, tp, dp = _pair(cfg, seed=seed)
    prompts = _prompts(rows, cfg.vocab_size, seed=prompt_seed)  # rows pad on every mesh
    if (model_name, program) not in cache:
      cache[model_name, program] = run_program(program, target, tp, dp, prompts, None)
    return (target, tp, dp, prompts), cache[model_name, program]

  return get


# The full matrix (3 meshes x 6 programs) is slow, as is
# tests/decoding/test_speculative.py's sampled chain on a 4 x 2 mesh.  The default suite runs one loop on the 1 x 3 mesh (SmolLM2's 9 / 3 heads split); the
# 4 x 2 (a sampled tree over data x model) and 2 x 4 (KV heads replicated) meshes run in
# the slow step (the default suite's 8-minute budget); the 2 x 4 cache layout stays
# checked by default in test_kv_cache_split_over_kv_heads_inside_the_loop.
FAST = {("llama", 2, 4): (),
        ("llama", 4, 2): (),
        ("smol", 1, 3): ("generate/greedy",)}
CASES = [pytest.param(m, d, t, prog, marks=() if prog in FAST[m, d, t] else pytest.mark.slow,
                      id=f"{m}-{d}x{t}-{prog}")
         for (m, d, t) in FAST for prog in PROGRAMS]


@pytest.mark.parametrize("model_name,data,model_axis,program", CASES)
def test_same_tokens_on_data_x_model_meshes(reference, model_name, data, model_axis, program):
  """Rows over ``data``, TP over ``model``: the single-device tokens. (2 x 4:
  KV heads replicated, 2 do not divide 4; 1 x 3: SmolLM2's 9 / 3 heads split.)"""
  (target, tp, dp, prompts), ref = reference(model_name, program)
  got = run_program(program, target, tp, dp, prompts, parallel.make_mesh(data, model_axis))
  assert got == ref


# ---- many processes -----------------------------------------------------------------------

def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_give_the_single_process_tokens(tmp_path):
  """Two ``jax.distributed`` processes on localhost (2 CPU devices each, gloo
  collectives) run a 2 x 2 (data x model) mesh over both; every process gets
  the tokens of the single-process, single-device run."""
  port = _free_port()
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
  env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
  # ``-m`` from the repo root: ``tests/`` must not come first on sys.path (its folders
  # mirror the top-level packages' names).
  procs = [subprocess.Popen([sys.executable, "-m", "tests.tp_worker",
                             f"localhost:{port}", "2", str(i), str(tmp_path / f"out{i}.json")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True) for i in range(2)]
  logs = []
  for p in procs:
    try:
      logs.append(p.communicate(timeout=900)[0])
    except subprocess.TimeoutExpired:
      for q in procs:
        q.kill()
      raise
  assert all(p.returncode == 0 for p in procs), "\n\n".join(l[-3000:] for l in logs)
  got = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2)]
  assert got[0]["devices"] == 4 and got[0]["local_devices"] == 2
  import tests.tp_worker as worker
  ref = worker.runs(None)
  for g in got:
    assert g["tokens"] == ref
