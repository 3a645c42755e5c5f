"""launch-bound: kernels finish faster than the host can launch them.

Priced by what the first fix leaves: the step captured in a CUDA graph replays its kernels back
to back, so the step after the fix is the GPU's own busy time, a queue gap per kernel (GRAPH_GAP_NS:
0.26-0.35 us between the lab small_gemm's graph-replayed kernels, H100, torch 2.11), and the idle
a graph cannot remove (input pipeline, syncs, pageable copies, op-free host work, stream waits).
The dispatch idle goes, and with it the optimizer's and the allocator's (a captured step holds a
capturable optimizer and allocates from the graph's pool) unless a finding with a simpler fix owns
them (its rule declares ``owns_idle``: optimizer-loop's foreach / fused, allocator-churn,
memory-pressure). The tiny_mlp_launch twin (48 narrow layers, H100, 2026-11-25) measured x8.65
for a whole-step graph; pricing the dispatch idle alone predicted x3.61.

The profiler itself adds host time to every recorded op (the observer effect), which widens
exactly these gaps; without an unprofiled step time the saving discounts that overhead
(analysis/observer.py); with one, rules/calibrate.py takes the step left by the fix as it is.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.intervals import complement, contains, union
from gpudoctor.core.finding import ALL_IDLE, STEP_AFTER_FIX, Evidence, Finding, Fix, make_finding
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.shared import owned_elsewhere

ID = "launch-bound"
GRAPH_GAP_NS = 300
# Host time of a graph launch per node it replays, unprofiled: the launch_bound twin's fixed graph of
# 384 kernels stepped 1.02 ms unprofiled against 0.81 ms of GPU span (H100; tests/data/manifest.json),
# and its cudaGraphLaunch calls took 1.1 us a node profiled (tests/data/launch_bound_fixed).
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
    median_us = float(np.median(dev.dur[kernels])) / 1e3
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
        f"{launches_per_step:.0f} kernels per step with a median of {median_us:.1f} us each, launched "
        f"every {cadence_us:.1f} us: the GPU idles {idle:.2f} ms per step between launches.",
        evidence,
        (
            Fix("Capture the step in a CUDA graph (one launch replays every kernel)",
                "model = torch.compile(model, mode='reduce-overhead')\n"
                "# an output kept past the next call (a GAN's fake images) is overwritten: .clone() it\n"
                "# or torch.cuda.graphs: g = torch.cuda.CUDAGraph(); with torch.cuda.graph(g): out = step(x)"),
            Fix("Fuse small ops into fewer kernels", "model = torch.compile(model)"),
            Fix("Give each kernel more work: larger batch, fewer and wider layers",
                "# e.g. batch 8 -> 64, or torch._foreach_* over lists of tensors"),
        ),
        wrong_fix="A faster GPU makes this worse: the host, not the card, sets the pace.",
        idle_ms=ALL_IDLE,
    )



def edit(a: Analysis, finding: Finding) -> Edit | None:
    """The step captured in a CUDA graph: the host's dispatch (and the optimizer's and the
    allocator's, unless their own findings fire) goes, with the kernels' launches; one replay
    issues them back to back. Blocking host work (loader, syncs, I/O) stays outside the graph."""
    steps = a.steps
    lo = steps.host_start if steps.host_start is not None else steps.start
    hi = steps.host_end if steps.host_end is not None else steps.end
    owned = owned_elsewhere(a, ID)
    kept = [a.idle.labels[c] for c in a.idle.labels if c not in GRAPH_REMOVES or c in owned]
    ks = np.concatenate([k[0] for k in kept]) if kept else np.empty(0, np.int64)
    ke = np.concatenate([k[1] for k in kept]) if kept else np.empty(0, np.int64)
    ks, ke = union(ks, ke)
    removed_s, removed_e = [], []
    for start, end in zip(lo.tolist(), hi.tolist()):
        gs, ge = complement(ks, ke, int(start), int(end))
        removed_s.append(gs)
        removed_e.append(ge)
    rs, re_ = np.concatenate(removed_s), np.concatenate(removed_e)
    dev, host = a.trace.device, a.trace.host
    kernels = np.flatnonzero((a.roofline.event_in_steps_ns > 0) & (dev.cat == 0) & (dev.launch >= 0))
    calls = dev.launch[kernels]
    calls = np.unique(calls[contains(rs, re_, host.ts[calls])]).astype(np.int64)
    # one graph launch a step, at the first launch of each step: it uploads every node
    step_of = np.searchsorted(lo, host.ts[calls], side="right") - 1
    first = np.unique(step_of, return_index=True)[1]
    nodes = np.bincount(step_of,
                        minlength=len(lo))
    launches = calls[first]
    return Edit(host_removed_s=rs, host_removed_e=re_, calls_removed=np.setdiff1d(calls, launches),
                calls_timed=launches, calls_timed_ns=nodes[step_of[first]] * GRAPH_NODE_NS,
                latency_ns=GRAPH_GAP_NS, note="step captured in a CUDA graph")


RULE = Rule(
    ID, "Kernel launch overhead dominates", check, __doc__ or "", needs=("launch_links",),
    order=20, idle_cause="dispatch", blocked_by=("host-sync",), edit=edit,
)
