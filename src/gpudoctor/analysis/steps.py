"""Step segmentation: where each training / inference step starts and ends.

In order of preference (``Steps.method``):

1. ``profiler-step``: ``ProfilerStep#N`` markers (``prof.step()``).
2. ``iteration-marker``: ``gpudoctor.iteration#N`` ranges, which ``gpudoctor run`` opens around
   each iteration it detected when it had to record a time window.
3. ``optimizer-step``: ``Optimizer.step#...`` annotations (a step ends where an optimizer step ends).
4. ``module-forward``: the outermost module forward (or a program's own ``record_function``
   range) called once per iteration (analysis/iterations.py).
5. ``kernel-period``: the GPU kernel sequence repeats; a step is one period (analysis/period.py).
6. ``whole-trace``: nothing repeats, the trace is one step.

The fallbacks 4 and 5 keep whole iterations only: what the window cut at its edges is left out.
A step's host span is not its GPU span: when the GPU is the bottleneck the host runs ahead and
its ProfilerStep ranges say nothing about how long a step takes. Windows are therefore aligned to
the GPU timeline: step i starts at the later of its host start and the end of the GPU work the
host launched before it, and ends where step i+1 starts (the last one at the end of its own GPU
work). Host-bound steps keep their host boundaries; GPU-bound steps get their GPU throughput.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from gpudoctor.analysis.iterations import kernel_period_starts, module_forward_starts
from gpudoctor.trace.model import HostCat, Trace, queued_before_window

METHODS = ("profiler-step", "iteration-marker", "optimizer-step", "module-forward", "kernel-period", "whole-trace")
ITERATION_MARKER = "gpudoctor.iteration#"


@dataclass(frozen=True, eq=False)
class Steps:
    method: str  # see METHODS
    start: np.ndarray  # int64 ns, aligned to the GPU timeline
    end: np.ndarray  # int64 ns
    labels: tuple[str, ...]
    host_start: np.ndarray | None = None  # the host's own step ranges
    host_end: np.ndarray | None = None
    period: int = 0  # kernel-period: kernels per iteration
    marker: str = ""  # module-forward: the range whose calls start the steps
    cut_short: bool = False  # the step a crash cut short is left out (``whole_steps``)

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
    for find in (_profiler_steps, _iteration_marker_steps, _optimizer_steps, _module_forward_steps,
                 _kernel_period_steps):
        steps = find(trace)
        if steps is not None:
            return align_to_gpu(trace, steps)
    lo, hi = trace.span
    return Steps("whole-trace", np.array([lo], np.int64), np.array([max(hi, lo + 1)], np.int64), ("trace",))


def whole_steps(steps: Steps, recorded: int | None) -> Steps:
    """``steps`` without the one a crash cut short: a capture that ended early (the program raised
    mid-step) recorded ``recorded`` whole steps, and its profiler's step markers hold one more, the
    step in progress. Counted, it would hold part of a step's work (an optimizer step once in 3
    steps, not once a step) and end where the profiler stopped."""
    if steps.method != "profiler-step" or recorded is None or not 0 < recorded < len(steps):
        return steps
    host = (None, None) if steps.host_start is None or steps.host_end is None else (
        steps.host_start[:recorded], steps.host_end[:recorded])
    return dataclasses.replace(steps, start=steps.start[:recorded], end=steps.end[:recorded],
                               labels=steps.labels[:recorded], host_start=host[0], host_end=host[1], cut_short=True)


def describe(steps: Steps) -> str | None:
    """A note on how the steps were found, when it is not the program's own step markers."""
    edges = "the partial iterations at the window's edges are left out"
    if steps.cut_short:
        return (f"the window ended early (the program stopped during a step): the step it cut short is left out, "
                f"{len(steps)} whole step{'s' * (len(steps) != 1)} remain")
    if steps.method == "whole-trace":
        return ("no ProfilerStep#N or Optimizer.step markers and no repeating iteration: the whole trace is "
                "treated as one step (call prof.step() once per iteration for per-step numbers)")
    if steps.method == "module-forward":
        return (f"no step markers: a step runs from one call of {steps.marker!r} to the next "
                f"({len(steps)} whole iterations; {edges})")
    if steps.method == "kernel-period":
        return (f"no step markers: the GPU kernel sequence repeats every {steps.period} kernels; a step is one "
                f"repetition ({len(steps)} whole iterations; {edges})")
    return None


def align_to_gpu(trace: Trace, steps: Steps) -> Steps:
    """Move step boundaries to where each step's GPU work could begin (see module docstring).

    Without kernel-to-launch links (trace/capabilities.py) nothing says which step queued which
    GPU work: the steps keep the host's boundaries."""
    dev, host = trace.device, trace.host
    hs, he = steps.start, steps.end
    launched = np.full(len(dev), -(2**62), np.int64)
    ok = dev.launch >= 0
    launched[ok] = host.ts[dev.launch[ok]]
    # which step launched each GPU event (-1: before the first step: launched before it, or queued
    # before the window opened; n: after the last step, or an event of the window whose launch
    # record is missing, which no step can claim)
    owner = np.searchsorted(hs, launched, side="right") - 1
    n = len(hs)
    owner[~ok] = np.where(queued_before_window(trace)[~ok], -1, n)
    owner[ok & (launched >= he[-1])] = n  # launched after the last step: in none of them
    if not trace.capabilities.launch_links:
        owner[:] = n
    gpu_end = np.full(n + 2, -(2**62), np.int64)  # [k+1]: end of GPU work launched by step k
    np.maximum.at(gpu_end, owner + 1, dev.end)
    prior = np.maximum.accumulate(gpu_end)  # GPU work launched up to and including step k-1
    start = np.maximum(hs, prior[:n])
    last_end = max(int(he[-1]), int(gpu_end[n]))
    end = np.concatenate((start[1:], [last_end]))
    end = np.maximum(end, start + 1)
    return dataclasses.replace(steps, start=start.astype(np.int64), end=end.astype(np.int64), host_start=hs,
                               host_end=he)


def _marked(trace: Trace, prefix: str) -> np.ndarray:
    host = trace.host
    by_name = trace.names_matching(lambda s: s.startswith(prefix))
    mask = by_name[host.name] & (host.cat == HostCat.ANNOTATION) if len(host) else np.zeros(0, bool)
    return np.flatnonzero(mask)


def _profiler_steps(trace: Trace) -> Steps | None:
    return _ranges(trace, "ProfilerStep#", "profiler-step")


def _iteration_marker_steps(trace: Trace) -> Steps | None:
    return _ranges(trace, ITERATION_MARKER, "iteration-marker")


def _ranges(trace: Trace, prefix: str, method: str) -> Steps | None:
    """One step per marker range named PREFIX + N."""
    idx = _marked(trace, prefix)
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
    return Steps(method, host.ts[idx].copy(), host.end[idx].copy(), labels)


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


def _module_forward_steps(trace: Trace) -> Steps | None:
    found = module_forward_starts(trace)
    if found is None:
        return None
    steps = _between(found[0], "module-forward")
    return None if steps is None else dataclasses.replace(steps, marker=found[1])


def _kernel_period_steps(trace: Trace) -> Steps | None:
    found = kernel_period_starts(trace)
    if found is None:
        return None
    starts, period = found
    steps = _between(starts, "kernel-period")
    return None if steps is None else dataclasses.replace(steps, period=period)


def _between(starts: np.ndarray, method: str) -> Steps | None:
    """Steps from one boundary to the next (n boundaries: n - 1 whole steps)."""
    starts = np.unique(starts)
    if len(starts) < 3:
        return None
    labels = tuple(f"iteration {i}" for i in range(len(starts) - 1))
    return Steps(method, starts[:-1].astype(np.int64), starts[1:].astype(np.int64), labels)
