"""Tune and check the fused norms on one GPU: correctness of the cached launcher, CPU cost per call,
and GPU kernel time over TILE_ELEMENTS x BACKWARD_WARPS_PER_SM.

``python benchmarks/tune_norms.py OUT_DIR`` writes ``OUT_DIR/tune_norms.json`` and prints a table.
GPU time is the sum of the kernels' own durations in a torch.profiler trace (launch gaps excluded),
so it says how close a kernel comes to the HBM ceiling whatever the CPU in front of it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from bench_kernels import gpu_us  # benchmarks/ is on sys.path when run as a script

import gpudoctor.kernels._layer_norm as ln_mod
import gpudoctor.kernels._rms_norm as rms_mod

DT = torch.bfloat16


def cpu_us(fn, n: int = 300) -> float:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    out = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return out


def fwd_bwd(f, x, w, b, dy):
    def run():
        x.grad = w.grad = None
        if b is not None:
            b.grad = None
        torch.autograd.backward(f(x, w, b), dy)

    return run


def hf_rms(x, w, eps=1e-6):
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def check_correctness() -> list[dict]:
    """Every launch path against the native math: first call (compiles), second call (cached
    launch), misaligned and strided views (another specialization), fp32/bf16/fp16, odd widths."""
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for m, h in ((1, 1), (37, 100), (300, 4095), (64, 11008), (8, 40000), (1000, 256)):
            base = torch.randn(m, h + 3, device="cuda", dtype=dtype, generator=g)
            for view in ("contiguous", "misaligned", "contiguous-again"):
                x = base[:, 1 : h + 1] if view == "misaligned" else base[:, :h].contiguous()
                x = x.detach().requires_grad_(True)
                w = (
                    1 + 0.1 * torch.randn(h, device="cuda", dtype=dtype, generator=g)
                ).requires_grad_(True)
                b = (0.1 * torch.randn(h, device="cuda", dtype=dtype, generator=g)).requires_grad_(
                    True
                )
                dy = torch.randn(m, h, device="cuda", dtype=dtype, generator=g)
                for op, ours, ref in (
                    (
                        "rms",
                        lambda x, w, b: rms_mod.rms_norm(x, w, 1e-6),
                        lambda x, w, b: rms_mod._rms_norm_native(x, w, 1e-6, 0.0, True),
                    ),
                    (
                        "ln",
                        lambda x, w, b: ln_mod.layer_norm(x, w, b, 1e-5),
                        lambda x, w, b, h=h: F.layer_norm(x, (h,), w, b, 1e-5),
                    ),
                ):
                    errs = []
                    for f in (ours, ref):
                        xs, ws, bs = (
                            t.detach().requires_grad_(True) for t in (x, w, b)
                        )  # views kept as views
                        y = f(xs, ws, bs)
                        y.backward(dy)
                        errs.append(
                            [
                                y.float(),
                                xs.grad.float(),
                                ws.grad.float(),
                                bs.grad.float() if bs.grad is not None else None,
                            ]
                        )
                    worst = 0.0
                    for a, r in zip(*errs):
                        if a is None or r is None:
                            continue
                        scale = r.abs().max().item() or 1.0
                        worst = max(worst, (a - r).abs().max().item() / scale)
                    rows.append(
                        {
                            "op": op,
                            "dtype": str(dtype),
                            "M": m,
                            "H": h,
                            "view": view,
                            "max_rel_err": worst,
                        }
                    )
    return rows


def launch_costs() -> dict:
    x = torch.randn(256, 4096, device="cuda", dtype=DT)
    w = torch.randn(4096, device="cuda", dtype=DT)
    xg = x.clone().requires_grad_(True)
    wg = w.clone().requires_grad_(True)
    nn_rms = torch.nn.RMSNorm(4096, device="cuda", dtype=DT)
    y = torch.empty_like(x)
    rstd = torch.empty(256, device="cuda", dtype=torch.float32)
    block, single = rms_mod.tile_block(4096, 2)
    rows = rms_mod.rows_per_tile(block, single, 256)
    kw = {
        "BLOCK": block,
        "ROWS": rows,
        "SINGLE": single,
        "LLAMA": True,
        "num_warps": rms_mod.warps_for(rows * block),
    }
    args = (x, w, y, rstd, 4096, 4096, 256, 4096, 1e-6, 0.0)
    grid = (-(-256 // rows),)
    dy = torch.randn_like(x)
    return {
        "triton kernel[grid](...)": cpu_us(lambda: rms_mod._rms_norm_fwd[grid](*args, **kw)),
        "Launcher (cached)": cpu_us(lambda: rms_mod._launch_fwd(grid, *args, **kw)),
        "rms_norm fwd, no grad": cpu_us(lambda: rms_mod.rms_norm(x, w)),
        "torch.nn.RMSNorm fwd, no grad": cpu_us(lambda: nn_rms(x)),
        "rms_norm fwd+bwd": cpu_us(
            fwd_bwd(lambda a, b_, c: rms_mod.rms_norm(a, b_), xg, wg, None, dy)
        ),
        "torch.nn.RMSNorm fwd+bwd": cpu_us(fwd_bwd(lambda a, b_, c: nn_rms(a), xg, wg, None, dy)),
    }


def overheads() -> dict:
    """CPU per call of the pieces a fused norm's Python wrapper is made of."""
    from gpudoctor.kernels._common import _specialization, check_same, check_tensor, use_triton

    x = torch.randn(256, 4096, device="cuda", dtype=DT)
    w = torch.randn(4096, device="cuda", dtype=DT)
    block, single = rms_mod.tile_block(4096, 2)
    rows = rms_mod.rows_per_tile(block, single, 256)
    y = torch.empty_like(x)
    rstd = torch.empty(256, device="cuda", dtype=torch.float32)
    args = (x, w, y, rstd, 4096, 4096, 256, 4096, 1e-6, 0.0)
    launcher = rms_mod._launch_fwd
    values = (block, rows, single, True)
    key = (x.device.index, rms_mod.warps_for(rows * block), values, *map(_specialization, args))
    compiled = launcher.cache[key]  # launch_costs() ran this exact launch

    class Nothing(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a

        @staticmethod
        def backward(ctx, g):
            return g

    return {
        "checks": cpu_us(
            lambda: (
                check_tensor("x", x, min_dims=1),
                check_tensor("weight", w, dims=1),
                check_same("x", x, weight=w),
                use_triton(x, w),
            )
        ),
        "torch.empty x2": cpu_us(
            lambda: (
                torch.empty((256, 4096), dtype=DT, device=x.device),
                torch.empty(256, dtype=torch.float32, device=x.device),
            )
        ),
        "reshape + stride": cpu_us(lambda: x.reshape(-1, 4096).stride(1)),
        "autograd.Function.apply (identity)": cpu_us(lambda: Nothing.apply(x)),
        "launcher key": cpu_us(lambda: (x.device.index, *map(_specialization, args))),
        "compiled[grid](...)": cpu_us(lambda: compiled[(64, 1, 1)](*args, *values)),
        "compiled.run(...) direct": cpu_us(
            lambda: compiled.run(
                64,
                1,
                1,
                torch.cuda.current_stream().cuda_stream,
                compiled.function,
                compiled.packed_metadata,
                None,
                None,
                None,
                *args,
                *values,
            )
        ),
        "torch.mul (one kernel)": cpu_us(lambda: torch.mul(x, x)),
        "F.rms_norm(x, None)": cpu_us(lambda: F.rms_norm(x, (4096,), None, 1e-6)),
    }


def native_fast() -> list[dict]:
    """GPU and wall time of the native fallback candidate F.rms_norm(x, None) * w (llama casting)."""
    rows = []
    for h, m in ((1024, 256), (4096, 256), (4096, 2048), (1024, 8192)):
        x = torch.randn(m, h, device="cuda", dtype=DT, requires_grad=True)
        w = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
        dy = torch.randn(m, h, device="cuda", dtype=DT)
        nn_rms = torch.nn.RMSNorm(h, eps=1e-6, device="cuda", dtype=DT)
        for name, f in (
            ("F.rms_norm(x, None) * w", lambda x, w, b, h=h: F.rms_norm(x, (h,), None, 1e-6) * w),
            ("torch.nn.RMSNorm", lambda x, w, b, f=nn_rms: f(x)),
            ("rms ours", lambda x, w, b: rms_mod.rms_norm(x, w, 1e-6)),
        ):
            run = fwd_bwd(f, x, w, None, dy)
            rows.append(
                {"op": name, "H": h, "M": m, "gpu_us": gpu_us(run), "cpu_us": cpu_us(run, 100)}
            )
    return rows


def ln_wide() -> list[dict]:
    """LayerNorm at H = 16384 bf16: one block (warps 16, 32) or the column loop (blocks 4096, 8192)."""
    rows = []
    h, m = 16384, 512
    x = torch.randn(m, h, device="cuda", dtype=DT, requires_grad=True)
    w = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
    b = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
    dy = torch.randn(m, h, device="cuda", dtype=DT)
    run = fwd_bwd(lambda x, w, b: ln_mod.layer_norm(x, w, b, 1e-5), x, w, b, dy)
    saved = (rms_mod.MAX_FUSED_BYTES, rms_mod.LOOP_BLOCK, rms_mod.warps_for)
    for fused, loop, warps in (
        (32768, 8192, 32),
        (32768, 8192, 16),
        (16384, 8192, None),
        (16384, 4096, None),
    ):
        rms_mod.MAX_FUSED_BYTES, rms_mod.LOOP_BLOCK = fused, loop
        ln_mod.warps_for = (lambda blk, w_=warps: w_) if warps else saved[2]
        rows.append(
            {"max_fused_bytes": fused, "loop_block": loop, "warps": warps, "gpu_us": gpu_us(run)}
        )
    rms_mod.MAX_FUSED_BYTES, rms_mod.LOOP_BLOCK = saved[:2]
    ln_mod.warps_for = saved[2]
    return rows


def sweep() -> list[dict]:
    rows = []
    shapes = [(h, (2**23) // h) for h in (256, 1024, 4096, 8192, 16384)]
    shapes += [(h, (2**25) // h) for h in (1024, 4096)]
    for h, m in shapes:
        x = torch.randn(m, h, device="cuda", dtype=DT, requires_grad=True)
        w = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
        b = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
        dy = torch.randn(m, h, device="cuda", dtype=DT)
        nn_rms = torch.nn.RMSNorm(h, eps=1e-6, device="cuda", dtype=DT)
        nn_ln = torch.nn.LayerNorm(h, eps=1e-5, device="cuda", dtype=DT)
        base = {
            "rms torch.nn.RMSNorm": lambda x, w, b, f=nn_rms: f(x),
            "ln torch.nn.LayerNorm": lambda x, w, b, f=nn_ln: f(x),
        }
        for name, f in base.items():
            rows.append({"op": name, "H": h, "M": m, "gpu_us": gpu_us(fwd_bwd(f, x, w, b, dy))})
        for tile in (4096, 8192):
            for warps in (4, 8, 16):
                rms_mod.TILE_ELEMENTS = tile
                rms_mod.BACKWARD_WARPS_PER_SM = warps
                for name, f in (
                    ("rms ours", lambda x, w, b: rms_mod.rms_norm(x, w, 1e-6)),
                    ("ln ours", lambda x, w, b: ln_mod.layer_norm(x, w, b, 1e-5)),
                ):
                    rows.append(
                        {
                            "op": name,
                            "H": h,
                            "M": m,
                            "tile": tile,
                            "bwd_warps_per_sm": warps,
                            "gpu_us": gpu_us(fwd_bwd(f, x, w, b, dy)),
                        }
                    )
        del x, w, b, dy
        torch.cuda.empty_cache()
    return rows


def copy_ceiling() -> float:
    """HBM bytes/s of a 1 GiB device-to-device copy (read + write), timed the same way."""
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return 2 * src.numel() / (gpu_us(lambda: dst.copy_(src)) / 1e6)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ceiling = copy_ceiling()
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "hbm_copy_bytes_per_s": ceiling,
        "correctness": check_correctness(),
        "launch_cpu_us": launch_costs(),
    }
    result["overheads_cpu_us"] = overheads()
    result["native_fast"] = native_fast()
    result["ln_wide"] = ln_wide()
    result["sweep"] = sweep()
    for r in result["sweep"]:
        r["hbm_pct"] = round(100 * 5 * r["M"] * r["H"] * 2 / (r["gpu_us"] / 1e6) / ceiling, 1)
    (out / "tune_norms.json").write_text(json.dumps(result, indent=1))
    worst = max(result["correctness"], key=lambda r: r["max_rel_err"])
    print(
        f"{result['device']}  HBM copy ceiling {ceiling / 1e12:.2f} TB/s; worst relative error {worst}"
    )
    for r in result["native_fast"] + result["ln_wide"]:
        print("  ", r)
    for k, v in {**result["launch_cpu_us"], **result["overheads_cpu_us"]}.items():
        print(f"  {k:34s} {v:7.1f} us CPU")
    for r in result["sweep"]:
        print(
            f"  {r['op']:22s} H={r['H']:6d} M={r['M']:7d} tile={r.get('tile', '-')!s:5s} "
            f"w={r.get('bwd_warps_per_sm', '-')!s:3s} {r['gpu_us']:8.1f} us  {r['hbm_pct']:5.1f}%"
        )


if __name__ == "__main__":
    main()
