"""What a trace lacks, in the report's words, and the traces about which nothing sound can be said.

The counts of what a trace records, and the needs (``NEEDS``) a rule names, are
``Trace.capabilities`` (trace/model.py). Every analysis assumes some of these facts; a rule names
those it needs (``Rule.needs``) and does not run on a trace that lacks one, for a finding priced
from data that is not there is confident nonsense. The report says what is missing and what was
skipped (``lacking_notes``).

``check_usable`` refuses a trace about which nothing sound can be said (an ``IncompleteTraceError``,
exit code 2): GPU events without any host event, GPU events that all last zero time, host and GPU
events that never overlap in time (two clocks), a CPU-only trace whose events all last zero time.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.errors import IncompleteTraceError
from gpudoctor.trace.model import NEEDS, Trace
from gpudoctor.trace.schema import MAX_TIME_US

# above this share missing, the report says so even though the links are used
NOTE_UNLINKED_SHARE = 0.01
# what the trace lacks, by need, as the report names it
LABELS = {
    "launch_links": "kernel-to-launch links",
    "cpu_ops": "operator events",
    "memory_events": "GPU memory events",
}
# what else goes without it, besides the rules that need it
EFFECTS = {
    "launch_links": "GPU idle is not split by cause and steps keep their host boundaries",
    "cpu_ops": "kernels are not tied to ops, input shapes or FLOPs",
}
# needs whose absence another part of the report explains already (not_applicable["memory"])
EXPLAINED_ELSEWHERE = frozenset({"memory_events"})
RECORD_HINT = ("record with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] "
               "(record_shapes=True for shapes) and pass the file export_chrome_trace() wrote")


def check_usable(trace: Trace) -> None:
    """Raise an IncompleteTraceError when the trace supports no sound report at all."""
    caps, src = trace.capabilities, trace.source
    host, dev = trace.host, trace.device
    if caps.gpu_events and not caps.host_events:
        raise IncompleteTraceError(
            f"{src} holds {caps.gpu_events} GPU events but no host (CPU) events: the steps and "
            f"what the GPU waits for cannot be found without them; {RECORD_HINT}"
        )
    if caps.gpu_events and caps.gpu_time_ns <= 0:
        raise IncompleteTraceError(
            f"{src}: all {caps.gpu_events} GPU events last zero time (or have a negative "
            "duration): the trace records no GPU time; re-export it with torch.profiler's "
            "export_chrome_trace()"
        )
    if not caps.gpu_events and caps.host_events and caps.host_time_ns <= 0:
        raise IncompleteTraceError(
            f"{src}: all {caps.host_events} host events last zero time (or have a negative "
            "duration): the trace records no time to report on; re-export it with torch.profiler's "
            "export_chrome_trace()"
        )
    if caps.gpu_events and caps.host_events:
        host_lo, host_hi = int(host.ts.min()), int(host.end.max())
        dev_lo, dev_hi = int(dev.ts.min()), int(dev.end.max())
        if dev_hi < host_lo or dev_lo > host_hi:
            raise IncompleteTraceError(
                f"{src}: its GPU events ({_ms(dev_lo)} to {_ms(dev_hi)}) and its host events "
                f"({_ms(host_lo)} to {_ms(host_hi)}) never overlap in time: they were timed by "
                "different clocks or come from different recordings; profile the CPU and CUDA "
                "activities together in one torch.profiler window"
            )


def lacking_notes(trace: Trace, skipped: dict[str, list[str]]) -> list[str]:
    """One note per need the trace lacks: why, what else goes without it, and the rules skipped
    (``skipped``: need -> rule ids that need it); then a note when some GPU events of the window
    have no launch record although enough do."""
    caps = trace.capabilities
    notes = []
    for need in NEEDS:
        if caps.has(need) or need in EXPLAINED_ELSEWHERE:
            continue
        parts = [EFFECTS[need]] if need in EFFECTS else []
        rules = skipped.get(need, [])
        if rules:
            parts.append(f"skipped {', '.join(rules)}")
        if not parts:
            continue
        effects = "; ".join(parts)
        notes.append(f"the trace lacks {LABELS[need]}: {caps.reason(need)}. "
                     f"{effects[0].upper()}{effects[1:]}. To have them, {RECORD_HINT}")
    early = before_launch(trace)
    if early.size:
        notes.append(
            f"{early.size} GPU event{'s' if early.size > 1 else ''} start before the call that "
            f"launched {'them' if early.size > 1 else 'it'} (by up to "
            f"{float(early.max()) / 1e3:.1f} us): the trace's GPU and host clocks disagree, so "
            "the idle causes and prices that depend on launch times are uncertain"
        )
    missing = 1 - caps.linked_share
    if caps.launch_links and missing > NOTE_UNLINKED_SHARE:
        notes.append(
            f"{caps.unlinked_in_window} of the {caps.linked + caps.unlinked_in_window} GPU events "
            f"recorded in the window ({100 * missing:.0f}%) have no launch record (cuda_runtime / "
            "cuda_driver event): their idle causes, ops and source lines are unknown, and findings "
            "count the rest"
        )
    return notes


# A GPU event may start this long before its launch call's recorded start and still be read as
# clocks in step: the call's own record and the GPU's are taken a few microseconds apart.
CLOCK_SLACK_NS = 5_000


def before_launch(trace: Trace) -> np.ndarray:
    """How long (ns) before its launch call each GPU event that starts over CLOCK_SLACK_NS early
    starts."""
    dev, host = trace.device, trace.host
    linked = np.flatnonzero(dev.launch >= 0)
    early = host.ts[dev.launch[linked]] - dev.ts[linked]
    return early[early > CLOCK_SLACK_NS]


def repeated_gpu_events(trace: Trace) -> int:
    """GPU events recorded again with the same start, end, device, stream, name and correlation id:
    one window written twice into the file (files merged by hand), which no profiler does."""
    dev = trace.device
    if len(dev) < 2:
        return 0
    keys = (dev.correlation, dev.name, dev.stream, dev.device, dev.end, dev.ts)
    order = np.lexsort(keys)
    same = np.ones(len(dev) - 1, bool)
    for column in keys:
        ordered = column[order]
        same &= ordered[1:] == ordered[:-1]
    return int(same.sum())


# A kernel may start this long before an earlier one on its stream ends and still be read as in
# order: a stream runs its work one after another, but Hopper's programmatic dependent launch starts
# a kernel's prologue under its predecessor's tail (1-14 us in the H100 and H200 traces under
# tests/data, cuDNN's convolutions among them).
STREAM_OVERLAP_NS = 100_000


def overlapping_on_a_stream(trace: Trace) -> int:
    """GPU events that start over STREAM_OVERLAP_NS before an earlier one on their device and
    stream has ended: no stream runs two at once, so the trace's times (or streams) are not the
    GPU's."""
    dev = trace.device
    if len(dev) < 2:
        return 0
    order = np.lexsort((dev.ts, dev.stream, dev.device))
    device, stream = dev.device[order], dev.stream[order]
    starts, ends = dev.ts[order], dev.end[order]
    bounds = np.flatnonzero((device[1:] != device[:-1]) | (stream[1:] != stream[:-1])) + 1
    count = 0
    for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(dev)]):  # one stream each
        latest = np.maximum.accumulate(ends[lo:hi])
        count += int((starts[lo + 1:hi] < latest[:-1] - STREAM_OVERLAP_NS).sum())
    return count


def trace_notes(trace: Trace) -> list[str]:
    """Notes on events the loader dropped or repaired."""
    notes = []
    if overlapping := overlapping_on_a_stream(trace):
        notes.append(f"{overlapping} GPU event{'s start' if overlapping > 1 else ' starts'} over "
                     "0.1 ms before an earlier one on the same stream has ended, which no stream "
                     "does: the trace's GPU times (or its stream ids) are not the GPU's, and the "
                     "busy time and idle causes around them are uncertain")
    if repeated := repeated_gpu_events(trace):
        notes.append(f"{repeated} GPU event{'s are' if repeated > 1 else ' is'} recorded twice "
                     "(the same start, end, stream, name and correlation id): the file holds "
                     "part of its window twice (traces merged by hand?), and the counts and times "
                     "of those events are doubled; analyze the profiler's own file")
    if trace.skipped_events:
        n = trace.skipped_events
        notes.append(f"{n} malformed event{'s were' if n > 1 else ' was'} skipped (a field of the "
                     "wrong type, or a number out of any profiler's range such as a pid beyond "
                     "64 bits)")
    if trace.bad_times:
        n = trace.bad_times
        notes.append(f"{n} event{'s' if n > 1 else ''} with a start or duration no profiler writes "
                     f"(beyond +-{MAX_TIME_US:.0e} us) {'were' if n > 1 else 'was'} skipped")
    if trace.non_finite_numbers:
        n = trace.non_finite_numbers
        notes.append(f"{n} value{'s' if n > 1 else ''} written as a bare inf or nan (not JSON; "
                     "some Kineto versions write one for a copy of no duration's bandwidth) "
                     f"{'were' if n > 1 else 'was'} read as null")
    if trace.unknown_categories:
        n = trace.unknown_categories
        notes.append(f"{n} complete event{'s' if n > 1 else ''} of a category neither Kineto nor "
                     f"PyTorch writes {'were' if n > 1 else 'was'} left out (the categories read: "
                     "cpu_op, user_annotation, python_function, cuda_runtime, cuda_driver, "
                     "kernel, gpu_memcpy, gpu_memset, and PyTorch 1.8's Operator, Runtime, "
                     "Kernel, Memcpy, Memset)")
    if trace.missing_durations:
        n = trace.missing_durations
        notes.append(f"{n} complete event{'s' if n > 1 else ''} {'have' if n > 1 else 'has'} no "
                     "duration (dur), read as 0: an operator among them holds none of the calls "
                     "it made, so their launches and the host time they took are left unowned")
    if trace.negative_durations:
        n = trace.negative_durations
        notes.append(
            f"{n} event{'s' if n > 1 else ''} {'have' if n > 1 else 'has'} a negative duration, "
            "read as 0")
    if trace.bad_args:
        n = trace.bad_args
        notes.append(f"{n} event{'s' if n > 1 else ''} {'have' if n > 1 else 'has'} unreadable "
                     "args (an id or size out of any profiler's range, or a field of the wrong "
                     "type): kept without them, so their launch links, streams and sizes "
                     "are unknown")
    if trace.unreadable_gpu_fields:
        fields = ", ".join(trace.unreadable_gpu_fields[:5])
        notes.append(f"the trace's deviceProperties hold an unreadable {fields} (out of range, or "
                     "of the wrong type): read as unknown, so what depends on it (GPU memory "
                     "capacity, SM count) is left out or assumed")
    return notes


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f} ms"
