"""small-gemm: matmuls too small to fill the tensor cores (few tiles, short kernels).

A GEMM needs thousands of output tiles in flight to keep 132 SMs of tensor cores busy; at
batch 16 and width 256 each kernel is a few microseconds at a few percent of the roof.
Priced as the kernels' time minus the same FLOPs at the roof times a realistic efficiency:
what batching the work (larger batch, fused QKV / gate-up projections, grouped GEMM) would reach.
Kernels whose FLOPs the trace does not give (replayed from a CUDA graph, so no op shapes) are
priced by how much of the chip their grid fills: past the floor every kernel pays (its start and
drain), a grid of g blocks on S SMs leaves 1 - g/S idle.
Batching also removes kernels, and with them the queue gap in front of each (rules/common.py):
each kernel's gap is priced at the same share as its time.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import (
    backward_nodes_of,
    dataloader_calls,
    optimizer_bookkeeping,
    optimizer_steps,
    parameter_updates,
)
from gpudoctor.analysis.intervals import any_inside
from gpudoctor.analysis.roofline import DTYPES, roof_for
from gpudoctor.core.arrays import difference, distinct, median, union
from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.core.loader import LoaderSettings
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import (
    GATHER_OPS,
    GEMM_EFFICIENCY,
    gemm_ns_of_events,
    inside_stretches,
    kernel_names_of_events,
    launched_inside,
    op_names_of_events,
    queue_gaps_before,
    sources_of_events,
)
from gpudoctor.rules.shared import MAX_KERNELS_BETWEEN, loop_groups
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import HostCat

ID = "small-gemm"
MAX_FLOPS_PER_CALL = 2e9
MAX_EFFICIENCY = 0.25
MAX_GRID_PRICED_NS = 20_000


# A grid of more waves than this over the SMs fills them: a slow GEMM with that many thread blocks
# is slow for another reason than its size (tests/test_replay.py).
MAX_WAVES = 8


def _sm_count(a: Analysis) -> int:
    """The card's SMs, 132 (an H100's) where the trace does not say."""
    return (a.trace.gpu.sm_count if a.trace.gpu and a.trace.gpu.sm_count else 0) or 132


def _by_flops(a: Analysis, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Small GEMMs with known FLOPs, and each one's saving (ns)."""
    rf, dev = a.roofline, a.trace.device
    sms = _sm_count(a)
    few_waves = (dev.blocks <= 0) | (dev.blocks <= MAX_WAVES * sms)
    idx = np.flatnonzero(live & (rf.event_flops > 0) & few_waves)
    t = rf.event_in_steps_ns[idx].astype(float)
    f = rf.event_flops[idx]
    roofs = np.array([roof_for(Kind.GEMM_TC, DTYPES[int(d)], a.ceilings)
                      for d in rf.event_dtype[idx]])
    eff = f / np.maximum(t / 1e9, 1e-12) / np.maximum(roofs, 1.0)
    small = (f < MAX_FLOPS_PER_CALL) & (eff < MAX_EFFICIENCY)
    saving = np.clip(t - f / (roofs * GEMM_EFFICIENCY) * 1e9, 0, None)
    return idx[small], saving[small]


# What any kernel takes on the GPU however little it does (its start and drain): a tiny op replayed
# from a CUDA graph, 0.86-0.98 us per kernel on H200 (benchmarks/BENCHMARKS-bench.md,
# launch.graph), used where the machine's own bench did not measure it. Not unfused-elementwise's
# floor (the trace's shortest memory-bound kernel), which holds work of its own.
KERNEL_FLOOR_NS = 1_000.0
# A profile's launch.graph beyond this is not a kernel's floor (a damaged or foreign profile).
MAX_KERNEL_FLOOR_S = 20e-6


def kernel_floor_ns(a: Analysis) -> float:
    """This machine's per-kernel floor (``gpudoctor bench``'s launch.graph), else KERNEL_FLOOR_NS."""
    measured = (a.ceilings.extra or {}).get("launch_graph_s")
    if isinstance(measured, (int, float)) and 0 < measured < MAX_KERNEL_FLOOR_S:
        return float(measured) * 1e9
    return KERNEL_FLOOR_NS


def _by_grid(a: Analysis, live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Short GEMMs with unknown FLOPs whose grid covers under half the SMs, and their saving as
    the finding's formula prices them, one kernel at a time: the share 1 - g/S of the kernel a grid
    of g blocks on S SMs leaves idle, floor and all (the floors batching merges, ``edit`` prices)."""
    dev, rf = a.trace.device, a.roofline
    sms = _sm_count(a)
    idx = np.flatnonzero(live & (rf.event_flops <= 0) & (dev.blocks > 0) & (dev.blocks < sms // 2))
    idx = idx[dev.dur[idx] < MAX_GRID_PRICED_NS]
    return idx, _grid_fill_saving(a, idx, floor_ns=0.0)


def _grid_fill_saving(a: Analysis, idx: np.ndarray, floor_ns: float) -> np.ndarray:
    """Each kernel's work past ``floor_ns`` shrunk to the share of the SMs its grid filled."""
    t = a.roofline.event_in_steps_ns[idx].astype(float)
    return np.maximum(t - floor_ns, 0.0) * (1.0 - a.trace.device.blocks[idx] / _sm_count(a))


def check(a: Analysis) -> Finding | None:
    dev, rf = a.trace.device, a.roofline
    (flop_idx, flop_saving), (grid_idx, grid_saving) = _small(a)
    idx = np.concatenate((flop_idx, grid_idx))
    n = max(len(a.steps), 1)
    if idx.size < n:  # under one a step is no pattern: nothing to list
        return None
    t = rf.event_in_steps_ns[idx].astype(float)
    kernel_saving = np.concatenate((flop_saving, grid_saving))
    # the share of each kernel's time that batching removes, applied to its queue gap
    removed = np.divide(kernel_saving, t, out=np.zeros_like(t), where=t > 0)
    gap_ns = float((queue_gaps_before(a.trace, idx) * removed).sum())
    saving = (float(kernel_saving.sum()) + gap_ns) / 1e6 / n
    f = rf.event_flops[flop_idx]
    achieved = f.sum() / (rf.event_in_steps_ns[flop_idx].sum() / 1e9) if flop_idx.size else 0.0
    mean_blocks = float(dev.blocks[idx].mean())
    rows = _rows_per_call(a, idx)
    if saving <= 0:
        return None
    return make_finding(
        ID,
        "Matmuls too small to feed the tensor cores",
        a.step_ms,
        saving,
        f"{idx.size / n:.0f} small GEMMs per step, {t.mean() / 1e3:.1f} us each on about "
        f"{mean_blocks:.0f} thread blocks, take {t.sum() / 1e6 / n:.2f} ms: most of the "
        f"{a.trace.gpu.sm_count if a.trace.gpu else 132} SMs' tensor cores have nothing to do.",
        Evidence(
            numbers={
                "small_gemm_ms_per_step": round(t.sum() / 1e6 / n, 3),
                "small_gemms_per_step": round(idx.size / n, 1),
                "mean_kernel_us": round(t.mean() / 1e3, 2),
                "mean_thread_blocks": round(mean_blocks, 1),
                "priced_by_flops": int(flop_idx.size),
                "priced_by_grid_fill": int(grid_idx.size),
                "queue_gaps_removed_ms_per_step": round(gap_ns / 1e6 / n, 3),
                "achieved_tflops": round(achieved / 1e12, 2),
                **({"rows_per_call_median": rows} if rows else {}),
                **_measured_small_shapes(a),
            },
            ops=op_names_of_events(a.trace, idx),
            kernels=kernel_names_of_events(a.trace, idx),
            sources=sources_of_events(a.trace, idx),
        ),
        _ordered_fixes(rows, batched_first=joined_loop(a, idx), loader=a.loader,
                       has_loader=bool(dataloader_calls(a.trace).any())),
        wrong_fix="CUDA graphs remove launch gaps but not this: each kernel itself leaves most "
                  "SMs idle.",
        idle_ms=gap_ns / 1e6 / n,
    )


def _ordered_fixes(rows: int, batched_first: bool, loader: LoaderSettings | None = None,
                   has_loader: bool = True) -> tuple[Fix, ...]:
    """More rows per matmul first; a loop of independent GEMMs joined after it: the batched call
    first (its batch is not what is small)."""
    batched = Fix("Group the loop's independent small GEMMs into one batched call",
                  "w = torch.stack([m.weight.T for m in modules])  # [n, in, out], once per step\n"
                  "out = torch.bmm(x.expand(len(modules), *x.shape), w)  # instead of the loop")
    merged = Fix("Merge parallel projections into one GEMM (QKV, gate+up)",
                 "qkv = x @ w_qkv.T; q, k, v = qkv.split([dq, dk, dv], dim=-1)")
    more_rows = _more_rows_fix(rows, loader, has_loader)
    return (batched, merged, more_rows) if batched_first else (more_rows, merged, batched)


def _rows_per_call(a: Analysis, idx: np.ndarray) -> int:
    """The median rows a small GEMM multiplies (its first input's leading dimensions, from the
    operator's recorded shapes); 0 when the trace recorded none."""
    ops = a.trace.device.op[idx]
    rows = []
    for op in distinct(ops[ops >= 0]).tolist()[:200]:
        dims = a.trace.input_dims(op)
        first = dims[0] if dims and isinstance(dims[0], list) else None
        if first and len(first) >= 2 and all(isinstance(d, int) for d in first):
            rows.append(int(np.prod(first[:-1])))
    return int(median(rows)) if rows else 0


def _more_rows_fix(rows: int, loader: LoaderSettings | None = None,
                   has_loader: bool = True) -> Fix:
    """The batch fix, in the program's own numbers: the rows the trace recorded, the DataLoader's
    batch where ``gpudoctor run`` read it; a program with no DataLoader gets no DataLoader line."""
    title = "Give each matmul more rows: a larger batch (or gradient accumulation the other way round)"
    batch = loader.batch_size if loader is not None and loader.batch_size else None
    if not has_loader:
        line = "batch_size = 8 * B   # B: the batch the step takes now"
    elif batch:
        line = f"loader = DataLoader(ds, batch_size={8 * batch})   # was batch_size={batch}"
    else:
        line = "loader = DataLoader(ds, batch_size=8 * B)   # B: the batch size now"
    if not rows:
        return Fix(title, line)
    return Fix(title,
               f"# each small matmul multiplies {rows} rows now (median, from the recorded "
               f"shapes)\n{line}; {8 * rows} rows a matmul")


def _measured_small_shapes(a: Analysis) -> dict[str, float]:
    """This card's measured rates for small and skinny GEMMs next to a large one (gpudoctor
    bench)."""
    curve = a.ceilings.extra.get("gemm_curve") or {}
    names = {"gemm.bf16.small": "measured_bf16_512_cubed_tflops",
             "gemm.bf16.skinny": "measured_bf16_16x8192x8192_tflops",
             "gemm.bf16": "measured_bf16_8192_cubed_tflops"}
    return {label: round(float(curve[key]) / 1e12, 1) for key, label in names.items()
            if curve.get(key)}


def edit(a: Analysis, finding: Finding) -> Edit | None:
    """The small GEMMs batched: each run of same-kernel GEMMs issued back to back (a loop over
    heads, micro-batches or experts) becomes one kernel at the run's batched time (its FLOPs at the
    roof's realistic share, or its grid's fill, as priced); the rest of the run leaves the GPU, with
    its launches and the operators that issued them and the host time since the run's previous
    one, and so do the other kernels launched in that host time (the loop's casts, its bias
    gradients' sums). The cat joining the loop's outputs goes, forward and backward
    (``_gathers``), and where there is one, the optimizer's host work shrinks with the parameters
    merged (``_optimizer_share``). A GEMM alone in its run keeps its launch and takes its batched time."""
    (flop_idx, flop_saving), (grid_idx, _) = _small(a)
    # a grid-priced kernel keeps the floor any kernel pays (``_batched_ns`` merges a run's floors)
    grid_saving = _grid_fill_saving(a, grid_idx, kernel_floor_ns(a))
    idx, saving = np.concatenate((flop_idx, grid_idx)), np.concatenate((flop_saving, grid_saving))
    if idx.size == 0:
        return None
    dev, host = a.trace.device, a.trace.host
    order = np.argsort(dev.ts[idx], kind="stable")
    idx, saving = idx[order], saving[order]
    after = np.maximum(dev.dur[idx] - saving, 0.0)
    device_ns = after.copy()
    gone: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    threads: list[int] = []
    runs = _runs(a, idx)
    for run in runs:
        device_ns[run[0]] = _batched_ns(a, idx[run], after[run])
        device_ns[run[1:]] = 0.0
        for prev, cur in zip(run[:-1].tolist(), run[1:].tolist()):
            gone.append(int(idx[cur]))
            call, prev_call = int(dev.launch[idx[cur]]), int(dev.launch[idx[prev]])
            if call < 0:  # replayed from a CUDA graph: no host work of its own
                continue
            top = int(host.top_op[call]) if host.top_op[call] >= 0 else call
            begin = int(host.ts[top])
            if prev_call >= 0:  # the loop's Python since the previous GEMM's operator ended
                prev_top = int(host.top_op[prev_call]) if host.top_op[prev_call] >= 0 else prev_call
                begin = min(begin, int(host.end[prev_top]))
            starts.append(begin)
            ends.append(int(host.end[top]))
            threads.append(int(host.thread[top]))
    # the cat gathering the heads' outputs after a loop, and its backward, go: the batched
    # call's output is already whole
    gathers = _gathers(a, [idx[run] for run in runs])
    joined = gathers.size > 0
    gathers = np.concatenate([gathers, backward_nodes_of(a.trace, gathers)])
    starts.extend(host.ts[gathers].tolist())
    ends.extend(host.end[gathers].tolist())
    threads.extend(host.thread[gathers].tolist())
    starts_a, ends_a, threads_a = (np.array(v, np.int64) for v in (starts, ends, threads))
    # the loop's other kernels (a cast of each head's weight, its bias gradient's sum) are launched
    # inside the removed stretches: one batched call launches them once, so they go with it
    others = launched_inside(a, starts_a, ends_a, threads_a)
    removed = union(np.array(gone, np.int64), difference(others, idx))
    calls = dev.launch[removed]
    # a loop whose outputs are joined ran independent GEMMs (heads), whose weights merge into one;
    # same-kernel GEMMs in sequence (a deep stack of small layers) keep their parameters
    empty = np.empty(0, np.int64)
    opt_s, opt_e, merged = _optimizer_share(a, starts_a, ends_a, threads_a) if joined else (
        empty, empty, 0.0)
    return Edit(device=idx.astype(np.int64), device_ns=device_ns, device_removed=removed,
                host_removed_s=np.concatenate([starts_a, opt_s]),
                host_removed_e=np.concatenate([ends_a, opt_e]),
                host_share=np.concatenate([np.ones(starts_a.size), np.full(opt_s.size, merged)]),
                calls_removed=calls[calls >= 0].astype(np.int64),
                note=f"{idx.size} small GEMMs batched into {idx.size - len(gone)} kernels"
                     + (f", {removed.size - len(gone)} kernels of their loops with them"
                        if removed.size > len(gone) else ""))


# How many host events past a loop's last GEMM operator the gather is looked for (its operator's
# own children come first).
GATHER_LOOKAHEAD = 64


def _gathers(a: Analysis, runs: list[np.ndarray]) -> np.ndarray:
    """The outermost operator right after each run's last GEMM operator on its thread, where it
    is a stack or cat (per-sample-loop's GATHER_OPS): what joins a loop's outputs."""
    dev, host = a.trace.device, a.trace.host
    found: list[int] = []
    for run in runs:
        call = int(dev.launch[run[-1]])
        if call < 0:
            continue
        top = int(host.top_op[call]) if host.top_op[call] >= 0 else call
        thread, done = host.thread[top], host.end[top]
        for j in range(top + 1, min(top + 1 + GATHER_LOOKAHEAD, len(host))):
            if host.thread[j] != thread:
                break
            if host.cat[j] == HostCat.OP and host.top_op[j] < 0 and host.ts[j] >= done:
                if a.trace.strings[host.name[j]] in GATHER_OPS:
                    found.append(j)
                break
    return distinct(np.array(found, np.int64))


def _optimizer_share(a: Analysis, starts: np.ndarray, ends: np.ndarray,
                     threads: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """The optimizer's step and zero_grad in the steps, and the share of the parameters the
    batching merges: the gradients accumulated inside the removed stretches (one head's weight
    and bias each), of all those a step accumulates. An optimizer's host work walks its
    parameter lists, so that share of it goes too (a per-head ModuleList's optimizer holds a
    weight and a bias for every head)."""
    host = a.trace.host
    lo, hi = int(a.steps.start[0]), int(a.steps.end[-1])
    in_steps = (host.ts >= lo) & (host.ts < hi)
    updates = np.flatnonzero(parameter_updates(a.trace) & in_steps)
    empty = np.empty(0, np.int64)
    if updates.size == 0 or starts.size == 0:
        return empty, empty, 0.0
    merged = inside_stretches(host.ts[updates], host.thread[updates], starts, ends, threads)
    share = float(merged.sum()) / updates.size
    if share <= 0:
        return empty, empty, 0.0
    ranges = np.flatnonzero(optimizer_bookkeeping(a.trace) & in_steps)
    # a step that calls a closure (LBFGS) runs the model's forward and backward inside it: not
    # bookkeeping
    ranges = ranges[~any_inside(host.ts[ranges], host.end[ranges], host.ts[updates])]
    return _from_last_update(a, ranges, updates), host.end[ranges].astype(np.int64), share


# How long before an optimizer's step its walk may start: from the last gradient accumulated, the
# autograd engine's return from a graph of every head's nodes and the Python up to the step's
# annotation, recorded as no operator, grows with the heads (benchmarks/BENCHMARKS-replay.md "The
# host time before an optimizer's step").
# A longer stretch holds other work (logging, a checkpoint) and is left to its own finding.
STEP_LEAD_MAX_NS = 2_000_000


def _from_last_update(a: Analysis, ranges: np.ndarray, updates: np.ndarray) -> np.ndarray:
    """Where each range's share of host work starts: an optimizer step's at the end of the last
    parameter update before it (within STEP_LEAD_MAX_NS), its own start otherwise (zero_grad)."""
    host = a.trace.host
    starts = host.ts[ranges].astype(np.int64)
    done = np.sort(host.end[updates])
    k = np.searchsorted(done, starts, side="right") - 1
    last = np.where(k >= 0, done[np.maximum(k, 0)], starts)
    step = optimizer_steps(a.trace)[ranges]
    lead = step & (last < starts) & (starts - last <= STEP_LEAD_MAX_NS)
    return np.where(lead, last, starts).astype(np.int64)


def _batched_ns(a: Analysis, run: np.ndarray, after: np.ndarray) -> float:
    """One kernel for a run of GEMMs: with their shapes known, the first one's shape with every
    call's rows stacked, at the measured grid's rate for that shape (hardware/gemm_rate.py);
    else the sum of their priced times, less the floor of each kernel merged. Never longer than the
    run took."""
    rf = a.roofline
    took = float(a.trace.device.dur[run].sum())
    flops = rf.event_flops[run]
    if run.size < 2 or not np.all(flops > 0):
        # grid-priced kernels keep their floor (``edit``): one kernel pays it once
        grid = int((flops <= 0).sum())
        floors = max(grid - 1, 0) * min(kernel_floor_ns(a), float(after.min()))
        return min(max(float(after.sum()) - floors, float(after.max())), took)
    dtype = DTYPES[int(rf.event_dtype[run[0]])]
    one = float(gemm_ns_of_events(a, run[:1], dtype, rows_times=float(run.size))[0])
    return min(one * float(flops.sum()) / (float(flops[0]) * run.size), took)


Priced = tuple[np.ndarray, np.ndarray]  # small GEMMs (device events) and each one's saving (ns)


def _small(a: Analysis) -> tuple[Priced, Priced]:
    """The small GEMMs the finding prices, by FLOPs and by grid fill (a per-sample loop's are
    per-sample-loop's)."""
    dev, rf = a.trace.device, a.roofline
    live = (rf.event_in_steps_ns > 0) & (dev.kind == Kind.GEMM_TC)
    groups = loop_groups(a)
    if groups:
        live[np.concatenate(groups)] = False
    return _by_flops(a, live), _by_grid(a, live)


def joined_loop(a: Analysis, idx: np.ndarray | None = None) -> bool:
    """Whether the small GEMMs (``idx``, else the finding's) include a loop whose outputs a stack
    or cat joins (heads, an ensemble's members, experts): one batched call replaces it, whatever
    the batch."""
    if idx is None:
        (flop_idx, _), (grid_idx, _) = _small(a)
        idx = np.concatenate((flop_idx, grid_idx))
    idx = idx[np.argsort(a.trace.device.ts[idx], kind="stable")]
    return _joined_runs(a, idx)[1]


def _runs(a: Analysis, idx: np.ndarray) -> list[np.ndarray]:
    """The runs ``_joined_runs`` finds."""
    return _joined_runs(a, idx)[0]


def _joined_runs(a: Analysis, idx: np.ndarray) -> tuple[list[np.ndarray], bool]:
    """Positions (into ``idx``, in time order) of each run of two or more GEMMs of one kernel name
    in one step, at most MAX_KERNELS_BETWEEN other kernels apart, that one batched call replaces.
    A run is independent GEMMs where a stack or cat joins its outputs (a loop over heads,
    micro-batches or experts), or where it is the backward of such a run: the whole run batches.
    Else only GEMMs issued back to back batch (``_back_to_back``): with other kernels between
    them, a run is as likely a stack of layers, each the next one's input (a transformer's Q, K, V
    and output projections across its layers), which no batched call replaces."""
    dev, host = a.trace.device, a.trace.host
    order = np.argsort(dev.ts, kind="stable")
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    starts = a.steps.start
    step = np.searchsorted(starts, dev.ts[idx], side="right") - 1 if len(starts) else np.zeros(
        idx.size, np.int64)
    candidates: list[np.ndarray] = []
    periods: list[int] = []  # a loop's period in kernels where the candidate is one, else 0
    for key in sorted(set(zip(step.tolist(), dev.name[idx].tolist()))):
        members = np.flatnonzero((step == key[0]) & (dev.name[idx] == key[1]))
        period = _loop_period(position[idx[members]])
        if period > MAX_KERNELS_BETWEEN + 1:
            candidates.append(members)
            periods.append(period)
            continue
        breaks = np.flatnonzero(np.diff(position[idx[members]]) > MAX_KERNELS_BETWEEN + 1) + 1
        pieces = [r for r in np.split(members, breaks) if r.size >= 2]
        candidates.extend(pieces)
        periods.extend([0] * len(pieces))
    joined = [bool(_gathers(a, [idx[run]]).size) for run in candidates]
    # a loop over modules of several layers each (an ensemble's members): where one layer's
    # GEMMs are joined after the loop, the other layers' GEMMs recurring at the same period
    # across the same kernels are the same iterations, independent of each other's members
    spans = [(int(position[idx[run[0]]]), int(position[idx[run[-1]]])) for run in candidates]
    looped = [j and p > 0 for j, p in zip(joined, periods)]
    for c, period in enumerate(periods):
        if period and not joined[c]:
            joined[c] = any(looped[o] and periods[o] == period and spans[o][0] <= spans[c][1]
                            and spans[c][0] <= spans[o][1] for o in range(len(candidates)))
    # the backward of the joined runs' operators: the autograd nodes that share their sequence
    # numbers
    forward_ops = [dev.op[idx[run]] for run, j in zip(candidates, joined) if j]
    ops = np.concatenate(forward_ops) if forward_ops else np.empty(0, np.int64)
    nodes = backward_nodes_of(a.trace, distinct(ops[ops >= 0]))
    runs: list[np.ndarray] = []
    for run, j in zip(candidates, joined):
        calls = dev.launch[idx[run]]
        if j or (nodes.size and (calls >= 0).all() and np.isin(host.outermost(calls), nodes).all()):
            runs.append(run)
        else:
            runs.extend(_back_to_back(position[idx[run]], run))
    return sorted(runs, key=lambda r: int(r[0])), bool(forward_ops)


# A loop whose body launches more kernels than MAX_KERNELS_BETWEEN (a member MLP of three layers
# with its casts: 13 forward, 16 backward) recurs at a fixed period: one GEMM of each layer per
# iteration, this many iterations at least, at most this many kernels apart
# (tests/data/twins_h100/ensemble_member_loop; benchmarks/BENCHMARKS-replay.md "A loop over an
# ensemble's members").
MIN_LOOP_ITERATIONS = 4
MAX_LOOP_PERIOD = 64


def _loop_period(positions: np.ndarray) -> int:
    """The kernels between consecutive GEMMs of one kernel name where every gap is the same (a
    loop's body), at least MIN_LOOP_ITERATIONS of them and at most MAX_LOOP_PERIOD apart; else 0."""
    if positions.size < MIN_LOOP_ITERATIONS:
        return 0
    gaps = np.diff(positions)
    period = int(gaps[0])
    return period if period <= MAX_LOOP_PERIOD and bool((gaps == period).all()) else 0


def _back_to_back(positions: np.ndarray, run: np.ndarray) -> list[np.ndarray]:
    """The parts of a run whose GEMMs were issued with no other kernel between them."""
    breaks = np.flatnonzero(np.diff(positions) > 1) + 1
    return [part for part in np.split(run, breaks) if part.size >= 2]


RULE = Rule(
    ID, "Small GEMMs starving the tensor cores", check, __doc__ or "",
    order=120, calibration="gpu-step-share", edit=edit,
)
