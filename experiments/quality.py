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
  Prompts (``experiments.prompts``) start at a top-level statement and
  ``prompt + "\\n"`` is itself a valid prefix, so any failure is the
  completion's.  A completion with no complete line adds nothing to the
  prompt and counts as parsing.
* :func:`greedy_agreement` -- at T = 0: the fraction of rows whose output
  equals the target's greedy output token for token, and the mean fraction of
  the reference matched before the first difference.
* :func:`first_token_divergence` -- the empirical distribution of the first
  *speculative* token (the first token a verifier emits: the 2nd generated
  token, since the target's prefill emits the 1st) over many samples of the
  same prompt, against the exact distribution of the rule's matched baseline
  (``specjax.verifiers.baselines.matched_baseline``: the rule's truncation as
  a logits processor + lossless verification, i.e. ``p_A``; plain ``p`` for
  rules without an allowed set).  The first generated token ``t1`` is random
  at T > 0, so samples are grouped by ``(prompt, t1)``: each group with at
  least ``min_count`` samples is a context ``prompt + t1`` whose empirical
  histogram is compared with the baseline's exact distribution there; KL and
  TV are averaged over groups weighted by group size.  The plug-in KL of an
  exact sampler is not 0 but ~ ``(support - 1) / (2 n)``: read the lossless
  rule's (and the matched baseline rows') value as the noise floor.  ``kl_mm``
  subtracts the Miller-Madow estimate of that bias, ``(m - 1) / (2 n)`` with
  ``m`` the number of distinct tokens observed in the group (about 0 in
  expectation for an exact sampler; it can be negative).
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


# --------------------------------------------------------------------------- first token


def baseline_first_token_probs(target, target_params, rule, sampling, contexts) -> np.ndarray:
  """Exact ``[C, V]`` distribution of the rule's matched baseline at each context
  (list of token lists): the target's next-token distribution under the
  baseline's sampling config (``matched_baseline(rule, sampling).sampling``)."""
  from specjax.distributions import probs_from_logits
  from specjax.verifiers.baselines import matched_baseline
  base = matched_baseline(rule, sampling)
  longest = max(len(c) for c in contexts)
  t = -(-longest // 32) * 32
  arr = np.zeros((len(contexts), t), np.int32)
  for i, c in enumerate(contexts):
    arr[i, :len(c)] = c
  idx = jnp.asarray([len(c) - 1 for c in contexts], jnp.int32)[:, None]
  cache = target.init_cache(len(contexts), t)
  pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), arr.shape)
  z = target.apply(target_params, jnp.asarray(arr), pos, cache, logits_index=idx).logits[:, 0]
  return np.asarray(probs_from_logits(z, base.sampling), np.float64)


def divergence_from_samples(samples: Sequence[int], probs: np.ndarray, floor: float = 1e-12
                            ) -> tuple[float, float]:
  """``(KL(emp || probs), TV(emp, probs))`` for the empirical law of ``samples``.
  ``probs`` is floored at ``floor`` inside the log (a sample the baseline gives
  probability 0 costs ``log(1/floor)`` instead of infinity)."""
  v = probs.shape[-1]
  emp = np.bincount(np.asarray(samples, np.int64), minlength=v).astype(np.float64)
  emp /= emp.sum()
  nz = emp > 0
  kl = float(np.sum(emp[nz] * (np.log(emp[nz]) - np.log(np.maximum(probs[nz], floor)))))
  tv = float(0.5 * np.abs(emp - probs).sum())
  return kl, tv


def first_token_divergence(target, target_params, rule, sampling, prompts: Sequence[Sequence[int]],
                           first: Sequence[int], second: Sequence[int], *,
                           min_count: int = 8) -> dict:
  """Empirical first-speculative-token divergence to the matched baseline.

  Args:
    rule, sampling: the verifier and the target sampling config it ran with.
    prompts: the prompt of every sample (rows; repeats of a few prompts).
    first, second: the 1st (target prefill) and 2nd (first verified) generated
      token of every row.
    min_count: smallest ``(prompt, first)`` group used.

  Returns ``{"kl", "kl_mm", "tv", "samples_used", "contexts", "kl_ci", "tv_ci"}`` (nan
  if no group is big enough; the intervals are bootstrap intervals over prompts, None
  with fewer than two prompts).
  """
  groups: dict[tuple, list[int]] = {}
  for p, a, b in zip(prompts, first, second):
    groups.setdefault((tuple(p), int(a)), []).append(int(b))
  used = [(k, v) for k, v in groups.items() if len(v) >= min_count]
  if not used:
    return {"kl": float("nan"), "kl_mm": float("nan"), "tv": float("nan"), "samples_used": 0,
            "contexts": 0, "kl_ci": None, "tv_ci": None}
  probs = baseline_first_token_probs(target, target_params, rule, sampling,
                                     [list(k[0]) + [k[1]] for k, _ in used])
  w, kls, mms, tvs = [], [], [], []
  for (k, v), pr in zip(used, probs):
    kl, tv = divergence_from_samples(v, pr)
    w.append(len(v))
    kls.append(kl)
    mms.append(kl - (len(set(v)) - 1) / (2.0 * len(v)))
    tvs.append(tv)
  w = np.asarray(w, np.float64)
  out = {"kl": float(np.dot(w, kls) / w.sum()), "kl_mm": float(np.dot(w, mms) / w.sum()),
         "tv": float(np.dot(w, tvs) / w.sum()),
         "samples_used": int(w.sum()), "contexts": len(used)}
  # Bootstrap intervals over prompts (each prompt's groups together; None for one prompt).
  from experiments.row_stats import ci, ratio_of_sums
  idx = {p: i for i, p in enumerate(dict.fromkeys(k[0] for k, _ in used))}
  for name, vals in (("kl", kls), ("tv", tvs)):
    pairs = np.zeros((len(idx), 2))
    for (k, _), wi, v in zip(used, w, vals):
      pairs[idx[k[0]]] += (wi * v, wi)
    out[f"{name}_ci"] = ci(pairs, ratio_of_sums)
  return out
