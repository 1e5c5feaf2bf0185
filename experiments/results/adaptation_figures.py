"""The learning curve of online adaptation as a figure: tau and the acceptance rate
at each draft position against the tokens a session served before the turn, frozen
and adapting heads, from the same bins as its table
(:func:`experiments.results.adaptation_tables.served_bins`)."""

from __future__ import annotations

import json

import numpy as np

from experiments.common.figures import _pyplot
from experiments.results.adaptation_tables import served_bins

HEAD_STYLES = {"frozen": dict(ls="--", marker="o", mfc="white"),
               "adapted": dict(ls="-", marker="o")}
HEAD_NAMES = {"frozen": "frozen head", "adapted": "adapting head"}
POSITION_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple",
                    "tab:brown", "tab:pink", "tab:olive")


def plot_learning_curve(record_path: str, out: str, title: str) -> str:
  """Two panels over the bins' mean tokens served: tau of both heads (left) and the
  acceptance rate at each draft position (right; colour = position, dashed hollow =
  frozen, solid = adapting).  Returns ``out``."""
  with open(record_path) as f:
    rec = json.load(f)
  bins = served_bins(rec["turns"])
  x = [b["mean_served"] for b in bins]
  plt = _pyplot()
  fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
  for head, style in HEAD_STYLES.items():
    left.plot(x, [b["tau"][head] for b in bins], color="black", label=HEAD_NAMES[head],
              **style)
  k = len(bins[0]["position"]["frozen"])
  for j in range(k):
    colour = POSITION_COLOURS[j % len(POSITION_COLOURS)]
    for head, style in HEAD_STYLES.items():
      ys = np.array([b["position"][head][j] for b in bins], float)
      right.plot(x, ys, color=colour, **style)
  left.set(xlabel="tokens served before the turn (bin mean)", ylabel="tau (tokens per target call)",
           title="tau")
  right.set(xlabel="tokens served before the turn (bin mean)",
            ylabel="acceptance rate, given the position was reached",
            title="acceptance per draft position")
  left.legend(fontsize=8, frameon=False)
  from matplotlib.lines import Line2D
  handles = [Line2D([], [], color=POSITION_COLOURS[j % len(POSITION_COLOURS)],
                    label=f"position {j + 1}") for j in range(k)]
  handles += [Line2D([], [], color="0.4", label=HEAD_NAMES[h], **s)
              for h, s in HEAD_STYLES.items()]
  fig.legend(handles=handles, loc="outside right center", fontsize=8, frameon=False)
  fig.suptitle(title)
  fig.savefig(out, dpi=110)
  plt.close(fig)
  return out
