"""Online adaptation of an EAGLE drafter (``specjax/decoding/adaptation.py``): the window's
bookkeeping by hand, the update learning its window, greedy identity with the target
under adaptation (chain and EAGLE-2 tree), the lossless law at T = 1 with adaptation on
(slow step), sessions carried across calls, and bad input."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import verifiers
from specjax.decoding import adaptation
from specjax.decoding.adaptation import OnlineAdaptation
from specjax.decoding.autoregressive import generate
from specjax.decoding.eagle_drafter import EagleDrafter
from specjax.decoding.eagle_trees import EagleTreeDrafter
from specjax.decoding.speculative import speculative_generate
from specjax.distributions import SamplingConfig
from tests.helpers import eagle_head, eagle_target

GREEDY = SamplingConfig(temperature=0.0)
# A fast learner, so that a dozen rounds move the drafts (the tests need them to move).
FAST = OnlineAdaptation(every=1, steps=2, window=8, rank=4, learning_rate=0.1, label_top_k=4)


@pytest.mark.parametrize("vocab", [50, 300])
def test_labels_are_the_exact_top_k_with_lower_ids_first_on_ties(vocab):
  """The two-stage top-k equals ``lax.top_k`` over the whole vocabulary (ids in order,
  ties to the lower id) on integer logits in [-3, 3) -- about vocab / 6 tokens share
  each value, so ties cross chunk boundaries -- for vocabularies below and above one
  chunk, and k up to 50; probabilities are the softmax's.  Picking the k chunks
  without sorting them (a broken variant) puts the tied 3 of the later chunk first in
  the last case (for a vocabulary over one chunk)."""
  rng = np.random.default_rng(vocab)
  for k in (3, min(50, vocab)):
    logits = jnp.asarray(rng.integers(-3, 3, size=(4, 5, vocab)), jnp.float32)
    ids, probs = adaptation.labels(logits, k)
    want = jax.lax.top_k(logits, k)[1]
    np.testing.assert_array_equal(ids, want)
    np.testing.assert_allclose(probs, jnp.take_along_axis(jax.nn.softmax(logits), want, -1),
                               rtol=1e-6)
  # chunk 1 holds the top token, chunk 0 the second, both a 3: the lower id comes first
  tied = np.zeros(vocab, np.float32)
  tied[[0, 1, vocab - 2, vocab - 1]] = [4, 3, 5, 3]
  assert adaptation.labels(jnp.asarray(tied), 3)[0].tolist() == [vocab - 2, 0, 1]
  with pytest.raises(ValueError, match=f"k={vocab + 1} must be in \\[1, {vocab}\\]"):
    adaptation.labels(logits, vocab + 1)


def test_entries_complete_one_round_late_and_in_order():
  """An entry is the head's output the drafter kept when it caught up on a committed
  position, labelled by the target's distribution after that position's next token.
  Round 1 keeps the prefill's one pending output per row; row 0 commits 2 tokens, row 1
  one, row 2 is finished (0): rows 0 and 1 add that entry, labelled by round 1's row 0.
  Round 2 keeps row 0's two outputs and row 1's one: row 0's first takes round 1's row 1
  label (its token was round 1's accepted draft), its last and row 1's take round 2's row
  0; the finished row adds nothing and counts no round, whatever its outputs were."""
  cfg = OnlineAdaptation(every=1, window=4, rank=2, label_top_k=2)
  b, p, h, v = 3, 3, 2, 6
  st = adaptation.init_state(cfg, b, p, h, v)
  hidden = jnp.arange(b * p * h, dtype=jnp.float32).reshape(b, p, h)
  logits = jnp.zeros((b, p, v)).at[:, :, 0].set(3.0).at[:, :, 1].set(2.0)
  logits = logits.at[0, 1, 4].set(9.0)  # after row 0's accepted draft: token 4 first
  st = adaptation.keep_drafted(st, hidden, jnp.asarray([1, 1, 1]))
  st = adaptation.add_entries(cfg, st, jnp.asarray([2, 1, 0]), logits)
  win = st.window
  assert win.valid.tolist() == [[False, False, False, True]] * 2 + [[False] * 4]
  np.testing.assert_array_equal(win.hidden[:2, -1], hidden[:2, 0])
  assert win.label_ids[0, -1].tolist() == [0, 1] and win.label_ids[1, -1].tolist() == [0, 1]
  assert st.rounds.tolist() == [1, 1, 0]
  st = adaptation.keep_drafted(st, hidden + 100, jnp.asarray([2, 1, 1]))
  st = adaptation.add_entries(cfg, st, jnp.asarray([1, 1, 0]), logits.at[:, 0, 5].set(9.0))
  win = st.window
  assert win.valid.tolist() == [[False, True, True, True], [False, False, True, True],
                                [False] * 4]
  np.testing.assert_array_equal(win.hidden[0, -2:], hidden[0, :2] + 100)
  np.testing.assert_array_equal(win.hidden[1, -1], hidden[1, 0] + 100)
  assert win.label_ids[0, -2].tolist() == [4, 0]  # round 1's label after the draft
  assert win.label_ids[0, -1].tolist() == [5, 0] and win.label_ids[1, -1].tolist() == [5, 0]
  assert st.rounds.tolist() == [2, 2, 0]
  assert st.fresh.tolist() == [3, 2, 0]  # entries no update has seen yet
  with pytest.raises(ValueError, match="made for 3"):
    adaptation.keep_drafted(st, hidden[:, :2], jnp.asarray([1, 1, 1]))


@pytest.mark.parametrize("loss", adaptation.LOSSES)
def test_update_learns_its_window_and_leaves_empty_rows_alone(loss):
  """Adam steps on the adapter lower the window loss of a row with entries (by 0.1 nats
  for cross-entropy, 0.05 of acceptance for "tv": the labels' mass is 1 and 20 steps at
  0.05 move q far); a row with an empty window keeps its adapter (and its optimiser
  state)."""
  cfg = OnlineAdaptation(every=1, steps=20, window=6, rank=3, learning_rate=0.05,
                         label_top_k=3, loss=loss)
  b, w, h, vd = 2, 6, 8, 10
  st = adaptation.init_state(cfg, b, 2, h, vd)
  rng = np.random.default_rng(0)
  ids = jnp.asarray(rng.integers(0, vd, (b, w, 3)), jnp.int32)
  probs = jnp.asarray(rng.dirichlet(np.ones(3), (b, w)), jnp.float32)
  valid = jnp.asarray([[True] * w, [False] * w])
  st = dataclasses.replace(st, rounds=jnp.ones((b,), jnp.int32), window=dataclasses.replace(
      st.window, label_ids=ids, label_probs=probs, valid=valid))  # both rows due
  base = jnp.asarray(rng.standard_normal((b, w, vd)), jnp.float32)
  hidden = jnp.asarray(rng.standard_normal((b, w, h)), jnp.float32)
  to_draft = jnp.arange(vd, dtype=jnp.int32)
  before = adaptation.window_loss(st.params, base, hidden, st.window, to_draft, loss)
  new = jax.jit(adaptation.update, static_argnums=0)(cfg, st, base, hidden, to_draft)
  after = adaptation.window_loss(new.params, base, hidden, new.window, to_draft, loss)
  assert float(after[0]) < float(before[0]) - (0.1 if loss == "ce" else 0.05)
  for leaf_new, leaf_old in zip(jax.tree.leaves(new.params), jax.tree.leaves(st.params)):
    np.testing.assert_array_equal(leaf_new[1], leaf_old[1])
  assert new.updates.tolist() == [1, 0] and new.updated_at.tolist() == [1, 1]
  assert not np.any(np.asarray(adaptation.due_rows(cfg, new)))  # not again this round


def test_a_labels_only_update_moves_only_the_tokens_its_window_names():
  """``update_vocab="labels"``: after 10 Adam steps the bias and B columns of draft tokens
  no valid label of the row names (with nonzero probability) are still exactly 0 -- their
  logits are the frozen head's -- those it names have moved, and the window loss fell;
  with ``"all"`` every column moves (the mask is what keeps them)."""
  b, w, h, vd = 1, 4, 6, 12
  rng = np.random.default_rng(2)
  ids = jnp.asarray([[[1, 2], [3, 1], [5, 9], [7, 8]]], jnp.int32)
  probs = jnp.asarray([[[0.6, 0.4], [0.7, 0.3], [1.0, 0.0], [0.5, 0.5]]], jnp.float32)
  valid = jnp.asarray([[True, True, True, False]])  # 7 and 8: an invalid entry's; 9: p = 0
  base = jnp.asarray(rng.standard_normal((b, w, vd)), jnp.float32)
  hidden = jnp.asarray(rng.standard_normal((b, w, h)), jnp.float32)
  to_draft = jnp.arange(vd, dtype=jnp.int32)
  moved = {}
  for vocab in adaptation.UPDATE_VOCABS:
    cfg = OnlineAdaptation(every=1, steps=10, window=w, rank=2, learning_rate=0.05,
                           label_top_k=2, update_vocab=vocab)
    st = adaptation.init_state(cfg, b, 2, h, vd)
    st = dataclasses.replace(st, rounds=jnp.ones((b,), jnp.int32), window=dataclasses.replace(
        st.window, label_ids=ids, label_probs=probs, valid=valid))
    new = adaptation.update(cfg, st, base, hidden, to_draft)
    cols = (np.abs(np.asarray(new.params.bias[0])) + np.abs(np.asarray(new.params.b[0])).sum(0))
    moved[vocab] = set(np.flatnonzero(cols > 0).tolist())
    before = adaptation.window_loss(st.params, base, hidden, st.window, to_draft)
    assert float(adaptation.window_loss(new.params, base, hidden, new.window, to_draft)[0]) < \
        float(before[0])
  assert moved["labels"] == {1, 2, 3, 5}
  assert moved["all"] == set(range(vd))
  named = adaptation.label_tokens(dataclasses.replace(
      adaptation.init_state(OnlineAdaptation(window=w, label_top_k=2), b, 2, h, vd).window,
      label_ids=ids, label_probs=probs, valid=valid), to_draft, vd)
  assert np.flatnonzero(np.asarray(named[0])).tolist() == [1, 2, 3, 5]


def test_weight_decay_fades_what_an_empty_window_no_longer_teaches():
  """``weight_decay``: a row learns its window (20 AdamW steps); then, with no gradient
  left (labels outside the draft vocabulary: no entry counts), 20 further steps shrink
  ``bias`` and ``b`` -- the decay alone multiplies them by ``(1 - 0.05 * 2)^20 = 0.12``;
  Adam's momentum still carries them on a little, so the check is that less than half
  of their size is left.  ``a`` is not decayed: zero-gradient steps from a fresh state
  leave it exactly as it was.  Without decay the optimiser is plain Adam (another
  state)."""
  b, w, h, vd = 1, 4, 6, 8
  rng = np.random.default_rng(3)
  cfg = OnlineAdaptation(every=1, steps=20, window=w, rank=2, learning_rate=0.05,
                         label_top_k=1, weight_decay=2.0)
  st = adaptation.init_state(cfg, b, 2, h, vd)
  st = dataclasses.replace(st, rounds=jnp.ones((b,), jnp.int32), window=dataclasses.replace(
      st.window, label_ids=jnp.asarray([[[1], [2], [3], [1]]], jnp.int32),
      label_probs=jnp.ones((b, w, 1)), valid=jnp.ones((b, w), bool)))
  base = jnp.asarray(rng.standard_normal((b, w, vd)), jnp.float32)
  hidden = jnp.asarray(rng.standard_normal((b, w, h)), jnp.float32)
  learned = adaptation.update(cfg, st, base, hidden, jnp.arange(vd, dtype=jnp.int32))
  outside = jnp.full((vd,), -1, jnp.int32)  # no label token is draftable: zero gradient
  later = adaptation.update(cfg, dataclasses.replace(learned, rounds=learned.rounds + 1),
                            base, hidden, outside)
  bias0, bias1 = np.abs(np.asarray(learned.params.bias)), np.abs(np.asarray(later.params.bias))
  assert bias0.max() > 0.1 and bias1.sum() < 0.5 * bias0.sum()
  b0, b1 = np.abs(np.asarray(learned.params.b)).sum(), np.abs(np.asarray(later.params.b)).sum()
  assert b0 > 0.1 and b1 < 0.5 * b0
  fresh = adaptation.init_state(cfg, b, 2, h, vd)  # no moments yet: only decay acts
  fresh = dataclasses.replace(fresh, rounds=jnp.ones((b,), jnp.int32), window=dataclasses.replace(
      fresh.window, valid=jnp.ones((b, w), bool)))
  still = adaptation.update(cfg, fresh, base, hidden, outside)
  np.testing.assert_array_equal(np.asarray(still.params.a), np.asarray(fresh.params.a))
  plain = OnlineAdaptation(every=1, steps=20, window=w, rank=2, learning_rate=0.05,
                           label_top_k=1)
  assert jax.tree.structure(plain.optimizer().init(learned.params)) != jax.tree.structure(
      cfg.optimizer().init(learned.params))


def test_tv_loss_is_minus_the_labels_part_of_the_acceptance_rate():
  """``loss="tv"``: each entry's loss is ``-sum_{i in label} min(p_i, q_i)`` (a label
  token outside the draft vocabulary counts for nothing), by hand in NumPy; with a label
  of the whole vocabulary it is minus the first draft's acceptance rate
  ``1 - TV(p, q)``.  Cross-entropy on the same window differs (a wrong loss is caught)."""
  rng = np.random.default_rng(1)
  b, w, h, vd, v = 2, 3, 4, 5, 6
  params = adaptation.init_params(OnlineAdaptation(rank=2), b, h, vd)
  params = dataclasses.replace(params, b=jnp.asarray(rng.standard_normal((b, 2, vd)),
                                                     jnp.float32))
  base = jnp.asarray(rng.standard_normal((b, w, vd)), jnp.float32)
  hidden = jnp.asarray(rng.standard_normal((b, w, h)), jnp.float32)
  to_draft = jnp.asarray([0, 1, 2, 3, 4, -1], jnp.int32)  # target id 5: not draftable
  q = np.asarray(jax.nn.softmax(base + adaptation.logit_delta(params, hidden), -1))
  p = rng.dirichlet(np.ones(v), (b, w)).astype(np.float32)
  ids = np.argsort(-p, -1)[..., :3].astype(np.int32)
  ids[0, 0] = [5, 0, 1]  # one label token outside the draft vocabulary
  probs = np.take_along_axis(p, ids, -1)
  window = adaptation.Window(jnp.zeros((b, w, h)), jnp.asarray(ids), jnp.asarray(probs),
                             jnp.ones((b, w), bool))
  got = adaptation.window_loss(params, base, hidden, window, to_draft, "tv")
  inside = ids < vd
  qi = np.take_along_axis(q, np.minimum(ids, vd - 1), -1)
  want = -np.where(inside, np.minimum(probs, qi), 0.0).sum(-1).mean(-1)
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
  assert not np.allclose(np.asarray(adaptation.window_loss(params, base, hidden, window,
                                                           to_draft, "ce")), want)
  whole = np.broadcast_to(np.arange(vd, dtype=np.int32), (b, w, vd))
  p_draft = p[..., :vd] / p[..., :vd].sum(-1, keepdims=True)
  full = dataclasses.replace(window, label_ids=jnp.asarray(whole),
                             label_probs=jnp.asarray(p_draft))
  got = adaptation.window_loss(params, base, hidden, full, to_draft, "tv")
  acceptance = 1.0 - 0.5 * np.abs(p_draft - q).sum(-1)
  np.testing.assert_allclose(np.asarray(got), -acceptance.mean(-1), rtol=1e-5)


def _gate_case(sampling):
  """A window of 5 entries (the first empty; the last ``fresh = 3`` unseen), frozen and
  adapted draft logits, and the gate's score by hand: the adapted minus the frozen
  first-draft score of each fresh entry, weighted ``(1 - 1/4)^age``, added to the old
  score times ``(3/4)^3``."""
  rng = np.random.default_rng(18)  # greedy gains 0, -1, +1, 0, +1: both signs, some fresh
  b, w, h, vd = 1, 5, 6, 7
  cfg = OnlineAdaptation(every=1, window=w, rank=2, label_top_k=3, gate=4)
  st = adaptation.init_state(cfg, b, 2, h, vd)
  params = dataclasses.replace(st.params, bias=jnp.asarray(
      3 * rng.standard_normal((b, vd)), jnp.float32))
  base = jnp.asarray(rng.standard_normal((b, w, vd)), jnp.float32)
  hidden = jnp.asarray(rng.standard_normal((b, w, h)), jnp.float32)
  p = rng.dirichlet(np.ones(vd + 1), (b, w)).astype(np.float32)  # target id 7: not draftable
  ids = np.argsort(-p, -1)[..., :3].astype(np.int32)
  window = dataclasses.replace(st.window, label_ids=jnp.asarray(ids),
                               label_probs=jnp.asarray(np.take_along_axis(p, ids, -1)),
                               valid=jnp.asarray([[False, True, True, True, True]]))
  st = dataclasses.replace(st, params=params, window=window, fresh=jnp.asarray([3]),
                           gate_score=jnp.asarray([0.25]), rounds=jnp.ones((b,), jnp.int32))
  to_draft = jnp.asarray(list(range(vd)) + [-1], jnp.int32)

  def score(logits):  # [W] by hand
    z = np.asarray(logits[0], np.float64)
    out = []
    for j in range(w):
      lab = [(int(i), float(q)) for i, q in zip(ids[0, j], np.take(p[0, j], ids[0, j]))]
      if sampling.greedy:
        out.append(float(lab[0][0] < vd and np.argmax(z[j]) == lab[0][0]))
      else:
        q = np.exp(z[j] / sampling.temperature)
        q /= q.sum()
        out.append(sum(min(pi, q[i]) for i, pi in lab if i < vd))
    return np.asarray(out)

  adapted = base + adaptation.logit_delta(params, hidden)
  gain = score(adapted) - score(base)
  age = np.arange(w)[::-1]
  want = 0.25 * 0.75 ** 3 + sum(gain[j] * 0.75 ** age[j] for j in (2, 3, 4))
  return cfg, st, base, hidden, to_draft, gain, want


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_the_gate_scores_only_the_entries_no_update_has_seen(temperature):
  """The gate's score against the hand computation (:func:`_gate_case`): fresh entries
  only (scoring the older two as well -- a broken variant that lets the gate see what
  the adapter was trained on -- gives another value: the case is drawn so it does);
  the update then resets ``fresh``, and the row drafts adapted exactly while its score
  is >= 0.  Without a gate the score stays 0."""
  sampling = SamplingConfig(temperature=temperature)
  cfg, st, base, hidden, to_draft, gain, want = _gate_case(sampling)
  got = adaptation.gate_update(cfg, st, base, hidden, to_draft, sampling, jnp.asarray([True]))
  np.testing.assert_allclose(float(got[0]), want, rtol=1e-5)
  leaky = want + gain[1] * 0.75 ** 3
  assert abs(leaky - want) > 1e-3  # the broken variant would be caught
  new = adaptation.update(cfg, st, base, hidden, to_draft, sampling)
  np.testing.assert_allclose(float(new.gate_score[0]), want, rtol=1e-5)
  assert new.fresh.tolist() == [0] and new.updates.tolist() == [1]
  assert new.gate_shut.tolist() == [int(want < 0)]
  for score, opened in ((-1e-6, False), (0.0, True), (0.5, True)):
    gated = dataclasses.replace(st, gate_score=jnp.asarray([score]))
    assert adaptation.drafts_adapted(gated).tolist() == [opened]
  plain = adaptation.update(dataclasses.replace(cfg, gate=0), dataclasses.replace(
      st, gate_score=jnp.zeros((1,))), base, hidden, to_draft, sampling)
  assert plain.gate_score.tolist() == [0.0] and plain.gate_shut.tolist() == [0]


def _setup(kind="eagle3", reduced=True):
  target, tp = eagle_target()
  head, p, d2t = eagle_head(kind, reduced)
  return target, tp, head, EagleDrafter.make_params(p, target, tp, d2t)


PROMPTS = [[1, 2, 3, 4, 5], [7, 8], [3, 3, 3, 9, 10, 11, 12]]


def _chain_q_node(adapt, params, head, gate_score=0.0):
  """The greedy K = 3 chain's drafts and node distributions from a fixed prefix, with
  an adapter whose bias is small (the same argmax as the frozen head's) and whose
  low-rank term is not (``adapt=None``: the frozen head), its gate's score set to
  ``gate_score``."""
  from specjax.models.transformer import Model
  target, tp = eagle_target()
  rng = np.random.default_rng(1)
  seqs = jnp.asarray(rng.integers(0, target.config.vocab_size, (2, 8)), jnp.int32)
  lengths = jnp.array([7, 5])
  layers = head.config.target_layers
  t = Model(target.config.replace(hidden_layers=layers))
  hid = t.apply(tp, seqs, jnp.broadcast_to(jnp.arange(8), (2, 8)), t.init_cache(2, 8)
                ).hidden_states
  drafter = EagleDrafter(3, sampling=GREEDY, head=head, adapt=adapt)
  last = seqs[jnp.arange(2), lengths]

  def run():
    state = drafter.prefill(params, seqs, lengths, 24, hid)
    if adapt is not None:
      p = state.adapter.params
      keys = jax.random.split(jax.random.key(5), 2)
      p = dataclasses.replace(p, bias=1e-3 * jax.random.normal(keys[0], p.bias.shape),
                              b=1e-3 * jax.random.normal(keys[1], p.b.shape))
      state = dataclasses.replace(state, adapter=dataclasses.replace(
          state.adapter, params=p, gate_score=jnp.full((2,), gate_score)))
    return drafter.propose(params, state, None, last, jax.random.split(jax.random.key(0), 2))

  proposal, _ = jax.jit(run)()
  return np.asarray(proposal.tokens), np.asarray(proposal.q_node)


@pytest.mark.slow  # three compiled chains (~10 s): the default suite's budget
def test_depths_limits_the_drafts_the_adapter_changes():
  """``depths=1``: the first draft's distribution is the adapted one (as with every
  depth adapted), the second and third the frozen head's, bit for bit; with every
  depth adapted all three move.  (The adapter is small enough that the drafts
  themselves are the frozen head's, so the chains are comparable row by row.)"""
  target, tp, head, params = _setup()
  base = dict(every=1, window=4, rank=2)
  tok0, q0 = _chain_q_node(None, params, head)
  tok_all, q_all = _chain_q_node(OnlineAdaptation(**base), params, head)
  tok_one, q_one = _chain_q_node(OnlineAdaptation(**base, depths=1), params, head)
  np.testing.assert_array_equal(tok_all, tok0)
  np.testing.assert_array_equal(tok_one, tok0)
  np.testing.assert_array_equal(q_one[:, 0], q_all[:, 0])
  np.testing.assert_array_equal(q_one[:, 1:], q0[:, 1:])
  for j in range(3):
    assert not np.array_equal(q_all[:, j], q0[:, j]), j


@pytest.mark.slow  # three compiled chains and two loops (~20 s)
def test_a_shut_gate_drafts_the_frozen_heads_logits():
  """``gate``: while a row's score is negative every draft of the chain takes the frozen
  head's logits, bit for bit; at 0 the adapted ones (those of the same adapter without a
  gate).  In the loop, greedy output stays the target's with the gate on, and an
  adapter that overshoots (Adam at learning rate 1, eight steps per round) shuts its
  gate at least once."""
  target, tp, head, params = _setup()
  base = dict(every=1, window=4, rank=2)
  _, q0 = _chain_q_node(None, params, head)
  _, q_all = _chain_q_node(OnlineAdaptation(**base), params, head)
  _, q_shut = _chain_q_node(OnlineAdaptation(**base, gate=8), params, head, gate_score=-1.0)
  _, q_open = _chain_q_node(OnlineAdaptation(**base, gate=8), params, head, gate_score=0.0)
  np.testing.assert_array_equal(q_shut, q0)
  np.testing.assert_array_equal(q_open, q_all)
  ref = generate(target, tp, PROMPTS, max_new_tokens=24, eos_token_id=None).to_lists()
  wild = OnlineAdaptation(every=1, steps=8, window=8, rank=4, learning_rate=1.0,
                          label_top_k=4, gate=4)
  out = speculative_generate(target, tp, EagleDrafter(3, sampling=GREEDY, head=head,
                                                      adapt=wild),
                             params, verifiers.get("lossless"), PROMPTS, max_new_tokens=24,
                             eos_token_id=None)
  assert out.to_lists() == ref
  assert int(out.adapter.gate_shut.sum()) > 0, out.adapter.gate_score


# The default suite runs the chain; the EAGLE-2 tree runs in the slow step.
@pytest.mark.parametrize("shape", ["chain", pytest.param("dynamic", marks=pytest.mark.slow)])
def test_greedy_output_is_the_targets_under_adaptation(shape):
  """T = 0: adaptation changes the drafts (the adapters learn: nonzero after the run, and
  the number of target calls differs from the frozen head's), never the output; and
  the window the run ends with holds what :func:`_check_window` says."""
  target, tp, head, params = _setup()
  make = (functools.partial(EagleTreeDrafter, depth=3, top_k=3, total_tokens=8)
          if shape == "dynamic" else functools.partial(EagleDrafter, 3))
  ref = generate(target, tp, PROMPTS, max_new_tokens=20, eos_token_id=None).to_lists()
  runs = {}
  for adapt in (None, FAST):
    drafter = make(sampling=GREEDY, head=head, adapt=adapt)
    runs[adapt] = speculative_generate(target, tp, drafter, params, verifiers.get("lossless"),
                                       PROMPTS, max_new_tokens=20, eos_token_id=None)
    assert runs[adapt].to_lists() == ref
  adapted, frozen = runs[FAST], runs[None]
  assert frozen.adapter is None
  assert float(jnp.abs(adapted.adapter.params.b).max()) > 0
  assert not np.array_equal(np.asarray(adapted.stats.target_calls),
                            np.asarray(frozen.stats.target_calls))
  _check_window(target, tp, head, params, adapted, max_pending=4)


def _check_window(target, tp, head, params, result, max_pending):
  """Each row's window entries are consecutive committed positions ``t``, oldest first,
  ending in the last round but one: their outputs are the head's over the whole row in
  one causal forward (the target's features at ``t`` and token ``t + 1`` after all of
  the row before them, as the drafter saw them), their labels the target's argmax after
  token ``t + 1``.  Outputs agree to 1e-4 of the largest (float32 rounding between the
  drafter's chunked forwards and this one reaches 3e-5 with these peaked weights); the
  head rerun over the window alone (a context truncated to it) differs by 4e-4, so an
  update that did so fails the check."""
  from specjax.models.transformer import Model
  layered = Model(target.config.replace(hidden_layers=head.config.target_layers))
  rows = [p + r for p, r in zip(PROMPTS, result.to_lists())]
  n = max(map(len, rows))  # one causal forward for all rows: the padding comes after

  @jax.jit
  def forward(seq):  # [B, n] -> the head's outputs [B, n - 1, H] (at t), the target's argmax
    pos = jnp.broadcast_to(jnp.arange(n), seq.shape)
    out = layered.apply(tp, seq, pos, layered.init_cache(len(rows), n))
    feats = head.project(params["head"], out.hidden_states[:, :, :-1])
    hid = head.apply(params["head"], params["embed"][seq[:, 1:]], feats, pos[:, :-1],
                     head.init_cache(len(rows), n)).hidden
    return hid, jnp.argmax(out.logits, -1)

  want, top = map(np.asarray, forward(jnp.asarray([r + [0] * (n - len(r)) for r in rows])))
  window = jax.tree.map(np.asarray, result.adapter.window)
  for row, prompt in enumerate(PROMPTS):
    valid = window.valid[row]
    kept = window.hidden[row][valid]
    m, last = len(kept), len(rows[row]) - 1
    gaps = [float(np.abs(want[row, t:t + m] - kept).max()) for t in range(last + 1 - m)]
    t0 = int(np.argmin(gaps))
    scale = float(np.abs(kept).max())
    assert gaps[t0] <= 1e-4 * scale, (row, gaps[t0], scale)
    assert len(prompt) - 1 <= t0 and t0 + m >= last - max_pending - 1
    np.testing.assert_array_equal(window.label_ids[row][valid][:, 0],
                                  top[row, t0 + 1:t0 + 1 + m])


# In the slow step (the default suite's 8-minute budget).
@pytest.mark.slow
def test_a_session_carries_its_adapters():
  """The adapter state a call returns starts the next call (``draft_params["adapter"]``):
  the second call of a session drafts differently from a fresh one, and still emits the
  target's greedy tokens."""
  target, tp, head, params = _setup()
  drafter = EagleDrafter(num_draft=3, sampling=GREEDY, head=head, adapt=FAST)
  lossless = verifiers.get("lossless")
  first = speculative_generate(target, tp, drafter, params, lossless, PROMPTS,
                               max_new_tokens=20, eos_token_id=None)
  turn = [p + [6, 6] for p in PROMPTS]
  ref = generate(target, tp, turn, max_new_tokens=12, eos_token_id=None).to_lists()
  carried = speculative_generate(target, tp, drafter, dict(params, adapter=first.adapter),
                                 lossless, turn, max_new_tokens=12, eos_token_id=None)
  fresh = speculative_generate(target, tp, drafter, params, lossless, turn, max_new_tokens=12,
                               eos_token_id=None)
  assert carried.to_lists() == ref == fresh.to_lists()
  assert not np.array_equal(np.asarray(carried.adapter.params.b),
                            np.asarray(fresh.adapter.params.b))
  assert np.all(np.asarray(carried.adapter.rounds) > np.asarray(fresh.adapter.rounds))  # went on


@pytest.mark.slow
def test_adapting_rows_do_not_depend_on_the_device_count():
  """T = 1, 8 rows: each row adapts on its own entries with its own randomness, so the
  tokens, the number of updates and each row's adapter (to float rounding) are the same
  on one device and on a data mesh of 8; a finished row takes no more updates while the
  batch's other rows run on.  Broken variant caught: updating at the start of the next
  round (a finished row then updates again on one device, not on its own shard)."""
  from specjax.decoding import parallel
  target, tp, head, params = _setup()
  samp = SamplingConfig(temperature=1.0)
  drafter = EagleDrafter(num_draft=3, sampling=samp, head=head, adapt=FAST)
  prompts = [[1 + i, 2, 3 + i % 3, 4] for i in range(8)]
  kw = dict(max_new_tokens=10, sampling=samp, key=jax.random.key(3), eos_token_id=None)
  lossless = verifiers.get("lossless")
  one = speculative_generate(target, tp, drafter, params, lossless, prompts, **kw)
  eight = speculative_generate(target, tp, drafter, params, lossless, prompts,
                               mesh=parallel.make_mesh(8), **kw)
  assert one.to_lists() == eight.to_lists()
  # the same updates, up to float rounding (the head's matmuls over 8 rows or 1 sum in
  # another order): 1e-4 is ~100x the differences seen, far below an update's size
  np.testing.assert_allclose(np.asarray(eight.adapter.params.b),
                             np.asarray(one.adapter.params.b), rtol=1e-3, atol=1e-4)
  assert eight.adapter.updates.tolist() == one.adapter.updates.tolist()
  assert float(jnp.abs(one.adapter.params.b).max()) > 0


def test_bad_adaptation_input_is_refused_before_tracing():
  target, tp, head, params = _setup()
  for kw, match in ((dict(every=0), "every"), (dict(window=1), "window"),
                    (dict(learning_rate=0.0), "learning_rate"), (dict(rank=1000), "rank"),
                    (dict(steps=2.5), "steps"), (dict(loss="kl"), "loss='kl'.*'tv'"),
                    (dict(update_vocab="seen"), "update_vocab='seen'.*'labels'"),
                    (dict(weight_decay=-1.0), "weight_decay"),
                    (dict(weight_decay=40.0), "weight_decay=40.0 with learning_rate"),
                    (dict(gate=-1), "gate"), (dict(gate=1.5), "gate")):
    with pytest.raises((ValueError, TypeError), match=match):
      OnlineAdaptation(**kw)
  with pytest.raises(TypeError, match="adapt"):
    EagleDrafter(num_draft=2, sampling=GREEDY, head=head, adapt={"every": 2})
  frozen = EagleDrafter(num_draft=2, sampling=GREEDY, head=head)
  adapting = EagleDrafter(num_draft=2, sampling=GREEDY, head=head, adapt=FAST)
  lossless = verifiers.get("lossless")
  c = head.config
  wrong = adaptation.init_params(FAST, 2, c.hidden_size, c.draft_vocab_size)  # 2 rows, not 3
  with pytest.raises(ValueError, match=r"adapter.*does not adapt"):
    speculative_generate(target, tp, frozen, dict(params, adapter=wrong), lossless, PROMPTS,
                         max_new_tokens=4)
  with pytest.raises(ValueError, match=r"adapter'\]\.bias has shape \(2, 16\).*\(3, 16\)"):
    speculative_generate(target, tp, adapting, dict(params, adapter=wrong), lossless, PROMPTS,
                         max_new_tokens=4)
  with pytest.raises(ValueError, match="AdapterState"):
    speculative_generate(target, tp, adapting, dict(params, adapter={"bias": 0}), lossless,
                         PROMPTS, max_new_tokens=4)


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["chain", "dynamic"])
def test_sampled_lossless_under_adaptation_reproduces_the_target(shape):
  """Lossless verification at T = 1 with a fast-learning adapter samples the target:
  martingale z-test over every generated token after the first, 1500 rows x 8 tokens,
  V = 32, max |z| < 4.5 (P(false alarm) < 32 * 6.8e-6 per check; see
  tests/decoding/test_speculative.py).  The adapters must have learned (nonzero)."""
  from tests.helpers import martingale_z, teacher_forced_probs
  target, tp, head, params = _setup()
  samp = SamplingConfig(temperature=1.0)
  drafter = (EagleTreeDrafter(depth=3, top_k=3, total_tokens=8, sampling=samp, head=head,
                              adapt=FAST)
             if shape == "dynamic" else EagleDrafter(3, samp, head=head, adapt=FAST))
  prompt = [1, 2, 3, 4, 5]
  res = speculative_generate(target, tp, drafter, params, verifiers.get("lossless"),
                             [prompt] * 1500, max_new_tokens=8, sampling=samp,
                             key=jax.random.key(9), eos_token_id=None)
  assert float(jnp.abs(res.adapter.params.b).max()) > 0
  probs = np.asarray(teacher_forced_probs(target, tp, prompt, res.tokens, samp))
  z = martingale_z(np.asarray(res.tokens)[:, 1:], probs[:, 1:], np.asarray(res.lengths) - 1)
  assert np.abs(z).max() < 4.5, z


def _peeking_run(target, tp, drafter, params, prompt, rows, new_tokens, samp, key):
  """BROKEN on purpose: each round is run twice from the same state (the same keys and
  uniforms); between the two, each row's adapter is pushed hard towards the token the
  first run emitted -- the adapter sees the round's own target sample before the
  round's verification.  Returns (tokens [rows, new_tokens], lengths)."""
  from specjax.decoding import speculative as spec
  from specjax.decoding.autoregressive import RUNNING
  from specjax.decoding.prompts import prepare_prompts
  tokens, lengths = prepare_prompts([prompt] * rows, target.config.vocab_size)
  cache = tokens.shape[1] + new_tokens + drafter.tokens_per_step + 1
  loop = spec.make_loop(target, drafter, None, new_tokens, (), cache)
  inputs, state = spec.jit_init(loop, drafter, verifiers.get("lossless"), samp, tp, params,
                                None, jnp.asarray(tokens), jnp.asarray(lengths), key,
                                jnp.arange(rows, dtype=jnp.int32))
  step = jax.jit(spec.speculative_step, static_argnums=0)  # no donation: run twice
  c = drafter.head.config
  to_draft = adaptation.target_to_draft(c.draft_vocab_size, c.vocab_size, params.get("d2t"))

  @jax.jit
  def peek(state, tried):
    y = jnp.take_along_axis(tried.tokens, state.num_tokens[:, None], 1)[:, 0]
    d = to_draft[y]
    a = state.drafter.adapter
    bias = a.params.bias.at[jnp.arange(rows), jnp.maximum(d, 0)].add(
        jnp.where(d >= 0, 20.0, 0.0))
    return dataclasses.replace(state, drafter=dataclasses.replace(
        state.drafter, adapter=dataclasses.replace(
            a, params=dataclasses.replace(a.params, bias=bias))))

  while np.any(np.asarray(state.finish_reason) == RUNNING):
    tried, _ = step(loop, inputs, state)
    state, _ = step(loop, inputs, peek(state, tried))
  return state.tokens[:, :new_tokens], state.num_tokens


@pytest.mark.slow
def test_an_adapter_that_sees_the_rounds_own_sample_is_caught():
  """The broken variant of the lossless test above (the same z-test, 1500 rows x 8
  tokens, threshold 4.5): an adapter updated with the round's own target sample before
  the round is verified shares the round's uniform with the acceptance test, and the
  output is no longer the target's (with two tokens, p = (1/2, 1/2) and a deterministic
  first draft, it would always emit the first token).  The z-test must reject it."""
  from tests.helpers import martingale_z, teacher_forced_probs
  target, tp, head, params = _setup()
  samp = SamplingConfig(temperature=1.0)
  drafter = EagleDrafter(num_draft=3, sampling=samp, head=head, adapt=FAST)
  prompt = [1, 2, 3, 4, 5]
  toks, lens = _peeking_run(target, tp, drafter, params, prompt, 1500, 8, samp,
                            jax.random.key(9))
  probs = np.asarray(teacher_forced_probs(target, tp, prompt, toks, samp))
  z = martingale_z(np.asarray(toks)[:, 1:], probs[:, 1:], np.asarray(lens) - 1)
  assert np.abs(z).max() > 4.5, z
