"""Real model contexts for the exact analyses (docs/spec.md §6: "on real model contexts").

This loads models, corpora and tokenizers, so it lives with the experiments;
:mod:`specjax.analysis` only does the math on the arrays it returns.

Runs a target LM (and optionally a draft LM sharing its tokenizer) over
held-out corpus text, teacher-forced, and returns per-position

* ``z [N, V]`` -- the target's raw logits (the MARS ratio ``z2 / z1`` needs them),
* ``p [N, V]`` -- the target distribution after temperature / processors,
* ``q [N, V]`` -- the draft's distribution at the same position (same prefix),

for at most ``num_positions`` positions, sampled without replacement from
the windows (deterministic given ``seed``).  Forward passes are batched and
jitted (one compilation per model and window shape).

Models come from :func:`load_models`, the one loader
:func:`experiments.common.model_sets.load_model_set` without an EAGLE head:

* ``"default"`` -- the embedded default set (:mod:`specjax.models.defaults`);
  text: the held-out split of the default corpus (the interpreter's stdlib,
  :mod:`specjax.data.corpus`), tokenized with the default tokenizer.
* a directory -- Hugging Face checkpoints ``<dir>/target`` and ``<dir>/draft``
  (``config.json`` + ``model.safetensors`` [+ ``tokenizer.json``]).
* ``"tiny"`` -- random small models (:data:`TINY`: a target and a perturbed copy
  as draft) and random token windows: for tests and for development without
  trained models.  Not meaningful as language, only as shapes and code paths.
* a real chat model (``"smollm2-135m-instruct"``: the registry target and its
  shipped distilled draft LM) -- text: held-out ShareGPT conversations
  (:mod:`specjax.data.sharegpt`, the split the draft never trained on), the
  first ``num_windows`` in file order, rendered with the model's chat template
  and teacher-forced (:func:`heldout_chat_windows`); only *assistant positions*
  are sampled -- positions whose next token is assistant content or its
  end-of-turn marker (:mod:`specjax.data.chat_tokenize`'s loss mask), i.e. where
  the target would be generating.

Example::

    models = load_models("default")
    ctx = extract_contexts(models, num_positions=1000, temperature=1.0)
    ctx.z.shape, ctx.p.shape, ctx.q.shape   # (1000, 4096) each
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from experiments.common.model_sets import ModelSet, TinySpec, load_model_set
from specjax.distributions import SamplingConfig, probs_from_logits
from specjax.models.transformer import Model


class Contexts(NamedTuple):
  """Teacher-forced contexts from held-out text.

  Attributes:
    z: [N, V] float32 raw target logits.
    p: [N, V] float32 target distribution (``target_sampling`` applied to z).
    q: [N, V] float32 draft distribution (``draft_sampling``), or None without a draft.
    zq: [N, V] float32 raw draft logits, or None.
    next_token: [N] int32 the token that actually follows in the text.
    window: [N] int32 index of the window each position came from.
    position: [N] int32 position inside its window (the prefix is ``window[:position+1]``).
  """

  z: np.ndarray
  p: np.ndarray
  q: np.ndarray | None
  zq: np.ndarray | None
  next_token: np.ndarray
  window: np.ndarray
  position: np.ndarray

  @property
  def num(self) -> int:
    return int(self.z.shape[0])

  @property
  def vocab_size(self) -> int:
    return int(self.z.shape[-1])

  def take(self, n: int) -> "Contexts":
    """The first ``n`` contexts (the order is already a random sample)."""
    return Contexts(*(None if a is None else a[:n] for a in self))


# --- models --------------------------------------------------------------------------

# The analyses' "tiny" set: 64 random token ids (no tokenizer), target matrices x5,
# draft = target + 0.03 N(0, 1), both drawn in one jitted call from split(key(seed)).
TINY = TinySpec(vocab_size=64, scale=5.0, draft_noise=0.03, eos_token_id=None, keys="split")


def load_models(source: str = "default", *, with_draft: bool = True, seed: int = 0
                ) -> ModelSet:
  """The analyses' :class:`~experiments.common.model_sets.ModelSet` (no EAGLE head):
  ``"default"``, ``"tiny"`` (built by :data:`TINY`), a checkpoint pair directory
  (``<dir>/target``, ``<dir>/draft``) or a real model -- one
  :func:`experiments.common.model_sets.load_model_set` call."""
  return load_model_set(source, draft="draft" if with_draft else "", eagle="", seed=seed,
                        tiny=TINY)


# --- text ----------------------------------------------------------------------------


def heldout_windows(tokenizer, num_windows: int, seq_len: int, *, corpus_root: str = "",
                    heldout_fraction: float = 0.05, split_seed: int = 0,
                    cache_dir: str | None = "/tmp/specjax_data/bpe4096") -> np.ndarray:
  """``[W, seq_len]`` int32 windows evenly spaced over the held-out token stream.

  Uses :mod:`specjax.data` (the same corpus config and file-hash split as the
  training of the default models), so the text was never trained on.
  ``W = min(num_windows, len(stream) // seq_len)``.
  """
  from specjax.data import batching, corpus
  cfg = corpus.CorpusConfig(root=corpus_root, heldout_fraction=heldout_fraction,
                            split_seed=split_seed)
  stream = batching.load_token_stream(cfg, "heldout", tokenizer, cache_dir or None)
  n_avail = len(stream) // seq_len
  if n_avail < 1:
    raise ValueError(f"held-out stream has {len(stream)} tokens < seq_len={seq_len}")
  w = min(num_windows, n_avail)
  starts = (np.arange(w) * (n_avail // w)) * seq_len
  return np.stack([stream[s:s + seq_len] for s in starts]).astype(np.int32)


def random_windows(vocab: int, num_windows: int, seq_len: int, seed: int = 0) -> np.ndarray:
  """``[W, seq_len]`` uniformly random tokens (for random tiny models)."""
  return np.random.RandomState(seed).randint(0, vocab, (num_windows, seq_len)).astype(np.int32)


def chat_windows(tokenizer, template, conversations, num_windows: int, seq_len: int, *,
                 pad_id: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """``(windows [W, seq_len] int32, eligible [W, seq_len] bool)`` from conversations.

  Each conversation (``.messages``; :class:`specjax.data.sharegpt.Conversation`)
  is rendered with ``template`` and tokenized (:func:`specjax.data.chat_tokenize.tokenize_chat`,
  cut at ``seq_len`` tokens, padded with ``pad_id`` -- padding comes after the
  text, so causal attention never sees it).  ``eligible[w, i]`` is True iff token
  ``i + 1`` is assistant content (or its end-of-turn marker): position ``i`` is
  one where the model generates.  Conversations without such a position are
  skipped; ``W <= num_windows``.
  """
  from specjax.data.chat_tokenize import tokenize_chat
  windows, eligible = [], []
  for conv in conversations:
    if len(windows) >= num_windows:
      break
    tc = tokenize_chat(tokenizer, template, list(conv.messages), max_len=seq_len)
    n = len(tc.ids)
    ok = np.zeros(seq_len, bool)
    ok[:n - 1] = tc.loss_mask[1:n].astype(bool)
    if not ok.any():
      continue
    ids = np.full(seq_len, pad_id, np.int32)
    ids[:n] = tc.ids
    windows.append(ids)
    eligible.append(ok)
  if not windows:
    raise ValueError("no conversation has an assistant position within seq_len tokens")
  return np.stack(windows), np.stack(eligible)


def heldout_chat_windows(models: ModelSet, num_windows: int, seq_len: int, *,
                         sharegpt_path: str | None = None, heldout_fraction: float = 0.05,
                         split_seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
  """:func:`chat_windows` over the held-out ShareGPT split (first ``num_windows`` usable
  conversations in file order: deterministic), in ``models``' chat template."""
  from specjax.data import sharegpt
  convs = sharegpt.iter_conversations(sharegpt_path, split="heldout",
                                      heldout_fraction=heldout_fraction, split_seed=split_seed)
  pad = int(models.target.config.eos_token_id or 0)
  return chat_windows(models.tokenizer, models.chat_template, convs, num_windows, seq_len,
                      pad_id=pad)


def model_windows(models: ModelSet, num_windows: int, seq_len: int, seed: int = 0,
                  **heldout_kwargs) -> np.ndarray:
  """Held-out windows for a model set with a tokenizer, random ones otherwise (a chat
  model: :func:`heldout_chat_windows`' windows; its assistant mask is dropped here)."""
  if models.tokenizer is None:
    return random_windows(models.vocab_size, num_windows, seq_len, seed)
  if models.is_chat:
    return heldout_chat_windows(models, num_windows, seq_len, **heldout_kwargs)[0]
  return heldout_windows(models.tokenizer, num_windows, seq_len, **heldout_kwargs)


# --- forward passes ------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("model",))
def _forward_logits(model: Model, params, tokens):
  """Teacher-forced logits [B, S, V] for full windows [B, S]."""
  b, s = tokens.shape
  cache = model.init_cache(b, s)
  pos = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
  return model.apply(params, tokens, pos, cache).logits


def window_logits(model: Model, params, windows: np.ndarray, rows: np.ndarray,
                  cols: np.ndarray, batch_size: int = 8) -> np.ndarray:
  """Raw logits ``[N, V]`` of ``model`` at (window ``rows[i]``, position ``cols[i]``).

  Runs the jitted forward over batches of ``batch_size`` windows (the last
  batch padded, so there is one compilation) and gathers the requested
  positions on the host.
  """
  windows = np.asarray(windows, np.int32)
  w, s = windows.shape
  out = np.zeros((len(rows), model.config.vocab_size), np.float32)
  bs = max(1, min(batch_size, w))
  for start in range(0, w, bs):
    idx = np.arange(start, min(start + bs, w))
    sel = np.nonzero((rows >= start) & (rows < start + bs))[0]
    if len(sel) == 0:
      continue
    batch = windows[idx]
    if len(idx) < bs:
      batch = np.concatenate([batch, np.zeros((bs - len(idx), s), np.int32)])
    logits = np.asarray(_forward_logits(model, params, jnp.asarray(batch)))
    out[sel] = logits[rows[sel] - start, cols[sel]]
  return out


def sample_positions(num_windows: int, seq_len: int, num_positions: int, *,
                     min_position: int = 8, seed: int = 0, eligible: np.ndarray | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
  """``(rows, cols)`` of up to ``num_positions`` distinct (window, position) pairs.

  Positions ``< min_position`` (short prefixes) are skipped and the last one is
  excluded (it has no next token in the window); with ``eligible [W, S]`` only
  positions where it is True are used.  A uniform sample without replacement,
  in random order, so a prefix ``[:n]`` is itself a uniform sample.
  """
  lo = min(max(0, min_position), seq_len - 2)
  cols = np.arange(lo, seq_len - 1)
  grid_r, grid_c = np.meshgrid(np.arange(num_windows), cols, indexing="ij")
  grid_r, grid_c = grid_r.reshape(-1), grid_c.reshape(-1)
  if eligible is not None:
    keep = np.asarray(eligible, bool)[grid_r, grid_c]
    grid_r, grid_c = grid_r[keep], grid_c[keep]
  n = min(num_positions, len(grid_r))
  pick = np.random.RandomState(seed).permutation(len(grid_r))[:n]
  return grid_r[pick].astype(np.int32), grid_c[pick].astype(np.int32)


def extract_contexts(models: ModelSet, *, num_positions: int = 1000, seq_len: int = 128,
                     num_windows: int | None = None, windows: np.ndarray | None = None,
                     eligible: np.ndarray | None = None, temperature: float = 1.0, draft_temperature: float | None = None,
                     target_sampling: SamplingConfig | None = None,
                     draft_sampling: SamplingConfig | None = None, min_position: int = 8,
                     batch_size: int = 8, seed: int = 0, **heldout_kwargs) -> Contexts:
  """Run target (and draft) over held-out windows; return :class:`Contexts`.

  Args:
    models: from :func:`load_models`.
    num_positions: cap N on the number of positions returned.
    seq_len: window length (tokens); positions ``min_position..seq_len-2`` are used.
    num_windows: windows to read; default enough for ``num_positions`` at
      about 8 positions per window (spread over the held-out text).
    windows: explicit ``[W, S]`` token windows (overrides the corpus).
    eligible: ``[W, S]`` bool, the positions that may be sampled (default all; a
      chat model's held-out windows bring their assistant positions).
    temperature: target temperature for p (ignored if ``target_sampling`` given).
    draft_temperature: draft temperature for q (default ``temperature``).
    target_sampling, draft_sampling: full :class:`SamplingConfig` (processors).
    min_position: shortest prefix used.
    batch_size: windows per forward pass.
    seed: position sampling seed (and random windows for tiny models).
    **heldout_kwargs: passed to :func:`heldout_windows` (``corpus_root``, ``cache_dir``, ...)
      or, for a chat model, :func:`heldout_chat_windows` (``sharegpt_path``, ...).
  """
  if target_sampling is None:
    target_sampling = SamplingConfig(temperature=temperature)
  if draft_sampling is None:
    draft_sampling = SamplingConfig(
        temperature=temperature if draft_temperature is None else draft_temperature)
  if windows is None:
    if num_windows is None:
      num_windows = max(1, -(-num_positions // 8))
    if models.is_chat:
      heldout_kwargs.pop("cache_dir", None)  # BPE-corpus cache; not used by chat text
      windows, eligible = heldout_chat_windows(models, num_windows, seq_len, **heldout_kwargs)
    else:
      windows = model_windows(models, num_windows, seq_len, seed=seed, **heldout_kwargs)
  windows = np.asarray(windows, np.int32)
  w, s = windows.shape
  rows, cols = sample_positions(w, s, num_positions, min_position=min_position, seed=seed,
                                eligible=eligible)
  z = window_logits(models.target, models.target_params, windows, rows, cols, batch_size)
  p = np.asarray(probs_from_logits(jnp.asarray(z), target_sampling))
  q = zq = None
  if models.draft is not None:
    if models.draft.config.vocab_size != models.target.config.vocab_size:
      raise ValueError("target and draft must share a vocabulary")
    zq = window_logits(models.draft, models.draft_params, windows, rows, cols, batch_size)
    q = np.asarray(probs_from_logits(jnp.asarray(zq), draft_sampling))
  return Contexts(z, p, q, zq, windows[rows, cols + 1].astype(np.int32), rows, cols)
