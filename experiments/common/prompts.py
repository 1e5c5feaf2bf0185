"""Evaluation prompts: code prefixes from the held-out split of the corpus.

A prompt is a window of whole source lines of one held-out file
(``specjax.data.corpus``, default: the interpreter's stdlib, the split the
default models never trained on):

* it **starts at a top-level statement** (a ``module.body`` node of the
  file's ``ast``; a decorated definition starts at its first decorator), so
  prompt + completion is a syntactically meaningful Python region;
* it **ends at the end of a line, without that line's newline**: the model
  emits the newline (and the next line's indentation) itself, which keeps the
  prompt's last token one the model saw in training (the byte-level BPE merges
  a newline with the following indentation);
* it holds between ``min_tokens`` and ``max_tokens`` tokens of the default
  tokenizer, and ``prompt + "\\n"`` is a valid Python prefix
  (:func:`experiments.compare.quality.is_valid_prefix`).

Cut points are drawn with ``numpy.random.RandomState(seed)``: files are
visited in a seeded random order (cycled when ``num_prompts`` exceeds the
number of files), a cut line is drawn uniformly, and the earliest top-level
start that keeps the window under ``max_tokens`` is used; draws that fail a
constraint are redrawn (bounded).  The result is a pure function of
(corpus, tokenizer, arguments).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import warnings

import numpy as np

from specjax.data import corpus as corpus_lib


@dataclasses.dataclass(frozen=True)
class EvalPrompt:
  """Attributes:
    text: the prompt text (whole lines, no trailing newline).
    ids: token ids of ``text``.
    source: the file's corpus-relative path.
    start_line, end_line: 0-based line range ``[start_line, end_line)`` of the file.
  """

  text: str
  ids: tuple
  source: str
  start_line: int
  end_line: int


def _top_level_starts(text: str) -> list[int] | None:
  """0-based line indices where top-level statements start (None if unparsable)."""
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      tree = ast.parse(text)
  except (SyntaxError, ValueError):
    return None
  starts = set()
  for node in tree.body:
    line = node.lineno
    for d in getattr(node, "decorator_list", ()):
      line = min(line, d.lineno)
    starts.add(line - 1)
  return sorted(starts)


@functools.lru_cache(maxsize=4)
def _heldout_docs(cfg: corpus_lib.CorpusConfig) -> tuple:
  return tuple(corpus_lib.read_documents(cfg, "heldout"))


def load_eval_prompts(num_prompts: int, *, tokenizer=None, max_tokens: int = 96,
                      min_tokens: int = 24, seed: int = 0,
                      corpus: corpus_lib.CorpusConfig | None = None,
                      max_tries: int = 200) -> list[EvalPrompt]:
  """``num_prompts`` held-out code prefixes (see module docstring).

  Args:
    num_prompts: how many prompts.
    tokenizer: a ``tokenizers.Tokenizer``; default the default models' one.
    max_tokens, min_tokens: prompt length bounds in tokens.
    seed: the cut-point seed.
    corpus: the corpus (default ``CorpusConfig()``: stdlib, 5% held out, as
      the default models were trained).
    max_tries: redraws per prompt before giving up on a file.
  """
  from experiments.compare.quality import is_valid_prefix
  if tokenizer is None:
    from specjax.models.defaults import default_tokenizer
    tokenizer = default_tokenizer()
  if not 1 <= min_tokens <= max_tokens:
    raise ValueError(f"need 1 <= min_tokens={min_tokens} <= max_tokens={max_tokens}")
  cfg = corpus or corpus_lib.CorpusConfig()
  docs = [(rel, text) for rel, text in _heldout_docs(cfg) if text.count("\n") >= 4]
  if not docs:
    raise ValueError(f"no usable held-out files under {cfg.resolved_root}")
  rng = np.random.RandomState(seed)
  order = rng.permutation(len(docs))
  out: list[EvalPrompt] = []
  ntok = lambda s: len(tokenizer.encode(s).ids)  # noqa: E731
  cursor = 0
  failures = 0
  while len(out) < num_prompts:
    rel, text = docs[order[cursor % len(docs)]]
    cursor += 1
    starts = _top_level_starts(text)
    lines = text.split("\n")
    if not starts:
      failures += 1
    else:
      for _ in range(max_tries):
        end = int(rng.randint(1, len(lines) + 1))  # prompt = lines[start:end]
        if not lines[end - 1].strip():
          continue  # end on a non-blank line
        cands = [s for s in starts if s < end]
        if not cands:
          continue
        start, n_start = None, 0
        for s in reversed(cands):  # grow the window back to the earliest start that fits
          n = ntok("\n".join(lines[s:end]))
          if n > max_tokens:
            break
          start, n_start = s, n
        if start is None or n_start < min_tokens:
          continue
        ptext = "\n".join(lines[start:end])
        if not is_valid_prefix(ptext + "\n"):
          continue
        out.append(EvalPrompt(ptext, tuple(tokenizer.encode(ptext).ids), rel, start, end))
        break
      else:
        failures += 1
    if failures > 10 * max(num_prompts, len(docs)):
      raise RuntimeError(f"could not draw {num_prompts} prompts with {min_tokens}..{max_tokens} "
                         f"tokens from {len(docs)} held-out files")
  return out


# --------------------------------------------------------------------------- chat prompts


@dataclasses.dataclass(frozen=True)
class ChatPrompt:
  """A chat evaluation prompt for a real model.

  Attributes:
    text: the (last) user message.
    ids: token ids of the rendered conversation (chat template, generation prompt).
    source: ``"sharegpt:<conversation id>"``, ``"humaneval:<task id>"`` or
      ``"multiturn:<conversation id>"``.
    domain: code / math / writing / qa (ShareGPT), humaneval or multiturn.
  """

  text: str
  ids: tuple
  source: str
  domain: str

  @property
  def prompt_set(self) -> str:
    """The set it was drawn from: one of :data:`PROMPT_SETS`."""
    return self.source.partition(":")[0]


# The sets a run uses unless told otherwise, and every set there is.
DEFAULT_PROMPT_SETS = ("sharegpt", "humaneval")
PROMPT_SETS = DEFAULT_PROMPT_SETS + ("multiturn",)


def set_shares(num_prompts: int, sets) -> list[int]:
  """Prompts per set when ``num_prompts`` are split evenly over ``sets`` (the first
  set gets the remainder), as :func:`load_chat_prompts` splits them."""
  share = [num_prompts // len(sets)] * len(sets)
  share[0] += num_prompts - sum(share)
  return share


def load_chat_prompts(encode_chat, num_prompts: int, *, sets=DEFAULT_PROMPT_SETS,
                      max_tokens: int = 256,
                      seed: int = 0, exclude=()) -> list:
  """``num_prompts`` fixed chat prompts split evenly over ``sets`` (the first set
  gets the remainder), in a deterministic order that depends only on ``seed``:

  * ``sharegpt``: held-out first user turns (:mod:`specjax.data.eval_prompts`),
    taken round-robin over the domains code, qa, writing, math;
  * ``humaneval``: HumanEval problems as chat (:func:`specjax.data.humaneval.chat_messages`),
    ordered by ``sha256(f"eval:{seed}:{task_id}")``;
  * ``multiturn``: held-out ShareGPT conversations up to a later user turn, earlier
    answers in context (:func:`specjax.data.eval_prompts.multiturn_prompts`): per
    conversation the prefix with the most turns that fits ``max_tokens``.

  Prompts whose rendered conversation has more than ``max_tokens`` tokens are
  skipped, and so are prompts whose ``source`` is in ``exclude`` (e.g. the
  calibration prompts, for a disjoint held-out evaluation set: the order of
  the others does not change). ``encode_chat(messages) -> ids`` renders and
  tokenizes (e.g. ``ModelSet.encode_chat``). Raises ValueError when the data
  cannot supply enough.
  """
  import hashlib
  bad = [s for s in sets if s not in PROMPT_SETS]
  if bad or not sets:
    raise ValueError(f"prompt sets {list(sets)}: choose from {PROMPT_SETS}")
  exclude = frozenset(exclude)
  share = set_shares(num_prompts, sets)
  out = []
  for name, n in zip(sets, share):
    if n == 0:
      continue
    got = []
    if name == "multiturn":
      from specjax.data import eval_prompts
      for prefixes in eval_prompts.heldout_multiturn_prompts(seed=seed):
        source = f"multiturn:{prefixes[0].id}"
        if source in exclude:
          continue
        for p in prefixes:  # most turns first: the longest that fits
          ids = encode_chat(list(p.messages))
          if len(ids) <= max_tokens:
            got.append(ChatPrompt(p.text, tuple(ids), source, p.domain))
            break
        if len(got) == n:
          break
    elif name == "sharegpt":
      from specjax.data import eval_prompts
      by_domain = eval_prompts.heldout_eval_prompts(n_per_domain=max(10, n + len(exclude)),
                                                    seed=seed)
      order = [p for group in zip(*[by_domain[d] for d in ("code", "qa", "writing")])
               for p in group] + list(by_domain.get("math", ()))
      for p in order:
        if f"sharegpt:{p.id}" in exclude:
          continue
        ids = encode_chat(list(p.messages))
        if len(ids) <= max_tokens:
          got.append(ChatPrompt(p.text, tuple(ids), f"sharegpt:{p.id}", p.domain))
        if len(got) == n:
          break
    else:
      from specjax.data import humaneval
      probs = sorted(humaneval.load_problems(),
                     key=lambda p: hashlib.sha256(f"eval:{seed}:{p.task_id}".encode()).digest())
      for p in probs:
        if f"humaneval:{p.task_id}" in exclude:
          continue
        msgs = humaneval.chat_messages(p)
        ids = encode_chat(msgs)
        if len(ids) <= max_tokens:
          got.append(ChatPrompt(msgs[-1]["content"], tuple(ids), f"humaneval:{p.task_id}",
                                "humaneval"))
        if len(got) == n:
          break
    if len(got) < n:
      raise ValueError(f"prompt set {name!r} has only {len(got)} prompts of at most "
                       f"{max_tokens} tokens; asked for {n}")
    out += got
  return out


def held_out_chat_prompts(encode_chat, num_prompts: int, *, after: int,
                          sets=DEFAULT_PROMPT_SETS, max_tokens: int = 256) -> list:
  """``num_prompts`` chat prompts of ``sets`` disjoint from their first ``after`` (the
  evaluation prompts of the main job and the speed records): the prompts a table or
  an acceptance model is fitted on (:func:`load_chat_prompts` with ``exclude``)."""
  evals = load_chat_prompts(encode_chat, after, sets=sets, max_tokens=max_tokens) if after else []
  return load_chat_prompts(encode_chat, num_prompts, sets=sets, max_tokens=max_tokens,
                           exclude={q.source for q in evals})
