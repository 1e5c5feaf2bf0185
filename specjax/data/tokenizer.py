"""Byte-level BPE tokenizer (``tokenizers`` library), saved as ``tokenizer.json``.

Special tokens come first, so ``<|endoftext|>`` has id 0; it separates files
in the token stream and is the models' EOS.
"""

from __future__ import annotations

import os
from typing import Iterable

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = (EOS_TOKEN, PAD_TOKEN)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 4096, min_frequency: int = 2,
                    special_tokens: tuple = SPECIAL_TOKENS):
  """Train a GPT-2-style byte-level BPE on ``texts``; returns a ``tokenizers.Tokenizer``.

  Deterministic for a given text sequence (single-threaded merges are
  order-independent in ``tokenizers``; ties break lexicographically).
  """
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
  if vocab_size < 256 + len(special_tokens):
    raise ValueError(f"vocab_size={vocab_size} must be >= {256 + len(special_tokens)} "
                     "(256 byte symbols + special tokens)")
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                special_tokens=list(special_tokens),
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator(texts, trainer=trainer)
  return tok


def eos_id(tokenizer) -> int:
  i = tokenizer.token_to_id(EOS_TOKEN)
  if i is None:
    raise ValueError(f"tokenizer has no {EOS_TOKEN} token")
  return i


def load_or_train(path: str, texts_fn, vocab_size: int = 4096):
  """Load ``path`` (a tokenizer.json) if it exists, else train on ``texts_fn()`` and save there."""
  from tokenizers import Tokenizer
  if os.path.isfile(path):
    return Tokenizer.from_file(path)
  tok = train_tokenizer(texts_fn(), vocab_size=vocab_size)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = path + ".tmp"
  tok.save(tmp)
  os.replace(tmp, path)
  return tok
