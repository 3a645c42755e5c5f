"""per-sample-loop: a Python loop issues one matrix-vector product, or the same few operators, per
sample / node.

Node-by-node loops turn one GEMM into thousands of GEMVs that starve the tensor cores and pay a
launch each. Detected as many identical matrix-vector shaped (one side of 1) matmuls per step,
issued back to back (a few kernels apart), outside CUDA graphs. A loop with no matrix-vector product
(``for i in range(B): loss += f(x[i])``) is found from its slicing instead (``sliced_anchors``): a
select / slice of the same tensor at least MIN_REPEATS_PER_STEP times a step, a few operators apart,
taking a different row each time (its recorded arguments say which), whose iteration runs on the
GPU and multiplies no matrices of several rows (an RNN cell stepping over time does: that is a
recurrence, launch-bound's to price). A loop over groups of rows (``dispatch_anchors``: a mixture
of experts sending each token to its expert, ``rows = (choice == e).nonzero()``, then the
expert's layers on ``x[rows]`` and ``out.index_add_(0, rows, y)``) is found from its mask reads,
one repeated a dozen operators apart; its products are of many rows (an expert's tokens), but
every iteration reads the same input and only adds into the output, so the groups batch: one
grouped or batched GEMM per layer, and no count read on the host. Not a per-sample loop: a layer
with one output feature (a regression head's N = 1, called once per forward, a whole forward and
backward apart, as LBFGS's closure calls it), dot products (L-BFGS's two-loop recursion), and
``generate()``'s decode, whose tokens depend on each other and cannot be batched (its cost is the
launch-bound finding's).

In training the loop has a backward too: each iteration's ops leave autograd nodes
(``MvBackward0``, ``IndexBackward0``...) that the backward runs one by one, on the autograd
thread. Backward nodes repeated at least half as often per step as the loop iterates belong to it;
their host time is priced with the forward span (the batched fix has one node per op).

Priced by replaying the step with the loop vectorized (``edit``): the loop's host span keeps one
average iteration's share, the stack or cat that gathers the samples goes, the kept iteration's
matrix-vector products become GEMMs of every sample's rows at the measured grid's time. The
autograd engine's own time before the backward's first node and after its last (it walks the graph,
then frees it), and the stretch before the backward's seed (where a program that rebinds ``loss``
frees the last step's graph), grow with the graph's nodes, and lose the share of them the fix
removes (benchmarks/BENCHMARKS-twins.md "The last step's graph, freed before the backward's
seed"). Where the graph cannot be built, the formula: the host work the fix removes, every
iteration but one of the operators the loop issues (the batched call is one iteration's operators
on bigger tensors). On a step the host holds, each
operator costs the host about the same with or without the loop (Python, the dispatcher, a
launch), so the step after the fix is the step's time in proportion to the operators left: those
outside the loop plus one iteration's. The loop's operators are the run of top-level operators
around the matrix-vector products that repeats with the iteration's period (``_loop_runs``). The
step cannot go below the GPU's work after the fix (``STEP_FLOOR_AFTER_FIX``): the kernels outside
the loop and the batched GEMMs. Where the trace records no host operators, the saving is the loop's
span on the GPU timeline (kernels plus the idle between them) minus one batched GEMM of the same
FLOPs.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import sync_calls
from gpudoctor.analysis.roofline import DTYPES
from gpudoctor.core.arrays import difference, distinct, median
from gpudoctor.core.finding import STEP_FLOOR_AFTER_FIX, Evidence, Finding, Fix, make_finding
from gpudoctor.hardware.gemm_rate import KERNEL_FLOOR_S, gemm_seconds
from gpudoctor.replay.edits import EMPTY_I, Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import (
    GATHER_OPS,
    GEMM_EFFICIENCY,
    kernel_names_of_events,
    op_names_of_events,
    sources_of_events,
    sources_of_host,
    top_names,
)
from gpudoctor.rules.shared import (
    MAX_VECTOR_DIM,
    MIN_REPEATS_PER_STEP,
    loop_groups,
    ops_removed_ms,
    step_of,
    step_ops,
)
from gpudoctor.trace.kernels import MATRIX_KINDS_FOR_ATTENTION
from gpudoctor.trace.model import HostCat

ID = "per-sample-loop"
MIN_BATCHED_NS = 10_000
_BACKWARD_NODE = re.compile(
    r"^autograd::engine::evaluate_function: (?!torch::autograd::AccumulateGrad)")
# An iteration's operators repeat in the same order: a period holds when this share of the loop's
# operators equals the one a period later (a branch taken in a few iterations does not break it).
PERIOD_MATCH = 0.95
MAX_PERIOD_OPS = 512  # operators in one iteration, at most, searched for
# A loop over a tensor's rows slices it once per iteration (``x[i]``: aten::select; ``x[i:i + 1]``:
# aten::slice), with the iteration's few operators between two slices.
SLICE_OPS = frozenset({"aten::select", "aten::slice", "aten::narrow"})
MAX_OPS_BETWEEN_SLICES = 16
SEED_OP = "aten::ones_like"  # the gradient a scalar loss's backward() starts from
GPU_OPS_SHARE = 0.5  # more than this share of an iteration's other operators launch GPU work
# A loop over groups (a mixture of experts' dispatch, a loss per class) finds each group's rows
# from a mask (``(choice == e).nonzero()``, ``torch.where(mask)``): the host reads the count, so
# every iteration waits for the GPU, gathers the rows, runs the group's work on them and adds the
# results back into place (``index_add_``). An iteration costs a wait and a dozen operators or more:
# a few groups a step already make the loop the step's (tests/test_dispatch_loop.py).
DISPATCH_OPS = frozenset({"aten::nonzero"})
SCATTER_OPS = frozenset({"aten::index_add", "aten::index_add_", "aten::index_put",
                         "aten::index_put_", "aten::index_copy", "aten::index_copy_",
                         "aten::scatter_add", "aten::scatter_add_", "aten::index_reduce",
                         "aten::index_reduce_", "aten::masked_scatter", "aten::masked_scatter_"})
MIN_DISPATCHES_PER_STEP = 8
MAX_OPS_PER_DISPATCH = 64
RUN_GAP_GROWTH = 1.25


def check(a: Analysis) -> Finding | None:
    if a.step_source == "generate-call":
        return None
    groups = loop_groups(a)
    if not groups:
        sliced = _check_sliced(a)
        return sliced if sliced is not None else _check_dispatch(a)
    rf = a.roofline
    n = max(len(a.steps), 1)
    idx = np.sort(np.concatenate(groups))
    span_ns = _span_per_step(a, idx)
    iterations = idx.size / n / len(groups)
    backward_ns = _backward_of_loop_ns(a, iterations)
    kernel_ns = float(rf.event_in_steps_ns[idx].sum())
    flops = float(rf.event_flops[idx].sum())
    batched_ns = max(flops / (a.ceilings.best_matrix_flops * GEMM_EFFICIENCY) * 1e9,
                     MIN_BATCHED_NS * n * len(groups))
    if backward_ns > 0:  # the batched backward: about twice the forward's FLOPs
        batched_ns *= 3
    saving = max(span_ns + backward_ns - batched_ns, 0.0) / 1e6 / n
    ops = step_ops(a)
    removed = _ops_removed(a, ops, groups, _looped_nodes(a, iterations))
    numbers: dict[str, float] = {}
    if removed > 0:
        # the host's time in proportion to the operators the fix removes (rules/shared.py);
        # rules/calibrate.py "step-share" scales the rest to the unprofiled step
        gpu_after = max(a.breakdown.busy_ms - _busy_in_span_ns(a, idx) / 1e6 / n, 0.0) + batched_ns / 1e6 / n
        # never below the GPU's work after the fix (unprofiled too: STEP_FLOOR_AFTER_FIX)
        saving = min(ops_removed_ms(a, ops, removed), max(a.step_ms - gpu_after, 0.0))
        numbers = {"ops_per_step": round(ops.size / n, 1),
                   "loop_ops_removed_per_step": round(removed / n, 1),
                   STEP_FLOOR_AFTER_FIX: round(gpu_after, 3)}
    calls = idx.size / n
    return make_finding(
        ID,
        "A per-sample loop does matrix-vector work one call at a time",
        a.step_ms,
        saving,
        f"{calls:.0f} matrix-vector products per step ({len(groups)} distinct shapes) run one "
        f"by one: the loop spans {span_ns / 1e6 / n:.2f} ms per step of which "
        f"{kernel_ns / 1e6 / n:.2f} ms is kernels"
        + (f", and its backward {backward_ns / 1e6 / n:.2f} ms more." if backward_ns > 0 else "."),
        Evidence(
            numbers={
                "matvec_calls_per_step": round(calls, 1),
                "loop_span_ms_per_step": round(span_ns / 1e6 / n, 3),
                "loop_backward_ms_per_step": round(backward_ns / 1e6 / n, 3),
                "kernel_ms_per_step": round(kernel_ns / 1e6 / n, 3),
                "batched_estimate_ms_per_step": round(batched_ns / 1e6 / n, 3),
                "achieved_tflops": round(flops / (kernel_ns / 1e9) / 1e12, 3) if kernel_ns else 0.0,
                **numbers,
            },
            ops=op_names_of_events(a.trace, idx),
            kernels=kernel_names_of_events(a.trace, idx),
            sources=sources_of_events(a.trace, idx),
        ),
        (
            Fix("Stack the samples / nodes and do one GEMM per layer",
                "Y = X @ W.T          # X: [N, d_in] instead of: for x in X: y = W @ x"),
            Fix("Vectorize the per-sample function", "batched = torch.vmap(per_sample_fn)(X)"),
            Fix("For graph-structured work, batch by level or use sparse / segment ops",
                "out = torch.sparse.mm(adjacency, H @ W)"),
        ),
        wrong_fix="CUDA streams or more threads will not help: each product is too small to fill "
                  "the GPU.",
        idle_ms=max(span_ns - kernel_ns, 0.0) / 1e6 / n,
    )


def edit(a: Analysis, finding: Finding) -> Edit | None:
    """The loop vectorized: the host keeps an average iteration's share of the loop's span (its
    operators and the Python between them, forward and backward), every iteration but the first
    leaves the GPU (the kernels its operators launched), and so does the stack gathering the
    samples; the kept iteration's matrix-vector products become one GEMM each, every sample's rows
    stacked, at the measured grid's time for that shape (hardware/gemm_rate.py). The kept
    iteration's other kernels (bias adds, activations) keep their time: on a batch this small it is
    their latency."""
    if a.step_source == "generate-call":
        return None
    groups = loop_groups(a)
    if not groups:
        sliced = _edit_sliced(a)
        return sliced if sliced is not None else _edit_dispatch(a)
    n = max(len(a.steps), 1)
    idx = np.concatenate(groups)
    iterations = idx.size / n / len(groups)
    ops = step_ops(a)
    loops = _loops(a, ops, groups, _looped_nodes(a, iterations))
    if not loops:
        return None
    removal = _removal(a, ops, loops)
    kept = difference(idx, removal.device)
    return Edit(device=kept.astype(np.int64), device_ns=_stacked_ns(a, kept, iterations),
                device_removed=removal.device, host_removed_s=removal.start,
                host_removed_e=removal.end, host_share=removal.share, calls_removed=removal.calls,
                note=f"{removal.ops.size / n:.0f} loop operators a step removed; "
                     f"{kept.size / n:.0f} matrix-vector products batched {iterations:.0f} "
                     "samples each")


class _Removal(NamedTuple):
    """What vectorizing loops takes out of the step: host operators, the host spans they lose
    (``share`` of each), the device events those operators launched and their launch calls."""

    ops: np.ndarray
    start: np.ndarray
    end: np.ndarray
    share: np.ndarray
    device: np.ndarray
    calls: np.ndarray


def _removal(a: Analysis, ops: np.ndarray,
             loops: list[tuple[np.ndarray, int, int, int]]) -> _Removal:
    """Every iteration but the first of each loop (of the step operators ``ops``), the stack
    gathering its results, and the engine's share of the backward (``_engine_gaps``)."""
    host, dev = a.trace.host, a.trace.device
    removed_ops = np.concatenate([seq[first + period:end] for seq, first, end, period in loops])
    # the batched iteration costs the host what an average iteration did (the first one also
    # carries the loop's setup): the loop's span loses the share of its iterations that goes
    loop_start = np.array([host.ts[seq[first]] for seq, first, _end, _period in loops], np.int64)
    loop_end = np.array([host.end[seq[first:end]].max()
                         for seq, first, end, _period in loops], np.int64)
    share = np.array([(end - first - period) / (end - first) for _seq, first, end, period in loops])
    # the stack / cat that gathers the per-sample results right after the loop goes too: the
    # batched call's result is already stacked
    gathers = np.array([seq[end] for seq, _first, end, _period in loops
                        if end < seq.size
                        and a.trace.strings[host.name[seq[end]]] in GATHER_OPS], np.int64)
    removed_ops = np.concatenate([removed_ops, gathers])
    gone = np.flatnonzero(np.isin(_owners(a), removed_ops)).astype(np.int64)
    calls = dev.launch[gone]
    engine_s, engine_e, engine_share = _engine_gaps(a, ops, loops)
    return _Removal(removed_ops, np.concatenate([loop_start, host.ts[gathers], engine_s]),
                    np.concatenate([loop_end, host.end[gathers], engine_e]),
                    np.concatenate([share, np.ones(gathers.size), engine_share]), gone,
                    calls[calls >= 0].astype(np.int64))


def _engine_gaps(a: Analysis, ops: np.ndarray, loops: list[tuple[np.ndarray, int, int, int]],
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The autograd engine's own time around a backward the loop's nodes fill: the stretch with no
    operator before its first node (the engine walks the graph to count dependencies), after its
    last (the graph is freed before the program's thread goes on), and before the backward's seed
    (the last step's graph freed where the program rebinds ``loss``). All grow with the graph's
    nodes, so the fix takes from them the share of the backward's nodes it removes."""
    host, names = a.trace.host, a.trace.strings
    windows: list[tuple[int, int, float]] = []
    order_ts = host.ts[ops]

    def ended_before(k: int) -> int:  # where the step's operators before position k ended
        return int(host.end[ops[:k]].max())

    for loop in loops:
        if not _is_backward(a, loop):
            continue
        seq, first, end, period = loop
        share = (end - first - period) / seq.size
        before = int(np.searchsorted(order_ts, host.ts[seq[0]], side="left"))
        if before > 0:  # from the last operator before the backward's first node
            windows.append((ended_before(before), int(host.ts[seq[0]]), share))
        # the stretch before the backward's seed: where the program rebinds ``loss``, the last
        # step's graph, as large, is freed there
        if before > 1 and names[host.name[ops[before - 1]]] == SEED_OP:
            windows.append((ended_before(before - 1), int(host.ts[ops[before - 1]]), share))
        last_end = int(host.end[seq].max())
        after = int(np.searchsorted(order_ts, last_end, side="left"))
        if after < ops.size:  # to the first operator after its last node
            windows.append((last_end, int(order_ts[after]), share))
    kept = [w for w in windows if w[1] > w[0]]
    return (np.array([w[0] for w in kept], np.int64), np.array([w[1] for w in kept], np.int64),
            np.array([w[2] for w in kept], float))


def _is_backward(a: Analysis, loop: tuple[np.ndarray, int, int, int]) -> bool:
    """The loop is a run of the backward's nodes (its first operator is one)."""
    seq, first, _end, _period = loop
    return bool(_BACKWARD_NODE.match(a.trace.strings[a.trace.host.name[seq[first]]]))


def _stacked_ns(a: Analysis, idx: np.ndarray, samples: float) -> np.ndarray:
    """Each matrix-vector product's time with ``samples`` vectors stacked into a matrix: the grid's
    time for (wide side) x (samples) x K; never longer than ``samples`` products one by one."""
    rf, dev = a.roofline, a.trace.device
    out = dev.dur[idx].astype(float) * samples
    for j, op in enumerate(dev.op[idx].tolist()):
        cost = rf.op_costs.get(int(op))
        if cost is None or cost.gemm_shape is None:
            continue
        _b, m, n, k = cost.gemm_shape
        dtype = DTYPES[int(rf.event_dtype[idx[j]])]
        stacked = float(gemm_seconds(max(m, n), min(m, n) * samples, k, dtype, a.ceilings)) * 1e9
        out[j] = min(stacked, out[j])
    return out


def _ops_removed(a: Analysis, ops: np.ndarray, groups: list[np.ndarray],
                 looped_nodes: np.ndarray) -> int:
    """How many operators (of ``ops``, rules/shared.step_ops) the fix removes, summed over the
    steps."""
    return sum(end - first - period for _seq, first, end, period in _loops(a, ops, groups,
                                                                           looped_nodes))


def _loops(a: Analysis, ops: np.ndarray, groups: list[np.ndarray],
           looped_nodes: np.ndarray) -> list[tuple[np.ndarray, int, int, int]]:
    """Each loop of each step and thread as (its thread's operator sequence, first, end, period):
    the fix keeps one iteration's operators, ``seq[first:first + period]``, and removes ``seq[first
    + period:end]`` (the forward's matrix-vector products, the backward's repeated nodes)."""
    host, dev = a.trace.host, a.trace.device
    return _loops_around(a, ops, [host.outermost(dev.op[g]) for g in groups], looped_nodes)


def _loops_around(a: Analysis, ops: np.ndarray, anchors: list[np.ndarray],
                  looped_nodes: np.ndarray, separate: bool = False,
                  ) -> list[tuple[np.ndarray, int, int, int]]:
    """``_loops`` around host operators ``anchors`` (one array per repeated operator), and the
    backward's ``looped_nodes``. ``separate``: each run of an anchor's positions is its own loop
    (``_runs``), and a run that does not repeat a body of several operators is none (``_repeats``):
    a model's blocks each loop over their groups, with a norm and a router between one block's loop
    and the next; as one loop its period would be a whole block, and the fix would keep a block
    where it keeps an iteration of each."""
    host = a.trace.host
    anchors = [*anchors, looped_nodes] if looped_nodes.size else list(anchors)
    steps = step_of(a, host.ts[ops])
    out = []
    for step in distinct(steps).tolist():
        for thread in distinct(host.thread[ops]).tolist():
            seq = ops[(steps == step) & (host.thread[ops] == thread)]
            names = host.name[seq]
            positions = [np.flatnonzero(np.isin(seq, anchor)) for anchor in anchors]
            runs = [_loop_run(names, part)
                    for at in positions for part in (_runs(at) if separate else [at])]
            if separate:
                runs = [run for run in runs if _repeats(names, *run)]
            out.extend((seq, *run) for run in _merged(runs) if run[1] - run[0] > run[2])
    return out


def _runs(at: np.ndarray) -> list[np.ndarray]:
    """Positions split where their gap grows past RUN_GAP_GROWTH times the typical one (the
    backward's repeated nodes follow one another: their typical gap is one)."""
    if at.size < 2:
        return [at]
    gaps = np.diff(at)
    return np.split(at, np.flatnonzero(gaps > RUN_GAP_GROWTH * float(np.median(gaps))) + 1)


def _repeats(names: np.ndarray, first: int, end: int, period: int) -> bool:
    """The run holds two iterations or more of a body of several operators that repeats in order:
    a stray pair of the backward's nodes between two blocks' loops is no loop."""
    body = names[first:end]
    return (period >= 2 and body.size >= 2 * period
            and float(np.mean(body[period:] == body[:-period])) >= PERIOD_MATCH)


def _loop_run(names: np.ndarray, at: np.ndarray) -> tuple[int, int, int]:
    """(first, end, period) of the loop around positions ``at`` of a thread's operator sequence:
    the stretch that repeats with the iteration's period; (0, 0, 0) for fewer than 2 positions."""
    if at.size < 2:
        return 0, 0, 0
    first, last = int(at.min()), int(at.max())
    body = names[first:last + 1]
    period = next((p for p in range(1, min(MAX_PERIOD_OPS, body.size // 2) + 1)
                   if float(np.mean(body[p:] == body[:-p])) >= PERIOD_MATCH), 0)
    if period == 0:  # no repeating order: one anchor per iteration
        period = max(round((last - first) / (at.size - 1)), 1)
        return first, min(last + period, names.size), period
    while first > 0 and first - 1 + period < names.size and names[first - 1] == names[first
                                                                                      - 1 + period]:
        first -= 1
    end = last + 1
    while end < names.size and names[end] == names[end - period]:
        end += 1
    return first, end, period


def _merged(runs: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Loops on one thread, overlapping ones merged: each merged loop keeps one iteration (the
    longest period among them)."""
    merged: list[tuple[int, int, int]] = []
    for first, end, period in sorted(r for r in runs if r[1] > r[0]):
        if merged and first < merged[-1][1]:
            f, e, p = merged[-1]
            merged[-1] = (f, max(e, end), max(p, period))
        else:
            merged.append((first, end, period))
    return merged


def _backward_of_loop_ns(a: Analysis, iterations: float) -> float:
    """Host span (first to last, per step) of the backward nodes that repeat like the loop."""
    host = a.trace.host
    looped = _looped_nodes(a, iterations)
    if looped.size == 0:
        return 0.0
    # first to last looped node of each step: the autograd engine's own time between the tiny
    # nodes is the loop's too
    k = np.searchsorted(a.steps.start, host.ts[looped], side="right") - 1
    return float(sum(host.end[looped[k == step]].max() - host.ts[looped[k == step]].min()
                     for step in distinct(k).tolist()))


def _looped_nodes(a: Analysis, iterations: float) -> np.ndarray:
    """The backward nodes, in the steps, whose name repeats like the loop: at least
    iterations / 2 of each per step."""
    trace, host = a.trace, a.trace.host
    names = trace.strings
    n = max(len(a.steps), 1)
    candidates = [i for i in distinct(host.name[host.cat == HostCat.OP]).tolist()
                  if _BACKWARD_NODE.match(names[i])]
    if not candidates:
        return np.empty(0, np.int64)
    nodes = np.flatnonzero((host.cat == HostCat.OP) & np.isin(host.name, candidates))
    nodes = nodes[_inside_steps(a, host.ts[nodes])]
    counts = np.bincount(np.searchsorted(np.asarray(candidates), host.name[nodes]),
                         minlength=len(candidates))
    repeated = np.asarray(candidates)[counts / n >= max(iterations / 2, MIN_REPEATS_PER_STEP)]
    return nodes[np.isin(host.name[nodes], repeated)]


def _inside_steps(a: Analysis, ts: np.ndarray) -> np.ndarray:
    k = np.searchsorted(a.steps.start, ts, side="right") - 1
    ok = k >= 0
    return ok & (ts < a.steps.end[np.maximum(k, 0)])


def _busy_in_span_ns(a: Analysis, idx: np.ndarray) -> float:
    """GPU time of every device event inside the loop's span (its other kernels: the bias adds,
    activations, gathers between the products), summed over the steps."""
    dev = a.trace.device
    k = np.searchsorted(a.steps.start, dev.ts[idx], side="right") - 1
    total = 0.0
    for step in distinct(k[k >= 0]).tolist():
        sel = idx[k == step]
        inside = (dev.ts >= dev.ts[sel].min()) & (dev.end <= dev.end[sel].max())
        total += float((dev.end[inside] - dev.ts[inside]).sum())
    return total


def _span_per_step(a: Analysis, idx: np.ndarray) -> float:
    """Summed first-to-last span of the loop's kernels inside each step."""
    dev = a.trace.device
    k = np.searchsorted(a.steps.start, dev.ts[idx], side="right") - 1
    total = 0.0
    for step in distinct(k[k >= 0]).tolist():
        sel = idx[k == step]
        total += float(dev.end[sel].max() - dev.ts[sel].min())
    return total


def sliced_anchors(a: Analysis, ops: np.ndarray) -> list[tuple[np.ndarray, float]]:
    """Top-level slicing operators (``x[i]``) of each (name, input shape, sliced dimension)
    repeated like a loop over a tensor's rows: at least MIN_REPEATS_PER_STEP a step, a few
    operators apart, each taking a row of its own; with the rows they take per step (the loop's
    iterations)."""
    host, names = a.trace.host, a.trace.strings
    slicing = [i for i in distinct(host.name[ops]).tolist() if names[i] in SLICE_OPS]
    if not slicing:
        return []
    # (name, input shape, sliced dim) -> positions in ops, and the index each took
    groups: dict[tuple[int, str, str], list[int]] = defaultdict(list)
    index: dict[tuple[int, str, str], list[str]] = defaultdict(list)
    for pos in np.flatnonzero(np.isin(host.name[ops], slicing)).tolist():
        i = int(ops[pos])
        scalars = a.trace.concrete_inputs(i)  # ['', dim, index or start, ...]
        if len(scalars) < 3:  # no recorded arguments: which row it took is unknown
            continue
        key = (int(host.name[i]), repr(a.trace.input_dims(i)[:1]), str(scalars[1]))
        groups[key].append(pos)
        index[key].append(str(scalars[2]))
    n = max(len(a.steps), 1)
    steps = step_of(a, host.ts[ops])
    out = []
    for key, at in groups.items():
        if (len(at) / n < MIN_REPEATS_PER_STEP
                or float(median(np.diff(at))) > MAX_OPS_BETWEEN_SLICES):
            continue
        rows = _rows_per_step(steps[np.asarray(at)], index[key])
        if rows >= MIN_REPEATS_PER_STEP:
            out.append((ops[np.asarray(at)], rows))
    return out


def _rows_per_step(steps: np.ndarray, rows: list[str]) -> float:
    """The different rows (index, or start of a range) a slicing operator takes per step: a loop
    over rows takes a new one each iteration (each as many times as it slices tensors); a layer
    loop slicing a cache takes the same range every time."""
    distinct_rows = sum(len({rows[j] for j in np.flatnonzero(steps == step).tolist()})
                        for step in distinct(steps).tolist())
    return distinct_rows / max(distinct(steps).size, 1)


def _unbatched(a: Analysis, loops: list[tuple[np.ndarray, int, int, int]],
               ) -> list[tuple[np.ndarray, int, int, int]]:
    """The loops whose operators multiply no matrices of several rows: an iteration that does is a
    step of a recurrence over whole batches (an RNN cell over time), launch-bound's to price."""
    dev = a.trace.device
    owner = _owners(a)
    matrix = np.flatnonzero(np.isin(dev.kind, MATRIX_KINDS_FOR_ATTENTION) & (dev.op >= 0))
    batched = {int(owner[i]) for i, cost in zip(matrix.tolist(),
                                                 a.roofline.op_costs.lookup(dev.op[matrix]))
               if cost is not None and cost.gemm_shape is not None
               and min(cost.gemm_shape[1:3]) > MAX_VECTOR_DIM}
    return [loop for loop in loops
            if not batched.intersection(loop[0][loop[1]:loop[2]].tolist())]


def _on_gpu(a: Analysis, loops: list[tuple[np.ndarray, int, int, int]],
            ) -> list[tuple[np.ndarray, int, int, int]]:
    """The loops whose iterations run on the GPU: most of their operators other than the slicing
    launch work there (counted over the whole loop: an iteration may take a branch another
    skips). A loop over CPU tensors (a dataset's ``__getitem__`` picking a row, an augmentation
    sample by sample on the training thread) is the host's work, other rules'."""
    names = a.trace.strings
    launching = set(_launching_ops(a).tolist())
    out = []
    for loop in loops:
        seq, first, end, _period = loop
        body = [int(i) for i in seq[first:end].tolist()
                if names[a.trace.host.name[i]] not in SLICE_OPS]
        if body and sum(i in launching for i in body) > GPU_OPS_SHARE * len(body):
            out.append(loop)
    return out


def _owners(a: Analysis) -> np.ndarray:
    """The outermost operator each device event was launched under, -1 where none."""
    dev = a.trace.device
    return np.where(dev.top_op >= 0, dev.top_op, dev.op)


def _launching_ops(a: Analysis) -> np.ndarray:
    """The outermost operators that launched device work, sorted."""
    owner = _owners(a)
    return np.unique(owner[owner >= 0])


def _sliced_loops(a: Analysis, ops: np.ndarray) -> tuple[list[tuple[np.ndarray, int, int, int]],
                                                         float]:
    """The loops over slices of one tensor (forward, then the backward nodes repeated as often),
    and their iterations per loop."""
    sliced = sliced_anchors(a, ops)
    if not sliced:
        return [], 0.0
    # an iteration per row taken (its operators' order may change with a branch taken in some)
    iterations = max(rows for _at, rows in sliced)
    loops = _unbatched(a, _loops_around(a, ops, [at for at, _rows in sliced],
                                        _looped_nodes(a, iterations)))
    if not _on_gpu(a, [loop for loop in loops if not _is_backward(a, loop)]):
        return [], 0.0
    return loops, iterations


class _LoopCost(NamedTuple):
    """What vectorizing ``loops`` takes out, measured on the profiled trace (per step where said)."""

    removal: _Removal
    loop_ops: np.ndarray
    span_ms: float  # the loops' host span a step
    kernel_ms: float  # the removed iterations' kernels a step
    gpu_after_ms: float  # the GPU's work a step after the fix (STEP_FLOOR_AFTER_FIX)
    saving_ms: float

    def numbers(self, a: Analysis, ops: np.ndarray) -> dict[str, float]:
        n = max(len(a.steps), 1)
        return {"loop_span_ms_per_step": round(self.span_ms, 3),
                "kernel_ms_per_step": round(self.kernel_ms, 3),
                "ops_per_step": round(ops.size / n, 1),
                "loop_ops_removed_per_step": round(self.removal.ops.size / n, 1),
                STEP_FLOOR_AFTER_FIX: round(self.gpu_after_ms, 3)}


def _loop_cost(a: Analysis, ops: np.ndarray,
               loops: list[tuple[np.ndarray, int, int, int]]) -> _LoopCost:
    """The loops' span and kernels, and the saving: the host's time in proportion to the operators
    the fix removes (rules/shared.py), never below the GPU's work left (STEP_FLOOR_AFTER_FIX), the
    removed iterations' work batched into the kept one's kernels included."""
    host, dev = a.trace.host, a.trace.device
    n = max(len(a.steps), 1)
    removal = _removal(a, ops, loops)
    loop_ops = np.concatenate([seq[first:end] for seq, first, end, _period in loops])
    span_ns = float(sum(host.end[seq[first:end]].max() - host.ts[seq[first]]
                        for seq, first, end, _period in loops))
    kernel_ns = float((dev.end[removal.device] - dev.ts[removal.device]).sum())
    kept, kept_ns = _batched_kernels(a, loops, removal)
    added_ns = float(kept_ns.sum() - (dev.end[kept] - dev.ts[kept]).sum())
    gpu_after = max(a.breakdown.busy_ms - (kernel_ns - added_ns) / 1e6 / n, 0.0)
    saving = min(ops_removed_ms(a, ops, removal.ops.size), max(a.step_ms - gpu_after, 0.0))
    return _LoopCost(removal, loop_ops, span_ns / 1e6 / n, kernel_ns / 1e6 / n, gpu_after, saving)


_Loops = list[tuple[np.ndarray, int, int, int]]


def _found(a: Analysis, find: Callable[[Analysis, np.ndarray], tuple[_Loops, float]],
           ) -> tuple[np.ndarray, _Loops, float, _LoopCost] | None:
    """The step's operators, the loops ``find`` sees in them (with its count: rows or groups) and
    what vectorizing them takes out; None where it sees none."""
    ops = step_ops(a)
    loops, count = find(a, ops)
    return None if not loops else (ops, loops, count, _loop_cost(a, ops, loops))


def _vectorized(a: Analysis, ops: np.ndarray, loops: list[tuple[np.ndarray, int, int, int]],
                note: str, unwait: np.ndarray = EMPTY_I) -> Edit:
    """The loops (of the step operators ``ops``) vectorized: every iteration but the first leaves
    the host and the GPU, and the kept iteration's kernels take the removed iterations' work
    (``_batched_kernels``)."""
    removal = _removal(a, ops, loops)
    kept, kept_ns = _batched_kernels(a, loops, removal)
    return Edit(device=kept, device_ns=kept_ns, device_removed=removal.device,
                host_removed_s=removal.start, host_removed_e=removal.end,
                host_share=removal.share, calls_removed=removal.calls, unwait=unwait,
                note=f"{removal.ops.size / max(len(a.steps), 1):.0f} loop operators a step "
                     f"removed; {note}")


def _check_sliced(a: Analysis) -> Finding | None:
    """A loop that takes one slice of a tensor at a time (``for i in range(B): f(x[i])``) and runs
    the same operators on each, with no matrix product of several rows among them."""
    found = _found(a, _sliced_loops)
    if found is None:
        return None
    ops, loops, iterations, cost = found
    trace, host, n = a.trace, a.trace.host, max(len(a.steps), 1)
    removal, loop_ops = cost.removal, cost.loop_ops
    # the forward's iteration names the operators (the backward's nodes are autograd's)
    seq, first, end, _period = next((loop for loop in loops if not _is_backward(a, loop)),
                                    loops[0])
    per_iteration = (end - first) / iterations
    # the iteration's work: its operators that launch GPU work, most host time first
    work = seq[first:end][np.isin(seq[first:end], _launching_ops(a))]
    names = top_names(trace, host.name[work], host.dur[work].astype(float)) if work.size else []
    call = _batched_call((names[0] if names else "op").removeprefix("aten::"))
    return make_finding(
        ID,
        "A per-sample loop runs the same operators on one slice at a time",
        a.step_ms,
        cost.saving_ms,
        f"A Python loop takes {iterations:.0f} slices of the same tensor per step one at a time "
        f"and runs {per_iteration:.0f} operators on each ({', '.join(names[:4])}): "
        f"{removal.ops.size / n:.0f} operators a step, forward and backward, where one call over "
        f"the batch would do. The loop spans {cost.span_ms:.2f} ms of the host per step; its "
        f"kernels take {cost.kernel_ms:.2f} ms.",
        Evidence(
            numbers={
                "loop_iterations_per_step": round(iterations, 1),
                "operators_per_iteration": round(per_iteration, 1),
                **cost.numbers(a, ops),
            },
            ops=top_names(trace, host.name[loop_ops], host.dur[loop_ops].astype(float)),
            sources=sources_of_host(trace, loop_ops, host.dur[loop_ops].astype(float)),
        ),
        (
            Fix("Call the operator once on the whole batch: most take a batch dimension",
                f"out = {call.format(x='x')}   # all {iterations:.0f} rows at once, instead of: "
                f"for i in range({iterations:.0f}): {call.format(x='x[i]')}"),
            Fix("Vectorize the per-sample function", "batched = torch.vmap(per_sample_fn)(X)"),
            Fix("Where the loop cannot be written batched, compile it: the iterations' small "
                "kernels fuse", "step_fn = torch.compile(step_fn)"),
        ),
        wrong_fix="CUDA streams or more threads will not help: each slice's operators are too "
                  "small to fill the GPU.",
        idle_ms=max(cost.span_ms - cost.kernel_ms, 0.0),
    )


# the functional name of an operator whose aten name is not the one users call
_FUNCTIONAL = {"cross_entropy_loss": "F.cross_entropy", "nll_loss_nd": "F.nll_loss",
               "nll_loss": "F.nll_loss", "mse_loss": "F.mse_loss", "l1_loss": "F.l1_loss",
               "binary_cross_entropy_with_logits": "F.binary_cross_entropy_with_logits",
               "binary_cross_entropy": "F.binary_cross_entropy", "linear": "F.linear",
               "smooth_l1_loss": "F.smooth_l1_loss", "softmax": "F.softmax",
               "log_softmax": "F.log_softmax"}


def _batched_call(op: str) -> str:
    """How a user calls ``op`` (an aten name) on ``{x}``: an in-place one as a method."""
    if op in _FUNCTIONAL:
        return f"{_FUNCTIONAL[op]}({{x}}, ...)"
    if op.endswith("_") and not op.startswith("_"):
        return f"{{x}}.{op}(...)"
    return f"torch.{op}({{x}}, ...)"


def _edit_sliced(a: Analysis) -> Edit | None:
    """The sliced loop vectorized: every iteration but the first leaves the host and the GPU, and
    the kept iteration's kernels take the removed rows' work (``_batched_kernels``)."""
    ops = step_ops(a)
    loops, iterations = _sliced_loops(a, ops)
    if not loops:
        return None
    return _vectorized(a, ops, loops, f"one call over {iterations:.0f} slices each")


def dispatch_anchors(a: Analysis, ops: np.ndarray) -> list[np.ndarray]:
    """Top-level operators (of ``ops``) that read a mask's rows as indices (DISPATCH_OPS inside
    them), one array per operator name, where they repeat like a loop over groups: at least
    MIN_DISPATCHES_PER_STEP a step, at most MAX_OPS_PER_DISPATCH operators apart."""
    host = a.trace.host
    reads = np.flatnonzero(a.trace.names_matching(lambda name: name in DISPATCH_OPS)[host.name])
    if reads.size == 0:
        return []
    anchors = np.flatnonzero(np.isin(ops, host.outermost(reads)))
    n = max(len(a.steps), 1)
    out = []
    for name in distinct(host.name[ops[anchors]]).tolist():
        at = anchors[host.name[ops[anchors]] == name]
        if (at.size / n >= MIN_DISPATCHES_PER_STEP
                and float(median(np.diff(at))) <= MAX_OPS_PER_DISPATCH):
            out.append(ops[at])
    return out


def _dispatch_loops(a: Analysis, ops: np.ndarray,
                    ) -> tuple[list[tuple[np.ndarray, int, int, int]], float]:
    """The loops over groups of rows (``dispatch_anchors``) whose iteration adds its results back
    into place (SCATTER_OPS) and runs on the GPU, with the backward's nodes repeated as often; and
    the groups each loop takes. The groups' matrix products are of many rows each (an expert's
    tokens), so unlike a loop over slices they are not an RNN cell's recurrence: every iteration
    reads the same input and only adds into the output."""
    anchors = dispatch_anchors(a, ops)
    if not anchors:
        return [], 0.0
    n = max(len(a.steps), 1)
    dispatches = sum(at.size for at in anchors) / n
    loops = _loops_around(a, ops, anchors, _looped_nodes(a, dispatches), separate=True)
    scatter = a.trace.names_matching(lambda name: name in SCATTER_OPS)[a.trace.host.name]
    backward = [_is_backward(a, loop) for loop in loops]
    scatters = [bool(scatter[seq[first:end]].any()) for seq, first, end, _period in loops]
    forward = [loop for loop, back, adds in zip(loops, backward, scatters) if adds and not back]
    if not _on_gpu(a, forward):
        return [], 0.0
    kept = [loop for loop, back, adds in zip(loops, backward, scatters) if back or adds]
    return kept, dispatches / (len(forward) / n)


def _check_dispatch(a: Analysis) -> Finding | None:
    """A loop over groups of rows found from a mask (a mixture of experts' dispatch): each
    iteration waits for the GPU to count its rows, gathers them, runs the same operators and adds
    the result back, where one batched call over the groups would do."""
    found = _found(a, _dispatch_loops)
    if found is None:
        return None
    ops, loops, groups, cost = found
    trace, host, n = a.trace, a.trace.host, max(len(a.steps), 1)
    removal, loop_ops = cost.removal, cost.loop_ops
    forward = [loop for loop in loops if not _is_backward(a, loop)]
    seq, first, _end, period = forward[0]
    body = seq[first:first + period]
    work = body[np.isin(body, _launching_ops(a))]
    names = top_names(trace, host.name[work], host.dur[work].astype(float)) if work.size else []
    loops_per_step = len(forward) / n
    return make_finding(
        ID,
        "A loop dispatches rows to groups (experts) one group at a time",
        a.step_ms,
        cost.saving_ms,
        f"{loops_per_step:.0f} loop{'s' if loops_per_step >= 1.5 else ''} a step over "
        f"{groups:.0f} groups (a mixture of experts' dispatch): each iteration reads the rows of "
        f"its group from a mask (nonzero: the host waits for the GPU), gathers them and runs "
        f"{period} operators ({', '.join(names[:4])}), then adds the result back: "
        f"{removal.ops.size / n:.0f} operators a step, forward and backward, where one batched "
        f"call over the groups would do. The loops span {cost.span_ms:.2f} ms of the host per "
        f"step; their kernels take {cost.kernel_ms:.2f} ms.",
        Evidence(
            numbers={
                "groups_per_loop": round(groups, 1),
                "loops_per_step": round(loops_per_step, 1),
                "operators_per_iteration": float(period),
                **cost.numbers(a, ops),
            },
            ops=top_names(trace, host.name[loop_ops], host.dur[loop_ops].astype(float)),
            sources=sources_of_host(trace, loop_ops, host.dur[loop_ops].astype(float)),
        ),
        (
            Fix("Give every group a fixed number of slots and run the groups as one batched "
                "matmul: no host wait, one GEMM per layer",
                f"G = {groups:.0f}; cap = int(1.25 * x.shape[0] / G)   # slots per group\n"
                "onehot = F.one_hot(choice, G)\n"
                "slot = (onehot.cumsum(0) * onehot).sum(1) - 1  # each row's slot, on the GPU\n"
                "dest = torch.where(slot < cap, choice * cap + slot, G * cap)  # over: spare row\n"
                "buf = x.new_zeros(G * cap + 1, x.shape[1]).index_copy(0, dest, x)\n"
                "h = torch.bmm(buf[:-1].view(G, cap, -1), w_in)      # w_in: [G, d_in, d_hidden]"),
            Fix("Or sort the rows by group and call a grouped GEMM with the groups' offsets "
                "(no count read on the host)",
                "order = choice.argsort()\n"
                f"offs = torch.bincount(choice, minlength={groups:.0f}).cumsum(0).int()\n"
                "h = torch._grouped_mm(x[order], w_in, offs=offs)   # bf16, Hopper or newer"),
            Fix("Where the loop must stay, read every group's count at once: one wait a layer "
                "instead of one a group",
                "order = choice.argsort()\n"
                f"counts = torch.bincount(choice, minlength={groups:.0f}).tolist()\n"
                "for e, rows in enumerate(order.split(counts)):\n"
                "    out.index_add_(0, rows, experts[e](x[rows]))"),
        ),
        wrong_fix="CUDA graphs will not help: every group's row count is read on the host, "
                  "and a graph cannot capture a shape that changes from step to step.",
        idle_ms=max(cost.span_ms - cost.kernel_ms, 0.0),
    )


def _edit_dispatch(a: Analysis) -> Edit | None:
    """The groups batched: every iteration but the first leaves the host and the GPU (its wait
    with it), and the kept iteration's kernels take the removed groups' work."""
    ops = step_ops(a)
    loops, groups = _dispatch_loops(a, ops)
    if not loops:
        return None
    n = max(len(a.steps), 1)
    # the batched call reads no count on the host: no dispatch waits, the kept iteration's either
    syncs = np.flatnonzero(sync_calls(a.trace))
    dispatches = np.concatenate(dispatch_anchors(a, ops))
    unwait = syncs[np.isin(a.trace.host.outermost(syncs), dispatches)].astype(np.int64)
    return _vectorized(a, ops, loops, f"one batched call over {groups:.0f} groups, "
                                      f"{dispatches.size / n:.0f} mask reads a step waiting no "
                                      "more", unwait)


def _batched_kernels(a: Analysis, loops: list[tuple[np.ndarray, int, int, int]],
                     removal: _Removal) -> tuple[np.ndarray, np.ndarray]:
    """The kept iteration's kernels, each longer by its share of the work the removed iterations'
    kernels did: their time less a kernel's least (``KERNEL_FLOOR_S``: the latency one call over
    the batch no longer pays per row). Small rows' kernels are mostly that latency; a row of
    megabytes keeps its bytes to move."""
    dev = a.trace.device
    owner = _owners(a)
    loop_ops = np.concatenate([seq[first:end] for seq, first, end, _period in loops])
    kept = difference(np.flatnonzero(np.isin(owner, loop_ops) & (owner >= 0)), removal.device)
    ran = (dev.end[kept] - dev.ts[kept]).astype(float)
    if kept.size == 0 or ran.sum() <= 0:
        return np.empty(0, np.int64), np.empty(0)
    work = float(np.maximum((dev.end - dev.ts)[removal.device] - KERNEL_FLOOR_S * 1e9, 0.0).sum())
    return kept.astype(np.int64), ran + work * ran / ran.sum()


RULE = Rule(
    ID, "Per-sample / per-node / per-expert Python loop", check, __doc__ or "",
    needs=("launch_links", "cpu_ops"),
    order=80, idle_cause="dispatch", calibration="step-share", edit=edit,
)
