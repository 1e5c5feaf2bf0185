"""The run spec the HumanEval binaries share (``experiments/humaneval_eval.py``,
``experiments/humaneval_screen.py``): how problems are prompted and checked and which
decoding methods run (experiments/common/knobs.py; the shared model, drafter-shape,
sampling and output specs are in experiments/common/specs.py)."""

from __future__ import annotations

import dataclasses

from experiments.common.knobs import KnobError, check_int, knob
from experiments.humaneval import methods as humaneval_methods

STYLES = ("chat", "completion")


@dataclasses.dataclass(frozen=True)
class HumanEvalSpec:
  """A HumanEval run: the prompt style, the decoding methods compared with the target,
  the decoding rounds, the problems, the sandbox limit, and whether anything runs."""
  style: str = knob("chat", "prompt style (specjax.data.humaneval): chat (one user message) "
                    "or completion (the raw prompt, the program cut at the Codex stop "
                    "sequences)", choices=STYLES)
  methods: tuple[str, ...] = knob(
      help="decoding methods compared with the target: target, <drafter>:<rule>[:hp=v...], "
      "baseline:<drafter>:<rule>[...]; drafter in "
      f"{', '.join(humaneval_methods.HUMANEVAL_DRAFTERS)} (experiments/humaneval/methods.py; "
      "the target always runs)", preset=True)
  matched_baselines: bool = knob(True, "add every truncation rule's matched baseline (T > 0)")
  round_tokens: int = knob(0, "0: one decoding call per block of rows; N > 0: rounds of N "
                           "tokens, rows finished (EOS, cap, or with --style=completion past "
                           "a stop sequence) dropped after each round, each round re-prefilled "
                           "(experiments.humaneval.methods.run_method)")
  limit: int = knob(164, "first N problems")
  timeout_s: float = knob(10.0, "sandbox wall-clock limit per program (seconds)")
  summarize_only: bool = knob(False, "run nothing: summarize the finished records of these "
                              "settings in --output_dir (e.g. a run stopped part-way)")

  def __post_init__(self):
    check_int(self, "round_tokens", 0)
    check_int(self, "limit", 1)
    if not self.timeout_s > 0:
      raise KnobError("timeout_s", self.timeout_s, "must be a number > 0")

  def parse_methods(self, temperatures, chain, eagle_tree) -> list:
    """The :class:`~experiments.humaneval.methods.Method` list of ``methods`` at these
    temperatures, with the drafter shapes of ``chain`` (ChainSpec) and ``eagle_tree``
    (EagleTreeSpec); a bad entry is a :class:`KnobError` naming ``--methods``."""
    try:
      return humaneval_methods.parse_methods(
          self.methods, list(temperatures), matched_baselines=self.matched_baselines,
          k=chain.k, eagle_depth=eagle_tree.eagle_depth, eagle_top_k=eagle_tree.eagle_top_k,
          eagle_total_tokens=eagle_tree.eagle_total_tokens)
    except (ValueError, TypeError) as e:
      raise KnobError("methods", self.methods, str(e)) from None
