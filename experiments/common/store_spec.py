"""The knobs of the feature-store binaries (``experiments/extract_features.py``,
``experiments/generate_onpolicy.py``): what a store (:mod:`specjax.training.features`)
holds and how it is cut into shards. Each knob is defined here once
(experiments/common/knobs.py); the binaries state ``max_tokens`` as a preset.
"""

from __future__ import annotations

import dataclasses

from experiments.common.knobs import KnobError, check_int, knob


def default_layers(num_layers: int) -> tuple:
  """The stored layer inputs of an ``num_layers``-layer target: (2, L//2, L-3, L),
  EAGLE-3's low/mid/high fusion inputs and the final feature (EAGLE-1)."""
  return (2, num_layers // 2, num_layers - 3, num_layers)


@dataclasses.dataclass(frozen=True)
class StoreSpec:
  """A feature store: how many tokens, the top-k next-token candidates and hidden
  layers stored per position, the shard size (resume granularity) and the ShareGPT
  held-out fraction kept out of it."""
  max_tokens: int = knob(help="stop once the store holds this many tokens (the on-policy "
                         "store: this many generated tokens)", preset=True)
  top_k: int = knob(64, "stored next-token candidates (log-probs) per position")
  seqs_per_shard: int = knob(32, "conversations (on-policy: user turns) per shard, the "
                             "resume granularity")
  hidden_layers: tuple[int, ...] = knob((), "layer inputs to store, comma-separated; empty: "
                                        "(2, L//2, L-3, L), EAGLE-3's low/mid/high fusion "
                                        "inputs and the final feature (EAGLE-1)")
  heldout_fraction: float = knob(0.05, "ShareGPT held-out fraction (never stored)")

  def __post_init__(self):
    for name in ("max_tokens", "top_k", "seqs_per_shard"):
      check_int(self, name, 1)
    if not 0 < self.heldout_fraction < 1:
      raise KnobError("heldout_fraction", self.heldout_fraction, "must be in (0, 1)")

  def layers(self, num_layers: int, need_final: bool = False) -> tuple:
    """The stored layers of a ``num_layers``-layer target: ``hidden_layers`` or
    :func:`default_layers`; each in [0, num_layers] (``need_final``: including
    ``num_layers``, the final feature), else :class:`KnobError`."""
    layers = self.hidden_layers or default_layers(num_layers)
    if any(not 0 <= l <= num_layers for l in layers) or (need_final and
                                                          num_layers not in layers):
      final = f" and include {num_layers} (the final feature)" if need_final else ""
      raise KnobError("hidden_layers", tuple(layers),
                      f"must lie in [0, {num_layers}]{final}")
    return tuple(layers)
