"""pageable-copy's fix as a graph edit (rules/pageable_copy.py ``edit``): an upload pinned and
non_blocking no longer waits for the stream's earlier work nor stages on the host; a download's
host needs the data, so it still waits for the GPU, and only the staging after the transfer goes.
A public trace's D2H copies behind a 5 ms kernel were priced 5.8 ms saved from 0.018 ms of
copies when the download's wait went with the fix."""

from __future__ import annotations

import numpy as np
from synth import TraceBuilder

from gpudoctor.analysis import analyze_trace
from gpudoctor.pipeline import choose_ceilings
from gpudoctor.rules import pageable_copy
from gpudoctor.trace import parse
from gpudoctor.trace.kernels import Kind

STEP_US = 10_000.0
COPIES = {
    "download": "Memcpy DtoH (Device -> Pageable)",
    "upload": "Memcpy HtoD (Pageable -> Device)",
}


def _trace(direction: str, sync: bool = False):  # type: ignore[no-untyped-def]
    """Three steps: a 5 ms kernel, then a 1 MB pageable copy whose operator waits for it (200 us
    to 5.4 ms into the step; the transfer runs 5.15-5.17 ms, the host stages until 5.39 ms);
    ``sync``: the operator then syncs the stream (5.392-5.398 ms), as PyTorch's copy from
    pageable memory does, and a stream sync outside it follows (7-7.01 ms)."""
    b = TraceBuilder()
    for s in range(3):
        t0 = s * STEP_US
        b.step(s, t0, STEP_US)
        b.launch("ampere_sgemm_128x64_nn", t0 + 100, t0 + 110, 5_000, op="aten::mm")
        b.op("aten::copy_", t0 + 200, 5_200)
        corr = b.runtime("cudaMemcpyAsync", t0 + 210, 5_180)
        b.kernel(COPIES[direction], t0 + 5_150, 20, corr, cat="gpu_memcpy", nbytes=1 << 20)
        if sync:
            b.runtime("cudaStreamSynchronize", t0 + 5_392, 6)
            b.runtime("cudaStreamSynchronize", t0 + 7_000, 10)
    return parse(b.to_bytes())


def _edit(direction: str, sync: bool = False):  # type: ignore[no-untyped-def]
    trace = _trace(direction, sync)
    a = analyze_trace(trace, choose_ceilings(trace, "h100-sxm"))
    edit = pageable_copy.edit(a, None)  # type: ignore[arg-type]
    assert edit is not None
    copies = np.flatnonzero(
        np.isin(trace.device.kind, [int(Kind.MEMCPY_DTOH_PAGEABLE), int(Kind.MEMCPY_HTOD_PAGEABLE)])
    )
    return trace, edit, copies


def test_a_download_keeps_its_wait_and_loses_only_the_staging_after_the_transfer() -> None:
    trace, edit, copies = _edit("download")
    assert copies.size == 3 and edit.unwait.size == 0
    ops = trace.device.op[copies]
    removed = {(int(s), int(e)) for s, e in zip(edit.host_removed_s, edit.host_removed_e)}
    for copy, op in zip(copies.tolist(), ops.tolist()):
        assert (int(trace.device.end[copy]), int(trace.host.end[op])) in removed
        assert (int(trace.host.ts[op]), int(trace.host.end[op])) not in removed


def test_an_upload_loses_its_wait_and_its_staging() -> None:
    trace, edit, copies = _edit("upload")
    assert copies.size == 3
    assert sorted(edit.unwait.tolist()) == sorted(trace.device.launch[copies].tolist())
    removed = {(int(s), int(e)) for s, e in zip(edit.host_removed_s, edit.host_removed_e)}
    for op in trace.device.op[copies].tolist():
        assert (int(trace.host.ts[op]), int(trace.host.end[op])) in removed


def test_an_upload_loses_the_stream_sync_inside_its_copy_and_no_other() -> None:
    trace, edit, copies = _edit("upload", sync=True)
    host, names = trace.host, trace.strings
    syncs = [i for i in range(len(host)) if names[host.name[i]] == "cudaStreamSynchronize"]
    inside = [
        i
        for i in syncs
        if any(
            host.ts[op] <= host.ts[i] and host.end[i] <= host.end[op]
            for op in trace.device.op[copies].tolist()
        )
    ]
    assert len(syncs) == 6 and len(inside) == 3
    assert sorted(edit.unwait.tolist()) == sorted([*trace.device.launch[copies].tolist(), *inside])
