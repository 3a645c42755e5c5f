"""input-pipeline: the GPU waits while the host fetches the next batch (DataLoader ``__next__``).

Priced as what the prescribed loader can deliver, not as all the waiting:

- batches made on the training thread (``_SingleProcessDataLoaderIter``): the time in
  ``__next__`` (timed without the profiler, where the capture timed it) is one batch's cost on
  one core; W worker processes deliver a batch every cost / W, so the step after the fix is
  max(step - idle, cost / W), W the workers prescribed (core/loader.py ``prescribed_workers``:
  as the ``loader-workers`` knob sets them, from the loader's settings and the host's CPUs where
  ``gpudoctor run`` read them, else MAX_FIRST_WORKERS);
- batches from workers already (``_MultiProcessingDataLoaderIter``) and still late: the workers'
  throughput sets the step, so each of the N workers takes N steps to make a batch; the fix gives
  the loader the workers that make a batch in the rest of the step (core/loader.py
  ``workers_to_keep_up``: M = N / (share of the step not waiting), within the host's CPUs), and the
  step after it is max(step - idle, step * N / M), where the step is the one the program runs,
  waits the window did not see included (``STEP_FLOOR_SHARE_AFTER_FIX``), not the profiled step.
  From a bare trace, which says neither N nor the CPUs: twice as many at most halve the step;
- batches made on the training thread whose time is mostly ``pin_memory`` (at least
  ``PINNING_SHARE`` of it): the data set is already in memory and the loader copies each batch
  into pinned memory. The fix is to pin the data set once (``Tensor.pin_memory`` returns a pinned
  tensor as it is) or keep it on the GPU, which saves the pinning: min(idle, pinning). Workers do
  not: each batch then crosses shared memory and is still pinned. Where that pinning runs below
  ``SLOW_PINNING_GBPS`` in a program that uses torch.compile, the first fix is to compile in the
  program's own process (``TORCHINDUCTOR_COMPILE_THREADS=1``): Inductor's compile workers slow the
  host's copies into pinned memory.
"""

from __future__ import annotations

import math

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import fetched_by_workers
from gpudoctor.analysis.intervals import overlap_per_window, union
from gpudoctor.analysis.opcost import DTYPE_BYTES, tensor_inputs
from gpudoctor.core.arrays import distinct
from gpudoctor.core.finding import (
    ALL_IDLE,
    STEP_FLOOR_AFTER_FIX,
    STEP_FLOOR_SHARE_AFTER_FIX,
    Evidence,
    Finding,
    Fix,
    make_finding,
)
from gpudoctor.core.loader import (
    WORKERS_PRESCRIBED,
    LoaderSettings,
    prescribed_workers,
    workers_to_keep_up,
)
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import sources_of_host, top_names

ID = "input-pipeline"
WORKER_FLOOR_SHARE = 0.5  # workers already too slow: twice as many at most halve the step
LOADER_SETS_STEP_SHARE = 0.25  # the wait for batches is this share of the step or more
LOADER_SETS_STEP = "loader_sets_step"  # evidence: the wait is that share of the step or more
PIN_OPS = ("aten::pin_memory", "aten::_pin_memory")
PINNING_SHARE = 0.5
SLOW_PINNING_GBPS = 10.0  # H100 hosts pinned 16 MB batches at 32-45 GB/s, under the compile workers at 1.7-3.8
COMPILED_REGION = "Torch-Compiled Region"  # the op torch.compile's code runs under (torch >= 2.1)


def pinning_gbps(a: Analysis, threads: np.ndarray) -> float | None:
    """Bytes per second of the ``aten::pin_memory`` calls on these threads (their first tensor
    input), in GB/s; None when no call records its input's shape and dtype."""
    trace = a.trace
    pin_id = trace.string_ids.get(PIN_OPS[0])
    if pin_id is None:
        return None
    nbytes, seconds = 0, 0.0
    for i in np.flatnonzero((trace.host.name == pin_id) & trace.host.on_threads(threads)).tolist():
        tensors = tensor_inputs(trace.input_dims(i), trace.input_types(i))
        if not tensors:
            continue
        shape, dtype = tensors[0]
        nbytes += DTYPE_BYTES[dtype] * math.prod(shape)
        seconds += float(trace.host.end[i] - trace.host.ts[i]) / 1e9
    return nbytes / seconds / 1e9 if nbytes and seconds > 0 else None


def uses_torch_compile(a: Analysis) -> bool:
    return bool(a.trace.names_matching(lambda name: name.startswith(COMPILED_REGION)).any())


def pinning_ns(a: Analysis, threads: np.ndarray, loader_s: np.ndarray, loader_e: np.ndarray) -> int:
    """Host time in ``pin_memory`` ops inside the loader's spans, on these threads."""
    host, ids = a.trace.host, [a.trace.string_ids.get(n) for n in PIN_OPS]
    ids = [i for i in ids if i is not None]
    if not ids:
        return 0
    pins = np.flatnonzero(np.isin(host.name, ids) & host.on_threads(threads))
    if pins.size == 0:
        return 0
    pin_s, pin_e = union(host.ts[pins], host.end[pins])
    return int(overlap_per_window(pin_s, pin_e, loader_s, loader_e).sum())


def check(a: Analysis) -> Finding | None:
    idle = a.idle.ms(ID)
    culprits = a.idle.culprits.get(ID, np.empty(0, np.int64))
    if idle <= 0 or culprits.size == 0:
        return None
    trace, host = a.trace, a.trace.host
    s, e = union(host.ts[culprits], host.end[culprits])
    n_steps = max(len(a.steps), 1)
    loader_ms = float((e - s).sum()) / 1e6 / n_steps
    from_workers = fetched_by_workers(trace, culprits)
    threads = distinct(host.thread[culprits])  # where the loader ran: the training thread
    pinning_ms = 0.0 if from_workers else pinning_ns(a, threads, s, e) / 1e6 / n_steps
    pinning = loader_ms > 0 and pinning_ms >= PINNING_SHARE * loader_ms
    gbps = pinning_gbps(a, threads) if pinning else None
    slowed_by_compile = gbps is not None and gbps < SLOW_PINNING_GBPS and uses_torch_compile(a)
    # the step the prescribed loader can deliver; none for pinning, whose saving is the pinning
    # itself (calibrated as the idle it fills)
    floor_evidence: dict[str, float] = {}
    keep_up = None  # behind workers already: the workers that keep up, where they are known
    if pinning:  # pin the data set once: the pinning goes, the rest of __next__ stays on the thread
        saving = min(idle, pinning_ms)
    # a share of the step the program runs: calibrate applies it to the unprofiled step
    elif from_workers:
        keep_up = _workers_keeping_up(a, idle)
        share = WORKER_FLOOR_SHARE if keep_up is None else a.loader.num_workers / keep_up
        saving = a.step_ms - max(a.step_ms - idle, a.step_ms * share)
        floor_evidence = {STEP_FLOOR_SHARE_AFTER_FIX: round(share, 4),
                          **({} if keep_up is None else {WORKERS_PRESCRIBED: keep_up})}
    else:
        # one batch's cost on one core: the fetch timed without the profiler where the capture
        # timed it (the profiled window's own is the profiler's pace)
        workers = prescribed_workers(0, a.loader.cpus if a.loader is not None else None)
        floor = (a.unprofiled_fetch_ms or loader_ms) / workers
        saving = a.step_ms - max(a.step_ms - idle, floor)
        floor_evidence = {STEP_FLOOR_AFTER_FIX: round(floor, 3), WORKERS_PRESCRIBED: workers}
    # "sets the step" where the wait is a good part of it; a short wait is a late batch now and then
    sets_step = idle >= LOADER_SETS_STEP_SHARE * a.step_ms
    evidence = Evidence(
        numbers={
            "gpu_idle_waiting_for_data_ms_per_step": round(idle, 3),
            "host_time_in_dataloader_ms_per_step": round(loader_ms, 3),
            "share_of_step_pct": round(100 * idle / a.step_ms, 1),
            "loader_workers_already": from_workers,
            LOADER_SETS_STEP: sets_step,
            "host_time_pinning_ms_per_step": round(pinning_ms, 3),
            "loader_time_is_pinning": pinning,
            **({} if gbps is None else {"pinning_gb_per_s": round(gbps, 2)}),
            "pinning_slowed_under_torch_compile": slowed_by_compile,
            **floor_evidence,
            # the same fetch timed without the profiler, where the capture timed it
            **({} if a.unprofiled_fetch_ms is None
               else {"host_time_in_dataloader_unprofiled_ms_per_step":
                     round(a.unprofiled_fetch_ms, 3)}),
        },
        ops=top_names(trace, host.name[culprits], host.dur[culprits].astype(float)),
        sources=sources_of_host(trace, culprits, a.idle.culprit_idle_ns[ID].astype(float)),
    )
    where = (("the worker processes do not keep up: the loader's throughput sets the step"
              if sets_step else "a batch from the worker processes is late now and then")
             if from_workers
             else f"{pinning_ms:.2f} ms of it copies each batch into pinned memory: the data set "
                  "is in memory, unpinned" if pinning
             else "batches are produced on the training thread")
    if slowed_by_compile:
        where += (f", at {gbps:.1f} GB/s in a program that uses torch.compile: Inductor's compile "
                  "workers slow the host's copies into pinned memory")
    in_process = Fix("Compile in the program's own process: with Inductor's worker pool up, "
                     "pinning a 16 MB batch took 8.0 ms instead of 0.10 on an H100",
                     "TORCHINDUCTOR_COMPILE_THREADS=1 python train.py   # or "
                     "torch._inductor.config.compile_threads = 1")
    workers_fix = _workers_fix(a.loader, from_workers, keep_up)
    pin_once = Fix("Pin the in-memory data set once (or keep it on the GPU): its batches are then "
                   "views of pinned memory, which the loader does not copy again; worker processes "
                   "would still copy each batch, through shared memory",
                   "ds.x, ds.y = ds.x.pin_memory(), ds.y.pin_memory()  # once, after building it\n"
                   "# or, when it fits: ds.x, ds.y = ds.x.cuda(), ds.y.cuda(); DataLoader(..., "
                   "pin_memory=False)")
    return make_finding(
        ID,
        "The GPU waits for the input pipeline",
        a.step_ms,
        saving,
        f"The GPU sits idle {idle:.2f} ms per step while the host runs the DataLoader "
        f"({loader_ms:.2f} ms per step in __next__"
        + (f", {a.unprofiled_fetch_ms:.2f} ms timed without the profiler"
           if a.unprofiled_fetch_ms is not None else "") + f"): {where}.",
        evidence,
        (
            *((in_process, pin_once) if slowed_by_compile else (pin_once,) if pinning
              else (workers_fix,)),
            Fix("Copy asynchronously so the next batch's transfer overlaps compute",
                "x = x.to('cuda', non_blocking=True)"),
            Fix("Move heavy preprocessing off the step: precompute it, or run it on the GPU",
                "# decode/augment once offline, or on the GPU in batch (torchvision.transforms.v2 "
                "on cuda tensors)"),
        ),
        wrong_fix="A faster GPU or a bigger model will not help: the card is waiting for data.",
        idle_ms=ALL_IDLE,
    )




def _workers_keeping_up(a: Analysis, idle_ms: float) -> int | None:
    """The workers that keep up with the rest of the step (core/loader.py ``workers_to_keep_up``),
    for a loader whose workers and host CPUs ``gpudoctor run`` read; the rest of the step from the
    unprofiled step and fetch where the capture timed them (the profiled ones carry the profiler's
    time), else from the profiled step and its wait. None from a bare trace."""
    loader = a.loader
    if loader is None or loader.num_workers <= 0 or not loader.cpus or loader.cpus < 3:
        return None
    step, fetch = a.unprofiled_step_ms, a.unprofiled_fetch_ms
    if step and fetch is not None and 0 <= fetch < step:
        rest_share = 1.0 - fetch / step
    elif a.step_ms > 0:
        rest_share = 1.0 - idle_ms / a.step_ms
    else:
        return None
    return workers_to_keep_up(loader.num_workers, rest_share, loader.cpus)


def _workers_fix(loader: LoaderSettings | None, from_workers: bool,
                 keep_up: int | None = None) -> Fix:
    """The workers fix, written from the loader's own settings where ``gpudoctor run`` read them;
    from a bare trace, which says neither the workers nor the host's cores, the snippet names them
    instead of inventing a number (small-gemm's ``B`` is the same)."""
    title = ("More worker processes (enough to make a batch in the rest of the step), batches "
             "pinned" if from_workers and keep_up
             else "More worker processes (twice as many as now), batches pinned" if from_workers
             else "Load batches in worker processes and pin them")
    if loader is None:
        return Fix(title,
                   "DataLoader(ds, batch_size=B, num_workers=2 * W, pin_memory=True,\n"
                   "           persistent_workers=True)   # B, W: the batch and workers now"
                   if from_workers else
                   "DataLoader(ds, batch_size=B, num_workers=W, pin_memory=True,\n"
                   "           persistent_workers=True)   # B: the batch now; W: up to the "
                   "host's cores per GPU")
    now = loader.num_workers if from_workers else 0
    workers = keep_up or prescribed_workers(now, loader.cpus)
    batch = str(loader.batch_size) if loader.batch_size else "B"
    was = (f"# was num_workers={loader.num_workers}, pin_memory={loader.pin_memory}"
           + (f"; {loader.cpus} CPUs on this host" if loader.cpus else ""))
    if from_workers and workers <= now:  # no CPU left to give more workers
        return Fix("The workers already take every CPU the program has: make each batch cheaper "
                   "(decode or augment once, or on the GPU), batches pinned",
                   f"DataLoader(ds, batch_size={batch}, num_workers={now}, pin_memory=True,\n"
                   f"           persistent_workers=True)   {was}")
    return Fix(title, f"DataLoader(ds, batch_size={batch}, num_workers={workers}, pin_memory=True,\n"
                      f"           persistent_workers=True)   {was}")


def edit(a: Analysis, finding: Finding) -> Edit | None:
    """The loader's time leaves the training thread; the step cannot go below what the workers
    deliver (the floor the finding states), and pinning, when that is the loader's time, goes."""
    s, e = a.idle.labels.get(ID, (np.empty(0, np.int64), np.empty(0, np.int64)))
    if s.size == 0:
        return None
    numbers = finding.evidence.numbers
    if numbers.get("loader_time_is_pinning"):
        loader_ms = float(numbers.get("host_time_in_dataloader_ms_per_step", 0.0))
        share = min(float(numbers.get("host_time_pinning_ms_per_step", 0.0)) / loader_ms, 1.0) if loader_ms else 0.0
        return Edit(host_removed_s=s, host_removed_e=e, host_share=share, paced=False,
                    note="pinning removed")
    floor_ms = float(numbers.get(STEP_FLOOR_AFTER_FIX, 0.0))
    # workers already: more of them. Their floor holds where they set the step; where a batch is
    # only late now and then, they made one in less than the step, how much less the trace does
    # not say, and the floor would hold every other fix replayed with this one above it
    # (benchmarks/BENCHMARKS-gallery.md "Two more public programs")
    floor_share = (float(numbers.get(STEP_FLOOR_SHARE_AFTER_FIX, 0.0))
                   if numbers.get(LOADER_SETS_STEP, True) else 0.0)
    return Edit(host_removed_s=s, host_removed_e=e, min_step_ns=floor_ms * 1e6,
                min_step_share=floor_share, paced=False, note="loader moved to workers")


RULE = Rule(
    ID, "GPU idle waiting for the input pipeline", check, __doc__ or "", needs=("launch_links",),
    order=0, idle_cause="input-pipeline", edit=edit,
)
