"""Where the CPU time of one fused-norm forward + backward goes (the wall-clock side of the kernels
tables, benchmarks/BENCHMARKS-kernels.md): ``python benchmarks/probes/probe_cpu_cost.py OUT_DIR`` on a GPU runs rms_norm and layer_norm
forward + backward in a loop under cProfile and prints the functions that take the most CPU time,
next to the per-call wall time of the same loop and of PyTorch's own ops."""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # benchmarks/: the helpers imported below
from tune_norms import cpu_us

from gpudoctor.kernels._layer_norm import layer_norm
from gpudoctor.kernels._rms_norm import rms_norm


def main() -> None:
    out = Path(sys.argv[1])
    m, h = 2048, 4096
    x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
    cands = {
        "rms_norm": lambda: rms_norm(x, w, 1e-6).backward(dy),
        "F.rms_norm": lambda: F.rms_norm(x, (h,), w, 1e-6).backward(dy),
        "layer_norm": lambda: layer_norm(x, w, b, 1e-5).backward(dy),
        "F.layer_norm": lambda: F.layer_norm(x, (h,), w, b, 1e-5).backward(dy),
        "rms_norm forward only": lambda: rms_norm(x.detach(), w.detach(), 1e-6),
        "F.rms_norm forward only": lambda: F.rms_norm(x.detach(), (h,), w.detach(), 1e-6),
    }
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "shape": [m, h],
        "loop_us": {k: round(cpu_us(f), 1) for k, f in cands.items()},
        "profiles": {},
    }
    for name in ("rms_norm", "layer_norm"):
        prof = cProfile.Profile()
        fn = cands[name]
        prof.enable()
        for _ in range(300):
            fn()
        torch.cuda.synchronize()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
        result["profiles"][name] = s.getvalue()
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu_cost.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["loop_us"], indent=1))
    for name, text in result["profiles"].items():
        print("==", name)
        print("\n".join(text.splitlines()[:40]))


if __name__ == "__main__":
    main()
