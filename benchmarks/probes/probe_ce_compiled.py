"""Under torch.compile, where the fused linear cross-entropy op beats Inductor's own loss.

``patch(model)`` keeps the causal-LM loss as the ``gpudoctor::linear_cross_entropy`` op under
torch.compile (for its memory: the logits are never whole). On a 2-layer Llama-style step at 512
tokens x 32k vocabulary that cost 0.23 ms a step against the unpatched compiled model (H100,
2026-11-26, benchmarks/BENCHMARKS-kernels.md). This probe times, for several token counts, the loss's forward +
backward four ways: the plain ``F.cross_entropy(F.linear(h, w), t)`` eager and compiled, and the op
eager and compiled; GPU time (the profiler's kernel sum), wall time per call and peak memory above
the inputs.

``PYTHONPATH=src python3 benchmarks/probes/probe_ce_compiled.py OUT_DIR`` writes ``OUT_DIR/ce_compiled.json``
and prints a table.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # benchmarks/: the helpers imported below
from bench_kernels import bench, fwd_bwd, gpu_us, peak_mb

from gpudoctor.kernels.cross_entropy import linear_cross_entropy

DT = torch.bfloat16
VOCAB = 32000
SIZES = [(512, 1024), (2048, 1024), (8192, 1024), (16384, 1024), (8192, 4096)]


def _native(h, w, t):
    return F.cross_entropy(F.linear(h, w), t)


def _op(h, w, t):
    return linear_cross_entropy(h, w, t)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: probe_ce_compiled.py OUT_DIR (a folder for ce_compiled.json)")
    if not torch.cuda.is_available():
        sys.exit("probe_ce_compiled.py needs a CUDA GPU")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for n, hidden in SIZES:
        torch._dynamo.reset()
        h = torch.randn(n, hidden, device="cuda", dtype=DT, requires_grad=True)
        w = (torch.randn(VOCAB, hidden, device="cuda", dtype=DT) * hidden**-0.5).requires_grad_()
        t = torch.randint(0, VOCAB, (n,), device="cuda")
        cands = {
            "native eager": _native,
            "native compiled": torch.compile(_native),
            "op eager": _op,
            "op compiled": torch.compile(_op),
        }
        for name, f in cands.items():
            run = fwd_bwd(f, h, w, t)
            for _ in range(3):  # compiles, autotunes
                run()
            torch.cuda.synchronize()
            row = {
                "tokens": n,
                "hidden": hidden,
                "vocab": VOCAB,
                "what": name,
                "gpu_us": round(gpu_us(run), 1),
                "wall_us": round(bench(run, warmup=5, rep=30) * 1e3, 1),
                "peak_mb": round(peak_mb(run, h, w), 1),
            }
            rows.append(row)
            print(row, flush=True)
    (out / "ce_compiled.json").write_text(
        json.dumps(
            {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
            indent=1,
        )
    )
    print(f"\n{'tokens':>6} {'H':>5} {'what':<16} {'gpu us':>9} {'wall us':>9} {'peak MB':>9}")
    for r in rows:
        print(
            f"{r['tokens']:>6} {r['hidden']:>5} {r['what']:<16} {r['gpu_us']:>9} {r['wall_us']:>9} {r['peak_mb']:>9}"
        )


if __name__ == "__main__":
    main()
