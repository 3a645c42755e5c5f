"""gpudoctor.kernels side by side with eager PyTorch, torch.compile and Liger-Kernel, on one GPU.

``python benchmarks/bench_kernels.py OUT_DIR [--quick] [--parts norms,glu,ce,e2e,converge,large]``
writes ``OUT_DIR/kernels.json`` and prints the tables benchmarks/BENCHMARKS-kernels.md carries. Timings are
``triton.testing.do_bench`` medians (forward + backward, bf16); memory is the peak of
``torch.cuda.max_memory_allocated`` above what was allocated before the call. The HBM ceiling is
measured in the same run (a device-to-device copy of 2 GiB), so "% of HBM" is against this card.
Liger-Kernel is imported if installed (carry its wheel); its absence is reported, not hidden.
"""

from __future__ import annotations

import gc
import json
import math
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

DT = torch.bfloat16
RESULTS: dict = {}


def bench(fn, warmup=10, rep=50) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def gpu_events(fn, iters: int = 10) -> list[dict]:
    """The kernels, memsets and copies ``iters`` calls of ``fn`` run (after 3 warm-up calls), as
    torch.profiler trace events."""
    import tempfile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = json.loads(path.read_text())["traceEvents"]
    return [e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")]


def gpu_us(fn, iters: int = 10) -> float:
    """GPU time per call (us): the sum of every kernel, memset and copy the call runs, from a
    torch.profiler trace. Launch gaps are excluded, so it is what the work costs on the card whatever
    the CPU in front of it (the wall-clock ``bench`` includes the CPU when the call is launch-bound)."""
    return sum(e.get("dur", 0) for e in gpu_events(fn, iters)) / iters


def peak_mb(fn, *inputs: torch.Tensor) -> float:
    """Peak memory of one call above what was allocated before it. The inputs' gradients are
    dropped first: a previous candidate's would otherwise count in "before" and be freed inside the
    call, hiding that much of this candidate's peak."""
    for t in inputs:
        t.grad = None
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def hbm_ceiling() -> float:
    x = torch.empty(2**30, dtype=torch.uint8, device="cuda")  # 1 GiB read + 1 GiB written
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x), warmup=5, rep=40)
    return 2 * x.numel() / (ms / 1e3)


def liger():
    try:
        import liger_kernel  # noqa: F401 - importable is the question

        return True
    except ImportError:
        return False


def fwd_bwd(f, *inputs):
    """Forward + backward of f; the output gradient is made once and reused, so every timed call
    runs the candidate's kernels and nothing else (no fill kernel for the gradient)."""
    grads: dict = {}

    def run():
        for t in inputs:
            t.grad = None
        out = f(*inputs)
        if not out.dim():
            out.backward()
            return
        key = (out.shape, out.dtype)
        if key not in grads:
            grads[key] = torch.ones_like(out)
        out.backward(grads[key])

    return run


# -- norms --------------------------------------------------------------------------------------------


def part_norms(quick: bool) -> None:
    from gpudoctor.kernels._layer_norm import layer_norm
    from gpudoctor.kernels._rms_norm import rms_norm

    ceiling = RESULTS["hbm_bytes_per_s"]
    rows = []
    shapes = [
        (h, m)
        for h in (256, 1024, 4096, 8192, 16384)
        for m in (256, (2**21) // h, (2**23) // h, (2**25) // h)
    ]
    if quick:
        shapes = [(4096, 2048), (1024, 256)]
    have_liger = liger()
    for h, m in shapes:
        x = torch.randn(m, h, device="cuda", dtype=DT, requires_grad=True)
        w = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)
        b = torch.randn(h, device="cuda", dtype=DT, requires_grad=True)

        def hf_rms(x, w):
            xf = x.float()
            return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

        cands = {
            "rms ours": lambda x, w, b: rms_norm(x, w, 1e-6),
            # torch.nn.RMSNorm's own math (weight applied in fp32, one rounding): like against like
            "rms ours (fp32 weight)": lambda x, w, b: rms_norm(x, w, 1e-6, casting="gemma"),
            "rms hf-eager": lambda x, w, b: hf_rms(x, w),
            # what torch.nn.RMSNorm / LayerNorm.forward call, on the same w, b: their gradients are reset
            # each call like every other candidate's (a module's own weight would accumulate into .grad,
            # one extra kernel per call that only the torch rows would pay)
            "rms torch.nn.RMSNorm": lambda x, w, b, h=h: F.rms_norm(x, (h,), w, 1e-6),
            "ln ours": lambda x, w, b: layer_norm(x, w, b, 1e-5),
            "ln torch.nn.LayerNorm": lambda x, w, b, h=h: F.layer_norm(x, (h,), w, b, 1e-5),
        }
        big = m * h >= 2**23
        if big and h in (4096, 16384) and not quick:
            cands["rms torch.compile(hf)"] = torch.compile(lambda x, w, b: hf_rms(x, w))
            cands["ln torch.compile"] = torch.compile(
                lambda x, w, b: F.layer_norm(x, (h,), w, b, 1e-5)
            )
        if have_liger:
            from liger_kernel.ops.layer_norm import LigerLayerNormFunction
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction

            cands["rms liger"] = lambda x, w, b: LigerRMSNormFunction.apply(
                x, w, 1e-6, 0.0, "llama", False
            )
            cands["ln liger"] = lambda x, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5)
        for name, f in cands.items():
            try:
                ms = bench(fwd_bwd(f, x, w, b))
                g_us = gpu_us(fwd_bwd(f, x, w, b))
            except Exception as exc:  # noqa: BLE001 - one failing candidate or part does not stop the run; it is reported
                rows.append(
                    {"op": name, "H": h, "M": m, "error": f"{type(exc).__name__}: {exc}"[:200]}
                )
                continue
            moved = 5 * m * h * 2  # fwd: read x, write y; bwd: read x, dy, write dx
            rows.append(
                {
                    "op": name,
                    "H": h,
                    "M": m,
                    "ms": round(ms, 4),
                    "gpu_us": round(g_us, 1),
                    "hbm_pct": round(100 * moved / (ms / 1e3) / ceiling, 1),
                    "gpu_hbm_pct": round(100 * moved / (g_us / 1e6) / ceiling, 1),
                }
            )
        rows.append(elementwise_floor(x, ceiling))
        del x, w, b
        torch.cuda.empty_cache()
    RESULTS["norms"] = rows
    RESULTS["norms_config"] = norms_config()


def floor_call(x: torch.Tensor):
    """A call moving the bytes of a norm's forward + backward on ``x``'s shape through PyTorch's two
    simplest kernels: ``y.copy_(x)`` and ``torch.add(x, dy, out=dx)``."""
    xs = x.detach()
    dy = torch.randn_like(xs)
    y, dx = torch.empty_like(xs), torch.empty_like(xs)

    def run():
        y.copy_(xs)
        torch.add(xs, dy, out=dx)

    return run


def elementwise_floor(x: torch.Tensor, ceiling: float) -> dict:
    """The size-matched floor of a norm's forward + backward: the same bytes in the same passes through
    PyTorch's simplest kernels, ``y.copy_(x)`` (read M x H, write M x H, as the forward) and
    ``torch.add(x, dy, out=dx)`` (read two, write one, as the backward). Two kernels that do no math
    and no reductions: what any two-kernel forward + backward can reach at this size on this card."""
    m, h = x.shape
    run = floor_call(x)
    ms, g_us = bench(run), gpu_us(run)
    moved = 5 * m * h * 2
    return {
        "op": "floor: copy + add",
        "H": h,
        "M": m,
        "ms": round(ms, 4),
        "gpu_us": round(g_us, 1),
        "hbm_pct": round(100 * moved / (ms / 1e3) / ceiling, 1),
        "gpu_hbm_pct": round(100 * moved / (g_us / 1e6) / ceiling, 1),
    }


def norms_config() -> dict:
    """The kernels' tuning constants as this run used them."""
    import gpudoctor.kernels._layer_norm as ln_mod
    import gpudoctor.kernels._rms_norm as rms_mod

    names = (
        "TILE_ELEMENTS",
        "BACKWARD_WARPS_PER_SM",
        "MAX_FUSED_BYTES",
        "LOOP_BLOCK",
        "PREFETCH",
        "PREFETCH_ELEMENTS",
        "SUM_COLS",
        "SUM_ROWS",
        "SUM_WARPS",
        "RELOAD_W_MIN_BLOCK",
    )
    out = {f"rms_norm.{n}": getattr(rms_mod, n) for n in names if hasattr(rms_mod, n)}
    ln_names = (
        "TILE_ELEMENTS",
        "SPLIT_MIN_BLOCK",
        "PREFETCH_MAX_ROWS",
        "PIPELINE_MAX_ROWS",
        "PIPELINE_STAGES",
        "SPLIT_ROWS",
        "SPLIT_COLS",
        "SPLIT_WARPS",
        "FORWARD_TILE_ELEMENTS",
        "BACKWARD_TILE_ELEMENTS",
        "FUSED_WIDE_MAX_TILES",
    )
    out.update({f"layer_norm.{n}": getattr(ln_mod, n) for n in ln_names if hasattr(ln_mod, n)})
    return out


# -- SwiGLU / GeGLU -------------------------------------------------------------------------------------


def part_glu(quick: bool) -> None:
    from gpudoctor.kernels.glu import geglu, swiglu

    rows = []
    m, i = (4096, 14336) if not quick else (1024, 4096)
    g = torch.randn(m, i, device="cuda", dtype=DT, requires_grad=True)
    u = torch.randn(m, i, device="cuda", dtype=DT, requires_grad=True)
    cands = {
        "swiglu ours": lambda g, u: swiglu(g, u),
        "swiglu eager": lambda g, u: F.silu(g) * u,
        "geglu ours": lambda g, u: geglu(g, u, approximate="tanh"),
        "geglu eager": lambda g, u: F.gelu(g, approximate="tanh") * u,
    }
    if not quick:
        cands["swiglu torch.compile"] = torch.compile(lambda g, u: F.silu(g) * u)
        cands["geglu torch.compile"] = torch.compile(lambda g, u: F.gelu(g, approximate="tanh") * u)
    if liger():
        from liger_kernel.ops.geglu import LigerGELUMulFunction
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction

        cands["swiglu liger"] = lambda g, u: LigerSiLUMulFunction.apply(g, u)
        cands["geglu liger"] = lambda g, u: LigerGELUMulFunction.apply(g, u)
    for name, f in cands.items():
        try:
            ms = bench(fwd_bwd(f, g, u))
            g_us = gpu_us(fwd_bwd(f, g, u))
            saved = _saved_mb(f, g, u)
        except Exception as exc:  # noqa: BLE001 - one failing candidate or part does not stop the run; it is reported
            rows.append({"op": name, "error": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        rows.append(
            {
                "op": name,
                "M": m,
                "I": i,
                "ms": round(ms, 4),
                "gpu_us": round(g_us, 1),
                "saved_for_backward_MB": round(saved, 1),
            }
        )
    RESULTS["glu"] = rows


def _saved_mb(f, *inputs) -> float:
    """Memory the forward leaves allocated (kept for backward), beyond its output."""
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    out = f(*inputs)
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before - out.numel() * out.element_size()
    del out
    return held / 2**20


# -- linear cross-entropy -----------------------------------------------------------------------------


def part_ce(quick: bool) -> None:
    from gpudoctor.kernels.cross_entropy import linear_cross_entropy

    rows = []
    tokens, hdim, vocab = (32768, 4096, 128256) if not quick else (4096, 1024, 32000)
    h = torch.randn(tokens, hdim, device="cuda", dtype=DT, requires_grad=True)
    w = (torch.randn(vocab, hdim, device="cuda", dtype=DT) * 0.02).requires_grad_(True)
    t = torch.randint(0, vocab, (tokens,), device="cuda")
    t[::7] = -100

    def eager(h, w):
        return F.cross_entropy((h @ w.T).float(), t, ignore_index=-100)

    cands = {"ce ours": lambda h, w: linear_cross_entropy(h, w, t), "ce eager": eager}
    if not quick:  # the chunk size trades the logits chunk's memory against shorter GEMMs
        for n in (512, 1024, 4096):
            cands[f"ce ours, {n}-row chunks"] = lambda h, w, n=n: linear_cross_entropy(
                h, w, t, chunk_size=n
            )
    if not quick:
        cands["ce torch.compile"] = torch.compile(eager)
    if liger():
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        lfn = LigerFusedLinearCrossEntropyLoss(ignore_index=-100)

        def lig(h, w):
            out = lfn(w, h, t)
            return out[0] if isinstance(out, tuple) else out

        cands["ce liger"] = lig
    ref = None
    for name, f in cands.items():
        try:
            run = fwd_bwd(f, h, w)
            mb = peak_mb(run, h, w)
            ms = bench(run, warmup=3, rep=10)
            with torch.no_grad():
                loss = float(f(h, w))
        except Exception as exc:  # noqa: BLE001 - one failing candidate or part does not stop the run; it is reported
            rows.append({"op": name, "error": f"{type(exc).__name__}: {exc}"[:200]})
            continue
        if name == "ce eager":
            ref = loss
        rows.append(
            {
                "op": name,
                "tokens": tokens,
                "H": hdim,
                "V": vocab,
                "ms": round(ms, 3),
                "peak_MB": round(mb, 1),
                "loss": loss,
            }
        )
        gc.collect()
        torch.cuda.empty_cache()
    for r in rows:
        if ref is not None and "loss" in r:
            r["loss_diff_vs_eager"] = abs(r["loss"] - ref)
    RESULTS["ce"] = rows


# -- end to end ---------------------------------------------------------------------------------------


def _llama(layers=16, hidden=2048, inter=8192, vocab=128256, heads=32, kv=8):
    import transformers

    cfg = transformers.LlamaConfig(
        hidden_size=hidden,
        intermediate_size=inter,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        num_hidden_layers=layers,
        vocab_size=vocab,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=DT)
    return model


def part_e2e(quick: bool) -> None:
    from gpudoctor.kernels import patch

    rows = []
    batch, seq = (4, 2048) if not quick else (1, 512)
    variants = ["eager", "gpudoctor.patch", "liger", "torch.compile"]
    for variant in variants:
        torch.manual_seed(0)
        try:
            if variant == "liger":
                if not liger():
                    rows.append({"variant": variant, "error": "liger-kernel not installed"})
                    continue
                from liger_kernel.transformers import apply_liger_kernel_to_llama

                model = _llama(layers=16 if not quick else 2)
                apply_liger_kernel_to_llama(model=model, rope=False)
            else:
                model = _llama(layers=16 if not quick else 2)
            report = None
            if variant == "gpudoctor.patch":
                report = str(patch(model))
            step_model = torch.compile(model) if variant == "torch.compile" else model
            opt = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
            ids = torch.randint(0, model.config.vocab_size, (batch, seq), device="cuda")

            def step():
                loss = step_model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)

            for _ in range(3):
                step()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            n = 10 if not quick else 3
            for _ in range(n):
                step()
            torch.cuda.synchronize()
            ms = (time.perf_counter() - t0) / n * 1e3
            rows.append(
                {
                    "variant": variant,
                    "batch": batch,
                    "seq": seq,
                    "step_ms": round(ms, 2),
                    "peak_GB": round(torch.cuda.max_memory_allocated() / 1e9, 2),
                    "params_B": round(sum(p.numel() for p in model.parameters()) / 1e9, 3),
                    **({"patch": report} if report else {}),
                }
            )
        except Exception as exc:  # noqa: BLE001 - one failing candidate or part does not stop the run; it is reported
            rows.append({"variant": variant, "error": f"{type(exc).__name__}: {exc}"[:300]})
        finally:
            model = step_model = opt = None
            gc.collect()
            torch.cuda.empty_cache()
            torch._dynamo.reset()
    RESULTS["e2e"] = rows


def part_converge(quick: bool) -> None:
    """50 steps of a small Llama-style model on the same batches: eager twice (its own run-to-run
    noise), patched once; in bf16 and in fp32 (where the kernels' rounding differs least)."""
    from gpudoctor.kernels import patch

    def curve(variant: str, dtype: torch.dtype) -> list[float]:
        torch.manual_seed(0)
        model = _llama(layers=4, hidden=512, inter=1536, vocab=32000, heads=8, kv=4).to(dtype)
        if variant == "patch":
            patch(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator(device="cuda").manual_seed(1)
        data = torch.randint(0, 32000, (8, 8, 256), device="cuda", generator=g)  # 8 batches, reused
        losses = []
        for s in range(50):
            ids = data[s % 8]
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss))
        return losses

    out = {}
    for name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        eager, eager2, patched = curve("eager", dtype), curve("eager", dtype), curve("patch", dtype)
        out[name] = {
            "eager": eager,
            "eager_again": eager2,
            "patch": patched,
            "max_diff_patch_vs_eager": max(abs(a - b) for a, b in zip(eager, patched)),
            "max_diff_eager_vs_eager": max(abs(a - b) for a, b in zip(eager, eager2)),
            "mean_last10_eager": sum(eager[-10:]) / 10,
            "mean_last10_patch": sum(patched[-10:]) / 10,
        }
    RESULTS["converge"] = out


def part_large(quick: bool) -> None:
    """Tensors past 2^31 elements: the kernels must use 64-bit offsets."""
    from gpudoctor.kernels._rms_norm import rms_norm
    from gpudoctor.kernels.glu import swiglu

    out = {}
    h = 4096
    m = (2**31) // h + 64  # 2^31 + 262144 elements
    x = torch.randn(m, h, device="cuda", dtype=DT)
    w = torch.randn(h, device="cuda", dtype=DT)
    y = rms_norm(x, w, 1e-6)
    tail = x[-8:].float()
    ref = w.float() * (tail * torch.rsqrt(tail.pow(2).mean(-1, keepdim=True) + 1e-6)).to(DT).float()
    out["rms_norm_elements"] = m * h
    out["rms_norm_tail_max_err"] = float((y[-8:].float() - ref).abs().max())
    del y
    # backward past 2^31: dx of the last rows against the native math on those rows alone
    xg = x.detach().requires_grad_(True)
    wg = w.detach().clone().requires_grad_(True)
    dy_tail = torch.randn(8, h, device="cuda", dtype=DT)
    dy = torch.zeros_like(x)
    dy[-8:] = dy_tail
    rms_norm(xg, wg, 1e-6).backward(dy)
    t = x[-8:].detach().float().requires_grad_(True)
    wt = w.detach().float().requires_grad_(True)
    (wt * (t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6))).backward(dy_tail.float())
    out["rms_norm_bwd_tail_dx_max_err"] = float((xg.grad[-8:].float() - t.grad).abs().max())
    out["rms_norm_bwd_dw_rel_err"] = float(
        (wg.grad.float() - wt.grad).abs().max() / wt.grad.abs().max()
    )
    del xg, wg, dy
    torch.cuda.empty_cache()
    from gpudoctor.kernels._layer_norm import layer_norm

    y = layer_norm(x, w, w, 1e-5)
    out["layer_norm_tail_max_err"] = float(
        (y[-8:].float() - F.layer_norm(x[-8:].float(), (h,), w.float(), w.float(), 1e-5))
        .abs()
        .max()
    )
    del y
    torch.cuda.empty_cache()
    g = x
    u = torch.randn_like(x)
    z = swiglu(g, u)
    out["swiglu_tail_max_err"] = float(
        (z[-8:].float() - (F.silu(g[-8:]) * u[-8:]).float()).abs().max()
    )
    RESULTS["large"] = out


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    quick = "--quick" in sys.argv
    parts = ["norms", "glu", "ce", "e2e", "converge", "large"]
    if "--parts" in sys.argv:
        parts = sys.argv[sys.argv.index("--parts") + 1].split(",")
    RESULTS["device"] = torch.cuda.get_device_name()
    RESULTS["torch"] = torch.__version__
    import triton

    RESULTS["triton"] = triton.__version__
    RESULTS["liger"] = (
        __import__("liger_kernel").__version__
        if liger() and hasattr(__import__("liger_kernel"), "__version__")
        else ("installed" if liger() else None)
    )
    RESULTS["date"] = time.strftime("%Y-%m-%d")
    RESULTS["hbm_bytes_per_s"] = hbm_ceiling()
    for part in parts:
        t0 = time.time()
        try:
            globals()["part_" + part](quick)
        except Exception:  # noqa: BLE001 - one failing candidate or part does not stop the run; it is reported
            RESULTS[part + "_error"] = traceback.format_exc()[-1500:]
        RESULTS.setdefault("seconds", {})[part] = round(time.time() - t0, 1)
        (out / "kernels.json").write_text(json.dumps(RESULTS, indent=1, default=str))
        print(f"[{part}] {RESULTS['seconds'][part]} s", flush=True)
    _print_tables()


def _print_norm_summary() -> None:
    """One line per shape: GPU us (% of the copy ceiling) of ours, the size-matched floor and the others."""
    by_shape: dict = {}
    for r in RESULTS.get("norms", []):
        by_shape.setdefault((r["M"], r["H"]), {})[r["op"]] = r
    cols = (
        ("rms ours", "rms ours"),
        ("rms torch", "rms torch.nn.RMSNorm"),
        ("rms compile", "rms torch.compile(hf)"),
        ("rms liger", "rms liger"),
        ("ln ours", "ln ours"),
        ("ln torch", "ln torch.nn.LayerNorm"),
        ("ln compile", "ln torch.compile"),
        ("ln liger", "ln liger"),
        ("floor", "floor: copy + add"),
    )
    if not by_shape:
        return
    print(
        "GPU us (% of the copy ceiling), forward + backward; floor: y.copy_(x) + torch.add(x, dy, out=dx)"
    )
    print(f"{'M x H':>13s} " + " ".join(f"{title:>15s}" for title, _ in cols))
    for (m, h), ops in by_shape.items():
        cells = []
        for _, op in cols:
            r = ops.get(op, {})
            cells.append(
                f"{r['gpu_us']:7.1f} ({r['gpu_hbm_pct']:4.1f}%)" if "gpu_us" in r else f"{'-':>15s}"
            )
        print(f"{m:6d} x {h:5d} " + " ".join(f"{c:>15s}" for c in cells))


def _print_tables() -> None:
    print(f"HBM ceiling (copy): {RESULTS['hbm_bytes_per_s'] / 1e12:.2f} TB/s")
    for r in RESULTS.get("norms", []):
        print(
            f"{r['op']:26s} H={r['H']:6d} M={r['M']:7d} {r.get('ms', float('nan')):9.4f} ms "
            f"{r.get('hbm_pct', math.nan):6.1f}%  gpu {r.get('gpu_us', math.nan):8.1f} us "
            f"{r.get('gpu_hbm_pct', math.nan):6.1f}% {r.get('error', '')}"
        )
    _print_norm_summary()
    for key in ("glu", "ce", "e2e"):
        for r in RESULTS.get(key, []):
            print(key, {k: v for k, v in r.items() if k not in ("loss",)})
    for name, c in RESULTS.get("converge", {}).items():
        print(
            f"converge {name}: max |patch - eager| {c['max_diff_patch_vs_eager']:.4f}, max |eager - eager| "
            f"{c['max_diff_eager_vs_eager']:.4f}, last-10 mean {c['mean_last10_eager']:.4f} / "
            f"{c['mean_last10_patch']:.4f}"
        )
    if "large" in RESULTS:
        print("large:", RESULTS["large"])
    for k, v in RESULTS.items():
        if k.endswith("_error"):
            print(k, v[-600:])


if __name__ == "__main__":
    main()
