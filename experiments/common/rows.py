"""The rows of a verifier comparison or sweep: one dict per (method, drafter,
temperature, draft size), keyed so that a changed setting never reuses a stale result.

A row says what its draft size is: a chain row holds ``num_draft`` (K, drafts per
step), a tree row ``depth`` (the tree's depth; no ``num_draft``), a target-only row
``num_draft = 0``.  Records written before this split hold a tree's depth in
``num_draft``; :func:`draft_depth` reads either.

* :func:`parse_rules` -- ``"lossless, mars:theta=0.9"`` -> ``[(rule, hparams)]``;
* :func:`parse_policies` -- ``"none, adaedl:lam=0.6"`` -> ``[(policy, hparams)]``
  (verify-length policies, :mod:`specjax.policies.factory`; chain drafters only);
* :func:`validate_config` -- every setting a run reads, checked before any model loads;
* :func:`make_row` / :func:`default_rows` -- one row / the comparison's rows;
* :func:`tree_paths`, :func:`drafter_depth`, :func:`drafter_size` -- the static tree,
  draft depth and row size field of a drafter;
* :func:`draft_depth` -- a row's (or record config's) draft depth D: a chain's K or a
  tree's depth, old records included.

Rows are evaluated by :mod:`experiments.compare.evaluation` and reported by
:mod:`experiments.common.reports`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

from experiments.common import sweep


def parse_rules(spec: str) -> list[tuple[str, dict]]:
  """``"lossless, mars:theta=0.9, cos:lam=0.4"`` -> ``[(name, hparams), ...]``.

  ``all`` expands to every registered rule with default hyperparameters
  (entries listed explicitly override it).  Values are parsed as JSON
  (``true``, ``null``, numbers), else kept as strings.
  """
  from specjax import verifiers
  out: dict[str, dict] = {}
  for name, hp in _spec_items(spec, "verifier"):
    if name == "all":
      for n in verifiers.available():
        out.setdefault(n, {})
      continue
    rule = verifiers.get(name, **hp)  # validates and converts ("0.9" -> 0.9) early
    out[name] = {k: getattr(rule, k) for k in hp}  # the converted values, never strings
  return list(out.items())


def _spec_items(spec: str, what: str):
  """``"a, b:k=v:k2=v2"`` -> ``[(name, {k: json value or string})]`` (commas inside
  parentheses do not split)."""
  for item in [s.strip() for s in re.split(r"[,;]\s*(?![^()]*\))", spec) if s.strip()]:
    name, *kvs = item.split(":")
    hp = {}
    for kv in kvs:
      k, eq, v = kv.partition("=")
      if not eq or not k.strip():
        raise ValueError(f"{what} spec {item!r}: {kv!r} is not hparam=value "
                         f"(e.g. mars:theta=0.9, adaedl:lam=0.6)")
      try:
        hp[k.strip()] = json.loads(v)
      except json.JSONDecodeError:
        hp[k.strip()] = v.strip()
    yield name.strip().lower(), hp


def parse_policies(spec: str, num_draft: int) -> list[tuple[str, dict]]:
  """``"none, adaedl:lam=0.6:min_draft=0"`` -> ``[(name, hparams), ...]`` in order
  (a name may repeat with other hyperparameters: a sweep), each checked by
  :func:`specjax.policies.factory.make_policy` for chains of ``num_draft`` drafts;
  values come back converted (``"0.6"`` -> 0.6), never strings."""
  from specjax.policies.factory import make_policy, policy_name
  out: list[tuple[str, dict]] = []
  for name, hp in _spec_items(spec or "none", "policy"):
    policy, params = make_policy(name, num_draft, **hp)
    conv = {k: (getattr(policy, k) if k in ("min_draft", "adaptive") else float(getattr(params, k)))
            for k in hp}
    if (policy_name(name), conv) not in out:
      out.append((policy_name(name), conv))
  return out


ADAPT_NAMES = ("none", "online")


def parse_adapt(spec: str) -> list[tuple[str, dict]]:
  """``"none, online:every=8:learning_rate=0.003"`` -> ``[(name, hparams), ...]``: each
  EAGLE row is run frozen (``none``) and / or adapting online
  (:class:`specjax.decoding.adaptation.OnlineAdaptation` with these hyperparameters,
  checked here); values come back converted, never strings."""
  from specjax.decoding.adaptation import OnlineAdaptation
  out: list[tuple[str, dict]] = []
  for name, hp in _spec_items(spec or "none", "adapt"):
    if name not in ADAPT_NAMES:
      raise ValueError(f"adapt {name!r} unknown; choose from {ADAPT_NAMES}")
    if name == "none":
      if hp:
        raise ValueError(f"adapt 'none' takes no hyperparameters, got {hp}")
    else:
      cfg = OnlineAdaptation(**hp)
      hp = {k: getattr(cfg, k) for k in hp}
    if (name, hp) not in out:
      out.append((name, hp))
  return out


def policies_of(c, num_draft: int | None = None) -> list[tuple[str, dict]]:
  """The config's policies (``c.policies``, default ``"none"``) for chains of
  ``num_draft`` (default ``c.num_draft``) drafts."""
  return parse_policies(c.get("policies", "none"), int(num_draft or c.num_draft))


def path_rule_names(rules: list[tuple[str, dict]]) -> list[str]:
  """The path rules (e.g. ``block``) among :func:`parse_rules` output: chains only."""
  from specjax import verifiers
  path = set(verifiers.available("path"))
  return [name for name, _ in rules if name in path]


def check_path_rules_on_trees(rules: list[tuple[str, dict]], drafters) -> None:
  """``ValueError`` naming the rule and drafter when a chain-only path rule (e.g.
  block) is asked of a tree drafter: trees take node rules or tree rules
  (``traversal``)."""
  path = path_rule_names(rules)
  from specjax.decoding.drafter_factory import KINDS, TREE_KINDS
  trees = [d for d in drafters if d in TREE_KINDS]
  if path and trees:
    raise ValueError(f"rules={path} are path rules for chain drafters; drafters={trees} "
                     f"propose trees, which take node rules or a tree rule (e.g. "
                     f"'traversal', the tree analogue of block verification); allowed "
                     f"drafters for {path}: {[d for d in KINDS if d not in TREE_KINDS]}")


def validate_config(c) -> None:
  """Check every setting a run reads, before any model loads or row runs.

  Raises ``ValueError`` / ``TypeError`` naming the config field, the value and
  what is allowed (rules are checked by :func:`parse_rules`).
  """
  from specjax.checks import check_int, check_range, coerce_number
  from specjax.decoding.drafter_factory import KINDS
  drafters = [c.drafters] if isinstance(c.drafters, str) else list(c.drafters)
  bad = [d for d in drafters if d not in KINDS + (ADAPTIVE,)]
  if bad:
    raise ValueError(f"drafters={bad} unknown; choose from {KINDS + (ADAPTIVE,)} "
                     f"(specjax.decoding.drafter_factory)")
  temps = [c.temperatures] if isinstance(c.temperatures, (str, int, float)) else c.temperatures
  if not len(temps):
    raise ValueError("temperatures is empty; give at least one, e.g. 0,1")
  for t in temps:
    check_range("temperatures entry", coerce_number("temperatures entry", t, float), low=0.0)
  check_int("num_draft (K)", c.num_draft, low=1)
  try:
    paths = tree_paths(c)
  except (ValueError, TypeError) as e:
    raise ValueError(f"tree_paths={c.tree_paths!r} is not a JSON list of rank paths such as "
                     f"[[0], [1], [0, 0]]: {e}") from None
  check_path_rules_on_trees(parse_rules(c.rules), drafters)
  policies_of(c)
  parse_adapt(c.get("adapt", "none"))
  if "tree" in drafters:
    from specjax.decoding.tree import static_tree
    static_tree(paths)
  for name in ("eagle_depth", "eagle_top_k", "eagle_total_tokens"):
    check_int(name, c[name], low=1)
  if "suffix_tree" in drafters:
    for name in ("suffix_depth", "suffix_total_tokens"):
      check_int(name, c.get(name, 1), low=1)
  for name in ("num_prompts", "max_new_tokens", "max_prompt_tokens"):
    check_int(f"data.{name}", c.data[name], low=1)
  check_int("data.batch_size", c.data.batch_size, low=0)
  check_int("data.prompt_bucket", c.data.get("prompt_bucket", 0), low=0)
  check_int("timing.repeats", c.timing.repeats, low=1)
  if c.kl.enabled:
    for name in ("num_prompts", "contexts"):
      check_int(f"kl.{name}", c.kl[name], low=1)
  for key in ("workdir", "figures_dir"):
    d = (c.workdir or f"/tmp/specjax_runs/{c.name}") if key == "workdir" else c.get(key, "")
    if d and os.path.exists(d) and not os.path.isdir(d):
      raise ValueError(f"{key}={d!r} exists and is not a directory; results go into a "
                       f"directory")
  from experiments.common.run_context import check_sources
  check_sources(c)  # models, draft, eagle_dir, data.prompt_sets, mesh


def method_label(rule: str, hparams: dict, baseline: bool = False, policy: str = "none",
                 policy_hparams: dict | None = None) -> str:
  """``mars(theta=0.9)``, ``baseline:typical(eps=0.09)``, ``lossless+adaedl(lam=0.6)``."""
  hp = ",".join(f"{k}={v}" for k, v in sorted(hparams.items()))
  s = f"{rule}({hp})" if hp else rule
  s = f"baseline:{s}" if baseline else s
  return s if policy == "none" else s + "+" + method_label(policy, dict(policy_hparams or {}))


def settings_hash(c) -> str:
  """Hash of everything but the method axes: a row key never survives a settings change."""
  d = c.to_dict() if hasattr(c, "to_dict") else dict(c)
  keep = {k: d[k] for k in ("models", "draft", "seed", "data", "timing", "kl", "tree_paths",
                            "eagle_dir", "eagle_total_tokens", "eagle_top_k", "eagle_depth")
          if k in d}
  from experiments.common.run_context import weights_fingerprint
  keep["weights"] = weights_fingerprint(c)  # a retrained drafter never reuses stale rows
  if d.get("param_dtype", "float32") != "float32":  # (float32 keys stay as they were)
    keep["param_dtype"] = d["param_dtype"]
  return hashlib.sha256(sweep.canonical_json(keep).encode()).hexdigest()[:10]


def make_row(c, *, kind: str, drafter: str, temperature: float, num_draft: int | None = None,
             depth: int | None = None, rule: str = "lossless", hparams: dict | None = None,
             baseline: bool = False, extra: dict | None = None, policy: str = "none",
             policy_hparams: dict | None = None, adapt: dict | None = None) -> dict:
  """One sweep configuration (a table row).  A chain drafter's row takes ``num_draft``
  (K), a tree drafter's ``depth`` (:func:`drafter_size` gives the one a drafter
  takes); a target row neither (it holds ``num_draft = 0``).  A verify-length
  ``policy`` other than ``"none"`` adds ``policy`` / ``policy_hparams`` and
  ``+policy(...)`` to the method; ``adapt`` (an EAGLE row adapting online: its
  ``OnlineAdaptation`` hyperparameters) adds ``adapt`` and ``+online(...)`` (rows
  without either keep their keys).  The key holds ``K=<num_draft>`` (chain and
  target rows) or ``D=<depth>`` (tree rows)."""
  hparams = dict(hparams or {})
  label = ("target" if kind == "target"
           else method_label(rule, hparams, baseline, policy, policy_hparams))
  if kind != "target" and adapt is not None:
    label += "+" + method_label("online", dict(adapt))
  row = {"kind": kind, "method": label, "rule": rule, "hparams": hparams,
         "baseline": bool(baseline), "drafter": drafter if kind != "target" else "-",
         "temperature": float(temperature)}
  row.update(_size_field(kind, drafter, num_draft, depth))
  if kind != "target" and policy != "none":
    row.update(policy=policy, policy_hparams=dict(policy_hparams or {}))
  if kind != "target" and adapt is not None:
    row.update(adapt=dict(adapt))
  row.update(extra or {})
  axes = sweep.canonical_json({k: row[k] for k in sorted(row)})
  size = f"D={row['depth']}" if "depth" in row else f"K={row['num_draft']}"
  row["key"] = f"{label}|{row['drafter']}|T={row['temperature']:g}|{size}|" \
               f"{hashlib.sha256(axes.encode()).hexdigest()[:8]}|{settings_hash(c)}"
  return row


def _size_field(kind: str, drafter: str, num_draft, depth) -> dict:
  """``{"num_draft": K}`` (chain), ``{"depth": D}`` (tree) or ``{"num_draft": 0}``
  (target); ``ValueError`` when a row is given the other drafter shape's size."""
  if kind == "target":
    return {"num_draft": 0}
  from specjax.decoding.drafter_factory import is_tree
  if is_tree(drafter):
    if depth is None or num_draft is not None:
      raise ValueError(f"drafter={drafter!r} drafts trees: its row takes depth= (the tree's "
                       f"depth), not num_draft= (a chain's K); got num_draft={num_draft!r}, "
                       f"depth={depth!r}")
    return {"depth": int(depth)}
  if num_draft is None or depth is not None:
    raise ValueError(f"drafter={drafter!r} drafts chains: its row takes num_draft= (K), "
                     f"not depth= (a tree's); got num_draft={num_draft!r}, depth={depth!r}")
  return {"num_draft": int(num_draft)}


def draft_depth(config: dict) -> int:
  """A row's (record config's) draft depth D: a tree row's ``depth``, else its
  ``num_draft`` -- a chain's K, 0 for a target row, and a tree's depth in records
  written before tree rows held ``depth``."""
  return int(config["depth"] if "depth" in config else config["num_draft"])


# The main job's adaptive row: prompt lookup or the EAGLE chain per round and row
# (lookup_eagle_chain) under the cost-aware policy, whatever ``c.policies`` says.
ADAPTIVE = "adaptive"


def default_rows(c) -> list[dict]:
  """The comparison's rows: target, every rule x drafter x T x policy (``c.policies``;
  a policy only on the drafters it serves, :func:`specjax.policies.factory.unsupported`),
  matched baselines (no policy); drafter :data:`ADAPTIVE` gets the cost-aware policy
  only."""
  validate_config(c)
  from specjax.decoding.drafter_factory import is_tree, needs
  from specjax.policies.factory import unsupported
  rows = []
  rules = parse_rules(c.rules)
  policies = policies_of(c)
  adapts = parse_adapt(c.get("adapt", "none"))
  path_rules = path_rule_names(rules)
  drafters = list(c.drafters)
  eagle = ("eagle_chain", "eagle_tree", "lookup_eagle_chain", ADAPTIVE)
  if c.eagle_dir not in ("", "none") and not any(d in eagle for d in drafters):
    drafters += eagle  # a head without EAGLE drafters listed: both
  for t in c.temperatures:
    rows.append(make_row(c, kind="target", drafter="-", temperature=t, num_draft=0))
    for d in drafters:
      size = drafter_size(c, d)
      extra = drafter_extra(c, d)
      for name, hp in rules:
        if is_tree(d) and name in path_rules:
          continue  # an EAGLE tree added for a head (validate_config refuses explicit ones)
        for pol, php in ([("cost_aware", {})] if d == ADAPTIVE else policies):
          if unsupported(pol, d):
            continue
          for ad, ahp in adapts:
            if ad != "none" and needs(d) != "eagle":
              continue  # only a head adapts
            rows.append(make_row(c, kind="spec", drafter=d, temperature=t, rule=name,
                                 hparams=hp, extra=extra, policy=pol, policy_hparams=php,
                                 adapt=None if ad == "none" else ahp, **size))
      if t > 0 and c.matched_baselines:
        for name, hp in rules:
          if name in ("spec_cascade", "typical"):
            rows.append(make_row(c, kind="spec", drafter=d, temperature=t, rule=name,
                                 hparams=hp, baseline=True, **size))
  return rows


def tree_paths(c) -> tuple:
  """``config.tree_paths`` (a JSON list of rank paths) as a tuple of tuples."""
  return tuple(tuple(int(r) for r in p) for p in json.loads(c.tree_paths))


def drafter_depth(c, drafter: str) -> int:
  """The draft depth D of ``drafter`` under config ``c``: a tree's depth (the static
  tree's, ``eagle_depth``, ``suffix_depth``), a chain's K (``num_draft``)."""
  from specjax.decoding.drafter_factory import STATIC_TREE_KINDS, drafter_kind
  kind = drafter_kind(drafter)
  if kind in STATIC_TREE_KINDS:  # tree, rsd_tree, eagle_rsd_tree: built from tree_paths
    return max(len(p) for p in tree_paths(c))
  if kind == "eagle_tree":
    return int(c.eagle_depth)
  if kind == "suffix_tree":
    return int(c.get("suffix_depth", 4))
  return int(c.num_draft)


def drafter_size(c, drafter: str) -> dict:
  """The size keyword :func:`make_row` takes for ``drafter``: ``{"depth": D}`` for a
  tree drafter, ``{"num_draft": K}`` for a chain (:func:`drafter_depth`)."""
  from specjax.decoding.drafter_factory import is_tree
  return {"depth" if is_tree(drafter) else "num_draft": drafter_depth(c, drafter)}


def drafter_extra(c, drafter: str) -> dict | None:
  """Row settings of a drafter beyond its depth that are not in the run settings hash
  (the suffix tree's node count), so a changed value never reuses a stale row."""
  if drafter == "suffix_tree":
    return {"total_tokens": int(c.get("suffix_total_tokens", 16))}
  return None

