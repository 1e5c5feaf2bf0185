"""The papers' quality claims that our HumanEval comparisons are read against.

Two kinds:

* :class:`GapClaim` -- Revisiting Lossy Verification (Wang, Zhou et al. 2026), Tables 2
  (plain SD, Qwen2.5-72B / 0.5B, gamma 10) and 3 (EAGLE-3, Llama-3.1-8B, block 7), both
  at T = 0.7: a truncation rule's accuracy minus its matched baseline's (typical
  acceptance vs eta sampling + SD, SpecCascade vs min-p sampling + SD) on MATH, MBPP+,
  INCLUDE and BFCL. The gap is taken as a RELATIVE loss (mean gap / mean baseline
  accuracy) and put on our scale by multiplying with our baseline's pass@1: the papers'
  baselines are at ~65-77% accuracy, our 135M target at a few per cent, so absolute
  points cannot be compared.
* :class:`NoLossClaim` -- a rule that keeps quality (MARS, Song et al. 2026: vanilla SPD
  Qwen3-0.6B -> 32B GSM8K accuracy 0.901 kept, CNN/DM ROUGE-L gap ~0.0008) or is exactly
  lossless. A no-effect claim is read with an equivalence margin: a loss below
  ``margin_rel`` of the reference's pass@1 counts as none.
"""

from __future__ import annotations

import dataclasses

BENCHMARKS = ("MATH", "MBPP+", "INCLUDE", "BFCL")


@dataclasses.dataclass(frozen=True)
class GapClaim:
  """A paper's accuracy gap of a lossy rule to its matched baseline.

  Attributes:
    rule: our rule name (``typical``, ``spec_cascade``).
    setting: ``sd`` (plain speculative decoding, our draft-LM chain) or ``eagle3``
      (EAGLE-3 drafts, our EAGLE-3 chain and tree).
    source: the paper and table.
    rule_acc, baseline_acc: accuracy (%) per benchmark of :data:`BENCHMARKS`.
  """

  rule: str
  setting: str
  source: str
  rule_acc: tuple[float, ...]
  baseline_acc: tuple[float, ...]

  @property
  def gap_points(self) -> float:
    """Mean over benchmarks of rule - baseline accuracy, in points."""
    return sum(r - b for r, b in zip(self.rule_acc, self.baseline_acc)) / len(self.rule_acc)

  @property
  def relative(self) -> float:
    """The gap relative to the mean baseline accuracy (e.g. -0.097: a 9.7% loss)."""
    return self.gap_points / (sum(self.baseline_acc) / len(self.baseline_acc))

  def on_our_scale(self, our_reference: float) -> float:
    """The loss proportional to the paper's at our baseline's pass@1."""
    return self.relative * our_reference

  def describe(self) -> str:
    return f"{self.gap_points:+.1f} points ({100 * self.relative:+.1f}% relative; {self.source})"


@dataclasses.dataclass(frozen=True)
class NoLossClaim:
  """A claim of no quality change, read with a relative equivalence margin."""

  source: str
  margin_rel: float = 0.1

  def margin(self, our_reference: float) -> float:
    """The largest change that still counts as none: ``margin_rel`` x our reference."""
    return self.margin_rel * our_reference

  def describe(self) -> str:
    return f"no loss ({self.source}; margin {100 * self.margin_rel:.0f}% of the reference)"


_T2, _T3 = "Wang, Zhou et al. 2026, Table 2", "Wang, Zhou et al. 2026, Table 3"
GAP_CLAIMS = {
    ("typical", "sd"): GapClaim("typical", "sd", _T2, (75.55, 75.80, 66.79, 88.93),
                                (76.14, 75.85, 68.18, 88.17)),
    ("typical", "eagle3"): GapClaim("typical", "eagle3", _T3, (69.84, 56.88, 27.91, 81.40),
                                    (76.12, 62.17, 36.73, 86.30)),
    ("spec_cascade", "sd"): GapClaim("spec_cascade", "sd", _T2, (75.63, 75.88, 66.82, 88.30),
                                     (76.51, 75.87, 67.79, 87.97)),
    ("spec_cascade", "eagle3"): GapClaim("spec_cascade", "eagle3", _T3,
                                         (76.16, 60.74, 33.27, 85.40),
                                         (76.88, 61.80, 37.00, 86.60)),
}
NO_LOSS_CLAIMS = {
    "mars": NoLossClaim("Song et al. 2026: GSM8K accuracy kept, ROUGE-L gap ~0.0008"),
    "lossless": NoLossClaim("lossless verification samples the target's law exactly"),
}


def setting_of(drafter: str) -> str:
  """``sd`` for the draft-LM chain, ``eagle3`` for the EAGLE-3 chain and tree."""
  return "sd" if drafter == "draft_chain" else "eagle3"


def claim_for(method: str) -> GapClaim | NoLossClaim | None:
  """The claim a HumanEval method (``<drafter>:<rule>[:...]``) is read against, or None
  (target-only, matched baselines, rules no paper makes a quality claim for)."""
  parts = method.split(":")
  if len(parts) < 2 or parts[0] in ("baseline", "target"):
    return None
  drafter, rule = parts[0], parts[1]
  return GAP_CLAIMS.get((rule, setting_of(drafter))) or NO_LOSS_CLAIMS.get(rule)


def contrast_on_our_scale(rule: str, our_reference: float) -> float | None:
  """The paper's (EAGLE-3 gap - plain-SD gap) as relative losses at our reference
  pass@1 (Tables 2/3: the rule costs more under EAGLE-3), or None without both."""
  sd, e3 = GAP_CLAIMS.get((rule, "sd")), GAP_CLAIMS.get((rule, "eagle3"))
  if sd is None or e3 is None:
    return None
  return (e3.relative - sd.relative) * our_reference


# MARS (Song et al. 2026), Fig. 1d: EAGLE-3 drafts at positions with r > 0.9 rejected by
# strict verification (rejected, drafts).
MARS_FIG1D = (2590, 4838)
# MARS Table 1 (T = 1, K = 7, EAGLE-3 drafts, mean over benchmarks): tau EAGLE-3 -> MARS
# for Vicuna-13B, LLaMA-3.1-8B, LLaMA-3.x-70B, Qwen3-8B, Qwen3-32B, Qwen3-235B-A22B.
MARS_TABLE1_TAU = ((5.64, 7.20), (4.82, 6.61), (5.66, 6.39), (4.41, 5.22), (4.21, 5.23),
                   (4.14, 5.14))


def _mars_gains() -> list[float]:
  return [m / e - 1 for e, m in MARS_TABLE1_TAU]


def mars_tau_gain_range() -> tuple[float, float]:
  """Smallest and largest relative tau gain of MARS over EAGLE-3 in Table 1."""
  g = _mars_gains()
  return min(g), max(g)


def mars_tau_gain_mean() -> float:
  """Mean relative tau gain of MARS over EAGLE-3 in Table 1."""
  g = _mars_gains()
  return sum(g) / len(g)


# Block verification (Sun et al., "Block Verification Accelerates Speculative Decoding",
# ICLR 2025): block efficiency (tokens per target call) over token-level verification of
# the same drafts, +7% to +10% across their models and draft lengths.
BLOCK_GAIN_RANGE = (0.07, 0.10)


def block_gain_mean() -> float:
  """The middle of the reported block-over-token-level tau gain."""
  lo, hi = BLOCK_GAIN_RANGE
  return (lo + hi) / 2


# Traversal verification (Weng et al., "Traversal Verification for Speculative Tree
# Decoding", NeurIPS 2025): acceptance length over token-level verification of the same
# trees, +2.2% to +5.7% across their tree structures and tasks.
TRAVERSAL_GAIN_RANGE = (0.022, 0.057)


def traversal_gain_mean() -> float:
  """The middle of the reported traversal-over-token-level acceptance-length gain."""
  lo, hi = TRAVERSAL_GAIN_RANGE
  return (lo + hi) / 2
