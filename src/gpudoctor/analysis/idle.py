"""GPU idle time attributed to its cause: what the host was doing while the GPU had nothing queued.

Each moment of the launching thread gets one label, the highest-priority one whose events cover it:

    input-pipeline  DataLoader ``__next__`` (the GPU waits for the next batch)
    host-sync       a blocking wait on the GPU: cuda*Synchronize, ``.item()``, ``nonzero``...
    pageable-copy   a host<->device copy from pageable memory (the host stages it, blocked)
    allocator       cudaMalloc / cudaFree / cudaHostAlloc (``empty_cache``, cache misses)
    op-setup        an operator setting itself up for a new input shape: a call many times
                    slower than the same operator's other calls, on shapes that change every
                    step (cuDNN building an attention or convolution plan, autotuning)
    optimizer       dispatching the optimizer step
    host-work       long stretches with no operator at all: file I/O, Python, checkpoints
    dispatch        issuing operators and kernels (the launch-bound case)

An idle gap of the GPU takes the labels of the host time inside it. A gap that holds a blocking
cause (every label above except dispatch) gives its dispatch time to that cause as well: after a
sync or a slow batch the host must re-fill an empty queue, and that refill is the cause's cost.
A gap whose next kernel was launched before the gap began is "gpu-wait" (a stream waiting on
another stream, not the host's doing). A trace whose GPU events are not tied to their launches
(no cuda_runtime events, no correlation ids) has all its idle "unattributed".

Syncs cost more than the gap right after them: once the queue is drained, the host stays behind
the GPU until it builds a lead again, and every dispatch gap until then is the sync's doing.
Without the syncs the host would be ahead by the time it spent waiting in them, so dispatch idle
up to that waiting time moves from "dispatch" to "host-sync".

Which host events are syncs, allocations, a DataLoader's fetch or an operator's setup is
analysis/host_events.py's to say; this module says what their time cost the GPU.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
import numpy as np

from gpudoctor.analysis.breakdown import gpu_busy_intervals
from gpudoctor.analysis.host_events import (
    HOST_WORK_MIN_NS,
    allocator_calls,
    bookkeeping_names,
    dataloader_calls,
    launch_thread,
    launch_threads,
    optimizer_steps,
    setup_calls,
    sync_calls,
)
from gpudoctor.analysis.intervals import WINDOW, complement, contains, overlap_per_window, union
from gpudoctor.analysis.steps import Steps
from gpudoctor.core.arrays import distinct
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import HostCat, HostEvents, Trace

# Priority order (first wins). "dispatch" is the default and comes last.
CAUSES = (
    "input-pipeline",
    "op-setup",
    "host-sync",
    "pageable-copy",
    "allocator",
    "optimizer",
    "host-work",
    "dispatch",
)
BLOCKING = frozenset(CAUSES[:-1])
GPU_WAIT = "gpu-wait"
# a trace without kernel-to-launch links (trace/capabilities.py): all its idle, cause unknown
UNATTRIBUTED = "unattributed"



class IdleResult(msgspec.Struct, frozen=True, eq=False):
    """Idle ms per step by cause, plus the host events behind each blocking cause."""

    idle_ms: float  # per step
    by_cause_ms: dict[str, float]  # per step, every cause of CAUSES + gpu-wait
    gap_count_per_step: float
    launch_thread: int  # index into Trace.threads, -1 when nothing was launched
    # host event indices whose interval overlaps an idle gap, per blocking cause
    culprits: dict[str, np.ndarray] = msgspec.field(default_factory=dict)
    # idle ns inside each culprit event (aligned with culprits)
    culprit_idle_ns: dict[str, np.ndarray] = msgspec.field(default_factory=dict)
    gaps: tuple[np.ndarray, np.ndarray] = (np.empty(0, np.int64), np.empty(0, np.int64))
    # per gap: its next kernel was launched before it began (gpu-wait: a stream held behind
    # another, not the host's doing); all False where the trace cannot tell
    waiting: np.ndarray = np.zeros(0, bool)
    # recorded host events (ops, runtime calls) per step, by the cause covering their start:
    # where the profiler's own per-event cost lands (rules/calibrate.py)
    events_by_cause: dict[str, float] = msgspec.field(default_factory=dict)
    # host intervals (starts, ends) of each blocking cause on the launching threads
    labels: dict[str, tuple[np.ndarray, np.ndarray]] = msgspec.field(default_factory=dict)
    # host event indices of the operator calls that set up for a new input shape (setup_calls)
    setup_calls: np.ndarray = msgspec.field(default_factory=lambda: np.empty(0, np.int64))
    # host event indices of the outermost operators that ran on the host alone (``_host_work``)
    host_only_ops: np.ndarray = msgspec.field(default_factory=lambda: np.empty(0, np.int64))
    # per step, of the gpu-wait: the GPU idle with work queued a millisecond or more after the host
    # queued it (``_split_held``), not a graph's or a deep queue's own gaps
    held_ms: float = 0.0

    def ms(self, cause: str) -> float:
        return self.by_cause_ms.get(cause, 0.0)

    def host_gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """The gaps the host can be the cause of: all but the gpu-wait ones."""
        gap_s, gap_e = self.gaps
        if self.waiting.size != gap_s.size or not self.waiting.any():
            return gap_s, gap_e
        return gap_s[~self.waiting], gap_e[~self.waiting]


def idle_causes(trace: Trace, steps: Steps) -> IdleResult:
    busy_s, busy_e = gpu_busy_intervals(trace)
    gap_s, gap_e = _gaps(busy_s, busy_e, steps)
    n_steps = max(len(steps), 1)
    thread = launch_thread(trace)
    total_idle = int((gap_e - gap_s).sum())
    by_cause = dict.fromkeys((*CAUSES, GPU_WAIT), 0.0)
    if not trace.capabilities.launch_links and len(gap_s):
        # no kernel-to-launch links: what the host did before each gap says nothing of its cause
        by_cause[UNATTRIBUTED] = total_idle / 1e6 / n_steps
        return IdleResult(total_idle / 1e6 / n_steps, by_cause, len(gap_s) / n_steps, -1,
                          gaps=(gap_s, gap_e))
    if thread < 0 or len(gap_s) == 0:
        by_cause["dispatch"] = total_idle / 1e6 / n_steps
        return IdleResult(total_idle / 1e6 / n_steps, by_cause, len(gap_s) / n_steps, thread,
                          gaps=(gap_s, gap_e))
    launch = _next_launch(trace, gap_e)
    launched_at = _launch_end(trace, launch)
    gap_s, gap_e, launched_at, held_ns = _split_held(trace, gap_s, gap_e, launched_at, launch)
    waiting = launched_at <= gap_s
    # host time after the next kernel was launched is launch latency, not a cause
    cut = np.clip(launched_at, gap_s, gap_e)
    on_threads = trace.host.on_threads(launch_threads(trace))
    setup = setup_calls(trace, steps)
    # once: labels, catch-up and culprits read it
    uploads = _pageable_copy_calls(trace, busy_s, busy_e)
    label_sets, host_only = _label_intervals(trace, on_threads, steps, setup, uploads)
    per_gap = _exclusive_overlap(label_sets, gap_s, cut)  # cause -> ns per gap
    per_gap["dispatch"] += gap_e - cut
    per_gap = _give_dispatch_to_blocking(per_gap)
    for cause, ns in per_gap.items():
        by_cause[cause] = float(ns[~waiting].sum()) / 1e6 / n_steps
    _move_catch_up_to(by_cause, "host-sync",
                      _blocked_in_syncs(trace, on_threads, steps) / 1e6 / n_steps)
    _move_catch_up_to(by_cause, "pageable-copy",
                      _blocked_in_pageable_copies(trace, steps, uploads) / 1e6 / n_steps)
    by_cause[GPU_WAIT] = float((gap_e - gap_s)[waiting].sum()) / 1e6 / n_steps
    culprits, culprit_ns = _culprits(trace, on_threads, gap_s[~waiting], gap_e[~waiting], uploads)
    events = _events_by_cause(trace, on_threads, steps, label_sets)
    return IdleResult(
        idle_ms=total_idle / 1e6 / n_steps,
        by_cause_ms=by_cause,
        gap_count_per_step=len(gap_s) / n_steps,
        launch_thread=thread,
        culprits=culprits,
        culprit_idle_ns=culprit_ns,
        gaps=(gap_s, gap_e),
        waiting=waiting,
        events_by_cause={cause: n / n_steps for cause, n in events.items()},
        labels=label_sets,
        setup_calls=np.flatnonzero(setup),
        host_only_ops=host_only,
        held_ms=held_ns / 1e6 / n_steps,
    )


def _gaps(busy_s: np.ndarray, busy_e: np.ndarray, steps: Steps) -> tuple[np.ndarray, np.ndarray]:
    gs, ge = [], []
    for lo, hi in zip(steps.start.tolist(), steps.end.tolist()):
        s, e = complement(busy_s, busy_e, lo, hi)
        gs.append(s)
        ge.append(e)
    if not gs:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(gs).astype(np.int64), np.concatenate(ge).astype(np.int64)


def _blocked_in_syncs(trace: Trace, on_threads: np.ndarray, steps: Steps) -> int:
    """ns the launching threads spent inside blocking syncs, within the steps."""
    host = trace.host
    mask = sync_calls(trace) & on_threads
    s, e = union(host.ts[mask], host.end[mask])
    return int(overlap_per_window(s, e, steps.start, steps.end).sum())


def _blocked_in_pageable_copies(trace: Trace, steps: Steps, uploads: np.ndarray) -> int:
    """ns the host spent in the calls that staged pageable uploads (``uploads``, a host mask from
    ``_pageable_copy_calls``), within the steps."""
    host = trace.host
    calls = np.flatnonzero(uploads)
    s, e = union(host.ts[calls], host.end[calls])
    return int(overlap_per_window(s, e, steps.start, steps.end).sum())


def _move_catch_up_to(by_cause: dict[str, float], cause: str, blocked_ms: float) -> None:
    """Dispatch idle the host would have hidden had it not been blocked becomes the blocking cause.

    A copy from pageable memory blocks the host like a sync (the driver stages it through a bounce
    buffer); with pinned memory and ``non_blocking=True`` the host launches the forward while the
    copy runs, and the dispatch idle after each copy goes with the fix
    (benchmarks/BENCHMARKS-twins.md "Evidence moved from the source: analysis").
    """
    if by_cause[cause] <= 0 or blocked_ms <= 0:
        return
    moved = min(max(blocked_ms - by_cause[cause], 0.0), by_cause["dispatch"])
    by_cause[cause] += moved
    by_cause["dispatch"] -= moved


# Work the GPU had queued and did not start this long after the host queued it, idle all the
# while: the stream waited on something the trace does not hold (another stream's event, another
# process). A launch starts its kernel within microseconds on an idle GPU; a blocking copy queues
# its transfer when its call begins.
HELD_MIN_NS = 1_000_000


def _split_held(trace: Trace, gap_s: np.ndarray, gap_e: np.ndarray, launched_at: np.ndarray,
                launch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Each gap whose closing GPU event (launched by ``launch``, -1: unknown) was queued more than
    HELD_MIN_NS before it ran, split where it was queued: the host's part before, and a part in
    which the GPU held queued work, "gpu-wait" (its launch marked as made before it began); and
    the ns so held. A blocking call waiting on held work is not its cause
    (benchmarks/BENCHMARKS-replay.md "Work the GPU held")."""
    host = trace.host
    if gap_s.size == 0:
        return gap_s, gap_e, launched_at, 0
    known = launch >= 0
    blocking = np.zeros(launch.size, bool)
    blocking[known] = sync_calls(trace)[launch[known]]
    at = np.maximum(launch, 0)
    queued = np.where(known, np.where(blocking, host.ts[at], host.end[at]), gap_e)
    held = known & (queued > gap_s) & (gap_e - queued >= HELD_MIN_NS)
    if not held.any():
        return gap_s, gap_e, launched_at, 0
    starts = np.concatenate([gap_s, queued[held]])
    ends = np.concatenate([np.where(held, queued, gap_e), gap_e[held]])
    launched = np.concatenate([np.where(held, queued, launched_at), queued[held]])
    order = np.argsort(starts, kind="stable")
    return starts[order], ends[order], launched[order], int((gap_e - queued)[held].sum())


def next_launch_end(trace: Trace, gap_e: np.ndarray) -> np.ndarray:
    """When the host finished launching the GPU event that ends each gap (int64 max: none or
    unknown); analysis/idle_spans.py places the idle with it too."""
    return _launch_end(trace, _next_launch(trace, gap_e))


def _next_launch(trace: Trace, gap_e: np.ndarray) -> np.ndarray:
    """The host call that launched the GPU event ending each gap (-1: none or unknown)."""
    dev = trace.device
    if len(dev) == 0:
        return np.full(len(gap_e), -1, np.int64)
    nxt = np.searchsorted(dev.ts, gap_e, side="left")
    return np.where(nxt < len(dev), dev.launch[np.minimum(nxt, len(dev) - 1)], -1)


def _launch_end(trace: Trace, launch: np.ndarray) -> np.ndarray:
    """When each launching call returned (int64 max where ``launch`` is -1)."""
    never = np.iinfo(np.int64).max
    return np.where(launch >= 0, trace.host.end[np.maximum(launch, 0)], never)


def _label_intervals(
    trace: Trace, on_thread: np.ndarray, steps: Steps, setup: np.ndarray, uploads: np.ndarray
) -> tuple[dict[str, tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """Each cause's host intervals, and the outermost host-only operators (``_host_work``)."""
    host = trace.host
    sets: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def add(cause: str, mask: np.ndarray) -> None:
        idx = np.flatnonzero(mask & on_thread)
        sets[cause] = union(host.ts[idx], host.end[idx])

    add("input-pipeline", dataloader_calls(trace))
    add("op-setup", setup)  # its syncs and allocations (autotuning) are its own
    add("host-sync", sync_calls(trace))
    add("pageable-copy", uploads)
    add("allocator", allocator_calls(trace))
    add("optimizer", optimizer_steps(trace))
    sets["host-work"], host_only = _host_work(trace, on_thread, steps, list(sets.values()))
    return sets, host_only


# Host work and the blocking copies and syncs around it closer than this are one piece of work:
# torch.save of GPU tensors copies each storage to pageable memory (a blocking copy, a sync) and
# writes it to the file, storage after storage; removing the save removes all of it.
REGION_MERGE_NS = 2_000_000


def blocking_work_regions(idle: IdleResult, steps: Steps,
                          breaks: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Spans, inside steps, of op-free host work together with the blocking copies and syncs
    within REGION_MERGE_NS of it (a checkpoint save: copy, sync, write, copy...). Only spans
    that hold a host-work stretch. Read from the label intervals idle_causes found. ``breaks``
    (sorted host times: the model's operators that launch kernels) end a span: the work between
    two stretches that launched the step's kernels is not part of either."""
    sets = idle.labels
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    if "host-work" not in sets:
        return empty
    work_s, _ = sets["host-work"]
    if work_s.size == 0:
        return empty
    parts = [sets["host-work"], sets["host-sync"], sets["pageable-copy"]]
    s_all, e_all = union(np.concatenate([p[0] for p in parts]),
                         np.concatenate([p[1] for p in parts]))
    out_s, out_e = [], []
    for lo, hi in zip(steps.start.tolist(), steps.end.tolist()):
        inside = (s_all < hi) & (e_all > lo)
        s, e = np.clip(s_all[inside], lo, hi), np.clip(e_all[inside], lo, hi)
        if s.size == 0:
            continue
        # a new region starts where the previous interval ended more than REGION_MERGE_NS before,
        # or where an operator launched kernels since
        new = np.concatenate(([True], s[1:] - e[:-1] > REGION_MERGE_NS))
        if breaks is not None and breaks.size and s.size > 1:
            between = (np.searchsorted(breaks, s[1:], side="left")
                       > np.searchsorted(breaks, e[:-1], side="left"))
            new[1:] |= between
        rs = np.minimum.reduceat(s, np.flatnonzero(new))
        re_ = np.maximum.reduceat(e, np.flatnonzero(new))
        holds_work = np.zeros(len(rs), bool)
        first_work = re_.copy()
        for ws in work_s[(work_s >= lo) & (work_s < hi)].tolist():
            k = int(np.searchsorted(rs, ws, side="right")) - 1
            if k >= 0 and ws < re_[k]:
                holds_work[k] = True
                first_work[k] = min(first_work[k], ws)  # ws >= rs[k]: the region holds it
        # a region starts at its first stretch of host work: a blocking copy or sync before it is
        # the loop's own read of its result (``.cpu()`` then numpy), which the work needs and moving
        # the work off the thread does not remove; a checkpoint's copies sit between its writes
        out_s.append(first_work[holds_work])
        out_e.append(re_[holds_work])
    if not out_s:
        return empty
    return np.concatenate(out_s).astype(np.int64), np.concatenate(out_e).astype(np.int64)


def _pageable_copy_calls(trace: Trace, busy_s: np.ndarray, busy_e: np.ndarray) -> np.ndarray:
    """Host copy calls that stage an upload from pageable memory, except those that find the
    queue already emptied by a sync: such an upload drains nothing, and the catch-up after it
    belongs to the sync (an inference loop's ``.cpu()`` of each batch's predictions, then the next
    batch's small pageable ``.to(device)``: the upload's fix cannot remove that catch-up while
    ``.cpu()`` still drains the queue). An upload right after another one stays with it (a batch's
    labels after the batch: the catch-up hides behind the batch's pinned copy once fixed).
    Downloads to pageable memory are syncs (``sync_calls``)."""
    dev, host = trace.device, trace.host
    mask = np.zeros(len(host), bool)
    upload = (dev.kind == int(Kind.MEMCPY_HTOD_PAGEABLE)) & (dev.launch >= 0)
    calls = distinct(dev.launch[upload])
    if calls.size == 0:
        return mask
    starts = host.ts[calls]
    run = np.searchsorted(busy_s, starts, side="right") - 1
    gpu_idle = (run < 0) | (busy_e[np.maximum(run, 0)] <= starts)
    # an upload's own op (aten::copy_) waits for it with a stream sync: that sync is the upload's
    ops = dev.op[upload]
    ops = distinct(np.where(ops >= 0, ops, dev.launch[upload]))
    op_s, op_e = union(host.ts[ops], host.end[ops])
    syncs = np.flatnonzero(sync_calls(trace) & (host.thread == host.thread[calls[0]]))
    syncs = syncs[~contains(op_s, op_e, host.ts[syncs])]
    sync_end = np.sort(host.end[syncs])
    upload_end = np.sort(op_e)
    last_sync = _latest_before(sync_end, starts)
    last_upload = _latest_before(upload_end, starts)
    after_sync = last_sync > last_upload
    mask[calls[~(gpu_idle & after_sync)]] = True
    return mask


def _latest_before(ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time in ``t``, the latest of the sorted ``ends`` at or before it (-1: none)."""
    i = np.searchsorted(ends, t, side="right") - 1
    return np.where(i >= 0, ends[np.maximum(i, 0)] if ends.size else -1, -1)


def _host_work(
    trace: Trace,
    on_thread: np.ndarray,
    steps: Steps,
    labelled: list[tuple[np.ndarray, np.ndarray]],
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """Long stretches, inside steps, when no launching thread is in an op that talks to the GPU, a
    launch, a copy or another cause's event.

    Operators that call no CUDA runtime or driver function ran on the host alone (torch ops on CPU
    tensors: a batch augmented in the training loop): their time is host work too, not the dispatch
    of GPU work; counted as dispatch, their idle would go to the copy that closes the gap and
    host-blocking-work would see nothing (benchmarks/BENCHMARKS-twins.md "Evidence moved from the
    source: analysis"). Views and allocations among such operators (a crop's slice, each result's
    empty) are part of that work: a stretch free of the GPU's operators that holds HOST_WORK_MIN_NS
    of them is host work whole (``_compute_stretches``); without them, bookkeeping is dispatch.
    Also the outermost of those operators (host-blocking-work names them)."""
    host = trace.host
    calls = on_thread & ((host.cat == HostCat.RUNTIME) | (host.cat == HostCat.DRIVER))
    ops = on_thread & (host.cat == HostCat.OP)
    talking, keeping = _ops_talking_to_gpu(trace, ops, calls)
    strict = np.logical_or(calls, talking, out=talking)
    del calls
    active = strict | keeping
    compute = np.logical_and(ops, ~active, out=ops)
    del keeping
    host_only = np.flatnonzero(compute & (host.top_op < 0))
    windows = list(_thread_windows(host))
    busy_s, busy_e = _spans(host, active, windows, labelled)
    del active
    strict_s, strict_e = _spans(host, strict, windows, labelled)
    del strict
    work_s, work_e = _spans(host, compute, windows, [])
    del compute
    gs, ge = [], []
    for lo, hi in zip(steps.start.tolist(), steps.end.tolist()):
        s, e = complement(busy_s, busy_e, lo, hi)
        long = (e - s) >= HOST_WORK_MIN_NS
        cs, ce = _compute_stretches(strict_s, strict_e, work_s, work_e, lo, hi)
        s, e = union(np.concatenate([s[long], cs]), np.concatenate([e[long], ce]))
        gs.append(s)
        ge.append(e)
    if not gs:
        return (np.empty(0, np.int64), np.empty(0, np.int64)), host_only
    return (np.concatenate(gs).astype(np.int64), np.concatenate(ge).astype(np.int64)), host_only


def _spans(host: HostEvents, mask: np.ndarray, windows: list[tuple[tuple[int, int], int, int]],
           labelled: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The union of the ``mask`` events' spans and the ``labelled`` intervals. Each window's own
    spans are merged first (a union of unions is the union): a big trace's millions of events are
    never sorted, nor copied, all at once (peak memory)."""
    merged = [union(host.ts[a:b][mask[a:b]], host.end[a:b][mask[a:b]]) for _, a, b in windows]
    starts = np.concatenate([s for s, _ in merged] + [s for s, _ in labelled])
    ends = np.concatenate([e for _, e in merged] + [e for _, e in labelled])
    return union(starts, ends)


def _compute_stretches(strict_s: np.ndarray, strict_e: np.ndarray, work_s: np.ndarray,
                       work_e: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The stretches of [lo, hi) free of the GPU's operators, calls and other causes that hold at
    least HOST_WORK_MIN_NS of host-only operators (``work``: the union of their spans)."""
    s, e = complement(strict_s, strict_e, lo, hi)
    if s.size == 0 or work_s.size == 0:
        return s[:0], e[:0]
    held = overlap_per_window(work_s, work_e, s, e)
    keep = held >= HOST_WORK_MIN_NS
    return s[keep], e[keep]


def _ops_talking_to_gpu(trace: Trace, ops: np.ndarray,
                        calls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Masks of the ``ops`` inside which one of the ``calls`` of their thread starts, and of those
    that only keep books: views, allocations and autograd's bookkeeping launch nothing either, on
    GPU tensors too (the optimizer_loop trap's CatBackward0 narrows 192 gradients and AccumulateGrad
    steals them, 1.9 ms a step, profiled), which is dispatch, not host work, unless host-only
    operators hold the stretch (``_host_work``)."""
    host = trace.host
    bookkeeping = bookkeeping_names(trace)
    talking = np.zeros(len(host), bool)
    keeping = np.zeros(len(host), bool)
    at, thread = np.empty(0, np.int64), (-1, -1)
    for lo_hi, a, b in _thread_windows(host):
        if lo_hi != thread:
            thread = lo_hi
            at = np.sort(host.ts[lo_hi[0]:lo_hi[1]][calls[lo_hi[0]:lo_hi[1]]])
        mine = a + np.flatnonzero(ops[a:b])
        first = np.searchsorted(at, host.ts[mine], side="left")
        last = np.searchsorted(at, host.end[mine], side="right")
        has_call = last > first
        talking[mine[has_call]] = True
        keeping[mine[~has_call & bookkeeping[host.name[mine]]]] = True
    return talking, keeping


def _thread_windows(host: HostEvents) -> Iterator[tuple[tuple[int, int], int, int]]:
    """Each thread's events (host events are sorted by thread, then start) a WINDOW at a time:
    (the thread's first and end index, the window's first and end index)."""
    bounds = (np.flatnonzero(np.diff(host.thread)) + 1).tolist()
    for lo, hi in zip([0, *bounds], [*bounds, len(host)]):
        for a in range(lo, hi, WINDOW):
            yield (lo, hi), a, min(a + WINDOW, hi)


def _events_by_cause(
    trace: Trace, on_threads: np.ndarray, steps: Steps,
    sets: dict[str, tuple[np.ndarray, np.ndarray]]
) -> dict[str, int]:
    """Recorded ops and runtime calls in the steps, by the first cause (CAUSES order) covering
    them."""
    host = trace.host
    recorded = on_threads & ((host.cat == HostCat.OP) | (host.cat >= HostCat.RUNTIME))
    ts = host.ts[recorded]
    ts = ts[contains(steps.start, steps.end, ts)] if len(steps) else ts
    free = np.ones(len(ts), bool)
    counts: dict[str, int] = {}
    for cause in CAUSES[:-1]:
        s, e = sets.get(cause, (np.empty(0, np.int64), np.empty(0, np.int64)))
        inside = contains(s, e, ts)
        counts[cause] = int((inside & free).sum())
        free &= ~inside
    counts["dispatch"] = int(free.sum())
    return counts


def _exclusive_overlap(
    sets: dict[str, tuple[np.ndarray, np.ndarray]], gap_s: np.ndarray, gap_e: np.ndarray
) -> dict[str, np.ndarray]:
    """ns of each gap taken by each cause, a moment going to the first cause (CAUSES order)."""
    result: dict[str, np.ndarray] = {}
    taken = np.zeros(len(gap_s), np.int64)
    higher_s, higher_e = np.empty(0, np.int64), np.empty(0, np.int64)
    for cause in CAUSES[:-1]:
        s, e = sets.get(cause, (np.empty(0, np.int64), np.empty(0, np.int64)))
        both_s, both_e = union(np.concatenate((higher_s, s)), np.concatenate((higher_e, e)))
        covered = overlap_per_window(both_s, both_e, gap_s, gap_e)
        result[cause] = covered - taken
        taken = covered
        higher_s, higher_e = both_s, both_e
    result["dispatch"] = (gap_e - gap_s) - taken
    return result


def _give_dispatch_to_blocking(per_gap: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    blocking = [c for c in CAUSES if c in BLOCKING]
    stacked = np.stack([per_gap[c] for c in blocking])
    has_blocking = stacked.sum(axis=0) > 0
    dominant = stacked.argmax(axis=0)
    moved = np.where(has_blocking, per_gap["dispatch"], 0)
    out = {c: per_gap[c].copy() for c in per_gap}
    out["dispatch"] = per_gap["dispatch"] - moved
    for i, cause in enumerate(blocking):
        out[cause] += np.where(dominant == i, moved, 0)
    return out


def _culprits(
    trace: Trace, on_thread: np.ndarray, gap_s: np.ndarray, gap_e: np.ndarray, uploads: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Host events of each blocking cause that overlap idle gaps, and the idle inside each."""
    host = trace.host
    selectors = {
        "input-pipeline": dataloader_calls(trace) & on_thread,
        "host-sync": sync_calls(trace) & on_thread,
        "allocator": allocator_calls(trace) & on_thread,
        "pageable-copy": uploads & on_thread,
    }
    culprits: dict[str, np.ndarray] = {}
    idle_ns: dict[str, np.ndarray] = {}
    for cause, mask in selectors.items():
        idx = np.flatnonzero(mask)
        if idx.size == 0 or gap_s.size == 0:
            culprits[cause], idle_ns[cause] = idx, np.zeros(idx.size, np.int64)
            continue
        # idle inside [event start, end of the gap the event ends in] (the refill counts too)
        ov = overlap_per_window(gap_s, gap_e, host.ts[idx],
                                _extend_to_gap_end(host.end[idx], gap_s, gap_e))
        keep = ov > 0
        culprits[cause], idle_ns[cause] = idx[keep], ov[keep]
    return culprits, idle_ns


def _extend_to_gap_end(end: np.ndarray, gap_s: np.ndarray, gap_e: np.ndarray) -> np.ndarray:
    k = np.searchsorted(gap_s, end, side="right") - 1
    kk = np.maximum(k, 0)
    inside = (k >= 0) & (end < gap_e[kk])
    return np.where(inside, gap_e[kk], end)


__all__ = [
    "CAUSES", "GPU_WAIT", "UNATTRIBUTED", "IdleResult", "blocking_work_regions", "idle_causes",
    "next_launch_end",
]
