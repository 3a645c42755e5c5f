"""Live tensor memory of one prefill or one decode step of an arch-sweep generation case, on CPU.

``python benchmarks/probes/probe_gen_live.py NAME BATCH PROMPT {prefill,decode} [JSON_OVERRIDES]``, NAME a
generation run of ``benchmarks/results/memory-arch-h100-2026-11-25.json`` (its transformers config).
It prints the peak of bytes alive in storages that ops made during the forward (weights and
inputs excluded), where it happened, and the largest tensors alive then: the traces behind the
MoE and MLA terms of ``memory/inference.py``.

What a CPU trace cannot show is stood in for the way the GPU runs it:

* ``F.scaled_dot_product_attention`` is replaced by an op that only allocates its output, as the
  memory-efficient kernel a CUDA device runs for MLA's 192/128 head dims holds no score matrix
  (the CPU falls back to the math path, which does);
* ``generate`` switches the experts to ``batched_mm`` for decoding on a GPU only
  (``_optimize_model_for_decode``): the decode mode sets it as that would.
"""

from __future__ import annotations

import json
import sys
import traceback
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

RESULTS = Path(__file__).resolve().parent.parent / "results" / "memory-arch-h100-2026-11-25.json"


class LiveBytes(TorchDispatchMode):
    """Counts each storage an op creates until the last tensor viewing it is gone."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.current = self.peak = 0
        self.at: tuple = ()

    def _release(self, key: int) -> None:
        self.refs[key] -= 1
        if not self.refs[key]:
            del self.refs[key]
            self.current -= self.size.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        inputs = {
            a.untyped_storage().data_ptr()
            for a in tree_flatten((args, kwargs))[0]
            if isinstance(a, torch.Tensor)
        }
        out = func(*args, **(kwargs or {}))
        for t in (x for x in tree_flatten(out)[0] if isinstance(x, torch.Tensor)):
            st = t.untyped_storage()
            key = st.data_ptr()
            if not st.nbytes() or (key not in self.refs and key in inputs):
                continue  # a view or an in-place result of an input: no new memory
            if key not in self.refs:
                self.refs[key], self.size[key] = 0, st.nbytes()
                self.current += st.nbytes()
            self.refs[key] += 1
            weakref.finalize(t, self._release, key)
        if self.current > self.peak:
            self.peak = self.current
            frames = [f for f in traceback.extract_stack() if "transformers" in f.filename][-2:]
            self.at = (
                str(func),
                [f"{Path(f.filename).name}:{f.lineno} {f.line}" for f in frames],
                sorted(self.size.values(), reverse=True)[:12],
            )
        return out


def _output_only(q, k, v, *args, **kwargs):
    return q.new_empty(q.shape[:-1] + (v.shape[-1],))


def main(argv: list[str]) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM, DynamicCache

    name, batch, prompt, mode = argv[0], int(argv[1]), int(argv[2]), argv[3]
    run = next(r for r in json.loads(RESULTS.read_text()) if r.get("name") == name)
    cfg = {k: v for k, v in run["config"].items() if k not in ("transformers_version", "dtype")}
    cfg.update(json.loads(argv[4]) if len(argv) > 4 else {})
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    F.scaled_dot_product_attention = _output_only
    ids = torch.randint(0, config.vocab_size, (batch, prompt))
    live = LiveBytes()
    with torch.no_grad():
        cache = DynamicCache(config=config)
        if mode == "prefill":
            with live:
                model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        else:
            out = model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
            if hasattr(model, "set_experts_implementation") and getattr(
                config, "_experts_implementation", None
            ):
                model.set_experts_implementation("batched_mm")
            with live:
                model(
                    input_ids=out.logits.argmax(-1), cache=cache, use_cache=True, logits_to_keep=1
                )
    func, where, largest = live.at
    print(f"{name} {mode} batch {batch} prompt {prompt}: peak {live.peak:,} B live at {func}")
    print("  " + "\n  ".join(where))
    print("  largest alive then: " + ", ".join(f"{n:,}" for n in largest))


if __name__ == "__main__":
    if len(sys.argv) < 5 or sys.argv[4] not in ("prefill", "decode"):
        sys.exit(__doc__.split("\n\n")[1].strip())
    main(sys.argv[1:])
