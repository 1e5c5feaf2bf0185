r"""MARS threshold sweep: tau, speedup and quality against theta (the MARS paper's
theta figure: quality peaks near theta = 0.9, speedup falls as theta rises).

  python -m experiments.sweep_theta --config=experiments/configs/theta.py
  python -m experiments.sweep_theta --config=experiments/configs/theta.py \
      --config.thetas="(0.8, 0.84, 0.88, 0.9, 0.92, 0.96, 0.99)" --config.temperatures="(0.0, 1.0)"
  python -m experiments.sweep_theta --config=experiments/configs/theta.py:smollm2  # SmolLM2, EAGLE-3

Rows: target-only and lossless (references), MARS at every theta; for every
drafter in ``config.drafters``, temperature in ``config.temperatures`` and
verify-length policy of ``config.policies`` the drafter serves (default
``"none"``; e.g. ``--config.policies="none, adaedl"``).
Evaluation, resumable JSONL, table and metrics as in
``experiments/compare_verifiers.py``; the figure plots each metric against theta
(lossless dotted, target-only dashed).
"""

from __future__ import annotations

from experiments.compare import evaluation
from experiments.common import rows as rows_lib


def rows(c) -> list[dict]:
  from specjax import verifiers
  for th in c.thetas:  # each value checked by the rule itself (names theta and the range)
    verifiers.get("mars", theta=th, **dict(c.mars_hparams))
  rows_lib.validate_config(c)
  from specjax.policies.factory import unsupported
  out = []
  for t in c.temperatures:
    out.append(rows_lib.make_row(c, kind="target", drafter="-", temperature=t, num_draft=0,
                           extra={"series": f"target T={t:g}"}))
    for d in c.drafters:
      size = rows_lib.drafter_size(c, d)  # {"num_draft": K} or a tree's {"depth": D}
      own = rows_lib.drafter_extra(c, d) or {}  # the suffix tree's node count
      for pol, php in rows_lib.policies_of(c):
        if unsupported(pol, d):
          continue
        tag = rows_lib.method_label("", {}, policy=pol, policy_hparams=php)  # "" or "+adaedl"
        spec = dict(kind="spec", drafter=d, temperature=t, policy=pol, policy_hparams=php,
                    **size)
        out.append(rows_lib.make_row(c, rule="lossless",
                                     extra={**own, "series": f"lossless{tag} [{d}] T={t:g}"},
                                     **spec))
        for th in c.thetas:
          hp = dict(theta=float(th))
          hp.update(dict(c.mars_hparams))
          out.append(rows_lib.make_row(c, rule="mars", hparams=hp, **spec,
                                       extra={**own, "series": f"mars{tag} [{d}] T={t:g}",
                                              "x": float(th)}))
  return out


def run(c) -> dict:
  return evaluation.run_line_sweep(c, rows(c), "MARS theta sweep", lambda cfg: cfg.get("x", 0.0), "theta")


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_config_binary(run, "theta sweep config.", default="experiments/configs/theta.py")
