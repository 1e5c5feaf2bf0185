r"""Compare every registered verification rule on one set of models and prompts.

  python -m experiments.compare_verifiers --config=experiments/configs/compare.py
  python -m experiments.compare_verifiers --config=experiments/configs/compare.py \
      --config.models=tiny --config.workdir=/tmp/cmp_tiny          # smoke test
  python -m experiments.compare_verifiers --config=experiments/configs/compare.py \
      --config.data.num_prompts=32 --config.data.max_new_tokens=128 --config.timing.repeats=5
  python -m experiments.compare_verifiers --config=experiments/configs/compare.py:smollm2
      # SmolLM2-135M-Instruct, shipped draft LM + EAGLE-3 head, chat prompts, batch 1

One table row per (method, drafter, temperature):

* methods: ``target`` (target-only ``generate()``, the reference), every rule
  in ``config.rules`` (default: every registered rule, lossy ones at the
  hyperparameters of ``configs/compare.py``), and the matched truncation
  baselines ``baseline:<rule>`` (the rule's truncation as a logits processor +
  lossless verification; T > 0 only -- at T = 0 they equal lossless);
* drafters: ``chain`` (:class:`LMDrafter`, K sampled drafts, q = the draft
  LM's distribution), ``tree`` (:class:`LMTreeDrafter`, a static top-k tree,
  q = one-hot), and ``eagle_chain`` / ``eagle_tree`` (EAGLE head, EAGLE-2
  dynamic tree: ``eagle_depth`` / ``eagle_top_k`` / ``eagle_total_tokens``)
  when ``config.eagle_dir`` names a head (``eagle3`` / ``eagle1``: the one
  shipped for ``config.models``, or a directory; both EAGLE drafters unless
  ``config.drafters`` lists one);
* policies: every verify-length policy of ``config.policies`` (default ``"none"``;
  e.g. ``--config.policies="none, adaedl"``, AdaEDL early draft stopping) on the
  chain drafters it serves, a row per (rule, policy): ``lossless+adaedl``;
* columns: tau (tokens per target call), speedup over ``generate()``,
  relaxed-acceptance rate, and the quality metrics of
  :mod:`experiments.compare.quality` (target log-likelihood per token, parse
  fraction -- code prompts only --, agreement with target greedy at T = 0,
  first-speculative-token KL / TV to the matched baseline at T > 0), each mean
  over prompts with its 95% bootstrap interval over prompts in brackets
  (:mod:`experiments.common.row_stats`); a rule a drafter cannot serve (CoS without
  the drafter's node distribution) is a row whose ``note`` says why.

**Speedup protocol.**  Both programs are compiled first (a warm-up call each,
excluded; the compile time is recorded).  Then ``timing.repeats`` times, on
the same batch of prompts and the same PRNG key (one per repeat):
``generate()`` then ``speculative_generate()``, each timed to
``block_until_ready``.  Speedup = median over repeats of the paired
throughput ratio (generated tokens / second, speculative over target-only);
pairing and the median make it robust to load drifting on a shared machine.
All repeats' outputs feed the quality metrics (at T > 0 each repeat is a new
sample).  Rows of the batch run together (``data.batch_size``).

First-token divergence (speculative rows at T > 0, ``kl.*``): the exact law of
the first speculative token at ``kl.num_prompts x kl.contexts`` of the loop's
own contexts (:mod:`experiments.propositions.first_step_law`), its KL and TV to the rule's
matched baseline averaged over the contexts; 0 for lossless and for the
matched-baseline rows, which is checked, not assumed.

Models: ``models="default"`` (the embedded target + draft), ``"tiny"`` (random
tiny models on the real tokenizer and prompts; smoke tests), ``"stand_in"``
(the real draft and a random target of the default target's architecture:
validates a full-size run and fills the persistent compile cache,
``compile_cache_dir``, before the trained target exists) or a real model
(``"smollm2-135m-instruct"``, a ``.gguf`` file or an HF directory) with the
drafters shipped for it (``draft``, ``eagle_dir``) and held-out ShareGPT /
HumanEval chat prompts (``data.prompt_sets``) -- one context builder,
:func:`experiments.common.run_context.load_context`, shared with
``experiments/benchmark.py``.

Code: rows in :mod:`experiments.common.rows`, evaluation in :mod:`experiments.compare.evaluation`,
tables and figures in :mod:`experiments.common.reports`; this binary is flags -> one
call -> report.

Results: ``<workdir>/<name>.jsonl`` (one record per row, via
:mod:`experiments.common.sweep`: rerunning resumes, finished rows are skipped; the
key includes a hash of the run settings, so changed settings never reuse stale
rows), ``<name>.md`` (markdown table) and ``<figures_dir or workdir>/<name>.png``
(tau / speedup vs quality; the smollm2 variants write
``docs/figures/<name>_smollm2.png`` themselves).
"""

from __future__ import annotations

from experiments.compare import evaluation
from experiments.common import rows


def run(c) -> dict:
  """Every rule of ``c.rules`` x drafter x temperature: JSONL, table and figure."""
  return evaluation.run_and_report(c, rows.default_rows(c), "verifiers")


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_config_binary(run, "comparison config file.", default="experiments/configs/compare.py")
