"""GPU memory from the profiler's ``[memory]`` events: peaks, churn, fragmentation.

Needs ``profile_memory=True``; without memory events the analysis is not applicable. Allocator
calls (cudaMalloc / cudaFree) come from the runtime events, which every CUDA trace has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
import numpy as np

from gpudoctor.analysis.host_events import allocator_calls
from gpudoctor.analysis.intervals import contains
from gpudoctor.analysis.steps import Steps
from gpudoctor.trace.model import Trace

if TYPE_CHECKING:
    from gpudoctor.capture.model_state import ModelState


class MemoryResult(msgspec.Struct, frozen=True):
    applicable: bool
    reason: str  # why not applicable ("" when applicable)
    capacity_bytes: int  # the GPU's total memory (0 when unknown)
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    fragmentation: float  # 1 - allocated / reserved at the peak of reserved
    allocations_per_step: float
    allocated_bytes_per_step: float
    reserved_growth_bytes: int  # reserved at the end minus at the start
    malloc_calls_per_step: float  # cudaMalloc / cudaFree / driver equivalents
    malloc_ms_per_step: float
    persistent_bytes: int = 0  # allocated when the first step starts: what lives between steps
    model_state: ModelState | None = None  # the optimizer's params/grads/states bytes (live runs)

    @property
    def peak_reserved_fraction(self) -> float:
        return self.peak_reserved_bytes / self.capacity_bytes if self.capacity_bytes else 0.0


def memory(trace: Trace, steps: Steps, model_state: ModelState | None = None) -> MemoryResult:
    n = max(len(steps), 1)
    calls, call_ms = _allocator_calls(trace, steps)
    mem = trace.memory
    capacity = trace.gpu.memory_bytes if trace.gpu else 0
    if len(mem) == 0:
        return MemoryResult(False,
                            "no GPU [memory] events: record with profile_memory=True", capacity, 0,
                            0, 0.0, 0.0, 0.0, 0, calls / n, call_ms / n, model_state=model_state)
    peak_r = int(mem.reserved.max())
    at_peak = int(np.argmax(mem.reserved))
    frag = 1.0 - mem.allocated[at_peak] / peak_r if peak_r else 0.0
    in_steps = contains(steps.start, steps.end, mem.ts)
    allocs = in_steps & (mem.delta > 0)
    return MemoryResult(
        applicable=True,
        reason="",
        capacity_bytes=capacity,
        peak_allocated_bytes=int(mem.allocated.max()),
        peak_reserved_bytes=peak_r,
        fragmentation=float(max(frag, 0.0)),
        allocations_per_step=float(allocs.sum()) / n,
        allocated_bytes_per_step=float(mem.delta[allocs].sum()) / n,
        reserved_growth_bytes=int(mem.reserved[-1] - mem.reserved[0]),
        malloc_calls_per_step=calls / n,
        malloc_ms_per_step=call_ms / n,
        persistent_bytes=_allocated_at(mem, float(steps.start[0])) if len(steps)
        else int(mem.allocated.min()), model_state=model_state,
    )


def _allocated_at(mem, ts: float) -> int:
    """Allocated bytes just before ``ts`` (the last [memory] event at or before it)."""
    i = int(np.searchsorted(mem.ts, ts, side="right")) - 1
    return int(mem.allocated[i]) if i >= 0 else int(mem.allocated.min())


def _allocator_calls(trace: Trace, steps: Steps) -> tuple[int, float]:
    host = trace.host
    mask = allocator_calls(trace) & contains(steps.start, steps.end, host.ts) if len(host) else np.zeros(0, bool)
    return int(mask.sum()), float(host.dur[mask].sum()) / 1e6
