"""The drafter factory (specjax/decoding/drafter_factory.py): every name builds the
drafter it documents, aliases resolve, bad names and missing models fail early,
and no binary or benchmark builds a drafter class itself (construction only:
no program is compiled here)."""

import ast
import os

import pytest

from specjax.decoding import drafter_factory as df
from specjax.decoding.drafters import LMDrafter, LMTreeDrafter
from specjax.decoding.eagle_drafter import EagleDrafter
from specjax.decoding.lookup_drafter import PromptLookupDrafter
from specjax.decoding.source_choice import SourceChoiceDrafter
from specjax.decoding.suffix_drafter import SuffixTreeDrafter
from specjax.distributions import SamplingConfig
from specjax.models import eagle
from tests.helpers import tiny_pair

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMP = SamplingConfig(temperature=1.0)


@pytest.fixture(scope="module")
def sources():
  import jax
  target, tp, draft, dp = tiny_pair()
  cfg = eagle.EagleConfig(kind="eagle3", vocab_size=32, draft_vocab_size=32, hidden_size=32,
                          intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                          head_dim=8, target_hidden_size=32, target_layers=(0, 1, 1))
  head = eagle.EagleHead(cfg)
  hp = head.init_params(jax.random.key(0))
  return df.DraftSources.build(target, tp, draft, dp, (head, hp, None)), draft, dp, head


def test_every_kind_builds_its_drafter(sources):
  src, draft, dp, head = sources
  d, p = df.make_drafter("chain", SAMP, src, num_draft=3)
  assert type(d) is LMDrafter and d.num_draft == 3 and d.model is draft and p is dp
  d, p = df.make_drafter("tree", SAMP, src, paths=((0,), (1,), (0, 0)))
  assert type(d) is LMTreeDrafter and d.depth == 2 and d.tokens_per_step == 4 and p is dp
  d, p = df.make_drafter("eagle_chain", SAMP, src, num_draft=4)
  assert type(d) is EagleDrafter and d.tree_kind == "chain" and d.num_draft == 4
  assert d.head is head and set(p) >= {"head", "embed", "lm_head"}
  d, _ = df.make_drafter("eagle_tree", SAMP, src, num_draft=9, depth=3, top_k=2, total_tokens=5)
  assert (d.tree_kind, d.depth, d.top_k, d.total_tokens) == ("dynamic", 3, 2, 5)
  d, p = df.make_drafter("lookup_chain", SAMP, src, num_draft=5)
  assert type(d) is PromptLookupDrafter and d.num_draft == 5 and d.vocab == 32 and p is None
  d, p = df.make_drafter("suffix_tree", SAMP, src, num_draft=4, total_tokens=7)
  assert type(d) is SuffixTreeDrafter and (d.depth, d.total_tokens, d.vocab) == (4, 7, 32)
  assert p is None
  d, p = df.make_drafter("rsd_tree", SAMP, src, branching=(2, 2))
  assert type(d) is LMTreeDrafter and d.children == "sampled" and len(d.paths) == 6
  d, _ = df.make_drafter("eagle_rsd_tree", SAMP, src, paths=((0,), (1,)), children="topk")
  assert (d.tree_kind, d.children, d.tree_paths) == ("static", "topk", ((0,), (1,)))
  with pytest.raises(ValueError, match="exactly one of paths= .* or branching="):
    df.make_drafter("rsd_tree", SAMP, src)
  d, p = df.make_drafter("lookup_eagle_chain", SAMP, src, num_draft=3)
  assert type(d) is SourceChoiceDrafter and type(d.first) is PromptLookupDrafter
  assert type(d.second) is EagleDrafter and d.num_draft == 3 and p["first"] is None
  assert df.make_drafter("adaptive", SAMP, src, num_draft=3)[0] == d  # the main job's row
  built = {type(df.make_drafter(k, SAMP, src, num_draft=2, paths=((0,),))[0]) for k in df.KINDS}
  assert len(built) == 8  # one class per kind, but tree and rsd_tree are LMTreeDrafters


def test_aliases_are_the_documented_names(sources):
  """The names the binaries documented before the factory keep working."""
  src = sources[0]
  for alias, kind in [("lm_chain", "chain"), ("draft_chain", "chain"),
                      ("eagle1_chain", "eagle_chain"), ("eagle3_chain", "eagle_chain"),
                      ("eagle3_tree", "eagle_tree"), ("eagle1_tree", "eagle_tree")]:
    assert df.drafter_kind(alias) == kind
    a, _ = df.make_drafter(alias, SAMP, src, num_draft=3)
    b, _ = df.make_drafter(kind, SAMP, src, num_draft=3)
    assert a == b, alias
  assert df.eagle_head_kind("eagle1_chain") == "eagle1"
  assert df.eagle_head_kind("eagle3_tree") == "eagle3"
  assert df.eagle_head_kind("eagle_tree") == "" and df.eagle_head_kind("chain") == ""
  assert df.drafter_kind(" Lookup_Chain ") == "lookup_chain"
  assert [df.is_tree(k) for k in df.KINDS] == [False, True, False, True, False, True, True,
                                               True, False]
  assert [df.needs(k) for k in df.KINDS] == ["draft", "draft", "eagle", "eagle", None, None,
                                             "draft", "eagle", "eagle"]
  assert df.drafter_kind("eagle3_rsd_tree") == "eagle_rsd_tree"


def test_every_binary_name_resolves():
  """Each binary's documented drafter names are factory names."""
  from benchmarks.speculative import DRAFTER_KINDS
  from experiments.humaneval.methods import HUMANEVAL_DRAFTERS
  for name in DRAFTER_KINDS + HUMANEVAL_DRAFTERS + ("eagle1_tree", "suffix_tree"):
    df.drafter_kind(name)
  from experiments.acceptance import DRAFTERS  # its --drafters
  for name in DRAFTERS:
    df.drafter_kind(name)


def test_bad_names_and_missing_models_fail_early(sources):
  src, draft, dp, _ = sources
  with pytest.raises(ValueError, match=r"drafter='medusa' is unknown; allowed: chain, tree, "
                                       r"eagle_chain, .*lookup_chain, suffix_tree, .*lm_chain"):
    df.make_drafter("medusa", SAMP, src, num_draft=3)
  no_eagle = df.DraftSources(32, draft, dp)
  with pytest.raises(ValueError, match="'eagle3_chain' needs an EAGLE head"):
    df.make_drafter("eagle3_chain", SAMP, no_eagle, num_draft=3)
  with pytest.raises(ValueError, match="'chain' needs a draft LM"):
    df.make_drafter("chain", SAMP, df.DraftSources(32), num_draft=3)
  with pytest.raises(ValueError, match="needs paths="):
    df.make_drafter("tree", SAMP, src)
  with pytest.raises(TypeError, match="sources must be a DraftSources"):
    df.make_drafter("chain", SAMP, {"draft": draft}, num_draft=3)
  d, _ = df.make_drafter("lookup_chain", SAMP, df.DraftSources(32), num_draft=3)  # no model
  assert d.num_draft == 3


DRAFTER_CLASSES = {"LMDrafter", "LMTreeDrafter", "EagleDrafter", "EagleTreeDrafter",
                   "EagleStaticTreeDrafter", "PromptLookupDrafter", "SuffixTreeDrafter"}


def _direct_constructions(source: str) -> list:
  """Calls of a drafter class by name (``LMDrafter(...)``, ``x.EagleDrafter(...)``)."""
  out = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Call):
      f = node.func
      name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
      if name in DRAFTER_CLASSES:
        out.append(f"{name} (line {node.lineno})")
  return out


def test_binaries_build_drafters_only_through_the_factory():
  assert _direct_constructions("d = LMDrafter(4, s, m)\ne = dd.EagleDrafter(head=h)\n") == [
      "LMDrafter (line 1)", "EagleDrafter (line 2)"]
  hits = {}
  for pkg in ("experiments", "benchmarks"):
    for d, _, files in os.walk(os.path.join(ROOT, pkg)):
      for f in files:
        if f.endswith(".py"):
          path = os.path.join(d, f)
          with open(path, encoding="utf-8") as fh:
            found = _direct_constructions(fh.read())
          if found:
            hits[os.path.relpath(path, ROOT)] = found
  assert not hits, f"drafters built outside specjax.decoding.drafter_factory: {hits}"
