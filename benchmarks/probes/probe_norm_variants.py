"""Forward + backward GPU us of the norms under alternative settings, per shape, beside the committed rule:
16384-wide rows (RMSNorm: the weight held in registers or reloaded each tile; LayerNorm: fused at one or two
tiles a program, the split backward's dw / db kernel at other tiles and warps) and LayerNorm's 256 /
1024-wide rows (the forward's and backward's tiles, without the bias gradient, RMSNorm beside it). Each
variant's gradients are compared with the rule's; the backward kernel's registers and spills are read from
the compiled kernel. Results: benchmarks/results/probe_norm_variants_h100_2026-11-24_run{1,2,3}.json
(runs 1-2 before the settings were committed, with knobs since removed or renamed; run 3 as below).

``python benchmarks/probes/probe_norm_variants.py OUT_DIR [--only rms,ln16k,lnnarrow]`` writes
``OUT_DIR/probe_norm_variants.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # benchmarks/: the helpers imported below
from bench_kernels import fwd_bwd, gpu_us
from probe_norm_bwd import per_kernel_us

import gpudoctor.kernels._layer_norm as ln_mod
import gpudoctor.kernels._rms_norm as rms_mod

DT = torch.bfloat16
BIG = 1 << 30

# Run 2's variants, written against the settings as committed after it ("rule"): each names the settings it
# changes. Run 1 (benchmarks/results/probe_norm_variants_h100_2026-11-24_run1.json) also tried knobs that
# were removed after it, as they did not help: 32 warps and the column loop for RMSNorm's 16384-wide
# backward, 2-4x the dw / db programs, a pipelined dw / db row loop, dw fused with only db split,
# LayerNorm's narrow-row backward at tiles of 2048-8192 elements with the register prefetch at any height.
GROUPS = {
    "rms": (
        "rms",
        [(256, 16384), (512, 16384), (2048, 16384), (1024, 8192), (4096, 8192), (2048, 4096)],
        {
            "rule": {},
            "weight held (run 14)": {"rms.RELOAD_W_MIN_BLOCK": BIG},
            "reload from 4096": {"rms.RELOAD_W_MIN_BLOCK": 4096},
        },
    ),
    "ln16k": (
        "ln",
        [(128, 16384), (256, 16384), (512, 16384), (2048, 16384)],
        {
            "rule": {},
            "run 14 (split always, dwdb 32 x 256, 8 warps)": {
                "ln.FUSED_WIDE_MAX_TILES": 0,
                "ln.SPLIT_COLS": 256,
                "ln.SPLIT_WARPS": 8,
            },
            "fused at <= 2 tiles a program": {"ln.FUSED_WIDE_MAX_TILES": 2},
            "fused at <= 2 tiles, weight held": {
                "ln.FUSED_WIDE_MAX_TILES": 2,
                "rms.RELOAD_W_MIN_BLOCK": BIG,
            },
            "dwdb 16 x 512, 8 warps": {
                "ln.SPLIT_ROWS": 16,
                "ln.SPLIT_COLS": 512,
                "ln.SPLIT_WARPS": 8,
            },
            "dwdb 8 x 1024, 8 warps": {
                "ln.SPLIT_ROWS": 8,
                "ln.SPLIT_COLS": 1024,
                "ln.SPLIT_WARPS": 8,
            },
            "dwdb 64 x 256, 8 warps": {
                "ln.SPLIT_ROWS": 64,
                "ln.SPLIT_COLS": 256,
                "ln.SPLIT_WARPS": 8,
            },
            "dwdb 32 x 256, 4 warps": {"ln.SPLIT_COLS": 256},
            "dwdb 16 x 256, 4 warps": {"ln.SPLIT_ROWS": 16, "ln.SPLIT_COLS": 256},
            "dwdb 32 x 512, 16 warps": {"ln.SPLIT_COLS": 512, "ln.SPLIT_WARPS": 16},
        },
    ),
    "lnnarrow": (
        "ln",
        [(4096, 1024), (8192, 1024), (32768, 1024), (32768, 256), (131072, 256)],
        {
            "rule": {},
            "run 14 (tiles of 8192)": {
                "ln.FORWARD_TILE_ELEMENTS": {},
                "ln.BACKWARD_TILE_ELEMENTS": {},
            },
            "bwd tile 2048 at any size": {"ln.BACKWARD_TILE_ELEMENTS": {1024: (2048, BIG)}},
            "fwd tile 4096 at 256 wide too": {"ln.FORWARD_TILE_ELEMENTS": {1024: 4096, 256: 4096}},
            "fwd tile 2048": {"ln.FORWARD_TILE_ELEMENTS": {1024: 2048, 256: 2048}},
            "no bias (no db)": {"nobias": True},
            "rms (reference)": {"op": "rms"},
        },
    ),
}


def apply(settings: dict) -> dict:
    """Set module knobs ("rms.NAME" / "ln.NAME"); returns the old values."""
    old = {}
    for key, value in settings.items():
        if key in ("nobias", "op"):
            continue
        mod = rms_mod if key.startswith("rms.") else ln_mod
        name = key.split(".", 1)[1]
        old[key] = getattr(mod, name)
        setattr(mod, name, value)
    return old


def compiled_stats(launcher) -> list:
    out = []
    for compiled in launcher.cache.values():
        out.append(
            {
                "regs": getattr(compiled, "n_regs", None),
                "spills": getattr(compiled, "n_spills", None),
                "warps": compiled.metadata.num_warps if hasattr(compiled, "metadata") else None,
            }
        )
    return out


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ln_mod.NATIVE_BELOW = rms_mod.NATIVE_BELOW = ()
    only = (
        sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else list(GROUPS)
    )
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "groups": {},
    }
    for group in only:
        op_default, shapes, variants = GROUPS[group]
        rows = []
        for m, h in shapes:
            g = torch.Generator(device="cuda").manual_seed(3)
            x = torch.randn(m, h, device="cuda", dtype=DT, generator=g).requires_grad_(True)
            w = (1 + 0.1 * torch.randn(h, device="cuda", dtype=DT, generator=g)).requires_grad_(
                True
            )
            b = (0.1 * torch.randn(h, device="cuda", dtype=DT, generator=g)).requires_grad_(True)
            row = {
                "M": m,
                "H": h,
                "us": {},
                "kernels": {},
                "bwd_compiled": {},
                "max_rel_diff_vs_rule": {},
            }
            ref = None
            for name, settings in variants.items():
                op = settings.get("op", op_default)
                nobias = settings.get("nobias", False)
                if op == "rms":
                    f = lambda x, w, b: rms_mod.rms_norm(x, w, 1e-6)  # noqa: E731
                    launcher = rms_mod._launch_bwd
                else:
                    f = (
                        (lambda x, w, b: ln_mod.layer_norm(x, w, None, 1e-5))
                        if nobias
                        else (lambda x, w, b: ln_mod.layer_norm(x, w, b, 1e-5))
                    )
                    launcher = ln_mod._launch_bwd
                old = apply(settings)
                try:
                    launcher.cache.clear()
                    row["us"][name] = round(gpu_us(fwd_bwd(f, x, w, b), iters=20), 1)
                    row["kernels"][name] = per_kernel_us(fwd_bwd(f, x, w, b))
                    row["bwd_compiled"][name] = compiled_stats(launcher)
                    xs, ws, bs = (t.detach().requires_grad_(True) for t in (x, w, b))
                    f(xs, ws, bs).float().pow(2).sum().backward()
                    got = [t.grad.float() for t in (xs, ws, bs) if t.grad is not None]
                    if name == "rule":
                        ref = got
                    elif op == op_default and not nobias and ref is not None:
                        row["max_rel_diff_vs_rule"][name] = max(
                            float((a - r).abs().max() / r.abs().max().clamp_min(1e-30))
                            for a, r in zip(got, ref)
                        )
                except Exception as exc:  # noqa: BLE001 - a variant that fails to compile is reported
                    row["us"][name] = f"{type(exc).__name__}: {exc}"[:160]
                finally:
                    for key, value in old.items():
                        mod = rms_mod if key.startswith("rms.") else ln_mod
                        setattr(mod, key.split(".", 1)[1], value)
                print(
                    f"{group} {m:6d} x {h:5d} {name:34s} {row['us'][name]!s:>8s} us  "
                    f"{row['bwd_compiled'].get(name)} {row['max_rel_diff_vs_rule'].get(name, '')}",
                    flush=True,
                )
            rows.append(row)
            del x, w, b
            torch.cuda.empty_cache()
            result["groups"][group] = rows
            (out / "probe_norm_variants.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
