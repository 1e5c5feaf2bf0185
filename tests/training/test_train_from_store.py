"""Training heads and a draft LM from a feature store: windows and split, the
store losses against the on-the-fly path on the same data, draft-vocabulary
coverage, exact resume, and refusal of a head / run of another target."""

import collections
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.data.batching import DataState
from specjax.models import eagle, eagle_io
from specjax.models.config import ModelConfig
from specjax.models.transformer import Model
from specjax.training import distill, draft_vocab, features, optim, store_batching
from specjax.training import eagle as train_eagle
from specjax.training import store_losses, store_trainer, target_dist
from tests.helpers import scaled_params

V = 32
TC = ModelConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                 tie_word_embeddings=True)
LAYERS = (1, 2, 3, 4)  # EAGLE-3 fuses (1, 2, 3); EAGLE-1 reads 4 (the final feature)
SHA = "ab" * 32
T = 16
Seq = collections.namedtuple("Seq", "ids loss_mask id")


def _sequences():
  """6 sequences of T + 1 tokens with all-assistant masks (one window each: the
  on-the-fly comparison), then 6 of mixed lengths and masks."""
  rng = np.random.default_rng(0)
  out = []
  for i in range(12):
    n = T + 1 if i < 6 else int(rng.integers(3, 40))
    mask = np.ones(n, np.uint8) if i < 6 else (rng.random(n) < 0.6).astype(np.uint8)
    out.append(Seq(rng.integers(0, V, n).astype(np.int32), mask, f"conv-{i}"))
  return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
  target = Model(TC.replace(hidden_layers=LAYERS))
  tp = scaled_params(target, 0, 3.0)
  d = str(tmp_path_factory.mktemp("store"))
  cfg = features.FeatureStoreConfig(hidden_layers=LAYERS, top_k=V, seqs_per_shard=6, bucket=64,
                                    max_len=64)  # one padded length: one compilation
  features.build_feature_store(d, target, tp, _sequences(), config=cfg, target_sha256=SHA,
                               target_name="tiny", progress=False)
  return target, tp, features.FeatureStore(d)


def _batcher(store, layers=(), split="train", **kw):
  cfg = store_batching.StoreBatchConfig(window=T, batch_size=3, feature_layers=layers,
                                        eval_permille=kw.pop("eval_permille", 0), **kw)
  return store_batching.StoreBatcher(store, cfg, split)


def test_windows_mask_split_and_determinism(tiny):
  _, _, store = tiny
  b = _batcher(store, layers=(4, 1))
  seqs = _sequences()
  # Every window is a slice of one stored sequence; mask[s] = loss_mask[s + 1] inside it.
  starts = {}
  for shard, s, n, end in b.windows:
    off = np.asarray(store.shard(int(shard))["offsets"])
    j = int(np.searchsorted(off, s, side="right")) - 1
    seq = seqs[int(shard) * 6 + j]
    starts.setdefault(seq.id, []).append(int(s - off[j]))
    assert n == min(T, end - s) and end == off[j + 1]
  assert starts["conv-0"] == [0]  # T + 1 tokens: one window (the last token predicts nothing)
  assert all(s % T == 0 for v in starts.values() for s in v)
  batch = b.gather([0, 1, len(b.windows) - 1])
  shard, s, n, end = b.windows[-1]
  sh = store.shard(int(shard))
  np.testing.assert_array_equal(batch["tokens"][2, :n], sh["tokens"][s:s + n])
  assert not batch["tokens"][2, n:].any()
  want = np.zeros(T, np.float32)
  m = sh["loss_mask"][s + 1:min(s + n + 1, end)]
  want[:len(m)] = m
  np.testing.assert_array_equal(batch["mask"][2], want)
  np.testing.assert_array_equal(batch["features"][0, 2, :n], sh["features"][s:s + n, 3])
  np.testing.assert_array_equal(batch["features"][1, 2, :n], sh["features"][s:s + n, 0])
  assert batch["features"].shape == (2, 3, T, 32) and batch["topk_ids"].shape == (3, T, V)
  # Batches are a pure function of (seed, step); another seed gives another order.
  st = DataState(seed=3, step=5)
  for k, v in b.batch(st).items():
    np.testing.assert_array_equal(v, _batcher(store, layers=(4, 1)).batch(st)[k])
  assert not np.array_equal(b.batch(st)["tokens"], b.batch(DataState(4, 5))["tokens"])
  # Held-out sequences (hashed ids) are disjoint from training ones.
  tr, he = (_batcher(store, split=s, eval_permille=400) for s in ("train", "heldout"))
  key = lambda w: (int(w[0]), int(w[3]))  # (shard, sequence end) identifies a sequence
  assert len(he.windows) and not {key(w) for w in tr.windows} & {key(w) for w in he.windows}
  assert len(tr.windows) + len(he.windows) == len(b.windows)
  assert _batcher(store, num_shards=1).num_windows < b.num_windows
  # An on-policy sequence ("<conversation>#<turn>") sits on its conversation's side.
  assert store_batching.conversation_id("conv-3#12") == "conv-3"
  assert [store_batching.conversation_id(i) for i in ("a#b", "#3", "x")] == ["a#b", "#3", "x"]
  assert all(store_batching.is_heldout(f"conv-{i}#{t}", 400) == store_batching.is_heldout(
      f"conv-{i}", 400) for i in range(40) for t in (0, 3))
  with pytest.raises(ValueError, match=r"feature_layers=\(0,\).*hidden_layers=\(1, 2, 3, 4\)"):
    _batcher(store, layers=(0,))
  with pytest.raises(ValueError, match="num_shards=9"):
    _batcher(store, num_shards=9)


def _on_the_fly_batch(store):
  """The 6 full-mask sequences as one batch, windows of T tokens at position 0."""
  b = _batcher(store, layers=LAYERS)
  rows = [i for i, w in enumerate(b.windows) if w[3] - w[1] == T + 1][:3]
  return b, rows


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_store_loss_equals_on_the_fly_loss(tiny, kind):
  target, tp, store = tiny
  hcfg = eagle.EagleConfig.for_target(TC, kind, draft_vocab_size=16 if kind == "eagle3" else None)
  head = eagle.EagleHead(hcfg)
  params = head.init_params(jax.random.key(1))
  draft_ids = tuple(range(0, V, 2)) if kind == "eagle3" else None
  b, rows = _on_the_fly_batch(store)
  batch = _batcher(store, layers=hcfg.target_layers).gather(rows)
  assert batch["mask"][:, :T - 1].all() and batch["mask"][:, T - 1].all()
  cfg = train_eagle.EagleTrainConfig(ttt_steps=3)
  loss = store_losses.EagleStoreLoss(head, target, cfg, draft_ids)
  frozen = store_losses.frozen_target_params(target, tp)
  assert set(frozen) == {"embed_tokens"}
  store_loss = jax.jit(lambda p, fr, b: loss(p, fr, b)[1])
  got = jax.device_get(store_loss(params, frozen, batch))
  t2 = train_eagle.target_for_head(Model(TC), head)
  fly = train_eagle.make_loss_fn(head, t2, cfg, None if draft_ids is None
                                 else jnp.asarray(draft_ids))
  want = jax.jit(lambda p, tp, tok: fly(p, tp, tok, None)[1])(params, tp, batch["tokens"])
  assert set(got) == set(want)
  for k in want:  # bf16 features and float16 log-probs in the store
    np.testing.assert_allclose(got[k], float(want[k]), rtol=2e-2, atol=2e-3, err_msg=k)
  # A zero mask removes positions: weights change the loss.
  half = dict(batch, mask=batch["mask"] * (np.arange(T) < T // 2))
  assert float(store_loss(params, frozen, half)["loss"]) != pytest.approx(float(got["loss"]),
                                                                          rel=1e-4)


# In the slow step (the default suite's 8-minute budget).
@pytest.mark.slow
def test_distill_loss_equals_dense_cross_entropy(tiny):
  target, tp, store = tiny
  b, rows = _on_the_fly_batch(store)
  batch = _batcher(store).gather(rows)
  dcfg = distill.draft_config(TC, num_layers=2)
  dparams = distill.init_from_target(dcfg, target, tp)
  assert distill.spread_layers(4, 2) == (0, 3)
  np.testing.assert_array_equal(dparams["layers"]["mlp"]["up_proj"]["kernel"][1],
                                tp["layers"]["mlp"]["up_proj"]["kernel"][3])
  rand = distill.init_from_target(dcfg, target, tp, key=jax.random.key(5))
  np.testing.assert_array_equal(rand["embed_tokens"]["embedding"],
                                tp["embed_tokens"]["embedding"])
  assert not np.array_equal(rand["layers"]["mlp"]["up_proj"]["kernel"],
                            dparams["layers"]["mlp"]["up_proj"]["kernel"])
  dm = Model(dcfg)
  got = float(distill.DistillLoss(dm)(dparams, {}, batch)[0])
  tok = jnp.asarray(batch["tokens"])
  pos = jnp.broadcast_to(jnp.arange(T), tok.shape)
  p = jax.nn.softmax(target.apply(tp, tok, pos, target.init_cache(3, T)).logits, -1)
  logq = jax.nn.log_softmax(dm.apply(dparams, tok, pos, dm.init_cache(3, T)).logits, -1)
  want = float(jnp.mean(-jnp.sum(p * logq, -1)))  # every position is a target here
  assert got == pytest.approx(want, rel=1e-2)
  # The shipped form: the embedding is the target's, passed frozen -- same loss, and the
  # gradient covers exactly the trainable part.
  trainable, shared = distill.split_shared(dparams)
  assert set(shared) == {"embed_tokens"} and "embed_tokens" not in trainable
  assert float(distill.DistillLoss(dm)(trainable, shared, batch)[0]) == got
  grads = jax.grad(lambda p: distill.DistillLoss(dm)(p, shared, batch)[0])(trainable)
  assert set(grads) == set(trainable)
  with pytest.raises(ValueError, match="num_layers=9"):
    distill.draft_config(TC, num_layers=9)


def test_token_budget_and_mixture(tiny):
  """Equal-token comparisons: a budget keeps the stream-order prefix of the training
  windows that first reaches it (held-out untouched); a mixture batches the union of
  its parts' windows, each window gathered exactly as its part would."""
  _, _, store = tiny
  full = _batcher(store, layers=(4,), eval_permille=300)
  per = store_batching.window_targets(store, full.windows)
  assert per.min() >= 1  # every kept window has a target position
  budget = int(per[:3].sum()) - 1  # reached inside the third window
  cut = _batcher(store, layers=(4,), eval_permille=300, max_target_tokens=budget)
  np.testing.assert_array_equal(cut.windows, full.windows[:3])
  assert cut.describe()["target_tokens"] == per[:3].sum() >= budget > per[:2].sum()
  big = _batcher(store, layers=(4,), eval_permille=300, max_target_tokens=10**9)
  np.testing.assert_array_equal(big.windows, full.windows)
  held = [_batcher(store, layers=(4,), split="heldout", eval_permille=300, max_target_tokens=m)
          for m in (0, 1)]
  np.testing.assert_array_equal(held[0].windows, held[1].windows)
  with pytest.raises(ValueError, match="max_target_tokens=-1"):
    _batcher(store, max_target_tokens=-1)

  mix = store_batching.MixedBatcher([cut, full])
  assert mix.num_windows == cut.num_windows + full.num_windows
  assert mix.num_shards == [cut.num_shards, full.num_shards]
  rows = [0, 2, 3, mix.num_windows - 1]  # part 0, part 0, part 1's first, part 1's last
  got = mix.gather(rows)
  want = [cut.gather([0]), cut.gather([2]), full.gather([0]), full.gather([full.num_windows - 1])]
  for k in got:
    axis = 1 if k == "features" else 0
    np.testing.assert_array_equal(got[k], np.concatenate([w[k] for w in want], axis=axis))
  st = DataState(seed=1, step=2)
  for k, v in mix.batch(st).items():
    np.testing.assert_array_equal(v, store_batching.MixedBatcher([cut, full]).batch(st)[k])
  np.testing.assert_array_equal(draft_vocab.argmax_counts(mix, V),
                                draft_vocab.argmax_counts(cut, V)
                                + draft_vocab.argmax_counts(full, V))
  d = mix.describe()
  assert d["target_tokens"] == cut.describe()["target_tokens"] + full.describe()["target_tokens"]
  with pytest.raises(ValueError, match="parts disagree on batch_size"):
    store_batching.MixedBatcher([cut, store_batching.StoreBatcher(
        store, store_batching.StoreBatchConfig(window=T, batch_size=2, feature_layers=(4,)))])


def test_coverage_and_draft_maps_by_hand(tiny):
  counts = np.array([0, 5, 0, 3, 2, 0, 0, 0])
  assert draft_vocab.coverage(counts, (1, 2, 3, 8)) == {1: 0.5, 2: 0.8, 3: 1.0, 8: 1.0}
  ids, d2t, t2d = draft_vocab.draft_maps(counts, 3)
  assert ids.tolist() == [1, 3, 4] and d2t.tolist() == [1, 2, 2]
  assert t2d.tolist() == [False, True, False, True, True, False, False, False]
  assert draft_vocab.draft_vocab(counts, 2, always=(7,)).tolist() == [1, 7]
  assert draft_vocab.draft_vocab(counts, 4).tolist() == [0, 1, 3, 4]  # tie -> lower id
  with pytest.raises(ValueError, match="no occurrence"):
    draft_vocab.coverage(np.zeros(4))
  # On the store: argmax ids counted on target positions only.
  _, _, store = tiny
  b = _batcher(store)
  want = np.zeros(V, np.int64)
  for shard, s, n, end in b.windows:
    sh = store.shard(int(shard))
    for i in range(s, min(s + n, end - 1)):
      if sh["loss_mask"][i + 1]:
        want[sh["topk_ids"][i, 0]] += 1
  got = draft_vocab.argmax_counts(b, V)
  np.testing.assert_array_equal(got, want)
  assert draft_vocab.coverage(got, (V,)) == {V: 1.0}


def _trainer(store, target, tp, workdir, steps, num_shards=0, kind="eagle1"):
  hcfg = eagle.EagleConfig.for_target(TC, kind)
  head = eagle.EagleHead(hcfg)
  cfg = train_eagle.EagleTrainConfig(ttt_steps=2, feature_noise=0.05)
  loss = store_losses.EagleStoreLoss(head, target, cfg)
  mk = lambda split: store_batching.StoreBatcher(store, store_batching.StoreBatchConfig(
      window=T, batch_size=2, feature_layers=hcfg.target_layers, eval_permille=300,
      num_shards=num_shards), split)
  return store_trainer.StoreTrainer(
      loss, store_losses.frozen_target_params(target, tp), head.init_params,
      optim.OptimConfig(learning_rate=1e-2, warmup_steps=1, total_steps=steps),
      store_trainer.StoreTrainConfig(num_steps=steps, eval_every=2, eval_batches=1,
                                     checkpoint_every=2, log_every=100),
      mk("train"), mk("heldout"), workdir, record={"kind": kind}, progress=False)


def test_resume_reproduces_uninterrupted_run_and_training_json(tiny, tmp_path):
  target, tp, store = tiny
  n = 3
  full = _trainer(store, target, tp, None, 2 * n)
  ref = [h["loss"] for h in full.train()]
  assert np.mean(ref[-2:]) < ref[0]
  first = _trainer(store, target, tp, str(tmp_path), 2 * n)
  first.train(stop_after=n)
  first.close()
  with pytest.raises(ValueError, match="first 2 shards.*num_shards=2"):
    _trainer(store, target, tp, str(tmp_path), 2 * n, num_shards=1).init_or_restore()
  resumed = _trainer(store, target, tp, str(tmp_path), 2 * n)
  hist = resumed.train()
  resumed.close()
  assert resumed.resumed_from == n
  assert [h["loss"] for h in hist] == ref  # bitwise
  assert [e["eval_loss"] for e in resumed.evals] == [e["eval_loss"] for e in full.evals]
  rec = json.load(open(tmp_path / "training.json"))
  assert rec["steps"] == 2 * n and rec["target_sha256"] == SHA and rec["kind"] == "eagle1"
  assert rec["data"]["store"] == store.dir and rec["data"]["num_shards"] == 2
  assert rec["tokens_seen"] == 2 * n * 2 * T and rec["loss_history"] == ref
  assert 0 < rec["target_positions_seen"] <= rec["tokens_seen"]
  # provenance of the (resumed) run, and what the store was built from
  assert rec["provenance"]["command"] and "git_dirty" in rec["provenance"]
  assert "load_average_end" in rec["provenance"] and "generation" in rec["data"]
  with pytest.raises(ValueError, match="kind='eagle1'.*kind='eagle3'"):
    _trainer(store, target, tp, str(tmp_path), 2 * n, kind="eagle3")


def test_head_of_another_target_is_refused(tmp_path):
  cfg = eagle.EagleConfig.for_target(TC, "eagle3", draft_vocab_size=16)
  params = eagle.EagleHead(cfg).init_params(jax.random.key(0))
  d2t, t2d = eagle.vocab_maps(np.arange(0, V, 2), V)
  eagle_io.save_eagle(str(tmp_path / "h"), cfg, params, d2t, t2d,
                   extra_config={"target_sha256": SHA})
  head, _, got_d2t = eagle_io.load_eagle(str(tmp_path / "h"), TC, expect_target_sha256=SHA)
  assert head.config == cfg.replace(dtype="float32", param_dtype="float32")
  with pytest.raises(ValueError, match="trained for target sha256 abababababab.*not this "
                                       "target cdcdcdcdcdcd"):
    eagle_io.load_eagle(str(tmp_path / "h"), TC, expect_target_sha256="cd" * 32)
  eagle_io.save_eagle(str(tmp_path / "old"), cfg, params, d2t, t2d)
  with pytest.raises(ValueError, match="records no target_sha256"):
    eagle_io.load_eagle(str(tmp_path / "old"), TC, expect_target_sha256=SHA)
  eagle_io.load_eagle(str(tmp_path / "old"), TC)  # unchecked load still works


def _word_tokenizer():
  from tokenizers import Tokenizer, models, pre_tokenizers
  tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(V)}, unk_token="w0"))
  tok.pre_tokenizer = pre_tokenizers.Whitespace()
  return tok


@pytest.mark.slow
def test_train_from_store_binary_eagle3_and_draft(tmp_path):
  """experiments/train_from_store.py on a tiny HF target and its store: 2 steps each
  of EAGLE-3 and the draft LM, exports that load, a rerun that resumes."""
  from experiments import train_from_store as binary
  from experiments.configs import from_store
  from specjax.models import hf, registry
  tdir = str(tmp_path / "target")
  target = Model(TC.replace(hidden_layers=LAYERS))
  tp = scaled_params(target, 0, 3.0)
  hf.save_pretrained(tdir, TC, tp, tokenizer=_word_tokenizer())
  sha = registry.file_sha256(os.path.join(tdir, "model.safetensors"))
  store = str(tmp_path / "store")
  features.build_feature_store(
      store, target, tp, _sequences(), target_sha256=sha, progress=False,
      config=features.FeatureStoreConfig(hidden_layers=LAYERS, top_k=8, seqs_per_shard=6,
                                         bucket=64, max_len=64))
  for kind in ("eagle3", "draft"):
    c = from_store.get_config(kind)
    c.target, c.store, c.workdir = tdir, store, str(tmp_path / kind)
    c.data.window, c.data.batch_size, c.data.eval_permille = T, 2, 300
    c.head.draft_vocab_size, c.head.coverage_sizes = 16, (4, 8)
    c.draft.num_layers = 1
    c.train.num_steps, c.train.ttt_steps, c.train.eval_batches = 2, 2, 1
    c.train.checkpoint_every, c.train.progress = 1, False
    out = binary.run(c)
    assert out["steps"] == 2 and out["target_sha256"] == sha and out["data"]["store"] == store
    rec = json.load(open(tmp_path / kind / "training.json"))
    assert rec["export_dir"] == out["export_dir"] and len(rec["loss_history"]) == 2
    if kind == "eagle3":
      assert set(rec["draft_vocab_coverage"]) == {"4", "8", "16"}
      head, _, d2t = eagle_io.load_eagle(out["export_dir"], TC, expect_target_sha256=sha)
      assert head.config.draft_vocab_size == 16 and d2t.shape == (16,)
    else:
      from specjax.models import drafter_assets
      m, p = hf.load_pretrained(out["export_dir"])
      assert m.config.num_hidden_layers == 1 and m.config.tie_word_embeddings
      # the embedding was not trained (bfloat16 export), and the shipped form (no
      # embedding: the target's, exact) holds the same layers
      emb = tp["embed_tokens"]["embedding"]
      np.testing.assert_array_equal(p["embed_tokens"]["embedding"],
                                    emb.astype(jnp.bfloat16).astype(jnp.float32))
      am, ap = drafter_assets.load_draft(str(tmp_path / kind / "asset"), target, tp,
                                         target_sha256=sha)
      np.testing.assert_array_equal(ap["embed_tokens"]["embedding"], emb)
      jax.tree.map(np.testing.assert_array_equal, ap["layers"], p["layers"])
      assert json.load(open(os.path.join(out["export_dir"], "config.json")))[
          "specjax_target_sha256"] == sha
      assert os.path.isfile(os.path.join(out["export_dir"], "tokenizer.json"))
    assert binary.run(c)["resumed_from"] == 2
  # Continue training the exported EAGLE-3 head: the run starts from its weights and
  # keeps its draft vocabulary; a head of another configuration is refused.
  e3 = from_store.get_config("eagle3")
  e3.target, e3.store, e3.workdir = tdir, store, str(tmp_path / "continued")
  e3.data.window, e3.data.batch_size, e3.data.eval_permille = T, 2, 300
  e3.head.draft_vocab_size, e3.head.coverage_sizes = 16, (4, 8)
  e3.train.num_steps, e3.train.ttt_steps, e3.train.eval_batches = 2, 2, 1
  e3.train.progress, e3.head.init_from = False, str(tmp_path / "eagle3" / "head")
  _, exported, d2t = eagle_io.load_eagle(e3.head.init_from, TC)
  built = binary.build(e3)
  jax.tree.map(np.testing.assert_array_equal, built.trainer.init_state().params, exported)
  np.testing.assert_array_equal(np.load(tmp_path / "continued" / "draft_vocab.npy"),
                                np.asarray(d2t) + np.arange(16))
  built.trainer.close()
  e3.workdir, e3.head.draft_vocab_size = str(tmp_path / "refused"), 8
  with pytest.raises(ValueError, match=r"head.init_from=.*differs from this run's in"):
    binary.build(e3)
  # ... and the exported draft LM in its shipped form (the target's embedding stays
  # shared, not trained); a draft of another depth is refused.
  from specjax.models import drafter_assets
  dc = from_store.get_config("draft")
  dc.target, dc.store, dc.workdir = tdir, store, str(tmp_path / "draft-continued")
  dc.data.window, dc.data.batch_size, dc.data.eval_permille = T, 2, 300
  dc.draft.num_layers, dc.train.num_steps, dc.train.progress = 1, 2, False
  dc.draft.init_from = str(tmp_path / "draft" / "asset")
  _, shipped = drafter_assets.load_draft(dc.draft.init_from, target, tp, target_sha256=sha)
  built = binary.build(dc)
  start = built.trainer.init_state().params
  assert "embed_tokens" not in start
  jax.tree.map(np.testing.assert_array_equal, start, distill.split_shared(shipped)[0])
  built.trainer.close()
  rec = binary.run(dc)  # its record names where it started, not target layers
  assert rec["init_from"] == dc.draft.init_from and rec["init_layers"] is None
  dc.workdir, dc.draft.num_layers = str(tmp_path / "refused-draft"), 2
  with pytest.raises(ValueError, match=r"draft.init_from=.*differs from this run's in"):
    binary.build(dc)
  dc.draft.num_layers, dc.draft.init_from = 1, out["export_dir"]  # the HF export, not an asset
  with pytest.raises(ValueError, match=r"draft.init_from=.*not a draft LM in the shipped form"):
    binary.build(dc)
  # A mixture of two stores at a token budget: half the budget from each, resumable.
  c.store, c.workdir, c.data.max_target_tokens = f"{store},{store}", str(tmp_path / "mix"), 40
  out = binary.run(c)
  parts = out["data"]["mixture"]
  assert len(parts) == 2 and all(20 <= p["target_tokens"] < 20 + T for p in parts)
  assert out["data"]["num_shards"] == [2, 2] and binary.run(c)["resumed_from"] == 2
  c.store = str(tmp_path / "nowhere")
  with pytest.raises(FileNotFoundError, match="no feature store"):
    binary.run(c)
