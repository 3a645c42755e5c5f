"""What a trace says of the job that recorded it, read without building its columns: Kineto's
``distributedInfo`` (rank, world size, backend, process groups; written when torch.distributed was
initialized) and whether any collective or send/recv was recorded. ``gpudoctor analyze A B`` reads
these to tell the ranks of one job from traces that merely came together (ranks/job.py)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from gpudoctor.core.inflate import GZIP_MAGIC
from gpudoctor.errors import InputError
from gpudoctor.trace.load import resolve_trace_path
from gpudoctor.trace.read import Slices, gunzip

# Names only communication carries: the c10d operators and record_param_comms ranges of
# torch.distributed, NCCL's kernels and the backends' own ranges ("gloo:all_reduce", "nccl:send
# 0->1").
_COMM_MARKERS = (b'"record_param_comms"', b"ncclKernel_", b"ncclDevKernel_", b'"c10d::',
                 b'"gloo:', b'"nccl:', b'"mpi:', b'"ucc:')


class _Outline(msgspec.Struct):
    distributedInfo: msgspec.Raw = msgspec.Raw()


@dataclass(frozen=True)
class JobFacts:
    """One trace's word on its job."""

    source: str
    distributed: dict[str, Any] | None  # distributedInfo as recorded; None when absent or unreadable
    communicates: bool  # any collective or point-to-point transfer recorded


def job_facts(path: str | os.PathLike[str]) -> JobFacts:
    """The facts of the trace at ``path`` (a trace file or a directory holding one)."""
    file = resolve_trace_path(Path(path))
    try:
        data = bytearray(file.read_bytes())
    except OSError as exc:
        raise InputError(
            f"cannot read {file}: {exc.strerror or exc}; check the path and its permissions") from None
    if data[:2] == GZIP_MAGIC:
        data = gunzip(data, str(file))
    sliced = Slices.find(data)  # the file around the events, decoded alone: cheap
    raw = sliced.outline.distributedInfo if sliced is not None else _whole_outline(data)
    return JobFacts(str(file), _as_dict(raw), any(marker in data for marker in _COMM_MARKERS))


def _whole_outline(data: bytearray) -> msgspec.Raw:
    try:
        return msgspec.json.decode(data, type=_Outline).distributedInfo
    # the full load says what is wrong with it
    except (msgspec.ValidationError, msgspec.DecodeError):
        return msgspec.Raw()


def _as_dict(raw: msgspec.Raw) -> dict[str, Any] | None:
    if not bytes(raw):
        return None
    try:
        value = msgspec.json.decode(bytes(raw))
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None
