"""The run of a HumanEval evaluation shared by its binaries
(``experiments/humaneval_eval.py``, ``experiments/humaneval_screen.py``): the
resumable batch configurations and their keys, and the problems, models, prompts and
drafter-weight fingerprints of a run."""

from __future__ import annotations

import os

from experiments.humaneval.methods import Method


def batch_configs(num_problems: int, batch_size: int, temperatures, samples: int,
                  settings: str, methods=(Method("target"),),
                  fingerprints: dict | None = None) -> list[dict]:
  """One configuration per (method, temperature, sample, batch of problems);
  ``settings`` (model hash, prompt style, lengths, seed) is part of every key.
  Target-only keys are ``{settings}-T{t}-s{s}-p{start}`` (as before ``--methods``);
  a speculative method's adds its spec and ``fingerprints[spec]``
  (:meth:`Method.fingerprint`)."""
  out = []
  for m in methods:
    for t in temperatures:
      if m.sampled_only and t == 0:
        continue
      for s in range(1 if t == 0 else samples):
        for start in range(0, num_problems, batch_size):
          c = {"key": f"{settings}-T{t:g}-s{s}-p{start}", "temperature": t, "sample": s,
               "start": start, "stop": min(start + batch_size, num_problems)}
          if not m.is_target:
            c["key"] = f"{settings}-{m.spec}-{(fingerprints or {}).get(m.spec, '')}-T{t:g}-" \
                       f"s{s}-p{start}"
            c["method"] = m.spec
          out.append(c)
  return out


def load_run(methods, *, model: str, limit: int | None, style: str):
  """``(problems, model set, prompt ids, method fingerprints)`` of a HumanEval run: the
  first ``limit`` problems (all when None), model set ``model`` with only the drafters
  the methods use; prompts are chat renderings (``style="chat"``) or raw completion
  prompts (``"completion"``)."""
  from experiments.common.model_sets import load_model_set
  from specjax.data import humaneval
  problems = humaneval.load_problems()[:limit]
  assets = {m.asset for m in methods if m.asset}
  ms = load_model_set(model, draft="draft" if "draft" in assets else "",
                      eagle="eagle3" if "eagle3" in assets else "")
  if style == "chat":
    prompts = [ms.encode_chat(humaneval.chat_messages(p)) for p in problems]
  else:
    prompts = [ms.tokenizer.encode(humaneval.completion_prompt(p)).ids for p in problems]
  return problems, ms, prompts, method_fingerprints(ms, methods, assets)


def method_fingerprints(ms, methods, assets) -> dict:
  """``{spec: Method.fingerprint}`` over the weights of the shipped drafters used."""
  from specjax.models.registry import file_sha256
  source = {"draft": "draft", "eagle3": "eagle"}  # asset kind -> ModelSet.sources entry
  shas = {a: file_sha256(os.path.join(ms.sources[source[a]], "model.safetensors"))
          for a in assets}
  return {m.spec: m.fingerprint(shas.get(m.asset, "")) for m in methods if not m.is_target}
