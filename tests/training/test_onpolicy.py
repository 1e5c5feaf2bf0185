"""On-policy store: the target's own answers, features captured during generation.

- greedy answers are exactly ``generate``'s greedy output (EOS included);
- every stored feature and top-k equals a teacher-forced forward over the stored
  sequence (so "captured during generation" loses nothing against a second pass);
- an interrupted build resumes to exactly the store an uninterrupted one writes,
  with the sampling temperature of each shard recorded;
- bad settings are refused before any work;
- transcripts (the answers alone, committed) rebuild a lost store by forward
  passes, and generation continues after them.
"""

import dataclasses
import types

import jax
import numpy as np
import pytest

from specjax.decoding.autoregressive import generate
from specjax.training import features, onpolicy, transcripts
from tests.helpers import tiny_pair

LAYERS = (0, 1, 2)  # tiny target: 2 layers; index 2 = final normed feature
EOS = 7  # the tiny target emits it within 12 tokens on some prompts


@pytest.fixture(scope="module")
def target():
  model, params, _, _ = tiny_pair(vocab=32, seed=1, eos=EOS)
  return dataclasses.replace(model, config=model.config.replace(hidden_layers=LAYERS)), params


def _prompts(n=6, seed=0):
  rs = np.random.RandomState(seed)
  return [onpolicy.Prompt(ids=tuple(int(t) for t in rs.randint(4, 32, rs.randint(2, 9))),
                          id=f"c{i}#0") for i in range(n)]


MIX = onpolicy.GenerationMix(temperatures=(0.0, 1.0), max_new_tokens=12, max_context=8,
                             batch_size=3)
CFG = features.FeatureStoreConfig(hidden_layers=LAYERS, top_k=5, seqs_per_shard=3, max_len=20)


def _build(d, target, prompts, mix_override=None, **kw):
  model, params = target
  return onpolicy.build_onpolicy_store(str(d), model, params, prompts, config=CFG,
                                       mix=mix_override or MIX,
                                       target_sha256="abc", eos_token_id=EOS, progress=False,
                                       **kw)


def _sequences(d):
  return [{k: np.asarray(v) for k, v in s.items()}
          for s in features.FeatureStore(str(d)).iter_sequences()]


@pytest.fixture(scope="module")
def full_store(tmp_path_factory, target):
  """The store of an uninterrupted build over ``_prompts()`` (built once)."""
  d = tmp_path_factory.mktemp("full")
  return d, _build(d, target, _prompts())


def test_greedy_answers_are_generate_and_features_equal_a_second_pass(target, full_store):
  model, params = target
  prompts = _prompts()
  d, m = full_store
  assert [s["temperature"] for s in m["shards"]] == [0.0, 1.0]
  # every generated shard names its seed, its key and the run that generated it
  assert [s["generation_seed"] for s in m["shards"]] == [MIX.seed] * 2
  assert m["shards"][1]["prng"].startswith(f"fold_in(fold_in(key({MIX.seed}), 1)")
  assert all(s["provenance"]["command"] and "git_dirty" in s["provenance"] for s in m["shards"])
  seqs = _sequences(d)
  assert len(seqs) == len(prompts)
  ref = generate(model, params, [list(p.ids) for p in prompts[:3]],
                 max_new_tokens=MIX.max_new_tokens, eos_token_id=EOS).to_lists()
  fn = features._feature_fn(model, CFG.top_k)
  ends_at_eos = 0
  for i, (p, s) in enumerate(zip(prompts, seqs)):
    lp = len(p.ids)
    np.testing.assert_array_equal(s["tokens"][:lp], p.ids)
    np.testing.assert_array_equal(s["loss_mask"], np.r_[np.zeros(lp), np.ones(len(s["tokens"]) - lp)])
    answer = s["tokens"][lp:].tolist()
    if i < 3:  # shard 0 is greedy
      assert answer == ref[i]
    ends_at_eos += answer[-1] == EOS
    assert EOS not in answer[:-1]
    assert len(answer) <= MIX.max_new_tokens
    f, ti, tl = fn(params, s["tokens"][None])
    np.testing.assert_allclose(s["features"].astype(np.float32),
                               np.asarray(f, np.float32).swapaxes(0, 1),  # bfloat16
                               rtol=1e-2, atol=1e-2)
    np.testing.assert_array_equal(s["topk_ids"][:, 0], np.asarray(ti)[:, 0])
    np.testing.assert_allclose(s["topk_logp"].astype(np.float32), np.asarray(tl), rtol=1e-3, atol=1e-3)  # float16
  assert ends_at_eos >= 1, "no answer ended at EOS: the test does not cover the EOS stop"


def test_interrupted_build_resumes_to_the_same_store(tmp_path, target, full_store):
  prompts = _prompts()
  full_dir, full = full_store
  part = _build(tmp_path / "part", target, prompts, max_loss_tokens=1)  # stops after shard 0
  assert len(part["shards"]) == 1
  resumed = _build(tmp_path / "part", target, prompts)
  assert [s["num_loss_tokens"] for s in resumed["shards"]] == \
         [s["num_loss_tokens"] for s in full["shards"]]
  for a, b in zip(_sequences(full_dir), _sequences(tmp_path / "part")):
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])
  with pytest.raises(ValueError, match="generation"):
    model, params = target
    onpolicy.build_onpolicy_store(str(full_dir), model, params, prompts, config=CFG,
                                  mix=dataclasses.replace(MIX, seed=1), target_sha256="abc",
                                  eos_token_id=EOS, progress=False)


def test_user_turns_and_bad_settings(target):
  conv = types.SimpleNamespace(id="x", messages=(
      {"role": "user", "content": "a"}, {"role": "assistant", "content": "bb"},
      {"role": "user", "content": "cccccccccc"}))
  skipped = []
  got = list(onpolicy.user_turn_prompts([conv], lambda ms: [1] * sum(len(m["content"]) for m in ms),
                                        max_context=5, skipped=skipped))
  assert [p.id for p in got] == ["x#0"] and skipped == ["x#2"]
  with pytest.raises(ValueError, match="temperatures"):
    onpolicy.GenerationMix(temperatures=(-1.0,))
  with pytest.raises(ValueError, match="batch_size"):
    onpolicy.GenerationMix(batch_size=0)
  model, params = target
  with pytest.raises(ValueError, match="max_len"):
    onpolicy.build_onpolicy_store("/nonexistent", model, params, [], config=CFG,
                                  mix=dataclasses.replace(MIX, max_new_tokens=30),
                                  target_sha256="abc", progress=False)
  no_final = dataclasses.replace(model, config=model.config.replace(hidden_layers=(0, 1)))
  with pytest.raises(ValueError, match="final feature"):
    onpolicy.generate_records(no_final, params, _prompts(1), temperature=0.0,
                              key=jax.random.key(0), max_new_tokens=4, top_k=2, eos_token_id=EOS)


def test_transcripts_rebuild_a_lost_store_and_generation_continues(tmp_path, target, full_store):
  """A machine without the store: shard 0 comes back from its transcript (forward pass,
  no sampling), shard 1 is generated; the result equals the uninterrupted build."""
  prompts = _prompts()
  full_dir, full = full_store
  tr = str(tmp_path / "transcripts")
  _build(tmp_path / "first", target, prompts, max_loss_tokens=1, transcripts_dir=tr)
  assert transcripts.count(tr) == 1
  rebuilt = _build(tmp_path / "second", target, prompts, transcripts_dir=tr)  # store "lost"
  assert [s.get("from_transcript", False) for s in rebuilt["shards"]] == [True, False]
  assert [s["temperature"] for s in rebuilt["shards"]] == [0.0, 1.0]
  assert transcripts.count(tr) == 2
  assert [s["num_loss_tokens"] for s in rebuilt["shards"]] == \
         [s["num_loss_tokens"] for s in full["shards"]]
  for a, b in zip(_sequences(full_dir), _sequences(tmp_path / "second")):
    for k in ("tokens", "loss_mask"):
      np.testing.assert_array_equal(a[k], b[k])
    np.testing.assert_allclose(a["features"].astype(np.float32), b["features"].astype(np.float32),
                               rtol=1e-2, atol=1e-2)  # decode step vs prefill, bfloat16
    np.testing.assert_array_equal(a["topk_ids"][:, 0], b["topk_ids"][:, 0])
  s = transcripts.summary(tr)
  assert s["generated_tokens"] == full["num_loss_tokens"] and s["turns"] == len(prompts)
  with pytest.raises(ValueError, match="other settings"):  # another seed: other answers
    _build(tmp_path / "third", target, prompts, transcripts_dir=tr,
           mix_override=dataclasses.replace(MIX, seed=1))
  with pytest.raises(ValueError, match="prompt stream"):
    _build(tmp_path / "fourth", target, prompts[::-1], transcripts_dir=tr)


def test_a_store_without_transcripts_gets_them_without_generating(tmp_path, target, full_store):
  full_dir, full = full_store
  tr = str(tmp_path / "transcripts")
  model, params = target
  # An empty prompt stream: nothing can be generated, so transcripts come from the store.
  onpolicy.build_onpolicy_store(str(full_dir), model, params, [], config=CFG, mix=MIX,
                                target_sha256="abc", eos_token_id=EOS, progress=False,
                                transcripts_dir=tr)
  assert transcripts.count(tr) == len(full["shards"])
  answers = [a for i in range(transcripts.count(tr)) for a in transcripts.read(tr, i).answers]
  for a, s in zip(answers, _sequences(full_dir)):
    np.testing.assert_array_equal(a, s["tokens"][s["loss_mask"] == 1])


def test_transcript_files_round_trip_and_refuse_other_settings(tmp_path):
  header = {"target_sha256": "abc", "generation": {"seed": 0}, "source": "s"}
  big = transcripts.TranscriptShard(ids=("a#0", "b#2"), answers=(np.array([1, 70000]),
                                                                  np.array([], np.int32)),
                                    temperature=0.7, header=header)
  transcripts.write(str(tmp_path), 0, big)
  got = transcripts.read(str(tmp_path), 0, expect_header=header)
  assert got.ids == big.ids and got.temperature == 0.7 and got.num_tokens == 2
  np.testing.assert_array_equal(got.answers[0], [1, 70000])  # uint32 when the vocab needs it
  assert transcripts.read(str(tmp_path), 1) is None
  with pytest.raises(ValueError, match="generation"):
    transcripts.read(str(tmp_path), 0, expect_header=dict(header, generation={"seed": 1}))
  with pytest.raises(ValueError, match="answers"):
    transcripts.TranscriptShard(ids=("a",), answers=(), temperature=0.0, header=header)
