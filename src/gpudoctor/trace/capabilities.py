"""What a trace records, computed once per trace (``Trace.capabilities``), and what it lacks.

Every analysis assumes some of these facts; a rule names those it needs (``Rule.needs``) and does
not run on a trace that lacks one, for a finding priced from data that is not there is confident
nonsense. The report says what is missing and what was skipped (``lacking_notes``).

    launch_links   GPU events tied to the host calls that launched them: cuda_runtime /
                   cuda_driver events whose correlation ids the kernels carry, on a host timeline
                   with durations. The idle causes, the alignment of steps to the GPU timeline and
                   every kernel -> op attribution (shapes, FLOPs, source lines) stand on them.
    cpu_ops        operator (cpu_op) events: op names, input shapes, FLOPs.
    memory_events  GPU ``[memory]`` events (profile_memory=True).

A profiler window starts with work queued before it: GPU events with no launch record that run
before the first launched one. Those are expected; GPU events without a launch record after it
mean launch events are missing from the file.

``check_usable`` refuses a trace about which nothing sound can be said (an ``IncompleteTraceError``,
exit code 2): GPU events without any host event, GPU events that all last zero time, host and GPU
events that never overlap in time (two clocks), a CPU-only trace whose events all last zero time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpudoctor.errors import IncompleteTraceError
from gpudoctor.trace.model import HostCat, Trace
from gpudoctor.trace.schema import MAX_TIME_US

NEEDS = ("launch_links", "cpu_ops", "memory_events")
# below this share of the window's GPU events with a launch record, the links are too few to stand on
MIN_LINKED_SHARE = 0.5
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
RECORD_HINT = ("record with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] (record_shapes=True for shapes) "
               "and pass the file export_chrome_trace() wrote")


@dataclass(frozen=True)
class Capabilities:
    """Counts of what the trace holds; the properties say what it can support."""

    gpu_events: int
    gpu_time_ns: int  # summed durations of the GPU events
    host_events: int
    host_time_ns: int  # summed durations of the host events
    runtime_calls: int  # cuda_runtime and cuda_driver events
    linked: int  # GPU events whose launch call is in the trace
    unlinked_in_window: int  # GPU events with no launch record that start after the first linked one
    cpu_ops: int
    memory_events: int

    @property
    def linked_share(self) -> float:
        """Share of the GPU events recorded in the window (after the work queued before it) that
        have their launch call in the trace."""
        window = self.linked + self.unlinked_in_window
        return self.linked / window if window else 0.0

    @property
    def launch_links(self) -> bool:
        return self.linked > 0 and self.linked_share >= MIN_LINKED_SHARE and self.host_time_ns > 0

    def has(self, need: str) -> bool:
        if need == "launch_links":
            return self.launch_links
        if need == "cpu_ops":
            return self.cpu_ops > 0
        if need == "memory_events":
            return self.memory_events > 0
        raise ValueError(f"unknown need {need!r}; known: {', '.join(NEEDS)}")

    def lacks(self, needs: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(n for n in needs if not self.has(n))

    def reason(self, need: str) -> str:
        """Why the trace lacks ``need``, in words."""
        if need == "launch_links":
            if self.runtime_calls == 0:
                return "it has no cuda_runtime / cuda_driver events, so no GPU event can be tied to its launch"
            if self.linked == 0:
                return "no GPU event carries the correlation id of a cuda_runtime / cuda_driver launch in it"
            if self.linked_share < MIN_LINKED_SHARE:
                return (f"{100 * (1 - self.linked_share):.0f}% of the GPU events recorded in the window have no "
                        "launch record (cuda_runtime / cuda_driver event)")
            return "its host events all last zero time"
        if need == "cpu_ops":
            return "it has no cpu_op events"
        if need == "memory_events":
            return "it has no GPU [memory] events (record with profile_memory=True)"
        raise ValueError(f"unknown need {need!r}; known: {', '.join(NEEDS)}")


def capabilities(trace: Trace) -> Capabilities:
    host, dev = trace.host, trace.device
    is_runtime = (host.cat == HostCat.RUNTIME) | (host.cat == HostCat.DRIVER)
    linked = dev.launch >= 0
    return Capabilities(
        gpu_events=len(dev),
        gpu_time_ns=int(np.sum(dev.dur, dtype=np.float64)),  # float: no int64 wrap-around
        host_events=len(host),
        host_time_ns=int(np.sum(host.dur, dtype=np.float64)),
        runtime_calls=int(is_runtime.sum()),
        linked=int(linked.sum()),
        unlinked_in_window=int((~linked & ~queued_before_window(trace)).sum()),
        cpu_ops=int((host.cat == HostCat.OP).sum()),
        memory_events=len(trace.memory),
    )


def queued_before_window(trace: Trace) -> np.ndarray:
    """GPU events with no launch record that start before the first launched event of their stream
    (of any stream, for a stream with none): work queued before the profiler window opened. With
    no launched event at all, none is. In every recorded fixture all unlinked GPU events are these."""
    dev = trace.device
    linked = dev.launch >= 0
    if not linked.any():
        return np.zeros(len(dev), bool)
    streams, which = np.unique(dev.device.astype(np.int64) * (1 << 40) + dev.stream, return_inverse=True)
    first = np.full(len(streams), int(dev.ts[linked].min()), np.int64)
    first_linked = np.full(len(streams), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_linked, which[linked], dev.ts[linked])
    first = np.where(first_linked < np.iinfo(np.int64).max, first_linked, first)
    return ~linked & (dev.ts < first[which])


def check_usable(trace: Trace) -> None:
    """Raise an IncompleteTraceError when the trace supports no sound report at all."""
    caps, src = trace.capabilities, trace.source
    host, dev = trace.host, trace.device
    if caps.gpu_events and not caps.host_events:
        raise IncompleteTraceError(
            f"{src} holds {caps.gpu_events} GPU events but no host (CPU) events: the steps and what the GPU "
            f"waits for cannot be found without them; {RECORD_HINT}"
        )
    if caps.gpu_events and caps.gpu_time_ns <= 0:
        raise IncompleteTraceError(
            f"{src}: all {caps.gpu_events} GPU events last zero time (or have a negative duration): the trace "
            "records no GPU time; re-export it with torch.profiler's export_chrome_trace()"
        )
    if not caps.gpu_events and caps.host_events and caps.host_time_ns <= 0:
        raise IncompleteTraceError(
            f"{src}: all {caps.host_events} host events last zero time (or have a negative duration): the trace "
            "records no time to report on; re-export it with torch.profiler's export_chrome_trace()"
        )
    if caps.gpu_events and caps.host_events:
        host_lo, host_hi = int(host.ts.min()), int(host.end.max())
        dev_lo, dev_hi = int(dev.ts.min()), int(dev.end.max())
        if dev_hi < host_lo or dev_lo > host_hi:
            raise IncompleteTraceError(
                f"{src}: its GPU events ({_ms(dev_lo)} to {_ms(dev_hi)}) and its host events ({_ms(host_lo)} to "
                f"{_ms(host_hi)}) never overlap in time: they were timed by different clocks or come from different "
                "recordings; profile the CPU and CUDA activities together in one torch.profiler window"
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
        notes.append(f"the trace lacks {LABELS[need]}: {caps.reason(need)}. {effects[0].upper()}{effects[1:]}. "
                     f"To have them, {RECORD_HINT}")
    missing = 1 - caps.linked_share
    if caps.launch_links and missing > NOTE_UNLINKED_SHARE:
        notes.append(
            f"{caps.unlinked_in_window} of the {caps.linked + caps.unlinked_in_window} GPU events recorded in the "
            f"window ({100 * missing:.0f}%) have no launch record (cuda_runtime / cuda_driver event): their idle "
            "causes, ops and source lines are unknown, and findings count the rest"
        )
    return notes


def trace_notes(trace: Trace) -> list[str]:
    """Notes on events the loader dropped or repaired."""
    notes = []
    if trace.skipped_events:
        n = trace.skipped_events
        notes.append(f"{n} malformed event{'s were' if n > 1 else ' was'} skipped (a field of the wrong type, or a "
                     "number out of any profiler's range such as a pid beyond 64 bits)")
    if trace.bad_times:
        n = trace.bad_times
        notes.append(f"{n} event{'s' if n > 1 else ''} with a start or duration no profiler writes (beyond "
                     f"+-{MAX_TIME_US:.0e} us) {'were' if n > 1 else 'was'} skipped")
    if trace.negative_durations:
        n = trace.negative_durations
        notes.append(f"{n} event{'s' if n > 1 else ''} {'have' if n > 1 else 'has'} a negative duration, read as 0")
    if trace.bad_args:
        n = trace.bad_args
        notes.append(f"{n} event{'s' if n > 1 else ''} {'have' if n > 1 else 'has'} unreadable args (an id or size "
                     "out of any profiler's range, or a field of the wrong type): kept without them, so their launch "
                     "links, streams and sizes are unknown")
    if trace.unreadable_gpu_fields:
        fields = ", ".join(trace.unreadable_gpu_fields[:5])
        notes.append(f"the trace's deviceProperties hold an unreadable {fields} (out of range, or of the wrong type): "
                     "read as unknown, so what depends on it (GPU memory capacity, SM count) is left out or assumed")
    return notes


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f} ms"
