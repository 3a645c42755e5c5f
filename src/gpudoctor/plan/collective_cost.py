"""Alpha-beta cost of NCCL collectives: ring, double binary tree and hierarchical, from interconnect
presets (datasheets x an achievable fraction) or calibrated on a ``gpudoctor bench`` curve.

Sizes follow nccl-tests (doc/PERFORMANCE.md), as ``gpudoctor.hardware.collective_bandwidth``
measures them: ``S`` is the buffer each rank holds - all-reduce: its input (= output); all-gather:
the *gathered* output (N shards); reduce-scatter: the *full* input (N shards); all-to-all: each
rank's send buffer; broadcast and p2p: the message. algbw = S / t; busbw = algbw x 2(N-1)/N
(all-reduce), x (N-1)/N (all-gather, reduce-scatter, all-to-all), x 1 (broadcast, p2p), so busbw is
comparable to a link.

Model (B = per-rank bus bandwidth, alpha = latency per step, t0 = fixed cost of one call):
  ring all-reduce      t0 + 2(N-1)/N S/B + 2(N-1) alpha
  tree all-reduce      t0 + 2 S/B + 2 ((K-1) alpha_intra + log2(M) alpha_inter)
                       (NCCL's tree: a chain inside each of the M nodes, a double binary tree across
                       them; in one node its latency equals the ring's, so the ring wins there)
  hierarchical (nodes) intra reduce-scatter + inter all-reduce on S/K + intra all-gather
  all-gather / RS      t0 + (N-1)/N S/B + (N-1) alpha
  broadcast            t0 + S/B + (N-1) alpha                  (pipelined ring)
  all-to-all           t0 + (N-1)/N S/B + ceil(log2 N) alpha   (peers posted together: an assumption)
  p2p                  t0 + S/B + alpha
Across nodes a ring's bandwidth is min(NVLink, rails x rail): NCCL spreads its channels over the
node's NICs, so the node's outgoing ring traffic is shared by all rails. Of a ring's steps, those
that cross nodes (2(M-1) for all-reduce, M-1 for the others) cost alpha_inter, the rest alpha_intra,
as in NCCL's tuning model (src/graph/tuning.cc: nInterSteps).
"""

from __future__ import annotations

import json
import math
import re
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gpudoctor.errors import InputError, UnknownGpuError
from gpudoctor.hardware.collective_bandwidth import bus_factor
from gpudoctor.hardware.specs import GpuSpec, find_spec, known_names
from gpudoctor.plan.limits import check_gpus

OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "broadcast", "p2p")
_BENCH_NAMES = {"all-reduce": "all_reduce", "all-gather": "all_gather",
                "reduce-scatter": "reduce_scatter"}
MAX_BYTES = 1e15  # 1 PB: anything larger is a typo

# Latencies, from NCCL's own tuning model (src/graph/tuning.cc, NCCL 2.18-2.21, Simple protocol,
# the one large messages use): baseLat Ring/Simple 8.4 us per call; hwLat Ring/Simple per step
# NVLink 3.4 us, PCI 5.7 us, NET 14 us. Documented assumptions, not measurements: the 2x H200
# curve (benchmarks/results/bench-2xh200-2026-11-22.json) shows ~60 us for a 1 KiB all-reduce,
# most of it the harness's Python dispatch between the CUDA events; calibration absorbs it.
BASE_LATENCY_S = 8.4e-6
ALPHA_NVLINK_S = 3.4e-6
ALPHA_PCIE_S = 5.7e-6
ALPHA_NET_S = 14e-6

# Achievable fraction of the datasheet link rate (per direction) that NCCL busbw reaches.
NVLINK_EFFICIENCY = 0.80  # nccl-tests busbw on NVSwitch systems: ~75-85% of unidirectional NVLink
PCIE_EFFICIENCY = 0.60  # GPU-to-GPU through the host root complex / CPU: well below the x16 rate
IB_EFFICIENCY = 0.85  # nccl-tests over one IB rail: ~80-90% of the line rate (headers, PCIe hop)
ROCE_EFFICIENCY = 0.75  # RoCE: Ethernet framing and congestion control cost more than IB


# NVLink SHARP (NVLS): NVSwitch 3+ reduces all-reduce data in the switch. Only inside one node
# (NCCL maintainer, NVIDIA/nccl#1031), only on NVSwitch NVLink 4/5 systems (H100/H200 SXM, B200).
# Its busbw over the ring's, by ranks in the node: 8 H100 reach ~480 GB/s against the ring's ~370
# (NCCL maintainer, NVIDIA/nccl-tests#212 and NVIDIA/nccl#1442: "a 30% improvement"); 2-4 ranks
# stay at the ring's rate and 5, 6, 7 ranks reach 420, 440, 460 GB/s (a user's 8x H100 SXM
# measurement, NVIDIA/nccl#1455). Not measured here: the lent machines keep NVLS off.
NVLS_SPEEDUP = {5: 420 / 370, 6: 440 / 370, 7: 460 / 370, 8: 480 / 370}
NVLS_LINKS = ("nvlink4", "nvlink5")


def nvls_speedup(ranks: int) -> float:
    """NVLS bus bandwidth over the ring's for ``ranks`` in one node (NVLS_SPEEDUP; 1 up to 4)."""
    return NVLS_SPEEDUP.get(min(ranks, 8), 1.0)


@dataclass(frozen=True)
class Link:
    """One interconnect preset: a datasheet rate, the fraction NCCL reaches and a step latency."""

    key: str
    name: str
    datasheet_Bps: float  # per direction, per GPU (intra-node) or per rail (fabric)
    efficiency: float  # achievable busbw / datasheet_Bps
    alpha_s: float  # latency per ring step
    source: str

    @property
    def bandwidth(self) -> float:
        return self.datasheet_Bps * self.efficiency


GB = 1e9
INTRA_PRESETS: dict[str, Link] = {
    # NVIDIA A100 datasheet: third-generation NVLink 600 GB/s total (both directions), NVSwitch.
    "nvlink3": Link("nvlink3", "NVLink 3 (A100)", 300 * GB, NVLINK_EFFICIENCY, ALPHA_NVLINK_S,
                    "A100 datasheet: NVLink 600 GB/s bidirectional"),
    # NVIDIA H100 / H200 datasheets: fourth-generation NVLink 900 GB/s total, NVSwitch.
    "nvlink4": Link("nvlink4", "NVLink 4 (H100/H200)", 450 * GB, NVLINK_EFFICIENCY, ALPHA_NVLINK_S,
                    "H100/H200 datasheets: NVLink 900 GB/s bidirectional"),
    # NVIDIA B200 / DGX B200 datasheet: fifth-generation NVLink 1.8 TB/s total per GPU.
    "nvlink5": Link("nvlink5", "NVLink 5 (B200)", 900 * GB, NVLINK_EFFICIENCY, ALPHA_NVLINK_S,
                    "B200 datasheet: NVLink 1.8 TB/s bidirectional"),
    # PCI-SIG: Gen3 8 GT/s x16 ~16 GB/s, Gen4 16 GT/s ~32 GB/s, Gen5 32 GT/s ~64 GB/s per direction.
    "pcie3": Link("pcie3", "PCIe Gen3 x16", 16 * GB, PCIE_EFFICIENCY, ALPHA_PCIE_S,
                  "PCIe 3.0 x16: ~16 GB/s per direction theoretical"),
    "pcie4": Link("pcie4", "PCIe Gen4 x16", 32 * GB, PCIE_EFFICIENCY, ALPHA_PCIE_S,
                  "PCIe 4.0 x16: ~32 GB/s per direction theoretical"),
    "pcie5": Link("pcie5", "PCIe Gen5 x16", 64 * GB, PCIE_EFFICIENCY, ALPHA_PCIE_S,
                  "PCIe 5.0 x16: ~64 GB/s per direction theoretical"),
}
FABRIC_PRESETS: dict[str, Link] = {
    # InfiniBand per-port rates (NVIDIA ConnectX-6 HDR 200 Gb/s, ConnectX-7 NDR 400 Gb/s,
    # ConnectX-8 XDR 800 Gb/s); one rail per GPU (8 per node, DGX-style) unless told otherwise.
    "ib-hdr": Link("ib-hdr", "InfiniBand HDR 200 Gb/s per GPU", 25 * GB, IB_EFFICIENCY, ALPHA_NET_S,
                   "ConnectX-6 HDR: 200 Gb/s per port"),
    "ib-ndr": Link("ib-ndr", "InfiniBand NDR 400 Gb/s per GPU", 50 * GB, IB_EFFICIENCY, ALPHA_NET_S,
                   "ConnectX-7 NDR: 400 Gb/s per port"),
    "ib-xdr": Link("ib-xdr", "InfiniBand XDR 800 Gb/s per GPU", 100 * GB, IB_EFFICIENCY,
                   ALPHA_NET_S, "ConnectX-8 XDR: 800 Gb/s per port"),
    # RoCE v2 on 400 GbE NICs (ConnectX-7 / BlueField-3 Ethernet mode), one per GPU.
    "roce": Link("roce", "RoCE 400 Gb/s per GPU", 50 * GB, ROCE_EFFICIENCY, ALPHA_NET_S,
                 "400 GbE RoCE v2 NIC per GPU"),
    # NVLink domains joined through the host (e.g. NVLink-bridged pairs in one PCIe box).
    "pcie4": replace(INTRA_PRESETS["pcie4"], name="PCIe Gen4 x16 through the host"),
    "pcie5": replace(INTRA_PRESETS["pcie5"], name="PCIe Gen5 x16 through the host"),
}
DEFAULT_FABRIC = "ib-ndr"


@dataclass(frozen=True)
class CommPrediction:
    """A predicted collective: its time and bandwidths, the algorithm chosen and where B came
    from."""

    op: str
    bytes: int
    gpus: int
    time_s: float
    busbw_GBps: float
    algbw_GBps: float
    algorithm: str  # ring, tree, hierarchical, direct, measured
    source: str  # "preset: ..." or "calibrated: FILE"
    calibrated: bool
    gpus_per_node: int = 8
    candidates: dict[str, float] = field(default_factory=dict)  # algorithm -> time_s
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["notes"] = list(self.notes)
        return out


# ---------------------------------------------------------------- parsing and validation

_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgtp]?)(i?)(b?)\s*$",
                      re.IGNORECASE)
_POW = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_bytes(text: str) -> int:
    """'256MiB' (binary), '1GB' (decimal), '4096', '1.5e9'; a bare 'G' / 'M' / 'K' is binary."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise InputError(f"size {text!r} is not a byte count: use e.g. 4096, 1.5e9, 256MiB, 1GB")
    number, prefix, binary, b = m.groups()
    power = _POW[prefix.lower()]
    base = 1000 if (b and not binary and prefix) else 1024
    value = float(number) * base**power
    if not value > 0:
        raise InputError(f"size {text!r} must be more than 0 bytes")
    if value > MAX_BYTES:
        raise InputError(f"size {text!r} is over 1 PB: use e.g. 256MiB or 4GiB")
    return max(1, round(value))


def _canonical_op(op: str) -> str:
    key = op.strip().lower().replace("_", "-")
    key = {"allreduce": "all-reduce", "allgather": "all-gather", "reducescatter": "reduce-scatter",
           "alltoall": "all-to-all", "all2all": "all-to-all", "sendrecv": "p2p",
           "send-recv": "p2p"}.get(key, key)
    if key not in OPS:
        raise InputError(f"unknown collective {op!r}: use one of {', '.join(OPS)}")
    return key


def _validate(op: str, nbytes: int, gpus: int, gpus_per_node: int) -> None:
    if nbytes <= 0:
        raise InputError(f"size {nbytes} must be more than 0 bytes")
    if op == "p2p" and gpus != 2:
        raise InputError(f"p2p takes exactly --gpus 2 (a sender and a receiver), not {gpus}")
    if gpus < 2:
        raise InputError(f"--gpus {gpus}: a collective needs at least 2 ranks")
    check_gpus(gpus)
    if gpus_per_node < 1:
        raise InputError(f"--gpus-per-node {gpus_per_node} must be at least 1")
    check_gpus(gpus_per_node, "gpus-per-node")
    if gpus > gpus_per_node and gpus % gpus_per_node:
        low = gpus // gpus_per_node * gpus_per_node
        near = " or ".join(str(n) for n in (low, low + gpus_per_node) if n >= 2)
        raise InputError(f"--gpus {gpus} is not a whole number of {gpus_per_node}-GPU nodes: "
                         f"use {near} (or change --gpus-per-node)")


def _spec(gpu: str) -> GpuSpec:
    spec = find_spec(gpu)
    if spec is None:
        raise UnknownGpuError(f"unknown GPU {gpu!r}: use one of {', '.join(known_names())}")
    return spec


def _fabric(fabric: str | None) -> Link:
    key = (fabric or DEFAULT_FABRIC).strip().lower()
    if key not in FABRIC_PRESETS:
        raise InputError(f"unknown fabric {fabric!r}: use one of {', '.join(FABRIC_PRESETS)}")
    return FABRIC_PRESETS[key]


def intra_link(spec: GpuSpec, ranks_in_node: int) -> tuple[Link, list[str]]:
    """The GPU's NVLink (its datasheet figure) when it has one, else its PCIe generation."""
    notes: list[str] = []
    bridged = spec.nvlink_bytes_per_s > 0 and any(w in spec.key for w in ("pcie", "nvl", "rtx"))
    if spec.nvlink_bytes_per_s > 0 and not (bridged and ranks_in_node > 2):
        for link in INTRA_PRESETS.values():
            if link.key.startswith("nvlink") and math.isclose(2 * link.datasheet_Bps,
                                                              spec.nvlink_bytes_per_s):
                return link, notes
        total = spec.nvlink_bytes_per_s
        return Link("gpu-link", f"GPU link {total / GB:,.0f} GB/s ({spec.name})", total / 2,
                    NVLINK_EFFICIENCY, ALPHA_NVLINK_S,
                    f"{spec.source}: {total / GB:,.0f} GB/s"), notes
    if bridged:
        notes.append(f"{spec.name}: NVLink bridges join pairs only; {ranks_in_node} ranks per node "
                     "cross PCIe")
    gen = re.search(r"gen\s*(\d)", spec.pcie.lower())
    key = f"pcie{gen.group(1)}" if gen and f"pcie{gen.group(1)}" in INTRA_PRESETS else "pcie4"
    if not gen:
        notes.append(f"{spec.name}: PCIe generation not in the datasheet row; assumed Gen4 x16")
    return INTRA_PRESETS[key], notes


# ---------------------------------------------------------------- the model


@dataclass(frozen=True)
class Topology:
    """Bandwidths (bytes/s, per rank) and latencies the formulas use."""

    n: int  # ranks
    k: int  # ranks per node (NVLink domain)
    b_intra: float
    alpha_intra: float
    b_rail: float  # one fabric rail, per GPU
    alpha_inter: float
    base_s: float = BASE_LATENCY_S

    @property
    def nodes(self) -> int:
        return max(1, self.n // self.k) if self.n > self.k else 1

    @property
    def b_ring(self) -> float:
        """A ring's per-rank bandwidth: NVLink inside a node; across nodes also capped by the node's
        rails (k of them) sharing the ring traffic that leaves the node."""
        return self.b_intra if self.nodes == 1 else min(self.b_intra, self.k * self.b_rail)

    def ring_latency(self, passes: int) -> float:
        """``passes`` (N-1)-step sweeps of the ring; of each, M-1 steps cross nodes."""
        inter = passes * (self.nodes - 1)
        return (passes * (self.n - 1) - inter) * self.alpha_intra + inter * self.alpha_inter

    @property
    def alpha(self) -> float:
        return self.alpha_intra if self.nodes == 1 else max(self.alpha_intra, self.alpha_inter)


def ring_allreduce(s: float, t: Topology) -> float:
    n = t.n
    return t.base_s + 2 * (n - 1) / n * s / t.b_ring + t.ring_latency(2)


def tree_allreduce(s: float, t: Topology) -> float:
    latency = 2 * ((t.k - 1) * t.alpha_intra + math.log2(t.nodes) * t.alpha_inter)
    return t.base_s + 2 * s / t.b_ring + latency


def hierarchical_allreduce(s: float, t: Topology) -> float:
    """Reduce-scatter over NVLink, all-reduce of each 1/K shard over the fabric (each GPU on its own
    rail, across the M nodes), all-gather over NVLink."""
    k, m = t.k, t.nodes
    intra = 2 * ((k - 1) / k * s / t.b_intra + (k - 1) * t.alpha_intra)
    inter = 2 * (m - 1) / m * (s / k) / t.b_rail + 2 * (m - 1) * t.alpha_inter
    return t.base_s + intra + inter


def ring_gather(s: float, t: Topology) -> float:
    """All-gather (S = gathered output) and reduce-scatter (S = full input) move the same bytes."""
    n = t.n
    return t.base_s + (n - 1) / n * s / t.b_ring + t.ring_latency(1)


def broadcast(s: float, t: Topology) -> float:
    return t.base_s + s / t.b_ring + t.ring_latency(1)


def all_to_all(s: float, t: Topology) -> float:
    n, k = t.n, t.k
    if t.nodes == 1:
        wire = (n - 1) / n * s / t.b_intra
    else:  # the (N-K)/N that leaves the node goes over each GPU's own rail, the rest over NVLink
        wire = max((k - 1) / n * s / t.b_intra, (n - k) / n * s / t.b_rail)
    return t.base_s + wire + math.ceil(math.log2(n)) * t.alpha


def p2p(s: float, t: Topology) -> float:
    if t.k >= 2:
        return t.base_s + s / t.b_intra + t.alpha_intra
    return t.base_s + s / t.b_rail + t.alpha_inter


def nvls_allreduce(s: float, t: Topology) -> float:
    """NVLink SHARP inside one node: the ring's bytes at its rate x NVLS_SPEEDUP, and two latency
    steps (reduce in the switch, multicast the result) instead of 2(N-1)."""
    n = t.n
    return t.base_s + 2 * (n - 1) / n * s / (t.b_intra * nvls_speedup(n)) + 2 * t.alpha_intra


def candidates(op: str, s: float, t: Topology, nvls: bool = False) -> dict[str, float]:
    """Every algorithm that applies, with its time; the fastest is the prediction. ``nvls``: the
    caller checked that NVLink SHARP is available (one node, NVSwitch NVLink 4/5)."""
    if op == "all-reduce":
        out = {"ring": ring_allreduce(s, t), "tree": tree_allreduce(s, t)}
        if t.nodes > 1:
            out["hierarchical"] = hierarchical_allreduce(s, t)
        if nvls:
            out["nvls"] = nvls_allreduce(s, t)
        return out
    if op in ("all-gather", "reduce-scatter"):
        return {"ring": ring_gather(s, t)}
    if op == "broadcast":
        return {"ring": broadcast(s, t)}
    if op == "all-to-all":
        return {"direct": all_to_all(s, t)}
    return {"direct": p2p(s, t)}


def steps(op: str, n: int) -> float:
    """Ring latency steps of one call, used to split a fitted intercept into t0 + steps x alpha."""
    return {"all-reduce": 2 * (n - 1), "all-to-all": math.ceil(math.log2(n)),
            "p2p": 1}.get(op, n - 1)


# ---------------------------------------------------------------- calibration


@dataclass(frozen=True)
class Curve:
    """One measured op: bytes, seconds, busbw (bytes/s) per size, ascending."""

    op: str
    world: int
    sizes: tuple[int, ...]
    times: tuple[float, ...]
    busbw: tuple[float, ...]


@dataclass(frozen=True)
class Fit:
    """time = intercept + factor x S / bandwidth, fitted on one curve (relative least squares)."""

    op: str
    world: int
    intercept_s: float
    bandwidth: float


def load_curves(path: str) -> tuple[dict[str, Curve], str]:
    """The "collectives" section of a gpudoctor bench JSON, keyed by our op names; and its GPU."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"--busbw-table {path}: cannot read it as JSON "
                         f"({exc.__class__.__name__}); give a gpudoctor bench JSON with a "
                         "'collectives' section") from exc
    coll = data.get("collectives") if isinstance(data, dict) else None
    if not isinstance(coll, dict) or not isinstance(coll.get("curves"), dict):
        raise InputError(f"--busbw-table {path}: no 'collectives' -> 'curves' section; run "
                         "gpudoctor bench on 2+ GPUs to measure one")
    world = int(coll.get("world_size", 0))
    curves: dict[str, Curve] = {}
    for op, bench_name in _BENCH_NAMES.items():
        rows = sorted(coll["curves"].get(bench_name) or [], key=lambda r: r["bytes"])
        rows = [r for r in rows if r.get("time_s", 0) > 0 and r.get("bytes", 0) > 0]
        if len(rows) >= 2 and world >= 2:
            curves[op] = Curve(op, world, tuple(int(r["bytes"]) for r in rows),
                               tuple(float(r["time_s"]) for r in rows),
                               tuple(float(r["busbw_Bps"]) for r in rows))
    if not curves:
        raise InputError(f"--busbw-table {path}: its collectives hold no usable curve (need 2+ "
                         f"sizes of {', '.join(_BENCH_NAMES.values())})")
    return curves, str(coll.get("gpu") or data.get("gpu") or "")


def interpolate_time(curve: Curve, nbytes: int) -> float:
    """Measured busbw vs size, log-log interpolated; below the range the smallest size's time (the
    latency floor), above it the largest size's busbw."""
    sizes, bus = curve.sizes, curve.busbw
    if nbytes <= sizes[0]:
        return curve.times[0]
    if nbytes >= sizes[-1]:
        busbw = bus[-1]
    else:
        i = next(j for j in range(1, len(sizes)) if sizes[j] >= nbytes)
        x0, x1 = math.log(sizes[i - 1]), math.log(sizes[i])
        y0, y1 = math.log(bus[i - 1]), math.log(bus[i])
        busbw = math.exp(y0 + (y1 - y0) * (math.log(nbytes) - x0) / (x1 - x0))
    return nbytes * bus_factor(curve.op, curve.world) / busbw


def fit_curve(curve: Curve) -> Fit:
    """Least squares of time = c + (factor x S) / B over every size, each row divided by its
    measured time so that 1 KiB and 4 GiB weigh the same (relative error)."""
    f = bus_factor(curve.op, curve.world)
    # [1/t, x/t] . [c, 1/B] = 1
    rows = [(1 / t, f * s / t) for s, t in zip(curve.sizes, curve.times)]
    a11 = sum(r[0] * r[0] for r in rows)
    a12 = sum(r[0] * r[1] for r in rows)
    a22 = sum(r[1] * r[1] for r in rows)
    b1, b2 = sum(r[0] for r in rows), sum(r[1] for r in rows)
    det = a11 * a22 - a12 * a12
    c, inv_b = (b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det
    if inv_b <= 0:  # a flat curve: fall back to the best measured busbw
        return Fit(curve.op, curve.world, max(c, 0.0), max(curve.busbw))
    return Fit(curve.op, curve.world, max(c, 0.0), 1 / inv_b)


def _calibrated_topology(op: str, curves: dict[str, Curve], topo: Topology) -> tuple[Topology, str]:
    fits = {name: fit_curve(c) for name, c in curves.items()}
    fit = fits.get(op)
    if fit is None:  # all-to-all, broadcast, p2p: not measured by gpudoctor bench
        b = statistics.median(f.bandwidth for f in fits.values())
        base = statistics.median(max(0.0, f.intercept_s - steps(f.op, f.world) * topo.alpha_intra)
                                 for f in fits.values())
        note = (f"{op} not in the table: intra-node B = median fitted busbw of "
                f"{', '.join(fits)} ({b / GB:,.0f} GB/s)")
    else:
        b = fit.bandwidth
        base = max(0.0, fit.intercept_s - steps(op, fit.world) * topo.alpha_intra)
        note = (f"fitted on the {fit.world}-GPU {op} curve: B {b / GB:,.0f} GB/s, "
                f"fixed cost {base * 1e6:,.1f} us + {topo.alpha_intra * 1e6:.1f} us per step")
    return replace(topo, b_intra=b, base_s=base), note


# ---------------------------------------------------------------- entry point


def predict(op: str, nbytes: int, *, gpus: int, gpus_per_node: int = 8, gpu: str = "h100-sxm",
            fabric: str | None = None, busbw_table: str | None = None,
            interpolate: bool = True, nvls: bool = False) -> CommPrediction:
    """Predicted time of one collective of ``nbytes`` (nccl-tests size convention) on ``gpus``
    ranks.

    With ``busbw_table``: the op measured at this GPU count in one node is read off its curve
    (``interpolate=False`` uses the fitted alpha-beta model instead, as other counts do).
    ``nvls``: NVLink SHARP is enabled (NCCL_NVLS_ENABLE): all-reduce in one node of an NVSwitch
    NVLink 4/5 system may take it; elsewhere it is said not to apply."""
    op = _canonical_op(op)
    _validate(op, nbytes, gpus, gpus_per_node)
    spec = _spec(gpu)
    link = _fabric(fabric)
    k = min(gpus_per_node, gpus)
    intra, notes = intra_link(spec, k)
    topo = Topology(n=gpus, k=k, b_intra=intra.bandwidth, alpha_intra=intra.alpha_s,
                    b_rail=link.bandwidth, alpha_inter=link.alpha_s)
    if topo.nodes > 1:
        if fabric is None:
            notes.append(f"no --fabric: assumed {link.key} ({link.name})")
        source = (f"preset: {intra.name} x {intra.efficiency:.2f}, {link.name} x "
                  f"{link.efficiency:.2f}, {topo.nodes} nodes of {k}")
    else:
        if fabric is not None:
            notes.append(f"--fabric {fabric} unused: all {gpus} GPUs are in one node")
        source = f"preset: {intra.name} x {intra.efficiency:.2f} ({intra.source})"
    if busbw_table:
        curves, table_gpu = load_curves(busbw_table)
        if table_gpu and find_spec(table_gpu) is not spec:
            notes.append(f"table measured on {table_gpu}, --gpu is {spec.name}")
        curve = curves.get(op)
        if interpolate and curve is not None and curve.world == gpus and topo.nodes == 1:
            seconds = interpolate_time(curve, nbytes)
            return _result(op, nbytes, gpus, k, {"measured": seconds},
                           f"calibrated: {busbw_table}", True,
                           notes + [f"interpolated on the measured {gpus}-GPU {op} curve"])
        topo, fit_note = _calibrated_topology(op, curves, topo)
        notes.append(fit_note)
        source = f"calibrated: {busbw_table}"
    use_nvls = nvls and op == "all-reduce" and topo.nodes == 1 and intra.key in NVLS_LINKS
    if nvls and not use_nvls:
        notes.append("--nvls does not apply: NVLink SHARP is all-reduce only, inside one node, on "
                     f"NVSwitch NVLink 4/5 ({intra.name}, {topo.nodes} node(s))")
    elif use_nvls:
        notes.append(f"NVLS at {nvls_speedup(gpus):.2f}x the ring's bus bandwidth for {gpus} ranks "
                     "(NCCL maintainers' and users' figures, not measured here)")
    return _result(op, nbytes, gpus, k, candidates(op, float(nbytes), topo, use_nvls), source,
                   source.startswith("calibrated"), notes)


def _result(op: str, nbytes: int, gpus: int, k: int, times: dict[str, float], source: str,
            calibrated: bool, notes: list[str]) -> CommPrediction:
    algorithm = min(times, key=lambda name: times[name])
    seconds = times[algorithm]
    algbw = nbytes / seconds
    return CommPrediction(op=op, bytes=nbytes, gpus=gpus, time_s=seconds,
                          busbw_GBps=algbw * bus_factor(op, gpus) / GB, algbw_GBps=algbw / GB,
                          algorithm=algorithm, source=source, calibrated=calibrated,
                          gpus_per_node=k, candidates=dict(times), notes=tuple(notes))


if __name__ == "__main__":  # demo: the ring's mild growth with N at 256 MiB, then two nodes
    for n in (2, 4, 8):
        p = predict("all-reduce", 256 * 2**20, gpus=n, gpu="h100-sxm")
        print(
            f"{n:>3} GPUs  {p.time_s * 1e3:7.3f} ms  busbw {p.busbw_GBps:6.1f} GB/s  {p.algorithm}")
    p = predict("all-reduce", 256 * 2**20, gpus=16, gpu="h100-sxm", fabric="ib-ndr")
    print(f" 16 GPUs  {p.time_s * 1e3:7.3f} ms  busbw {p.busbw_GBps:6.1f} GB/s  {p.algorithm}")
