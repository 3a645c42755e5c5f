"""The annotated trace: the profiler's own trace with the diagnosis drawn on it, for
ui.perfetto.dev and chrome://tracing (Chrome trace-event JSON, ``{"traceEvents": [...]}``).

The trace's events stay as they are (trace/append.py); added, in a process of its own named
"gpudoctor" (a pid and tids no event of the trace uses):

- "gpudoctor: steps": a slice per step as the analysis cut them (on the GPU timeline), its args the
  step's profiled ms and, when known, the step timed without the profiler;
- "gpudoctor: GPU idle": the GPU's idle, a slice per span named by its cause
  (analysis/idle_spans.py), under the kernels it lies between;
- "gpudoctor: <n>. <finding>": each finding, in the report's order, as a slice per step over the
  time it concerns (``PLACED_BY``), its args the saving, the predicted speedup, the evidence
  numbers and the first fix;
- flow arrows from each blocking call idle_causes found (a sync, a DataLoader fetch, an allocation,
  a pageable copy) to the idle span it leaves.

Times are the trace's own microseconds, from the same zero: the loader's nanoseconds plus its
origin, written as whole nanoseconds (``4450988834786.052``), so an added slice that starts with an
event of the trace starts where the loader reads that event (within the nanosecond the loader's
rounding of ``ts * 1000`` moves it). Every added event
has ``cat`` "gpudoctor", a category the loader reads nothing of: the annotated trace diagnoses as
the original does, and annotating it again replaces the earlier annotation.
"""

from __future__ import annotations

import gzip
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import launch_threads
from gpudoctor.analysis.idle import CAUSES
from gpudoctor.analysis.idle_spans import IdleSpans, blocking_calls, idle_spans
from gpudoctor.core.finding import Finding, speedup_text
from gpudoctor.outputs import atomic_file, check_output_file
from gpudoctor.trace.append import Survey, survey, write_with_events
from gpudoctor.trace.model import HostCat

CAT = "gpudoctor"
PROCESS = "gpudoctor"
STEPS_TRACK = "gpudoctor: steps"
IDLE_TRACK = "gpudoctor: GPU idle"
ANNOTATED_NAME = "annotated.trace.json.gz"  # beside trace.json.gz in a run bundle
HOW_TO_OPEN = "open it at ui.perfetto.dev (Open trace file) or in chrome://tracing (Load)"
# How a finding is placed, in the order tried: the first that finds anything in the steps.
PLACED_BY = ("its kernels", "its idle", "its ops", "the whole window")
_INT = re.compile(r"-?\d{1,18}")


@dataclass(frozen=True)
class Place:
    """Where a finding's first slice lies in the annotated trace."""

    track: str
    name: str
    ts_us: float  # the trace's own clock
    dur_us: float
    placed_by: str  # PLACED_BY, with the idle cause for "its idle"
    from_start_ms: float  # after the trace's first event: where Perfetto's timeline starts

    def to_dict(self) -> dict[str, Any]:
        return {"track": self.track, "slice": self.name, "ts_us": self.ts_us, "dur_us": self.dur_us,
                "placed_by": self.placed_by, "from_start_ms": round(self.from_start_ms, 3)}


@dataclass(frozen=True)
class Annotation:
    """The events to add, and where each finding landed (by finding id)."""

    events: list[dict[str, Any]]
    places: dict[str, Place]

    def entry(self, file: str) -> dict[str, Any]:
        """The report's ``annotated_trace``: the file and each finding's place in it."""
        return {"file": file, "how": HOW_TO_OPEN,
                "findings": {k: p.to_dict() for k, p in self.places.items()}}


def write_annotated(source: Path, a: Analysis, findings: Sequence[Finding], target: Path,
                    option: str = "--perfetto",
                    inputs: Sequence[Path | str | None] = ()) -> Annotation:
    """Write ``source`` (the trace ``a`` analysed) with the annotation to ``target``, gzipped when
    its name ends in .gz, in one step; never over ``source`` or another of ``inputs``."""
    inputs = [source, *inputs]
    check_output_file(target, option, inputs, example=ANNOTATED_NAME)
    surveyed = survey(source, CAT)
    annotation = annotate(a, findings, surveyed)
    with atomic_file(target, option, inputs) as handle:
        if target.name.endswith(".gz"):
            # level 6, as the capture writes trace.json.gz (capture/session.py); no name or time in
            # the header: the same trace gives the same bytes
            with gzip.GzipFile(filename="", mode="wb", fileobj=handle, compresslevel=6,
                               mtime=0) as packed:
                write_with_events(surveyed, annotation.events, CAT, packed)
        else:
            write_with_events(surveyed, annotation.events, CAT, handle)
    return annotation


def annotate(a: Analysis, findings: Sequence[Finding], surveyed: Survey) -> Annotation:
    """The added events for the analysis of a trace, given its file's survey (its ids, its
    start)."""
    pid = free_ids(surveyed.ids, 3 + len(findings))
    clock = _Clock(a.trace.origin_ns, a.trace.span[1])
    spans = idle_spans(a.trace, a.steps, a.idle)
    events = _tracks(pid,
                     [STEPS_TRACK, IDLE_TRACK,
                      *(_finding_track(i, f) for i, f in enumerate(findings))], clock)
    events += _steps(a, (pid, pid + 1), clock)
    events += _idle(spans, (pid, pid + 2), clock)
    events += _flows(a, spans, (pid, pid + 2), clock)
    start = surveyed.first_ts_us if surveyed.first_ts_us is not None else clock.us(0)
    places: dict[str, Place] = {}
    for i, f in enumerate(findings):
        slices, place = _finding(a, spans, f, (pid, pid + 3 + i), _finding_track(i, f),
                                 clock, start)
        events += slices
        places.setdefault(f.id, place)
    return Annotation(events, places)


def free_ids(used: frozenset[int], count: int) -> int:
    """The first of ``count`` consecutive ids no pid or tid of the trace uses: above the largest
    one (Perfetto names a thread by its tid alone, so a shared tid would rename the trace's own)."""
    start = max(used, default=0) + 1
    if start + count < 2**31:  # Perfetto reads pids and tids as 32-bit
        return start
    start = 1 << 20
    while any(start + j in used for j in range(count)):
        start += count
    return start


@dataclass(frozen=True)
class _Clock:
    """The loader's ns (from the trace's origin) as the file's microseconds, within its span."""

    origin_ns: int
    last_ns: int

    def us(self, ns: int) -> float:
        return (min(max(int(ns), 0), self.last_ns) + self.origin_ns) / 1000

    def slice(self, start: int, end: int) -> dict[str, float]:
        s, e = min(max(int(start), 0), self.last_ns), min(max(int(end), 0), self.last_ns)
        return {"ts": (s + self.origin_ns) / 1000, "dur": (e - s) / 1000}


def _tracks(pid: int, names: list[str], clock: _Clock) -> list[dict[str, Any]]:
    """Metadata naming the process and its tracks (tids pid + 1, pid + 2, ...), listed first."""
    at = clock.us(0)

    def meta(name: str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
        return {"ph": "M", "cat": CAT, "name": name, "pid": pid, "tid": tid, "ts": at, "args": args}

    events = [meta("process_name", pid, {"name": PROCESS}),
              meta("process_sort_index", pid, {"sort_index": -1})]
    for k, name in enumerate(names):
        events += [meta("thread_name", pid + 1 + k, {"name": name}),
                   meta("thread_sort_index", pid + 1 + k, {"sort_index": k})]
    return events


def _steps(a: Analysis, track: tuple[int, int], clock: _Clock) -> list[dict[str, Any]]:
    steps, b = a.steps, a.breakdown
    out = []
    for k, (s, e) in enumerate(zip(steps.start.tolist(), steps.end.tolist())):
        args: dict[str, Any] = {"step": k + 1,
                                "label": steps.labels[k] if k < len(steps.labels) else "",
                                "found_by": steps.method, "profiled_ms": round((e - s) / 1e6, 4)}
        if a.unprofiled_step_ms is not None:
            # one figure for the run, not per step
            args["unprofiled_step_ms"] = round(a.unprofiled_step_ms, 4)
        if k < len(b.busy_per_step_ms):
            args["gpu_busy_ms"], args["gpu_idle_ms"] = b.busy_per_step_ms[k], b.idle_per_step_ms[k]
        out.append(_slice(f"step {k + 1}: {(e - s) / 1e6:.3f} ms", s, e, track, clock, args))
    return out


def _idle(spans: IdleSpans, track: tuple[int, int], clock: _Clock) -> list[dict[str, Any]]:
    out = []
    for i in range(len(spans)):
        cause = spans.name(i)
        args: dict[str, Any] = {"cause": cause, "step": int(spans.step[i]) + 1}
        if spans.refill[i]:
            args["refill"] = f"the host refilling the queue after {cause} let it drain"
        out.append(_slice(cause, spans.start[i], spans.end[i], track, clock, args))
    return out


def _flows(a: Analysis, spans: IdleSpans, idle: tuple[int, int],
           clock: _Clock) -> list[dict[str, Any]]:
    """An arrow from each blocking call (its midpoint, inside it: the slice it binds to) to the
    midpoint of the idle span it leaves."""
    host, threads = a.trace.host, a.trace.threads
    out: list[dict[str, Any]] = []
    for cause in CAUSES:
        calls, targets = blocking_calls(a.trace, a.idle, spans, cause)
        for call, span in zip(calls.tolist(), targets.tolist()):
            if host.end[call] <= host.ts[call]:
                continue  # a call of no length holds no point to bind to
            pid, tid = threads[int(host.thread[call])]
            flow = {"cat": CAT, "name": cause, "id": len(out) // 2 + 1}
            out.append({"ph": "s", **flow, "pid": _json_id(pid), "tid": _json_id(tid),
                        "ts": clock.us((int(host.ts[call]) + int(host.end[call])) // 2)})
            out.append({"ph": "f", "bp": "e", **flow, "pid": idle[0], "tid": idle[1],
                        "ts": clock.us((int(spans.start[span]) + int(spans.end[span])) // 2)})
    return out


def _finding_track(i: int, f: Finding) -> str:
    return f"gpudoctor: {i + 1}. {f.id}"


def _finding(a: Analysis, spans: IdleSpans, f: Finding, ids: tuple[int, int], track: str,
             clock: _Clock, first_ts_us: float) -> tuple[list[dict[str, Any]], Place]:
    starts, ends, counts, how = _where(a, spans, f)
    name = f"{f.id}: saves {f.saving_ms:.3f} ms/step ({speedup_text(f.predicted_speedup)})"
    args = {"finding": f.id, "title": f.title, "severity": f.severity,
            "saving_ms": round(f.saving_ms, 4), "predicted_speedup": round(f.predicted_speedup, 4),
            "idle_ms": round(f.idle_ms, 4), "evidence": _plain(f.evidence.numbers),
            "first_fix": f.fixes[0].title if f.fixes else "", "placed_by": how}
    slices = []
    for k, (s, e, n) in enumerate(zip(starts.tolist(), ends.tolist(), counts.tolist())):
        extra = {"events_here": n} if n else {}
        slices.append(_slice(name, s, e, ids, clock, {**args, **extra, "slice": k + 1}))
    first = slices[0]
    place = Place(track, name, first["ts"], first["dur"], how, (first["ts"] - first_ts_us) / 1000)
    return slices, place


def _where(a: Analysis, spans: IdleSpans, f: Finding) -> tuple[np.ndarray, np.ndarray,
                                                               np.ndarray, str]:
    """(starts, ends, events in each) of the finding's slices, one per step that holds its events,
    and how they were placed (PLACED_BY)."""
    trace = a.trace
    ids = trace.string_ids
    cause = _idle_cause(f.id)
    dev, host = trace.device, trace.host
    tried: list[tuple[str, np.ndarray, np.ndarray]] = []
    names = [ids[k] for k in f.evidence.kernels if k in ids]
    if names:
        mask = np.isin(dev.name, names)
        tried.append((PLACED_BY[0], dev.ts[mask], dev.end[mask]))
    if cause:
        mine = spans.of(cause)
        tried.append((f"{PLACED_BY[1]} ({cause})", spans.start[mine], spans.end[mine]))
    names = [ids[k] for k in f.evidence.ops if k in ids]
    if names:
        mask = np.isin(host.name, names) & (host.cat == HostCat.OP) & host.on_threads(
            launch_threads(trace))
        order = np.argsort(host.ts[mask], kind="stable")
        tried.append((PLACED_BY[2], host.ts[mask][order], host.end[mask][order]))
    for how, starts, ends in tried:
        placed = _per_step(a.steps.start, a.steps.end, starts, ends)
        if len(placed[0]):
            return (*placed, how)
    lo, hi = int(a.steps.start.min()), int(a.steps.end.max())
    return np.array([lo]), np.array([hi]), np.array([0]), PLACED_BY[-1]


def _per_step(lo: np.ndarray, hi: np.ndarray, starts: np.ndarray,
              ends: np.ndarray) -> tuple[np.ndarray, ...]:
    """For each step holding events (sorted ``starts``) that start in it: from the first start to
    the last end, cut at the step's end; and how many events."""
    first = np.searchsorted(starts, lo, side="left")
    last = np.searchsorted(starts, hi, side="left")
    held = np.flatnonzero(last > first)
    reach = np.array([int(ends[first[k]:last[k]].max()) for k in held.tolist()], np.int64)
    return (starts[first[held]].astype(np.int64), np.minimum(reach, hi[held]).astype(np.int64),
            (last - first)[held].astype(np.int64))


def _idle_cause(finding_id: str) -> str:
    """The idle cause a finding's rule prices (rules/base.py Rule.idle_cause), "" for none."""
    from gpudoctor.rules.registry import RULES

    rule = RULES.get(finding_id)
    return rule.idle_cause if rule is not None else ""


def _slice(name: str, start: int, end: int, track: tuple[int, int], clock: _Clock,
           args: dict[str, Any]) -> dict[str, Any]:
    return {"ph": "X", "cat": CAT, "name": name, "pid": track[0], "tid": track[1],
            **clock.slice(start, end), "args": args}


def _json_id(value: str) -> int | str:
    """A pid or tid as the trace wrote it: the loader keeps them as text, Kineto writes numbers."""
    return int(value) if _INT.fullmatch(value) else value


def _plain(value: Any) -> Any:
    """Evidence as strict JSON (no NaN or Infinity, which browsers' JSON.parse refuses)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
