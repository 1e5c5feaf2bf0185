"""tau at T = 1: the same static tree with top-k children vs children drawn without
replacement (recursive rejection sampling), lossless verification, on the small test
models (a draft LM near the target, and a random EAGLE-3 head).

    python -m benchmarks.rsd_tau [--batch_size=64] [--max_new_tokens=32]

(``--batch_size``: rows of each call, one random prompt each; ``--max_new_tokens``:
tokens per row.)

Prints one line per (drafter, tree, children): tau = tokens per target call.  The
models are the random ones of tests/helpers.py, so the numbers are about the
drafting rule on these models only.
"""

from __future__ import annotations

import dataclasses

from experiments.common import cli, knobs, specs

SPECS = knobs.Specs(specs.BatchSpec, specs.NewTokensSpec,
                    presets=dict(batch_size=64,  # random prompts, one call
                                 max_new_tokens=32))


@dataclasses.dataclass(frozen=True)
class Run:
  """The measurement's specs, by name."""
  batch: specs.BatchSpec
  new_tokens: specs.NewTokensSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


def build_run() -> Run:
  """The validated specs of the parsed flags (a bad value is ``app.UsageError``)."""
  from absl import app
  r = Run(*SPECS.build())
  try:  # every row is one random prompt: there is no "all prompts" (0) here
    knobs.check_int(r.batch, "batch_size", 1)
    knobs.check_int(r.new_tokens, "max_new_tokens", 1)
  except knobs.KnobError as e:
    raise app.UsageError(str(e)) from None
  return r


def run() -> None:
  """Print tau per (drafter, tree, children) (module docstring)."""
  r = build_run()
  import jax
  from specjax import verifiers
  from specjax.decoding.drafter_factory import DraftSources, make_drafter
  from specjax.decoding.sampled_tree import constant_branching
  from specjax.decoding.speculative import speculative_generate
  from specjax.distributions import SamplingConfig
  from tests.helpers import eagle_head, eagle_target, ragged_prompts, tiny_pair

  rows, new = r.batch.batch_size, r.new_tokens.max_new_tokens
  t1 = SamplingConfig(temperature=1.0)
  prompts = ragged_prompts(rows, 32, seed=7)
  lossless = verifiers.get("lossless")
  target, tp, draft, dp = tiny_pair(vocab=32)
  e_target, e_tp = eagle_target()
  head, hp, d2t = eagle_head("eagle3", reduced=True)
  lm_sources = DraftSources.build(target, tp, draft, dp)
  e_sources = DraftSources.build(e_target, e_tp, eagle=(head, hp, d2t))
  for branching in ((3, 2), (4, 2, 2)):
    paths = constant_branching(branching)
    for children in ("topk", "sampled"):
      cases = {"lm_tree": (target, tp) + make_drafter("rsd_tree", t1, lm_sources, paths=paths,
                                                      children=children),
               "eagle3_static": (e_target, e_tp) + make_drafter(
                   "eagle_rsd_tree", t1, e_sources, paths=paths, children=children)}
      for name, (tg, tgp, d, p) in cases.items():
        out = speculative_generate(tg, tgp, d, p, lossless, prompts, max_new_tokens=new,
                                   sampling=t1, key=jax.random.key(0), eos_token_id=None)
        print(f"{name:14s} branching={branching!s:10s} N={len(paths):3d} {children:8s} "
              f"tau={out.stats.summary()['tau']:.4f}", flush=True)


if __name__ == "__main__":
  cli.run_binary(run, define_flags=define_flags)
