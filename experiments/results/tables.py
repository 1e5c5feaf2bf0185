"""The tables of ``docs/results.md`` and ``benchmarks/RESULTS.md``, each computed from
committed records only (no model; JAX is imported only to bin the SV calibration
records, :mod:`experiments.results.sv_companion_tables`): :data:`TABLES` maps a table's name (the
``<!-- table:NAME -->`` marker in the docs, :mod:`experiments.render_results`) to the
function that writes it.

The functions, and the records each one reads, are in the modules beside this one, one
topic each: :mod:`~experiments.results.humaneval_tables`,
:mod:`~experiments.results.notebook_tables`, :mod:`~experiments.results.sv_tables`,
:mod:`~experiments.results.speed_tables`, :mod:`~experiments.results.drafter_data_tables`,
:mod:`~experiments.results.acceptance_tables`,
:mod:`~experiments.results.shipped_drafter_tables`, and the modules whose own ``TABLES``
are merged in below. :mod:`experiments.results.records` loads the records; the raw text
outputs ``benchmarks/results/{generate_vs_hf,forward_cost}_smollm2.txt`` are printed as
their markdown table lines (:func:`~experiments.results.records.text_table`).
"""

from __future__ import annotations

import functools

from experiments.results import (ab_tables, acceptance_tables, adaptation_tables,
                                 compare_tables, drafter_data_tables, humaneval_tables,
                                 notebook_tables, prompt_set_tables,
                                 propositions_tables, rule_tables, shipped_drafter_tables,
                                 speed_profile_tables, speed_tables, sv_companion_tables,
                                 sv_tables, sweep_tables)
from experiments.results.markdown import RESULTS
from experiments.results.records import text_table
# Called as ``tables.<name>`` by tests on hand-made records; defined in their topic modules.
from experiments.results.acceptance_tables import candidate_table  # noqa: F401
from experiments.results.drafter_data_tables import (  # noqa: F401
    drafter_data_continued_shipped_table, drafter_data_continued_table)
from experiments.results.speed_tables import benchmark_table  # noqa: F401

TABLES = {
    "claims_notebooks": notebook_tables.claims_notebooks,
    "claims_humaneval": humaneval_tables.claims_humaneval,
    "claims_sv": sv_tables.claims_sv,
    "claims_speed": speed_tables.claims_speed,
    "generate_vs_hf_smollm2": text_table(f"{RESULTS}/generate_vs_hf_smollm2.txt"),
    "forward_cost_smollm2": text_table(f"{RESULTS}/forward_cost_smollm2.txt"),
    "humaneval_t0": functools.partial(humaneval_tables.humaneval_table, "t0"),
    "humaneval_t07": functools.partial(humaneval_tables.humaneval_table, "t07"),
    "humaneval_t1": functools.partial(humaneval_tables.humaneval_table, "t1"),
    "sv_smollm2": sv_tables.sv_table,
    "sv_information_bias": sv_tables.sv_information_bias,
    "sv_run_smollm2": sv_tables.sv_run_table,
    "sv_large_batch_smollm2": sv_tables.sv_large_batch_table,
    "batch_sweep_smollm2": speed_tables.batch_sweep_table,
    "tree_shapes_smollm2": speed_tables.tree_shapes_table,
    "small_models_drafters": speed_tables.small_models_table,
    "drafters_smollm2": shipped_drafter_tables.drafters_table,
    "layer_stack": speed_tables.layer_stack_table,
    "attention_chunk": speed_tables.attention_chunk_table,
    "main_job_smollm2": speed_tables.main_job_table,
    "main_job_adaptive_usage": speed_tables.adaptive_usage_table,
    "main_job_sets_smollm2": functools.partial(speed_tables.benchmark_table,
                                               prompt_set_tables.SETS_RECORD),
    "main_job_sets_per_set": prompt_set_tables.per_set_table,
    "main_job_sets_adaptive_usage": functools.partial(speed_tables.adaptive_usage_table,
                                                      prompt_set_tables.SETS_RECORD),
    "speed_smollm2": functools.partial(speed_tables.benchmark_table, speed_tables.SPEED_RECORD),
    "speed_smollm2_decode": functools.partial(speed_tables.benchmark_table,
                                              speed_tables.SPEED_RECORD_DECODE),
    "speed_smollm2_onpolicy_head": functools.partial(speed_tables.benchmark_table,
                                                     speed_tables.SPEED_RECORD_ONPOLICY_HEAD),
    "speed_smollm2_256": functools.partial(speed_tables.benchmark_table,
                                           speed_tables.SPEED_RECORD_256),
    "drafter_data_training": drafter_data_tables.drafter_data_training_table,
    "drafter_data_heldout": drafter_data_tables.drafter_data_heldout_table,
    "drafter_data_tau": drafter_data_tables.drafter_data_tau_table,
    "drafter_data_continued": drafter_data_tables.drafter_data_continued_table,
    "drafter_data_continued_shipped": drafter_data_tables.drafter_data_continued_shipped_table,
    "drafter_data_replication": drafter_data_tables.drafter_data_replication_table,
    "acceptance_smollm2": acceptance_tables.acceptance_table,
    "draft_continued_smollm2": acceptance_tables.candidate_table,
}
# The verification-rule comparisons (block, traversal, tree children, MARS + block).
TABLES.update(rule_tables.TABLES)
# The MARS threshold and draft-length sweeps.
TABLES.update(sweep_tables.TABLES)
# The verifier comparison on SmolLM2 (every rule against its matched baseline).
TABLES.update(compare_tables.TABLES)
# The propositions and MARS margins on SmolLM2 that the notebooks do not cover.
TABLES.update(propositions_tables.TABLES)
# The SV companions' information about acceptance, per early-exit depth.
TABLES.update(sv_companion_tables.TABLES)
# Before / after timings of one code change in one process.
TABLES.update(ab_tables.TABLES)
# The EAGLE-3 head frozen and adapting online over multi-turn sessions.
TABLES.update(adaptation_tables.TABLES)
# The forward cost curve and one speculative round's parts, in target decode steps.
TABLES.update(speed_profile_tables.TABLES)
# Under each table that reads stamped records: their provenance, exploratory or not.
from experiments.results import provenance_notes  # noqa: E402 (applied to the finished mapping)

TABLES = provenance_notes.with_provenance(TABLES)
