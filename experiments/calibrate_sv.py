r"""Calibrate Speculative Verification for a (target, draft, companion) triple
(the work: :func:`experiments.sv.calibrate.run`).

  python -m experiments.calibrate_sv --config=experiments/configs/sv.py \
      [--config.verifier=mars] [--config.temperature=0.0] [--config.workdir=...]
  python -m experiments.calibrate_sv --config=experiments/configs/sv_tiny.py   # smoke test
"""

from experiments.sv.calibrate import run

if __name__ == "__main__":
  from experiments.common import cli
  cli.run_config_binary(run, "SV calibration config file.")
