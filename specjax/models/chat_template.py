"""Chat templates: render a conversation to the model's prompt text with jinja2,
in the sandboxed environment and with the helpers that Hugging Face
``apply_chat_template`` gives templates (so a template from a GGUF file or a
``tokenizer_config.json`` renders exactly as it does in transformers).

    tmpl = ChatTemplate(source, bos_token="<|im_start|>", eos_token="<|im_end|>")
    text = tmpl.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
from typing import Any, Mapping, Sequence

ROLES = ("system", "user", "assistant", "tool")


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
  # jinja's own tojson escapes HTML characters; templates expect plain JSON
  return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                    sort_keys=sort_keys)


def _raise_exception(message):
  import jinja2
  raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt):
  return datetime.datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=16)
def _compile(source: str):
  import jinja2
  import jinja2.ext
  from jinja2.sandbox import ImmutableSandboxedEnvironment
  env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                      extensions=[jinja2.ext.loopcontrols])
  env.filters["tojson"] = _tojson
  env.globals["raise_exception"] = _raise_exception
  env.globals["strftime_now"] = _strftime_now
  try:
    return env.from_string(source)
  except jinja2.exceptions.TemplateSyntaxError as e:
    raise ValueError(f"chat template does not parse (line {e.lineno}): {e.message}") from None


def check_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict]:
  """Validate a conversation: a non-empty list of {"role": str, "content": str}."""
  if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
    raise TypeError(f"messages must be a list of {{'role', 'content'}} dicts, got "
                    f"{type(messages).__name__}")
  if not messages:
    raise ValueError("messages is empty; a conversation needs at least one message")
  out = []
  for i, m in enumerate(messages):
    if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
      raise ValueError(f"messages[{i}]={m!r} must be a dict with 'role' and 'content'")
    if m["role"] not in ROLES:
      raise ValueError(f"messages[{i}]['role']={m['role']!r}; allowed roles are {ROLES}")
    if not isinstance(m["content"], str):
      raise TypeError(f"messages[{i}]['content'] must be str, got {type(m['content']).__name__}")
    out.append(dict(m))
  return out


@dataclasses.dataclass(frozen=True)
class ChatTemplate:
  """A jinja2 chat template with the special tokens it may refer to.

  Attributes:
    source: the template text (``tokenizer.chat_template`` in GGUF metadata,
      ``chat_template`` in ``tokenizer_config.json``).
    bos_token, eos_token: strings the template sees as ``bos_token`` /
      ``eos_token`` (empty when the tokenizer has none).
  """

  source: str
  bos_token: str = ""
  eos_token: str = ""

  def __post_init__(self):
    if not isinstance(self.source, str) or not self.source.strip():
      raise ValueError("chat template source must be a non-empty string")
    _compile(self.source)  # syntax errors surface at construction

  def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
             **extra) -> str:
    """The prompt text for ``messages`` (transformers' ``apply_chat_template(...,
    tokenize=False)``). ``add_generation_prompt`` appends the assistant header."""
    msgs = check_messages(messages)
    return _compile(self.source).render(
        messages=msgs, add_generation_prompt=bool(add_generation_prompt),
        bos_token=self.bos_token, eos_token=self.eos_token, **extra)
