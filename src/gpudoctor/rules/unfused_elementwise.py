"""unfused-elementwise: chains of memory-bound kernels that each stream the tensor through HBM.

A chain is a run of consecutive elementwise / reduction / normalization / softmax / cast kernels
(at least two of them elementwise) on one stream whose ops work on tensors of the same size (the same activation flowing through a
hand-written formula); any other kernel, or a change of tensor size, ends it. Fused, a chain costs
about one pass over its operand: priced as 1.25x its slowest kernel. Chains inside naive
attention belong to that rule.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.core.finding import KERNELS_REMOVED, Evidence, Finding, Fix, make_finding
from gpudoctor.kernels.prescribe import kernel_fix
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import (
    kernel_names_of_events,
    op_names_of_events,
    sources_of_events,
)
from gpudoctor.rules.shared import attention_events
from gpudoctor.trace.kernels import MEMORY_BOUND_KINDS, Kind

ID = "unfused-elementwise"
MIN_CHAIN = 3
MIN_POINTWISE = 2
FUSED_PASS_FACTOR = 1.25


def chains(a: Analysis) -> list[np.ndarray]:
    """Runs of >= MIN_CHAIN consecutive memory-bound kernels per stream, inside the steps."""
    dev = a.trace.device
    live = (a.roofline.event_in_steps_ns > 0) & (dev.cat == 0)
    live[attention_events(a)] = False
    order = np.lexsort((dev.ts, dev.stream))
    order = order[dev.cat[order] == 0]
    shape_id, numel = _event_shapes(a)
    fusable = np.isin(dev.kind[order], [int(k) for k in MEMORY_BOUND_KINDS]) & live[order] & (numel[order] > 1)
    # a new chain starts at every non-fusable kernel, stream change or tensor-shape change
    key = np.stack([dev.stream[order], shape_id[order]])
    changed = np.concatenate(([True], (key[:, 1:] != key[:, :-1]).any(axis=0)))
    chain_id = np.cumsum(changed | ~fusable)
    members = order[fusable]
    ids = chain_id[fusable]
    # several kernels of one op are one op: a chain needs MIN_CHAIN distinct ops, and
    # elementwise ones among them (a library norm + a cast is not a hand-written chain)
    ops = _distinct_per_chain(ids, dev.op[members])
    pointwise = dev.kind[members] == Kind.ELEMENTWISE
    elementwise_ops = _distinct_per_chain(ids[pointwise], dev.op[members][pointwise])
    good = [c for c, count in ops.items() if count >= MIN_CHAIN and elementwise_ops.get(c, 0) >= MIN_POINTWISE]
    if not good:
        return []
    keep = np.isin(ids, good)
    bounds = np.flatnonzero(np.diff(ids[keep])) + 1
    return np.split(members[keep], bounds)


def _distinct_per_chain(chain: np.ndarray, op: np.ndarray) -> dict[int, int]:
    """Number of distinct ops in each chain id."""
    if chain.size == 0:
        return {}
    pairs = np.unique(np.stack([chain, op]), axis=1)
    ids, counts = np.unique(pairs[0], return_counts=True)
    return dict(zip(ids.tolist(), counts.tolist()))


def _event_shapes(a: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """Id of the largest input shape of each device event's op, and its element count."""
    dev = a.trace.device
    ids: dict[tuple[int, ...], int] = {}
    by_op = {i: (ids.setdefault(c.shape, len(ids)), c.numel) for i, c in a.roofline.op_costs.items()}
    pairs = [by_op.get(int(o), (-1, 0)) for o in dev.op.tolist()]
    shape_id = np.fromiter((p[0] for p in pairs), np.int64, len(pairs))
    numel = np.fromiter((p[1] for p in pairs), np.int64, len(pairs))
    return shape_id, numel


def check(a: Analysis) -> Finding | None:
    runs = chains(a)
    if not runs:
        return None
    t = a.roofline.event_in_steps_ns
    n = max(len(a.steps), 1)
    chain_ns = np.array([t[r].sum() for r in runs], float)
    fused_ns = np.array([FUSED_PASS_FACTOR * t[r].max() for r in runs], float)
    saving_ns = np.clip(chain_ns - fused_ns, 0, None)
    idx = np.concatenate(runs)
    nbytes = float(a.roofline.event_bytes[idx].sum())
    bw = nbytes / (t[idx].sum() / 1e9) if t[idx].sum() else 0.0
    time_ms = chain_ns.sum() / 1e6 / n
    saving = saving_ns.sum() / 1e6 / n
    heaviest = runs[int(np.argmax(saving_ns))]
    fixes = [
        Fix("Let the compiler fuse the chain into one kernel", "model = torch.compile(model)"),
        Fix("Use the fused built-ins instead of hand-written formulas",
            "F.gelu(x, approximate='tanh')   # not 0.5*x*(1+tanh(...))\n"
            "F.rms_norm(x, (d,), weight) / F.layer_norm(x, (d,), w, b)"),
        Fix("Write one fused kernel (Triton) for what the compiler cannot fuse",
            "# e.g. bias + activation + dropout + residual in one Triton kernel"),
    ]
    fused = kernel_fix(op_names_of_events(a.trace, idx))
    if fused is not None:  # a ready kernel for exactly this chain comes before writing one
        fixes.insert(2, fused)
    return make_finding(
        ID,
        "Chains of unfused memory-bound kernels",
        a.step_ms,
        saving,
        f"{len(runs) / n:.0f} chains per step of {idx.size / len(runs):.1f} memory-bound kernels on average "
        f"({time_ms:.2f} ms per step) each read and write the whole tensor through HBM; fused, each chain "
        "is about one pass.",
        Evidence(
            numbers={
                "chained_kernel_ms_per_step": round(time_ms, 3),
                "chains_per_step": round(len(runs) / n, 1),
                "kernels_per_chain": round(idx.size / len(runs), 1),
                "achieved_bandwidth_GBps": round(bw / 1e9, 1),
                "hbm_roof_GBps": round(a.ceilings.hbm_bytes_per_s / 1e9, 0),
                "share_of_step_pct": round(100 * time_ms / a.step_ms, 1),
                # each chain becomes one kernel
                KERNELS_REMOVED: round((idx.size - len(runs)) / n, 1),
            },
            ops=op_names_of_events(a.trace, heaviest),
            kernels=kernel_names_of_events(a.trace, idx),
            sources=sources_of_events(a.trace, heaviest),
        ),
        tuple(fixes),
        wrong_fix="Lower-precision matmuls will not help: these kernels are bound by memory bandwidth, not FLOPs.",
    )


RULE = Rule(
    ID, "Unfused chains of elementwise kernels", check, __doc__ or "", needs=("launch_links", "cpu_ops"),
    order=40,
)
