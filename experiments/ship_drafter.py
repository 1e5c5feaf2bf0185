r"""Ship a drafter trained by ``experiments/train_from_store.py`` inside the package.

    python -m experiments.ship_drafter --workdir=$HOME/.cache/specjax/runs/eagle3-smollm2
    python -m experiments.ship_drafter --workdir=$HOME/.cache/specjax/runs/draft-smollm2

Reads the run's ``training.json`` (kind, target name and file sha256), loads
its export (``head/`` for EAGLE heads, ``asset/`` for a draft LM: the form
without the target's embedding) against the target to check it, and copies
``config.json``, ``model.safetensors`` and ``training.json`` to
``specjax/models/assets/<target>/<kind>/``. Refuses when the whole asset
directory would exceed ``--budget_mb`` (60 MB).

A run that continued the shipped drafter (``--config.head.init_from`` = the
asset directory) ships with its history: the shipped ``training.json`` it
started from (without its per-step losses) is appended to the new one's
``lineage`` list, oldest first, so the asset says every stage it was trained
through.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

from absl import app

from experiments.common import knobs, specs


@dataclasses.dataclass(frozen=True)
class ShipDrafterSpec:
  """The size budget of the shipped drafters."""
  budget_mb: float = knobs.knob(60.0, "size cap of specjax/models/assets in MB (1e6 bytes)")

  def __post_init__(self):
    knobs.check_float(self, "budget_mb", 0.0)


# --workdir: the train_from_store run to ship (holds training.json); required (build_run).
SPECS = knobs.Specs(specs.WorkdirSpec, ShipDrafterSpec, presets=dict(workdir=""))


@dataclasses.dataclass(frozen=True)
class Run:
  """This binary's specs, by name."""
  workdir: specs.WorkdirSpec
  ship: ShipDrafterSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()


def build_run() -> Run:
  """The validated specs of the parsed flags; ``--workdir`` must be given (a bad or
  missing value is ``app.UsageError``)."""
  r = Run(*SPECS.build())
  if not r.workdir.workdir:
    raise app.UsageError(str(knobs.KnobError("workdir", r.workdir.workdir, "required: give "
                                             "the train_from_store workdir (it holds "
                                             "training.json)")))
  return r


def _dir_bytes(path: str, skip: str = "") -> int:
  total = 0
  for root, _, files in os.walk(path):
    if skip and os.path.abspath(root).startswith(os.path.abspath(skip)):
      continue
    total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
  return total


def with_lineage(rec: dict, shipped_dir: str) -> dict:
  """``rec`` (a run's ``training.json``) with ``lineage``: when the run started from
  the drafter shipped at ``shipped_dir`` (its ``init_from``), the shipped record's
  own lineage plus that record without ``loss_history``, oldest first; else ``rec``
  unchanged."""
  init = rec.get("init_from")
  shipped = os.path.join(shipped_dir, "training.json")
  if not init or os.path.realpath(init) != os.path.realpath(shipped_dir) \
      or not os.path.isfile(shipped):
    return rec
  with open(shipped) as f:
    prev = json.load(f)
  earlier = prev.pop("lineage", [])
  prev.pop("loss_history", None)
  return {**rec, "lineage": earlier + [prev]}


def ship(workdir: str, budget_mb: float = 60.0) -> str:
  from specjax.models import drafter_assets, hf, registry
  rec_path = os.path.join(workdir, "training.json")
  if not os.path.isfile(rec_path):
    raise FileNotFoundError(f"no training.json in {workdir}: not a train_from_store workdir")
  with open(rec_path) as f:
    rec = json.load(f)
  kind, name = rec["kind"], rec["target_name"]
  src = os.path.join(workdir, "asset" if kind == "draft" else "head")
  if not os.path.isfile(os.path.join(src, hf.CONFIG_FILE)):
    raise FileNotFoundError(f"no export in {src}; run train_from_store (it exports at the end, "
                            "or with --config.train.export_only=True)")
  lm = registry.load_model(name)
  if lm.sha256 != rec["target_sha256"]:
    raise ValueError(f"{workdir} was trained for target sha256 {rec['target_sha256'][:12]}..., "
                     f"the installed {name} is {lm.sha256[:12]}...")
  if kind == "draft":
    drafter_assets.load_draft(src, lm.model, lm.params, target_sha256=lm.sha256)
  else:
    drafter_assets.load_head(src, lm.model, target_sha256=lm.sha256)
  dst = drafter_assets.drafter_dir(name, kind)
  record = json.dumps(with_lineage(rec, dst), indent=1)
  new = sum(os.path.getsize(os.path.join(src, f)) for f in (hf.CONFIG_FILE, hf.WEIGHTS_FILE))
  new += len(record.encode())
  total = _dir_bytes(drafter_assets.assets_root(), skip=dst) + new
  if total > budget_mb * 1e6:
    raise ValueError(f"shipping {src} would make specjax/models/assets {total / 1e6:.1f} MB, "
                     f"over the {budget_mb:g} MB budget")
  tmp = dst + ".tmp"
  shutil.rmtree(tmp, ignore_errors=True)
  os.makedirs(tmp)
  for f in (hf.CONFIG_FILE, hf.WEIGHTS_FILE):
    shutil.copy2(os.path.join(src, f), os.path.join(tmp, f))
  with open(os.path.join(tmp, "training.json"), "w") as f:
    f.write(record + "\n")
  shutil.rmtree(dst, ignore_errors=True)
  os.rename(tmp, dst)
  print(f"shipped {kind} for {name}: {dst} ({new / 1e6:.1f} MB; assets total "
        f"{total / 1e6:.1f} MB of {budget_mb:g})")
  return dst


def main():
  r = build_run()
  ship(os.path.expanduser(r.workdir.workdir), r.ship.budget_mb)


if __name__ == "__main__":
  from experiments.common import cli
  cli.run_binary(main, define_flags=define_flags)
