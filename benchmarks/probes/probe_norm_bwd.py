"""The norms' backward, measured piece by piece on a GPU: the weight-gradient stage two (PyTorch's
``partials.sum(0).to(dtype)``, two kernels per gradient, against the one-launch ``_sum_partials`` at a
few tile shapes), the single-block backward with and without the next tile's loads issued early
(``PREFETCH``), and each forward + backward beside the size-matched elementwise floor (``y.copy_(x)``
plus ``torch.add(x, dy, out=dx)``: the same bytes in the same passes).

``python benchmarks/probes/probe_norm_bwd.py OUT_DIR [--parts stage2,full,loops] [--shapes H:M,...]`` writes
``OUT_DIR/probe_norm_bwd.json`` and prints tables (``loops``: register prefetch against Triton's
pipelining of the backward's tile loop). GPU time is ``bench_kernels.gpu_us``: the sum of the kernels'
durations in a profiler trace.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # benchmarks/: the helpers imported below
from bench_kernels import floor_call, fwd_bwd, gpu_events, gpu_us
from tune_norms import copy_ceiling

import gpudoctor.kernels._layer_norm as ln_mod
import gpudoctor.kernels._rms_norm as rms_mod

DT = torch.bfloat16
SHAPES = [(m, h) for h in (256, 1024, 4096, 8192, 16384) for m in ((2**23) // h, (2**25) // h)]
# (SUM_COLS, SUM_ROWS, SUM_WARPS) tried for the stage-two kernel
SUM_CONFIGS = [
    (16, 128, 4),
    (32, 64, 4),
    (32, 128, 4),
    (64, 64, 4),
    (64, 32, 4),
    (128, 32, 4),
    (32, 256, 8),
    (256, 16, 4),
]


def per_kernel_us(fn, iters: int = 10) -> dict:
    """GPU us per call of each kernel name (the first 60 characters) the call runs."""
    out: dict = {}
    for e in gpu_events(fn, iters):
        name = e.get("name", "?")[:60]
        out[name] = out.get(name, 0.0) + e.get("dur", 0) / iters
    return {k: round(v, 2) for k, v in out.items()}


def partial_shape(op: str, m: int, h: int) -> tuple[int, int]:
    """(partial rows, H) that the backward of an [m, h] bf16 input hands to stage two."""
    block, single = rms_mod.tile_block(h, 2)
    tile = rms_mod.TILE_ELEMENTS
    if op == "ln":
        tile, max_elements = ln_mod.BACKWARD_TILE_ELEMENTS.get(block, (ln_mod.TILE_ELEMENTS, 0))
        tile = tile if m * h <= max_elements else ln_mod.TILE_ELEMENTS
    rows = rms_mod.rows_per_tile(block, single, m, tile)
    n_tiles = -(-m // rows)
    programs, per = rms_mod.grid_programs(
        torch.device("cuda", torch.cuda.current_device()), n_tiles, rms_mod.warps_for(rows * block)
    )
    if op == "ln" and (
        not single or (block >= ln_mod.SPLIT_MIN_BLOCK and per > ln_mod.FUSED_WIDE_MAX_TILES)
    ):
        col_blocks = -(-h // ln_mod.SPLIT_COLS)
        row_blocks = -(-m // ln_mod.SPLIT_ROWS)
        chunks = max(
            1,
            min(
                row_blocks,
                rms_mod.resident_programs(torch.device("cuda"), ln_mod.SPLIT_WARPS) // col_blocks,
            ),
        )
        per = -(-row_blocks // chunks) * ln_mod.SPLIT_ROWS
        programs = -(-m // per)
    return programs, h


KERNEL_SUM_ROWS = rms_mod.sum_rows


def torch_sum_rows(parts):
    """Stage two as it was before the kernel: ``partials.sum(0).to(dtype)``, two kernels a gradient."""
    return [p.sum(0).to(dtype) for p, dtype in parts]


def set_sum(config) -> None:
    """Stage two through PyTorch (None) or the kernel at (SUM_COLS, SUM_ROWS, SUM_WARPS)."""
    rms_mod.sum_rows = ln_mod.sum_rows = torch_sum_rows if config is None else KERNEL_SUM_ROWS
    if config is not None:
        rms_mod.SUM_COLS, rms_mod.SUM_ROWS, rms_mod.SUM_WARPS = config


def stage_two() -> tuple[list[dict], tuple]:
    """Stage two alone over the partial buffers the benchmark shapes produce: GPU us per config, and
    how its result compares with PyTorch's two kernels (bf16: elements that differ, at most 1 ulp)."""
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    cases = sorted({(op, *partial_shape(op, m, h)) for op in ("rms", "ln") for m, h in SHAPES})
    totals: dict = {}
    for op, n_parts, h in cases:
        bufs = [
            torch.randn(n_parts, h, device="cuda", generator=g) * 3
            for _ in range(1 if op == "rms" else 2)
        ]
        parts = [(b, DT) for b in bufs]
        set_sum(None)
        ref = rms_mod.sum_rows(parts)
        exact = [b.double().sum(0) for b in bufs]
        row = {
            "op": op,
            "partial_rows": n_parts,
            "H": h,
            "torch_us": round(gpu_us(lambda p=parts: rms_mod.sum_rows(p)), 2),
        }
        totals.setdefault(None, 0.0)
        totals[None] += row["torch_us"]
        for config in SUM_CONFIGS:
            set_sum(config)
            got = rms_mod.sum_rows(parts)
            fp32 = rms_mod.sum_rows([(b, torch.float32) for b in bufs])
            us = round(gpu_us(lambda p=parts: rms_mod.sum_rows(p)), 2)
            differ = sum(int((a != r).sum()) for a, r in zip(got, ref))
            ulps = max(
                float(((a.float() - r.float()).abs() / r.float().abs().clamp_min(1e-30)).max())
                * 2**8
                for a, r in zip(got, ref)
            )
            rel32 = max(
                float((a.double() - e).abs().max() / e.abs().max()) for a, e in zip(fp32, exact)
            )
            row[f"{config}"] = {
                "us": us,
                "bf16_elements_differ": differ,
                "bf16_max_rel_diff_x256": round(ulps, 3),
                "fp32_max_rel_err_vs_fp64": rel32,
            }
            totals[config] = totals.get(config, 0.0) + us
        rows.append(row)
        print(
            f"stage two {op:3s} {n_parts:5d} x {h:6d}: torch {row['torch_us']:6.2f} us; "
            + "; ".join(f"{c}: {row[str(c)]['us']:.2f}" for c in SUM_CONFIGS),
            flush=True,
        )
    best = min(SUM_CONFIGS, key=lambda c: totals[c])
    print(
        "stage two totals (us over the cases):",
        {str(k): round(v, 1) for k, v in totals.items()},
        "best",
        best,
        flush=True,
    )
    return rows, best


def floor_us(x: torch.Tensor) -> float:
    return gpu_us(floor_call(x))


def full(best) -> list[dict]:
    """Forward + backward GPU us of each variant, per shape, beside the floor (LayerNorm's pipelined tile
    loop off: run 1 measured the kernels before it existed)."""
    ln_mod.PIPELINE_STAGES = 1
    rows = []
    variants = {
        "old (torch stage two, no prefetch)": (None, False),
        "stage-two kernel": (best, False),
        "prefetch": (None, True),
        "stage-two kernel + prefetch": (best, True),
    }
    for m, h in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(1)
        x = torch.randn(m, h, device="cuda", dtype=DT, generator=g).requires_grad_(True)
        w = (1 + 0.1 * torch.randn(h, device="cuda", dtype=DT, generator=g)).requires_grad_(True)
        b = (0.1 * torch.randn(h, device="cuda", dtype=DT, generator=g)).requires_grad_(True)
        row = {"M": m, "H": h, "floor_us": round(floor_us(x), 1)}
        for op, f in (
            ("rms", lambda x, w, b: rms_mod.rms_norm(x, w, 1e-6)),
            ("ln", lambda x, w, b: ln_mod.layer_norm(x, w, b, 1e-5)),
        ):
            results = {}
            for name, (config, prefetch) in variants.items():
                set_sum(config)
                rms_mod.PREFETCH = prefetch
                results[name] = round(gpu_us(fwd_bwd(f, x, w, b)), 1)
                if m * h == 2**23 and name in (
                    "old (torch stage two, no prefetch)",
                    "stage-two kernel + prefetch",
                ):
                    row[f"{op} kernels, {name}"] = per_kernel_us(fwd_bwd(f, x, w, b))
            # the gradients of the last variant against the first: the same math
            outs = []
            for config, prefetch in (
                variants["old (torch stage two, no prefetch)"],
                variants["stage-two kernel + prefetch"],
            ):
                set_sum(config)
                rms_mod.PREFETCH = prefetch
                xs, ws, bs = (t.detach().requires_grad_(True) for t in (x, w, b))
                f(xs, ws, bs).float().pow(2).sum().backward()
                outs.append([t.grad.float() for t in (xs, ws, bs) if t.grad is not None])
            row[f"{op} max rel diff new vs old"] = max(
                float((a - r).abs().max() / r.abs().max().clamp_min(1e-30)) for a, r in zip(*outs)
            )
            row[op] = results
        rows.append(row)
        print(
            f"{m:6d} x {h:5d} floor {row['floor_us']:6.1f} | rms "
            + " ".join(f"{v:6.1f}" for v in row["rms"].values())
            + " | ln "
            + " ".join(f"{v:6.1f}" for v in row["ln"].values())
            + f" | rel diff rms {row['rms max rel diff new vs old']:.1e} ln {row['ln max rel diff new vs old']:.1e}",
            flush=True,
        )
        del x, w, b
        torch.cuda.empty_cache()
    ln_mod.PIPELINE_STAGES = 3
    return rows


def loops() -> list[dict]:
    """The backward's row-tile loop: the kernels' rule (register prefetch where it fits, LayerNorm's tile
    loop pipelined by Triton for tiles of up to ``PIPELINE_MAX_ROWS`` rows) against the rule without
    the pipelining, with it at every tile height, and neither; forward + backward GPU us per shape,
    gradients compared with the rule's, bit for bit. (Run 2 of 2026-11-24 measured an earlier form:
    Triton's pipelining at 2 and 3 stages everywhere, in place of the register prefetch.)"""
    rows = []
    variants = {
        "rule": (True, 3, 8),
        "no pipelining": (True, 1, 8),
        "pipelining at any rows": (True, 3, 1 << 30),
        "neither": (False, 1, 8),
    }
    for m, h in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(2)
        x = torch.randn(m, h, device="cuda", dtype=DT, generator=g).requires_grad_(True)
        w = (1 + 0.1 * torch.randn(h, device="cuda", dtype=DT, generator=g)).requires_grad_(True)
        b = (0.1 * torch.randn(h, device="cuda", dtype=DT, generator=g)).requires_grad_(True)
        row = {"M": m, "H": h}
        for op, f in (
            ("rms", lambda x, w, b: rms_mod.rms_norm(x, w, 1e-6)),
            ("ln", lambda x, w, b: ln_mod.layer_norm(x, w, b, 1e-5)),
        ):
            times, same = {}, {}
            ref = None
            for name, (prefetch, stages, max_rows) in variants.items():
                rms_mod.PREFETCH, ln_mod.PIPELINE_STAGES, ln_mod.PIPELINE_MAX_ROWS = (
                    prefetch,
                    stages,
                    max_rows,
                )
                try:
                    times[name] = round(gpu_us(fwd_bwd(f, x, w, b)), 1)
                    xs, ws, bs = (t.detach().requires_grad_(True) for t in (x, w, b))
                    f(xs, ws, bs).float().pow(2).sum().backward()
                    got = [t.grad for t in (xs, ws, bs) if t.grad is not None]
                except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory at this depth: reported
                    times[name] = f"{type(exc).__name__}: {exc}"[:120]
                    continue
                ref = ref or got
                same[name] = all(torch.equal(a, r) for a, r in zip(got, ref))
            row[op], row[f"{op} bitwise equal to the rule"] = times, same
        rows.append(row)
        print(
            f"{m:6d} x {h:5d} | rms "
            + " ".join(f"{v!s:>6s}" for v in row["rms"].values())
            + " | ln "
            + " ".join(f"{v!s:>6s}" for v in row["ln"].values())
            + f" | equal: rms {all(row['rms bitwise equal to the rule'].values())}"
            f" ln {all(row['ln bitwise equal to the rule'].values())}",
            flush=True,
        )
        del x, w, b
        torch.cuda.empty_cache()
    return rows


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ln_mod.NATIVE_BELOW = rms_mod.NATIVE_BELOW = ()
    global SHAPES
    if "--shapes" in sys.argv:  # H:M,H:M,...
        pairs = sys.argv[sys.argv.index("--shapes") + 1].split(",")
        SHAPES = [(int(hm.split(":")[1]), int(hm.split(":")[0])) for hm in pairs]
    saved = (rms_mod.SUM_COLS, rms_mod.SUM_ROWS, rms_mod.SUM_WARPS, rms_mod.PREFETCH)
    ceiling = copy_ceiling()
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "copy_ceiling_bytes_per_s": ceiling,
    }
    print(f"{result['device']} copy ceiling {ceiling / 1e12:.2f} TB/s", flush=True)
    parts = (
        sys.argv[sys.argv.index("--parts") + 1].split(",")
        if "--parts" in sys.argv
        else ["stage2", "full"]
    )
    if "stage2" in parts:
        result["stage_two"], best = stage_two()
        result["stage_two_best"] = best
        (out / "probe_norm_bwd.json").write_text(json.dumps(result, indent=1, default=str))
    if "full" in parts:
        print("columns: " + " | ".join(["old", "stage-two kernel", "prefetch", "both"]), flush=True)
        result["full"] = full(result.get("stage_two_best", saved[:3]))
        (out / "probe_norm_bwd.json").write_text(json.dumps(result, indent=1, default=str))
    if "loops" in parts:
        print(
            "columns: "
            + " | ".join(["rule", "no pipelining", "pipelining at any rows", "neither"]),
            flush=True,
        )
        result["loops"] = loops()
        (out / "probe_norm_bwd.json").write_text(json.dumps(result, indent=1, default=str))
    rms_mod.SUM_COLS, rms_mod.SUM_ROWS, rms_mod.SUM_WARPS, rms_mod.PREFETCH = saved
    set_sum(saved[:3])


if __name__ == "__main__":
    main()
