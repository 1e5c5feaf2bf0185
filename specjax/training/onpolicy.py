"""On-policy feature store: the target answers training prompts itself.

A drafter learns to predict the target's continuations of *the target's own*
text at decode time; a store built over another model's answers (ShareGPT is
ChatGPT's text) trains it on a distribution it never sees. Self-distillation
(Medusa-2, DistillSpec, FastDraft; EAGLE-3 regenerates its data with the
target) fixes that: here every user turn of a training conversation, with the
conversation so far as context, is answered by the target, and the store
records, per token, exactly what :mod:`specjax.training.features` records
(hidden states at ``hidden_layers``, top-k next-token log-probabilities at
T = 1) -- captured *during generation*, from the prefill and from each decode
step's own forward, with no second pass.

Per sequence: the prompt (chat template up to the assistant header; loss mask
0) followed by the generated answer (loss mask 1, the end-of-turn token
included when it was generated). Every stored token has been fed to the target
once, so its features exist: a row stops *after* feeding its end-of-turn token
or its ``max_new_tokens``-th token.

Sampling mix (recorded per shard in the manifest): shard ``i`` is generated at
``temperatures[i % len(temperatures)]`` (0 = greedy), with PRNG key
``fold_in(key(seed), i)`` and per-row streams, so a shard is the same whoever
computes it and a killed run resumes exactly (:func:`features.extend_store`).
Each generated shard's manifest entry names its seed and key derivation
(``generation_seed``, ``prng``) and the provenance of the process that generated
it (:func:`specjax.provenance.stamp`: command, commit, clean tree, load).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.autoregressive import prefill, row_key
from specjax.decoding.prompts import eos_tuple, is_eos, prepare_prompts
from specjax.distributions import SamplingConfig, sample_logits
from specjax.models import kv_cache as kvc
from specjax.training import features, transcripts


@dataclasses.dataclass(frozen=True)
class Prompt:
  """One user turn to answer: ``ids`` the chat-templated context ending with the
  assistant header; ``id`` ``"<conversation id>#<message index>"``."""

  ids: tuple
  id: str


@dataclasses.dataclass(frozen=True)
class GenerationMix:
  """How the target answers.

  Attributes:
    temperatures: shard ``i`` samples at ``temperatures[i % len]``; 0 = greedy.
    max_new_tokens: longest answer (a longer one is cut; its tokens are kept).
    max_context: user turns whose templated context is longer are skipped.
    batch_size: rows generated together (a shard is ``seqs_per_shard`` turns,
      generated in batches of this size).
    seed: base PRNG seed.
  """

  temperatures: tuple = (0.0, 0.7, 1.0)
  max_new_tokens: int = 512
  max_context: int = 512
  batch_size: int = 16
  seed: int = 0

  def __post_init__(self):
    if not self.temperatures or any(not isinstance(t, (int, float)) or t < 0
                                    for t in self.temperatures):
      raise ValueError(f"temperatures={self.temperatures!r} must be a non-empty tuple of "
                       "numbers >= 0")
    for name in ("max_new_tokens", "max_context", "batch_size"):
      v = getattr(self, name)
      if not (isinstance(v, int) and v >= 1):
        raise ValueError(f"{name}={v!r} must be an integer >= 1")

  def temperature(self, shard_index: int) -> float:
    return float(self.temperatures[shard_index % len(self.temperatures)])

  def to_json(self) -> dict:
    d = dataclasses.asdict(self)
    d["temperatures"] = [float(t) for t in self.temperatures]
    return d


def user_turn_prompts(conversations: Iterable, encode_chat, max_context: int,
                      skipped: list | None = None) -> Iterator[Prompt]:
  """Every user turn of every conversation, in stream order, as a :class:`Prompt`.

  Args:
    conversations: objects with ``.id`` and ``.messages`` (``{"role", "content"}``).
    encode_chat: ``messages -> ids`` with the assistant generation header
      (``LoadedModel.encode_chat``).
    max_context: turns whose context is longer are skipped (their ids appended
      to ``skipped`` when given).
  """
  for conv in conversations:
    for j, m in enumerate(conv.messages):
      if m["role"] != "user":
        continue
      ids = encode_chat(list(conv.messages[:j + 1]))
      if len(ids) > max_context:
        if skipped is not None:
          skipped.append(f"{conv.id}#{j}")
        continue
      yield Prompt(ids=tuple(ids), id=f"{conv.id}#{j}")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _Recording:
  """Loop state of :func:`_generate_recording` (B rows, N = max_new_tokens).

  Attributes:
    cache: the target's KV cache.
    last: [B] the token fed at the next step.
    num_fed: [B] generated tokens fed (and recorded) so far.
    done: [B] the row has fed its last token.
    tokens: [B, N] fed tokens; features: [B, N, F, H] bf16 their hidden states;
    topk_ids, topk_logp: [B, N, k] the next-token candidates at each. Row ``i``'s
    entries ``[:num_fed[i]]`` are its own; later columns hold filler.
    step: scalar decode step (PRNG stream index).
  """

  cache: kvc.KVCache
  last: jax.Array
  num_fed: jax.Array
  done: jax.Array
  tokens: jax.Array
  features: jax.Array
  topk_ids: jax.Array
  topk_logp: jax.Array
  step: jax.Array


def _topk(logits, k: int):
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  top_logp, top_ids = jax.lax.top_k(logp, k)
  return top_ids, top_logp


@functools.partial(jax.jit, static_argnames=("model", "max_new_tokens", "eos", "top_k",
                                             "final_index", "chunk"))
def _generate_recording(model, params, sampling: SamplingConfig, tokens, lengths, key, *,
                        max_new_tokens: int, eos: tuple, top_k: int, final_index: int,
                        chunk: int):
  """Prefill + decode, recording every fed token's features and top-k.

  Args:
    tokens: [B, P] right-padded prompts; lengths: [B].
    final_index: position of the final normed feature in ``hidden_layers``
      (the prompt's top-k come from it through the LM head, in chunks of
      ``chunk`` positions so [B, P, V] logits never exist at once).
  Returns ``(prompt_features [B, P, F, H], prompt_topk (ids, logp) [B, P, k],
  _Recording)``.
  """
  b, p = tokens.shape
  cache_length = p + max_new_tokens
  cache, logits, hidden = prefill(model, params, tokens, lengths, cache_length)
  prompt_feats = jnp.moveaxis(hidden, 0, 2).astype(jnp.bfloat16)       # [B, P, F, H]
  final = hidden[final_index].reshape(b, p // chunk, chunk, -1)         # [B, P/c, c, H]
  pids, plogp = jax.lax.map(lambda x: _topk(model.lm_head(params, x), top_k),
                            jnp.moveaxis(final, 1, 0))                  # [P/c, B, c, k]
  pids = jnp.moveaxis(pids, 0, 1).reshape(b, p, top_k)
  plogp = jnp.moveaxis(plogp, 0, 1).reshape(b, p, top_k)
  row_ids = jnp.arange(b, dtype=jnp.int32)
  first, _ = jax.vmap(lambda k, l: sample_logits(k, l, sampling))(row_key(key, row_ids, 0), logits)
  n_sel, h = hidden.shape[0], hidden.shape[-1]
  state = _Recording(
      cache=cache, last=first, num_fed=jnp.zeros((b,), jnp.int32), done=jnp.zeros((b,), bool),
      tokens=jnp.zeros((b, max_new_tokens), jnp.int32),
      features=jnp.zeros((b, max_new_tokens, n_sel, h), jnp.bfloat16),
      topk_ids=jnp.zeros((b, max_new_tokens, top_k), jnp.int32),
      topk_logp=jnp.zeros((b, max_new_tokens, top_k), jnp.float32), step=jnp.int32(1))
  dparams = model.decode_params(params)

  def step(s: _Recording) -> _Recording:
    active = ~s.done
    o = model.apply(dparams, s.last[:, None], s.cache.lengths[:, None], s.cache)
    cache = kvc.commit(o.cache, active.astype(jnp.int32))
    ids, logp = _topk(o.logits[:, 0], top_k)
    # Every row starts at step 1 and stays active until it is done, so an active row's
    # num_fed is step - 1: all rows write column step - 1, a done row past its own
    # num_fed (never read). One dynamic-update-slice instead of a per-row scatter: on
    # CPU the scatter into the [B, N, F, H] feature buffer cost ~30 ms of a 138 ms step
    # (batch 16, SmolLM2-135M, prompts of 100-300 tokens).
    col = s.step - 1
    put = lambda buf, v: jax.lax.dynamic_update_index_in_dim(buf, v.astype(buf.dtype), col, 1)
    nxt, _ = jax.vmap(lambda k, l: sample_logits(k, l, sampling))(
        row_key(key, row_ids, s.step), o.logits[:, 0])
    num_fed = s.num_fed + active.astype(jnp.int32)
    done = s.done | (active & (is_eos(s.last, eos) | (num_fed >= max_new_tokens)))
    return _Recording(cache=cache, last=jnp.where(active, nxt, s.last), num_fed=num_fed,
                      done=done, tokens=put(s.tokens, s.last),
                      features=put(s.features, jnp.moveaxis(o.hidden_states[:, :, 0], 0, 1)),
                      topk_ids=put(s.topk_ids, ids), topk_logp=put(s.topk_logp, logp),
                      step=s.step + 1)

  state = jax.lax.while_loop(lambda s: ~jnp.all(s.done), step, state)
  return prompt_feats, (pids, plogp), state


def generate_records(model, params, prompts: list, *, temperature: float, key: jax.Array,
                     max_new_tokens: int, top_k: int, eos_token_id) -> list:
  """Answer ``prompts`` (one batch) and return one :class:`features.SequenceRecord`
  each: prompt (loss 0) + answer (loss 1), features captured during generation."""
  layers = tuple(model.config.hidden_layers)
  n_layers = model.config.num_hidden_layers
  if n_layers not in layers:
    raise ValueError(f"hidden_layers={layers} must include the final feature {n_layers} "
                     "(the prompt's top-k are computed from it)")
  tokens, lengths = prepare_prompts([list(p.ids) for p in prompts], model.config.vocab_size)
  chunk = min(64, tokens.shape[1])
  sampling = SamplingConfig(temperature=float(temperature))
  pf, (pids, plogp), rec = _generate_recording(
      model, params, sampling, jnp.asarray(tokens), jnp.asarray(lengths), key,
      max_new_tokens=int(max_new_tokens), eos=eos_tuple(eos_token_id), top_k=int(top_k),
      final_index=layers.index(n_layers), chunk=chunk)
  pf, pids, plogp = jax.device_get((pf, pids, plogp))
  rec = jax.device_get(rec)
  out = []
  for i, prompt in enumerate(prompts):
    lp, n = int(lengths[i]), int(rec.num_fed[i])
    out.append(features.SequenceRecord(
        tokens=np.concatenate([np.asarray(prompt.ids, np.int32), rec.tokens[i, :n]]),
        loss_mask=np.concatenate([np.zeros(lp, np.uint8), np.ones(n, np.uint8)]),
        features=np.concatenate([pf[i, :lp], rec.features[i, :n]]),
        topk_ids=np.concatenate([pids[i, :lp], rec.topk_ids[i, :n]]),
        topk_logp=np.concatenate([plogp[i, :lp], rec.topk_logp[i, :n]]),
        id=prompt.id))
  return out


def build_onpolicy_store(out_dir: str, model, params, prompts: Iterable, *,
                         config: features.FeatureStoreConfig, mix: GenerationMix,
                         target_sha256: str, target_name: str = "", eos_token_id=None,
                         max_loss_tokens: int | None = None, source: str = "",
                         transcripts_dir: str | None = None, progress: bool = True) -> dict:
  """Extend (or create) an on-policy store until it holds ``max_loss_tokens``
  generated tokens or ``prompts`` runs out. Returns the manifest (same layout as
  :func:`features.build_feature_store`, plus ``generation`` and each shard's
  ``temperature``); :class:`features.FeatureStore` reads it.

  Args:
    prompts: :class:`Prompt` s in a deterministic order (:func:`user_turn_prompts`).
    config: ``seqs_per_shard`` turns per shard; ``max_len`` must hold
      ``mix.max_context + mix.max_new_tokens``.
    eos_token_id: int / list / None: where an answer ends (the end-of-turn token).
    transcripts_dir: where each shard's answers are kept
      (:mod:`specjax.training.transcripts`; small enough to commit). A shard
      with a transcript is rebuilt from it by a teacher-forced forward pass
      instead of being generated again; a generated shard writes its
      transcript; shards of an existing store that lack one get it first.
  """
  features.check_model_layers(model, config)
  if mix.max_context + mix.max_new_tokens > config.max_len:
    raise ValueError(f"max_context + max_new_tokens = {mix.max_context + mix.max_new_tokens} "
                     f"exceeds the store's max_len={config.max_len}")
  header = {"format": features._FORMAT, "target_sha256": target_sha256,
            "config": config.to_json(), "source": source, "generation": mix.to_json()}
  base_key = jax.random.key(mix.seed)
  from specjax import provenance
  written_by = provenance.stamp()
  transcript_header = {"target_sha256": target_sha256, "generation": mix.to_json(),
                       "source": source}
  if transcripts_dir:
    _transcribe_store(out_dir, transcripts_dir, transcript_header)
  forward = None

  def compute_shard(batch, index, bar):
    nonlocal forward
    temperature = mix.temperature(index)
    if transcripts_dir:
      shard = transcripts.read(transcripts_dir, index, expect_header=transcript_header)
      if shard is not None:
        forward = forward or features._feature_fn(model, config.top_k)
        return _replay(forward, params, batch, shard, index, config, bar), {
            "temperature": shard.temperature, "from_transcript": True}
    key = jax.random.fold_in(base_key, index)
    records = []
    for start in range(0, len(batch), mix.batch_size):
      recs = generate_records(model, params, batch[start:start + mix.batch_size],
                              temperature=temperature, key=jax.random.fold_in(key, start),
                              max_new_tokens=mix.max_new_tokens, top_k=config.top_k,
                              eos_token_id=eos_token_id)
      records.extend(recs)
      if bar is not None:
        bar.update(sum(int(r.loss_mask.sum()) for r in recs))
    if transcripts_dir:
      transcripts.write(transcripts_dir, index, transcripts.TranscriptShard(
          ids=tuple(r.id for r in records),
          answers=tuple(np.asarray(r.tokens)[np.asarray(r.loss_mask) == 1] for r in records),
          temperature=temperature, header=transcript_header))
    return features.shard_arrays(records), {
        "temperature": temperature, "generation_seed": mix.seed,
        "prng": f"fold_in(fold_in(key({mix.seed}), {index}), batch start row)",
        "provenance": provenance.finish(written_by)}

  return features.extend_store(out_dir, header, prompts, compute_shard,
                               items_per_shard=config.seqs_per_shard, target_name=target_name,
                               max_tokens=max_loss_tokens, count="num_loss_tokens",
                               progress=progress)


@dataclasses.dataclass(frozen=True)
class _Sequence:
  """A replayed turn: ``ids`` prompt + answer, ``loss_mask`` 1 on the answer."""

  ids: np.ndarray
  loss_mask: np.ndarray
  id: str


def _replay(forward, params, batch: list, shard: transcripts.TranscriptShard, index: int,
            config: features.FeatureStoreConfig, bar) -> dict:
  """Shard arrays of a transcribed shard: prompt + recorded answer, features from one
  teacher-forced forward pass per turn (:func:`features._feature_fn`)."""
  if tuple(p.id for p in batch) != shard.ids:
    raise ValueError(f"transcript shard {index} answers turns {list(shard.ids[:3])}..., but the "
                     f"prompt stream gives {[p.id for p in batch[:3]]}... at that shard: the "
                     "transcripts belong to another prompt stream")
  seqs = [_Sequence(ids=np.concatenate([np.asarray(p.ids, np.int32), a]),
                    loss_mask=np.r_[np.zeros(len(p.ids), np.uint8), np.ones(len(a), np.uint8)],
                    id=p.id) for p, a in zip(batch, shard.answers)]
  arrays = features._compute_shard(forward, params, seqs, config, None)
  if bar is not None:
    bar.update(shard.num_tokens)
  return arrays


def _transcribe_store(out_dir: str, transcripts_dir: str, header: dict) -> None:
  """Write the transcript of every shard of the store at ``out_dir`` that lacks one
  (a store built before transcripts were kept); checks the ones present."""
  manifest = features.read_manifest(out_dir)
  if manifest is None:
    return
  if manifest.get("target_sha256") != header["target_sha256"]:
    return  # extend_store refuses this store with a clear message
  store = None
  for i, entry in enumerate(manifest["shards"]):
    if transcripts.read(transcripts_dir, i, expect_header=header) is not None:
      continue
    store = store or features.FeatureStore(out_dir)
    arrays = store.shard(i)
    with open(os.path.join(out_dir, entry["name"], "ids.json")) as f:
      ids = json.load(f)
    off, tokens, mask = arrays["offsets"], np.asarray(arrays["tokens"]), np.asarray(arrays["loss_mask"])
    answers = tuple(tokens[off[j]:off[j + 1]][mask[off[j]:off[j + 1]] == 1]
                    for j in range(len(off) - 1))
    transcripts.write(transcripts_dir, i, transcripts.TranscriptShard(
        ids=tuple(ids), answers=answers, temperature=float(entry["temperature"]), header=header))
