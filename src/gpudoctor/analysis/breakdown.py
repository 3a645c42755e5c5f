"""Per-step breakdown: GPU time by kind of work, communication, memcpy, and idle."""

from __future__ import annotations

import msgspec
import numpy as np

from gpudoctor.analysis.intervals import overlap_per_window, union
from gpudoctor.analysis.steps import Steps
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import DeviceCat, Trace


class Breakdown(msgspec.Struct, frozen=True):
    """Averages per step, in ms. ``by_kind`` sums event durations (streams may overlap), so the
    parts are scaled to ``busy_ms`` when drawn; ``busy_ms + idle_ms == step_ms``."""

    step_ms: float
    busy_ms: float
    idle_ms: float
    by_kind: dict[str, float]  # Kind name -> ms per step
    busy_per_step_ms: tuple[float, ...]
    idle_per_step_ms: tuple[float, ...]
    kernel_count_per_step: float  # kernels only (what launch-bound counts)
    launch_count_per_step: float  # kernels, copies and memsets: each a launch the host pays for
    triton_ms: float
    cuda_graph_ms: float

    @property
    def busy_pct(self) -> float:
        return 100.0 * self.busy_ms / self.step_ms if self.step_ms > 0 else 0.0

    def ms(self, *kinds: Kind) -> float:
        return sum(self.by_kind.get(k.name, 0.0) for k in kinds)


def gpu_busy_intervals(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Union of every GPU event's interval (all streams, all devices of the trace)."""
    return union(trace.device.ts, trace.device.end)


def breakdown(trace: Trace, steps: Steps) -> Breakdown:
    dev = trace.device
    n = max(len(steps), 1)
    busy_s, busy_e = gpu_busy_intervals(trace)
    busy = overlap_per_window(busy_s, busy_e, steps.start, steps.end)
    window = steps.end - steps.start
    clipped = durations_in_steps(trace, steps)
    by_kind: dict[str, float] = {}
    for kind in Kind:
        mask = dev.kind == kind
        if mask.any():
            by_kind[kind.name] = float(clipped[mask].sum()) / 1e6 / n
    in_window = clipped > 0
    return Breakdown(
        step_ms=float(window.sum()) / 1e6 / n,
        busy_ms=float(busy.sum()) / 1e6 / n,
        idle_ms=float((window - busy).sum()) / 1e6 / n,
        by_kind=dict(sorted(by_kind.items(), key=lambda kv: -kv[1])),
        busy_per_step_ms=tuple((busy / 1e6).round(4).tolist()),
        idle_per_step_ms=tuple(((window - busy) / 1e6).round(4).tolist()),
        kernel_count_per_step=float((in_window & (dev.cat == DeviceCat.KERNEL)).sum()) / n,
        launch_count_per_step=float(in_window.sum()) / n,
        triton_ms=float(clipped[dev.triton].sum()) / 1e6 / n,
        cuda_graph_ms=float(clipped[dev.graph].sum()) / 1e6 / n,
    )


def durations_in_steps(trace: Trace, steps: Steps) -> np.ndarray:
    """Each device event's duration inside the step windows (windows do not overlap)."""
    dev = trace.device
    if len(dev) == 0 or len(steps) == 0:
        return np.zeros(len(dev), dtype=np.int64)
    order = np.argsort(steps.start)
    ws, we = steps.start[order], steps.end[order]
    k = np.searchsorted(ws, dev.ts, side="right") - 1
    kk = np.maximum(k, 0)
    inside = np.clip(np.minimum(dev.end, we[kk]) - np.maximum(dev.ts, ws[kk]), 0, None)
    inside = np.where(k >= 0, inside, 0)
    # An event that starts before a window and runs into the next one.
    nxt = np.minimum(kk + 1, len(ws) - 1)
    spill = np.clip(np.minimum(dev.end, we[nxt]) - np.maximum(dev.ts, ws[nxt]), 0, None)
    spill = np.where(nxt != kk, spill, 0)
    return (inside + spill).astype(np.int64)
