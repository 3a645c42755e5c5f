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

from itertools import pairwise

import msgspec
import numpy as np

from gpudoctor.analysis.intervals import clip_total, union
from gpudoctor.analysis.iterations import kernel_period_starts, module_forward_starts
from gpudoctor.core.arrays import distinct, median
from gpudoctor.trace.model import HostCat, Trace, queued_before_window

METHODS = ("profiler-step", "iteration-marker", "optimizer-step", "module-forward", "kernel-period",
           "whole-trace")
ITERATION_MARKER = "gpudoctor.iteration#"


class Steps(msgspec.Struct, frozen=True, eq=False):
    method: str  # see METHODS
    start: np.ndarray  # int64 ns, aligned to the GPU timeline
    end: np.ndarray  # int64 ns
    labels: tuple[str, ...]
    host_start: np.ndarray | None = None  # the host's own step ranges
    host_end: np.ndarray | None = None
    period: int = 0  # kernel-period: kernels per iteration
    marker: str = ""  # module-forward: the range whose calls start the steps
    cut_short: bool = False  # the step a crash cut short is left out (``whole_steps``)
    # what the markers' ranges needed to be steps (``_clean_ranges``), said in the report
    mended: str = ""

    def __len__(self) -> int:
        return len(self.start)

    @property
    def durations_ms(self) -> np.ndarray:
        return (self.end - self.start) / 1e6

    @property
    def median_ms(self) -> float:
        return float(median(self.durations_ms)) if len(self) else 0.0

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
    return Steps("whole-trace", np.array([lo], np.int64),
                 np.array([max(hi, lo + 1)], np.int64), ("trace",))


def whole_steps(steps: Steps, recorded: int | None) -> Steps:
    """``steps`` without the one a crash cut short: a capture that ended early (the program raised
    mid-step) recorded ``recorded`` whole steps, and its profiler's step markers hold one more, the
    step in progress. Counted, it would hold part of a step's work (an optimizer step once in 3
    steps, not once a step) and end where the profiler stopped."""
    if steps.method != "profiler-step" or recorded is None or not 0 < recorded < len(steps):
        return steps
    host = (None, None) if steps.host_start is None or steps.host_end is None else (
        steps.host_start[:recorded], steps.host_end[:recorded])
    return msgspec.structs.replace(steps, start=steps.start[:recorded], end=steps.end[:recorded],
                                   labels=steps.labels[:recorded], host_start=host[0],
                                   host_end=host[1], cut_short=True)


# A step at the window's edge this many times the median of the others is one-off work (a new
# input shape autotuned at an epoch's last, smaller batch; an evaluation), not the steady state the
# findings price. A DataLoader that cannot keep up stalls the same way, and that stall is its
# steady state: a step is left out only where operators hold most of it (a stall waits in the
# loader's __next__, outside any operator) and, where the step was timed outside the profiler,
# the window's mean comes closer to that time without it. Only the edges: a step left out of the
# middle would leave a hole in the step graph's timeline. Evidence: benchmarks/BENCHMARKS-replay.md
# "An outlier step at the window's edge", tests/test_outlier_steps.py.
OUTLIER_TIMES = 4.0
MIN_TYPICAL_STEPS = 3
OUTLIER_OP_SHARE = 0.5


def without_outlier_edges(steps: Steps, trace: Trace,
                          unprofiled_ms: float | None = None) -> tuple[Steps, tuple[int, ...]]:
    """``steps`` without the outlying steps at the window's edges (above), and the positions left
    out."""
    keep = np.ones(len(steps), bool)
    dur = (steps.end - steps.start).astype(float)
    lo, hi = 0, len(steps) - 1
    while hi - lo + 1 > MIN_TYPICAL_STEPS:
        if dur[hi] > OUTLIER_TIMES * float(median(dur[lo:hi])) and dur[hi] >= dur[lo]:
            edge = hi
        elif dur[lo] > OUTLIER_TIMES * float(median(dur[lo + 1:hi + 1])):
            edge = lo
        else:
            break
        one_off = _op_share(trace, int(steps.start[edge]), int(steps.end[edge])) >= OUTLIER_OP_SHARE
        if unprofiled_ms is not None and unprofiled_ms > 0:
            rest, target = dur[lo:hi + 1][np.arange(lo, hi + 1) != edge], unprofiled_ms * 1e6
            one_off = one_off and abs(rest.mean() - target) < abs(dur[lo:hi + 1].mean() - target)
        if not one_off:
            break
        keep[edge] = False
        lo, hi = (lo + 1, hi) if edge == lo else (lo, hi - 1)
    if keep.all():
        return steps, ()
    host = (None, None) if steps.host_start is None or steps.host_end is None else (
        steps.host_start[keep], steps.host_end[keep])
    labels = tuple(label for label, k in zip(steps.labels, keep.tolist()) if k)
    trimmed = msgspec.structs.replace(steps, start=steps.start[keep], end=steps.end[keep],
                                      labels=labels, host_start=host[0], host_end=host[1])
    return trimmed, tuple(np.flatnonzero(~keep).tolist())


def _op_share(trace: Trace, start: int, end: int) -> float:
    """The share of [start, end) the outermost operator calls cover (on any thread, overlaps
    once)."""
    host = trace.host
    ops = np.flatnonzero(
        (host.cat == HostCat.OP) & (host.top_op < 0) & (host.ts < end) & (host.end > start))
    if ops.size == 0 or end <= start:
        return 0.0
    s, e = union(host.ts[ops], host.end[ops])
    return clip_total(s, e, start, end) / (end - start)


def outlier_note(trace: Trace, steps: Steps, left_out: tuple[int, ...], typical: Steps) -> str:
    """What the left-out steps took, beside the typical step, and each one's longest operator."""
    parts = []
    host = trace.host
    for i in left_out:
        s, e = int(steps.start[i]), int(steps.end[i])
        ops = np.flatnonzero(
            (host.cat == HostCat.OP) & (host.top_op < 0) & (host.ts >= s) & (host.ts < e))
        longest = ""
        if ops.size:
            top = int(ops[np.argmax(host.end[ops] - host.ts[ops])])
            longest = (f"; its longest operator {trace.strings[int(host.name[top])]} took "
                       f"{(host.end[top] - host.ts[top]) / 1e6:.2f} ms")
        parts.append(f"{steps.labels[i]} took {(e - s) / 1e6:.2f} ms{longest}")
    return (f"{'; '.join(parts)}: over {OUTLIER_TIMES:.0f}x the median step "
            f"({typical.median_ms:.2f} ms), left out of the per-step figures as one-off work (a "
            f"new input shape, an evaluation) at the window's edge")


def describe(steps: Steps) -> str | None:
    """A note on how the steps were found, when it is not the program's own step markers."""
    edges = "the partial iterations at the window's edges are left out"
    if steps.cut_short:
        return ("the window ended early (the program stopped during a step): the step it cut short "
                f"is left out, {len(steps)} whole step{'s' * (len(steps) != 1)} remain")
    if steps.mended:
        return f"step markers: {steps.mended}"
    if steps.method == "whole-trace":
        return ("no ProfilerStep#N or Optimizer.step markers and no repeating iteration: the whole "
                "trace is treated as one step (call prof.step() once per iteration for per-step "
                "numbers)")
    if steps.method == "module-forward":
        return (f"no step markers: a step runs from one call of {steps.marker!r} to the next "
                f"({len(steps)} whole iterations; {edges})")
    if steps.method == "kernel-period":
        return (f"no step markers: the GPU kernel sequence repeats every {steps.period} kernels; a "
                f"step is one repetition ({len(steps)} whole iterations; {edges})")
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
    return msgspec.structs.replace(steps, start=start.astype(np.int64), end=end.astype(np.int64),
                                   host_start=hs, host_end=he)


def _marked(trace: Trace, prefix: str) -> np.ndarray:
    """The marker ranges named PREFIX...: annotations, else operators, as PyTorch 1.8's profiler
    wrote them ("Operator")."""
    host = trace.host
    if not len(host):
        return np.empty(0, np.int64)
    named = trace.names_matching(lambda s: s.startswith(prefix))[host.name]
    annotations = np.flatnonzero(named & (host.cat == HostCat.ANNOTATION))
    return annotations if annotations.size else np.flatnonzero(named & (host.cat == HostCat.OP))


def _profiler_steps(trace: Trace) -> Steps | None:
    return _ranges(trace, "ProfilerStep#", "profiler-step")


def _iteration_marker_steps(trace: Trace) -> Steps | None:
    return _ranges(trace, ITERATION_MARKER, "iteration-marker")


def _ranges(trace: Trace, prefix: str, method: str) -> Steps | None:
    """One step per marker range named PREFIX + N (``_clean_ranges``)."""
    idx = _marked(trace, prefix)
    if idx.size == 0:
        return None
    host = trace.host
    idx = idx[np.argsort(host.ts[idx], kind="stable")]
    starts, ends, kept, mended = _clean_ranges(trace, host.ts[idx].astype(np.int64),
                                               host.end[idx].astype(np.int64), host.name[idx])
    if not kept:
        return None
    labels = tuple(trace.strings[host.name[i]] for i in idx[kept].tolist())
    mended.extend(_missing_numbers(labels, prefix))
    return Steps(method, starts, ends, labels, mended="; ".join(mended))


def _missing_numbers(labels: tuple[str, ...], prefix: str) -> list[str]:
    """Where the markers' numbers skip (#3 after #1): the range before the gap holds the missing
    step's time too."""
    numbers = [label.removeprefix(prefix) for label in labels]
    if not all(n.isascii() and n.isdigit() for n in numbers):
        return []
    values = [int(n) for n in numbers]
    pairs = list(pairwise(values))
    gaps = [(a, b) for a, b in pairs if b > a + 1]
    if not gaps or any(b <= a for a, b in pairs):
        return []
    a, b = gaps[0]
    more = f" (and {len(gaps) - 1} more gap{'s' * (len(gaps) > 2)})" if len(gaps) > 1 else ""
    note = (f"#{a + 1} is missing between #{a} and #{b}{more}: the step before each gap holds "
            "the missing one's time too")
    return [note]


# Two marker ranges are one step recorded twice (a cpu_op and a user_annotation of the same step in
# some versions; a copy nested inside it) where the shorter lies this much inside the longer and is
# at least STEP_COPY_LENGTH of it; else overlapping ranges are consecutive steps that overlap.
STEP_COPY_OVERLAP = 0.9
STEP_COPY_LENGTH = 0.5
# A last step under this share of the median of the others that launches no GPU work is the range
# the profiler opens at its last step() and closes when it stops: no step of the program.
STUB_SHARE = 0.25


def _clean_ranges(trace: Trace, starts: np.ndarray, ends: np.ndarray, names: np.ndarray,
                  ) -> tuple[np.ndarray, np.ndarray, list[int], list[str]]:
    """The marker ranges (sorted by start) as steps: each one recorded twice kept once (the
    longer); overlapping ones ended where the next starts; none past the trace's last event; a
    last one with no length (a bare boundary) or the profiler's closing stub left out. Depth is no
    guide: a step hook fired inside optimizer.step() opens its range inside the optimizer's own
    annotation. Returns the starts, ends, positions kept and what was mended (for the report); a
    step recorded twice under its own name (a cpu_op and a user_annotation, as some PyTorch
    versions write each step) is what those versions write, and not said."""
    mended: list[str] = []
    kept: list[int] = []
    s_out: list[int] = []
    e_out: list[int] = []
    copies = clipped = 0
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        e = max(e, s)
        if kept and s < e_out[-1]:
            shorter, longer = sorted((e - s, e_out[-1] - s_out[-1]))
            overlap = min(e, e_out[-1]) - s
            if (longer > 0 and overlap >= STEP_COPY_OVERLAP * shorter
                    and shorter >= STEP_COPY_LENGTH * longer):
                copies += int(names[i] != names[kept[-1]])
                if e - s > e_out[-1] - s_out[-1]:
                    kept[-1], s_out[-1], e_out[-1] = i, s, e
                continue
            e_out[-1] = s
            clipped += 1
        kept.append(i)
        s_out.append(s)
        e_out.append(e)
    if copies:
        mended.append(f"{copies} recorded twice: each step counted once")
    if clipped:
        mended.append(f"{clipped} overlapped the next: each step ends where the next starts")
    bare = [i for i in range(len(kept) - 1) if e_out[i] <= s_out[i]]
    for i in bare:  # a range with no length marks where its step starts: it runs to the next
        e_out[i] = s_out[i + 1]
    if bare:
        mended.append(f"{len(bare)} had no length: each step runs to the next one's start")
    last_event = _last_event_end(trace)
    # a step's Python after its last operator is part of it; a last range that runs on past its
    # events for over OUTLIER_TIMES the other steps' median was closed by something else (a marker
    # written by hand, a clock gone wrong)
    typical = float(median(np.array(e_out[:-1]) - np.array(s_out[:-1]))) if len(e_out) > 1 else 0.0
    if typical > 0 and e_out[-1] - last_event > OUTLIER_TIMES * typical and last_event > s_out[-1]:
        mended.append(f"the last ran {(e_out[-1] - last_event) / 1e6:.3f} ms past the trace's "
                      "last event: it ends there")
        e_out[-1] = last_event
    if len(kept) >= 2 and (why := _not_a_step(trace, s_out, e_out)):
        mended.append(why)
        kept, s_out, e_out = kept[:-1], s_out[:-1], e_out[:-1]
    return (np.array(s_out, np.int64), np.array(e_out, np.int64), kept, mended)


def _not_a_step(trace: Trace, starts: list[int], ends: list[int]) -> str:
    """Why the last range is no step (a bare boundary, the profiler's closing range), or ""."""
    durations = np.array(ends, float) - np.array(starts, float)
    if durations[-1] <= 0:
        return "the last has no length (a bare boundary): left out"
    if (durations[-1] < STUB_SHARE * float(median(durations[:-1]))
            and not _launches_between(trace, starts[-1], ends[-1])):
        return (f"the last ({durations[-1] / 1e6:.3f} ms, no GPU work) is the profiler's closing "
                "range, not a step: left out")
    return ""


def _last_event_end(trace: Trace) -> int:
    """Where the trace's last event other than a step marker ends."""
    host, dev = trace.host, trace.device
    others = host.end[host.cat != HostCat.ANNOTATION] if len(host) else np.zeros(0, np.int64)
    ends = [int(others.max())] if others.size else []
    if len(dev):
        ends.append(int(dev.end.max()))
    return max(ends) if ends else int(trace.span[1])


def _launches_between(trace: Trace, start: int, end: int) -> bool:
    dev, host = trace.device, trace.host
    calls = dev.launch[dev.launch >= 0]
    if calls.size == 0:  # no launch links: kernels that ran in the range
        return bool(((dev.ts >= start) & (dev.ts < end)).any())
    return bool(((host.ts[calls] >= start) & (host.ts[calls] < end)).any())


def _optimizer_steps(trace: Trace) -> Steps | None:
    idx = _marked(trace, "Optimizer.step#")
    host = trace.host
    if idx.size < 2:
        return None
    idx = idx[np.argsort(host.ts[idx], kind="stable")]
    ends = distinct(host.end[idx])
    if ends.size < 2:
        return None
    starts = np.concatenate(([trace.span[0]], ends[:-1]))
    labels = tuple(f"step {i}" for i in range(len(ends)))
    return Steps("optimizer-step", starts.astype(np.int64), ends.astype(np.int64), labels)


def _module_forward_steps(trace: Trace) -> Steps | None:
    found = module_forward_starts(trace)
    if found is None:
        return None
    steps = _between(found[0], "module-forward")
    return None if steps is None else msgspec.structs.replace(steps, marker=found[1])


def _kernel_period_steps(trace: Trace) -> Steps | None:
    found = kernel_period_starts(trace)
    if found is None:
        return None
    starts, period = found
    steps = _between(starts, "kernel-period")
    if steps is None:
        return None
    # two repetitions, one over OUTLIER_TIMES the other: a few kernels that happen to repeat,
    # not an iteration (nothing else says where a step is)
    d = steps.end - steps.start
    if len(steps) == 2 and d.max() > OUTLIER_TIMES * max(int(d.min()), 1):
        return None
    return msgspec.structs.replace(steps, period=period)


def _between(starts: np.ndarray, method: str) -> Steps | None:
    """Steps from one boundary to the next (n boundaries: n - 1 whole steps)."""
    starts = distinct(starts)
    if len(starts) < 3:
        return None
    labels = tuple(f"iteration {i}" for i in range(len(starts) - 1))
    return Steps(method, starts[:-1].astype(np.int64), starts[1:].astype(np.int64), labels)
