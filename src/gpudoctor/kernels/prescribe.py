"""Which fused kernel cures what a finding saw, with the gain we measured for it.

The doctor's ``unfused-elementwise`` and ``memory-pressure`` findings call ``kernel_fix``: when the
ops of the chain (or of the step) are those an RMSNorm, a gated activation or a big-vocabulary loss
is made of, the fix names ``gpudoctor.kernels.patch(model)`` and the gain measured on the GPU by
``benchmarks/bench_kernels.py`` (the figures below, with their device and date). No triton import
here: the rules run anywhere.
"""

from __future__ import annotations

from gpudoctor.core.finding import Fix

# Measured by benchmarks/bench_kernels.py; see benchmarks/BENCHMARKS-kernels.md
# ("gpudoctor.kernels"). None: not measured, and then no figure is quoted.
MEASURED: dict[str, dict] = {
    # benchmarks/results/kernels_h100_run4_*.json and run{12,17}_*.json (torch 2.11, triton 3.6),
    # bf16
    "device": {"name": "H100 SXM", "date": "2026-11-22/24"},
    # run 12, 8192 x 4096, forward + backward GPU time: 119.2 us vs HF's Python LlamaRMSNorm 1733.0
    # us
    "rms_norm": {"gpu_time_ratio_vs_hf_eager": 1733.0 / 119.2},
    # run 4, 4096 x 14336, forward + backward GPU time: 311.4 us vs F.silu(g) * u 543.4 us; keeps
    # gate and up only (eager also keeps silu(g))
    "swiglu": {"speedup_vs_eager": 543.4 / 311.4, "saved_ratio_vs_eager": 3 / 2},
    # run 17, 32768 tokens, H 4096, V 128256: peak 1.79 GB vs 48.1 GB; 154 ms vs 226 ms
    "linear_cross_entropy": {"peak_memory_ratio_vs_eager": 48096.0 / 1791.1,
                             "time_ratio_vs_eager": 154.10 / 225.92},
    # run 17, a 1.24B Llama-style model, batch 4 x 2048, AdamW: the whole patch
    "end_to_end": {"step_ms": (190.03, 150.12), "peak_GB": (34.47, 18.59)},
}

_RMS_OPS = {"aten::pow", "aten::mean", "aten::rsqrt"}
# SiLU next to a mul is a SwiGLU (SiLU is rarely used ungated); a GELU could be a plain MLP's, which
# a gated kernel does not replace, so it is not taken as evidence.
_GLU_OPS = {"aten::silu", "aten::silu_backward"}
_CE_OPS = {"aten::log_softmax", "aten::_log_softmax", "aten::cross_entropy_loss", "aten::nll_loss",
           "aten::nll_loss_forward", "aten::_log_softmax_backward_data"}


def _where() -> str:
    d = MEASURED.get("device") or {}
    return f" (measured on {d['name']}, {d['date']})" if d.get("name") and d.get("date") else ""


def kernel_fix(op_names: tuple[str, ...] | list[str]) -> Fix | None:
    """The fused-kernel fix for these ops, or None when none of the kernels applies."""
    ops = set(op_names)
    parts = []
    rms = MEASURED.get("rms_norm") or {}
    glu = MEASURED.get("swiglu") or {}
    ce = MEASURED.get("linear_cross_entropy") or {}
    # all of an RMSNorm's ops (x.pow(2).mean(-1), rsqrt), an activation next to a mul, a log-softmax
    if ops >= _RMS_OPS and rms.get("gpu_time_ratio_vs_hf_eager"):
        parts.append(f"RMSNorm in {rms['gpu_time_ratio_vs_hf_eager']:.1f}x less GPU time than "
                     "HF eager (forward + backward)")
    if ops & _GLU_OPS and "aten::mul" in ops and glu.get("speedup_vs_eager"):
        text = f"SwiGLU {glu['speedup_vs_eager']:.1f}x faster than eager"
        if glu.get("saved_ratio_vs_eager"):
            text += f", {glu['saved_ratio_vs_eager']:.1f}x less memory kept for backward"
        parts.append(text)
    if ops & _CE_OPS and ce.get("peak_memory_ratio_vs_eager"):
        parts.append(f"the LM head + loss with {ce['peak_memory_ratio_vs_eager']:.1f}x less peak "
                     "memory than eager (the fp32 logits are never whole)")
    if not parts:
        return None
    e2e = MEASURED.get("end_to_end") or {}
    if e2e.get("step_ms") and e2e.get("peak_GB"):
        (t0, t1), (m0, m1) = e2e["step_ms"], e2e["peak_GB"]
        parts.append(f"on a 1.24B Llama-style model the whole patch took the step from {t0:.0f} to "
                     f"{t1:.0f} ms and its peak memory from {m0:.1f} to {m1:.1f} GB")
    return Fix("Swap in gpudoctor's fused kernels: " + "; ".join(parts) + _where(),
               "from gpudoctor.kernels import patch\nprint(patch(model))   # HF "
               "Llama/Mistral/Qwen2/Gemma-style; unpatch(model) undoes it")
