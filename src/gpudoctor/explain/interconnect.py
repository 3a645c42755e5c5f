"""All-reduce time vs GPU count against ``gpudoctor.plan.collective_cost``' model of the machine.

When the table or scenario names the hardware (GPU, fabric, GPUs per node), the expected curve is
the plan model's all-reduce time at each count: ring, tree or hierarchical, whichever is fastest
(or the table's ``algo``), over the GPU's NVLink/PCIe inside a node and the fabric across nodes.
Presets are datasheets x an achievable fraction, so the curve is scaled to the measurement at the
smaller counts (the measured / model ratio there) and only its *shape* is tested: a jump the model
predicts (crossing the node boundary onto the fabric) is expected behaviour; a jump it does not
predict is the finding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from gpudoctor.core.arrays import median
from gpudoctor.core.finding import Finding, Fix, make_hypothesis
from gpudoctor.explain.tables import CLIFF
from gpudoctor.plan.collective_cost import (
    DEFAULT_FABRIC,
    FABRIC_PRESETS,
    intra_link,
    predict,
)

DEFAULT_GPU = "h100-sxm"  # plan.collective_cost.predict's default
DEFAULT_GPUS_PER_NODE = 8  # DGX / HGX boards
INFER_BYTES = (1.0, 1e13)  # the range searched for a message size the table does not give

# Fixes when the ring leaves the node, cheapest first: the algorithm, then overlap.
CROSS_NODE_FIXES = (
    Fix("Tree or hierarchical all-reduce: reduce inside the node over NVLink, all-reduce across "
        "nodes over IB, broadcast inside the node",
        "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING  # the rings/trees NCCL "
        "built, and the links they use"),
    Fix("NCCL's double binary tree at large scale (latency grows as log2 N, not N)",
        "NCCL_ALGO=Tree  # or unset NCCL_ALGO=Ring and let NCCL's tuner choose"),
    Fix("Overlap the all-reduce with the backward pass; check the bucket size",
        "DDP(model, bucket_cap_mb=100)  # buckets launch as gradients become ready"),
    Fix("All-reduce less often: gradient accumulation",
        "with model.no_sync():  # k-1 micro-steps without all-reduce\n    loss.backward()"))
CROSS_NODE_WRONG = "ZeRO / FSDP: they shard memory, a different problem class; this is the collective algorithm at scale."
INSIDE_NODE_FIXES = (
    Fix("Find the slow pair: NVLink topology and link state (PHB/SYS between two GPUs means no "
        "NVLink path)",
        "nvidia-smi topo -m; nvidia-smi nvlink --status"),
    Fix("See which transport NCCL uses for each peer (P2P/NVLink, NVLS, or SHM through the host)",
        "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH"),
    Fix("Drain the node if an NVLink or NVSwitch is degraded; DCGM diagnostics must pass",
        "dcgmi diag -r 3"))
INSIDE_NODE_WRONG = ("Changing NCCL_ALGO or bucket sizes: inside one node the path between GPUs is "
                     "slower than the hardware allows; the algorithm is not the problem.")


@dataclass(frozen=True)
class Hardware:
    """What the table or scenario says about the machine; None where it says nothing."""

    gpu: str | None = None
    fabric: str | None = None
    gpus_per_node: int | None = None

    @property
    def named(self) -> bool:
        return self.gpu is not None or self.fabric is not None or self.gpus_per_node is not None

    @property
    def k(self) -> int:
        return self.gpus_per_node or DEFAULT_GPUS_PER_NODE


@dataclass(frozen=True)
class ModelCurve:
    """The plan model's all-reduce time per GPU count, and what it assumed."""

    ms: np.ndarray  # [counts]
    algorithms: list[str]
    sizes: list[int]  # bytes per rank at each count (nccl-tests' S)
    inferred: bool  # no size given: the one at which the model matches the smallest count
    describe: str  # GPU, links and efficiencies, in words
    assumed: list[str]


def model_ms(n: int, nbytes: float, hw: Hardware, algo: str) -> tuple[float, str]:
    """One all-reduce of ``nbytes`` per rank on ``n`` GPUs: (ms, algorithm), the table's algo when
    the model has it (ring, tree, hierarchical), else the fastest."""
    p = predict("all-reduce", max(1, round(nbytes)), gpus=n, gpus_per_node=hw.k,
                gpu=hw.gpu or DEFAULT_GPU, fabric=hw.fabric)
    name = algo if algo in p.candidates else p.algorithm
    return p.candidates[name] * 1e3, name


def effective_bytes(n: int, measured_ms: float, hw: Hardware, algo: str) -> int:
    """The message size at which the model's time on ``n`` GPUs equals the measured one (bisection
    in log bytes; the model grows with the size), clamped to ``INFER_BYTES``."""
    lo, hi = (math.log(x) for x in INFER_BYTES)
    if model_ms(n, INFER_BYTES[0], hw, algo)[0] >= measured_ms:
        return int(INFER_BYTES[0])
    if model_ms(n, INFER_BYTES[1], hw, algo)[0] <= measured_ms:
        return int(INFER_BYTES[1])
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if model_ms(n, math.exp(mid), hw, algo)[0] < measured_ms else (lo, mid)
    return round(math.exp(hi))


def model_curve(ns: list[int], t: np.ndarray, sizes: list[float] | None, hw: Hardware,
                algo: str) -> ModelCurve:
    """The expected curve for counts ``ns`` (measured ``t`` ms, used only to infer a missing
    size)."""
    inferred = sizes is None
    per_count = [effective_bytes(ns[0], float(t[0]), hw, algo)] * len(ns) if sizes is None else [
        max(1, round(s)) for s in sizes]
    points = [model_ms(n, s, hw, algo) for n, s in zip(ns, per_count)]
    from gpudoctor.hardware.specs import find_spec

    spec = find_spec(hw.gpu or DEFAULT_GPU)  # predict above raised on an unknown name
    assert spec is not None
    intra = intra_link(spec, min(hw.k, ns[-1]))[0]
    fabric = FABRIC_PRESETS[(hw.fabric or DEFAULT_FABRIC).strip().lower()]
    describe = (f"{spec.name}, {intra.name} x {intra.efficiency:.2f} inside {hw.k}-GPU nodes"
                + (f", {fabric.name} x {fabric.efficiency:.2f} across" if ns[-1] > hw.k else ""))
    assumed = [f"{what} not given: assumed {value}" for what, given, value in (
        ("gpu", hw.gpu, DEFAULT_GPU), ("gpus_per_node", hw.gpus_per_node, DEFAULT_GPUS_PER_NODE),
        ("fabric", hw.fabric if ns[-1] > hw.k else "-", DEFAULT_FABRIC)) if given is None]
    return ModelCurve(np.array([ms for ms, _ in points]), [a for _, a in points], per_count,
                      inferred, describe, assumed)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} B"


def plan_scaling(algo: str, ns: list[int], t: np.ndarray, sizes: list[float] | None, hw: Hardware,
                 numbers: dict[str, Any], partial: str) -> Finding:
    """The measured curve against the plan model's: the first count whose measured / model ratio
    jumps ``CLIFF`` x above the ratio at the smaller counts (their median) is a cliff."""
    curve = model_curve(ns, t, sizes, hw, algo)
    ratio = t / curve.ms
    # unexplained step at ns[j]
    jumps = [float(ratio[j] / median(ratio[:j])) for j in range(1, len(ns))]
    cliff = next((j for j in range(1, len(ns)) if jumps[j - 1] >= CLIFF), None)
    k = hw.k
    boundary = next((j for j in range(1, len(ns)) if ns[j - 1] <= k < ns[j]), None)
    sizes_text = (_size(curve.sizes[0]) if len(set(curve.sizes)) == 1 else
                  f"{_size(min(curve.sizes))}-{_size(max(curve.sizes))}")
    where = f"{curve.describe}; {sizes_text} per rank" + (
        f" (inferred: the size at which the model gives the measured {t[0]:.3g} ms at {ns[0]} GPUs)"
        if curve.inferred else "")
    numbers.update(
        expected_from=f"plan.collective_cost: {where}",
        model_ms=[round(float(x), 3) for x in curve.ms], model_algorithm=curve.algorithms,
        measured_over_model=[round(float(x), 3) for x in ratio],
        gpus_per_node=k, gpu=hw.gpu or DEFAULT_GPU, fabric=hw.fabric or DEFAULT_FABRIC,
        message_bytes=curve.sizes[0] if len(set(curve.sizes)) == 1 else curve.sizes,
        message_bytes_inferred=curve.inferred, assumed=curve.assumed)
    table = "; ".join(f"{n}: {float(x):.3g} vs {float(m):.3g}" for n, x, m in zip(ns, t, curve.ms))
    tail = (f" Measured vs model per GPU count (ms): {table}."
            + (f" Assumed: {', '.join(curve.assumed)}." if curve.assumed else "")
            + (f" Partial data: {partial}." if partial else ""))
    expected_jump = ""
    if boundary is not None and boundary != cliff and (cliff is None or boundary < cliff):
        b = boundary
        m_step, t_step = float(curve.ms[b] / curve.ms[b - 1]), float(t[b] / t[b - 1])
        numbers.update(node_boundary_gpus=ns[b], model_jump_at_node_boundary=round(m_step, 3),
                       measured_jump_at_node_boundary=round(t_step, 3))
        expected_jump = (f" Crossing the node boundary ({ns[b - 1]} -> {ns[b]} GPUs) the model "
                         f"predicts {m_step:.2f}x ({curve.algorithms[b]} onto the fabric) and the "
                         f"measurement rose {t_step:.2f}x: expected behaviour, not a fault.")
    label = f" ({algo})" if algo else ""
    if cliff is None:
        worst = max(jumps)
        f = make_hypothesis(
            "collective-scaling-ok", f"All-reduce{label} follows the interconnect model", 0.6,
            f"All-reduce time{label} follows the plan model's curve ({where}) scaled to the "
            f"measurement at the smaller counts; its largest step off the curve is {worst:.2f}x (a "
            f"cliff is {CLIFF:g}x): no jump the model does not predict.{expected_jump}{tail}",
            dict(numbers, largest_unexplained_jump=round(worst, 3)), (),
            subject=f"all-reduce{label}", partial=bool(partial))
        return msgspec.structs.replace(f, severity="info")
    return _cliff(algo, ns, t, curve, ratio, cliff, k, numbers,
                  (where, expected_jump, tail), partial)


def _cliff(algo: str, ns: list[int], t: np.ndarray, curve: ModelCurve, ratio: np.ndarray,
           j: int, k: int,
           numbers: dict[str, Any], texts: tuple[str, str, str], partial: str) -> Finding:
    where, expected_jump, tail = texts
    base = float(median(ratio[:j]))
    expected = float(curve.ms[j]) * base
    n, prev = ns[j], ns[j - 1]
    unexplained = float(t[j] / expected)
    m_step, t_step = float(curve.ms[j] / curve.ms[j - 1]), float(t[j] / t[j - 1])
    place = "inside a node" if n <= k else "at the node boundary" if prev <= k else "beyond the node boundary"
    numbers.update(cliff_gpus=n, measured_ms=round(float(t[j]), 3), expected_ms=round(expected, 3),
                   ratio=round(unexplained, 2), scaled_on_gpus=ns[:j],
                   measured_over_model_before=round(base, 3), model_jump=round(m_step, 3),
                   measured_jump=round(t_step, 3), where=place)
    fixes: tuple[Fix, ...]
    checks: tuple[str, ...]
    if n <= k:
        why = (f" Inside one {k}-GPU node the GPUs should keep their NVLink/NVSwitch bandwidth, "
               f"and the model has no boundary here: some of the {n} GPUs reach each other over a "
               "slower path (an NVLink down, a GPU outside the NVSwitch domain, PCIe through the "
               "host: `nvidia-smi topo -m` shows PHB/SYS), and the slowest segment of the ring "
               "sets the pace.")
        fixes, wrong = INSIDE_NODE_FIXES, INSIDE_NODE_WRONG
        checks = ((f"nccl-tests `all_reduce_perf -b 8 -e 4G -f 2 -g {n}` on this node, and on "
                   f"{prev} GPUs of it"),
                  ("`nvidia-smi topo -m` and `nvidia-smi nvlink --status`: every pair NV#, "
                   "every link up"),
                  "NCCL_DEBUG=INFO: P2P/NVLink or SHM for each peer")
    else:
        if prev <= k:
            why = (" The model already moves onto the fabric here; a larger jump means the fabric "
                   "gives less than its preset: fewer rails than GPUs, NCCL not using every HCA, "
                   "GPUDirect RDMA off (traffic through host memory), or a rail down.")
        else:
            why = (" Every count here spans several nodes on the same fabric, so the model has no "
                   "boundary: the ring crossed a topology boundary it does not know, most likely a "
                   "pod / rack / spine boundary with less bandwidth between pods (the slowest "
                   "segment sets the pace).")
        fixes, wrong = CROSS_NODE_FIXES, CROSS_NODE_WRONG
        checks = ((f"nccl-tests `all_reduce_perf -b 8 -e 4G -f 2` at {prev} and {n} GPUs: busbw "
                   "per size"),
                  ("`ibstat` on every node: each rail up at its rate; NCCL_IB_HCA lists every HCA; "
                   "nvidia-peermem loaded (GPUDirect RDMA)"),
                  (f"Which pods, racks and spine switches the {n} ranks span; the oversubscription "
                   "between them"),
                  ("NCCL_DEBUG=INFO: which transports (NVLink P2P, NVLS, NET/IB) and which "
                   "ring/tree NCCL chose"))
    bw = ""
    if "bus_bandwidth_gbps" in numbers:
        bus = numbers["bus_bandwidth_gbps"]
        bw = f" Bus bandwidth falls from {bus[j - 1]:.1f} GB/s at {prev} GPUs to {bus[j]:.1f} GB/s at {n}."
    label = f" ({algo})" if algo else ""
    conf = 0.3 + 0.55 * min(1.0, (unexplained - CLIFF) / 2.5) - (0.1 if partial else 0.0)
    return make_hypothesis(
        "topology-cliff", f"All-reduce{label} falls off a cliff at {n} GPUs ({place})", conf,
        f"All-reduce takes {t[j]:.3g} ms at {n} GPUs where the plan model ({where}), scaled to the "
        f"measurement at {', '.join(str(x) for x in ns[:j])} GPUs ({base:.2f}x the model there), "
        f"expects {expected:.3g} ms ({unexplained:.1f}x). From {prev} to {n} GPUs the model "
        f"predicts {m_step:.2f}x and the measurement rose {t_step:.2f}x: a jump the model does not "
        f"predict.{why}{expected_jump}{bw}{tail}",
        numbers, fixes, subject=f"all-reduce{label} at {n} GPUs", partial=bool(partial),
        check_next=checks, wrong_fix=wrong)
