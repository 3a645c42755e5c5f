"""Memory-bound kernel probes by kind: what eager PyTorch's elementwise, cast, reduction and
optimizer kernels reach, in bytes per second of the traffic ``plan/traffic.py`` counts for them.

``hbm.copy`` / ``hbm.triad`` (hardware/probe.py) time contiguous kernels; a training step in eager
PyTorch also runs ops whose operands are broadcast (stride 0) or permuted, which take the
non-vectorized ``elementwise_kernel`` path, casts, reductions and ``torch.optim`` steps. The bench
JSON keeps these rates as two top-level sections beside ``gemm_grid`` (schema_version stays "1.0"):

    "elementwise": {"rows": {KIND: {"op": ..., "shape": ..., "dtype": ..., "bytes": B, "s": ...,
                                    "bytes_per_s": B / s}, ...}}
    "optimizer": {"params": N, "tensors": T, "rows": {"adamw_foreach": {..., "bytes_per_param": 40,
                                                       "bytes_per_s": ...}, "adamw_fused": {...}}}

Bytes are counted as the traffic model counts them: each input read once, the output written once
(a broadcast operand read once, its small size left out). Buffers are hundreds of MiB, several times
any current L2, like the ``hbm.*`` probes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudoctor.hardware.probe import ProbePlan, median_ms

# KIND -> what the op list of plan/traffic.py prices at that kind's rate
ELEMENTWISE_KINDS = {
    "contiguous": "binary op, all operands contiguous and alike: a * b, bf16",
    "rope": "q * cos with q as the projections leave it ([b, s, H, d].transpose(1, 2)) and cos [1, "
            "1, s, d], bf16",
    "broadcast_heads": "q * cos with q contiguous [b, H, s, d] and cos [1, 1, s, d], bf16",
    "weight": "x * w with x [tokens, h] and the norm weight w [h], bf16",
    "rowscale": "x * r with x [tokens, h] and r [tokens, 1], fp32 (RMSNorm's x * rsqrt(var))",
    "cast_up": "x.to(float32) from bf16",
    "cast_down": "x.to(bfloat16) from fp32",
    "reduction": "x.sum(-1) over [tokens, h], fp32",
}
ELEMENTS = 1 << 27  # 128 Mi elements: 256 MiB in bf16, 512 MiB in fp32
ELEMENTS_QUICK = 1 << 25
# torch.optim.AdamW(fused=True) on bf16 parameters (_fused_adamw, one kernel): reads param, grad,
# exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq: 7 x 2 bytes per parameter.
TORCH_FUSED_ADAMW_BYTES = 14
# torch.optim.AdamW, foreach (torch/optim/adam.py, _multi_tensor_adam, decoupled weight decay, not
# capturable), element passes over its tensors, all in the parameters' dtype (bf16 here; AdamW keeps
# exp_avg / exp_avg_sq in the parameter dtype): _foreach_mul_(params) r+w 2;
# _foreach_lerp_(exp_avgs, grads) 2r+w 3; _foreach_mul_(exp_avg_sqs) 2;
# _foreach_addcmul_(exp_avg_sqs, grads, grads) 3 (the grad is read once per element);
# _foreach_sqrt(exp_avg_sqs) into a temporary 2; _foreach_div_ 2; _foreach_add_(eps) 2;
# _foreach_addcdiv_(params, exp_avgs, temp) 3r+w 4. 20 passes x 2 bytes.
ADAMW_FOREACH_PASSES = 20
OPTIMIZER_TENSORS = 128  # 128 tensors of 8 Mi elements: 1.07 G parameters
OPTIMIZER_TENSOR_ELEMENTS = 1 << 23


def _shape(n: int) -> dict[str, tuple[int, ...]]:
    """Shapes of about ``n`` elements: RoPE's q (d = 128, 32 heads) and a [tokens, 4096]
    activation."""
    d, heads, b = 128, 32, 4
    s = n // (d * heads * b)
    return {"q": (b, heads, s, d), "x": (n // 4096, 4096)}


def elementwise_rows(torch: Any, plan: ProbePlan) -> dict[str, dict[str, Any]]:
    """Bytes per second of each kind in ``ELEMENTWISE_KINDS``, timed like the hbm probes."""
    n = ELEMENTS_QUICK if plan.quick else ELEMENTS
    bf16, fp32 = torch.bfloat16, torch.float32
    sh = _shape(n)
    b, heads, s, d = sh["q"]
    t, h = sh["x"]

    def rand(*shape: int, dtype: Any = bf16) -> Any:
        return torch.randn(*shape, device="cuda", dtype=dtype)

    a, c = rand(n), rand(n)
    q = rand(b, heads, s, d)
    q_t = rand(b, s, heads, d).transpose(1, 2)  # [b, H, s, d], permuted strides
    cos = rand(1, 1, s, d)
    x, w = rand(t, h), rand(h)
    x32, r32 = rand(t, h, dtype=fp32), rand(t, 1, dtype=fp32)
    cases: dict[str, tuple[Callable[[], Any], int, str, str]] = {
        # kind: (fn, bytes, shape, dtype); bytes = inputs read once + output written once
        "contiguous": (lambda: a * c, 3 * 2 * n, f"[{n}] * [{n}]", "bf16"),
        "rope": (lambda: q_t * cos, 2 * 2 * n,
                 f"[{b}, {s}, {heads}, {d}].transpose(1, 2) * [1, 1, {s}, {d}]", "bf16"),
        "broadcast_heads": (lambda: q * cos, 2 * 2 * n,
                            f"[{b}, {heads}, {s}, {d}] * [1, 1, {s}, {d}]", "bf16"),
        "weight": (lambda: x * w, 2 * 2 * t * h, f"[{t}, {h}] * [{h}]", "bf16"),
        "rowscale": (lambda: x32 * r32, 2 * 4 * t * h, f"[{t}, {h}] * [{t}, 1]", "fp32"),
        "cast_up": (lambda: x.to(fp32), (2 + 4) * t * h, f"[{t}, {h}]", "bf16 -> fp32"),
        "cast_down": (lambda: x32.to(bf16), (4 + 2) * t * h, f"[{t}, {h}]", "fp32 -> bf16"),
        "reduction": (lambda: x32.sum(-1), 4 * t * h, f"[{t}, {h}].sum(-1)", "fp32"),
    }
    rows = {}
    for kind, (fn, nbytes, shape, dtype) in cases.items():
        sec = median_ms(torch, fn, plan.repeats) / 1e3
        rows[kind] = {"op": ELEMENTWISE_KINDS[kind], "shape": shape, "dtype": dtype,
                      "bytes": nbytes, "s": sec, "bytes_per_s": nbytes / sec}
    return rows


def optimizer_rows(torch: Any, plan: ProbePlan) -> tuple[dict[str, dict[str, Any]], int, int]:
    """One ``torch.optim.AdamW`` step over bf16 parameters with gradients, foreach and fused, as
    bytes per second of the traffic plan/traffic.py counts (40 and 14 bytes per parameter)."""
    tensors = OPTIMIZER_TENSORS // (4 if plan.quick else 1)
    size = OPTIMIZER_TENSOR_ELEMENTS
    rows = {}
    for name, kwargs, per_param in (("adamw_foreach", {"foreach": True}, 2 * ADAMW_FOREACH_PASSES),
                                    ("adamw_fused", {"fused": True}, TORCH_FUSED_ADAMW_BYTES)):
        params = [torch.nn.Parameter(torch.randn(size, device="cuda", dtype=torch.bfloat16))
                  for _ in range(tensors)]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(params, lr=1e-5, **kwargs)
        sec = median_ms(torch, opt.step, 5 if plan.quick else 10, warmup=2) / 1e3
        n = tensors * size
        rows[name] = {"op": f"torch.optim.AdamW({', '.join(f'{k}=True' for k in kwargs)}).step()",
                      "bytes_per_param": per_param, "s": sec, "bytes_per_s": per_param * n / sec}
        del opt, params
        torch.cuda.empty_cache()
    return rows, tensors, tensors * size


def kind_probes(plan: ProbePlan, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The ``elementwise`` and ``optimizer`` sections; a probe that fails leaves ``{"error":
    ...}``."""
    import torch

    out: dict[str, Any] = {}
    if progress:
        progress("elementwise kinds")
    try:
        out["elementwise"] = {"rows": elementwise_rows(torch, plan),
                              "bytes": "inputs read once + output written once (broadcast operands "
                                       "left out)"}
    except (RuntimeError, TypeError, ValueError) as exc:
        out["elementwise"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    torch.cuda.empty_cache()
    if progress:
        progress("optimizer step")
    try:
        rows, tensors, params = optimizer_rows(torch, plan)
        out["optimizer"] = {"params": params, "tensors": tensors, "dtype": "bf16", "rows": rows}
    except (RuntimeError, TypeError, ValueError) as exc:
        out["optimizer"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    torch.cuda.empty_cache()
    return out
