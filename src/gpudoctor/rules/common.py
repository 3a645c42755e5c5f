"""Helpers the rules share: naming the ops, kernels and source lines behind a set of events."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from gpudoctor.analysis.intervals import inside_stretches
from gpudoctor.core.arrays import distinct
from gpudoctor.hardware.gemm_rate import KERNEL_FLOOR_S, gemm_seconds
from gpudoctor.trace.model import Trace

if TYPE_CHECKING:
    from gpudoctor.analysis import Analysis

# A realistic share of the tensor-core roof that cuBLAS / FlashAttention reach on large shapes,
# used to price "the same FLOPs after the fix" where the trace gives no GEMM shape (else the
# measured grid of shapes, gemm_ns_of_events). The lab (gpudoctor lab) checks predictions made
# with it against measured fixed twins.
GEMM_EFFICIENCY = 0.6
ATTENTION_EFFICIENCY = 0.45

_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<func>.+)$")
_LIBRARY = re.compile(
    r"site-packages|dist-packages|/torch/|^torch/|/lib/python3|<built-in|threading\.py|runpy\.py"
    r"|^<frozen|contextlib\.py|/gpudoctor/capture/"
)

# What joins a loop's per-sample or per-head results into one tensor (per-sample-loop's and
# small-gemm's edits remove it: the batched call's result is already whole).
GATHER_OPS = frozenset({"aten::stack", "aten::cat", "aten::concat"})


def model_named(module: str) -> str:
    """A comment naming the module class the steps called (Analysis.root_module, where a live
    capture saw it), for a fix snippet's ``model`` line; "" where not known."""
    return f"   # model: your {module}" if module else ""


def compile_line(a: Analysis, mode: str = "") -> str:
    """``model = torch.compile(model...)``, naming the program's module where known."""
    return f"model = torch.compile(model{f', mode={mode!r}' if mode else ''})" + model_named(
        a.root_module)


def frame_line(frame_name: str, user_only: bool = True) -> str | None:
    """A python_function event's name "file.py(42): func" as "file.py:42 (func)".

    None when it is no frame, or (``user_only``) a frame of the standard library or torch.
    """
    match = _FRAME.match(frame_name)
    if match is None or (user_only and _LIBRARY.search(match["file"])):
        return None
    return f"{match['file']}:{match['line']} ({match['func']})"


def source_line(trace: Trace, host_index: int) -> str | None:
    """The innermost user-code Python frame around a host event, as "file.py:42 (func)"."""
    host = trace.host
    frame = int(host.frame[host_index]) if host_index >= 0 else -1
    fallback = None
    while frame >= 0:
        name = trace.strings[host.name[frame]]
        line = frame_line(name)
        if line:
            return line
        fallback = fallback or frame_line(name, user_only=False)
        frame = int(host.frame[frame])
    return fallback


def top_names(trace: Trace, ids: np.ndarray, weights: np.ndarray | None = None,
              limit: int = 5) -> tuple[str, ...]:
    """The most frequent (or heaviest) string ids, as names."""
    ids = ids[ids >= 0] if weights is None else ids
    if ids.size == 0:
        return ()
    if weights is None:
        counts = Counter(ids.tolist())
    else:
        counts = Counter()
        for i, w in zip(ids.tolist(), weights.tolist()):
            if i >= 0:
                counts[i] += w
    return tuple(trace.strings[i] for i, _ in counts.most_common(limit))


def op_names_of_events(trace: Trace, device_idx: np.ndarray, limit: int = 5) -> tuple[str, ...]:
    """Innermost aten ops (by GPU time) behind some device events."""
    dev = trace.device
    ops = dev.op[device_idx]
    ok = ops >= 0
    return top_names(trace, trace.host.name[ops[ok]], dev.dur[device_idx][ok].astype(float), limit)


def kernel_names_of_events(trace: Trace, device_idx: np.ndarray, limit: int = 5) -> tuple[str, ...]:
    dev = trace.device
    return top_names(trace, dev.name[device_idx], dev.dur[device_idx].astype(float), limit)


def sources_of_host(trace: Trace, host_idx: np.ndarray, weights: np.ndarray | None = None,
                    limit: int = 5) -> tuple[str, ...]:
    """Source lines of host events, heaviest first (empty without with_stack=True)."""
    counts: Counter[str] = Counter()
    w = weights if weights is not None else np.ones(len(host_idx))
    cache: dict[int, str | None] = {}
    for i, weight in zip(host_idx.tolist(), w.tolist()):
        frame = int(trace.host.frame[i])
        if frame not in cache:
            cache[frame] = source_line(trace, i)
        line = cache[frame]
        if line:
            counts[line] += weight
    return tuple(line for line, _ in counts.most_common(limit))


def sources_of_events(trace: Trace, device_idx: np.ndarray, limit: int = 5) -> tuple[str, ...]:
    dev = trace.device
    launches = dev.launch[device_idx]
    ok = launches >= 0
    return sources_of_host(trace, launches[ok], dev.dur[device_idx][ok].astype(float), limit)


# A kernel that was queued behind the previous one starts within a few microseconds of its end
# (CUDA graph replays: 0.26-0.35 us between the lab small_gemm's 1024 kernels, H100, torch 2.11);
# a longer wait is the host's doing and belongs to the idle causes.
MAX_QUEUE_GAP_NS = 5_000


def queue_gaps_before(trace: Trace, device_idx: np.ndarray) -> np.ndarray:
    """The idle ns between each device event and the end of the work before it, when that is a
    queue gap (under MAX_QUEUE_GAP_NS); 0 otherwise. Removing a kernel removes its gap too."""
    dev = trace.device
    if device_idx.size == 0:
        return np.zeros(0)
    order = np.argsort(dev.ts, kind="stable")
    ends = np.maximum.accumulate(dev.end[order])
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    pos = position[device_idx]
    prev_end = np.where(pos > 0, ends[np.maximum(pos - 1, 0)], dev.ts[device_idx])
    gap = (dev.ts[device_idx] - prev_end).astype(float)
    return np.where((gap > 0) & (gap < MAX_QUEUE_GAP_NS), gap, 0.0)


# scaled_dot_product_attention's math fallback: matmul, softmax, matmul under this op. In fp32
# it is the fp32-matmul finding's (no flash kernel takes fp32; bf16 autocast would); in 16 bits it
# is naive attention written by the library (a mask or head size the fused kernels refuse).
SDPA_MATH_OP = "aten::_scaled_dot_product_attention_math"


def inside_op_named(trace: Trace, host_idx: np.ndarray, name: str) -> np.ndarray:
    """For each host event, whether it runs inside an op called ``name`` (on the same thread)."""
    host = trace.host
    out = np.zeros(len(host_idx), bool)
    ids = trace.string_ids.get(name)
    if ids is None or host_idx.size == 0:
        return out
    outer = np.flatnonzero(host.name == ids)
    if outer.size == 0:
        return out
    for thread in distinct(host.thread[outer]).tolist():
        o = outer[host.thread[outer] == thread]
        order = np.argsort(host.ts[o])
        starts, ends = host.ts[o][order], np.maximum.accumulate(host.end[o][order])
        mine = host.thread[host_idx] == thread
        ts = host.ts[host_idx[mine]]
        k = np.searchsorted(starts, ts, side="right") - 1
        out[np.flatnonzero(mine)] = (k >= 0) & (ts < ends[np.maximum(k, 0)])
    return out


def gemm_ns_of_events(a: Analysis, idx: np.ndarray, dtype: str,
                      rows_times: np.ndarray | float = 1.0,
                      pad: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Each matrix event's time (ns) in ``dtype`` at the rate the measured grid gives its operator's
    GEMM shape (hardware/gemm_rate.py), its M, N and K through ``pad`` (a fix that pads them), its
    rows multiplied by ``rows_times`` (a batched fix stacks the rows of many calls); where the trace
    gives no shape, its FLOPs at the roof times GEMM_EFFICIENCY. Never below the shortest GEMM
    kernel."""
    rf, dev = a.roofline, a.trace.device
    flops = rf.event_flops[idx].astype(float)
    times = np.broadcast_to(np.asarray(rows_times, float), idx.shape)
    rate = np.full(idx.size, a.ceilings.matrix(dtype) * GEMM_EFFICIENCY)
    shapes = rf.op_costs.lookup(dev.op[idx])
    known = np.array([c is not None and c.gemm_shape is not None and c.flops > 0
                      for c in shapes], bool)
    if known.any():
        b, m, n, k = (np.array([shapes[i].gemm_shape[j] for i in np.flatnonzero(known)], float)
                      for j in range(4))
        if pad is not None:
            m, n, k = pad(m), pad(n), pad(k)
        op_flops = 2.0 * b * m * n * k * times[known]
        rate[known] = op_flops / gemm_seconds(m * times[known], n, k, dtype, a.ceilings, batch=b)
    return np.maximum(flops * times / np.maximum(rate, 1.0) * 1e9, KERNEL_FLOOR_S * 1e9)


def launched_inside(a: Analysis, starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """Device events in the steps launched by a host call inside one of the stretches
    [starts, ends), on that stretch's thread: the kernels a fix that removes the stretches takes
    with them."""
    dev, host = a.trace.device, a.trace.host
    launched = np.flatnonzero((dev.launch >= 0) & (a.roofline.event_in_steps_ns > 0))
    if launched.size == 0 or starts.size == 0:
        return np.empty(0, np.int64)
    calls = dev.launch[launched]
    return launched[inside_stretches(host.ts[calls], host.thread[calls], starts, ends, threads)]

