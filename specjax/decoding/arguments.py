"""Boundary checks of the decoding entry points' arguments (``generate``,
``speculative_generate``), run in Python before anything is traced.

* :func:`check_model_params` -- ``model`` is a :class:`Model` and ``params``
  has exactly the pytree structure and leaf shapes ``model.init_params`` would
  produce (catches params passed where a model belongs and swapped
  target / draft params, naming the first mismatching leaf).
* :func:`check_position_range` -- prompt + generation beyond the model's
  ``max_position_embeddings``: a warning (RoPE extrapolates silently), or an
  error with ``on_long_prompt="error"``.
* :func:`check_tokenizers` -- target and drafter share a tokenizer (same
  fingerprint, see ``ModelConfig.tokenizer_fingerprint``) unless the caller opts in.
"""

from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from specjax.checks import ArgumentTypeError
from specjax.models.transformer import Model, split_projections

LONG_PROMPT_ACTIONS = ("warn", "error", "ignore")


class PositionRangeWarning(UserWarning):
  """A generation runs past the model's ``max_position_embeddings``."""


@functools.lru_cache(maxsize=64)
def _expected_shapes(model: Model) -> dict:
  """``{leaf path: shape}`` of ``model.init_params`` (abstract: nothing is allocated)."""
  ref = jax.eval_shape(model.init_params, jax.random.key(0))
  return {jax.tree_util.keystr(p): tuple(l.shape)
          for p, l in jax.tree_util.tree_flatten_with_path(ref)[0]}


def check_model_params(name: str, model, params) -> None:
  """``TypeError`` unless ``model`` is a Model; ``ValueError`` naming the first leaf
  of ``params`` whose path or shape differs from what ``model`` expects."""
  if not isinstance(model, Model):
    hint = (" (it looks like a params pytree: the model goes first, then its params)"
            if isinstance(model, dict) else "")
    raise ArgumentTypeError(f"{name} must be a specjax Model, got {type(model).__name__}{hint}")
  if isinstance(params, Model):
    raise ArgumentTypeError(f"{name}_params is a Model; pass the params pytree (e.g. from "
                    f"load_pretrained) after the model")
  want = _expected_shapes(model)
  if isinstance(params, dict) and isinstance(params.get("layers"), tuple) and params["layers"]:
    # Model.decode_params form: per-layer trees (gate / up fused), checked as the stack
    # they came from.
    layers = params["layers"]
    try:
      layer0 = jax.eval_shape(lambda lp: split_projections(lp, model.config), layers[0])
    except Exception:  # noqa: BLE001  (not a layer tree: reported below as missing leaves)
      layer0 = layers[0]
    params = {**params, "layers": jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct((len(layers),) + tuple(np.shape(leaf)), jnp.float32),
        layer0)}
  try:
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
  except Exception:  # noqa: BLE001  (any unflattenable object)
    raise ArgumentTypeError(f"{name}_params is a {type(params).__name__}, not a params pytree") from None
  got = {jax.tree_util.keystr(p): tuple(np.shape(l)) for p, l in leaves}
  cfg = model.config
  what = (f"{name} model (hidden_size={cfg.hidden_size}, layers={cfg.num_hidden_layers}, "
          f"vocab_size={cfg.vocab_size})")
  missing = sorted(set(want) - set(got))
  extra = sorted(set(got) - set(want))
  if missing or extra:
    raise ValueError(f"{name}_params do not fit the {what}: missing leaves {missing[:3]}, "
                     f"unexpected leaves {extra[:3]}")
  for path, shape in want.items():
    if got[path] != shape:
      raise ValueError(f"{name}_params do not fit the {what}: leaf {path} has shape "
                       f"{got[path]}, the model expects {shape} (were target and draft "
                       f"params swapped?)")


def check_position_range(name: str, model: Model, longest_prompt: int, new_positions: int,
                         on_long_prompt: str) -> None:
  """Warn (or raise, ``on_long_prompt="error"``) when positions reach past
  ``max_position_embeddings``: the model was never trained there."""
  if on_long_prompt not in LONG_PROMPT_ACTIONS:
    raise ValueError(f"on_long_prompt={on_long_prompt!r}; choose one of {LONG_PROMPT_ACTIONS}")
  limit = model.config.max_position_embeddings
  end = int(longest_prompt) + int(new_positions)
  if end <= limit or on_long_prompt == "ignore":
    return
  msg = (f"the longest prompt ({longest_prompt} tokens) plus {new_positions} new positions "
         f"reaches position {end}, beyond the {name} model's max_position_embeddings={limit}; "
         f"outputs there are extrapolation (on_long_prompt='error' refuses, 'ignore' is silent)")
  if on_long_prompt == "error":
    raise ValueError(msg)
  warnings.warn(msg, PositionRangeWarning, stacklevel=3)


def check_tokenizers(target: Model, draft_config, allow_tokenizer_mismatch: bool) -> None:
  """``ValueError`` when both models carry tokenizer fingerprints and they differ.

  Equal vocabulary sizes do not make equal tokenizers: a draft with another
  tokenizer proposes ids that mean other strings (tau collapses; a lossy rule
  changes the text).  ``allow_tokenizer_mismatch=True`` opts in (e.g. for
  experiments on deliberately mismatched pairs).
  """
  a = getattr(target.config, "tokenizer_fingerprint", None)
  b = getattr(draft_config, "tokenizer_fingerprint", None)
  if a and b and a != b and not allow_tokenizer_mismatch:
    raise ValueError(f"tokenizer mismatch: target tokenizer fingerprint {a!r} != drafter "
                     f"{b!r} (same vocab_size does not mean the same tokenizer); pass "
                     f"allow_tokenizer_mismatch=True to run the pair anyway")
