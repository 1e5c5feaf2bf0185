"""Corpus split, tokenizer and batching: determinism and resume."""

import os

import numpy as np
import pytest

from specjax.data import batching, corpus
from specjax.data import tokenizer as tok_lib
from specjax.models import hf

CODE = '''def f(x):
    """Docstring with unicode: café – λ."""
    return {"a": [x, x ** 2]}  # comment


class Foo(object):
    def __init__(self):
        self.value = 42
'''


def _write_tree(root, files):
  for rel, text in files.items():
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
      f.write(text)


@pytest.fixture()
def tree(tmp_path):
  files = {f"pkg{i % 3}/mod{i}.py": CODE.replace("42", str(i)) * (1 + i % 4) for i in range(40)}
  files.update({"test/test_x.py": "x = 1\n", "site-packages/y.py": "y = 2\n",
                "pkg0/tests/t.py": "t = 3\n", "pkg1/notes.txt": "not python\n"})
  _write_tree(str(tmp_path), files)
  return str(tmp_path)


def test_split_is_deterministic_and_stable_under_additions(tree):
  cfg = corpus.CorpusConfig(root=tree, heldout_fraction=0.25, split_seed=3)
  files = corpus.list_files(cfg)
  assert len(files) == 40 and files == sorted(files)
  assert not any(f.startswith(("test/", "site-packages/")) or "/tests/" in f for f in files)
  held = corpus.split_files(cfg, "heldout")
  train = corpus.split_files(cfg, "train")
  assert set(held) | set(train) == set(files) and not set(held) & set(train)
  assert 0 < len(held) < 40
  assert held == corpus.split_files(cfg, "heldout")  # deterministic
  _write_tree(tree, {"pkg9/new.py": "z = 0\n"})  # adding a file moves no other file
  held2 = corpus.split_files(cfg, "heldout")
  assert [f for f in held2 if f != "pkg9/new.py"] == held
  # The split is a pure function of (seed, relative path).
  assert corpus.split_of("a/b.py", 0.5, 0) == corpus.split_of("a/b.py", 0.5, 0)
  other = corpus.CorpusConfig(root=tree, heldout_fraction=0.25, split_seed=4)
  assert corpus.split_files(other, "heldout") != held
  with pytest.raises(ValueError, match="heldout_fraction"):
    corpus.CorpusConfig(heldout_fraction=1.0)
  with pytest.raises(ValueError, match="split"):
    corpus.split_files(cfg, "valid")


def test_default_corpus_is_the_stdlib():
  cfg = corpus.CorpusConfig()
  assert cfg.resolved_root == os.path.dirname(os.__file__)


def test_tokenizer_round_trip_and_eos(tree, tmp_path):
  cfg = corpus.CorpusConfig(root=tree)
  texts = lambda: (t for _, t in corpus.read_documents(cfg, "train"))
  path = str(tmp_path / "tok" / "tokenizer.json")
  tok = tok_lib.load_or_train(path, texts, vocab_size=320)
  assert os.path.isfile(path)
  assert tok.get_vocab_size() == 320
  assert tok_lib.eos_id(tok) == 0
  for text in (CODE, "x = 'naïve ☃ 日本'\n\t\tpass  ", ""):
    assert tok.decode(tok.encode(text).ids) == text
  # Reloading (here through the HF loader) gives the same encodings.
  again = hf.load_tokenizer(path)
  assert again.encode(CODE).ids == tok.encode(CODE).ids
  # <|endoftext|> in text is one token.
  ids = tok.encode("a<|endoftext|>b").ids
  assert 0 in ids
  with pytest.raises(ValueError, match="vocab_size"):
    tok_lib.train_tokenizer(["x"], vocab_size=100)


def test_token_stream_cache_and_eos_separators(tree, tmp_path):
  cfg = corpus.CorpusConfig(root=tree, heldout_fraction=0.25)
  tok = tok_lib.train_tokenizer((t for _, t in corpus.read_documents(cfg, "train")), 320)
  plain = batching.load_token_stream(cfg, "train", tok)
  cached = batching.load_token_stream(cfg, "train", tok, str(tmp_path / "cache"))
  again = batching.load_token_stream(cfg, "train", tok, str(tmp_path / "cache"))
  np.testing.assert_array_equal(plain, cached)
  np.testing.assert_array_equal(plain, again)
  assert int((plain == 0).sum()) == len(corpus.split_files(cfg, "train"))
  assert plain[-1] == 0


def test_batching_deterministic_covers_epochs_and_resumes():
  stream = np.arange(1001, dtype=np.int32)
  b1 = batching.Batcher(stream, seq_len=10, batch_size=4)
  b2 = batching.Batcher(stream.copy(), seq_len=10, batch_size=4)
  assert b1.num_windows == 100
  state = batching.DataState(seed=7, step=0)
  seen = []
  for _ in range(50):  # two epochs
    x = b1.batch(state)
    np.testing.assert_array_equal(x["targets"][:, :-1], x["tokens"][:, 1:])
    np.testing.assert_array_equal(x["tokens"], b2.batch(state)["tokens"])
    seen.append(x["tokens"][:, 0] // 10)
    state = batching.next_state(state)
  seen = np.concatenate(seen)
  assert sorted(seen[:100]) == list(range(100)) and sorted(seen[100:]) == list(range(100))
  assert list(seen[:100]) != list(seen[100:])  # a new permutation each epoch
  # Resume: a fresh batcher from a saved state reproduces the batch exactly.
  saved = batching.DataState.from_json(batching.DataState(seed=7, step=31).to_json())
  np.testing.assert_array_equal(batching.Batcher(stream, 10, 4).batch(saved)["tokens"],
                                b1.batch(batching.DataState(7, 31))["tokens"])
  assert not np.array_equal(b1.batch(batching.DataState(8, 0))["tokens"],
                            b1.batch(batching.DataState(7, 0))["tokens"])
  ev = b1.eval_batches(3)
  assert len(ev) == 3 and ev[0]["tokens"][0, 0] == 0 and ev[1]["tokens"][0, 0] == 40
  with pytest.raises(ValueError, match="shorter"):
    batching.Batcher(np.arange(5), seq_len=10, batch_size=1)
