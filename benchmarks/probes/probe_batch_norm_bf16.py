"""Batch norm in training, fp32 (cuDNN) against bf16 input with fp32 weights (what autocast makes).

PyTorch runs batch norm on cuDNN only when neither input nor weight is bfloat16
(aten/src/ATen/native/Normalization.cpp ``_select_batch_norm_backend``); under bf16 autocast a
convolution's bf16 output reaches batch norm (not on autocast's lists) and its native kernels run.
For each shape and memory format: forward and backward time (CUDA events, median of the
repetitions), the kernels each ran (profiler), and the bytes each pass moved over the time.

    python benchmarks/probes/probe_batch_norm_bf16.py [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
from torch import nn

SHAPES = [  # (N, C, H, W): ResNet stages at batch 128 and 32, a U-Net's wide maps, small maps
    (128, 64, 56, 56), (128, 128, 28, 28), (128, 256, 14, 14), (128, 512, 7, 7),
    (32, 64, 112, 112), (32, 256, 28, 28), (16, 32, 256, 256), (64, 64, 32, 32), (256, 16, 32, 32),
]
REPS = 20


def _time(fn, reps: int = REPS) -> float:
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    for s, e in zip(start, end):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end))


def _kernels(fn) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name[:90] for e in prof.events() if e.device_type.name == "CUDA"})


def case(shape, dtype, channels_last: bool) -> dict:
    c = shape[1]
    bn = nn.BatchNorm2d(c).cuda()
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(shape, device="cuda", dtype=dtype).contiguous(memory_format=fmt).requires_grad_()
    y = bn(x)
    g = torch.randn_like(y)

    def fwd():
        bn(x)

    def bwd():
        torch.autograd.grad(y, (x, bn.weight, bn.bias), g, retain_graph=True)

    numel = x.numel()
    elt = x.element_size()
    fwd_ms, bwd_ms = _time(fwd), _time(bwd)
    return {
        "shape": list(shape), "dtype": str(dtype).removeprefix("torch."),
        "channels_last": channels_last, "fwd_ms": round(fwd_ms, 4), "bwd_ms": round(bwd_ms, 4),
        # a forward reads x twice (statistics, then normalise) and writes y; a backward reads x and
        # dy twice and writes dx: the passes' bytes over the time
        "fwd_gbps": round(3 * numel * elt / fwd_ms / 1e6, 1),
        "bwd_gbps": round(5 * numel * elt / bwd_ms / 1e6, 1),
        "fwd_kernels": _kernels(fwd), "bwd_kernels": _kernels(bwd),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json")
    opts = parser.parse_args()
    rows = []
    for shape in SHAPES:
        for channels_last in (False, True):
            fp32 = case(shape, torch.float32, channels_last)
            bf16 = case(shape, torch.bfloat16, channels_last)
            rows.append({"fp32": fp32, "bf16": bf16,
                         "fwd_ratio": round(bf16["fwd_ms"] / fp32["fwd_ms"], 3),
                         "bwd_ratio": round(bf16["bwd_ms"] / fp32["bwd_ms"], 3)})
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version()}
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    print(meta)
    print(f"{'shape':22} {'fmt':5} {'fp32 fwd':>9} {'bf16 fwd':>9} {'ratio':>6} "
          f"{'fp32 bwd':>9} {'bf16 bwd':>9} {'ratio':>6}  kernels fp32 / bf16 (fwd)")
    for r in rows:
        a, b = r["fp32"], r["bf16"]
        print(f"{tuple(a['shape'])!s:22} {'NHWC' if a['channels_last'] else 'NCHW':5} "
              f"{a['fwd_ms']:9.4f} {b['fwd_ms']:9.4f} {r['fwd_ratio']:6.2f} "
              f"{a['bwd_ms']:9.4f} {b['bwd_ms']:9.4f} {r['bwd_ratio']:6.2f}  "
              f"{a['fwd_kernels'][0][:28]} / {b['fwd_kernels'][0][:28]}")


if __name__ == "__main__":
    main()
