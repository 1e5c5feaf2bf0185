"""benchmarks.round_cost's bookkeeping (no timing): the ``--rows`` parser and the
verify lengths a batch-1 run's rounds used; the decode-phase split of the row
evaluation (prefill taken off both sides)."""

import numpy as np
import pytest
from absl import app

from benchmarks.round_cost import parse_rows, verify_lengths
from experiments.compare.evaluation import _minus_prefill


class _Chain:
  tree, num_draft, tokens_per_step = False, 4, 5

  def __init__(self, buckets):
    self.verify_buckets = buckets


class _Tree:
  tree, num_draft, tokens_per_step, verify_buckets = True, 4, 25, None


def test_parse_rows():
  assert parse_rows(["eagle3_chain:mars", "suffix_tree:24:lossless"]) == [
      ("eagle3_chain", "mars"), ("suffix_tree:24", "lossless")]
  with pytest.raises(app.UsageError, match="'eagle3_chain:typical'"):
    parse_rows(["eagle3_chain:typical"])
  with pytest.raises(app.UsageError, match="not one of"):
    parse_rows(["nonsense:lossless"])


def test_verify_lengths_follow_the_buckets():
  """gamma counts [1, K+1]: rounds that offered gamma = 0..K drafts.  Broken variant
  caught: counting gamma + 1 instead of bucket(gamma) + 1."""
  counts = np.array([[3, 1, 0, 2, 4]])  # gamma 0 x3, 1 x1, 3 x2, 4 x4
  assert verify_lengths(_Chain((0, 4)), counts) == {1: 3, 5: 7}
  assert verify_lengths(_Chain((0, 2, 4)), counts) == {1: 3, 3: 1, 5: 6}
  assert verify_lengths(_Chain(None), np.array([[0, 0, 0, 0, 10]])) == {5: 10}
  assert verify_lengths(_Tree(), np.array([[0] * 24 + [7]])) == {25: 7}


def test_minus_prefill_takes_each_batch_prefill_off():
  timing = [[(10, 2.0), (10, 3.0)], [(10, 2.5), (10, 3.5)]]  # [repeat][batch]
  prefill = [[0.5, 1.0], [0.4, 1.1]]
  assert _minus_prefill(timing, prefill) == [[(10, 1.5), (10, 2.0)], [(10, 2.1), (10, 2.4)]]
