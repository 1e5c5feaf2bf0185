"""Matched baselines for lossy rules (Revisiting Lossy Verification, Wang et al. 2026).

A truncation rule must be compared against the *same truncation applied to
the target as a logits processor*, followed by lossless verification -- the
output of that baseline is exactly ``p_A`` -- not against plain sampling:

* SpecCascade(p_base)      -> min-p processor with ``min_p = p_base`` + lossless;
* Typical(eps, delta)      -> eta processor with ``eta = eps`` + lossless.  Only
  exact for ``delta = sqrt(eps)``: the eta processor (HF ``EtaLogitsWarper``,
  ``distributions.eta_filter``) hard-codes ``sqrt(eps)``; any other delta raises;
* MARS                     -> the matched baseline of its base rule;
* every other rule         -> the unchanged sampling config + lossless.
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

from specjax.distributions import SamplingConfig
from specjax.verifiers.base import NodeRule
from specjax.verifiers.lossless import Lossless
from specjax.verifiers.mars import Mars
from specjax.verifiers.truncation import SpecCascade, Typical


class MatchedBaseline(NamedTuple):
  """``(sampling, verifier)``: run the target with ``sampling``'s processors and verify
  losslessly; the output distribution is the truncated target ``p_A``."""

  sampling: SamplingConfig
  verifier: NodeRule


def matched_baseline(rule: NodeRule, sampling: SamplingConfig | None = None) -> MatchedBaseline:
  """The matched baseline of ``rule`` (see module docstring).

  Args:
    rule: a verification rule.
    sampling: the sampling config the rule is run with (its processors produce
      the ``p`` the rule sees); default ``SamplingConfig()``.  The baseline adds
      the rule's truncation as the last processor, so it must not already use
      that processor (nor, for min-p, the eta processor that HF applies after it).

  Returns:
    ``MatchedBaseline(sampling, Lossless())``.

  Raises:
    ValueError: for Typical with ``delta != sqrt(eps)``, or a ``sampling``
      whose processors make the composition inexact.
  """
  cfg = SamplingConfig() if sampling is None else sampling
  if isinstance(rule, Mars):
    return matched_baseline(rule.base_rule, cfg)
  if isinstance(rule, SpecCascade):
    if cfg.min_p != 0.0 or cfg.eta != 0.0:
      raise ValueError(f"matched baseline of {rule}: sampling already sets min_p={cfg.min_p!r} / "
                       f"eta={cfg.eta!r}; both must be 0 (min-p is applied before eta)")
    return MatchedBaseline(dataclasses.replace(cfg, min_p=float(rule.p_base)), Lossless())
  if isinstance(rule, Typical):
    if not math.isclose(rule.delta_eff, math.sqrt(rule.eps), rel_tol=1e-9, abs_tol=0.0):
      raise ValueError(f"matched baseline of {rule}: delta={rule.delta!r} has no eta-processor "
                       f"equivalent; the eta processor uses delta = sqrt(eps) = "
                       f"{math.sqrt(rule.eps)!r} (use delta=None)")
    if cfg.eta != 0.0:
      raise ValueError(f"matched baseline of {rule}: sampling already sets eta={cfg.eta!r}; "
                       f"it must be 0")
    return MatchedBaseline(dataclasses.replace(cfg, eta=float(rule.eps)), Lossless())
  return MatchedBaseline(cfg, Lossless())
