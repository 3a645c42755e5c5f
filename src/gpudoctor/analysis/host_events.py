"""What a host event is, read from its name, category and thread: the threads that launch GPU work,
blocking syncs, allocator calls, a DataLoader fetching a batch, the optimizer's step, operators that
only keep books, and operator calls that set up for a new input shape.

Each classifier is a boolean mask over host events (``*_calls``, ``*_steps``) or over the string
table (``*_names``). The idle attribution (analysis/idle.py) labels the host's time with them; the
rules, the replay and the per-rank summary ask the same questions of the same events.
"""

from __future__ import annotations

import re

import numpy as np

from gpudoctor.analysis.intervals import contains, overlap_per_window, union
from gpudoctor.analysis.steps import Steps
from gpudoctor.core.arrays import distinct
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import HostCat, HostEvents, Trace

# A stretch of the launching threads inside no operator, launch or copy, longer than this, is host
# work (I/O, Python) rather than the interpreter's overhead between two operators. The longest
# such stretch between two ops of an eager 96-layer module loop (tests/data/launch_bound, H100,
# torch 2.11, profiled) was 0.33 ms; file writes and checkpoints take milliseconds.
HOST_WORK_MIN_NS = 1_000_000

_DATALOADER = re.compile(r"dataloader|dataloaderiter|_next_data|fetcher", re.IGNORECASE)
# Operators that only make views, allocate or keep autograd's books: they launch nothing on any
# device, so an op that launched nothing is host computation only when it is none of these.
_BOOKKEEPING = re.compile(
    r"^aten::(view|_?reshape|_reshape_alias|_unsafe_view|view_as|as_strided|slice|narrow|select|expand"
    r"|expand_as|permute|transpose|t|numpy_T|unsqueeze|squeeze|detach|alias|lift_fresh|unbind|split"
    r"|split_with_sizes|chunk|empty|empty_like|empty_strided|new_empty|new_empty_strided|resize_|set_"
    r"|resolve_conj|resolve_neg|real|imag|flatten|unflatten|movedim|diagonal"
    r"|_has_compatible_shallow_copy_type|requires_grad_|lift)$"
    r"|AccumulateGrad|^autograd::engine::evaluate_function: |Backward\d*$|^detach_?$"
)
SYNC_RUNTIME = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cuStreamSynchronize",
        "cuCtxSynchronize",
        "cuEventSynchronize",
        "cuMemcpyDtoH_v2",
    }
)
SYNC_OPS = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::nonzero",
        "aten::is_nonzero",
        "aten::equal",
        "aten::masked_select",
        "aten::_unique2",
        "aten::unique_consecutive",
        "aten::unique_dim",
    }
)
ALLOCATOR_CALLS = frozenset(
    {
        "cudaMalloc",
        "cudaFree",
        "cudaHostAlloc",
        "cudaMallocHost",
        "cudaFreeHost",
        "cudaHostRegister",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuMemCreate",
        "cuMemRelease",
        "cuMemMap",
        "cuMemUnmap",
        "cuMemAddressReserve",
        "cuMemAddressFree",
        "cuMemSetAccess",
    }
)


def launch_thread(trace: Trace) -> int:
    """The host thread that launched most GPU work (-1 when none did)."""
    counts = _launch_counts(trace)
    return int(counts.argmax()) if counts.size and counts.max() > 0 else -1


def launch_threads(trace: Trace) -> np.ndarray:
    """Threads that launched at least 1% of the GPU work (the main and the autograd threads)."""
    counts = _launch_counts(trace)
    if counts.size == 0 or counts.max() == 0:
        return np.empty(0, np.int32)
    return np.flatnonzero(counts >= max(1, 0.01 * counts.sum())).astype(np.int32)


def _launch_counts(trace: Trace) -> np.ndarray:
    launches = trace.device.launch
    launches = launches[launches >= 0]
    return np.bincount(trace.host.thread[launches], minlength=len(trace.threads))


def sync_calls(trace: Trace) -> np.ndarray:
    """Host events that block on the GPU: sync runtime calls, the ops that imply one, and the
    calls that copy to pageable host memory (``.cpu()``, ``.tolist()``): such a copy waits for
    everything queued before it, and its fix is reading back less often, not pinning."""
    host = trace.host
    runtime = host.cat >= HostCat.RUNTIME
    mask = trace.names_matching(lambda s: s in SYNC_RUNTIME)[host.name] & runtime
    dev = trace.device
    readback = (dev.kind == int(Kind.MEMCPY_DTOH_PAGEABLE)) & (dev.launch >= 0)
    mask[dev.launch[readback]] = True
    ops = trace.names_matching(lambda s: s in SYNC_OPS)[host.name] & (host.cat == HostCat.OP)
    cuda = trace.names_matching(lambda s: s.startswith("cu"))[host.name] & runtime
    if cuda.any():
        # an operator that reads a value waits only where it made a blocking call or copied from
        # the GPU: ``.item()`` on a CPU tensor (a non-fused optimizer's step counts, ``torch.optim``
        # ``_get_value``) does neither, and the GPU's idle around it is the host's pace, not a sync.
        # Another runtime's calls (ROCm's hip*) are not read here: its reads keep their names
        download = np.isin(dev.kind, (int(Kind.MEMCPY_DTOH_PAGEABLE), int(Kind.MEMCPY_DTOH_PINNED)))
        evidence = np.concatenate([np.flatnonzero(mask),
                                   dev.launch[download & (dev.launch >= 0)]])
        ops &= _enclosing_ops(host, evidence)
    return mask | ops


def _enclosing_ops(host: HostEvents, events: np.ndarray) -> np.ndarray:
    """Mask over host events: the operators that enclose any of ``events``, at any depth."""
    out = np.zeros(len(host), bool)
    op = host.op[events]
    while (op := op[op >= 0]).size:
        op = distinct(op)
        op = op[~out[op]]
        out[op] = True
        op = host.op[op]
    return out


def bookkeeping_names(trace: Trace) -> np.ndarray:
    """Mask over the string table: operators that only make views, allocate or keep autograd's
    books (they launch nothing on any device, and are no host computation either)."""
    return trace.names_matching(lambda s: _BOOKKEEPING.search(s) is not None)


def dataloader_calls(trace: Trace) -> np.ndarray:
    """Host events of a DataLoader fetching the next batch
    (``enumerate(DataLoader)#...__next__``)."""
    return trace.names_matching(lambda s: bool(_DATALOADER.search(s))
                                and "pin_memory" not in s)[trace.host.name]


def fetched_by_workers(trace: Trace, events: np.ndarray) -> bool:
    """Whether any of host ``events`` (indices) is a DataLoader fetching from worker processes
    (``enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__``)."""
    names = trace.names_matching(lambda s: "MultiProcessingDataLoaderIter" in s)
    return bool(names[trace.host.name[events]].any())


def optimizer_steps(trace: Trace) -> np.ndarray:
    """Host annotations of an optimizer's step (``Optimizer.step#AdamW.step``): its dispatch."""
    host = trace.host
    named = trace.names_matching(lambda s: s.startswith("Optimizer.step#"))
    return named[host.name] & (host.cat == HostCat.ANNOTATION)


def optimizer_bookkeeping(trace: Trace) -> np.ndarray:
    """Host annotations of an optimizer's step and zero_grad (``Optimizer.zero_grad#AdamW.zero_grad``):
    host work that grows with the number of parameters."""
    host = trace.host
    zero_grad = trace.names_matching(lambda s: s.startswith("Optimizer.zero_grad#"))[host.name]
    return optimizer_steps(trace) | (zero_grad & (host.cat == HostCat.ANNOTATION))


# The autograd engine records each backward node it runs under this name, then ": " and the node's.
AUTOGRAD_NODE = "autograd::engine::evaluate_function"


def autograd_nodes(trace: Trace) -> np.ndarray:
    """Host events of the autograd engine running a backward node."""
    return trace.names_matching(lambda s: s.startswith(AUTOGRAD_NODE))[trace.host.name]


def ran_backward(trace: Trace) -> bool:
    """Whether the trace ran a backward (the autograd engine recorded a node)."""
    return bool(autograd_nodes(trace).any())


def parameter_updates(trace: Trace) -> np.ndarray:
    """Host events of the autograd engine accumulating a parameter's gradient: one per parameter
    and backward."""
    return trace.names_matching(
        lambda s: s.startswith(f"{AUTOGRAD_NODE}: torch::autograd::AccumulateGrad"))[trace.host.name]


_SEQUENCE = re.compile(rb'"Sequence number": *(\d+)')


def sequence_numbers(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """The autograd sequence number the profiler recorded with each of these host events (-1 where
    none): a forward operator and the backward node it made share one."""
    out = np.full(rows.size, -1, np.int64)
    for k, text in enumerate(trace.host.raw_args_at(rows.tolist())):
        found = _SEQUENCE.search(text)
        if found:
            out[k] = int(found.group(1))
    return out


def backward_nodes_of(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """The autograd engine's nodes (``autograd::engine::evaluate_function: CatBackward0``) that
    ran the backward of these forward operators, matched by sequence number; empty where the trace
    recorded none."""
    if ops.size == 0:
        return np.empty(0, np.int64)
    wanted = sequence_numbers(trace, ops)
    wanted = wanted[wanted >= 0]
    host = trace.host
    nodes = np.flatnonzero(autograd_nodes(trace) & (host.cat == HostCat.OP))
    if wanted.size == 0 or nodes.size == 0:
        return np.empty(0, np.int64)
    return nodes[np.isin(sequence_numbers(trace, nodes), wanted)]


def allocator_calls(trace: Trace) -> np.ndarray:
    """Host runtime / driver calls that allocate or free device (or pinned) memory."""
    host = trace.host
    return trace.names_matching(lambda s: s in ALLOCATOR_CALLS)[host.name] & (
        host.cat >= HostCat.RUNTIME)


def event_waits(trace: Trace) -> np.ndarray:
    """Host mask of cudaEventSynchronize calls: the host timing GPU work it launched."""
    host = trace.host
    return trace.names_matching(lambda s: s == "cudaEventSynchronize")[host.name] & (
        host.cat >= HostCat.RUNTIME)


# A call is an operator's setup when, less the time it spent blocked in cudaMalloc / cudaFree or a
# sync (theirs, not the setup's), it takes at least SETUP_MIN_NS and either SETUP_TIMES_TYPICAL
# times the lower quartile of the same operator's calls (the first call on a new shape, the others
# reusing its plan) or SETUP_TIMES_GPU times the GPU time of the kernels it launched (every call on
# a new shape: the host, not the GPU, is busy), and such calls come on at least half the steps with
# at least two different input shapes. The thresholds separate the two twins that showed the
# pattern, a plan built per sequence length (cuDNN attention, cuBLASLt choosing a kernel) and
# cuDNN's autotuner on a new image size every step (too many setup calls for a quartile to be
# typical): benchmarks/BENCHMARKS-twins.md "Evidence moved from the source: analysis". A call that
# waits on CUDA events inside itself this many times times its own kernels: an autotuner trying
# candidates (cuDNN's under cudnn.benchmark waits 10 times a forward, 20 a backward). A plain
# operator, a compiled region included, never waits on an event inside itself.
SETUP_MIN_TIMED = 4
SETUP_MIN_NS = 2_000_000
SETUP_TIMES_TYPICAL = 20.0
SETUP_TIMES_GPU = 5.0


def setup_calls(trace: Trace, steps: Steps) -> np.ndarray:
    """Host mask of operator calls that set the operator up for a new input shape (see above)."""
    host = trace.host
    mask = np.zeros(len(host), bool)
    if not len(steps) or not trace.capabilities.cpu_ops:
        return mask
    ops = np.flatnonzero((host.cat == HostCat.OP) & contains(steps.start, steps.end, host.ts))
    dur = host.end[ops] - host.ts[ops]
    cand = np.flatnonzero(dur >= SETUP_MIN_NS)
    if cand.size == 0:
        return mask
    names, inverse = np.unique(host.name[ops], return_inverse=True)
    typical = _first_quartiles(dur, inverse, len(names))
    own = dur[cand] - _nested_ns(trace, ops[cand],
                                 np.flatnonzero(allocator_calls(trace) | sync_calls(trace)))
    gpu = _gpu_ns_launched_inside(trace, ops[cand])
    timed = _nested_count(trace, ops[cand], np.flatnonzero(event_waits(trace)))
    slow = np.zeros(len(ops), bool)
    slow[cand] = ((own >= SETUP_MIN_NS) & ((own >= SETUP_TIMES_TYPICAL * typical[inverse[cand]])
                                           | (own >= SETUP_TIMES_GPU * gpu))) | (
                                               timed >= SETUP_MIN_TIMED)
    for k in distinct(inverse[slow]).tolist():
        calls = ops[slow & (inverse == k)]
        step_of = np.searchsorted(steps.start, host.ts[calls], side="right") - 1
        shapes = {repr(trace.input_dims(int(i))) for i in calls.tolist()}
        if len(distinct(step_of)) * 2 >= len(steps) and len(shapes) >= 2:
            mask[calls] = True
    return mask


def _first_quartiles(values: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """``np.percentile(values[group == k], 25)`` for every group k, bit for bit, from one sort
    (a percentile per group costs a pass over every value per group: n x groups). Each group
    must hold a value. numpy's default ("linear") method: the value at (m - 1) / 4 in the group's
    sorted m values, interpolated as numpy's _lerp does."""
    order = np.lexsort((values, group))
    ranked = values[order].astype(np.float64)
    count = np.bincount(group, minlength=n_groups)
    first = np.concatenate(([0], np.cumsum(count)[:-1]))
    # numpy: n * q + (alpha + q * (1 - alpha - beta)) - 1, alpha = beta = 1
    virtual = count * 0.25 - 0.25
    below = np.floor(virtual)
    gamma = virtual - below
    a = ranked[first + below.astype(np.int64)]
    b = ranked[first + np.minimum(below.astype(np.int64) + 1, count - 1)]
    diff = b - a
    return np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)


def _gpu_ns_launched_inside(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """For each op, the device time of the GPU events launched from inside it (its thread)."""
    host, dev = trace.host, trace.device
    out = np.zeros(len(ops), np.int64)
    launched = np.flatnonzero(dev.launch >= 0)
    if launched.size == 0:
        return out
    at = dev.launch[launched]
    for t in distinct(host.thread[ops]).tolist():
        mine = launched[host.thread[at] == t]
        order = np.argsort(host.ts[dev.launch[mine]], kind="stable")
        ts = host.ts[dev.launch[mine]][order]
        cum = np.concatenate(([0], np.cumsum((dev.end - dev.ts)[mine][order])))
        sel = host.thread[ops] == t
        lo = np.searchsorted(ts, host.ts[ops[sel]], side="left")
        hi = np.searchsorted(ts, host.end[ops[sel]], side="right")
        out[sel] = cum[hi] - cum[lo]
    return out


def _nested_count(trace: Trace, ops: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """For each op, how many of ``calls`` (host events) start inside it on its thread."""
    host = trace.host
    out = np.zeros(len(ops), np.int64)
    for t in distinct(host.thread[ops]).tolist():
        starts = np.sort(host.ts[calls[host.thread[calls] == t]])
        sel = host.thread[ops] == t
        out[sel] = (np.searchsorted(starts, host.end[ops[sel]], side="right")
                    - np.searchsorted(starts, host.ts[ops[sel]], side="left"))
    return out


def _nested_ns(trace: Trace, ops: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """For each op, the ns of ``calls`` (host events) that lie inside it on its thread."""
    host = trace.host
    out = np.zeros(len(ops), np.int64)
    for t in distinct(host.thread[ops]).tolist():
        mine = calls[host.thread[calls] == t]
        s, e = union(host.ts[mine], host.end[mine])
        sel = host.thread[ops] == t
        out[sel] = overlap_per_window(s, e, host.ts[ops[sel]], host.end[ops[sel]])
    return out


__all__ = [
    "ALLOCATOR_CALLS", "HOST_WORK_MIN_NS", "SYNC_OPS", "SYNC_RUNTIME", "allocator_calls",
    "bookkeeping_names", "dataloader_calls", "event_waits", "launch_thread", "launch_threads",
    "optimizer_steps", "setup_calls", "sync_calls",
]
