"""launch-bound: kernels finish faster than the host can launch them.

Priced by what the first fix leaves: the step captured in a CUDA graph replays its kernels back
to back, so the step after the fix is the GPU's own busy time, a queue gap per kernel (GRAPH_GAP_NS:
0.26-0.35 us between the lab small_gemm's graph-replayed kernels, H100, torch 2.11), and the idle
a graph cannot remove (input pipeline, syncs, pageable copies, op-free host work, stream waits).
The dispatch idle goes, and with it the optimizer's and the allocator's (a captured step holds a
capturable optimizer and allocates from the graph's pool) unless a finding with a simpler fix owns
them (its rule declares ``owns_idle``: optimizer-loop's foreach / fused, allocator-churn,
memory-pressure).

The profiler itself adds host time to every recorded op (the observer effect), which widens
exactly these gaps; without an unprofiled step time the saving discounts that overhead
(analysis/observer.py); with one, rules/calibrate.py takes the step left by the fix as it is.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import HOST_WORK_MIN_NS, bookkeeping_names
from gpudoctor.analysis.intervals import contains, subtract, union
from gpudoctor.core.arrays import difference, distinct, median
from gpudoctor.core.finding import ALL_IDLE, STEP_AFTER_FIX, Evidence, Finding, Fix, make_finding
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import compile_line
from gpudoctor.rules.shared import owned_elsewhere
from gpudoctor.trace.model import HostCat

ID = "launch-bound"
GRAPH_GAP_NS = 300
# Host time of a graph launch per node it replays, unprofiled: the launch_bound fixed twin's step
# less its graph's GPU span, over its 384 nodes (tests/data/manifest.json, launch_bound_fixed).
GRAPH_NODE_NS = 550
# idle that capturing the step in a CUDA graph removes (analysis/idle.py causes)
GRAPH_REMOVES = ("dispatch", "optimizer", "allocator")


def check(a: Analysis) -> Finding | None:
    idle = a.idle.ms("dispatch")
    if idle <= 0:
        return None
    dev = a.trace.device
    n_steps = max(len(a.steps), 1)
    in_steps = a.roofline.event_in_steps_ns > 0
    kernels = in_steps & (dev.cat == 0)
    if not kernels.any():
        return None
    median_us = float(median(dev.dur[kernels])) / 1e3
    launches_per_step = float(kernels.sum()) / n_steps
    # with the step timed unprofiled, rules/calibrate.py measures the overhead instead
    overhead_ms = 0.0 if a.unprofiled_step_ms else a.profiler_overhead_ms
    owned = owned_elsewhere(a, ID)
    removed_ms = sum(a.idle.ms(cause) for cause in GRAPH_REMOVES if cause not in owned)
    saving = max(removed_ms - launches_per_step * GRAPH_GAP_NS / 1e6 - overhead_ms, 0.0)
    after_ms = a.step_ms - removed_ms + launches_per_step * GRAPH_GAP_NS / 1e6
    cadence_us = 1e3 * a.step_ms / launches_per_step if launches_per_step else 0.0
    if median_us >= cadence_us:
        return None  # kernels outlast the launch cadence: gaps are not from dispatch speed
    evidence = Evidence(
        numbers={
            "gpu_idle_while_dispatching_ms_per_step": round(idle, 3),
            "kernels_per_step": round(launches_per_step, 1),
            "median_kernel_us": round(median_us, 2),
            "host_time_per_launch_us": round(cadence_us, 2),
            "profiler_overhead_discount_ms": round(min(overhead_ms, idle), 3),
            "idle_a_graph_removes_ms_per_step": round(removed_ms, 3),
            # the step once captured: GPU busy + a queue gap per kernel + the idle a graph keeps
            # (no profiler time in it: rules/calibrate.py prices the unprofiled step against it)
            STEP_AFTER_FIX: round(after_ms, 3),
        },
    )
    return make_finding(
        ID,
        "Launch-bound: the GPU outruns the host's kernel launches",
        a.step_ms,
        saving,
        f"{launches_per_step:.0f} kernels per step with a median of {median_us:.1f} us each, "
        f"launched every {cadence_us:.1f} us: the GPU idles {idle:.2f} ms per step between "
        "launches.",
        evidence,
        (
            Fix("Capture the step in a CUDA graph (one launch replays every kernel)",
                compile_line(a, "reduce-overhead") + "\n"
                "# an output kept past the next call (a GAN's fake images) is overwritten: "
                ".clone() it\n"
                "# or torch.cuda.graphs: g = torch.cuda.CUDAGraph(); with torch.cuda.graph(g): out "
                "= step(x)"),
            Fix("Fuse small ops into fewer kernels", compile_line(a)),
            Fix("Give each kernel more work: larger batch, fewer and wider layers",
                "loader = DataLoader(ds, batch_size=8 * B)   # B: the batch now\n"
                "# or torch._foreach_* over lists of tensors"),
        ),
        wrong_fix="A faster GPU makes this worse: the host, not the card, sets the pace.",
        idle_ms=ALL_IDLE,
    )



def edit(a: Analysis, finding: Finding) -> Edit | None:
    """The step's GPU work captured in a CUDA graph: the host time of the operators that launch
    it goes (and the Python between two of them), with their launches; one replay issues the
    kernels back to back. The optimizer's and the allocator's host time goes too unless their own
    findings fire; host work that launches nothing (CPU tensors, I/O), the loader and syncs stay."""
    return captured(a)


def captured(a: Analysis, within: np.ndarray | None = None) -> Edit | None:
    """The GPU work launched from the host events ``within`` (a mask; None: the whole step, with
    the idle a graph removes, as one graph a step) captured in CUDA graphs: one graph a step for
    each launching thread (a module's forward and its backward are two), launched where the
    thread's first captured launch of the step was."""
    dev, host = a.trace.device, a.trace.host
    kernels = np.flatnonzero(
        (a.roofline.event_in_steps_ns > 0) & (dev.cat == 0) & (dev.launch >= 0))
    if within is not None:
        kernels = kernels[within[dev.launch[kernels]]]
    if kernels.size == 0:
        return None
    calls = distinct(dev.launch[kernels])
    tops = host.outermost(calls)
    rs, re_ = union(host.ts[tops], host.end[tops])
    # Python between two launching operators, short and holding no operator of its own but views
    # and autograd's books (an operator on CPU tensors launches nothing and stays)
    outer = np.flatnonzero((host.cat == HostCat.OP) & (host.top_op < 0) & host.on_threads(
        host.thread[tops])
                           & ~bookkeeping_names(a.trace)[host.name])
    own_ops = np.sort(host.ts[difference(outer, tops)])
    between = np.searchsorted(own_ops, rs[1:]) - np.searchsorted(own_ops, re_[:-1])
    glue = np.concatenate([(rs[1:] - re_[:-1] <= HOST_WORK_MIN_NS) & (between == 0), [False]])
    re_ = np.where(glue, np.concatenate([rs[1:], [0]]), re_)
    owned = owned_elsewhere(a, ID)
    if within is None:
        taken = [a.idle.labels[c] for c in GRAPH_REMOVES if c in a.idle.labels and c not in owned]
        rs, re_ = union(np.concatenate([rs, *(t[0] for t in taken)]),
                        np.concatenate([re_, *(t[1] for t in taken)]))
    kept = [a.idle.labels[c] for c in a.idle.labels if c not in GRAPH_REMOVES or c in owned]
    if kept:
        rs, re_ = subtract(rs, re_,
                           *union(np.concatenate([k[0] for k in kept]),
                                  np.concatenate([k[1] for k in kept])))
    calls = calls[contains(rs, re_, host.ts[calls])].astype(np.int64)
    if calls.size == 0:
        return None
    # in time order: the host table is grouped by thread (in the order the file names them), and
    # the first launch of a graph is the earliest, whichever thread made it
    calls = calls[np.argsort(host.ts[calls], kind="stable")]
    lo = a.steps.host_start if a.steps.host_start is not None else a.steps.start
    # one graph launch a step (a step captured whole), or a step and thread (a module's forward
    # and backward), at its first launch: it uploads every node
    step_of = np.maximum(np.searchsorted(lo, host.ts[calls], side="right") - 1, 0)
    graph_of = step_of
    if within is not None:
        _, thread_of = np.unique(host.thread[calls], return_inverse=True)
        graph_of = step_of * (int(thread_of.max()) + 1) + thread_of
    first = np.unique(graph_of, return_index=True)[1]
    nodes = np.bincount(graph_of)
    launches = calls[first]
    replayed = difference(calls, launches)
    return Edit(host_removed_s=rs, host_removed_e=re_, calls_removed=replayed, calls_graphed=replayed,
                calls_timed=launches, calls_timed_ns=nodes[graph_of[first]] * GRAPH_NODE_NS,
                latency_ns=GRAPH_GAP_NS, switch_ns=GRAPH_GAP_NS,
                note="step captured in a CUDA graph"
                if within is None else "module captured in CUDA graphs")


# A graph cannot capture a read of a GPU value, the loader's fetch or op-free host work, a cache
# emptied every step defeats its memory pool, and a shape new every step is a new graph every
# step: those fixes come first.
RULE = Rule(
    ID, "Kernel launch overhead dominates", check, __doc__ or "", needs=("launch_links",),
    order=20, idle_cause="dispatch", edit=edit,
    blocked_by=("host-sync", "allocator-churn", "input-pipeline", "host-blocking-work",
                "dynamic-shapes"),
    # the snippet's knob graphs the module's forward and backward, not the step: its own price
    # (rules/knob_prices.py) goes in the evidence
    module_knobs=("compile-reduce-overhead",),
)
