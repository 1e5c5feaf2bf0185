"""Host-side prompt validation and bucketing (done once, before tracing)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from specjax.checks import ArgumentTypeError

MIN_BUCKET = 16


def bucket_length(n: int, minimum: int = MIN_BUCKET) -> int:
  """Next power of two >= max(n, minimum): prompt lengths within a bucket share one compile."""
  b = minimum
  while b < n:
    b *= 2
  return b


_TEXT_HINT = "encode text first, e.g. tokenizer.encode(text).ids"


def _prompt_rows(prompts) -> list:
  """The rows of a batch of prompts; refuses text and a flat list of ids."""
  if isinstance(prompts, (str, bytes)):
    raise ArgumentTypeError(f"prompts={prompts[:40]!r} is text; prompts are lists of token ids: "
                    f"{_TEXT_HINT}")
  if hasattr(prompts, "shape") and getattr(prompts, "ndim", 0) == 2:
    return list(np.asarray(prompts))
  if not isinstance(prompts, (list, tuple)):
    raise ArgumentTypeError(f"prompts must be a list of token-id lists or (tokens [B, P], lengths [B]); "
                    f"got {type(prompts).__name__}")
  if prompts and all(isinstance(r, (int, np.integer)) and not isinstance(r, bool)
                     for r in prompts):
    shown = list(prompts[:8]) + (["..."] if len(prompts) > 8 else [])
    raise ValueError(f"prompts={shown} is a flat list of token ids, which would be read as "
                     f"{len(prompts)} one-token prompts; give a batch: [[{', '.join(map(str, shown))}]]")
  return list(prompts)


def _token_row(i: int, row) -> list[int]:
  """Prompt ``i`` as a list of Python ints; ``TypeError`` naming the row otherwise."""
  if isinstance(row, (str, bytes)):
    raise ArgumentTypeError(f"prompt {i} is text ({row[:40]!r}); {_TEXT_HINT}")
  if hasattr(row, "dtype"):
    a = np.asarray(row)
    if a.ndim != 1 or a.dtype.kind not in "iu":
      raise ArgumentTypeError(f"prompt {i} must be a 1-D array of integer token ids; got shape "
                      f"{a.shape}, dtype {a.dtype}")
    return a.tolist()
  if not isinstance(row, (list, tuple)):
    raise ArgumentTypeError(f"prompt {i}={row!r} must be a list of token ids (a batch of prompts is a "
                    f"list of lists)")
  for t in row:
    if isinstance(t, bool) or not isinstance(t, (int, np.integer)):
      raise ArgumentTypeError(f"prompt {i} holds {t!r} ({type(t).__name__}); token ids must be ints"
                      + (f" ({_TEXT_HINT})" if isinstance(t, str) else ""))
  return [int(t) for t in row]


def prepare_prompts(prompts, vocab_size: int, *, bucket: int | None = None, pad_id: int = 0,
                    min_bucket: int | None = None):
  """Validate prompts and right-pad them to a bucket.

  Args:
    prompts: a list of token-id lists, or a tuple ``(tokens [B, P], lengths [B])``.
    vocab_size: ids must lie in ``[0, vocab_size)``.
    bucket: padded length; default :func:`bucket_length` of the longest prompt.
    min_bucket: with ``bucket=None``, pad to at least ``bucket_length(min_bucket)``: every
      batch whose prompts fit it gets the same shape (one compiled program).

  Returns:
    ``(tokens int32 [B, bucket], lengths int32 [B])`` as numpy arrays.
  """
  if isinstance(prompts, tuple) and len(prompts) == 2 and hasattr(prompts[0], "shape"):
    toks, lens = np.asarray(prompts[0]), np.asarray(prompts[1])
    if toks.ndim != 2 or lens.shape != (toks.shape[0],):
      raise ValueError(f"prompt arrays must be tokens [B, P] and lengths [B]; got "
                       f"{toks.shape} and {lens.shape}")
    if toks.dtype.kind not in "iu" or lens.dtype.kind not in "iu":
      raise ArgumentTypeError(f"prompt arrays must hold integer token ids; got dtypes {toks.dtype} "
                      f"and {lens.dtype}")
    if lens.size and (lens.min() < 0 or lens.max() > toks.shape[1]):
      raise ValueError(f"prompt lengths must lie in [1, {toks.shape[1]}]; got {lens.tolist()}")
    rows = [toks[i, :int(lens[i])].tolist() for i in range(toks.shape[0])]
  else:
    if hasattr(prompts, "dtype") and getattr(prompts, "ndim", 0) == 1:
      prompts = [prompts]  # one prompt as a 1-D array (documented; a flat *list* is refused)
    rows = [_token_row(i, r) for i, r in enumerate(_prompt_rows(prompts))]
  if not rows:
    raise ValueError("prompts is empty: give at least one prompt")
  lengths = np.array([len(r) for r in rows], np.int32)
  if lengths.min() < 1:
    raise ValueError(f"prompt {int(np.argmin(lengths))} is empty; every prompt needs >= 1 token")
  for i, r in enumerate(rows):
    if r and (min(r) < 0 or max(r) >= vocab_size):
      raise ValueError(f"prompt {i} has token ids outside [0, {vocab_size}): "
                       f"min {min(r)}, max {max(r)}")
  longest = int(lengths.max())
  if min_bucket is not None and not (isinstance(min_bucket, (int, np.integer))
                                     and min_bucket >= 1):
    raise ValueError(f"prompt_bucket={min_bucket!r} must be a positive integer or None")
  p = bucket_length(max(longest, min_bucket or 1)) if bucket is None else bucket
  if p < longest:
    raise ValueError(f"prompt bucket {p} is shorter than the longest prompt ({longest} tokens)")
  tokens = np.full((len(rows), p), pad_id, np.int32)
  for i, r in enumerate(rows):
    tokens[i, :len(r)] = r
  return tokens, lengths


def resolve_cache_length(prompt_lengths: np.ndarray, bucket: int, needed: int,
                         cache_length: int | None) -> tuple[int, int]:
  """Choose (cache_length, bucket). ``needed`` = slots a full generation uses beyond the prompt.

  Raises ``ValueError`` if a prompt does not fit the requested cache.
  """
  longest = int(prompt_lengths.max())
  if cache_length is None:
    return bucket + needed, bucket
  if not (isinstance(cache_length, (int, np.integer)) and cache_length > 0):
    raise ValueError(f"cache_length={cache_length!r} must be a positive integer")
  if longest >= cache_length:
    raise ValueError(f"prompt of {longest} tokens does not fit the cache of length "
                     f"{cache_length}: the cache needs room for the prompt plus at least one "
                     "generated token")
  return int(cache_length), min(bucket, int(cache_length))


def eos_tuple(eos_token_id) -> tuple:
  """None | int | sequence -> a hashable tuple of ints."""
  if eos_token_id is None:
    return ()
  if isinstance(eos_token_id, (int, np.integer)):
    return (int(eos_token_id),)
  return tuple(int(e) for e in eos_token_id)


def is_eos(tokens, eos: Sequence[int]):
  """Elementwise ``tokens in eos`` for a static tuple (jnp)."""
  import jax.numpy as jnp
  out = jnp.zeros(jnp.shape(tokens), bool)
  for e in eos:
    out = out | (tokens == e)
  return out
