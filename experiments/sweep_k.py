r"""Draft-length sweep, MARS vs lossless: the "K sweet spot" (MARS paper: speedup
peaks at an intermediate K while tau keeps rising).

  python -m experiments.sweep_k --config=experiments/configs/k.py
  python -m experiments.sweep_k --config=experiments/configs/k.py \
      --config.ks="(1, 2, 3, 4, 6, 8, 10, 12)" --config.temperatures="(0.0, 1.0)"

  python -m experiments.sweep_k --config=experiments/configs/k.py:smollm2   # SmolLM2, EAGLE-3

Rows: target-only, and for every K in ``config.ks`` each rule of
``config.rules`` with every chain drafter of ``config.drafters`` (``chain``: the
draft LM, ``eagle_chain``: the EAGLE head; K = chain length) and every
verify-length policy of ``config.policies`` (default ``"none"``; e.g.
``--config.policies="none, adaedl"``).  Evaluation as in
``experiments/compare_verifiers.py``; the figure plots tau, speedup and
quality against K.
"""

from __future__ import annotations

from experiments.compare import evaluation
from experiments.common import rows as rows_lib


CHAINS = ("chain", "eagle_chain")


def rows(c) -> list[dict]:
  from specjax.checks import check_int
  for k in c.ks:
    check_int("ks entry (draft length K)", k, low=1)
  bad = [d for d in c.drafters if d not in CHAINS]
  if bad or not len(c.drafters):
    raise ValueError(f"drafters={tuple(c.drafters)}: the K sweep takes chain drafters, "
                     f"choose from {CHAINS}")
  rows_lib.validate_config(c)
  policies = rows_lib.policies_of(c, min(int(k) for k in c.ks))
  out = []
  for t in c.temperatures:
    out.append(rows_lib.make_row(c, kind="target", drafter="-", temperature=t, num_draft=0,
                           extra={"series": f"target T={t:g}"}))
    for d in c.drafters:
      for name, hp in rows_lib.parse_rules(c.rules):
        for pol, php in policies:
          label = rows_lib.method_label(name, hp, policy=pol, policy_hparams=php)
          for k in c.ks:
            out.append(rows_lib.make_row(
                c, kind="spec", drafter=d, temperature=t, num_draft=int(k), rule=name,
                hparams=hp, policy=pol, policy_hparams=php,
                extra={"series": f"{label} [{d}] T={t:g}"}))
  return out


def run(c) -> dict:
  return evaluation.run_line_sweep(c, rows(c), "draft length sweep", lambda cfg: cfg["num_draft"], "K")


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_config_binary(run, "K sweep config.", default="experiments/configs/k.py")
