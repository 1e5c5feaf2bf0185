r"""Screen-then-sample HumanEval: a quality comparison that can resolve an effect on
a weak target.

A 135M target passes few HumanEval problems, and on most problems it either never or
always passes; those problems carry no information about a change of quality (both
methods score 0, or both 1) but still dilute a mean over all problems. The design
spends the samples where the answer is uncertain (the statistics and the stages are
:mod:`experiments.humaneval.screen`; this binary is their flags):

1. **Screening** (``--stage=screen``): ``--screen_samples`` (~10) target-only samples
   per problem at temperature ``--temperature`` (1 by default). A problem is *selected*
   when its pass count ``c`` satisfies ``0 < c < n``
   (:func:`experiments.humaneval.screen.select_problems`).
2. **Paired stage** (``--stage=paired``, after the screening): on the selected problems
   only, ``--paired_samples`` (>= 20) FRESH samples per problem for the target and for
   every ``--methods`` entry (syntax of :mod:`experiments.humaneval.methods`), sample
   indices ``[n_screen, n_screen + n_paired)`` -- the screening samples are never
   reused, since they are exactly what the selection conditioned on (reusing the
   target's would inflate its pass rate on rarely solved problems and bias the
   difference; tests/experiments/test_humaneval_screen.py shows the bias).

Keys. Sample ``s`` of problem ``i`` draws from the PRNG stream
``row_key(fold_in(key(seed), i), s)``
(:func:`~experiments.humaneval.screen.problem_key`: one ``generate()`` /
``speculative_generate()`` call holds consecutive samples of ONE problem, row ``r``
being sample ``start + r``), so the key of (problem, sample) is the same for every
method, in both stages, whichever problems are selected and however the calls are
batched -- target and rule are paired sample by sample.

Rounds. Both stages decode each block of samples in one call by default
(``--round_tokens=0``, ``--paired_round_tokens=0``), which keeps target and method on
the same key for every token. ``--round_tokens=N`` instead decodes in rounds of N
tokens and drops the rows already past a stop sequence, at EOS or at the cap
(:func:`experiments.humaneval.methods.run_method`: the law of every sample is
unchanged; the keys of later rounds follow the unfinished rows); each round
re-prefills the prompt and the tokens so far, which on a 2-core CPU costs more than
the wasted tokens it saves (measured: ~38 s per problem of 10 x 512-token chat
answers in one call, 66-138 s in rounds of 64).

The statistic (:mod:`experiments.humaneval.summary`): per selected problem the
method's pass fraction over its paired samples minus the target's, averaged over the
selected problems, with a 95% percentile-bootstrap interval over problems (one
resample for both methods), the SD of the per-problem differences and the minimum
detectable effect at 80% power, ``2.80 sd / sqrt(n)``; truncation rules are also
compared with their matched baselines, and every comparison is read against the
paper's claim (agree / differ / inconclusive). Before the paired stage runs,
:func:`~experiments.humaneval.screen.predicted_mde` gives the MDE the design will have
under no effect, from the screening pass rates.

The estimand is the effect on the selected problems (those the target solves
sometimes but not always at this temperature), not on all 164: a problem the target
never solves can only lose nothing, and one it always solves can only be lost; both
are left out, which is stated with every number.

    python -m experiments.humaneval_screen --stage=screen      # chat prompts (the pilot's
    python -m experiments.humaneval_screen --stage=paired \     # choice), 512 tokens
        --methods=eagle3_chain:mars:theta=0.9,eagle3_tree:mars:theta=0.9,eagle3_tree:lossless \
        --eagle_total_tokens=24     # the committed run's tree (the default is 16 since)

Records go to ``--output_dir/screen.jsonl`` (one record per stage, method, problem and
block of ``--batch_size`` samples; resumable: a rerun skips finished blocks), with
``screen.md`` and ``screen_summary.json``.
"""

from __future__ import annotations

import dataclasses

from absl import app

from experiments.common import knobs, specs
from experiments.humaneval.screen import STAGES
from experiments.humaneval.specs import HumanEvalSpec


@dataclasses.dataclass(frozen=True)
class HumanEvalScreenSpec:
  """The design's own knobs: which stage runs, the samples of each stage, and the
  paired stage's decoding rounds."""
  stage: str = knobs.knob("screen", "screen: target samples on every problem; paired: the "
                          "screening (resumed), then target and --methods on the selected "
                          "problems", choices=STAGES)
  screen_samples: int = knobs.knob(10, "target samples per problem in the screening")
  paired_samples: int = knobs.knob(20, "samples per selected problem and method")
  paired_round_tokens: int = knobs.knob(0, "--round_tokens of the paired stage (--round_tokens "
                                        "applies to the screening); 0 (default) keeps the "
                                        "keys of target and method paired for every token")

  def __post_init__(self):
    knobs.check_int(self, "screen_samples", 1)
    if self.screen_samples < 2:
      raise knobs.KnobError("screen_samples", self.screen_samples, "must be >= 2 (a pass "
                            "rate strictly between 0 and 1 needs two samples)")
    knobs.check_int(self, "paired_samples", 1)
    knobs.check_int(self, "paired_round_tokens", 0)


SPECS = knobs.Specs(
    specs.ModelSpec, HumanEvalSpec, specs.ChainSpec, specs.EagleTreeSpec,
    specs.TemperatureSpec, specs.NewTokensSpec, specs.BatchSpec, specs.SeedSpec,
    specs.OutputDirSpec, HumanEvalScreenSpec,
    presets=dict(model="smollm2-135m-instruct", methods=(), k=5, temperature=1.0,
                 max_new_tokens=512,
                 batch_size=10,  # rows per call: consecutive samples of one problem
                 output_dir="outputs/humaneval_screen"))


@dataclasses.dataclass(frozen=True)
class Run:
  """The design's specs, by name."""
  model: specs.ModelSpec
  humaneval: HumanEvalSpec
  chain: specs.ChainSpec
  eagle_tree: specs.EagleTreeSpec
  temperature: specs.TemperatureSpec
  new_tokens: specs.NewTokensSpec
  batch: specs.BatchSpec
  seed: specs.SeedSpec
  output: specs.OutputDirSpec
  screen: HumanEvalScreenSpec


def define_flags():
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


def build_run():
  """``(run, paired-stage methods)`` of the parsed flags, every value and the methods
  checked before any model loads (a bad value is ``app.UsageError``)."""
  r = Run(*SPECS.build())
  try:
    knobs.check_int(r.new_tokens, "max_new_tokens", 1)
    knobs.check_int(r.batch, "batch_size", 1)
    if not r.temperature.temperature > 0:
      raise knobs.KnobError("temperature", r.temperature.temperature, "must be > 0 "
                            "(screening needs samples)")
    methods = r.humaneval.parse_methods([r.temperature.temperature], r.chain, r.eagle_tree)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  if r.screen.stage == "paired" and len(methods) < 2 and not r.humaneval.summarize_only:
    raise app.UsageError("--stage=paired needs --methods (one or more methods to compare "
                         "with the target)")
  return r, methods


def settings_of(r: Run):
  """The run's :class:`experiments.humaneval.screen.ScreenSettings`."""
  from experiments.humaneval.screen import ScreenSettings
  h = r.humaneval
  return ScreenSettings(
      model=r.model.model, style=h.style, stage=r.screen.stage,
      temperature=r.temperature.temperature, screen_samples=r.screen.screen_samples,
      paired_samples=r.screen.paired_samples, max_new_tokens=r.new_tokens.max_new_tokens,
      batch_size=r.batch.batch_size, round_tokens=h.round_tokens,
      paired_round_tokens=r.screen.paired_round_tokens, limit=h.limit, seed=r.seed.seed,
      timeout_s=h.timeout_s)


def main():
  from experiments.humaneval import screen
  r, methods = build_run()
  try:
    text = screen.run_screen(settings_of(r), methods, r.output.output_dir,
                             summarize_only=r.humaneval.summarize_only)
  except screen.NoScreeningRecords as e:
    raise app.UsageError(str(e)) from None
  print(text)


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(main, define_flags=define_flags)
