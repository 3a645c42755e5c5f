"""Step segmentation: where each training / inference step starts and ends.

In order of preference: ``ProfilerStep#N`` markers (``prof.step()``), ``Optimizer.step#...``
annotations (one step ends where an optimizer step ends), else the whole trace as one step.
A step's host span is not its GPU span: when the GPU is the bottleneck the host runs ahead and
its ProfilerStep ranges say nothing about how long a step takes. Windows are therefore aligned to
the GPU timeline: step i starts at the later of its host start and the end of the GPU work the
host launched before it, and ends where step i+1 starts (the last one at the end of its own GPU
work). Host-bound steps keep their host boundaries; GPU-bound steps get their GPU throughput.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpudoctor.trace.model import HostCat, Trace


@dataclass(frozen=True, eq=False)
class Steps:
    method: str  # "profiler-step" | "optimizer-step" | "whole-trace"
    start: np.ndarray  # int64 ns, aligned to the GPU timeline
    end: np.ndarray  # int64 ns
    labels: tuple[str, ...]
    host_start: np.ndarray | None = None  # the host's own step ranges
    host_end: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.start)

    @property
    def durations_ms(self) -> np.ndarray:
        return (self.end - self.start) / 1e6

    @property
    def median_ms(self) -> float:
        return float(np.median(self.durations_ms)) if len(self) else 0.0

    @property
    def total_ns(self) -> int:
        return int((self.end - self.start).sum())


def segment(trace: Trace) -> Steps:
    """The steps of a trace (never empty for a trace with events)."""
    steps = _profiler_steps(trace)
    if steps is None:
        steps = _optimizer_steps(trace)
    if steps is None:
        lo, hi = trace.span
        return Steps("whole-trace", np.array([lo], np.int64), np.array([max(hi, lo + 1)], np.int64), ("trace",))
    return align_to_gpu(trace, steps)


def align_to_gpu(trace: Trace, steps: Steps) -> Steps:
    """Move step boundaries to where each step's GPU work could begin (see module docstring)."""
    dev, host = trace.device, trace.host
    hs, he = steps.start, steps.end
    launched = np.full(len(dev), -(2**62), np.int64)
    ok = dev.launch >= 0
    launched[ok] = host.ts[dev.launch[ok]]
    # which step launched each GPU event (-1: before the first step, or no launch record)
    owner = np.searchsorted(hs, launched, side="right") - 1
    owner[~ok] = -1
    n = len(hs)
    gpu_end = np.full(n + 1, -(2**62), np.int64)  # [k+1]: end of GPU work launched by step k
    np.maximum.at(gpu_end, owner + 1, dev.end)
    prior = np.maximum.accumulate(gpu_end)  # GPU work launched up to and including step k-1
    start = np.maximum(hs, prior[:n])
    last_end = max(int(he[-1]), int(gpu_end[n]))
    end = np.concatenate((start[1:], [last_end]))
    end = np.maximum(end, start + 1)
    return Steps(steps.method, start.astype(np.int64), end.astype(np.int64), steps.labels, hs, he)


def _marked(trace: Trace, prefix: str) -> np.ndarray:
    host = trace.host
    by_name = trace.names_matching(lambda s: s.startswith(prefix))
    mask = by_name[host.name] & (host.cat == HostCat.ANNOTATION) if len(host) else np.zeros(0, bool)
    return np.flatnonzero(mask)


def _profiler_steps(trace: Trace) -> Steps | None:
    idx = _marked(trace, "ProfilerStep#")
    if idx.size == 0:
        return None
    host = trace.host
    # One marker per step: some versions write a cpu_op and a user_annotation for the same step
    # (keep the longer). Depth is no guide: a step hook fired inside optimizer.step() opens its
    # ProfilerStep range inside the optimizer's own annotation.
    best: dict[int, int] = {}
    for i in idx.tolist():
        label = int(host.name[i])
        if label not in best or host.end[i] - host.ts[i] > host.end[best[label]] - host.ts[best[label]]:
            best[label] = i
    idx = np.array(sorted(best.values(), key=lambda i: host.ts[i]), dtype=np.int64)
    labels = tuple(trace.strings[host.name[i]] for i in idx.tolist())
    return Steps("profiler-step", host.ts[idx].copy(), host.end[idx].copy(), labels)


def _optimizer_steps(trace: Trace) -> Steps | None:
    idx = _marked(trace, "Optimizer.step#")
    host = trace.host
    if idx.size < 2:
        return None
    idx = idx[np.argsort(host.ts[idx], kind="stable")]
    ends = host.end[idx]
    starts = np.concatenate(([trace.span[0]], ends[:-1]))
    labels = tuple(f"step {i}" for i in range(len(ends)))
    return Steps("optimizer-step", starts.astype(np.int64), ends.astype(np.int64), labels)
