"""Shape probes: bf16 matmul throughput over a grid of (M, N, K) and causal SDPA over (seq,
head_dim).

What ``gpudoctor plan train --bench`` reads instead of assumed efficiencies. The bench JSON keeps
them as two top-level sections beside ``collectives`` (schema_version stays "1.0": readers that do
not know them ignore them):

    "gemm_grid": {"dtype": "bf16", "layout": ..., "dims": [256, ..., 16384], "rows": [
                  {"m": M, "n": N, "k": K, "s": seconds, "tflops": ...}, ...]}
    "attention_grid": {"dtype": "bf16", "causal": true, "rows": [
                  {"batch": B, "heads": H, "seq": S, "head_dim": D, "fwd_s": ..., "bwd_s": ...,
                   "fwd_tflops": ..., "bwd_tflops": ...}, ...]}

Every dimension of the GEMM grid takes each value of ``dims``: a transformer layer's forward GEMM
is (tokens, width, width), and its two backward GEMMs permute those (dX: tokens x K x N, dW:
K x N x tokens), so tokens and widths appear in each position. ``a[M,K] @ b[K,N]``, row-major, on
random data, the L2 flushed before each timed call (as the step's GEMMs read their weights and most
activations from HBM). Attention FLOPs are counted as the planner counts them: the causal half of
the s x s pairs, 4 FLOPs per pair per head-dim element forward, backward = 2 x forward (the
backward's rate is in those FLOPs; a FlashAttention backward executes 2.5 x).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudoctor.hardware.probe import ProbePlan, l2_flusher, median_ms

GEMM_DIMS = (256, 512, 1024, 2048, 4096, 8192, 16384)
GEMM_DIMS_QUICK = (256, 1024, 4096, 16384)
ATTENTION_SEQS = (512, 1024, 2048, 4096, 8192)
ATTENTION_HEAD_DIMS = (64, 128)
ATTENTION_TOKENS = 16384  # batch x seq per call: batch = 16384 // seq
ATTENTION_HEADS = 16


def gemm_grid(torch: Any, plan: ProbePlan) -> dict[str, Any]:
    """bf16 matmul seconds and TFLOP/s at every (M, N, K) in ``dims`` x ``dims`` x ``dims``."""
    dims = GEMM_DIMS_QUICK if plan.quick else GEMM_DIMS
    repeats = 5 if plan.quick else 10
    top = max(dims)
    # operands are views of the first M*K / K*N elements of two buffers of the largest size
    a_buf = torch.randn(top * top, device="cuda", dtype=torch.bfloat16)
    b_buf = torch.randn(top * top, device="cuda", dtype=torch.bfloat16)
    flush = l2_flusher(torch)
    rows = []
    for m in dims:
        for n in dims:
            for k in dims:
                a = a_buf[: m * k].view(m, k)
                b = b_buf[: k * n].view(k, n)
                ms = median_ms(torch, lambda a=a, b=b: a @ b, repeats, warmup=2, before=flush)
                s = ms / 1e3
                rows.append({"m": m, "n": n, "k": k, "s": s, "tflops": 2.0 * m * n * k / s / 1e12})
    del a_buf, b_buf
    return {"dtype": "bf16",
            "layout": "a[M,K] @ b[K,N] row-major, random data, L2 flushed before each call",
            "repeats": repeats, "dims": list(dims), "rows": rows}


def attention_grid(torch: Any, plan: ProbePlan) -> dict[str, Any]:
    """Causal ``scaled_dot_product_attention`` (bf16, [B, H, S, D]) forward and backward seconds."""
    import torch.nn.functional as F

    seqs = ATTENTION_SEQS[::2] if plan.quick else ATTENTION_SEQS
    repeats = 5 if plan.quick else 10
    rows = []
    for d in ATTENTION_HEAD_DIMS:
        for s in seqs:
            b, h = max(1, ATTENTION_TOKENS // s), ATTENTION_HEADS
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16,
                                   requires_grad=True)
                       for _ in range(3))
            grad = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)

            def fwd(q=q, k=k, v=v) -> Any:
                with torch.no_grad():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def fwd_bwd(q=q, k=k, v=v, grad=grad) -> Any:
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return torch.autograd.grad(out, (q, k, v), grad)

            fwd_s = median_ms(torch, fwd, repeats) / 1e3
            both_s = median_ms(torch, fwd_bwd, repeats) / 1e3
            bwd_s = max(both_s - fwd_s, 1e-9)
            flops = 4.0 * b * h * (s * s / 2) * d  # QK^T and PV over the causal half
            rows.append({"batch": b, "heads": h, "seq": s, "head_dim": d, "fwd_s": fwd_s,
                         "bwd_s": bwd_s, "fwd_tflops": flops / fwd_s / 1e12,
                         "bwd_tflops": 2 * flops / bwd_s / 1e12})
            del q, k, v, grad
    return {"dtype": "bf16", "causal": True,
            "op": "torch.nn.functional.scaled_dot_product_attention",
            "flops": "4 x batch x heads x seq^2/2 x head_dim forward; backward rate counts 2 x that",
            "repeats": repeats, "rows": rows}


def shape_probes(plan: ProbePlan, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Both grids, as the bench JSON's ``gemm_grid`` and ``attention_grid`` sections; a probe that
    fails leaves ``{"error": ...}`` in its place and the other still runs."""
    import torch

    out: dict[str, Any] = {}
    for key, label, probe in (("gemm_grid", "GEMM shapes", gemm_grid),
                              ("attention_grid", "attention", attention_grid)):
        if progress:
            progress(label)
        try:
            out[key] = probe(torch, plan)
        except (RuntimeError, TypeError, ValueError) as exc:
            out[key] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        torch.cuda.empty_cache()
    return out
