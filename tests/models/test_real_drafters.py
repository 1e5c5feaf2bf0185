"""The drafters shipped for SmolLM2-135M-Instruct, on the real speculative loop.

* **Greedy identity**: for every shipped drafter (draft LM chain, EAGLE-3 chain,
  EAGLE-3 EAGLE-2 dynamic tree) and the lossless and greedy rules, speculative
  output equals target-only greedy output token for token on held-out ShareGPT
  and HumanEval chat prompts.
* **Lossless law** (randomised probability integral transform): at T = 1, every
  token y_t the loop emits is turned into ``u_t = F(y_t^-) + U p(y_t)`` where
  ``p = p(. | prefix)`` is the target's own next-token law (a teacher-forced
  forward over prompt + output) with its tokens ordered by decreasing
  probability, ``F(y^-)`` the mass strictly before y_t and ``U ~ U(0, 1)`` fresh.
  If the loop samples exactly from the target, the u_t are i.i.d. U(0, 1)
  (Rosenblatt: each is uniform given everything before it, EOS stopping
  included). Test: the Kolmogorov distance ``D`` of the n u's to U(0, 1) must be
  below ``eps = sqrt(ln(2 / delta) / (2 n))``, ``delta = 1e-6`` -- by the DKW
  inequality the false-alarm rate is at most delta, and any law at Kolmogorov
  distance >= 2 eps from uniform fails with probability >= 1 - delta.
  Sample: 64 rows (8 held-out ShareGPT prompts x 8) x 32 new tokens, about 2,000
  u's (eps ~ 0.06). **Broken variants** (must fail at the same n): the greedy
  rule run at T = 1 (always emits the argmax on rejection), and lenience l = 0.05
  (accepts a draft with min(1, p / (0.05 q)) -- over-accepts the head's tokens).
  Measured with the step-250 EAGLE-3 head: lossless D = 0.015, greedy 0.31,
  lenience(0.05) 0.157, against eps = 0.060 (lenience at l = 0.3, D = 0.046, and
  MARS theta = 0.9 at T = 1, D = 0.015, are too close to lossless to be caught at
  this n -- MARS relaxes only where the strict rule rejects a top-2 draft).

Marker ``real`` (the SmolLM2 GGUF and data packages; CI's slow step). Runs in
about two minutes on two idle cores.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.decoding.autoregressive import generate
from specjax.decoding.drafters import LMDrafter
from specjax.decoding.eagle_drafter import EagleDrafter
from specjax.decoding.eagle_trees import EagleTreeDrafter
from specjax.decoding.speculative import speculative_generate
from specjax.distributions import SamplingConfig
from specjax.models import drafter_assets

pytestmark = pytest.mark.real
NAME = "smollm2-135m-instruct"
DELTA = 1e-6


@pytest.fixture(scope="module")
def ms():
  from specjax.models import registry
  try:
    registry.model_file(NAME)
  except FileNotFoundError as e:
    pytest.skip(str(e))
  from experiments.common.model_sets import load_model_set
  shipped = drafter_assets.available(NAME)
  return load_model_set(NAME, draft="draft" if "draft" in shipped else "",
                        eagle="eagle3" if "eagle3" in shipped else "")


def _drafters(ms, sampling):
  out = {}
  if ms.draft is not None:
    out["draft_chain"] = (LMDrafter(4, sampling, ms.draft), ms.draft_params)
  if ms.eagle is not None:
    head, hp, d2t = ms.eagle
    params = EagleDrafter.make_params(hp, ms.target, ms.target_params, d2t)
    out["eagle3_chain"] = (EagleDrafter(4, sampling, head=head), params)
    out["eagle3_tree"] = (EagleTreeDrafter(depth=5, sampling=sampling, head=head, top_k=6,
                                       total_tokens=16), params)
  return out


def test_every_shipped_drafter_is_there(ms):
  assert "eagle3" in drafter_assets.available(NAME)
  assert ms.eagle is not None and ms.eagle[0].config.kind == "eagle3"


def test_lm_companion_is_the_shipped_draft_lm(ms):
  """companion="lm:draft": the shipped draft LM as a separate SV companion (beside the
  EAGLE-3 drafter), the same weights as the draft LM the set loads."""
  from experiments.common.model_sets import load_model_set
  if ms.draft is None:
    pytest.skip("no shipped draft LM")
  got = load_model_set(NAME, draft="", eagle="eagle3", companion="lm:draft")
  assert got.draft is None and got.eagle is not None
  assert got.companion.config == ms.draft.config
  assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)),
                                   got.companion_params, ms.draft_params))
  assert got.sources["companion"] == f"lm:{ms.sources['draft']}"


def test_the_draft_lm_by_path_is_refused_as_its_own_companion(ms):
  """The shipped draft LM named by its directory (not "lm:draft") beside drafter "draft":
  refused once the set shows the companion is the drafter."""
  import ml_collections
  from experiments.sv import calibrate
  if ms.draft is None:
    pytest.skip("no shipped draft LM")
  c = ml_collections.ConfigDict(dict(models=NAME, drafter="draft",
                                     companion=f"lm:{ms.sources['draft']}", seed=0))
  with pytest.raises(ValueError, match="is the drafter='draft' LM itself"):
    calibrate.load_models(c)


def test_greedy_identity_every_drafter(ms):
  from experiments.common.prompts import load_chat_prompts
  prompts = [list(p.ids) for p in load_chat_prompts(ms.encode_chat, 4, max_tokens=256)]
  ref = generate(ms.target, ms.target_params, prompts, max_new_tokens=40).to_lists()
  greedy = SamplingConfig(0.0)
  drafters = _drafters(ms, greedy)
  assert drafters
  for name, (drafter, params) in drafters.items():
    for rule in ("lossless", "greedy"):
      out = speculative_generate(ms.target, ms.target_params, drafter, params,
                                 verifiers.get(rule), prompts, max_new_tokens=40)
      assert out.to_lists() == ref, (name, rule)
      assert out.stats.summary()["tau"] > 1.0, (name, rule)  # the drafter does help


def _pit(ms, prompts, out, key, chunk=8):
  """Randomised PIT values of every emitted token under the target (docstring)."""
  toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
  rows = [list(p) + toks[i, :lens[i]].tolist() for i, p in enumerate(prompts)]
  width = max(map(len, rows))
  ids = np.zeros((len(rows), width), np.int32)
  for i, r in enumerate(rows):
    ids[i, :len(r)] = r
  m = ms.target
  pos = jnp.broadcast_to(jnp.arange(width), (chunk, width))
  probs_of = jax.jit(lambda p, t: jax.nn.softmax(
      m.apply(p, t, pos, m.init_cache(chunk, width)).logits.astype(jnp.float32), -1))
  unif = np.asarray(jax.random.uniform(key, (len(rows), width)))
  us = []
  for c0 in range(0, len(rows), chunk):
    probs = np.asarray(probs_of(ms.target_params, jnp.asarray(ids[c0:c0 + chunk])), np.float64)
    for j in range(probs.shape[0]):
      i = c0 + j
      for t in range(int(lens[i])):
        at = len(prompts[i]) + t  # the emitted token's position; its law is read at at - 1
        pr = probs[j, at - 1]
        py = pr[ids[i, at]]
        us.append(pr[pr > py].sum() + unif[i, at] * py)
  return np.asarray(us)


def _kolmogorov(u):
  u = np.sort(u)
  n = len(u)
  i = np.arange(1, n + 1)
  return float(max(np.max(i / n - u), np.max(u - (i - 1) / n)))


def test_lossless_law_with_the_trained_head(ms):
  from experiments.common.prompts import load_chat_prompts
  if ms.eagle is None:
    pytest.fail("no EAGLE-3 head shipped for SmolLM2")
  base = [list(p.ids) for p in load_chat_prompts(ms.encode_chat, 8, sets=("sharegpt",),
                                                 max_tokens=96)]
  prompts = [p for p in base for _ in range(8)]
  samp = SamplingConfig(1.0)
  drafter, params = _drafters(ms, samp)["eagle3_chain"]
  d = {}
  for name, rule in (("lossless", verifiers.get("lossless")),
                     ("greedy", verifiers.get("greedy")),
                     ("lenience", verifiers.get("lenience", l=0.05))):
    out = speculative_generate(ms.target, ms.target_params, drafter, params, rule, prompts,
                               max_new_tokens=32, sampling=samp, key=jax.random.key(7))
    u = _pit(ms, prompts, out, jax.random.key(8))
    eps = math.sqrt(math.log(2 / DELTA) / (2 * len(u)))
    d[name] = (_kolmogorov(u), eps, len(u))
  assert d["lossless"][2] > 1500, d
  assert d["lossless"][0] < d["lossless"][1], d
  assert d["greedy"][0] > d["greedy"][1], d
  assert d["lenience"][0] > d["lenience"][1], d
