"""Target-only greedy generation: specjax ``generate()`` vs transformers ``generate()``.

Both sides run the *same* checkpoint (float32) on the same ragged prompts with
the same ``max_new_tokens`` and no EOS (every row generates exactly
``max_new_tokens``), measured side by side in one process:

* specjax: one warm-up call (compiles; its time is reported separately), then
  ``--repeats`` timed calls of ``generate()`` ending in ``block_until_ready``;
* transformers: ``model.generate(do_sample=False)`` under ``torch.inference_mode``
  on the left-padded batch with its attention mask, one warm-up call, then
  ``--repeats`` timed calls, interleaved with specjax's so both see the same
  machine load (the 1-minute load average is printed with the table).

Reported: median generated tokens/s (batch x max_new_tokens / seconds), the
specjax/transformers ratio, and whether the greedy outputs are identical.

Model: by default a random Llama (hidden 256, 4 layers, 8 heads / 4 KV heads,
vocab 8192, ~6.8M params) built in specjax, exported with
``specjax.models.hf.save_pretrained`` and loaded back by both libraries.
``--checkpoint=DIR`` uses a HF checkpoint directory instead;
``--checkpoint=default`` the embedded trained target
``specjax/models/assets/target``; a registered real model
(``--checkpoint=smollm2-135m-instruct``) or a ``.gguf`` file is loaded by
:func:`specjax.models.registry.load_model`, and transformers loads the same
dequantized float32 weights from its cache directory. Real models get real
prompts: held-out ShareGPT first user turns (code, qa, writing, math in turn)
through the chat template; generation then stops at EOS on both sides.

  python benchmarks/generate_vs_hf.py [--batch_sizes=1,8 --max_new_tokens=64]
  python benchmarks/generate_vs_hf.py --checkpoint=smollm2-135m-instruct
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time

from absl import app

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO not in sys.path:  # run as a plain script from a source checkout
  sys.path.insert(0, _REPO)

from experiments.common import knobs, specs  # noqa: E402  (after the path fix above)


@dataclasses.dataclass(frozen=True)
class GenerateVsHfSpec:
  """The checkpoint both sides run (or the shape of the random Llama built when there is
  none), the random prompts' lengths and torch's OpenMP wait policy."""
  checkpoint: str = knobs.knob("", "HF checkpoint dir, a registered real model or .gguf "
                               "file; 'default' = specjax/models/assets/target; empty = a "
                               "random Llama of the size given below")
  vocab: int = knobs.knob(8192, "random model: vocabulary size")
  hidden: int = knobs.knob(256, "random model: hidden size")
  layers: int = knobs.knob(4, "random model: decoder layers")
  heads: int = knobs.knob(8, "random model: attention heads")
  kv_heads: int = knobs.knob(4, "random model: key/value heads")
  intermediate: int = knobs.knob(688, "random model: MLP width")
  min_prompt: int = knobs.knob(16, "shortest prompt (tokens); lengths are ragged")
  max_prompt: int = knobs.knob(32, "longest prompt (tokens)")
  omp_wait_policy: str = knobs.knob("", "if set (PASSIVE | ACTIVE), OMP_WAIT_POLICY for "
                                    "torch's OpenMP pool; PASSIVE avoids spin-waiting threads "
                                    "collapsing when other processes compete for the cores")

  def __post_init__(self):
    for name in ("vocab", "hidden", "layers", "heads", "kv_heads", "intermediate",
                 "min_prompt"):
      knobs.check_int(self, name, 1)
    knobs.check_int(self, "max_prompt", self.min_prompt)
    if self.hidden % self.heads:
      raise knobs.KnobError("heads", self.heads, f"must divide --hidden={self.hidden}")
    if self.heads % self.kv_heads:
      raise knobs.KnobError("kv_heads", self.kv_heads, f"must divide --heads={self.heads}")
    if self.omp_wait_policy.upper() not in ("", "PASSIVE", "ACTIVE"):
      raise knobs.KnobError("omp_wait_policy", self.omp_wait_policy,
                            "give PASSIVE, ACTIVE or '' (unset)")


SPECS = knobs.Specs(specs.BatchSizesSpec, specs.NewTokensSpec, specs.TimingSpec,
                    specs.ThreadsSpec, specs.SeedSpec, specs.OutputSpec, GenerateVsHfSpec,
                    presets=dict(batch_sizes=(1, 8), max_new_tokens=64, repeats=3, output=""))


@dataclasses.dataclass(frozen=True)
class Run:
  """This benchmark's specs, by name."""
  batch_sizes: specs.BatchSizesSpec
  new_tokens: specs.NewTokensSpec
  timing: specs.TimingSpec
  threads: specs.ThreadsSpec
  seed: specs.SeedSpec
  output: specs.OutputSpec
  bench: GenerateVsHfSpec


def define_flags() -> None:
  """The flags of this binary, defined on its main path only (never at import:
  several binaries share one process in the tests; experiments/common/cli.py)."""
  SPECS.define()

DEFAULT_TARGET = os.path.join(_REPO, "specjax", "models", "assets", "target")


def random_llama(path: str, g: GenerateVsHfSpec, seed: int):
  """Write a random Llama checkpoint to ``path`` with specjax's exporter.

  Kernels ~ N(0, 1/fan_in) (unit-variance activations), embeddings ~ N(0, 1),
  norm weights 1, so logits are O(1) and greedy choices are well separated.
  """
  import jax
  import jax.numpy as jnp
  import numpy as np

  from specjax.models import hf
  from specjax.models.config import ModelConfig
  from specjax.models.transformer import Model

  cfg = ModelConfig(model_type="llama", vocab_size=g.vocab, hidden_size=g.hidden,
                    intermediate_size=g.intermediate, num_hidden_layers=g.layers,
                    num_attention_heads=g.heads, num_key_value_heads=g.kv_heads,
                    head_dim=g.hidden // g.heads, rope_theta=10000.0,
                    max_position_embeddings=2048, eos_token_id=None, bos_token_id=None)
  rs = np.random.RandomState(seed)

  def make(path, s):
    name = jax.tree_util.keystr(path)
    if "norm" in name:
      return jnp.ones(s.shape, jnp.float32)
    if "embedding" in name:
      return jnp.asarray(rs.randn(*s.shape).astype(np.float32))
    fan_in = s.shape[-2]  # kernels: [..., in, out] (layers stacked in front)
    return jnp.asarray((rs.randn(*s.shape) / np.sqrt(fan_in)).astype(np.float32))

  params = jax.tree_util.tree_map_with_path(
      make, jax.eval_shape(Model(cfg).init_params, jax.random.key(0)))
  hf.save_pretrained(path, cfg, params)
  return cfg


def chat_prompts(lm, batch: int):
  """``batch`` held-out ShareGPT first user turns through the model's chat template,
  taking the domains in turn."""
  from specjax.data import eval_prompts
  by_domain = eval_prompts.heldout_eval_prompts(n_per_domain=batch)
  order = [p for group in zip(*(by_domain[d] for d in ("code", "qa", "writing")))
           for p in group]
  return [lm.encode_chat(p.messages) for p in order[:batch]]


def make_prompts(batch: int, vocab: int, seed: int, g: GenerateVsHfSpec):
  import numpy as np
  rs = np.random.RandomState(seed + batch)
  lens = rs.randint(g.min_prompt, g.max_prompt + 1, size=batch)
  return [rs.randint(0, vocab, size=n).tolist() for n in lens]


class SpecjaxSide:
  """specjax ``generate()`` on one batch; ``first_s`` = compile + first call."""

  def __init__(self, model, params, prompts, n_new, eos=None):
    import jax

    from specjax.decoding.autoregressive import generate
    self._call = lambda: generate(model, params, prompts, max_new_tokens=n_new,
                                  eos_token_id=eos)
    self._ready = jax.block_until_ready
    t0 = time.perf_counter()
    self._ready(self._call().tokens)
    self.first_s = time.perf_counter() - t0

  def timed(self):
    t0 = time.perf_counter()
    res = self._call()
    self._ready(res.tokens)
    return time.perf_counter() - t0, res.to_lists()


class HFSide:
  """transformers greedy ``generate()`` on the left-padded batch (one warm-up call)."""

  def __init__(self, model, prompts, n_new, eos=None):
    import torch
    self._torch = torch
    self.width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), self.width), dtype=torch.long)
    mask = torch.zeros((len(prompts), self.width), dtype=torch.long)
    for i, p in enumerate(prompts):
      ids[i, self.width - len(p):] = torch.tensor(p)
      mask[i, self.width - len(p):] = 1
    kw = dict(attention_mask=mask, max_new_tokens=n_new, do_sample=False,
              pad_token_id=0 if eos is None else eos, eos_token_id=eos)
    if eos is None:
      kw["min_new_tokens"] = n_new
    self._eos = eos
    self._call = lambda: model.generate(ids, **kw)
    self.timed()  # warm-up

  def timed(self):
    with self._torch.inference_mode():
      t0 = time.perf_counter()
      out = self._call()
      dt = time.perf_counter() - t0
    rows = out[:, self.width:].tolist()
    if self._eos is not None:  # cut at the first EOS (padding after it)
      rows = [r[:r.index(self._eos) + 1] if self._eos in r else r for r in rows]
    return dt, rows


def _checkpoint(r: Run):
  """``(path, source, real, tmp)``: the HF directory both sides load, a description, the
  registry model (a real ``--checkpoint``, else None) and the temporary directory of a
  random model (else None)."""
  checkpoint = r.bench.checkpoint
  if checkpoint and not os.path.isdir(checkpoint) and checkpoint != "default":
    from specjax.models import registry
    try:
      real = registry.load_model(checkpoint, dtype="float32")
    except FileNotFoundError as e:
      raise app.UsageError(f"--checkpoint={checkpoint!r}: {e}") from None
    return (real.hf_dir, f"{real.name} (sha256 {real.sha256[:12]}), dequantized float32", real,
            None)
  if checkpoint:
    path = DEFAULT_TARGET if checkpoint == "default" else checkpoint
    if not os.path.isdir(path):
      raise app.UsageError(f"--checkpoint={checkpoint!r}: no directory {path}")
    return path, path, None, None
  tmp = tempfile.TemporaryDirectory()
  random_llama(tmp.name, r.bench, r.seed.seed)
  return tmp.name, "random Llama exported by specjax.models.hf.save_pretrained", None, tmp


def _print_setup(r: Run, source, cfg, hf_model, real, eos, n_new) -> None:
  """The checkpoint, model, library versions, machine and prompts of the run."""
  import jax
  import torch
  import transformers
  print(f"checkpoint: {source}")
  print(f"model: {cfg.model_type} vocab={cfg.vocab_size} hidden={cfg.hidden_size} "
        f"layers={cfg.num_hidden_layers} heads={cfg.num_attention_heads}/"
        f"{cfg.num_key_value_heads} intermediate={cfg.intermediate_size} "
        f"params={cfg.num_params() / 1e6:.2f}M float32")
  print(f"jax {jax.__version__} ({jax.default_backend()}, {jax.device_count()} device), "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads, OMP_WAIT_POLICY="
        f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}), transformers "
        f"{transformers.__version__} (attn={hf_model.config._attn_implementation}), "
        f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}")
  if real is None:
    print(f"prompts: ragged {r.bench.min_prompt}-{r.bench.max_prompt} tokens, max_new_tokens="
          f"{n_new}, greedy, no EOS", end="")
  else:
    print(f"prompts: held-out ShareGPT chat prompts, max_new_tokens={n_new}, greedy, stop at "
          f"EOS {eos}; tokens/s counts generated tokens", end="")
  print(f"; median of {r.timing.repeats} timed calls per side (interleaved) after one warm-up")


def _measure(r: Run, b: int, model, params, hf_model, real, eos, n_new) -> tuple:
  """``(batch, specjax tok/s, transformers tok/s, ratio, specjax first call s, identical,
  identical rows)`` of one batch size, the two sides timed interleaved."""
  prompts = (make_prompts(b, model.config.vocab_size, r.seed.seed, r.bench) if real is None
             else chat_prompts(real, b))
  sj = SpecjaxSide(model, params, prompts, n_new, eos)
  th = HFSide(hf_model, prompts, n_new, eos)
  sj_t, hf_t = [], []
  for _ in range(r.timing.repeats):  # interleaved: both sides see the same machine load
    dt, sj_out = sj.timed()
    sj_t.append(dt)
    dt, hf_out = th.timed()
    hf_t.append(dt)
  sj_s, hf_s = statistics.median(sj_t), statistics.median(hf_t)
  n_same = sum(a == c for a, c in zip(sj_out, hf_out))
  n_tok = sum(len(row) for row in sj_out)
  return b, n_tok / sj_s, n_tok / hf_s, hf_s / sj_s, sj.first_s, sj_out == hf_out, n_same


def _write_record(r: Run, rows: list, source: str, weights: str, stamp: dict) -> None:
  """``--output``: the rows (``_measure``'s tuples, named) with the weights' sha256 and
  the run's provenance (:func:`specjax.provenance.stamped`)."""
  from specjax import provenance
  names = ("batch", "specjax_tokens_per_s", "transformers_tokens_per_s",
           "specjax_over_transformers", "specjax_first_call_s", "identical", "identical_rows")
  record = provenance.stamped({"benchmark": "generate_vs_hf", "checkpoint": source,
                               "max_new_tokens": r.new_tokens.max_new_tokens,
                               "repeats": r.timing.repeats, "threads": r.threads.threads,
                               "rows": [dict(zip(names, row)) for row in rows]},
                              stamp, {"target": weights})
  with open(r.output.output, "w") as f:
    json.dump(record, f, indent=1)
  print(f"wrote {r.output.output}")


def main(argv):
  del argv
  r = Run(*SPECS.build())
  if r.bench.omp_wait_policy:  # read by OpenMP when torch is first imported
    os.environ["OMP_WAIT_POLICY"] = r.bench.omp_wait_policy
  import torch
  import transformers

  from specjax.models import hf

  from specjax import provenance
  stamp = provenance.stamp()
  torch.set_num_threads(r.threads.threads)
  path, source, real, tmp = _checkpoint(r)
  if real is not None:
    model, params = real.model, real.params
  else:
    model, params = hf.load_pretrained(path, dtype="float32")
  hf_model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
  hf_model.generation_config.eos_token_id = None
  eos = model.config.eos_token_id if real is not None else None
  n_new = r.new_tokens.max_new_tokens
  _print_setup(r, source, model.config, hf_model, real, eos, n_new)
  load_before = os.getloadavg()
  rows = [_measure(r, b, model, params, hf_model, real, eos, n_new)
          for b in r.batch_sizes.batch_sizes]
  load_after = os.getloadavg()
  print(f"1-min load average: {load_before[0]:.1f} before, {load_after[0]:.1f} after "
        f"({os.cpu_count()} CPUs; > CPUs means other processes competed for the cores)\n")
  print("| batch | specjax tok/s | transformers tok/s | specjax / transformers | "
        "specjax compile+first call (s) | greedy outputs identical |")
  print("|---:|---:|---:|---:|---:|:---|")
  for b, sj, hft, ratio, comp, same, n_same in rows:
    print(f"| {b} | {sj:.0f} | {hft:.0f} | {ratio:.2f}x | {comp:.1f} | "
          f"{'yes' if same else f'NO ({n_same}/{b} rows)'} |")
  if r.output.output:
    _write_record(r, rows, source, real.path if real is not None else path, stamp)
  if tmp is not None:
    tmp.cleanup()
  if not all(row[5] for row in rows):
    raise SystemExit("greedy outputs differ between specjax and transformers")


if __name__ == "__main__":
  define_flags()
  app.run(main)
