"""Where the native PyTorch op beats the fused norm kernels: the size thresholds below which
``rms_norm`` (torch.nn.RMSNorm's casting) and ``layer_norm`` hand the call to ``F.rms_norm`` /
``F.layer_norm`` (``NATIVE_BELOW``).

``python benchmarks/probes/probe_native_threshold.py OUT_DIR`` times forward + backward GPU time (the
profiler's kernel sum, ``bench_kernels.gpu_us``) of the kernel forced on (the threshold set to 0),
the native op and, if installed, Liger-Kernel, at sizes from 64K to 4M elements and widths 256 to
16384, bf16; writes ``OUT_DIR/native_threshold.json`` and prints a table.
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
from bench_kernels import fwd_bwd, gpu_us, liger

import gpudoctor.kernels._layer_norm as ln_mod
import gpudoctor.kernels._rms_norm as rms_mod

DT = torch.bfloat16
SHAPES = [
    (m, h)
    for h in (256, 1024, 4096, 8192, 16384)
    for m in (2**16 // h, 2**18 // h, 2**20 // h, 2**21 // h)
    if m >= 1
] + [(256, 256), (128, 16384), (256, 8192)]


def main() -> None:
    out = Path(sys.argv[1])
    rms_mod.NATIVE_BELOW = ()
    ln_mod.NATIVE_BELOW = ()
    have_liger = liger()
    rows = []
    for m, h in sorted(set(SHAPES), key=lambda s: (s[0] * s[1], s[1])):
        x = torch.randn(m, h, device="cuda", dtype=DT, requires_grad=True)
        w = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
        b = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
        cands = {
            "rms kernel": lambda x, w, b: rms_mod.rms_norm(x, w, 1e-6, casting="gemma"),
            "rms native": lambda x, w, b, h=h: F.rms_norm(x, (h,), w, 1e-6),
            "ln kernel": lambda x, w, b: ln_mod.layer_norm(x, w, b, 1e-5),
            "ln native": lambda x, w, b, h=h: F.layer_norm(x, (h,), w, b, 1e-5),
        }
        if have_liger:
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction

            cands["rms liger"] = lambda x, w, b: LigerRMSNormFunction.apply(
                x, w, 1e-6, 0.0, "llama", False
            )
            cands["ln liger"] = lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5)
        row = {"M": m, "H": h, "elements": m * h}
        for name, f in cands.items():
            row[name] = round(gpu_us(fwd_bwd(f, x, w, b)), 1)
        rows.append(row)
        print(row, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}
    (out / "native_threshold.json").write_text(json.dumps(info, indent=1))
    print(
        "| M x H | elements | rms kernel | rms native | rms liger | ln kernel | ln native | ln liger |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['M']} x {r['H']} | {r['elements']} | {r['rms kernel']} | {r['rms native']} | "
            f"{r.get('rms liger', '-')} | {r['ln kernel']} | {r['ln native']} | {r.get('ln liger', '-')} |"
        )


if __name__ == "__main__":
    main()
