"""The model-free drafters (prompt lookup, suffix tree) in the speculative loop:
exact greedy output, matches that are really used, rows that never see each
other, any verifier, and losslessness at T = 1 (slow).

Compiled programs are shared: one tiny model architecture, one batch shape
(6 ragged prompts, one prompt bucket), one cache length and one
``max_new_tokens``; the second target (a "bigram" copy of the first, whose
attention output is zeroed, so its greedy text falls into a loop as a model
repeating itself does) only changes param values, never the program.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.decoding import token_history as th
from specjax.decoding.autoregressive import generate
from specjax.decoding.lookup_drafter import PromptLookupDrafter
from specjax.decoding.speculative import speculative_generate
from specjax.decoding.suffix_drafter import SuffixTreeDrafter
from specjax.distributions import SamplingConfig
from tests.helpers import teacher_forced_probs, tiny_pair

V, K, NEW, CACHE = 32, 4, 24, 64
PROMPTS = [[7], [5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6], [12, 30, 4, 12, 30], [9, 9],
           [21, 3, 17, 25, 8, 14, 2, 27, 19, 11, 6], [26]]
KW = dict(max_new_tokens=NEW, eos_token_id=None, cache_length=CACHE, prompt_bucket=16)


# Strictly increasing runs: under the counter target below no token ever repeats.
COUNTING = [[3], [10, 11, 12], [5, 6], [1, 2, 3, 4], [7], [0, 1]]


def _silenced(params, names):
  return jax.tree_util.tree_map_with_path(
      lambda path, x: x * 0 if any(n in jax.tree_util.keystr(path) for n in names) else x,
      params)


def _bigram(params):
  """The same model with every attention output projection zeroed: the next token
  depends on the current token only, so greedy text is eventually periodic."""
  return _silenced(params, ("o_proj",))


def _counter(params):
  """Every layer silenced and the LM head set so that the next token is the current
  one + 1 (mod V): its text never repeats within V tokens."""
  p = _silenced(params, ("o_proj", "down_proj"))
  e = p["embed_tokens"]["embedding"]
  normed = e / jnp.sqrt(jnp.mean(e * e, -1, keepdims=True)) * p["norm"]["weight"]
  return {**p, "lm_head": {"kernel": jnp.roll(normed, 1, axis=0).T}}  # column y: token y - 1


@pytest.fixture(scope="module")
def models():
  target, tp, _, _ = tiny_pair(vocab=V)
  targets = {"random": tp, "bigram": _bigram(tp), "counter": _counter(tp)}
  refs = {name: generate(target, p, COUNTING if name == "counter" else PROMPTS,
                         **KW).to_lists() for name, p in targets.items()}
  return target, targets, refs


def _run(target, params, drafter, prompts=PROMPTS, rule="lossless", **kw):
  args = dict(KW, **kw)
  return speculative_generate(target, params, drafter, None, verifiers.get(rule), prompts,
                              **args)


# --------------------------------------------------------------------------- units


def test_lookup_proposes_the_most_recent_longest_match_and_copies_with_overlap():
  d = PromptLookupDrafter(num_draft=5, vocab=V, max_ngram=3)
  hist = th.TokenHistory(jnp.array([[1, 2, 3, 9, 1, 2, 4, 1, 2, 0, 0, 0, 0, 0, 0, 0],
                                    [5, 6, 5, 6, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                                    [1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]]),
                         jnp.array([9, 5, 4]))
  x, num_valid, ngram = jax.jit(d.match)(hist, jnp.array([3, 6, 5]))
  # Row 0: text 1 2 3 9 1 2 4 1 2 3 -> the 3-gram "1 2 3" occurs at 0..2 (the more recent
  # "1 2" at 4..5 and 7..8 match only 2 tokens); the copy follows it: 9 1 2 4 1.
  # Row 1: 5 6 5 6 5 6 -> the most recent "6 5 6" ends at 3; the copy runs past the end
  # of the text and repeats with period 2.  Row 2: 1 2 3 4 5 -> no match, nothing offered.
  np.testing.assert_array_equal(x[0], [9, 1, 2, 4, 1])
  np.testing.assert_array_equal(x[1], [5, 6, 5, 6, 5])
  np.testing.assert_array_equal(num_valid, [5, 5, 0])
  np.testing.assert_array_equal(ngram, [3, 3, 0])  # the matched length (the confidence)


def test_history_commit_appends_only_kept_tokens():
  hist = th.TokenHistory(jnp.array([[1, 2, 0, 0, 0], [3, 4, 5, 6, 7]]), jnp.array([2, 5]))
  out = th.commit(hist, jnp.array([[8, 9, 10], [1, 1, 1]]), jnp.array([2, 0]))
  np.testing.assert_array_equal(out.tokens, [[1, 2, 8, 9, 0], [3, 4, 5, 6, 7]])
  np.testing.assert_array_equal(out.length, [4, 5])


def test_suffix_tree_ranks_longest_match_then_frequency():
  d = SuffixTreeDrafter(vocab=16, depth=3, total_tokens=7, max_occurrences=8)
  hist = th.TokenHistory(jnp.array([[1, 2, 3, 1, 2, 4, 1, 2, 3, 1, 0, 0, 0, 0, 0, 0]]),
                         jnp.array([10]))
  c = jax.jit(d.candidates)(hist, jnp.array([2]))  # text 1 2 3 1 2 4 1 2 3 1 2
  # "3 1 2" (match 3+) was followed by 4 once (ending at 4, match 5); "1 2" by 3 twice.
  np.testing.assert_array_equal(c.tree.tokens, [[4, 3, 1, 1, 2, 2, 2]])
  np.testing.assert_array_equal(c.tree.parents, [[0, 0, 1, 2, 3, 4, 0]])
  np.testing.assert_array_equal(c.tree.depths, [[1, 1, 2, 2, 3, 3, 1]])
  np.testing.assert_array_equal(c.support, [[1, 2, 1, 2, 1, 2, 0]])
  np.testing.assert_array_equal(c.real, [[True] * 6 + [False]])  # 6 candidates, 1 filler
  q = np.asarray(c.q_node[0])
  np.testing.assert_allclose(q[0, [3, 4]], [2 / 3, 1 / 3])  # root: next tokens 3, 3, 4
  np.testing.assert_allclose(q[6, [3, 4]], [0.5, 0.5])  # after "3 1 2": 3 (period) and 4
  np.testing.assert_allclose(q[7], 1 / 16)  # filler: no evidence, uniform


def test_bad_settings_raise_before_tracing():
  with pytest.raises(ValueError, match="num_draft"):
    PromptLookupDrafter(num_draft=0, vocab=V)
  with pytest.raises(ValueError, match=r"min_ngram=4 must lie in \[1, max_ngram=3\]"):
    PromptLookupDrafter(num_draft=K, vocab=V, min_ngram=4)
  with pytest.raises(ValueError, match=r"buckets=\(0, 2\) must be integers in \[0, K=4\]"):
    PromptLookupDrafter(num_draft=K, vocab=V, buckets=(0, 2))
  with pytest.raises(ValueError, match="total_tokens"):
    SuffixTreeDrafter(vocab=V, total_tokens=0)
  with pytest.raises(ValueError, match=r"min_match=9 must lie in \[1, max_match=8\]"):
    SuffixTreeDrafter(vocab=V, min_match=9)


# --------------------------------------------------------------------------- the loop


DRAFTERS = {"lookup": PromptLookupDrafter(num_draft=K, vocab=V),
            "suffix": SuffixTreeDrafter(vocab=V, depth=K, total_tokens=8)}


@pytest.mark.parametrize("name", sorted(DRAFTERS))
def test_greedy_identity_matches_used_and_rows_independent(models, name):
  """Greedy speculative == target greedy, token for token, on ragged rows, for a target
  whose text rarely repeats and for one that loops (matches used: tau > 2.5); the
  per-row statistics do not change when the rows are reversed (no shared state)."""
  target, targets, refs = models
  drafter = DRAFTERS[name]
  out = _run(target, targets["random"], drafter)
  assert out.to_lists() == refs["random"]
  loop = _run(target, targets["bigram"], drafter)
  assert loop.to_lists() == refs["bigram"]
  assert loop.stats.summary()["tau"] > 2.5
  if name == "lookup":  # steps without a match offer nothing; steps with one offer K
    gamma = out.stats.summary()["gamma_counts"]
    assert gamma[0] > 0 and gamma[K] > 0 and sum(gamma[1:K]) == 0
  rev = _run(target, targets["bigram"], drafter, prompts=PROMPTS[::-1])
  assert rev.to_lists() == refs["bigram"][::-1]
  for field in ("accepted", "target_calls", "verified_tokens", "processed_tokens"):
    np.testing.assert_array_equal(np.asarray(getattr(rev.stats, field))[::-1],
                                  np.asarray(getattr(loop.stats, field)), err_msg=field)


def test_lookup_without_matches_is_exact_and_verifies_one_token(models):
  """A target counting up (no token ever repeats): no draft is ever offered, every step
  runs the target over 1 token (bucket 0), and the output is still exact."""
  target, targets, refs = models
  assert refs["counter"][0][:3] == [4, 5, 6]  # the target counts
  out = _run(target, targets["counter"], DRAFTERS["lookup"], prompts=COUNTING)
  assert out.to_lists() == refs["counter"]
  s = out.stats
  assert int(np.sum(s.verified_tokens)) == 0
  np.testing.assert_array_equal(s.processed_tokens, s.target_calls)  # 1 token per step
  np.testing.assert_array_equal(s.target_calls, NEW - 1)  # one token per step, as generate


@pytest.mark.parametrize("name,rule", [pytest.param("lookup", "mars", marks=pytest.mark.slow),
                                       ("suffix", "cos")])
def test_sampled_with_lossy_rules(models, name, rule):
  """T = 1 with a relaxed rule (MARS) and with CoS, which mixes in the suffix tree's
  empirical node distribution: the loop runs, drafts are accepted, every token is valid."""
  target, targets, _ = models
  out = _run(target, targets["bigram"], DRAFTERS[name], rule=rule,
             sampling=SamplingConfig(temperature=1.0), key=jax.random.key(0))
  toks = out.to_lists()
  assert all(len(t) == NEW and all(0 <= x < V for x in t) for t in toks)
  assert out.stats.summary()["accepted"] > 0


def test_cos_refuses_prompt_lookup(models):
  """Prompt lookup has no token distribution: CoS is refused with the stated reason."""
  target, targets, _ = models
  with pytest.raises(ValueError, match="supplies_node_dist=False"):
    _run(target, targets["bigram"], DRAFTERS["lookup"], rule="cos")


# --------------------------------------------------------------------------- lossless, T = 1


class _ClaimsUniformQ(PromptLookupDrafter):
  """Broken on purpose: reports q = uniform for its deterministic copies (as if they
  were sampled), so the lossless rule accepts a copy with min(1, V p(x)): lossy."""

  def propose(self, params, state, prev, last, keys, gate=None):
    proposal, state = super().propose(params, state, prev, last, keys)
    return dataclasses.replace(proposal, q=jnp.full_like(proposal.q, 1.0 / self.vocab)), state


def _max_z(target, params, drafter, prompt, n_rows=1500, n_new=7):
  from tests.helpers import martingale_z
  samp = SamplingConfig(temperature=1.0)
  out = speculative_generate(target, params, drafter, None, verifiers.get("lossless"),
                             [prompt] * n_rows, max_new_tokens=n_new, sampling=samp,
                             key=jax.random.key(7), eos_token_id=None)
  s = out.stats.summary()
  assert 0 < s["accepted"] < s["verified_per_call"] * s["target_calls"]  # accepts and rejects
  probs = np.asarray(teacher_forced_probs(target, params, prompt, out.tokens, samp))
  z = martingale_z(np.asarray(out.tokens)[:, 1:], probs[:, 1:], np.asarray(out.lengths) - 1)
  return float(np.abs(z).max())


@pytest.mark.slow
def test_lossless_at_temperature_1(models):
  """Martingale z-test of tests/decoding/test_speculative.py: 1500 rows x 7 tokens, V = 32, the
  looping target at T = 1 on a prompt holding a repeated span (so drafts are offered
  and both accepted and rejected).  Under H0 every |z| < 4.5 (P(max |z| > 4.5) ~ 2e-4
  per check); the broken drafter that claims q = uniform is caught (max |z| = 7.7 with
  this seed; asserted > 6)."""
  target, targets, _ = models
  prompt = [5, 6, 7, 5, 6, 7, 5, 6]
  for drafter in DRAFTERS.values():
    assert _max_z(target, targets["bigram"], drafter, prompt) < 4.5
  assert _max_z(target, targets["bigram"], _ClaimsUniformQ(num_draft=K, vocab=V), prompt) > 6
