"""One rank's trace reduced to what the multi-rank analysis compares: step times, busy and idle
by cause, every collective instance (its name, order, size, start, end, stream) on the rank's own
clock, kernel times by name, one step's timeline and the rank's NVML facts. A summary is a few
kilobytes whatever the trace's size: worker processes send these back, never events."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import dataloader_calls
from gpudoctor.analysis.host_time import host_time
from gpudoctor.analysis.intervals import clip_total, union
from gpudoctor.analysis.steps import Steps
from gpudoctor.ranks import host_ops
from gpudoctor.ranks.backward import micro_of, pass_starts, per_step
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import HostCat, Trace

# one step's timeline is drawn at ~1000 px: intervals closer than this are merged into one bar
TIMELINE_MERGE_NS = 20_000
MAX_TIMELINE_BARS = 400

# record_param_comms "Collective name" (torch.distributed) -> plan/collective_cost.py OPS
_OP_NAMES = {
    "allreduce": "all-reduce", "all_reduce": "all-reduce",
    "allgather": "all-gather", "_allgather_base": "all-gather", "all_gather": "all-gather",
    "allgather_into_tensor_coalesced": "all-gather", "all_gather_into_tensor": "all-gather",
    "reduce_scatter": "reduce-scatter", "_reduce_scatter_base": "reduce-scatter",
    "reduce_scatter_tensor": "reduce-scatter", "reduce_scatter_tensor_coalesced": "reduce-scatter",
    "all_to_all": "all-to-all", "alltoall": "all-to-all", "alltoall_base": "all-to-all",
    "broadcast": "broadcast", "send": "p2p", "recv": "p2p", "recvAnysource": "p2p",
}
# ncclDevKernel_AllReduce_Sum_f32_RING_LL, ncclKernel_AllGather_RING_LL_Sum_int8_t
_KERNEL_OP = re.compile(
    r"nccl(?:Dev)?Kernel_(AllReduce|AllGather|ReduceScatter|Broadcast|SendRecv|Send|Recv)")
_KERNEL_OPS = {"AllReduce": "all-reduce", "AllGather": "all-gather",
               "ReduceScatter": "reduce-scatter",
               "Broadcast": "broadcast", "SendRecv": "p2p", "Send": "p2p", "Recv": "p2p"}
# CPU process groups wrap each collective in a record_function named after the backend and the op
# ("gloo:all_reduce" on the gloo worker thread that runs it); a CPU-only job's collectives are these
_HOST_COLLECTIVE = re.compile(r"^(?:gloo|mpi|ucc|nccl|xccl):([A-Za-z_]+)$")
# the point-to-point operators of torch.distributed: the transfer, not compute
_P2P_OPS = frozenset({"c10d::send", "c10d::recv_", "c10d::recv_any_source_"})
_RECV_RANGES = frozenset({"c10d::recv_", "c10d::recv_any_source_"})
_DTYPE_BYTES = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Long": 8, "Int": 4,
                "Byte": 1, "Char": 1, "Bool": 1, "Short": 2, "Float8_e4m3fn": 1, "Float8_e5m2": 1}


@dataclass(frozen=True)
class Collective:
    """One collective kernel on one rank, times on the rank's own clock (ns, the profiler's)."""

    op: str  # plan/collective_cost.py OPS name: all-reduce, all-gather, ...
    seq: int  # its place among this rank's collectives of the window
    nbytes: int  # nccl-tests size convention (the larger of input and output); 0 when unrecorded
    start: int
    end: int
    stream: int
    group: str  # process group name ("" when unrecorded)
    step: int  # index of the step it starts in, -1 outside every step
    # compute (non-NCCL kernels) running beside it, as (start, end) offsets from its start:
    # what of it is hidden, worked out once its wait is known (ranks/comm.py)
    overlap: tuple[tuple[int, int], ...] = ()
    name: str = ""  # the recorded collective name ("send", "recv", "all_reduce"), "" when unrecorded
    micro: int = -1  # the backward pass of its step that launched it (ranks/backward.py), -1 unknown

    @property
    def is_recv(self) -> bool:
        return self.op == "p2p" and self.name.startswith("recv")

    @property
    def dur(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Transfer:
    """One point-to-point message on one rank, for the clock bounds (ranks/p2p_clock.py): a send's
    start (the data cannot leave earlier) or a recv's end (the data has arrived by then), on the
    rank's own clock (ns), with the peer's global rank and the element count (0 when unrecorded)."""

    kind: str  # "send" or "recv"
    peer: int
    nelems: int
    time: int
    step: int  # index of the step it starts in, -1 outside every step


@dataclass(frozen=True)
class RankSummary:
    """What one rank contributes to the multi-rank analysis."""

    rank: int
    source: str
    gpu: str
    step_start: tuple[int, ...]  # own clock, ns
    step_end: tuple[int, ...]
    busy_ms: float  # per step, every GPU event
    compute_ms: float  # per step, non-NCCL kernels (union)
    idle_ms: float
    idle_by_cause: dict[str, float]  # cause -> ms per step (analysis/idle.py)
    collectives: tuple[Collective, ...]
    # non-NCCL kernel name -> ms per step (the longest host_ops.MAX_NAMES)
    kernel_ms: dict[str, float]
    kernels_per_step: float
    # one step (the middle one of the window) as merged bars on the rank's clock: (start, end, kind)
    timeline_step: int = -1
    timeline: tuple[tuple[int, int, str], ...] = ()
    env: dict[str, Any] = field(default_factory=dict)  # hostname, world_size, nvml (from env.json)
    # pipeline parallelism: per step, the ms the rank sat blocked receiving from a neighbour (recv
    # with no compute beside it), and the sends / receives issued in the steps
    recv_wait_ms: tuple[float, ...] = ()
    p2p_sends: int = 0
    p2p_recvs: int = 0
    # the host's own step by cause, ms and recorded events per step (analysis/host_time.py): what
    # decides when the rank reaches its collectives; empty when unknown (no ProfilerStep ranges)
    host_ms: dict[str, float] = field(default_factory=dict)
    host_events: dict[str, float] = field(default_factory=dict)
    transfers: tuple[Transfer, ...] = ()  # send starts and recv ends, in time order
    backward_passes: tuple[int, ...] = ()  # per step (ranks/backward.py): micro-batches accumulated
    # per step, the FLOPs and bytes of its non-NCCL kernels by the cost model
    # (analysis/roofline.py), a CPU rank's of its operators (ranks/host_ops.py): the work a rank is
    # given, which tells more work from a slower GPU; 0 when unknown
    work_flops: float = 0.0
    work_bytes: float = 0.0
    # the profiler's own host time per recorded event on this rank, measured: (profiled step -
    # unprofiled step) / the host's recorded events per step; None without an unprofiled step
    profiler_ns_per_event: float | None = None
    # what the rank's own single-GPU host-sync finding saves per step (rules/host_sync.py), 0 when
    # it has none: syncs only one rank makes cost the job what they cost that rank, and in a
    # profiled window that the profiler makes host-bound they hide inside its dispatch noise
    sync_saving_ms: float = 0.0

    @property
    def step_ms(self) -> float:
        n = len(self.step_start)
        return sum(e - s for s, e in zip(self.step_start, self.step_end)) / n / 1e6 if n else 0.0

    @property
    def steps(self) -> int:
        return len(self.step_start)


def summarize(a: Analysis, rank: int, env: dict[str, Any] | None = None) -> RankSummary:
    """The summary of one rank's analysis (pure: the trace is read, nothing else)."""
    t, d = a.trace, a.trace.device
    origin = t.origin_ns
    steps = a.steps
    nccl = d.kind == Kind.NCCL
    comp_s, comp_e = union(d.ts[~nccl], d.end[~nccl])
    n = max(len(steps), 1)
    starts = tuple(int(x) + origin for x in steps.start)
    ends = tuple(int(x) + origin for x in steps.end)
    compute_ns = _in_steps(comp_s, comp_e, steps)
    # the host's own step ranges (its launches are what the backward passes are matched with)
    lo = steps.host_start if steps.host_start is not None else steps.start
    hi = steps.host_end if steps.host_end is not None else steps.end
    passes = pass_starts(t, _step_thread(t, steps)) if len(steps) else np.empty(0, np.int64)
    collectives = _collectives(a, comp_s, comp_e, lambda ts: micro_of(passes, lo, hi, ts))
    host = host_time(t, steps, a.idle)
    flops, nbytes = _work(a, ~nccl, n)
    return RankSummary(
        rank=rank,
        source=t.source,
        gpu=t.gpu.name if t.gpu else "",
        step_start=starts,
        step_end=ends,
        busy_ms=a.breakdown.busy_ms,
        compute_ms=compute_ns / n / 1e6,
        idle_ms=a.breakdown.idle_ms,
        idle_by_cause={k: round(v, 6) for k, v in a.idle.by_cause_ms.items() if v > 0},
        collectives=collectives,
        kernel_ms=_kernel_ms(a, ~nccl, n),
        kernels_per_step=a.breakdown.launch_count_per_step,
        timeline_step=len(steps) // 2 if len(steps) else -1,
        timeline=_timeline(steps, comp_s, comp_e, *union(d.ts[nccl], d.end[nccl]), origin),
        env=_env_facts(env or {}),
        **_p2p_device(collectives, len(steps)),
        host_ms=host.ms,
        host_events=host.events,
        transfers=_device_transfers(a, collectives),
        backward_passes=per_step(passes, lo, hi),
        work_flops=flops,
        work_bytes=nbytes,
        profiler_ns_per_event=_profiler_ns_per_event(a.step_ms, a.unprofiled_step_ms,
                                                     sum(host.events.values())),
    )


def _profiler_ns_per_event(profiled_ms: float, unprofiled_ms: float | None,
                           events: float) -> float | None:
    """What the profiler added per recorded event on this rank: the step it stretched, over the
    events it recorded in it. None when the unprofiled step is unknown or not shorter."""
    if not unprofiled_ms or events <= 0 or profiled_ms <= unprofiled_ms:
        return None
    return (profiled_ms - unprofiled_ms) * 1e6 / events


def summarize_host(trace: Trace, steps: Steps, rank: int,
                   env: dict[str, Any] | None = None) -> RankSummary:
    """The summary of a rank that ran on the CPU (gloo): its collectives are the process group's
    host ranges ("gloo:all_reduce", on the worker thread that ran them), its compute the operators
    on the thread that ran the steps, and what of its step no operator covers (Python: data,
    logging, sleeps) its "host-work" idle, "input-pipeline" where a DataLoader's ``__next__`` holds
    it:
the causes a straggler's lateness is judged on."""
    host, origin = trace.host, trace.origin_ns
    names = np.array([bool(_HOST_COLLECTIVE.match(x)) for x in trace.strings], bool)
    coll = np.flatnonzero(names[host.name]) if len(host) else np.empty(0, np.int64)
    coll = coll[host.depth[coll] == np.min(host.depth[coll])] if coll.size else coll
    coll = coll[np.argsort(host.ts[coll], kind="stable")]
    main = _step_thread(trace, steps)
    p2p_op = np.array([x in _P2P_OPS for x in trace.strings], bool)
    ops = np.flatnonzero(
        (host.cat == HostCat.OP) & (host.thread == main) & ~names[host.name] & ~p2p_op[host.name])
    work = host_ops.op_work(trace, host_ops.in_steps(trace, ops, steps), max(len(steps), 1))
    if ops.size:  # the outermost operators: under the step's annotation, not under another operator
        parent = host.parent[ops]
        # gloo's send range outlives its operator, so the trace nests the next operators under
        # "c10d::send": a point-to-point parent does not make an operator inner
        up = np.maximum(parent, 0)
        ops = ops[(parent < 0) | (host.cat[up] != HostCat.OP) | p2p_op[host.name[up]]]
    comp_s, comp_e = union(host.ts[ops], host.end[ops])
    n = max(len(steps), 1)
    compute_ns = _in_steps(comp_s, comp_e, steps)
    # the outermost operators: the CPU rank's "kernels"
    stepped = host_ops.in_steps(trace, ops, steps)
    # the step's time under neither an operator nor a collective in flight: the program's own
    # Python (a rank that waits for the others does so inside the collective's range)
    recv = np.array([x in _RECV_RANGES
                     or bool((m := _HOST_COLLECTIVE.match(x)) and m.group(1).startswith("recv"))
                     for x in trace.strings], bool)
    recv_i = np.flatnonzero(recv[host.name] & (host.thread == main)) if len(host) else np.empty(
        0, np.int64)
    p2p_i = np.flatnonzero(p2p_op[host.name]) if len(host) else np.empty(0, np.int64)
    either_s, either_e = union(np.concatenate((host.ts[ops], host.ts[coll], host.ts[p2p_i])),
                               np.concatenate((host.end[ops], host.end[coll], host.end[p2p_i])))
    covered_ns = _in_steps(either_s, either_e, steps)
    step_ns = float((steps.end - steps.start).sum()) if len(steps) else 0.0
    uncovered_ms = max(step_ns - covered_ns, 0.0) / n / 1e6
    # of that, the part inside a DataLoader's __next__ (a slow collate or decode) is the input
    # pipeline's: the ops inside it are compute, what no op covers is the loader's own Python
    loader = np.flatnonzero(dataloader_calls(trace) & (host.thread == main)) if len(host) else np.empty(0, np.int64)
    both_s, both_e = union(np.concatenate((either_s, host.ts[loader])),
                           np.concatenate((either_e, host.end[loader])))
    loader_ms = min(max(_in_steps(both_s, both_e, steps) - covered_ns, 0.0) / n / 1e6, uncovered_ms)
    idle_by_cause = {"input-pipeline": round(loader_ms, 6),
                     "host-work": round(uncovered_ms - loader_ms, 6)}
    out = []
    # the backward of micro-batch j waits for its collectives before it returns (the reducer's
    # finalize): a collective's range starts inside the pass that issued it
    passes = pass_starts(trace, main)
    for seq, i in enumerate(coll.tolist()):
        s, e = int(host.ts[i]), int(host.end[i])
        m = _HOST_COLLECTIVE.match(trace.strings[int(host.name[i])])
        op = _OP_NAMES.get(m.group(1), "collective") if m else "collective"
        out.append(Collective(op, seq, 0, s + origin, e + origin, int(host.thread[i]), "",
                              _step_of(steps.start, steps.end, s), _overlap(comp_s, comp_e, s, e),
                              m.group(1) if m else "", micro_of(passes, steps.start, steps.end, s)))
    comm_s, comm_e = union(host.ts[coll], host.end[coll])
    return RankSummary(
        rank=rank,
        source=trace.source,
        gpu="",
        step_start=tuple(int(x) + origin for x in steps.start),
        step_end=tuple(int(x) + origin for x in steps.end),
        busy_ms=compute_ns / n / 1e6,
        compute_ms=compute_ns / n / 1e6,
        idle_ms=max(step_ns / n / 1e6 - compute_ns / n / 1e6, 0.0),
        idle_by_cause={k: v for k, v in idle_by_cause.items() if v > 0},
        collectives=tuple(out),
        kernel_ms=host_ops.op_ms(trace, stepped, n),
        kernels_per_step=len(stepped) / n,
        timeline_step=len(steps) // 2 if len(steps) else -1,
        timeline=_timeline(steps, comp_s, comp_e, comm_s, comm_e, origin),
        env=_env_facts(env or {}),
        **_p2p_host(recv_i, trace, steps),
        transfers=_host_transfers(trace, steps, main),
        backward_passes=per_step(passes, steps.start, steps.end),
        work_flops=work[0],
        work_bytes=work[1],
    )


def _p2p_host(recv_i: np.ndarray, trace: Trace, steps: Steps) -> dict[str, Any]:
    """A CPU rank's time blocked receiving: gloo runs a recv partly inside the "c10d::recv_"
    operator and partly inside the "gloo:recv" range that follows it (either may hold the wait),
    both on the thread that ran the steps; their union, per step."""
    host = trace.host
    rs, re_ = union(host.ts[recv_i], host.end[recv_i])
    wait = tuple(clip_total(rs, re_, int(s), int(e)) / 1e6 for s, e in zip(steps.start, steps.end))
    named = [_HOST_COLLECTIVE.match(x) for x in trace.strings]
    kind = np.array([m.group(1)[:4] if m and m.group(1)[:4] in ("send", "recv") else ""
                     for m in named])
    main = _step_thread(trace, steps)
    counts = {"send": 0, "recv": 0}
    for i in np.flatnonzero((kind[host.name] != "") & (host.thread == main)).tolist():
        if _step_of(steps.start, steps.end, int(host.ts[i])) >= 0:
            counts[str(kind[int(host.name[i])])] += 1
    return {"recv_wait_ms": wait if counts["recv"] else (), "p2p_recvs": counts["recv"],
            "p2p_sends": counts["send"]}


def _host_transfers(trace: Trace, steps: Steps, main: int) -> tuple[Transfer, ...]:
    """A CPU rank's messages from the c10d operators on the thread that ran the steps: their
    "Concrete Inputs" are (tensors, group, peer, tag) and "Input Dims" the tensor's shape. A send
    starts at its operator's start; a recv ends where the later of its operator and the
    "gloo:recv" range that follows it (the wait on its work) ends."""
    host = trace.host
    if not len(host):
        return ()
    kind = np.array([1 if x == "c10d::send" else 2 if x in _RECV_RANGES else 3
                     if x == "gloo:recv" else 0
                     for x in trace.strings], np.int8)[host.name]
    on_main = host.thread == main
    ops = np.flatnonzero(on_main & ((kind == 1) | (kind == 2)))
    ops = ops[np.argsort(host.ts[ops], kind="stable")]
    waits = np.flatnonzero(on_main & (kind == 3))
    waits = waits[np.argsort(host.ts[waits], kind="stable")]
    origin, out = trace.origin_ns, []
    for n, i in enumerate(ops.tolist()):
        peer, nelems = _p2p_args(host.raw_args[i])
        if peer < 0:
            continue
        ts, end = int(host.ts[i]), int(host.end[i])
        # the first gloo:recv range starting inside this recv, before the next operator
        if kind[i] == 2:
            nxt = int(host.ts[ops[n + 1]]) if n + 1 < len(ops) else np.iinfo(np.int64).max
            j = int(np.searchsorted(host.ts[waits], ts, side="left"))
            if j < len(waits) and int(host.ts[waits[j]]) < nxt:
                end = max(end, int(host.end[waits[j]]))
        out.append(Transfer("send" if kind[i] == 1 else "recv", peer, nelems,
                            (ts if kind[i] == 1 else end) + origin,
                            _step_of(steps.start, steps.end, ts)))
    return tuple(out)


def _p2p_args(raw: Any) -> tuple[int, int]:
    """(peer, element count) of a c10d::send / c10d::recv_ operator; (-1, 0) when unrecorded."""
    try:
        args = msgspec.json.decode(raw)
    except (msgspec.DecodeError, TypeError):
        return -1, 0
    inputs = args.get("Concrete Inputs") if isinstance(args, dict) else None
    if not isinstance(inputs, list) or len(inputs) < 3 or not str(inputs[2]).isdigit():
        return -1, 0
    dims = args.get("Input Dims")
    shape = dims[0][0] if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] else None
    ok = isinstance(shape, list) and all(isinstance(x, int) for x in shape)
    return int(inputs[2]), int(np.prod(shape)) if ok else 0


def _device_transfers(a: Analysis, colls: tuple[Collective, ...]) -> tuple[Transfer, ...]:
    """A GPU rank's send / recv kernels: a send kernel's start, a recv kernel's end. The peer is the
    "Rank" that record_param_comms holds for a send / recv (ProcessGroupNCCL passes the peer's
    group rank there, the own rank for a collective), mapped through "Process Group Ranks"."""
    t, d = a.trace, a.trace.device
    idx = np.flatnonzero(d.kind == Kind.NCCL)
    idx = idx[np.argsort(d.ts[idx], kind="stable")]
    out = []
    for c, i in zip(colls, idx.tolist()):
        if c.op != "p2p" or c.name not in ("send", "recv") or int(d.op[i]) < 0:
            continue
        try:
            args = msgspec.json.decode(t.host.raw_args[int(d.op[i])])
        except (msgspec.DecodeError, TypeError):
            continue
        peer = args.get("Rank") if isinstance(args, dict) else None
        if not isinstance(peer, int) or isinstance(peer, bool) or peer < 0:
            continue
        try:
            group = [int(x) for x in str(args.get("Process Group Ranks",
                                                  "")).strip("[]").split(",")]
        except ValueError:
            group = []
        peer = group[peer] if peer < len(group) else peer
        nelems = max(_int(args.get("In msg nelems")), _int(args.get("Out msg nelems")))
        out.append(Transfer(c.name, peer, nelems, c.start if c.name == "send" else c.end, c.step))
    return tuple(out)


def _p2p_device(colls: tuple[Collective, ...], n: int) -> dict[str, Any]:
    """A GPU rank's receive kernels, each counted where no compute kernel runs beside it: the
    stream waits for the neighbour's data there."""
    wait = [0.0] * n
    for c in colls:
        if c.is_recv and 0 <= c.step < n:
            wait[c.step] += (c.dur - sum(e - s for s, e in c.overlap)) / 1e6
    inside = [c for c in colls if c.op == "p2p" and 0 <= c.step < n]
    recvs = sum(c.is_recv for c in inside)
    return {"recv_wait_ms": tuple(wait) if recvs else (), "p2p_recvs": recvs,
            "p2p_sends": sum(c.name.startswith("send") for c in inside)}


def _step_thread(trace: Trace, steps: Steps) -> int:
    """The thread that ran the steps: the one holding the ProfilerStep ranges, else the one with the
    most operator time."""
    host = trace.host
    marks = np.flatnonzero(trace.names_matching(lambda x: x.startswith("ProfilerStep#"))[host.name])
    if marks.size:
        return int(np.bincount(host.thread[marks]).argmax())
    ops = np.flatnonzero(host.cat == HostCat.OP)
    if not ops.size:
        return 0
    return int(np.bincount(host.thread[ops], weights=(host.end - host.ts)[ops]).argmax())


def _in_steps(s: np.ndarray, e: np.ndarray, steps: Steps) -> int:
    """ns of the intervals (s, e) inside the steps."""
    return sum(clip_total(s, e, int(lo), int(hi)) for lo, hi in zip(steps.start, steps.end))


def _overlap(comp_s: np.ndarray, comp_e: np.ndarray, s: int, e: int) -> tuple[tuple[int, int], ...]:
    """The compute intervals beside a collective [s, e), as offsets from its start."""
    lo = int(np.searchsorted(comp_e, s, side="right"))
    hi = int(np.searchsorted(comp_s, e, side="left"))
    return tuple((max(int(cs), s) - s, min(int(ce), e) - s) for cs, ce in zip(comp_s[lo:hi],
                                                                              comp_e[lo:hi]))


def _collectives(a: Analysis, comp_s: np.ndarray, comp_e: np.ndarray,
                 micro: Callable[[int], int]) -> tuple[Collective, ...]:
    """``micro``: the backward pass of its step a host time falls in (ranks/backward.py)."""
    t, d = a.trace, a.trace.device
    idx = np.flatnonzero(d.kind == Kind.NCCL)
    idx = idx[np.argsort(d.ts[idx], kind="stable")]
    origin = t.origin_ns
    out = []
    for seq, i in enumerate(idx.tolist()):
        s, e = int(d.ts[i]), int(d.end[i])
        op, nbytes, group, name = _describe(t, i)
        step = _launch_step(a, i)
        launch = int(d.launch[i])
        launched = int(t.host.ts[launch]) if launch >= 0 else s
        out.append(Collective(op, seq, nbytes, s + origin, e + origin, int(d.stream[i]),
                              group, step, _overlap(comp_s, comp_e, s, e), name, micro(launched)))
    return tuple(out)


def _work(a: Analysis, mask: np.ndarray, n: int) -> tuple[float, float]:
    """FLOPs and bytes per step of the kernels in ``mask``, as much of each as lies in the steps."""
    r, d = a.roofline, a.trace.device
    if len(r.event_flops) != len(d):
        return 0.0, 0.0
    weight = np.divide(r.event_in_steps_ns, d.dur, out=np.zeros(len(d)), where=d.dur > 0) * mask
    return float((r.event_flops * weight).sum()) / n, float((r.event_bytes * weight).sum()) / n


def _launch_step(a: Analysis, i: int) -> int:
    """The step whose host launched collective kernel ``i``: -1 for one launched before the window
    (no launch recorded: the previous step's all-reduce still running when the profiler started)
    or outside every step. The GPU-aligned steps would count such a leftover in the first step on
    the rank that opened its window first, and match the ranks' collectives one place off (a healthy
    run called a straggler)."""
    d, steps = a.trace.device, a.steps
    launch = int(d.launch[i])
    if launch < 0:
        return -1 if a.trace.capabilities.launch_links else _step_of(steps.start, steps.end,
                                                                     int(d.ts[i]))
    if steps.host_start is None or steps.host_end is None:
        return _step_of(steps.start, steps.end, int(d.ts[i]))
    return _step_of(steps.host_start, steps.host_end, int(a.trace.host.ts[launch]))


def _step_of(starts: np.ndarray, ends: np.ndarray, ts: int) -> int:
    k = int(np.searchsorted(starts, ts, side="right")) - 1
    return k if k >= 0 and ts < ends[k] else -1


def _describe(t: Any, i: int) -> tuple[str, int, str, str]:
    """The collective's op, size and group: from the record_param_comms call around its launch
    (torch >= 2.1 records "Collective name", "In/Out msg nelems", "dtype", "Process Group Name"),
    else from the kernel's name with the size unknown."""
    kernel = t.string(int(t.device.name[i]))
    m = _KERNEL_OP.search(kernel)
    op = _KERNEL_OPS[m.group(1)] if m else "collective"
    # SendRecv: either way
    name = m.group(1).lower() if m and m.group(1) in ("Send", "Recv") else ""
    host = int(t.device.op[i])
    if host < 0:
        return op, 0, "", name
    try:
        args = msgspec.json.decode(t.host.raw_args[host])
    except (msgspec.DecodeError, TypeError):
        return op, 0, "", name
    if not isinstance(args, dict) or "Collective name" not in args:
        return op, 0, "", name
    name = str(args.get("Collective name"))
    op = _OP_NAMES.get(name, op)
    elems = max(_int(args.get("In msg nelems")), _int(args.get("Out msg nelems")))
    return op, elems * _DTYPE_BYTES.get(str(args.get("dtype")),
                                        0), str(args.get("Process Group Name", "")), name


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0


def _kernel_ms(a: Analysis, mask: np.ndarray, n: int) -> dict[str, float]:
    d = a.trace.device
    return host_ops.ms_by_name(a.trace, d.name[mask], (d.end - d.ts)[mask], n)


def _timeline(steps: Steps, comp_s: np.ndarray, comp_e: np.ndarray, comm_s: np.ndarray,
              comm_e: np.ndarray, origin: int) -> tuple[tuple[int, int, str], ...]:
    """The middle step's compute and communication as merged bars on the rank's clock."""
    if not len(steps):
        return ()
    k = len(steps) // 2
    lo, hi = int(steps.start[k]), int(steps.end[k])
    bars = _bars(comp_s, comp_e, lo, hi, "compute") + _bars(comm_s, comm_e, lo, hi, "comm")
    return tuple((s + origin, e + origin, kind) for s, e, kind in sorted(bars)[:MAX_TIMELINE_BARS])


def _bars(s: np.ndarray, e: np.ndarray, lo: int, hi: int, kind: str) -> list[tuple[int, int, str]]:
    keep = (e > lo) & (s < hi)
    s, e = np.clip(s[keep], lo, hi), np.clip(e[keep], lo, hi)
    bars: list[list[int]] = []
    for a, b in zip(s.tolist(), e.tolist()):
        if bars and a - bars[-1][1] < TIMELINE_MERGE_NS:
            bars[-1][1] = max(bars[-1][1], b)
        else:
            bars.append([a, b])
    return [(a, b, kind) for a, b in bars]


def _env_facts(env: dict[str, Any]) -> dict[str, Any]:
    """The env.json facts the straggler's cause is judged on; malformed values read as absent."""
    out: dict[str, Any] = {}
    for key in ("hostname", "world_size", "local_rank"):
        if isinstance(env.get(key), (str, int)) and not isinstance(env.get(key), bool):
            out[key] = env[key]
    window = env.get("window")
    if isinstance(window, dict) and all(isinstance(window.get(k), int)
                                        for k in ("first_step", "steps")):
        out["window"] = {"first_step": window["first_step"], "steps": window["steps"]}
    capture = env.get("capture")
    nvml = capture.get("nvml") if isinstance(capture, dict) else env.get("nvml")
    if isinstance(nvml, dict):
        for key in ("sm_clock_mhz_mean", "sm_clock_mhz_min", "sm_clock_mhz_max_supported",
                    "power_w_mean"):
            if isinstance(nvml.get(key), (int, float)):
                out[key] = float(nvml[key])
        reasons = nvml.get("throttle_reasons_seen")
        if isinstance(reasons, list):
            out["throttle_reasons_seen"] = [str(r) for r in reasons]
    return out
