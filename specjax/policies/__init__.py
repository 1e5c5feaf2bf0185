"""Verify-length policies (docs/spec.md §5): how many drafts each row verifies.

``FixedLength`` (all K, the default), ``ConstantGamma``, Speculative
Verification (``SpeculativeVerification``: companion signals, calibrated
acceptance table, goodput search), AdaEDL (``AdaEDL``: entropy-based early
draft stopping) and the cost-aware length (``CostAwareLength``: drafts worth
their measured cost, from a calibrated :mod:`~specjax.policies.acceptance`
table).  See ``base.py`` for the protocol.
"""

from specjax.policies.adaedl import (AdaEDL, AdaEDLParams, AdaEDLState, acceptance_bound,
                                     draft_entropy, stop_lengths, update_threshold)
from specjax.decoding.buckets import bucket_index, check_buckets, default_buckets, round_up
from specjax.policies.base import ConstantGamma, FixedLength, VerifyPolicy
from specjax.policies.cost_aware import CostAwareLength, CostAwareParams
from specjax.policies.calibration import (CalibrationTable, FittedTable, fit_table,
                                          fixed_edges, information_report, load_table,
                                          quantile_edges, save_table, triple_id)
from specjax.policies.latency import (LatencyProfile, load_profile, measure_profile,
                                      save_profile)
from specjax.policies.sv import (SpeculativeVerification, choose_batch_max, choose_batch_total,
                                 choose_row, climb_until_decrease, companion_signals,
                                 expected_accepted, goodput, hill_climb, load_sv_params,
                                 uninformative_table)

__all__ = ["CostAwareLength", "CostAwareParams", "AdaEDL", "AdaEDLParams", "AdaEDLState", "acceptance_bound", "draft_entropy",
           "stop_lengths", "update_threshold", "ConstantGamma", "FixedLength", "VerifyPolicy",
           "bucket_index", "check_buckets", "default_buckets", "round_up",
           "CalibrationTable", "FittedTable", "fit_table", "fixed_edges", "information_report",
           "load_table", "quantile_edges", "save_table", "triple_id", "LatencyProfile",
           "load_profile", "measure_profile", "save_profile", "SpeculativeVerification",
           "choose_batch_max", "choose_batch_total", "choose_row", "climb_until_decrease",
           "companion_signals", "expected_accepted", "goodput", "hill_climb", "load_sv_params",
           "uninformative_table"]
