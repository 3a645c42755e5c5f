"""What does bf16 autocast cost the host, operator by operator, and what does it do to the
convolutions whose fp32 kernels cuDNN runs far below their roof?

Host-bound programs measured 23-31% slower under the bf16-autocast knob where the replay priced
5-10% (benchmarks/BENCHMARKS-replay.md "The casts autocast adds, counted from the operators"). The
casts the replay now counts explain DistilBERT's; a DCGAN launches few. This probe times, at sizes
where the host is the step (tiny tensors, no sync inside the timed loop), one training step
(forward, backward) of small blocks in fp32 and under ``torch.autocast("cuda", torch.bfloat16)``:

- ``linear_data``: a Linear on the data; ``ln_linear``: LayerNorm then Linear; ``mlp``: Linear,
  GELU, Linear; ``conv_bn_relu``: Conv2d (no bias), BatchNorm2d, ReLU, NCHW; ``conv_bn_relu_cl``:
  the same channels_last; ``convt_bn_relu``: ConvTranspose2d, BatchNorm2d, ReLU; ``layer_norm``,
  ``softmax``, ``eltwise`` (add, mul, relu: operators autocast passes through), ``embedding``,
  ``bmm`` (two activations), ``sdpa``.

For each: host microseconds a step (median of repeats), kernels launched a step (one profiled step),
fp32 and autocast; the difference in launches and in microseconds, and the microseconds per extra
launch against the fp32 step's microseconds per launch.

``--gpu`` adds the GPU side at a real size: a ConvNeXt block's depthwise 7x7 convolution (groups =
channels) and a 3-channel 4x4 stride-4 stem, forward and backward, fp32 (TF32 as cuDNN defaults)
against bf16: GPU time per step from the profiler, by kernel.

    python benchmarks/probes/probe_autocast_host.py [--steps 400] [--gpu] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

Case = tuple[nn.Module, Callable[[nn.Module], torch.Tensor]]


def cases() -> dict[str, Case]:
    dev = "cuda"
    x2 = torch.randn(8, 64, device=dev)
    x3 = torch.randn(4, 16, 64, device=dev, requires_grad=True)
    img = torch.randn(4, 8, 8, 8, device=dev)
    ids = torch.randint(0, 1000, (8, 16), device=dev)

    def on(x: torch.Tensor) -> Callable[[nn.Module], torch.Tensor]:
        return lambda m: m(x).float().sum()

    class Bmm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(64, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q = self.proj(x)
            return q @ q.transpose(-2, -1)

    class Sdpa(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(64, 192)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, k, v = self.qkv(x).view(4, 16, 3, 4, 16).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v)

    class Eltwise(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(64))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(x * self.w + x)

    class Softmax(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(64))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x * self.w).softmax(-1)

    return {
        "linear_data": (nn.Linear(64, 64).to(dev), on(x2)),
        "ln_linear": (nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 64)).to(dev), on(x3)),
        "mlp": (nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)).to(dev), on(x3)),
        "conv_bn_relu": (
            nn.Sequential(
                nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()
            ).to(dev),
            on(img),
        ),
        "conv_bn_relu_cl": (
            nn.Sequential(nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
            .to(dev)
            .to(memory_format=torch.channels_last),
            on(img.to(memory_format=torch.channels_last)),
        ),
        "convt_bn_relu": (
            nn.Sequential(
                nn.ConvTranspose2d(8, 16, 4, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()
            ).to(dev),
            on(img),
        ),
        "layer_norm": (nn.LayerNorm(64).to(dev), on(x3)),
        "softmax": (Softmax().to(dev), on(x3)),
        "eltwise": (Eltwise().to(dev), on(x3)),
        "embedding": (nn.Embedding(1000, 64).to(dev), on(ids)),
        "bmm": (Bmm().to(dev), on(x3)),
        "sdpa": (Sdpa().to(dev), on(x3)),
    }


def step(model: nn.Module, loss_of: Callable[[nn.Module], torch.Tensor], autocast: bool) -> None:
    with torch.autocast("cuda", torch.bfloat16, enabled=autocast):
        loss = loss_of(model)
    loss.backward()


def host_us(
    model: nn.Module,
    loss_of: Callable[[nn.Module], torch.Tensor],
    autocast: bool,
    steps: int,
    repeats: int = 5,
) -> float:
    for _ in range(30):
        step(model, loss_of, autocast)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step(model, loss_of, autocast)
        times.append((time.perf_counter() - t0) / steps * 1e6)
        torch.cuda.synchronize()
    return statistics.median(times)


def kernels(
    model: nn.Module,
    loss_of: Callable[[nn.Module], torch.Tensor],
    autocast: bool,
    by_name: bool = False,
) -> dict[str, float] | int:
    from torch.profiler import ProfilerActivity, profile

    step(model, loss_of, autocast)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step(model, loss_of, autocast)
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not by_name:
        return len(events)
    out: dict[str, float] = {}
    for e in events:
        out[e.name[:90]] = out.get(e.name[:90], 0.0) + e.device_time_total
    return out


def gpu_cases() -> dict[str, Case]:
    dev = "cuda"
    dw = nn.Conv2d(128, 128, 7, padding=3, groups=128).to(dev)
    stem = nn.Conv2d(3, 64, 4, stride=4).to(dev)
    x_dw = torch.randn(128, 128, 32, 32, device=dev, requires_grad=True)
    x_stem = torch.randn(128, 3, 128, 128, device=dev)
    return {
        "depthwise7x7": (dw, lambda m: m(x_dw).float().sum()),
        "stem3ch": (stem, lambda m: m(x_stem).float().sum()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--out", default=None)
    opts = ap.parse_args()
    rows = []
    for name, (model, loss_of) in cases().items():
        row: dict[str, object] = {"case": name}
        for mode, ac in (("fp32", False), ("bf16", True)):
            row[f"{mode}_us"] = round(host_us(model, loss_of, ac, opts.steps), 2)
            row[f"{mode}_kernels"] = kernels(model, loss_of, ac)
        extra = int(row["bf16_kernels"]) - int(row["fp32_kernels"])  # type: ignore[arg-type]
        more_us = float(row["bf16_us"]) - float(row["fp32_us"])  # type: ignore[arg-type]
        row["extra_kernels"] = extra
        row["extra_us"] = round(more_us, 2)
        row["fp32_us_per_kernel"] = round(
            float(row["fp32_us"]) / max(int(row["fp32_kernels"]), 1), 2
        )  # type: ignore[arg-type]
        rows.append(row)
    gpu_rows = []
    if opts.gpu:
        for name, (model, loss_of) in gpu_cases().items():
            for mode, ac in (("fp32", False), ("bf16", True)):
                by = kernels(model, loss_of, ac, by_name=True)
                assert isinstance(by, dict)
                gpu_rows.append(
                    {
                        "case": name,
                        "mode": mode,
                        "gpu_us": round(sum(by.values()), 1),
                        "kernels": {
                            k: round(v, 1) for k, v in sorted(by.items(), key=lambda kv: -kv[1])[:6]
                        },
                    }
                )
    meta = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "steps": opts.steps,
    }
    if opts.out:
        with open(opts.out, "w") as f:
            json.dump({"meta": meta, "host": rows, "gpu": gpu_rows}, f, indent=1)
    print(json.dumps(meta))
    print(
        f"{'case':16} {'fp32 us':>8} {'bf16 us':>8} {'k fp32':>6} {'k bf16':>6} {'+k':>4} "
        f"{'+us':>7} {'us/k fp32':>9}"
    )
    for r in rows:
        print(
            f"{r['case']:16} {r['fp32_us']:8.1f} {r['bf16_us']:8.1f} {r['fp32_kernels']:6} "
            f"{r['bf16_kernels']:6} {r['extra_kernels']:4} {r['extra_us']:7.1f} "
            f"{r['fp32_us_per_kernel']:9.1f}"
        )
    for g in gpu_rows:
        print(
            f"{g['case']:14} {g['mode']:5} gpu {g['gpu_us']:9.1f} us  "
            + "; ".join(f"{k[:40]} {v}" for k, v in list(g["kernels"].items())[:3])
        )


if __name__ == "__main__":
    main()
