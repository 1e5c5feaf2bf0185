"""Backward-compatible names: the sampling configuration, logits processors and
sampling helpers live in :mod:`specjax.distributions` (the ground floor shared
by verifiers, decoding and analysis).  Import them from there; this module
only re-exports them for existing user code.
"""

from specjax.distributions import (NEG_INF, SamplingConfig, entropy_nats, eta_filter,
                                   min_p_filter, probs_from_logits, process_logits,
                                   sample_from_probs, sample_logits, top_k_filter,
                                   top_p_filter)

__all__ = ["NEG_INF", "SamplingConfig", "entropy_nats", "eta_filter", "min_p_filter",
           "probs_from_logits", "process_logits", "sample_from_probs", "sample_logits",
           "top_k_filter", "top_p_filter"]
