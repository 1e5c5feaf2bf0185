"""The compiled decode loops update the KV caches in place: no copy of a cache-sized
buffer inside the loop (read in the optimised HLO, as a profile of a round would).

A bucketed chain verify picks its target forward with ``lax.switch``; a branch that
wrote the cache made XLA copy the whole target cache into the branch and again into
the loop's carry, twice per step for K and V (the broken variant: with the forward
writing inside the branches, prompt lookup's default buckets ``(0, K)`` compile to
six cache-sized copies inside the loop, here none).  Target-only ``generate`` and a
bucket-free chain are checked too.
"""

import re

import jax
import pytest

from specjax import verifiers
from specjax.decoding import autoregressive, speculative
from specjax.decoding.autoregressive import generate
from specjax.decoding.drafters import LMDrafter
from specjax.decoding.lookup_drafter import PromptLookupDrafter
from specjax.decoding.speculative import speculative_generate
from specjax.distributions import SamplingConfig
from tests.helpers import tiny_pair

V, K, CACHE = 32, 4, 64
PROMPTS = [[5, 6, 7, 8, 9, 5, 6], [3, 4]]


class _Captured(Exception):
  pass


def _optimised_hlo(monkeypatch, module, name, run) -> str:
  """The optimised HLO text of the jitted ``module.name`` as ``run()`` calls it."""
  jitted, box = getattr(module, name), {}

  def spy(*args):
    box["hlo"] = jitted.lower(*args).compile().as_text()
    raise _Captured

  monkeypatch.setattr(module, name, spy)
  with pytest.raises(_Captured):
    run()
  return box["hlo"]


def _cache_copies_in_loops(hlo: str, shape: tuple) -> list[str]:
  """``copy`` instructions producing an array of ``shape`` outside the entry
  computation (inside the while loop's body, its branches and callees)."""
  dims = ",".join(str(d) for d in shape)
  pattern = re.compile(rf"= f32\[{dims}\]\{{[^}}]*\}} copy\(")
  copies, in_entry = [], False
  for line in hlo.splitlines():
    if line and not line.startswith(" "):
      in_entry = line.startswith("ENTRY")
    elif not in_entry and pattern.search(line):
      copies.append(line.strip()[:120])
  return copies


@pytest.fixture(scope="module")
def pair():
  return tiny_pair(vocab=V)


def _cache_shape(target, batch: int) -> tuple:
  c = target.config
  return (c.num_hidden_layers, batch, CACHE, c.num_key_value_heads, c.head_dim)


# The default buckets (0, K) catch the broken variant; three buckets and a bucket-free
# chain run in the slow step.
@pytest.mark.parametrize("drafter_name", [
    "lookup_buckets_0_K", pytest.param("lookup_buckets_0_2_K", marks=pytest.mark.slow),
    pytest.param("draft_lm_no_buckets", marks=pytest.mark.slow)])
def test_speculative_loop_copies_no_cache(monkeypatch, pair, drafter_name):
  target, tp, draft, dp = pair
  drafter = {"lookup_buckets_0_K": PromptLookupDrafter(num_draft=K, vocab=V),
             "lookup_buckets_0_2_K": PromptLookupDrafter(num_draft=K, vocab=V,
                                                         buckets=(0, 2, K)),
             "draft_lm_no_buckets": LMDrafter(K, SamplingConfig(temperature=0.0), draft),
             }[drafter_name]
  params = None if drafter_name.startswith("lookup") else dp
  hlo = _optimised_hlo(monkeypatch, speculative, "_speculative", lambda: speculative_generate(
      target, tp, drafter, params, verifiers.get("lossless"), PROMPTS, max_new_tokens=8,
      eos_token_id=None, cache_length=CACHE))
  assert " while(" in hlo  # the loop is there
  assert _cache_copies_in_loops(hlo, _cache_shape(target, len(PROMPTS))) == []


def test_generate_loop_copies_no_cache(monkeypatch, pair):
  target, tp, _, _ = pair
  hlo = _optimised_hlo(monkeypatch, autoregressive, "_generate", lambda: generate(
      target, tp, PROMPTS, max_new_tokens=8, eos_token_id=None, cache_length=CACHE))
  assert " while(" in hlo
  assert _cache_copies_in_loops(hlo, _cache_shape(target, len(PROMPTS))) == []


def test_the_copy_finder_sees_a_copy():
  """The parser finds a cache-shaped copy inside a loop body and ignores the entry's."""
  hlo = ("%body (p: f32[2]) -> f32[2] {\n"
         "  %copy.1 = f32[2,1,64,2,8]{4,3,2,1,0} copy(%gte.3)\n}\n"
         "ENTRY %main (a: f32[2]) -> f32[2] {\n"
         "  %copy.2 = f32[2,1,64,2,8]{4,3,2,1,0} copy(%b)\n}\n")
  assert len(_cache_copies_in_loops(hlo, (2, 1, 64, 2, 8))) == 1
  assert _cache_copies_in_loops(hlo, (2, 1, 32, 2, 8)) == []
