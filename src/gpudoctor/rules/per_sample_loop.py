"""per-sample-loop: a Python loop issues one matrix-vector product per sample / node.

Seed 000's trap: node-by-node loops turn one GEMM into thousands of GEMVs that starve the tensor
cores and pay a launch each. Detected as many identical matrix-vector shaped (one side of 1) matmuls
per step, issued back to back (a few kernels apart), outside CUDA graphs; priced as the loop's span on the GPU timeline
(kernels plus the idle between them) minus one batched GEMM of the same FLOPs.

Not a per-sample loop: a layer with one output feature (a regression head's N = 1, called once per
forward, a whole forward and backward apart: LBFGS's closure calls it 20 times a step), dot
products (L-BFGS's two-loop recursion: 212 ``aten::dot`` a step on the H100 gallery), and ``generate()``'s decode, whose tokens depend
on each other and cannot be batched (a live capture whose steps are generate calls; its cost is the
launch-bound finding's). Both were reported as critical per-sample loops on the H100 gallery
(2026-11-25) before this check.

In training the loop has a backward too: each iteration's ops leave autograd nodes
(``MvBackward0``, ``IndexBackward0``...) that the backward runs one by one, on the autograd
thread. Backward nodes repeated at least half as often per step as the loop iterates belong to it;
their host time is priced with the forward span (the batched fix has one node per op). The
node_loop_gnn twin (a 2-layer GNN written node by node, H100, 2026-11-25): the forward loop spanned
80 ms of a 320 ms profiled step, and the fix measured x71; the forward alone predicted x1.34.
"""

from __future__ import annotations

import re

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import (
    GEMM_EFFICIENCY,
    kernel_names_of_events,
    op_names_of_events,
    sources_of_events,
)
from gpudoctor.rules.shared import MIN_REPEATS_PER_STEP, loop_groups
from gpudoctor.trace.model import HostCat

ID = "per-sample-loop"
MIN_BATCHED_NS = 10_000
_BACKWARD_NODE = re.compile(r"^autograd::engine::evaluate_function: (?!torch::autograd::AccumulateGrad)")


def check(a: Analysis) -> Finding | None:
    if a.step_source == "generate-call":
        return None
    groups = loop_groups(a)
    if not groups:
        return None
    rf = a.roofline
    n = max(len(a.steps), 1)
    idx = np.sort(np.concatenate(groups))
    span_ns = _span_per_step(a, idx)
    iterations = idx.size / n / len(groups)
    backward_ns = _backward_of_loop_ns(a, iterations)
    kernel_ns = float(rf.event_in_steps_ns[idx].sum())
    flops = float(rf.event_flops[idx].sum())
    batched_ns = max(flops / (a.ceilings.best_matrix_flops * GEMM_EFFICIENCY) * 1e9, MIN_BATCHED_NS * n * len(groups))
    if backward_ns > 0:  # the batched backward: about twice the forward's FLOPs
        batched_ns *= 3
    saving = max(span_ns + backward_ns - batched_ns, 0.0) / 1e6 / n
    calls = idx.size / n
    return make_finding(
        ID,
        "A per-sample loop does matrix-vector work one call at a time",
        a.step_ms,
        saving,
        f"{calls:.0f} matrix-vector products per step ({len(groups)} distinct shapes) run one by one: "
        f"the loop spans {span_ns / 1e6 / n:.2f} ms per step of which {kernel_ns / 1e6 / n:.2f} ms is kernels"
        + (f", and its backward {backward_ns / 1e6 / n:.2f} ms more." if backward_ns > 0 else "."),
        Evidence(
            numbers={
                "matvec_calls_per_step": round(calls, 1),
                "loop_span_ms_per_step": round(span_ns / 1e6 / n, 3),
                "loop_backward_ms_per_step": round(backward_ns / 1e6 / n, 3),
                "kernel_ms_per_step": round(kernel_ns / 1e6 / n, 3),
                "batched_estimate_ms_per_step": round(batched_ns / 1e6 / n, 3),
                "achieved_tflops": round(flops / (kernel_ns / 1e9) / 1e12, 3) if kernel_ns else 0.0,
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
        wrong_fix="CUDA streams or more threads will not help: each product is too small to fill the GPU.",
        idle_ms=max(span_ns - kernel_ns, 0.0) / 1e6 / n,
    )


def _backward_of_loop_ns(a: Analysis, iterations: float) -> float:
    """Host span (first to last, per step) of the backward nodes that repeat like the loop: at least
    iterations / 2 of each per step."""
    trace, host = a.trace, a.trace.host
    names = trace.strings
    n = max(len(a.steps), 1)
    candidates = [i for i in np.unique(host.name[host.cat == HostCat.OP]).tolist() if _BACKWARD_NODE.match(names[i])]
    if not candidates:
        return 0.0
    nodes = np.flatnonzero((host.cat == HostCat.OP) & np.isin(host.name, candidates))
    in_steps = _inside_steps(a, host.ts[nodes])
    nodes = nodes[in_steps]
    counts = np.bincount(np.searchsorted(np.asarray(candidates), host.name[nodes]), minlength=len(candidates))
    repeated = np.asarray(candidates)[counts / n >= max(iterations / 2, MIN_REPEATS_PER_STEP)]
    looped = nodes[np.isin(host.name[nodes], repeated)]
    if looped.size == 0:
        return 0.0
    # first to last looped node of each step: the autograd engine's own time between the tiny
    # nodes is the loop's too
    k = np.searchsorted(a.steps.start, host.ts[looped], side="right") - 1
    return float(sum(host.end[looped[k == step]].max() - host.ts[looped[k == step]].min() for step in np.unique(k).tolist()))


def _inside_steps(a: Analysis, ts: np.ndarray) -> np.ndarray:
    k = np.searchsorted(a.steps.start, ts, side="right") - 1
    ok = k >= 0
    return ok & (ts < a.steps.end[np.maximum(k, 0)])


def _span_per_step(a: Analysis, idx: np.ndarray) -> float:
    """Summed first-to-last span of the loop's kernels inside each step."""
    dev = a.trace.device
    k = np.searchsorted(a.steps.start, dev.ts[idx], side="right") - 1
    total = 0.0
    for step in np.unique(k[k >= 0]).tolist():
        sel = idx[k == step]
        total += float(dev.end[sel].max() - dev.ts[sel].min())
    return total


RULE = Rule(
    ID, "Per-sample / per-node Python loop of matrix-vector products", check, __doc__ or "",
    needs=("launch_links", "cpu_ops"),
    order=80, idle_cause="dispatch", calibration="step-share",
)
