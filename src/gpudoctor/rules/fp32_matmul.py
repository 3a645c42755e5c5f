"""fp32-matmul: a float32 model whose matrix work runs below the 16-bit tensor-core rate.

Three ways a float32 model leaves the bf16 tensor cores idle, each priced on its own:

- **fp32 on CUDA cores** (``allow_tf32 = False``, PyTorch's default for matmuls): the kernels'
  time minus a bf16 GEMM's of the same shape, at the rate the card's measured grid of shapes gives
  it (hardware/gemm_rate.py; or half the bytes at the memory roof, whichever is slower).
- **TF32 tensor cores** (``torch.set_float32_matmul_precision("high")``, ``allow_tf32 = True``,
  Hugging Face ``tf32=True``, or a flag a library set): TF32 runs at half the bf16 rate on
  Ampere and Hopper (H100 SXM datasheet: 495 vs 989 TFLOP/s dense; ``gpudoctor bench`` measured
  369-397 vs 760-800 on an H100). Priced as fp32: the bf16 kernel of the same shape off the grid,
  since a TF32 kernel's own time varies with its layout more than the bf16 one's does
  (benchmarks/BENCHMARKS-replay.md "GEMM time by shape"); where the trace gives no shape, the
  kernel's time at the bf16 / TF32 ratio of the card's ceilings.
- **fp32 / TF32 convolutions** (cuDNN runs fp32 convolutions as TF32 by default,
  ``torch.backends.cudnn.allow_tf32``): each kernel of the convolution (its layout and workspace
  kernels too) at the bf16 / TF32 ratio of the card's roofs, or fp32 / bf16 where its name says no
  TF32 (a CUDA-core convolution), and never under half its bytes at the memory roof: the 16-bit
  kernel of the same convolution, whose time by shape is not measured.
- **fp32 attention**: ``scaled_dot_product_attention`` with float32 q/k/v cannot take the flash
  kernels (16-bit only) and runs the memory-efficient kernel in fp32, or its math fallback
  (matmul, softmax, matmul: with some masks, Hugging Face models in fp32); priced as its FLOPs at
  the fused-attention rate of 16-bit kernels. The math fallback in fp32 is this finding's, not
  naive-attention's: the user called the fused API, and bf16 autocast is what lets it fuse.

Each adds the casts that autocast puts in front of the matmuls (fp32 read, bf16 written).
The fix keeps float32 master weights (autocast), so the optimizer and the loss stay in fp32.

Under bf16 autocast a convolution's bf16 output reaches batch norm, which is on none of
autocast's lists, and PyTorch runs cuDNN's batch norm only when neither input nor weight is bf16
(aten/src/ATen/native/Normalization.cpp ``_select_batch_norm_backend``): its own kernels take
over, slower than cuDNN's fp32 ones though they move half the bytes, and launch more of them
(``batch_norm_edit``).
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis, autocast_casts
from gpudoctor.analysis.host_events import ran_backward
from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.hardware.ceilings import Ceilings
from gpudoctor.hardware.gemm_rate import rate_source
from gpudoctor.replay.edits import Edit, merge
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import (
    ATTENTION_EFFICIENCY,
    GEMM_EFFICIENCY,
    gemm_ns_of_events,
    kernel_names_of_events,
    model_named,
    op_names_of_events,
    sources_of_events,
)
from gpudoctor.rules.shared import (  # noqa: F401 (fp32_matmul.fp32_*)
    fp32_matrix_events,
    fp32_sdpa_math_events,
    sgemm_named,
)
from gpudoctor.trace.kernels import MATRIX_KINDS_FOR_ATTENTION, Kind

ID = "fp32-matmul"
CAST_BYTES_FACTOR = 1.0  # a kernel whose shape the trace does not give: all its bytes once
CAST_ELEMENT_BYTES = 6.0  # an fp32 element read and a 16-bit one written (or the other way)
# TF32 is half the bf16 tensor-core rate on A100 / H100 / H200 / B200 (datasheets), used when
# the ceilings carry no tf32 roof.
TF32_TO_BF16_RATE = 0.5


def _bf16_ns(a: Analysis, part: str, idx: np.ndarray) -> np.ndarray:
    """Each event's time once it runs on 16-bit tensor cores (its own time where FLOPs are
    unknown)."""
    rf, c = a.roofline, a.ceilings
    time_ns = rf.event_in_steps_ns[idx].astype(float)
    flops, nbytes = rf.event_flops[idx], rf.event_bytes[idx]
    hbm = c.hbm_bytes_per_s
    casts = _cast_ns(a, idx, nbytes, hbm)
    half_bytes = nbytes / 2 / hbm * 1e9
    if part == "conv":
        return _conv_bf16_ns(a, idx, time_ns, half_bytes)
    if part == "attention":  # the math fallback's softmax and masking kernels carry no matmul FLOPs
        matmul = np.isin(a.trace.device.kind[idx],
                         [int(Kind.ATTENTION), *MATRIX_KINDS_FOR_ATTENTION])
        return _fused_attention_ns(time_ns, np.where(matmul, flops, 0.0),
                                   c.best_matrix_flops * ATTENTION_EFFICIENCY)
    # the bf16 kernel of the same shape at the measured grid's rate (rules/common.py
    # gemm_ns_of_events); a TF32 kernel whose shape the trace does not give, at the bf16 / TF32
    # ratio
    after = np.maximum(gemm_ns_of_events(a, idx, c.half_dtype), half_bytes) + casts
    if part == "tf32":
        tf32_roof = _tf32_roof(c)
        by_ratio = np.maximum(time_ns * min(tf32_roof / c.best_matrix_flops, 1.0), half_bytes) + casts
        return np.where(flops > 0, np.minimum(after, time_ns), by_ratio)
    # an fp32 GEMM on CUDA cores whose shape the trace does not give (named "sgemm"): as if it ran
    # at the fp32 roof, its most FLOPs, taken at GEMM_EFFICIENCY of the 16-bit roof: the least
    # it saves
    at_roof = time_ns * c.matrix("fp32") / (c.best_matrix_flops * GEMM_EFFICIENCY)
    return np.where(flops > 0, after, np.minimum(at_roof + casts, time_ns))


def _cast_ns(a: Analysis, idx: np.ndarray, nbytes: np.ndarray, hbm: float) -> np.ndarray:
    """The GPU time of the casts autocast adds for each matrix kernel, at the memory roof: where the
    trace gives the GEMM's shape, its smallest matrix (a Linear's weight in its forward and dgrad,
    its gradient in its wgrad) read in fp32 and written in 16 bits, or back; elsewhere all the
    kernel's bytes once. The activations autocast also casts are about paid back by the
    elementwise kernels that then move 16-bit tensors (benchmarks/BENCHMARKS-replay.md "The casts
    autocast adds, on the GPU")."""
    out = CAST_BYTES_FACTOR * nbytes.astype(float)
    for j, cost in enumerate(a.roofline.op_costs.lookup(a.trace.device.op[idx])):
        if cost is not None and cost.gemm_shape is not None:
            b, m, n, k = cost.gemm_shape
            out[j] = CAST_ELEMENT_BYTES * b * min(m * k, k * n, m * n)
    return out / hbm * 1e9


def _tf32_roof(c: Ceilings) -> float:
    """The card's TF32 roof, or half its 16-bit one where the ceilings carry none."""
    return c.matrix_flops.get("tf32") or c.best_matrix_flops * TF32_TO_BF16_RATE


def _conv_bf16_ns(a: Analysis, idx: np.ndarray, time_ns: np.ndarray,
                  half_bytes: np.ndarray) -> np.ndarray:
    """A convolution's kernels at the bf16 rate: at the TF32 / bf16 ratio (its layout and
    workspace kernels move half the bytes: the same ratio), a CUDA-core one (named ``sgemm``) at
    fp32 / bf16 with GEMM_EFFICIENCY; none under half its bytes at the memory roof."""
    c = a.ceilings
    tf32_roof = _tf32_roof(c)
    simt = sgemm_named(a)[idx]
    ratio = np.where(simt, c.matrix("fp32") / (c.best_matrix_flops * GEMM_EFFICIENCY),
                     tf32_roof / c.best_matrix_flops)
    return np.minimum(np.maximum(time_ns * np.clip(ratio, 0.0, 1.0), half_bytes), time_ns)


def _fused_attention_ns(time_ns: np.ndarray, flops: np.ndarray, rate: float) -> np.ndarray:
    """Per event, its share of the pattern's time once fused: the pattern's FLOPs at ``rate``,
    spread over its events by their time (never more than they took)."""
    total_ns = time_ns.sum()
    if total_ns <= 0 or flops.sum() <= 0:
        return time_ns  # no FLOPs known: claim nothing
    fused_ns = min(flops.sum() / rate * 1e9, total_ns)
    return time_ns * (fused_ns / total_ns)


def check(a: Analysis) -> Finding | None:
    parts = fp32_matrix_events(a)
    idx = np.concatenate(list(parts.values()))
    if idx.size == 0:
        return None
    rf = a.roofline
    n = max(len(a.steps), 1)
    ms = {p: float(rf.event_in_steps_ns[i].sum()) / 1e6 / n for p, i in parts.items()}
    saved = {
        p: float(np.clip(rf.event_in_steps_ns[i] - _bf16_ns(a, p, i), 0, None).sum()) / 1e6 / n
        for p, i in parts.items()
    }
    time_ms, saving = sum(ms.values()), sum(saved.values())
    main = max(ms, key=lambda p: ms[p])
    time_ns = float(rf.event_in_steps_ns[idx].sum())
    achieved = float(rf.event_flops[idx].sum()) / (time_ns / 1e9) if time_ns else 0.0
    roof = a.ceilings.best_matrix_flops
    title, summary = _wording(main, ms, achieved, roof)
    inference = not ran_backward(a.trace)
    return make_finding(
        ID,
        title,
        a.step_ms,
        saving,
        summary,
        Evidence(
            numbers={
                "fp32_matrix_ms_per_step": round(time_ms, 3),
                "fp32_cuda_core_gemm_ms_per_step": round(ms["simt"], 3),
                "tf32_gemm_ms_per_step": round(ms["tf32"], 3),
                "fp32_attention_ms_per_step": round(ms["attention"], 3),
                "fp32_convolution_ms_per_step": round(ms["conv"], 3),
                # none where the trace records no shapes (no FLOPs)
                **({"achieved_tflops": round(achieved / 1e12, 2)} if achieved > 0 else {}),
                "bf16_roof_tflops": round(roof / 1e12, 1),
                "tf32_roof_tflops": round((a.ceilings.matrix_flops.get("tf32") or 0.0) / 1e12, 1),
                "bf16_gemm_rate_from": rate_source(a.ceilings),
                "share_of_step_pct": round(100 * time_ms / a.step_ms, 1) if a.step_ms > 0 else 0.0,
            },
            ops=op_names_of_events(a.trace, idx),
            kernels=kernel_names_of_events(a.trace, idx),
            sources=sources_of_events(a.trace, idx),
        ),
        _fixes(ms, a.ceilings, inference, a.root_module),
        wrong_fix=(
            "A bigger batch will not help: the matmuls are capped by the fp32 or TF32 rate, not by "
            "their size." + ("" if inference else
                             " Casting the weights to bf16 for the optimizer too "
                             "(model.to(bfloat16)) loses fp32 master weights; autocast keeps them.")
        ),
    )


def _wording(main: str, ms: dict[str, float], achieved: float, roof: float) -> tuple[str, str]:
    detail = ", ".join(
        f"{ms[p]:.2f} ms {label}" for p, label in
        (("simt", "fp32 on CUDA cores"), ("tf32", "TF32 on tensor cores"),
         ("attention", "fp32 attention"), ("conv", "fp32 / TF32 convolutions"))
        if ms[p] > 0
    )
    rate = (f" at {achieved / 1e12:.3g} TFLOP/s" if achieved > 0
            else " (the trace records no shapes: named by its kernels)")
    head = f"{sum(ms.values()):.2f} ms per step of float32 matrix work ({detail}){rate}"
    if main == "tf32":
        return ("FP32 matmuls run as TF32, at half the bf16 tensor-core rate",
                (f"{head}; TF32 runs at half the bf16 rate, and the 16-bit roof is "
                 f"{roof / 1e12:.0f} TFLOP/s."))
    if main == "conv":
        return ("Convolutions run on fp32 tensors: TF32 at best, half the bf16 tensor-core rate",
                (f"{head}; cuDNN runs fp32 convolutions as TF32 at most (half the bf16 rate), "
                 f"and every activation is 4 bytes; the 16-bit roof is {roof / 1e12:.0f} TFLOP/s."))
    if main == "attention":
        return ("Attention runs in fp32 and cannot use the flash kernels",
                (f"{head}; float32 q/k/v rule out FlashAttention (16-bit only), so attention "
                 "runs the memory-efficient kernel in fp32."))
    return ("FP32 matmuls run on CUDA cores, not tensor cores",
            f"{head}; the 16-bit tensor-core roof is {roof / 1e12:.0f} TFLOP/s.")


_ACCURACY = (
    "bf16 keeps 8 mantissa bits (TF32 10, fp32 23); autocast keeps fp32 master weights and runs "
    "softmax, norms and losses in fp32. Compare the loss curve against the fp32 run for a few "
    "hundred steps."
)
_FP16_ACCURACY = (
    "fp16 keeps 10 mantissa bits but a narrow range: the scaler keeps small gradients from "
    "flushing to zero, and autocast keeps fp32 master weights. Compare the loss curve against the "
    "fp32 run for a few hundred steps."
)


def _fixes(ms: dict[str, float], ceilings: Ceilings, inference: bool = False,
           module: str = "") -> tuple[Fix, ...]:
    """The fixes on this card: bf16 where it has bf16 tensor cores (or where its roofs are not
    known); fp16 with a gradient scaler where it has fp16 ones only (``Ceilings.half_dtype``:
    V100, T4); TF32 only where the card has it (compute capability 8.0 on). A step with no backward
    (``inference``): the model cast to 16 bits once, first."""
    roofs = ceilings.matrix_flops
    fp16 = ceilings.half_dtype == "fp16"
    dtype = "torch.float16" if fp16 else "torch.bfloat16"
    tf32 = not fp16 and ms["simt"] > 0 and ms["tf32"] == 0 and ms["conv"] == 0 and bool(
        roofs.get("tf32") or not roofs)
    if inference:
        return _inference_fixes(ms, dtype, tf32, module)
    fixes = [Fix(
        "Run forward and loss under fp16 autocast with a gradient scaler (this GPU's tensor cores "
        "take fp16, not bf16)",
        f"with torch.autocast('cuda', dtype={dtype}):\n    loss = model(x){model_named(module)}\n"
        "scaler.scale(loss).backward(); scaler.step(opt); scaler.update()\n"
        f"# scaler = torch.amp.GradScaler('cuda'), made once. {_FP16_ACCURACY}",
    ) if fp16 else Fix(
        "Run forward and loss under bf16 autocast (fp32 master weights kept)",
        f"with torch.autocast('cuda', dtype={dtype}):\n    loss = model(x){model_named(module)}\n"
        f"# {_ACCURACY}",
    )]
    if tf32:
        fixes.append(_TF32_FIX)
    if ms["attention"] > 0:
        fixes.append(_attention_fix(dtype))
    fixes.append(Fix(f"Trainer / Lightning: ask for {'fp16' if fp16 else 'bf16'} mixed precision",
                     "TrainingArguments(fp16=True)   # Hugging Face\n"
                     "Trainer(precision='16-mixed')   # Lightning" if fp16 else
                     "TrainingArguments(bf16=True)   # Hugging Face\n"
                     "Trainer(precision='bf16-mixed')   # Lightning"))
    return tuple(fixes)


_TF32_FIX = Fix("Let fp32 matmuls use TF32 tensor cores (half the bf16 rate, no casts)",
                "torch.set_float32_matmul_precision('high')")


def _attention_fix(dtype: str) -> Fix:
    kernel = "a fused kernel" if dtype == "torch.float16" else "FlashAttention"
    return Fix(f"Give attention 16-bit q/k/v so SDPA can take {kernel}",
               f"q, k, v = (t.to({dtype}) for t in (q, k, v))  # autocast does this")


def _inference_fixes(ms: dict[str, float], dtype: str, tf32: bool,
                     module: str = "") -> tuple[Fix, ...]:
    """A served model's fixes. No optimizer keeps fp32 master weights, so the model is cast once,
    first: autocast would cast every weight at every call and, on its mixed-precision path, turn
    nn.TransformerEncoder's fused inference path off (benchmarks/BENCHMARKS-twins.md "Four
    GPU-bound twins"). Then autocast, and the frameworks' 16-bit evaluation settings."""
    half = "fp16" if dtype == "torch.float16" else "bf16"
    fixes = [
        Fix(f"Serving the model: cast it to {dtype} once and feed it {dtype} inputs",
            f"model = model.to({dtype}).eval(){model_named(module)}\n"
            f"x = x.to({dtype})  # each floating-point input the model reads\n"
            "# no optimizer, no fp32 master weights to keep"),
        Fix(f"Or run the forward under {half} autocast (the model stays fp32; each weight is cast "
            "at every call)",
            f"with torch.autocast('cuda', dtype={dtype}):\n    out = model(x)\n"
            "# compare the outputs with the fp32 model's on a few batches"),
    ]
    if tf32:
        fixes.append(_TF32_FIX)
    if ms["attention"] > 0:
        fixes.append(_attention_fix(dtype))
    fixes.append(Fix(f"Trainer / Lightning: evaluate and predict in {half}",
                     f"TrainingArguments({half}_full_eval=True)   # Hugging Face\n"
                     f"Trainer(precision='{'16' if half == 'fp16' else 'bf16'}-true')   # Lightning"))
    return tuple(fixes)


# Cast launches autocast adds per fp32 matrix kernel where the trace does not say which operators
# launched them (analysis/autocast_casts.py counts them where it does): a forward matmul casts its
# input and its weight; its two backward matmuls reuse them: 2 casts per 3 kernels.
CASTS_PER_MATMUL = 2 / 3


def casts_per_matmul(a: Analysis, matmuls: np.ndarray) -> float:
    """The casts autocast adds, forward and backward, per fp32 matrix kernel of ``matmuls``:
    counted from the operators that launched them (analysis/autocast_casts.py); CASTS_PER_MATMUL
    for each kernel no counted operator launched (a cuDNN RNN's)."""
    if matmuls.size == 0:
        return 0.0
    classes = autocast_casts.op_classes(a.trace)
    ops, counted = autocast_casts.lower_ops_of(a.trace, matmuls, classes)
    fwd, bwd = autocast_casts.casts(a.trace, ops, classes)
    uncounted = CASTS_PER_MATMUL * float((~counted).sum())
    return (float(fwd.sum() + bwd.sum()) + uncounted) / matmuls.size


def edit(a: Analysis, finding: Finding | None = None) -> Edit | None:
    """Each fp32 / TF32 matrix kernel at its bf16 time (casts included, as priced), the casts'
    launches on the host, and cuDNN's batch norms as PyTorch's own (``batch_norm_edit``)."""
    matmuls = _matmul_edit(a)
    if matmuls is None:
        return None
    norms = batch_norm_edit(a)
    return matmuls if norms is None else merge([matmuls, norms])


# PyTorch's batch-norm kernels on a bf16 input against cuDNN's on the same tensor in fp32, in
# training: time ratios forward and backward, NCHW and channels-last (cuDNN's NHWC kernels), over
# nine shapes, weighted by time; and what a forward's two extra launches cost the host
# (benchmarks/probes/probe_batch_norm_bf16.py;
# benchmarks/BENCHMARKS-replay.md "Batch norm under bf16 autocast").
NATIVE_BATCH_NORM_FORWARD = 1.61
NATIVE_BATCH_NORM_BACKWARD = 1.17
NATIVE_BATCH_NORM_FORWARD_NHWC = 1.51
NATIVE_BATCH_NORM_BACKWARD_NHWC = 1.02
NATIVE_BATCH_NORM_EXTRA_LAUNCHES = 2
NATIVE_KERNEL_LAUNCH_NS = 7_000.0
_CUDNN_BATCH_NORM = "aten::cudnn_batch_norm"
_CUDNN_BATCH_NORM_BACKWARD = "aten::cudnn_batch_norm_backward"


def batch_norm_edit(a: Analysis) -> Edit | None:
    """cuDNN's batch-norm kernels (launched by ``aten::cudnn_batch_norm`` and its backward) at the
    time PyTorch's own take on the bf16 tensor autocast gives them, and each forward's extra
    launches on its launching call; None where the step runs no cuDNN batch norm."""
    dev, host = a.trace.device, a.trace.host
    live = (a.roofline.event_in_steps_ns > 0) & (dev.op >= 0)
    names = a.trace.names_matching(lambda s: s in (_CUDNN_BATCH_NORM, _CUDNN_BATCH_NORM_BACKWARD))
    idx = np.flatnonzero(live & names[host.name[np.maximum(dev.op, 0)]])
    if idx.size == 0:
        return None
    backward = host.name[dev.op[idx]] == a.trace.string_ids.get(_CUDNN_BATCH_NORM_BACKWARD, -1)
    nhwc = a.trace.names_matching(lambda s: "nhwc" in s.lower())[dev.name[idx]]
    ratio = np.where(backward, np.where(nhwc, NATIVE_BATCH_NORM_BACKWARD_NHWC,
                                        NATIVE_BATCH_NORM_BACKWARD),
                     np.where(nhwc, NATIVE_BATCH_NORM_FORWARD_NHWC, NATIVE_BATCH_NORM_FORWARD))
    # one launching call a forward operator takes its extra launches, however many kernels it ran
    forward = idx[~backward & (dev.launch[idx] >= 0)]
    calls = dev.launch[forward[np.unique(dev.op[forward], return_index=True)[1]]]
    return Edit(device=idx.astype(np.int64), device_ns=dev.dur[idx] * ratio,
                calls_slower=calls.astype(np.int64),
                calls_slower_ns=np.full(calls.size,
                                        NATIVE_BATCH_NORM_EXTRA_LAUNCHES * NATIVE_KERNEL_LAUNCH_NS),
                note="batch norm on PyTorch's kernels (bf16 leaves cuDNN)")


def _matmul_edit(a: Analysis) -> Edit | None:
    """Each fp32 / TF32 matrix kernel at its bf16 time (casts included, as priced), and the
    casts' launches on the host."""
    parts = fp32_matrix_events(a)
    idx_parts = [(p, i) for p, i in parts.items() if i.size]
    if not idx_parts:
        return None
    dev, rf = a.trace.device, a.roofline
    idx = np.concatenate([i for _, i in idx_parts])
    after_in_steps = np.concatenate([_bf16_ns(a, p, i) for p, i in idx_parts])
    share = np.divide(after_in_steps, rf.event_in_steps_ns[idx], out=np.ones(idx.size),
                      where=rf.event_in_steps_ns[idx] > 0)
    matmuls = np.concatenate([i for p, i in idx_parts if p != "attention"]) if any(
        p != "attention" for p, _ in idx_parts) \
        else np.empty(0, np.int64)
    return Edit(device=idx.astype(np.int64), device_ns=dev.dur[idx] * np.clip(share, 0.0, 1.0),
                added_at=matmuls.astype(np.int64), added_launches=casts_per_matmul(a, matmuls),
                note="matmuls at the bf16 rate")



def tf32_edit(a: Analysis, finding: Finding | None = None) -> Edit | None:
    """TF32 on (the ``tf32`` knob): fp32 GEMMs on CUDA cores at the TF32 rate for their shapes
    (never below their bytes at the memory roof); TF32 GEMMs and attention unchanged."""
    idx = fp32_matrix_events(a)["simt"]
    if idx.size == 0:
        return None
    rf, c, dev = a.roofline, a.ceilings, a.trace.device
    flops, nbytes = rf.event_flops[idx], rf.event_bytes[idx]
    in_steps = rf.event_in_steps_ns[idx].astype(float)
    after = np.maximum(gemm_ns_of_events(a, idx, "tf32"), nbytes / c.hbm_bytes_per_s * 1e9)
    after = np.where(flops > 0, np.minimum(after, in_steps), in_steps)
    share = np.divide(after, in_steps, out=np.ones(idx.size), where=in_steps > 0)
    return Edit(device=idx.astype(np.int64), device_ns=dev.dur[idx] * share,
                note="matmuls at the TF32 rate")


RULE = Rule(
    ID, "FP32 / TF32 matmuls and fp32 attention below the bf16 rate", check, __doc__ or "",
    order=30, calibration="same-ops", edit=edit, knob_edits=(("tf32", tf32_edit),),
    alternative_fixes=((_TF32_FIX.title, tf32_edit),),
)
