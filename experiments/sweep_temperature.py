r"""Temperature sweep: tau, speedup and quality of several rules against T.

  python -m experiments.sweep_temperature --config=experiments/configs/temperature.py
  python -m experiments.sweep_temperature --config=experiments/configs/temperature.py \
      --config.sweep_temperatures="(0.0, 0.3, 0.5, 0.7, 1.0, 1.3)" --config.drafters="('chain', 'tree')"

Rows: target-only and every rule of ``config.rules`` for every drafter in
``config.drafters`` at every temperature, with every verify-length policy of
``config.policies`` a drafter serves (default ``"none"``; e.g.
``--config.policies="none, adaedl"``).  Evaluation as in
``experiments/compare_verifiers.py``; the figure plots each metric against T
(target-only is a dashed line: its quality changes with T too).
"""

from __future__ import annotations

from experiments.compare import evaluation
from experiments.common import rows as rows_lib


def rows(c) -> list[dict]:
  rows_lib.validate_config(c)
  out = []
  from specjax.policies.factory import unsupported
  rules = rows_lib.parse_rules(c.rules)
  policies = rows_lib.policies_of(c)
  for t in c.sweep_temperatures:
    out.append(rows_lib.make_row(c, kind="target", drafter="-", temperature=t, num_draft=0,
                           extra={"series": "target"}))
    for d in c.drafters:
      size = rows_lib.drafter_size(c, d)  # {"num_draft": K} or a tree's {"depth": D}
      own = rows_lib.drafter_extra(c, d) or {}  # the suffix tree's node count
      for name, hp in rules:
        for pol, php in policies:
          if unsupported(pol, d):
            continue
          label = rows_lib.method_label(name, hp, policy=pol, policy_hparams=php)
          out.append(rows_lib.make_row(c, kind="spec", drafter=d, temperature=t, rule=name,
                                       hparams=hp, policy=pol, policy_hparams=php,
                                       extra={**own, "series": f"{label} [{d}]"}, **size))
  return out


def run(c) -> dict:
  return evaluation.run_line_sweep(c, rows(c), "temperature sweep", lambda cfg: cfg["temperature"], "T")


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_config_binary(run, "temperature sweep config.", default="experiments/configs/temperature.py")
