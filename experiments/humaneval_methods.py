"""The decoding methods of the HumanEval evaluation (:mod:`experiments.humaneval_eval`):
one ``--methods`` entry -> a :class:`Method` -> ``(drafter, draft params, verifier,
target sampling)``.

Syntax (one entry per method; hyperparameters as in :func:`experiments.rows.parse_rules`)::

    target                                   target-only generate() (the reference)
    <drafter>:<rule>[:<hparam>=<value>]...   speculative_generate() with that rule
    baseline:<drafter>:<rule>[:...]          the rule's matched baseline: its truncation
                                             as a target processor + lossless verification
                                             (:func:`specjax.verifiers.matched_baseline`)

    <drafter>: draft_chain   the shipped draft LM, a chain of K = --k drafts
               eagle3_chain  the shipped EAGLE-3 head, a chain of K drafts
               eagle3_tree   the EAGLE-3 head, EAGLE-2 dynamic tree (--eagle_depth,
                             --eagle_top_k, --eagle_total_tokens nodes)

e.g. ``eagle3_chain:mars:theta=0.9``, ``eagle3_tree:typical:eps=0.09:gate=soft``,
``baseline:draft_chain:spec_cascade:p_base=0.3``. Only the truncation rules
(``spec_cascade``, ``typical``) have a baseline that is not plain lossless
verification; ``baseline:`` of any other rule is refused.
"""

from __future__ import annotations

import dataclasses
import hashlib

TARGET = "target"
DRAFTERS = ("draft_chain", "eagle3_chain", "eagle3_tree")
TRUNCATION_RULES = ("spec_cascade", "typical")
BASELINE_PREFIX = "baseline:"


@dataclasses.dataclass(frozen=True)
class Method:
  """One decoding method.

  Attributes:
    spec: the canonical spec string (hyperparameters sorted, values converted):
      the method's name in records, keys and tables.
    drafter: one of :data:`DRAFTERS`, or "" for target-only.
    rule, hparams: the verification rule and the hyperparameters given (``hparams``
      is a sorted tuple of pairs, so a Method is hashable).
    baseline: run the rule's matched baseline instead of the rule.
    drafter_settings: sorted ``(name, value)`` pairs of the drafter's shape (K, or the
      tree's depth / top_k / total_tokens).
    sampled_only: run at T > 0 only (matched baselines added by ``--matched_baselines``:
      at T = 0 the baseline is target greedy, since A always contains the argmax).
  """

  spec: str
  drafter: str = ""
  rule: str = ""
  hparams: tuple = ()
  baseline: bool = False
  drafter_settings: tuple = ()
  sampled_only: bool = False

  @property
  def is_target(self) -> bool:
    return not self.drafter

  @property
  def asset(self) -> str:
    """The shipped drafter kind this method loads ("draft" / "eagle3"; "" for target)."""
    return self.drafter.split("_")[0] if self.drafter else ""

  def verifier_rule(self):
    from specjax import verifiers
    return verifiers.get(self.rule, **dict(self.hparams))

  def fingerprint(self, drafter_sha256: str) -> str:
    """8 hex digits over everything that decides the method's outputs besides the
    run's settings: the full rule (defaults included), the drafter's shape and its
    weights (``drafter_sha256``) -- a changed default or re-shipped head never reuses
    a stale record."""
    text = repr((self.spec, repr(self.verifier_rule()), self.baseline, self.drafter_settings,
                 drafter_sha256))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def parse_method(spec: str, *, k: int = 5, eagle_depth: int = 5, eagle_top_k: int = 8,
                 eagle_total_tokens: int = 24) -> Method:
  """One ``--methods`` entry -> :class:`Method` (syntax in the module docstring).

  Raises ``ValueError`` naming the entry and what is allowed.
  """
  from experiments.rows import parse_rules
  text = spec.strip()
  if text.lower() == TARGET:
    return Method(TARGET)
  baseline = text.lower().startswith(BASELINE_PREFIX)
  body = text[len(BASELINE_PREFIX):] if baseline else text
  drafter, _, rule_spec = body.partition(":")
  drafter = drafter.strip().lower()
  if drafter not in DRAFTERS or not rule_spec.strip():
    raise ValueError(f"method {spec!r}: give 'target', '<drafter>:<rule>[:hparam=value...]' or "
                     f"'baseline:<drafter>:<rule>[...]' with <drafter> one of {DRAFTERS}, "
                     f"e.g. eagle3_chain:mars:theta=0.9")
  try:
    rules = parse_rules(rule_spec)
  except (ValueError, TypeError) as e:
    raise ValueError(f"method {spec!r}: {e}") from None
  if len(rules) != 1 or rule_spec.split(":")[0].strip().lower() == "all":
    raise ValueError(f"method {spec!r}: one rule per method (got {[r for r, _ in rules]})")
  rule, hp = rules[0]
  if baseline and rule not in TRUNCATION_RULES:
    raise ValueError(f"method {spec!r}: only {TRUNCATION_RULES} have a matched baseline other "
                     f"than lossless verification; use {drafter}:lossless")
  if drafter.endswith("_tree"):
    settings = (("depth", eagle_depth), ("top_k", eagle_top_k), ("total_tokens", eagle_total_tokens))
  else:
    settings = (("k", k),)
  hparams = tuple(sorted(hp.items()))
  canon = ":".join([drafter, rule] + [f"{a}={b}" for a, b in hparams])
  return Method((BASELINE_PREFIX if baseline else "") + canon, drafter, rule, hparams, baseline,
                settings)


def baseline_of(m: Method) -> Method | None:
  """The matched-baseline method of a truncation-rule method (run at T > 0 only), else None."""
  if m.is_target or m.baseline or m.rule not in TRUNCATION_RULES:
    return None
  return dataclasses.replace(m, spec=BASELINE_PREFIX + m.spec, baseline=True, sampled_only=True)


def parse_methods(specs, temperatures, *, matched_baselines: bool = True, **drafter_flags
                  ) -> list[Method]:
  """``--methods`` -> methods: ``target`` first (every method's reference, added if
  missing), duplicates dropped, and with ``matched_baselines`` each truncation rule's
  matched baseline added (unless listed). Every baseline is checked against every
  temperature's sampling config here (e.g. ``typical`` with ``delta != sqrt(eps)`` has
  none), so a bad entry fails before any model loads."""
  from specjax.distributions import SamplingConfig
  from specjax.verifiers import matched_baseline
  out = {TARGET: Method(TARGET)}
  for s in specs:
    m = parse_method(s, **drafter_flags)
    if m.spec in out and out[m.spec].sampled_only:  # listed explicitly: every temperature
      del out[m.spec]
    out.setdefault(m.spec, m)
    b = baseline_of(m) if matched_baselines else None
    if b is not None:
      out.setdefault(b.spec, b)
  for m in out.values():
    if m.baseline:
      for t in temperatures:
        try:
          matched_baseline(m.verifier_rule(), SamplingConfig(temperature=float(t)))
        except ValueError as e:
          hint = " (added by --matched_baselines; pass --nomatched_baselines to run the " \
                 "rule without it)" if m.sampled_only else ""
          raise ValueError(f"method {m.spec!r}{hint}: {e}") from None
  return list(out.values())


def build(m: Method, ms, eagle_params, temperature: float):
  """``(drafter, draft_params, verifier, target_sampling)`` of a speculative method
  (``ms``: the :class:`experiments.model_sets.ModelSet`; ``eagle_params``: from
  ``EagleDrafter.make_params``), as :func:`experiments.evaluation.build` does."""
  from specjax.decoding.drafters import LMDrafter
  from specjax.decoding.eagle_drafter import EagleDrafter
  from specjax.distributions import SamplingConfig
  from specjax.verifiers import matched_baseline
  samp = SamplingConfig(temperature=float(temperature))
  rule = m.verifier_rule()
  verifier, target_samp = rule, samp
  if m.baseline:
    base = matched_baseline(rule, samp)
    verifier, target_samp = base.verifier, base.sampling
  s = dict(m.drafter_settings)
  if m.drafter == "draft_chain":
    return LMDrafter(s["k"], samp, ms.draft), ms.draft_params, verifier, target_samp
  head = ms.eagle[0]
  if m.drafter == "eagle3_chain":
    return EagleDrafter(s["k"], samp, head=head), eagle_params, verifier, target_samp
  return (EagleDrafter(depth=s["depth"], sampling=samp, head=head, tree_kind="dynamic",
                       top_k=s["top_k"], total_tokens=s["total_tokens"]), eagle_params, verifier,
          target_samp)
