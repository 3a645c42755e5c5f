"""One annotated trace for a whole job: every rank's, on rank 0's clock, the straggler marked.

Each rank's annotated trace (report/perfetto.py) keeps its own clock. Merged, rank r's events
move by its clock offset (ranks/align.py: its collectives end together on every rank), so that a
collective lines up across the ranks and the others' wait for the straggler shows as the gap before
theirs. Ids cannot be shared between ranks: Perfetto names a thread by its tid alone, and two
ranks' GPU streams both call theirs 7, so every (rank, pid) and (rank, tid) takes an id of its own,
and flow ids take the rank in their high bits. Each rank's processes are named and labelled
("rank 1 (straggler)", "rank 0: waits 48.76 ms a step for rank 1").

The files are read a chunk at a time (trace/stream.py) and written as read: the merge holds one
chunk of one rank's events at a time, whatever their size.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import msgspec

from gpudoctor.outputs import atomic_file, check_output_file
from gpudoctor.trace.append import decoded_whole
from gpudoctor.trace.stream import Chunks, NotStreamed, pieces

if TYPE_CHECKING:
    from gpudoctor.ranks.sections import RankRow

FLOW_RANK_SHIFT = 40  # flow ids (correlation ids, 32-bit) keep the rank above this bit
MAX_ID = 2**31 - 1  # Perfetto reads pids and tids as 32-bit
SORT_STRIDE = 10_000_000  # a rank's processes sort as Kineto sorts them (GPU 4: 5000004), after the rank before
_FLOW_PHASES = frozenset({"s", "t", "f"})
_UNSET: Any = msgspec.UNSET
_RENAMED = frozenset({"process_name", "process_labels", "process_sort_index"})


class _Event(msgspec.Struct, omit_defaults=True):
    """A trace event's fields (the Trace Event Format's), its args left as JSON text: the merge
    reads and writes an event without decoding what it does not change (a fifth of the time)."""

    ph: Any = _UNSET
    cat: Any = _UNSET
    name: Any = _UNSET
    pid: Any = _UNSET
    tid: Any = _UNSET
    ts: Any = _UNSET
    dur: Any = _UNSET
    tts: Any = _UNSET
    tdur: Any = _UNSET
    id: Any = _UNSET
    id2: Any = _UNSET
    bind_id: Any = _UNSET
    bp: Any = _UNSET
    s: Any = _UNSET
    scope: Any = _UNSET
    cname: Any = _UNSET
    sf: Any = _UNSET
    esf: Any = _UNSET
    stack: Any = _UNSET
    estack: Any = _UNSET
    flow_in: Any = _UNSET
    flow_out: Any = _UNSET
    args: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


@dataclass(frozen=True)
class RankPart:
    """One rank's annotated trace and where it goes in the merge."""

    rank: int
    path: Path
    offset_us: float  # the rank's clock minus rank 0's
    label: str  # "straggler", "waits 48.76 ms a step for rank 1", or ""


def parts_from_rows(rows: Sequence[RankRow], files: dict[int, Path]) -> list[RankPart]:
    """The parts of a job from its ranks table (report ``ranks``: each rank's clock offset, whether
    it is the straggler and its wait for one) and each rank's annotated file; ranks with no file
    are left out."""
    straggler = next((row.rank for row in rows if row.straggler), None)
    parts = []
    for row in rows:
        if row.rank not in files:
            continue
        if straggler is not None and row.rank == straggler:
            label = "straggler"
        elif straggler is not None and row.comm_wait_ms > 0:
            label = f"waits {row.comm_wait_ms:.2f} ms a step for rank {straggler}"
        else:
            label = ""
        parts.append(RankPart(row.rank, files[row.rank], float(row.clock_offset_us), label))
    return parts


def merge_ranks(rows: Sequence[RankRow], file_of: Callable[[int], Path], target: Path,
                option: str = "--perfetto", inputs: Sequence[Path | str | None] = ()) -> bool:
    """``target``: the annotated traces ``file_of(rank)`` of a job's ranks (its ranks table
    ``rows``) merged, where two ranks or more wrote theirs; whether it was written."""
    files = {row.rank: f for row in rows if (f := file_of(row.rank)).is_file()}
    parts = parts_from_rows(rows, files)
    if len(parts) < 2:
        return False
    write_merged(parts, target, option, inputs)
    return True


def write_merged(parts: Sequence[RankPart], target: Path, option: str = "--perfetto",
                 inputs: Sequence[Path | str | None] = ()) -> Path:
    """Write every part's events, on rank 0's clock, to ``target`` (gzipped when its name ends in
    .gz), in one step; never over a part or another of ``inputs``."""
    kept = [*(p.path for p in parts), *inputs]
    check_output_file(target, option, kept)
    with atomic_file(target, option, kept) as handle:
        if target.name.endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", fileobj=handle, compresslevel=6,
                               mtime=0) as packed:
                _write(parts, packed)
        else:
            _write(parts, handle)
    return target


def _write(parts: Sequence[RankPart], out: IO[bytes]) -> None:
    ids = _Ids()
    encoder = msgspec.json.Encoder()
    out.write(b'{"traceEvents": [\n')
    first = True
    for part in parts:
        metadata: dict[str, set[int]] = {"process_name": set(), "process_labels": set(),
                                         "process_sort_index": set()}
        seen: set[int] = set()
        for event in _events(part.path):
            _move(event, part, ids)
            if isinstance(event.pid, int):
                seen.add(event.pid)
                if event.ph == "M" and event.name in metadata:
                    metadata[event.name].add(event.pid)
            out.write(b"" if first else b",\n")
            out.write(encoder.encode(event))
            first = False
        tid = ids.of(part.rank, "tid", 0)  # the rank's own "thread 0", as Kineto's metadata have it
        for pid in sorted(seen):
            for meta in _process_meta(part, pid, tid, *(pid not in metadata[k] for k in metadata)):
                out.write(b"" if first else b",\n")
                out.write(encoder.encode(meta))
                first = False
    out.write(b'\n], "displayTimeUnit": "ms"}\n')


def _move(event: _Event, part: RankPart, ids: _Ids) -> None:
    """``event`` on rank 0's clock, its ids made the rank's own, its process named for the rank
    (changed in place: each event is read for this and dropped)."""
    if isinstance(event.ts, (int, float)) and not isinstance(event.ts, bool):
        event.ts = round(event.ts - part.offset_us, 3)
    if event.pid is not _UNSET:
        event.pid = ids.of(part.rank, "pid", event.pid)
    if event.tid is not _UNSET:
        event.tid = ids.of(part.rank, "tid", event.tid)
    if event.ph in _FLOW_PHASES and isinstance(event.id, int) and not isinstance(event.id, bool):
        event.id = (part.rank << FLOW_RANK_SHIFT) | event.id
    if event.ph == "M" and event.name in _RENAMED and isinstance(event.args, msgspec.Raw):
        args = msgspec.json.decode(event.args)
        if isinstance(args, dict):
            if event.name == "process_name":
                args["name"] = f"rank {part.rank} · {args.get('name', '')}"
            # Kineto's "GPU 0": the rank's label joins it
            elif event.name == "process_labels" and part.label:
                args["labels"] = f"{args.get('labels', '')}, {part.label}" if args.get("labels") else part.label
            elif event.name == "process_sort_index" and isinstance(args.get("sort_index"), int):
                # the ranks in order
                args["sort_index"] = _sort_index(part.rank, args["sort_index"])
            event.args = msgspec.Raw(msgspec.json.encode(args))


def _sort_index(rank: int, own: int = 0) -> int:
    return rank * SORT_STRIDE + min(max(own, 0), SORT_STRIDE - 1)


def _process_meta(part: RankPart, pid: int, tid: int, unnamed: bool, unlabelled: bool,
                  unsorted: bool) -> Iterator[dict[str, Any]]:
    if unnamed:
        yield {"ph": "M", "name": "process_name", "pid": pid, "tid": tid,
               "args": {"name": f"rank {part.rank}"}}
    if part.label and unlabelled:
        yield {"ph": "M", "name": "process_labels", "pid": pid, "tid": tid,
               "args": {"labels": part.label}}
    if unsorted:
        yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": tid,
               "args": {"sort_index": _sort_index(part.rank)}}


class _Ids:
    """A new id for each (rank, pid) and (rank, tid) value, counted from 1 (32-bit, as Perfetto
    reads them)."""

    def __init__(self) -> None:
        self.given: dict[tuple[int, str, Any], int] = {}

    def of(self, rank: int, key: str, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            return value
        if isinstance(value, str) and key == "tid" and not value.isdigit():
            return value  # a named thread ("PyTorch Profiler"): Perfetto keeps it under its process
        new = self.given.setdefault((rank, key, value), len(self.given) + 1)
        if new > MAX_ID:
            raise ValueError("more processes and threads than a 32-bit id holds")
        return new


def _events(path: Path) -> Iterator[_Event]:
    """Each event of a trace file, a chunk at a time (a JSON value that is no event is skipped)."""
    with path.open("rb") as stream:
        chunks = Chunks(pieces(stream, str(path)), str(path))
        try:
            chunks.start()
        # not a Kineto layout: decoded whole (an annotated trace always streams)
        except NotStreamed:
            raws = decoded_whole(path)["traceEvents"]
            yield from (e for e in (_event(msgspec.json.encode(r)) for r in raws) if e is not None)
            return
        for raws in chunks.raw_events():
            try:
                yield from msgspec.json.decode(b"[" + b",".join(raws) + b"]", type=list[_Event])
            except msgspec.ValidationError:  # a value that is no event object: one at a time
                yield from (e for e in map(_event, raws) if e is not None)


def _event(raw: bytes) -> _Event | None:
    try:
        return msgspec.json.decode(raw, type=_Event)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
