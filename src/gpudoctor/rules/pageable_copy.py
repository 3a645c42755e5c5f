"""pageable-copy: host<->device copies from pageable memory are slow and block the host.

Priced at what the fix leaves: the copy itself, at the pinned bandwidth, on the stream with the
kernels that read it. The step cannot go below that GPU work (``STEP_FLOOR_AFTER_FIX``), however
much the profiler slowed the pageable copy.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import dataloader_calls, fetched_by_workers, sync_calls
from gpudoctor.analysis.opcost import TORCH_DTYPES, tensor_inputs
from gpudoctor.core.finding import STEP_FLOOR_AFTER_FIX, Evidence, Finding, Fix, make_finding
from gpudoctor.core.loader import LoaderSettings
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import op_names_of_events, sources_of_events
from gpudoctor.trace.kernels import PAGEABLE_KINDS, Kind
from gpudoctor.trace.model import HostCat

ID = "pageable-copy"
# Pinned copies reach this share of the datasheet's host link, as `gpudoctor bench` measured it on
# an H100 and an H200 (benchmarks/BENCHMARKS-replay.md "A pageable upload's stream sync").
LINK_REACHED_SHARE = 0.87
# A download this large to pageable memory lands in a fresh allocation each step (``t.cpu()``),
# which the host releases when the previous step's copy goes: the op-free host time right after
# the copy's operator, up to RELEASE_NS_PER_MB a megabyte, leaves with a reused pinned buffer
# (tests/data/twins_h100/scores_to_cpu: 2.1 ms after each 67 MB download;
# benchmarks/BENCHMARKS-replay.md "A download's fresh pages").
RELEASE_MIN_BYTES = 8 << 20
RELEASE_MIN_NS = 50_000
RELEASE_NS_PER_MB = 60_000


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
        _fixes(downloads_mostly=_download_bytes(a, idx) > nbytes / 2,
               loader=bool(dataloader_calls(a.trace).any()), upload=_largest_upload(a, idx),
               settings=a.loader),
        idle_ms=idle,
    )


_PIN_TITLE = "Pin host buffers and copy asynchronously"
_PIN_FIX = Fix(_PIN_TITLE, "loader = DataLoader(ds, ..., pin_memory=True)\n"
                           "x = x.to('cuda', non_blocking=True)")


def _pin_fix(loader: LoaderSettings | None) -> Fix:
    """The DataLoader's pinning, written from its own settings where ``gpudoctor run`` read them.
    With no workers the loop's own thread pins each batch, which then costs it a copy: the
    snippet says so (rules/input_pipeline.py prices the workers)."""
    if loader is None:
        return _PIN_FIX
    batch = str(loader.batch_size) if loader.batch_size else "B"
    note = ("# no workers: the loop's own thread pins each batch (workers would pin beside it)\n"
            if loader.num_workers == 0 else "")
    return Fix(_PIN_TITLE,
               f"{note}loader = DataLoader(ds, batch_size={batch}, "
               f"num_workers={loader.num_workers}, pin_memory=True)   "
               f"# was pin_memory={loader.pin_memory}\n"
               "x = x.to('cuda', non_blocking=True)")
_RESIDENT_FIX = Fix("Keep data resident on the GPU when it fits",
                    "dataset_tensor = dataset_tensor.cuda()")
_DOWNLOAD_FIX = Fix(
    "Download into one pinned buffer, allocated once and reused",
    "host_buf = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)  # once, before the loop\n"
    "host_buf.copy_(out, non_blocking=True)  # instead of out.cpu()\n"
    "torch.cuda.current_stream().synchronize()  # before the host reads host_buf")


def _staging_fix(upload: tuple[tuple[int, ...], str] | None) -> Fix:
    """One pinned buffer reused for the step's copies, at the largest upload's own shape and dtype
    where the trace recorded them."""
    shape, dtype = ("shape", "dt") if upload is None else (
        str(tuple(upload[0])), TORCH_DTYPES.get(upload[1], "dt"))
    return Fix("Reuse one pinned staging buffer for repeated transfers",
               f"buf = torch.empty({shape}, dtype={dtype}, pin_memory=True)  # once\n"
               "buf.copy_(cpu_tensor)\n"
               "gpu = buf.to('cuda', non_blocking=True)")


def _fixes(downloads_mostly: bool, loader: bool = True,
           upload: tuple[tuple[int, ...], str] | None = None,
           settings: LoaderSettings | None = None) -> tuple[Fix, ...]:
    """The upload fixes, or for copies that are mostly downloads the reused pinned buffer first. A
    program whose batches come from no DataLoader is told to stage them through a pinned buffer,
    not given a DataLoader setting."""
    staging, pin = _staging_fix(upload), _pin_fix(settings)
    if downloads_mostly:
        second = pin if loader else staging if upload is not None else None
        return tuple(f for f in (_DOWNLOAD_FIX, second, _RESIDENT_FIX) if f is not None)
    return (pin, staging, _RESIDENT_FIX) if loader else (staging, _RESIDENT_FIX)


def _largest_upload(a: Analysis, idx: np.ndarray) -> tuple[tuple[int, ...], str] | None:
    """The shape and dtype of the largest pageable upload's source tensor, from its operator's
    recorded inputs; None where the trace recorded none."""
    dev, trace = a.trace.device, a.trace
    up = idx[(dev.kind[idx] == int(Kind.MEMCPY_HTOD_PAGEABLE)) & (dev.op[idx] >= 0)]
    if up.size == 0:
        return None
    largest = up[np.argmax(dev.nbytes[up])]
    op = int(trace.host.outermost(dev.op[largest:largest + 1])[0])
    tensors = tensor_inputs(trace.input_dims(op), trace.input_types(op))
    return (tuple(tensors[0][0]), tensors[0][1]) if tensors and tensors[0][1] else None


def _download_bytes(a: Analysis, idx: np.ndarray) -> float:
    dev = a.trace.device
    return float(dev.nbytes[idx][dev.kind[idx] == int(Kind.MEMCPY_DTOH_PAGEABLE)].sum())


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
    rel_s, rel_e = _releases(a, idx[~upload])
    s, e = np.concatenate([s, op_s, rel_s]), np.concatenate([e, op_e, rel_e])
    return Edit(device=idx.astype(np.int64), device_ns=np.minimum(pinned_ns, dev.dur[idx]),
                unwait=calls.astype(np.int64), host_removed_s=s, host_removed_e=e,
                note="copies pinned and asynchronous")


# A batch pinned by the loop's own thread (a DataLoader with no workers and pin_memory=True) costs
# it a host copy at about this rate, the low end of the 32-45 GB/s H100 hosts pinned 16 MB batches
# at (benchmarks/BENCHMARKS-try-fixes.md "Thirty timed steps, a fresh Inductor cache").
PINNING_BYTES_PER_S = 32e9


def pin_memory_edit(a: Analysis) -> Edit | None:
    """``DataLoader(pin_memory=True)`` alone (``run --try-fixes``' pin-memory knob): the batches'
    uploads run at the pinned bandwidth and the host no longer stages them (the memcpy calls'
    time goes), but the program's ``.to()`` stays blocking: each copy still waits for the
    stream's earlier work and its transfer (its sync is kept, unlike the finding's fix, which
    makes the copy non_blocking too). With no workers the loop's own thread pins each batch first,
    a host copy of its bytes at PINNING_BYTES_PER_S. None where no DataLoader fetched in the
    window or it uploaded nothing from pageable memory."""
    trace, dev = a.trace, a.trace.device
    loader = dataloader_calls(trace)
    if not loader.any():
        return None
    idx = np.flatnonzero((a.roofline.event_in_steps_ns > 0)
                         & (dev.kind == int(Kind.MEMCPY_HTOD_PAGEABLE)))
    if idx.size == 0:
        return None
    host = trace.host
    calls = dev.launch[idx]
    called = calls >= 0
    workers = a.loader.num_workers if a.loader is not None else int(
        fetched_by_workers(trace, np.flatnonzero(loader)))
    # with no workers the loop's thread pins each batch before its copy: that time is added to the
    # copy's call, after the profiler's share is taken out (it is no profiled time)
    pin_ns = (dev.nbytes[idx][called] / PINNING_BYTES_PER_S * 1e9 if workers == 0
              else np.zeros(int(called.sum())))
    pinned_ns = dev.nbytes[idx] / _pinned_bandwidth(a) * 1e9
    return Edit(device=idx.astype(np.int64), device_ns=np.minimum(pinned_ns, dev.dur[idx]),
                host_removed_s=host.ts[calls[called]].astype(np.int64),
                host_removed_e=host.end[calls[called]].astype(np.int64),
                calls_slower=calls[called].astype(np.int64), calls_slower_ns=pin_ns,
                note="batches pinned by the DataLoader, copied blocking"
                     + (", pinned on the loop's thread" if workers == 0 else ""))


def _releases(a: Analysis, downloads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The op-free host stretch right after each large download's outermost operator, at least
    RELEASE_MIN_NS and at most RELEASE_NS_PER_MB a megabyte: the host releasing the fresh pageable
    memory an earlier step's download landed in."""
    dev, host = a.trace.device, a.trace.host
    big = downloads[(dev.nbytes[downloads] >= RELEASE_MIN_BYTES) & (dev.op[downloads] >= 0)]
    empty = (np.empty(0, np.int64), np.empty(0, np.int64))
    if big.size == 0:
        return empty
    ops = host.outermost(dev.op[big])
    done = host.end[ops].astype(np.int64)
    # the next host event on each operator's thread: one sorted lookup by (thread, start)
    order = np.lexsort((host.ts, host.thread))
    keys_thread, keys_ts = host.thread[order], host.ts[order]
    pos = np.searchsorted(keys_thread, host.thread[ops], side="left")
    end_of_thread = np.searchsorted(keys_thread, host.thread[ops], side="right")
    for k in range(ops.size):  # within the thread's slice, the first event at or after the end
        pos[k] += np.searchsorted(keys_ts[pos[k]:end_of_thread[k]], done[k], side="left")
    has_next = pos < end_of_thread
    gap = np.where(has_next, keys_ts[np.minimum(pos, keys_ts.size - 1)] - done, 0)
    keep = gap >= RELEASE_MIN_NS
    cap = (RELEASE_NS_PER_MB * dev.nbytes[big] / (1 << 20)).astype(np.int64)
    return done[keep], done[keep] + np.minimum(gap, cap)[keep]


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
