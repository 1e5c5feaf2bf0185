"""EAGLE heads: shapes, drafter cache bookkeeping against a from-scratch
recomputation, lossless greedy speculative decoding (chain and EAGLE-2 tree),
tree validity, the published checkpoint layout, and training."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.data.batching import Batcher
from specjax.decoding.autoregressive import generate
from specjax.decoding.eagle_drafter import EagleDrafter
from specjax.decoding.eagle_trees import EagleStaticTreeDrafter, EagleTreeDrafter
from specjax.distributions import SamplingConfig
from specjax.decoding.speculative import speculative_generate
from specjax.models import eagle, eagle_io
from specjax.models.transformer import Model
from specjax.training import eagle as train_eagle
from specjax.training import optim
from tests.helpers import DRAFT_IDS, TC, eagle_head, eagle_target

V = TC.vocab_size  # 32
GREEDY = SamplingConfig(temperature=0.0)


def _features(target, tp, layers, seq):
  t = Model(target.config.replace(hidden_layers=layers))
  b, n = seq.shape
  out = t.apply(tp, seq, jnp.broadcast_to(jnp.arange(n), (b, n)), t.init_cache(b, n))
  return out.hidden_states  # [n_sel, B, n, H]


def test_head_shapes_and_layers():
  assert eagle.default_eagle3_layers(32) == (2, 16, 29)
  assert eagle.default_eagle3_layers(4) == (1, 2, 3)
  assert eagle.default_eagle3_layers(2) == (0, 1, 2)
  target, tp = eagle_target()
  b, t = 2, 5
  for kind, reduced in (("eagle1", False), ("eagle3", True)):
    head, p, d2t = eagle_head(kind, reduced)
    c = head.config
    assert c.num_params() == sum(x.size for x in jax.tree.leaves(p))
    th = jnp.ones((len(c.target_layers), b, t, c.target_hidden_size))

    @jax.jit
    def fwd(p, tp, th, d2t):
      feats = head.project(p, th)
      emb = target.embed(tp, jnp.zeros((b, t), jnp.int32))
      out = head.apply(p, emb, feats, jnp.broadcast_to(jnp.arange(t), (b, t)),
                       head.init_cache(b, 8))
      return feats, out, head.logits(p, out.hidden, tp["lm_head"]["kernel"], d2t)

    feats, out, z = fwd(p, tp, th, None if d2t is None else jnp.asarray(d2t))
    assert feats.shape == (b, t, c.hidden_size)
    assert out.hidden.shape == (b, t, c.hidden_size)
    assert out.cache.k.shape == (1, b, 8, c.num_key_value_heads, c.head_dim)
    assert z.shape == (b, t, V)
    if reduced:
      assert np.all(np.isneginf(np.asarray(z)[..., 1::2]))
      assert np.all(np.isfinite(np.asarray(z)[..., ::2]))
  with pytest.raises(ValueError, match="draft_vocab_size"):
    eagle.EagleConfig.for_target(TC, "eagle1", draft_vocab_size=8)
  with pytest.raises(ValueError, match="kind"):
    eagle.EagleConfig(kind="eagle2")


def make_reference(head, target, k):
  """The head's K draft distributions after ``seq[:length]`` + the next token, given
  the drafted tokens ``x [K]``, recomputed from scratch (true target features for
  every complete entry, then the head's own features fed back).  Entries past
  ``length`` are computed too but, causally, change nothing."""

  @jax.jit
  def ref(p, tp, d2t, seq, length, drafted):
    n = seq.shape[0] - 1
    hid = _features(target, tp, head.config.target_layers, seq[None, :n])
    feats = head.project(p, hid)  # [1, n, H]
    emb = target.embed(tp, seq[None, 1:])
    out = head.apply(p, emb, feats, jnp.arange(n)[None], head.init_cache(1, n + k))
    cache = dataclasses.replace(out.cache, lengths=length[None])
    h = out.hidden[:, length - 1]
    lm = tp["lm_head"]["kernel"]
    zs = []
    for i in range(k):
      zs.append(head.logits(p, h, lm, d2t)[0])
      x = drafted[i][None]
      if i + 1 < k:
        o = head.apply(p, target.embed(tp, x[:, None]), h[:, None], cache.lengths[:, None],
                       cache)
        cache = dataclasses.replace(o.cache, lengths=cache.lengths + 1)
        h = o.hidden[:, 0]
    return jax.nn.softmax(jnp.stack(zs), -1)  # [K, V]

  return ref


# CI's slow step (the default suite keeps an EAGLE chain in the loop through
# tests/decoding/test_adaptation.py's greedy identity, frozen and adapting).
@pytest.mark.slow
@pytest.mark.parametrize("kind,reduced", [("eagle1", False), ("eagle3", True)])
def test_drafter_cache_bookkeeping_matches_recompute(kind, reduced):
  """prefill -> (draft, commit n+1 tokens) steps with per-row counts reproduce the
  drafts of a head recomputed from scratch on each row's committed context."""
  target, tp = eagle_target()
  head, p, d2t = eagle_head(kind, reduced)
  k = 3
  drafter = EagleDrafter(num_draft=k, sampling=SamplingConfig(temperature=1.0), head=head)
  params = EagleDrafter.make_params(p, target, tp, d2t)
  rng = np.random.default_rng(0)
  seqs = jnp.asarray(rng.integers(0, V, (2, 24)), jnp.int32)
  lengths = np.array([6, 4])  # ragged prompts (padded to 6)
  hid = _features(target, tp, head.config.target_layers, seqs[:, :6])
  state = jax.jit(drafter.prefill, static_argnums=3)(params, seqs[:, :6], jnp.asarray(lengths),
                                                     32, hid)
  keys = jax.random.split(jax.random.key(0), 2)
  full_hid = _features(target, tp, head.config.target_layers, seqs)
  ref = make_reference(head, target, k)
  d2t_j = None if d2t is None else jnp.asarray(d2t, jnp.int32)
  draft, commit = jax.jit(drafter.propose), jax.jit(drafter.commit)
  rows = np.arange(2)
  for accepted in ([0, 2], [3, 1], [1, 0]):
    last = seqs[rows, lengths]
    prev = seqs[rows, lengths - 1]
    proposal, state = draft(params, state, prev, last, keys)
    x, q, q_node = proposal.tokens, proposal.q, proposal.q_node
    np.testing.assert_array_equal(np.asarray(q_node), np.asarray(q))  # sampled chain: q_node = q
    for r in range(2):
      want = ref(p, tp, d2t_j, seqs[r], jnp.int32(lengths[r]), x[r])
      np.testing.assert_allclose(np.asarray(q[r]), np.asarray(want), atol=1e-3)
    # The target commits ``last`` plus ``accepted`` tokens (taken from seqs: the
    # context simply continues with them, whatever was drafted).
    num = np.array(accepted) + 1
    idx = lengths[:, None] + np.arange(k + 1)[None, :]
    committed = seqs[rows[:, None], idx]
    th = full_hid[:, rows[:, None], idx]
    lengths = lengths + num
    state = commit(state, jnp.asarray(lengths), committed, jnp.asarray(num), th)


def _check_tree(tree, depth, n, vocab_ids=None):
  tok, par, dep = (np.asarray(a) for a in (tree.tokens, tree.parents, tree.depths))
  b = tok.shape[0]
  assert tok.shape == par.shape == dep.shape == (b, n)
  for r in range(b):
    seen = set()
    for j in range(n):
      assert 0 <= par[r, j] <= j  # parents before children (tree index j + 1)
      pd = 0 if par[r, j] == 0 else dep[r, par[r, j] - 1]
      assert dep[r, j] == pd + 1 and 1 <= dep[r, j] <= depth
      assert (par[r, j], tok[r, j]) not in seen  # unique paths
      seen.add((par[r, j], tok[r, j]))
      if vocab_ids is not None:
        assert tok[r, j] in vocab_ids


@pytest.mark.slow  # EAGLE tree drafts stay checked in the default suite by greedy identity
def test_tree_drafts_are_valid_and_static_tree_matches_chain():
  target, tp = eagle_target()
  head, p, d2t = eagle_head("eagle3", reduced=True)
  params = EagleDrafter.make_params(p, target, tp, d2t)
  rng = np.random.default_rng(1)
  seqs = jnp.asarray(rng.integers(0, V, (2, 8)), jnp.int32)
  lengths = jnp.array([7, 5])
  hid = _features(target, tp, head.config.target_layers, seqs)
  prev, last = seqs[jnp.arange(2), lengths - 1], seqs[jnp.arange(2), lengths]
  keys = jax.random.split(jax.random.key(0), 2)
  dyn = EagleTreeDrafter(depth=3, sampling=GREEDY, head=head, top_k=3, total_tokens=10)
  assert dyn.tree and dyn.tokens_per_step == 11
  run = lambda d: jax.jit(lambda *a: d.propose(
      params, d.prefill(params, seqs, lengths, 24, hid), *a))(prev, last, keys)
  proposal, _ = run(dyn)
  tree, q, q_node = proposal.tree, proposal.q, proposal.q_node
  _check_tree(tree, 3, 10, set(DRAFT_IDS.tolist()))
  assert np.allclose(np.asarray(q), np.asarray(jax.nn.one_hot(tree.tokens, V)))
  # q_node: the head's full (T = 1, greedy drafter) distribution at every node with children,
  # and each node's children are the top of its parent's row (CoS mixes this row, docs/spec.md §3).
  qn, par, toks = np.asarray(q_node), np.asarray(tree.parents), np.asarray(tree.tokens)
  assert qn.shape == (2, 11, V)
  for b in range(2):
    for j in range(10):
      row = qn[b, par[b, j]]
      assert row.sum() == pytest.approx(1.0, abs=1e-5)
      assert row[toks[b, j]] >= np.sort(row)[-3] - 1e-6  # a top-3 (top_k) token of its parent
  # A static tree's greedy spine equals the greedy chain (same masks and positions).
  paths = ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0))
  st = EagleStaticTreeDrafter(sampling=GREEDY, head=head, tree_paths=paths)
  chain = EagleDrafter(num_draft=3, sampling=GREEDY, head=head)
  proposal_s, _ = run(st)
  tree_s, qn_s = proposal_s.tree, proposal_s.q_node
  _check_tree(tree_s, 3, len(paths))
  proposal_c, _ = run(chain)
  x, qn_c = proposal_c.tokens, proposal_c.q_node
  # Greedy chain: q is one-hot but q_node is the head's softmax; the static tree's spine
  # nodes have the chain's node distributions.
  np.testing.assert_allclose(np.asarray(qn_s)[:, [0, 1, 3]], np.asarray(qn_c), atol=1e-5)
  assert not np.allclose(np.asarray(qn_c), np.asarray(jax.nn.one_hot(x, V)))
  spine = np.asarray(tree_s.tokens)[:, [0, 2, 5]]  # nodes (0,), (0,0), (0,0,0)
  assert np.array_equal(spine, np.asarray(x))
  with pytest.raises(ValueError, match="total_tokens"):
    EagleTreeDrafter(depth=2, sampling=GREEDY, head=head, top_k=2, total_tokens=7)
  # One name per size: K is a chain's num_draft, a tree's longest path its depth (one
  # class per shape: a chain has no depth, a tree no num_draft).
  assert (chain.max_accepted, dyn.max_accepted, st.max_accepted, st.depth) == (3, 3, 3, 3)
  with pytest.raises(TypeError, match="depth"):
    EagleDrafter(3, GREEDY, head=head, depth=3)
  with pytest.raises(ValueError, match="depth=2 must equal the static tree depth 3"):
    EagleStaticTreeDrafter(head=head, tree_paths=paths, depth=2)
  # Trees draft top-k deterministically: sampling is optional (it only shapes q_node).
  assert EagleTreeDrafter(depth=3, head=head, top_k=3, total_tokens=10).sampling == GREEDY


# The EAGLE-1 chain runs in CI's slow step: chains keep their default-suite lossless
# test in tests/decoding/test_speculative.py, EAGLE heads the EAGLE-3 dynamic tree below.
# Both in the slow step (the default suite's 8-minute budget); the default suite keeps
# the EAGLE-3 chain's greedy identity under adaptation (tests/decoding/test_adaptation.py).
@pytest.mark.slow
@pytest.mark.parametrize("kind,reduced,tree_kind", [("eagle1", False, "chain"),
                                                     ("eagle3", True, "dynamic")])
def test_greedy_speculative_equals_target(kind, reduced, tree_kind):
  target, tp = eagle_target()
  head, p, d2t = eagle_head(kind, reduced)
  drafter = (EagleTreeDrafter(depth=3, top_k=3, total_tokens=8, sampling=GREEDY, head=head)
             if tree_kind == "dynamic" else EagleDrafter(3, GREEDY, head=head))
  params = EagleDrafter.make_params(p, target, tp, d2t)
  prompts = [[1, 2, 3, 4, 5], [7, 8], [3, 3, 3, 9, 10, 11, 12]]
  ref = generate(target, tp, prompts, max_new_tokens=16, eos_token_id=None).to_lists()
  res = speculative_generate(target, tp, drafter, params, verifiers.get("lossless"), prompts,
                             max_new_tokens=16, eos_token_id=None)
  assert res.to_lists() == ref
  assert int(np.sum(res.stats.target_calls)) < 3 * 16  # some drafts were accepted


def test_published_layout_round_trip_and_errors(tmp_path):
  from safetensors.numpy import load_file, save_file
  for kind, reduced in (("eagle1", False), ("eagle3", True)):
    head, p, _ = eagle_head(kind, reduced)
    d2t, t2d = eagle.vocab_maps(DRAFT_IDS, V) if reduced else (None, None)
    path = str(tmp_path / kind)
    eagle_io.save_eagle(path, head.config, p, d2t, t2d)
    tensors = load_file(os.path.join(path, "model.safetensors"))
    h, i = head.config.hidden_size, head.config.intermediate_size
    if kind == "eagle1":
      assert tensors["fc.weight"].shape == (h, 2 * h) and tensors["fc.bias"].shape == (h,)
      assert "layers.0.self_attn.q_proj.weight" in tensors
      assert "layers.0.input_layernorm.weight" not in tensors
    else:
      assert tensors["fc.weight"].shape == (h, 3 * h)
      assert tensors["midlayer.self_attn.q_proj.weight"].shape == (32, 2 * h)
      assert tensors["midlayer.hidden_norm.weight"].shape == (h,)
      assert tensors["lm_head.weight"].shape == (16, h)
      assert tensors["d2t"].dtype == np.int64 and tensors["t2d"].dtype == bool
      assert np.array_equal(tensors["d2t"] + np.arange(16), DRAFT_IDS)
    assert tensors[("layers.0." if kind == "eagle1" else "midlayer.") +
                   "mlp.down_proj.weight"].shape == (h, i)
    head2, p2, d2t2 = eagle_io.load_eagle(path, TC)
    assert head2.config == head.config
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b), p, p2)
    if reduced:
      np.testing.assert_array_equal(d2t2, d2t)
    # A published config.json (no specjax fields) still loads given the target config.
    import json
    with open(os.path.join(path, "config.json")) as f:
      d = json.load(f)
    for key in ("eagle_kind", "target_layers", "head_dim", "target_hidden_size"):
      d.pop(key)
    with open(os.path.join(path, "config.json"), "w") as f:
      json.dump(d, f)
    assert eagle_io.load_eagle(path, TC)[0].config == head.config
    # Clear errors for mis-shaped and missing tensors.
    bad = dict(tensors)
    bad["fc.weight"] = bad["fc.weight"][:, :-1]
    save_file(bad, os.path.join(path, "model.safetensors"))
    with pytest.raises(ValueError, match="fc.weight.*shape"):
      eagle_io.load_eagle(path, TC)
    del bad["fc.weight"]
    save_file(bad, os.path.join(path, "model.safetensors"))
    with pytest.raises(ValueError, match="missing tensors.*fc.weight"):
      eagle_io.load_eagle(path, TC)
  with pytest.raises(ValueError, match="vocab_size"):
    eagle.check_compatible(head.config, TC.replace(vocab_size=64))
  # bf16 storage (as the shipped heads) reads back without torch.
  head, p, _ = eagle_head("eagle1")
  eagle_io.save_eagle(str(tmp_path / "bf16"), head.config, p, dtype="bfloat16")
  _, p2, _ = eagle_io.load_eagle(str(tmp_path / "bf16"), TC)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(
      np.asarray(a.astype(jnp.bfloat16).astype(jnp.float32)), np.asarray(b)), p, p2)


def _stream_batcher():
  rng = np.random.default_rng(0)
  base = np.tile(np.arange(20) % V, 100)
  stream = np.where(rng.random(base.shape) < 0.1, rng.integers(0, V, base.shape), base)
  return Batcher(stream.astype(np.int32), seq_len=12, batch_size=4)


def _trainer(kind, steps, workdir=None):
  target, tp = eagle_target()
  cfg = eagle.EagleConfig.for_target(TC, kind, draft_vocab_size=16 if kind == "eagle3" else None)
  head = eagle.EagleHead(cfg)
  return train_eagle.EagleTrainer(
      head, target, tp, optim.OptimConfig(learning_rate=1e-2, warmup_steps=1, total_steps=steps),
      train_eagle.EagleTrainConfig(num_steps=steps, ttt_steps=3, eval_every=0,
                                   checkpoint_every=2, log_every=100, feature_noise=0.05),
      _stream_batcher(), workdir=workdir,
      draft_ids=DRAFT_IDS if kind == "eagle3" else None, progress=False)


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_training_reduces_loss(kind):
  tr = _trainer(kind, 10)
  hist = tr.train()
  first, last = hist[0]["loss"], np.mean([h["loss"] for h in hist[-3:]])
  assert last < 0.85 * first, (first, last)
  if kind == "eagle3":
    assert {"ce0", "ce2", "acc1"} <= set(hist[0])


def test_eagle3_ttt_mask():
  m = np.asarray(train_eagle.ttt_mask(3, 2, 9))
  # step 2, entry 1 sees step-0 entries 0..1 and its own step-1/2 entries.
  assert np.nonzero(m[1])[0].tolist() == [0, 1, 4, 7]
  assert np.nonzero(np.asarray(train_eagle.ttt_mask(3, 0, 9))[2])[0].tolist() == [0, 1, 2]


@pytest.mark.slow
def test_resume_reproduces_uninterrupted_run(tmp_path):
  full = _trainer("eagle1", 4).train()
  tr = _trainer("eagle1", 4, str(tmp_path))
  tr.train(stop_after=2)
  tr.close()
  tr2 = _trainer("eagle1", 4, str(tmp_path))
  hist = tr2.train()
  tr2.close()
  assert tr2.resumed_from == 2
  assert [h["loss"] for h in hist] == [h["loss"] for h in full]


def test_resume_with_a_changed_head_names_the_leaf(tmp_path):
  """The EAGLE trainer shares the checkpoint check: resuming an eagle1 workdir as
  eagle3 names a differing leaf; the original head still resumes."""
  tr = _trainer("eagle1", 2, str(tmp_path))
  tr.train()
  tr.close()
  other = _trainer("eagle3", 2, str(tmp_path))
  with pytest.raises(ValueError, match=r"written by a different model.*leaf 'params\.\S+' "
                     r".*new workdir"):
    other.init_or_restore()
  other.close()
  same = _trainer("eagle1", 2, str(tmp_path))
  same.init_or_restore()
  assert same.resumed_from == 2
  same.close()


@pytest.mark.slow
def test_shipped_heads_are_lossless_and_accept():
  from specjax.models import defaults
  if not os.path.isdir(os.path.join(defaults.assets_dir(), "eagle1")):
    pytest.skip("shipped EAGLE heads not present")
  target, tp = defaults.load_default("target")
  tok = defaults.default_tokenizer()
  prompts = [tok.encode("import os\nimport sys\n\n\ndef main(").ids,
             tok.encode("class Error(Exception):\n    def __init__(self").ids]
  ref = generate(target, tp, prompts, max_new_tokens=24, eos_token_id=None).to_lists()
  for kind in ("eagle1", "eagle3"):
    head, hp, d2t = eagle_io.load_default_eagle(kind)
    drafter = EagleDrafter(num_draft=4, sampling=GREEDY, head=head)
    res = speculative_generate(target, tp, drafter, EagleDrafter.make_params(hp, target, tp, d2t),
                               verifiers.get("lossless"), prompts, max_new_tokens=24,
                               eos_token_id=None)
    assert res.to_lists() == ref
    assert res.stats.summary()["tau"] > 1.5, (kind, res.stats.summary())


@pytest.mark.slow
def test_train_eagle_binary_smoke(tmp_path):
  """experiments/train_eagle.py end to end on a random 4-layer target (tiny config),
  then a rerun that resumes from the final checkpoint."""
  from experiments.configs import eagle_tiny
  from experiments import train_eagle as binary
  from specjax.models import defaults, hf
  if not os.path.isdir(defaults.default_model_dir("target")):
    pytest.skip("default target (tokenizer) not present")
  cfg = TC.replace(vocab_size=4096, tie_word_embeddings=True)
  m = Model(cfg)
  hf.save_pretrained(str(tmp_path / "target"), cfg, m.init_params(jax.random.key(0)),
                     tokenizer=defaults.default_tokenizer())
  c = eagle_tiny.get_config("eagle3")
  c.target = str(tmp_path / "target")
  c.workdir = str(tmp_path / "run")
  c.train.num_steps = 2
  c.eval.tree_depth = 0
  metrics = binary.run(c)
  assert metrics["steps"] == 2 and metrics["acceptance_greedy"]["chain"]["tau"] >= 1.0
  head, _, d2t = eagle_io.load_eagle(metrics["export_dir"], cfg)
  assert head.config.kind == "eagle3" and d2t.shape == (256,)
  assert binary.run(c)["resumed_from"] == 2


# Both run in CI's slow step (18 s for the EAGLE-3 tree): chains keep their default-suite
# lossless test in tests/decoding/test_speculative.py, and the EAGLE-3 tree's first-step law is
# the target's exactly in tests/experiments/test_first_step_law.py.
@pytest.mark.slow
@pytest.mark.parametrize("kind,reduced,tree_kind", [("eagle1", False, "chain"),
                                                     ("eagle3", True, "dynamic")])
def test_sampled_lossless_eagle_reproduces_target_distribution(kind, reduced, tree_kind):
  """Lossless verification with EAGLE drafts at T = 1 (sampled chain; dynamic
  top-k tree with one-hot q) samples the target: martingale z-test over every
  generated token after the first, 1500 rows x 6 tokens, V = 32, max |z| < 4.5
  (P(false alarm) < 32 * 6.8e-6 per check; see tests/decoding/test_speculative.py)."""
  from tests.helpers import martingale_z, teacher_forced_probs
  target, tp = eagle_target()
  head, p, d2t = eagle_head(kind, reduced)
  samp = SamplingConfig(temperature=1.0)
  drafter = (EagleTreeDrafter(depth=3, top_k=3, total_tokens=8, sampling=samp, head=head)
             if tree_kind == "dynamic" else EagleDrafter(3, samp, head=head))
  params = EagleDrafter.make_params(p, target, tp, d2t)
  prompt = [1, 2, 3, 4, 5]
  res = speculative_generate(target, tp, drafter, params, verifiers.get("lossless"),
                             [prompt] * 1500, max_new_tokens=6, sampling=samp,
                             key=jax.random.key(9), eos_token_id=None)
  s = res.stats.summary()
  assert 0 < s["accepted"] < 3 * s["target_calls"]
  probs = np.asarray(teacher_forced_probs(target, tp, prompt, res.tokens, samp))
  z = martingale_z(np.asarray(res.tokens)[:, 1:], probs[:, 1:], np.asarray(res.lengths) - 1)
  assert np.abs(z).max() < 4.5, z
