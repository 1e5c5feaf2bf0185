"""THE verify-length policy factory: a policy name -> ``(policy, policy_params)``,
as :mod:`specjax.decoding.drafter_factory` is for drafters, so a name means the
same policy in every binary.  The names (:data:`NAMES`)::

    none     no policy: every drafted token is verified (the loop's default)
    adaedl   AdaEDL, entropy-based early draft stopping (specjax.policies.adaedl,
             docs/spec.md §5); hyperparameters: the AdaEDLParams fields
             (entropy_factor, lam, alpha, eps, beta1, beta2: traced) and
             min_draft, adaptive (static)
    cost_aware  the cost-aware draft length (specjax.policies.cost_aware): its params
             are this machine's measured round costs and acceptance tables calibrated
             for the drafter, rule and temperature, which a name cannot carry --
             ``make_policy`` returns ``(CostAwareLength(K), None)`` and the run
             builds the params (experiments/common/adaptive.py in the binaries)

    policy, params = make_policy("adaedl", num_draft=4, lam=0.6, min_draft=0)
    out = speculative_generate(..., policy=policy, policy_params=params)

Values may be strings (command lines): ``"0.6"`` -> 0.6.  A verify-length
policy serves chain drafters; :func:`unsupported` says why a policy does not
apply to a drafter kind.  Speculative Verification is not built by name: it
needs a companion model, a calibration table and a latency profile
(``experiments/sv``).
"""

from __future__ import annotations

import dataclasses

from specjax.checks import coerce_number

NAMES = ("none", "adaedl", "cost_aware")
_STATIC = {"min_draft": int, "adaptive": bool}


def _adaedl_fields() -> tuple:
  from specjax.policies.adaedl import AdaEDLParams
  return tuple(f.name for f in dataclasses.fields(AdaEDLParams))


def policy_name(name: str) -> str:
  """The canonical name; ValueError naming the value and the allowed names."""
  key = str(name).strip().lower()
  if key not in NAMES:
    raise ValueError(f"policy={name!r} is unknown; allowed: {', '.join(NAMES)} "
                     f"(Speculative Verification runs from experiments/sv)")
  return key


def make_policy(name: str, num_draft: int, **hparams) -> tuple:
  """``(policy, params)`` for ``speculative_generate(policy=, policy_params=)``;
  ``(None, None)`` for ``"none"``.  ValueError names an unknown or bad hyperparameter."""
  key = policy_name(name)
  if key == "none":
    if hparams:
      raise ValueError(f"policy 'none' takes no hyperparameters, got {sorted(hparams)}")
    return None, None
  if key == "cost_aware":
    if hparams:
      raise ValueError(f"policy 'cost_aware' takes no hyperparameters here, got "
                       f"{sorted(hparams)} (its costs and tables are measured and shipped)")
    from specjax.policies.cost_aware import CostAwareLength
    return CostAwareLength(num_draft), None
  from specjax.policies.adaedl import AdaEDL
  allowed = _adaedl_fields() + tuple(_STATIC)
  bad = sorted(set(hparams) - set(allowed))
  if bad:
    raise ValueError(f"adaedl hyperparameters {bad} unknown; allowed: {', '.join(allowed)}")
  static = {k: coerce_number(k, hparams.pop(k), kind) for k, kind in _STATIC.items()
            if k in hparams}
  traced = {k: coerce_number(k, v, float) for k, v in hparams.items()}
  policy = AdaEDL(num_draft, **static)
  return policy, policy.make_params(**traced)


def unsupported(name: str, drafter: str) -> str:
  """Why policy ``name`` does not apply to drafter ``drafter`` ("" when it does): a
  policy serves chains; AdaEDL reads the drafter's distributions, which the
  model-free drafters (one-hot drafts) do not have."""
  from specjax.decoding.drafter_factory import MODEL_FREE_KINDS, TREE_KINDS, drafter_kind
  key, kind = policy_name(name), drafter_kind(drafter)
  if key == "none":
    return ""
  if kind in TREE_KINDS:
    return f"policy {key!r} chooses verify lengths of chains; drafter {drafter!r} drafts trees"
  if key == "cost_aware":
    served = ("lookup_chain", "eagle_chain", "lookup_eagle_chain")
    return "" if kind in served else (
        f"policy 'cost_aware' reads acceptance tables shipped for {', '.join(served)}; "
        f"drafter {drafter!r} has none")
  if kind in MODEL_FREE_KINDS:
    return (f"policy {key!r} reads the drafter's distributions; drafter {drafter!r} is "
            f"model-free (one-hot drafts, entropy 0)")
  if kind == "lookup_eagle_chain":
    return (f"policy {key!r} reads the drafter's distributions; drafter {drafter!r} drafts "
            f"some rounds by prompt lookup, which has none (the cost-aware policy serves it)")
  return ""
