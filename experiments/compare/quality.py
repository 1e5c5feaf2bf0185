"""Quality of generated code, measured against the target.

Every metric is applied identically to every method (target-only generation,
lossless and lossy speculative decoding):

* :func:`target_loglik` -- mean target log-likelihood per generated token:
  one teacher-forced target forward over ``prompt + completion``; the score
  of token ``y_t`` is ``log softmax(z_t)[y_t]`` with the target's RAW logits
  (temperature 1, no processors), whatever temperature generated it, so
  methods run at different temperatures are scored on one scale.  Generated
  EOS tokens count; the mean is over all generated tokens of all rows
  (token-weighted), the per-row means are returned too.
* :func:`parses` / :func:`parse_fraction` -- syntactic validity.  Criterion
  (**choice**): the *checked text* is the prompt followed by the completion's
  complete lines -- the completion cut after its last ``"\\n"`` (the partial
  last line is not judged); when the completion ended with EOS (end of file)
  all of it counts, plus a closing newline.  The completion parses iff the
  checked text is a **valid Python prefix** (:func:`is_valid_prefix`): it
  compiles, or it is *incomplete* input that more text could complete (an
  open block, bracket or string), as decided by :mod:`codeop` (the
  interactive interpreter's "need more input?" test); a real syntax error
  (``x = = 1``, an unexpected indent, an unmatched ``)``...) makes it fail.
  Prompts (``experiments.common.prompts``) start at a top-level statement and
  ``prompt + "\\n"`` is itself a valid prefix, so any failure is the
  completion's.  A completion with no complete line adds nothing to the
  prompt and counts as parsing.
* :func:`greedy_agreement` -- at T = 0: the fraction of rows whose output
  equals the target's greedy output token for token, and the mean fraction of
  the reference matched before the first difference.

The distance of a rule's first speculative token to its matched baseline is exact,
not sampled: :mod:`experiments.propositions.first_step_law`.
"""

from __future__ import annotations

import codeop
import functools
import warnings
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

# --------------------------------------------------------------------------- parsing


def is_valid_prefix(source: str) -> bool:
  """True iff ``source`` compiles or is incomplete-but-valid Python (codeop, exec mode)."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # SyntaxWarning (invalid escapes, ...) is not an error
    try:
      codeop.compile_command(source, "<completion>", "exec")
    except (SyntaxError, ValueError, OverflowError, MemoryError, RecursionError):
      return False
  return True


def checked_text(prompt_text: str, completion_text: str, ended_with_eos: bool) -> str:
  """The text :func:`parses` judges (see module docstring)."""
  if ended_with_eos:
    return prompt_text + completion_text + "\n"
  cut = completion_text.rfind("\n")
  return prompt_text + (completion_text[:cut + 1] if cut >= 0 else "\n")


def parses(prompt_text: str, completion_text: str, ended_with_eos: bool = False) -> bool:
  """Whether the completion's complete lines are a valid continuation of the prompt."""
  return is_valid_prefix(checked_text(prompt_text, completion_text, ended_with_eos))


def parse_fraction(prompt_texts: Sequence[str], completion_texts: Sequence[str],
                   ended_with_eos: Sequence[bool] | None = None) -> float:
  """Fraction of completions that :func:`parses`."""
  if len(prompt_texts) != len(completion_texts):
    raise ValueError("prompt_texts and completion_texts differ in length")
  if not completion_texts:
    return float("nan")
  eos = ended_with_eos if ended_with_eos is not None else [False] * len(completion_texts)
  return float(np.mean([parses(p, c, bool(e)) for p, c, e in
                        zip(prompt_texts, completion_texts, eos)]))


def decode_completions(tokenizer, completions: Sequence[Sequence[int]], eos_ids: Sequence[int]):
  """``(texts, ended_with_eos)``: completions decoded without their final EOS token."""
  eos = set(int(e) for e in eos_ids)
  texts, ended = [], []
  for c in completions:
    c = list(c)
    e = bool(c) and c[-1] in eos
    if e:
      c = c[:-1]
    texts.append(tokenizer.decode(c, skip_special_tokens=False) if c else "")
    ended.append(e)
  return texts, ended


# --------------------------------------------------------------------------- likelihood


@functools.partial(jax.jit, static_argnames=("model",))
def _token_logprobs(model, params, seq, targets_idx):
  """log softmax(raw logits) of ``seq[b, t+1]`` at every position ``t`` -> [B, T-1]."""
  b, t = seq.shape
  cache = model.init_cache(b, t)
  pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
  logits = model.apply(params, seq, pos, cache).logits.astype(jnp.float32)
  logp = jax.nn.log_softmax(logits[:, :-1], axis=-1)
  return jnp.take_along_axis(logp, targets_idx[..., None], -1)[..., 0]


def target_loglik(model, params, prompts: Sequence[Sequence[int]],
                  completions: Sequence[Sequence[int]], *, batch_size: int = 16,
                  bucket: int = 64) -> dict:
  """Mean target log-likelihood per generated token (see module docstring).

  Returns ``{"mean": token-weighted mean, "per_row": [mean per row (nan if empty)],
  "num_tokens": total}``.
  """
  if len(prompts) != len(completions):
    raise ValueError("prompts and completions differ in length")
  total, count, per_row = 0.0, 0, []
  for i in range(0, len(prompts), batch_size):
    ps, cs = prompts[i:i + batch_size], completions[i:i + batch_size]
    seqs = [list(p) + list(c) for p, c in zip(ps, cs)]
    longest = max(len(s) for s in seqs)
    t = -(-max(longest, 2) // bucket) * bucket
    arr = np.zeros((len(seqs), t), np.int32)
    for r, s in enumerate(seqs):
      arr[r, :len(s)] = s
    lp = np.asarray(_token_logprobs(model, params, jnp.asarray(arr),
                                    jnp.asarray(arr[:, 1:])), np.float64)
    for r, (p, c) in enumerate(zip(ps, cs)):
      n = len(c)
      if n == 0:
        per_row.append(float("nan"))
        continue
      vals = lp[r, len(p) - 1:len(p) - 1 + n]
      total += float(vals.sum())
      count += n
      per_row.append(float(vals.mean()))
  return {"mean": total / count if count else float("nan"), "per_row": per_row,
          "num_tokens": count}


# --------------------------------------------------------------------------- agreement


def greedy_agreement(outputs: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]
                     ) -> dict:
  """``{"exact": fraction of rows equal to the reference, "prefix": mean fraction of the
  reference matched before the first difference}``."""
  if len(outputs) != len(reference):
    raise ValueError("outputs and reference differ in length")
  exact, prefix = [], []
  for o, r in zip(outputs, reference):
    o, r = list(o), list(r)
    exact.append(o == r)
    n = 0
    for a, b in zip(o, r):
      if a != b:
        break
      n += 1
    prefix.append(n / max(len(r), 1))
  return {"exact": float(np.mean(exact)), "prefix": float(np.mean(prefix))}
