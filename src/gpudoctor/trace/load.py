"""Read a torch.profiler trace (.json, .json.gz, or a run directory) into a columnar ``Trace``."""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import numpy as np

from gpudoctor.controls import visible_controls
from gpudoctor.core.arrays import distinct
from gpudoctor.core.inflate import CHUNKED_FROM_GZ, GZIP_MAGIC, take_inflated
from gpudoctor.errors import InputError, TraceFormatError
from gpudoctor.trace.columns import (
    DEVICE,
    Events,
    Interner,
    Strings,
    Tables,
    first_seen,
)
from gpudoctor.trace.kernels import (
    DRIVER_LAUNCHES,
    GRAPH_LAUNCHES,
    LIBRARY_KINDS,
    Kind,
    classify_kernel,
    classify_memcpy,
    is_triton_name,
)
from gpudoctor.trace.model import (
    DeviceCat,
    DeviceEvents,
    GpuInfo,
    HostCat,
    HostEvents,
    MemoryEvents,
    Trace,
)
from gpudoctor.trace.nesting import levels, nearest_ancestor, nest
from gpudoctor.trace.parts import Parts
from gpudoctor.trace.rawargs import RawArgs, RawArgsBuilder
from gpudoctor.trace.read import NotSliced, Slices, gunzip
from gpudoctor.trace.schema import (
    MAX_TIME_US,
    NO_DUR,
    DeviceProperties,
    TraceEvent,
    TraceFile,
)
from gpudoctor.trace.stream import (
    MAX_OUTSIDE,
    Chunks,
    NotStreamed,
    big_arrays_apart,
    events_keys,
    keep_memory_low,
    pieces,
    release_free_memory,
    two_arrays,
)

_TRACE_SUFFIXES = (".json", ".json.gz")
_MALFORMED = ("each is malformed: not an object, or a field of the wrong type such as a pid or "
              "tid that is neither an integer nor a name, or a number out of any profiler's range")
_FILE_HINT = "pass the file written by torch.profiler's export_chrome_trace() (.json or .json.gz)"


def none_readable(source: str, skipped: int) -> str:
    """The one-line error for a trace none of whose ``skipped`` events could be read."""
    return f"{source}: none of its {skipped} events could be read ({_MALFORMED}); {_FILE_HINT}"

# Times beyond +-MAX_TIME_US (trace/schema.py) are dropped (counted in Trace.bad_times), and a
# trace with no other timed event is refused. So is a trace whose events span more than a day:
# its clocks disagree.
MAX_SPAN_NS = 24 * 3600 * 10**9


# Files from this size on are read a chunk at a time (trace/stream.py): their memory is the columns
# and one chunk, not the whole JSON (a 4 GB trace analysed at 1.1 GB peak RSS, 6.5 GB read whole;
# benchmarks/BENCHMARKS-loading.md, "Traces of any size"). Below it the whole buffer is small.
# (CHUNKED_FROM_GZ, 8 MB, is core/inflate.py's: its thread inflates only smaller files.)
CHUNKED_FROM = 64 << 20


def load(path: str | os.PathLike[str], chunked: bool | None = None) -> Trace:
    """Load a trace file, or the single trace inside a run directory; ``chunked``: read it a
    chunk at a time (None: from CHUNKED_FROM bytes of file on)."""
    try:
        return _load(path, chunked)
    except RecursionError:  # msgspec's decoder stops at its nesting limit by raising this
        raise TraceFormatError(
            f"{visible_controls(str(path))} nests its JSON deeper than a profiler writes (over "
            "msgspec's limit of about 1000 levels): it is not a trace as Kineto writes one; "
            "check what wrote it") from None


def _load(path: str | os.PathLike[str], chunked: bool | None) -> Trace:
    file = resolve_trace_path(Path(path))
    # the name is shown in every message and written into every report: an undecodable byte of it
    # (a lone surrogate, which no UTF-8 output can carry) becomes \xNN there (gpudoctor/controls.py)
    source = visible_controls(str(file))
    try:
        with file.open("rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            head = stream.read(3)
            gz = head[:2] == GZIP_MAGIC
            stream.seek(0)
            big = size >= (CHUNKED_FROM_GZ if gz else CHUNKED_FROM)
            if big:  # however it is read
                keep_memory_low()
            if chunked is None:
                chunked = big and not head.startswith(_BOMS)  # re-encoded whole (``_parse``)
            if chunked:
                trace = _load_chunked(stream, source)
                if trace is not None:
                    return trace
                stream.seek(0)
            # this file's JSON, inflated while the command line imported the analysis
            data: bytes | bytearray | None = take_inflated(stream.fileno())
            inflated = data is not None
            if data is None:
                # read into a buffer of the loader's own (trace/read.py Slices writes to it), of
                # the file's size
                data = bytearray(size)
                del data[stream.readinto(data) :]  # a file that shrank meanwhile: what was read
                data += stream.read()  # ... or grew
    except OSError as exc:
        raise InputError(
            f"cannot read {file}: {exc.strerror or exc}; check the path and its permissions") from None
    try:
        return _parse(data, source, inflated)
    except TraceFormatError as exc:
        if chunked or not any(m in str(exc) for m in (" is not valid JSON", " gzip file")):
            raise
        del data
        _where_it_broke(file, source)  # where reading stopped, when the chunked reader can tell
        raise


def _where_it_broke(file: Path, source: str) -> None:
    """Raises the chunked reader's error for a file that did not decode whole: it says at which
    byte reading stopped."""
    try:
        with file.open("rb") as stream:
            _load_chunked(stream, source)
    except OSError:
        pass


def _load_chunked(stream: BinaryIO, source: str) -> Trace | None:
    """The trace read a chunk at a time; None when it is not laid out as a trace near its start
    and small enough to read whole (where it fails as it fails there)."""
    chunks = Chunks(pieces(stream, source), source)
    try:
        chunks.start()
    except NotStreamed:
        if os.fstat(stream.fileno()).st_size <= MAX_OUTSIDE:
            return None
        raise TraceFormatError(
            f"{source} is not a profiler trace: no top-level 'traceEvents' array in its first "
            f"{MAX_OUTSIDE >> 20} MB; {_FILE_HINT}") from None
    big_arrays_apart()
    collecting = gc.isenabled()
    gc.disable()  # as in _parse
    try:
        trace = build(chunks.events(), [], source, compress_args=True)
    finally:
        if collecting:
            gc.enable()
    release_free_memory()
    if chunks.skipped and not trace.event_count:
        raise TraceFormatError(none_readable(source, chunks.skipped))
    if chunks.outline is not None and not chunks.lenient:
        gpus, unreadable = _gpus(chunks.outline), ()
    # fields of unexpected types somewhere: the GPUs read as the whole file's lenient path reads
    # them
    else:
        raw = msgspec.json.decode(chunks.rest or b"{}")
        properties, unreadable = _lenient_properties(raw.get("deviceProperties")
                                                     if isinstance(raw, dict) else None)
        gpus = _gpus(TraceFile(traceEvents=[], deviceProperties=properties))
    unreadable_fields = tuple(visible_controls(f) for f in unreadable)
    return msgspec.structs.replace(trace, gpus=gpus, skipped_events=chunks.skipped,
                                   unreadable_gpu_fields=unreadable_fields)


def resolve_trace_path(path: Path) -> Path:
    """A trace file itself, or the one trace file of a directory."""
    try:
        return _resolve_trace_path(path)
    except OSError as exc:  # a folder on the way that cannot be listed or entered
        raise InputError(
            f"cannot read {path}: {exc.strerror or exc}; check the path and its permissions") from None


def _resolve_trace_path(path: Path) -> Path:
    if not path.exists():
        raise InputError(f"{path} does not exist; {_FILE_HINT}, or a gpudoctor run directory")
    if path.is_file():
        return path
    if not path.is_dir():
        # /dev/null, a FIFO (reading one would wait for a writer forever), a socket
        kind = "a FIFO (named pipe)" if path.is_fifo() else "a device" if (
            path.is_char_device() or path.is_block_device()) else "a socket" if path.is_socket() else "not a file"
        raise InputError(
            f"{path} is {kind}, not a trace file; {_FILE_HINT}, or a gpudoctor run directory")
    candidates = sorted(p for p in path.iterdir() if p.is_file()
                        and p.name.endswith(_TRACE_SUFFIXES))
    traces = [p for p in candidates if p.name.startswith("trace.")] or [
        p for p in candidates if not p.name.startswith(("report.", "env.", "manifest"))
    ]
    if not traces:
        raise InputError(f"{path} holds no trace (*.json or *.json.gz); {_FILE_HINT}")
    if len(traces) > 1:
        names = ", ".join(p.name for p in traces[:4])
        raise InputError(
            f"{path} holds {len(traces)} traces ({names}...); pass one of them as PATH")
    return traces[0]


def parse(data: bytes, source: str = "<bytes>") -> Trace:
    """Decode trace bytes (gzip or plain JSON) and build the columnar Trace."""
    return _parse(bytearray(data), source)


# A value written as a bare inf or nan: not JSON, yet some Kineto versions write one for a copy of
# no duration's bandwidth (pytorch/kineto#105). Only a value after a key (its closing quote not
# escaped: the same text inside a string stays), before , } or ].
_NON_FINITE = re.compile(rb'(?<=[^\\]":)(\s*)-?(?:inf|Infinity|nan|NaN)(?=\s*[,}\]])')


# A byte-order mark: UTF-8's is dropped; UTF-16 text (an editor's "Unicode") is re-encoded as UTF-8.
_UTF8_BOM = b"\xef\xbb\xbf"
_BOMS = (_UTF8_BOM, b"\xff\xfe", b"\xfe\xff")


def _parse(data: bytes | bytearray, source: str, inflated: bool = False) -> Trace:
    """``parse`` of a buffer the loader owns (its events are decoded in place, trace/read.py), or
    of a gzip file's JSON (``inflated``). Text after a byte-order mark is read as JSON; a file that
    is not JSON only for its bare inf or nan values is read with them as null (the trace counts
    them); Chrome's array form may leave out its closing ']' (the trace event format allows it)."""
    if data[:2] == GZIP_MAGIC and not inflated:
        data = gunzip(data, source)
    if data[:3] == _UTF8_BOM:
        data = bytearray(data[3:])
    elif data[:2] in _BOMS[1:]:
        try:
            data = bytearray(bytes(data).decode("utf-16").encode())
        except UnicodeDecodeError:
            raise TraceFormatError(f"{source} starts as UTF-16 text but does not decode as it; "
                                   f"{_FILE_HINT}") from None
    try:
        return _parse_json(data, source)
    except TraceFormatError as exc:
        if " is not valid JSON" not in str(exc):
            raise
        text = bytes(data)
        if text.lstrip()[:1] == b"[" and not text.rstrip().endswith(b"]"):
            try:
                return _parse_json(bytearray(text.rstrip().rstrip(b",") + b"]"), source)
            except TraceFormatError:
                pass
        repaired, count = _NON_FINITE.subn(rb"\1null", text)
        if not count:
            raise
    trace = _parse_json(bytearray(repaired), source)
    return msgspec.structs.replace(trace, non_finite_numbers=count)


def _parse_json(data: bytes | bytearray, source: str) -> Trace:
    """The trace in ``data``, JSON text (``_parse`` inflates and re-encodes it first)."""
    if not data[:4096].strip() and not data.strip():
        raise TraceFormatError(f"{source} is empty; {_FILE_HINT}")
    # Hundreds of thousands of short-lived objects and no cycles: the cyclic collector would
    # only rescan them over and over.
    collecting = gc.isenabled()
    gc.disable()
    try:
        sliced = Slices.find(data)
        if sliced is not None:
            _one_events_array(data, sliced, source)
            try:
                return build(sliced.events(), _gpus(sliced.outline), source)
            except NotSliced:
                sliced.restore()
        events, gpus, skipped, unreadable = _decode(data, source)
        return build([events], gpus, source, skipped, unreadable)
    finally:
        if collecting:
            gc.enable()


def _one_events_array(data: bytearray, sliced: Slices, source: str) -> None:
    """Raises where another top-level "traceEvents" stands beside the sliced one (the file with 0
    for its events is read: it is small), as the chunked reader does."""
    zero, closing = sliced.opening, sliced.closing
    if b'"traceEvents"' not in data[:sliced.key] and b'"traceEvents"' not in data[closing + 1:]:
        return
    others = events_keys(b"".join((data[:zero], b"0", data[closing + 1:])), own=sliced.key)
    if others:
        at = others[0]
        raise two_arrays(source, sliced.key, at if at < zero else closing + at - zero)


def _decode(data: bytes, source: str) -> tuple[list[TraceEvent], list[GpuInfo], int,
                                               tuple[str, ...]]:
    # a JSON decoder keeps the last of two equal keys: a second events array would pass unseen
    if data.count(b'"traceEvents"') > 1 and len(keys := events_keys(data)) > 1:
        raise two_arrays(source, keys[0], keys[1])
    try:
        parsed = msgspec.json.decode(data, type=TraceFile)
    except msgspec.ValidationError:
        return _decode_leniently(data, source)
    except msgspec.DecodeError as exc:
        raise TraceFormatError(
            f"{source} is not valid JSON ({_short(exc)}); {_FILE_HINT}") from None
    return parsed.traceEvents, _gpus(parsed), 0, ()


def _decode_leniently(data: bytes, source: str) -> tuple[list[TraceEvent], list[GpuInfo], int,
                                                         tuple[str, ...]]:
    """Slow path for files whose fields have unexpected types: convert event by event."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise TraceFormatError(
            f"{source} is not valid JSON ({_short(exc)}); {_FILE_HINT}") from None
    if isinstance(raw, list):  # the Chrome "JSON Array" form
        raw = {"traceEvents": raw}
    if not isinstance(raw, dict) or not isinstance(raw.get("traceEvents"), list):
        raise TraceFormatError(
            f"{source} is JSON but not a profiler trace (no 'traceEvents' list); {_FILE_HINT}"
        )
    events: list[TraceEvent] = []
    skipped = 0
    event_decoder = msgspec.json.Decoder(TraceEvent, strict=False)
    for item in raw["traceEvents"]:
        try:
            events.append(event_decoder.decode(msgspec.json.encode(item)))
        except (msgspec.ValidationError, msgspec.DecodeError, TypeError):
            skipped += 1
    if skipped and not events:
        raise TraceFormatError(none_readable(source, skipped))
    properties, unreadable = _lenient_properties(raw.get("deviceProperties"))
    return events, _gpus(TraceFile(traceEvents=[],
                                   deviceProperties=properties)), skipped, unreadable


def _lenient_properties(entries: Any) -> tuple[list[DeviceProperties], tuple[str, ...]]:
    """Each GPU of ``deviceProperties`` with the fields that convert, and the names of those that
    did not: one unreadable field (a totalGlobalMem of 2**70) loses that field (read as 0, unknown),
    not the GPU and its name."""
    out: list[DeviceProperties] = []
    unreadable: list[str] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        good = {}
        for key, value in entry.items():
            try:
                msgspec.convert({key: value}, DeviceProperties, strict=False)
            except msgspec.ValidationError:
                unreadable.append(str(key))
                continue
            good[key] = value
        out.append(msgspec.convert(good, DeviceProperties, strict=False))
    return out, tuple(dict.fromkeys(unreadable))


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]


def _gpus(parsed: TraceFile) -> list[GpuInfo]:
    """The cards the trace describes; a negative size or count (no card's) is read as unknown, 0."""
    return [
        GpuInfo(
            name=visible_controls(p.name),
            memory_bytes=max(p.totalGlobalMem, 0),
            compute_capability=(p.computeMajor, p.computeMinor),
            sm_count=max(p.numSms, 0),
            l2_bytes=max(p.l2CacheSize, 0),
        )
        for p in sorted(parsed.deviceProperties, key=lambda p: p.id)
    ]


def _ns(values: np.ndarray, own: bool = False) -> np.ndarray:
    """Microseconds (float) -> int64 nanoseconds; ``values`` are finite and within MAX_TIME_US.
    ``own``: ``values`` may be overwritten (no second float copy of a big trace's times)."""
    scaled = np.multiply(values, 1000.0, out=values if own else None)
    return np.rint(scaled, out=scaled).astype(np.int64)


def _times(events: Events) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (int64 ns; a negative duration read as 0) of complete events, their float
    columns dropped as they are read (peak memory)."""
    ts = _ns(events.ts, own=True)
    events.ts = _NO_EVENTS.ts
    end = _ns(events.dur, own=True)
    events.dur = _NO_EVENTS.dur
    np.maximum(end, 0, out=end)
    end += ts
    return ts, end


def build(slices: Iterable[list[TraceEvent]], gpus: list[GpuInfo], source: str, skipped: int = 0,
          unreadable_gpu_fields: tuple[str, ...] = (), compress_args: bool = False) -> Trace:
    """Columnar tables from decoded events (the file's, in one list or several in order), with
    every link resolved. ``compress_args``: the host events' raw args are kept compressed (a big
    trace's; trace/rawargs.py).

    Consumes each list: it is emptied once the columns of its events are read, so that the decoded
    events do not stay alive while the next are decoded and the tables made (peak memory).
    """
    event_count = 0
    parts = Parts(host_args=RawArgsBuilder(compress_args))
    ids = Tables(Interner(), Interner(), Interner())
    for events in slices:
        event_count += len(events)
        parts.add(events, ids)
        events.clear()
    host_events, device_events, memory_events = (Events.concat(p) if p else _no_events()
                                                 for p in (parts.host, parts.device, parts.memory))
    parts.host = parts.device = parts.memory = []
    release_free_memory()  # the slices' columns, now joined
    bad_times = parts.timed - len(host_events) - len(device_events) - len(memory_events)
    if bad_times and not (len(host_events) or len(device_events) or len(memory_events)):
        raise TraceFormatError(
            f"{source}: none of its {bad_times} timed events has a usable time "
            f"({next(e for e in parts.bad_example if e)}); a profiler writes microseconds since "
            f"the epoch or since the trace began, within +-{MAX_TIME_US:.0e} us: {_FILE_HINT}"
        )
    raw_args = parts.host_args.finish()
    strings = Strings()
    first, host_events.thread = first_seen(host_events.thread, len(ids.threads.ids))
    keys = list(ids.threads.ids)
    threads = [keys[i] for i in first.tolist()]
    missing = int((host_events.dur == NO_DUR).sum() + (device_events.dur == NO_DUR).sum())
    negative = int((host_events.dur < 0).sum() + (device_events.dur < 0).sum()) - missing
    # first: its table is smaller than its events (peak memory)
    memory = _memory_table(memory_events)
    del memory_events
    host = _host_table(host_events, strings, ids.host_names, raw_args)
    del host_events
    device = _device_table(device_events, strings, ids.device_names, host)
    del device_events
    origin, last = _span(host, device, memory)
    if last - origin > MAX_SPAN_NS:
        raise TraceFormatError(
            f"{source}: its events span {_duration(last - origin)}, from ts={origin / 1000:.0f} to "
            f"ts={last / 1000:.0f} us: its timestamps mix clocks (a profiler window lasts seconds "
            "or minutes); re-record the trace, or pass one trace file rather than several merged "
            "into one"
        )
    host, device, memory = _shift(host, origin), _shift(device, origin), _shift(memory, origin)
    return Trace(
        source=source,
        # names are shown in terminals and pages: their control characters (an ESC sequence in a
        # kernel name) become printable stand-ins here, once (gpudoctor/controls.py)
        strings=[visible_controls(s) for s in strings.table()],
        threads=[(visible_controls(str(pid)), visible_controls(str(tid))) for pid, tid in threads],
        host=host,
        device=device,
        memory=memory,
        gpus=gpus,
        span=(0, last - origin),
        origin_ns=int(origin),
        event_count=event_count,
        skipped_events=skipped,
        bad_times=bad_times,
        negative_durations=negative,
        missing_durations=missing,
        bad_args=parts.bad_args,
        unknown_categories=parts.unknown_categories,
        other_accelerator_events=parts.other_accelerator_events,
        unreadable_gpu_fields=tuple(visible_controls(f) for f in unreadable_gpu_fields),
    )


def _host_table(events: Events, strings: Strings, names: Interner, args: RawArgs) -> HostEvents:
    ts, end = _times(events)
    thread, cat = events.thread, events.code  # the table's own from here on (set below)
    name = strings.add(events.name, names)
    events.name = events.code = _NO_EVENTS.name
    # ProfilerStep#N is a cpu_op in some PyTorch versions (and so is a record_function range such as
    # gpudoctor.iteration#N): an annotation, not an operator.
    step_names = np.fromiter((s.startswith(("ProfilerStep#", "gpudoctor.iteration#"))
                              for s in strings.ids), bool,
                             len(strings.ids))
    step_like = step_names[name]
    cat[step_like & (cat == HostCat.OP)] = HostCat.ANNOTATION
    correlation = events.extra["correlation"]
    np.negative(end, out=end)  # sorted by -end without a negated copy; restored below
    order = np.lexsort((end, ts, thread))
    np.negative(end, out=end)
    raw_args = args.reordered(order)
    # one column at a time, each unsorted one freed as its sorted one is made (peak memory)
    events.thread, events.extra = _NO_EVENTS.thread, {}
    ts = ts[order]
    end = end[order]
    cat = cat[order]
    name = name[order]
    thread = thread[order]
    correlation = correlation[order]
    del order
    parent, depth = nest(thread, ts, end)
    is_op = cat == HostCat.OP
    by_level = levels(depth)
    return HostEvents(
        ts=ts,
        end=end,
        cat=cat,
        name=name,
        thread=thread,
        correlation=correlation,
        raw_args=raw_args,
        parent=parent,
        depth=depth,
        op=nearest_ancestor(parent, is_op, by_level=by_level),
        top_op=nearest_ancestor(parent, is_op, outermost=True, by_level=by_level),
        frame=nearest_ancestor(parent, cat == HostCat.PYTHON, by_level=by_level),
    )


def _device_table(events: Events, strings: Strings, names: Interner,
                  host: HostEvents) -> DeviceEvents:
    ts, end = _times(events)
    cat = (events.code - DEVICE).astype(np.int8)
    name = strings.add(events.name, names)
    extra = events.extra
    device, stream, correlation = extra["device"], extra["stream"], extra["correlation"]
    nbytes, blocks = extra["nbytes"], extra["blocks"]
    order = np.argsort(ts, kind="stable")
    ts, end, cat, name = ts[order], end[order], cat[order], name[order]
    device, stream, correlation = device[order], stream[order], correlation[order]
    nbytes, blocks = nbytes[order], blocks[order]
    kind = _classify(cat, name, strings)
    launch = _launches(correlation, host)
    graph, triton = _launch_flags(launch, name, kind, host, strings)
    op = _gather(host.op, launch)
    top_op = _gather(host.top_op, launch)
    return DeviceEvents(
        ts=ts,
        end=end,
        cat=cat,
        name=name,
        device=device,
        stream=stream,
        correlation=correlation,
        nbytes=nbytes,
        blocks=blocks,
        kind=kind,
        launch=launch,
        op=op,
        top_op=top_op,
        graph=graph,
        triton=triton,
    )


def _gather(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """values[index] where index >= 0, else -1 (also when values is empty)."""
    if len(values) == 0:
        return np.full(len(index), -1, dtype=np.int32)
    return np.where(index >= 0, values[np.maximum(index, 0)], -1).astype(np.int32)


def _classify(cat: np.ndarray, name: np.ndarray, strings: Strings) -> np.ndarray:
    kind = np.full(len(cat), Kind.OTHER, dtype=np.int8)
    if len(cat) == 0:
        return kind
    table = strings.table()
    used = distinct(name)
    kernel_kind = np.full(len(table), Kind.OTHER, dtype=np.int8)
    copy_kind = np.full(len(table), Kind.MEMCPY_DTOD, dtype=np.int8)
    for sid in used.tolist():
        kernel_kind[sid] = classify_kernel(table[sid])
        copy_kind[sid] = classify_memcpy(table[sid])
    kind = np.where(cat == DeviceCat.KERNEL, kernel_kind[name], kind)
    kind = np.where(cat == DeviceCat.MEMCPY, copy_kind[name], kind)
    kind = np.where(cat == DeviceCat.MEMSET, Kind.MEMSET, kind)
    return kind.astype(np.int8)


def _launches(correlation: np.ndarray, host: HostEvents) -> np.ndarray:
    """Index of the runtime/driver event with the same correlation id, or -1."""
    is_launch = (host.cat == HostCat.RUNTIME) | (host.cat == HostCat.DRIVER)
    candidates = np.flatnonzero(is_launch & (host.correlation >= 0))
    if candidates.size == 0 or correlation.size == 0:
        return np.full(correlation.size, -1, dtype=np.int32)
    keys = host.correlation[candidates]
    order = np.argsort(keys, kind="stable")
    keys, candidates = keys[order], candidates[order]
    slot = np.clip(np.searchsorted(keys, correlation), 0, len(keys) - 1)
    found = (keys[slot] == correlation) & (correlation >= 0)
    return np.where(found, candidates[slot], -1).astype(np.int32)


def _launch_flags(
    launch: np.ndarray, name: np.ndarray, kind: np.ndarray, host: HostEvents, strings: Strings
) -> tuple[np.ndarray, np.ndarray]:
    """CUDA-graph kernels (launched by cudaGraphLaunch) and Triton ones: named triton_*, or
    launched through the driver API (cuLaunchKernel) without being a library GEMM / attention /
    NCCL kernel (cuBLAS also launches through the driver)."""
    table = strings.table()
    graph_ids = [strings.ids[s] for s in GRAPH_LAUNCHES if s in strings.ids]
    driver_ids = [strings.ids[s] for s in DRIVER_LAUNCHES if s in strings.ids]
    launch_name = _gather(host.name, launch)
    graph = np.isin(launch_name, graph_ids)
    triton_names = np.fromiter((is_triton_name(s) for s in table), bool, len(table))
    library = np.isin(kind, [int(k) for k in LIBRARY_KINDS])
    by_driver = np.isin(launch_name, driver_ids) & ~library
    triton = by_driver | (triton_names[name] if len(table) else False)
    return graph, np.asarray(triton, dtype=bool)


def _memory_table(events: Events) -> MemoryEvents:
    # Device Type 1 is CUDA in c10::DeviceType; CPU allocations (type 0) are not GPU memory.
    extra = events.extra
    cuda = np.flatnonzero(extra["device_type"] == 1)
    order = cuda[np.argsort(events.ts[cuda], kind="stable")]  # by time; ties keep the file's order
    return MemoryEvents(
        ts=_ns(events.ts[order]),
        delta=extra["delta"][order],
        allocated=extra["allocated"][order],
        reserved=extra["reserved"][order],
        device=extra["device"][order],
    )


def _no_events() -> Events:
    """An empty table of events, of its own: the tables are made from their events' columns in
    place."""
    return Events(np.zeros(0, np.int8), np.zeros(0), np.zeros(0), np.zeros(0, np.int32),
                  np.zeros(0, np.int32), [], [], {})


_NO_EVENTS = _no_events()  # what a dropped column is set to


def _span(host: HostEvents, device: DeviceEvents, memory: MemoryEvents) -> tuple[int, int]:
    starts = [a.min() for a in (host.ts, device.ts, memory.ts) if len(a)]
    ends = [a.max() for a in (host.end, device.end) if len(a)]
    if not starts:
        return 0, 0
    return int(min(starts)), int(max(ends)) if ends else int(min(starts))


def _duration(ns: int) -> str:
    days = ns / 86_400e9
    return f"{days:,.0f} days" if days >= 2 else f"{ns / 3_600e9:,.0f} hours"


def _shift(table: Any, origin: int) -> Any:
    """The table with its times counted from ``origin``: in place, as the table's arrays are its own
    (no second copy of the times at the peak of a big trace's memory)."""
    np.subtract(table.ts, origin, out=table.ts)
    if hasattr(table, "end"):
        np.subtract(table.end, origin, out=table.end)
    return table
