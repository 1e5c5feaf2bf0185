"""Early exit: the first ``n`` decoder layers of a model, followed by its own final
norm and LM head -- a smaller model of the same family that needs no training
and shares the target's tokenizer and weights. Used as the Speculative
Verification companion for a real target (SV, Sec. 3: a companion between
draft and target in size and quality) and as a self-speculative draft.

    comp, comp_params = early_exit(target, target_params, num_layers=8)

The params are views of the target's (a slice of the stacked layer weights;
embedding, norm and head shared), so the companion costs no extra weight memory
beyond the slice.
"""

from __future__ import annotations

from specjax.models.transformer import Model


def early_exit(model: Model, params, num_layers: int) -> tuple[Model, dict]:
  """``(Model, params)``: the first ``num_layers`` layers of ``model`` with its final
  norm and LM head. Raises ValueError unless ``1 <= num_layers <= L``."""
  total = model.config.num_hidden_layers
  if not (isinstance(num_layers, int) and 1 <= num_layers <= total):
    raise ValueError(f"num_layers={num_layers!r} must be an integer in [1, {total}] (the "
                     f"model's decoder layers)")
  cfg = model.config.replace(num_hidden_layers=num_layers, hidden_layers=tuple(
      l for l in model.config.hidden_layers if l <= num_layers))
  out = dict(params)
  out["layers"] = _slice(params["layers"], num_layers)
  return Model(cfg), out


def _slice(tree, n: int):
  import jax
  return jax.tree.map(lambda x: x[:n], tree)
