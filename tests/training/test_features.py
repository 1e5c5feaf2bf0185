"""Feature store: stored values equal a direct target forward; an interrupted
build resumes to exactly the store an uninterrupted build writes; mismatched
restarts are refused."""

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.training import features
from tests.helpers import tiny_pair

LAYERS = (0, 1, 2)  # tiny target: 2 layers; index 2 = final normed feature


@dataclasses.dataclass
class Seq:
  id: str
  ids: np.ndarray
  loss_mask: np.ndarray


def _sequences(n=7):
  rs = np.random.RandomState(0)
  out = []
  for i in range(n):
    t = int(rs.randint(3, 20))
    out.append(Seq(f"c{i}", rs.randint(0, 32, t).astype(np.int32),
                   (rs.rand(t) < 0.6).astype(np.uint8)))
  return out


@pytest.fixture(scope="module")
def target():
  model, params, _, _ = tiny_pair(vocab=32, seed=1)
  return dataclasses.replace(model, config=model.config.replace(hidden_layers=LAYERS)), params


CFG = features.FeatureStoreConfig(hidden_layers=LAYERS, top_k=5, seqs_per_shard=2, bucket=8,
                                  max_len=32)


def _build(d, target, seqs, **kw):
  model, params = target
  return features.build_feature_store(str(d), model, params, seqs, config=CFG,
                                      target_sha256="abc", progress=False, **kw)


def _arrays(d):
  store = features.FeatureStore(str(d))
  return [{k: np.asarray(v) for k, v in s.items()} for s in store.iter_sequences()]


def test_stored_values_equal_a_direct_forward(tmp_path, target):
  model, params = target
  seqs = _sequences(3)
  m = _build(tmp_path, target, seqs)
  assert m["num_sequences"] == 3 and m["num_tokens"] == sum(len(s.ids) for s in seqs)
  for s, got in zip(seqs, _arrays(tmp_path)):
    t = len(s.ids)
    out = model.apply(params, jnp.asarray(s.ids)[None], jnp.arange(t)[None],
                      model.init_cache(1, t))
    want = np.asarray(out.hidden_states[:, 0].astype(jnp.bfloat16)).swapaxes(0, 1)
    np.testing.assert_array_equal(got["features"].astype(np.float32), want.astype(np.float32))
    logp = np.asarray(jax.nn.log_softmax(out.logits[0], -1))
    order = np.argsort(-logp, axis=-1)[:, :5]
    np.testing.assert_array_equal(got["topk_ids"][:, 0], order[:, 0])  # the argmax
    np.testing.assert_allclose(got["topk_logp"].astype(np.float32),
                               np.take_along_axis(logp, got["topk_ids"], -1),
                               rtol=1e-3, atol=1e-3)  # float16: 11-bit mantissa
    np.testing.assert_array_equal(got["tokens"], s.ids)
    np.testing.assert_array_equal(got["loss_mask"], s.loss_mask)


def test_interrupted_build_resumes_exactly(tmp_path, target):
  seqs = _sequences(7)
  _build(tmp_path / "full", target, seqs)
  full = _arrays(tmp_path / "full")
  part = tmp_path / "part"
  m = _build(part, target, seqs, max_tokens=1)  # stops after the first shard
  assert m["num_sequences"] == 2 and len(m["shards"]) == 1
  # what a kill leaves behind: a half-written shard and a renamed shard the
  # manifest does not list yet
  os.makedirs(part / ".tmp-shard-zz")
  (part / ".tmp-shard-zz" / "tokens.npy").write_bytes(b"garbage")
  os.makedirs(part / "shard-00001")
  m = _build(part, target, seqs)
  assert m["num_sequences"] == 7 and len(m["shards"]) == 4
  assert not any(n.startswith(".tmp-shard") for n in os.listdir(part))
  resumed = _arrays(part)
  assert [len(s["tokens"]) for s in resumed] == [len(s.ids) for s in seqs]  # none lost or doubled
  for a, b in zip(full, resumed):
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])


def test_restart_with_other_settings_is_refused(tmp_path, target):
  _build(tmp_path, target, _sequences(2))
  model, params = target
  with pytest.raises(ValueError, match="target_sha256='abc'.*'other'"):
    features.build_feature_store(str(tmp_path), model, params, _sequences(2), config=CFG,
                                 target_sha256="other", progress=False)
  with pytest.raises(ValueError, match="hidden_layers"):
    features.build_feature_store(str(tmp_path), model, params, _sequences(2),
                                 config=dataclasses.replace(CFG, hidden_layers=(1, 2)),
                                 target_sha256="abc", progress=False)
  with pytest.raises(ValueError, match="holds features of target sha256"):
    features.FeatureStore(str(tmp_path), expect_sha256="0" * 64)
  with pytest.raises(FileNotFoundError, match="no feature store"):
    features.FeatureStore(str(tmp_path / "absent"))
