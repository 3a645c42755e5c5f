"""pageable-copy: host<->device copies from pageable memory are slow and block the host.

Priced at what the fix leaves: the copy itself, at the pinned bandwidth, on the stream with the
kernels that read it. The step cannot go below that GPU work (``STEP_FLOOR_AFTER_FIX``), however
much the profiler slowed the pageable copy.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import sync_calls
from gpudoctor.core.finding import STEP_FLOOR_AFTER_FIX, Evidence, Finding, Fix, make_finding
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import op_names_of_events, sources_of_events
from gpudoctor.trace.kernels import PAGEABLE_KINDS, Kind
from gpudoctor.trace.model import HostCat

ID = "pageable-copy"
# Pinned copies reach this share of the datasheet's host link, as `gpudoctor bench` measured it on
# an H100 and an H200 (benchmarks/BENCHMARKS-replay.md "A pageable upload's stream sync").
LINK_REACHED_SHARE = 0.87


def check(a: Analysis) -> Finding | None:
    dev, t = a.trace.device, a.roofline.event_in_steps_ns
    idx = np.flatnonzero((t > 0) & np.isin(dev.kind, [int(k) for k in PAGEABLE_KINDS]))
    if idx.size == 0:
        return None
    n = max(len(a.steps), 1)
    nbytes = float(dev.nbytes[idx].sum())
    time_ns = float(t[idx].sum())
    pinned_bw = _pinned_bandwidth(a)
    pinned_ns = nbytes / pinned_bw * 1e9
    idle = a.idle.ms(ID)
    saving = max(time_ns - pinned_ns, 0.0) / 1e6 / n + idle
    gpu_after = max(a.breakdown.busy_ms - time_ns / 1e6 / n, 0.0) + pinned_ns / 1e6 / n
    achieved = nbytes / (time_ns / 1e9) if time_ns else 0.0
    return make_finding(
        ID,
        "Host-device copies from pageable memory",
        a.step_ms,
        saving,
        f"{nbytes / n / 1e6:.1f} MB per step copied between pageable host memory and the GPU at "
        f"{achieved / 1e9:.1f} GB/s ({time_ms(time_ns, n):.2f} ms), staged through a bounce buffer "
        "and blocking the host.",
        Evidence(
            numbers={
                "pageable_copy_ms_per_step": round(time_ms(time_ns, n), 3),
                "bytes_per_step": int(nbytes / n),
                "achieved_GBps": round(achieved / 1e9, 2),
                "pinned_GBps_assumed": round(pinned_bw / 1e9, 1),
                "gpu_idle_during_copies_ms_per_step": round(idle, 3),
                STEP_FLOOR_AFTER_FIX: round(gpu_after, 3),
            },
            ops=op_names_of_events(a.trace, idx),
            sources=sources_of_events(a.trace, idx),
        ),
        (
            Fix("Pin host buffers and copy asynchronously",
                "loader = DataLoader(ds, ..., pin_memory=True)\n"
                "x = x.to('cuda', non_blocking=True)"),
            Fix("Reuse one pinned staging buffer for repeated transfers",
                "buf = torch.empty(shape, dtype=dt, pin_memory=True)\nbuf.copy_(cpu_tensor)\n"
                "gpu.copy_(buf, non_blocking=True)"),
            Fix("Keep data resident on the GPU when it fits",
                "dataset_tensor = dataset_tensor.cuda()"),
        ),
        idle_ms=idle,
    )


def time_ms(ns: float, n: int) -> float:
    return ns / 1e6 / n


def _pinned_bandwidth(a: Analysis) -> float:
    """Pinned-copy bandwidth seen in this trace (large copies), else the ceilings' host link: as
    ``gpudoctor bench`` measured it, or the datasheet's link at the share copies reach of it."""
    dev = a.trace.device
    pinned = np.isin(dev.kind, [int(Kind.MEMCPY_HTOD_PINNED), int(Kind.MEMCPY_DTOH_PINNED)]) & (
        dev.nbytes >= 1 << 20)
    if pinned.any() and dev.dur[pinned].sum() > 0:
        return float(dev.nbytes[pinned].sum()) / (dev.dur[pinned].sum() / 1e9)
    link = a.ceilings.h2d_pinned_bytes_per_s
    return link * LINK_REACHED_SHARE if a.ceilings.source.startswith("datasheet") else link



def edit(a: Analysis, finding: Finding) -> Edit | None:
    """The copies at the pinned bandwidth, issued without blocking the host."""
    dev = a.trace.device
    idx = np.flatnonzero(
        (a.roofline.event_in_steps_ns > 0) & np.isin(dev.kind, [int(k) for k in PAGEABLE_KINDS]))
    if idx.size == 0:
        return None
    pinned_ns = dev.nbytes[idx] / _pinned_bandwidth(a) * 1e9
    # an upload from pageable memory waits for the stream's earlier work, then the host stages
    # it through a bounce buffer, inside the copy's operator: pinned and non_blocking, that time
    # and the wait go (its launch is a few microseconds). A download's host needs the data: it
    # waits for the GPU either way, and only the staging after the transfer goes
    upload = dev.kind[idx] == int(Kind.MEMCPY_HTOD_PAGEABLE)
    calls = dev.launch[idx[upload]]
    calls = calls[calls >= 0]
    host = a.trace.host
    calls = np.concatenate([calls, _syncs_inside(a, dev.op[idx[upload]])])
    has_op = dev.op[idx] >= 0
    ops = dev.op[idx][has_op]
    op_s = np.where(upload[has_op], host.ts[ops], np.maximum(host.ts[ops], dev.end[idx][has_op]))
    op_e = np.maximum(host.end[ops], op_s)
    s, e = a.idle.labels.get(ID, (np.empty(0, np.int64), np.empty(0, np.int64)))
    s, e = np.concatenate([s, op_s]), np.concatenate([e, op_e])
    return Edit(device=idx.astype(np.int64), device_ns=np.minimum(pinned_ns, dev.dur[idx]),
                unwait=calls.astype(np.int64), host_removed_s=s, host_removed_e=e,
                note="copies pinned and asynchronous")


def _syncs_inside(a: Analysis, ops: np.ndarray) -> np.ndarray:
    """The stream synchronizations a pageable upload's copy operator makes after its copy (PyTorch
    syncs the stream before it returns: tests/data/twins_h100/pageable_h2d); a pinned,
    non-blocking copy makes none."""
    host = a.trace.host
    syncs = np.flatnonzero(sync_calls(a.trace) & (host.cat >= HostCat.RUNTIME))
    return syncs[np.isin(host.op[syncs], ops[ops >= 0])].astype(np.int64)


RULE = Rule(
    ID, "Pageable host<->device copies", check, __doc__ or "",
    order=60, idle_cause="pageable-copy", calibration="step-share", edit=edit,
)
