"""Step segmentation: where each training / inference step starts and ends.

In order of preference: ``ProfilerStep#N`` markers (``prof.step()``), ``Optimizer.step#...``
annotations (one step ends where an optimizer step ends), else the whole trace as one step.
A step's window is its host span; the GPU work it launched may run past its end, which is why
breakdowns are taken over windows laid end to end (what one window misses the next one holds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpudoctor.trace.model import HostCat, Trace


@dataclass(frozen=True, eq=False)
class Steps:
    method: str  # "profiler-step" | "optimizer-step" | "whole-trace"
    start: np.ndarray  # int64 ns
    end: np.ndarray  # int64 ns
    labels: tuple[str, ...]

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
        steps = Steps("whole-trace", np.array([lo], np.int64), np.array([max(hi, lo + 1)], np.int64), ("trace",))
    return steps


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
    idx = idx[np.argsort(host.ts[idx], kind="stable")]
    # Nested duplicates (a cpu_op and a user_annotation for the same step) keep the outer one.
    idx = idx[host.depth[idx] == host.depth[idx].min()]
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
