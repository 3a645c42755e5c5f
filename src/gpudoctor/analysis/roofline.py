"""Roofline placement of every kernel and op against the ceilings, and the step's MFU.

Per device event: its share of the launching op's FLOPs and minimum bytes (analysis/opcost.py:
lower bounds of the work). An op that launched several kernels splits its cost by duration; a
GEMM, attention or convolution gives all of it to its matrix kernels (the split-K reduction, the
layout transform or the memset beside them did other work, of unknown size, and stays unplaced).
Per kernel name and per op name: achieved FLOP/s and B/s, arithmetic intensity, the roof it sits
under (tensor cores for its dtype, CUDA-core fp32 FMA for SIMT GEMMs, the vector rate for
everything else), its efficiency against min(roof, bandwidth x intensity), and what bounds it:

    latency  kernels averaging under 10 us at under 20% of their attainable rate
    memory   intensity below the ridge point (roof / bandwidth)
    compute  intensity above it
    unknown  no event of it placed

Nothing is drawn above its roof. The cost model only undercounts, so an event that still beats its
roof by more than ROOF_TOLERANCE did not run against that roof: a small working set served from L2
(data the previous kernel left there, writes absorbed by the write-back cache) moves faster than
HBM allows, and an input passed twice (x * x, addcmul_(v, g, g)) is read once, which recorded
shapes cannot tell. Such events are left unplaced (``event_placed`` False) rather than drawn
against a roof they did not run under. Not against an L2 roof either: the datasheet ceilings have
none, and a measured L2 rate would not be the roof either, as which share of the traffic came from
L2 and which from HBM is not in the trace. ``over_roof_fraction`` says how much kernel time that
was. NCCL kernels are never placed: the links bound them, and neither roof is drawn for them.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpudoctor.analysis.breakdown import durations_in_steps
from gpudoctor.analysis.op_costs import OpCosts
from gpudoctor.analysis.opcost import element_type_of_kernel, op_cost
from gpudoctor.analysis.steps import Steps
from gpudoctor.core.arrays import distinct
from gpudoctor.hardware.ceilings import Ceilings
from gpudoctor.trace.kernels import TF32_NAME, Kind
from gpudoctor.trace.model import Trace

LATENCY_KERNEL_NS = 10_000
LATENCY_EFFICIENCY = 0.2
# an event placed above its roof by more than this is left unplaced (module docstring): room for
# a measured ceiling a little under what a kernel reaches, not for a cost model that overcounts
ROOF_TOLERANCE = 1.1
_MATRIX = (Kind.GEMM_TC, Kind.GEMM_SIMT, Kind.ATTENTION, Kind.CONV)
DTYPES = ("", "fp32", "tf32", "bf16", "fp16", "fp8", "fp64", "int8")
_NO_ROOF = (Kind.NCCL,)  # bound by the links, not by HBM or the SMs: never placed


class Placement(msgspec.Struct, frozen=True):
    """One point of the roofline: a kernel name (or an op name) aggregated over the steps."""

    name: str
    kind: str  # Kind name
    dtype: str
    count_per_step: float
    time_ms_per_step: float
    flops: float  # per step, of its placed events
    bytes: float  # per step, of its placed events
    achieved_flops: float  # FLOP/s over the time of its placed events
    achieved_bytes_per_s: float
    intensity: float  # FLOP/byte (0 when bytes unknown)
    roof_flops: float  # its events' roofs, FLOP-weighted (harmonic) where they differ
    attainable_flops: float
    efficiency: float  # 0..ROOF_TOLERANCE: against attainable (bandwidth efficiency when no FLOPs)
    bound: str  # latency | memory | compute | unknown


class RooflineResult(msgspec.Struct, frozen=True, eq=False):
    kernels: tuple[Placement, ...]  # by time, largest first
    ops: tuple[Placement, ...]
    model_flops_per_step: float  # matrix / attention / conv FLOPs
    mfu: float  # model FLOPs / (step time x 16-bit matrix roof)
    placed_fraction: float  # share of kernel time placed on the roofline
    # per device event (aligned with trace.device)
    # the cost model's share (also of events left unplaced as over their roof)
    event_flops: np.ndarray
    event_bytes: np.ndarray
    event_dtype: np.ndarray  # index into DTYPES
    event_in_steps_ns: np.ndarray
    op_costs: OpCosts  # host op index -> cost
    event_placed: np.ndarray  # bool: on the roofline (a known cost, not over its roof)
    over_roof_fraction: float  # share of kernel time with a known cost, left unplaced above its roof


def roofline(trace: Trace, steps: Steps, ceilings: Ceilings) -> RooflineResult:
    dev = trace.device
    n_steps = max(len(steps), 1)
    in_steps = durations_in_steps(trace, steps)
    costs = _op_costs(trace, distinct(dev.op[dev.op >= 0]))
    flops, nbytes, dtype = _event_shares(trace, costs)
    dtype = _tf32_where_tensor_cores(dev.kind, dtype, trace)
    known = (flops > 0) | (nbytes > 0)
    weight = np.divide(in_steps, dev.dur, out=np.zeros(len(dev)), where=dev.dur > 0)
    matrix = np.isin(dev.kind, [int(k) for k in _MATRIX])
    model_flops = float((flops * weight)[matrix].sum()) / n_steps
    step_s = steps.total_ns / 1e9 / n_steps
    # no roofs (a card the table does not know): the work is known, nothing is placed
    if not ceilings.available:
        placed = np.zeros(len(dev), bool)
        kernels: tuple[Placement, ...] = ()
        ops: tuple[Placement, ...] = ()
        mfu = 0.0
    else:
        roofs = _event_roofs(dev.kind, dtype, ceilings)
        placed = known & ~_over_roof(flops, nbytes, dev.dur, roofs, ceilings)
        f_in, b_in = np.where(placed, flops * weight, 0.0), np.where(placed, nbytes * weight, 0.0)
        kernels = _aggregate(trace, dev.name, f_in, b_in, in_steps, placed, dtype, roofs,
                             ceilings, n_steps)
        op_names = np.where(dev.op >= 0, trace.host.name[np.maximum(dev.op, 0)], -1)
        ops = _aggregate(trace, op_names, f_in, b_in, in_steps, placed, dtype, roofs,
                         ceilings, n_steps)
        mfu = model_flops / (step_s * ceilings.best_matrix_flops) if step_s > 0 else 0.0
    total = max(in_steps.sum(), 1)
    return RooflineResult(
        kernels=kernels,
        ops=ops,
        model_flops_per_step=model_flops,
        mfu=mfu,
        placed_fraction=float(in_steps[placed].sum() / total),
        event_flops=flops,
        event_bytes=nbytes,
        event_dtype=dtype,
        event_in_steps_ns=in_steps,
        op_costs=costs,
        event_placed=placed,
        over_roof_fraction=float(in_steps[known & ~placed].sum() / total),
    )


def _op_costs(trace: Trace, ops: np.ndarray) -> OpCosts:
    """Cost of each op; ops repeated step after step with the same arguments are costed once."""
    host, dev = trace.host, trace.device
    if not len(ops):
        return OpCosts(ops, np.zeros(0, np.int32), [])
    arg = trace.op_arg_ids(ops)
    values = trace.op_arg_values
    # the profiler records no dtype for a TensorList's tensors: the op's first kernel names it
    list_types: dict[str, int] = {"": 0}
    list_type = np.zeros(len(ops), np.int64)
    if len(dev):
        launched = np.flatnonzero((dev.op >= 0) & (dev.cat == 0))
        first_ops, first = np.unique(dev.op[launched], return_index=True)
        kernel_names, kernel_at = np.unique(dev.name[launched[first]], return_inverse=True)
        codes = np.array([list_types.setdefault(element_type_of_kernel(trace.strings[k]),
                                                len(list_types))
                          for k in kernel_names.tolist()], np.int64)
        tensor_list = np.array([b"TensorList" in bytes(v.input_type) for v in values] + [False])
        with_kernel = np.searchsorted(ops, first_ops)  # every op with a kernel is among ops
        list_type[with_kernel] = np.where(tensor_list[arg[with_kernel]],
                                          codes[kernel_at.reshape(-1)], 0)
    type_names = list(list_types)
    keys = np.stack((host.name[ops].astype(np.int64), arg.astype(np.int64), list_type))
    keys_seen, first_op, which = np.unique(keys, axis=1, return_index=True, return_inverse=True)
    table = []
    for (name, k, code), i in zip(keys_seen.T.tolist(), ops[first_op].tolist()):
        flops = values[k].flops if k >= 0 and values[k].flops is not None else -1.0
        table.append(op_cost(trace.strings[name], trace.input_dims(i), trace.input_types(i),
                             np.nan if flops < 0 else flops, trace.input_strides(i),
                             trace.concrete_inputs(i), type_names[code]))
    return OpCosts(ops, which.reshape(-1).astype(np.int32), table)


def _event_shares(trace: Trace, costs: OpCosts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    dev = trace.device
    n_ops = len(costs)
    # one slot per op with a cost, the last for events without one
    op_flops = np.zeros(n_ops + 1)
    op_bytes = np.zeros(n_ops + 1)
    op_dtype = np.zeros(n_ops + 1, np.int8)
    op_matrix = np.zeros(n_ops + 1, bool)
    table = costs.table
    op_flops[:n_ops] = np.array([c.flops for c in table], np.float64)[costs.which] if table else 0.0
    op_bytes[:n_ops] = np.array([c.bytes for c in table], np.float64)[costs.which] if table else 0.0
    op_dtype[:n_ops] = np.array([DTYPES.index(c.dtype) if c.dtype in DTYPES else 0 for c in table],
                                np.int8)[costs.which] if table else 0
    op_matrix[:n_ops] = np.array([c.matrix for c in table], bool)[costs.which] if table else False
    slot = costs.slots(dev.op)
    op = np.where(slot >= 0, slot, n_ops)
    del slot
    dur = dev.dur.astype(np.float64)
    # memcpy / memset carry their own bytes (a host copy is bound by its link, far under HBM);
    # kernels take a duration share of their op's cost, a GEMM / attention / convolution's only
    # its matrix kernels
    is_kernel = dev.cat == 0
    sharing = is_kernel & ~np.isin(dev.kind, [int(k) for k in _NO_ROOF])
    sharing &= ~op_matrix[op] | np.isin(dev.kind, [int(k) for k in _MATRIX])
    op_time = np.bincount(op[sharing], weights=dur[sharing], minlength=n_ops + 1)
    share = np.divide(dur, op_time[op], out=np.zeros(len(dev)), where=op_time[op] > 0) * sharing
    flops = op_flops[op] * share
    # a device-to-device copy reads its bytes and writes them: twice through HBM (not a peer copy,
    # whose other half is the other GPU's)
    dtod = np.flatnonzero(trace.names_matching(lambda s: "dtod" in s.lower()))
    copied = dev.nbytes.astype(np.float64) * np.where(
        np.isin(dev.name, dtod) & (dev.kind == Kind.MEMCPY_DTOD), 2, 1)
    nbytes = np.where(is_kernel, op_bytes[op] * share, copied)
    return flops, nbytes, op_dtype[op]


def _event_roofs(kind: np.ndarray, dtype: np.ndarray, ceilings: Ceilings) -> np.ndarray:
    """The FLOP/s roof of each device event (its kind and dtype)."""
    table = np.array([[roof_for(k, d, ceilings) for d in DTYPES] for k in Kind])
    return table[kind.astype(np.int64), dtype.astype(np.int64)]


def _over_roof(flops: np.ndarray, nbytes: np.ndarray, dur_ns: np.ndarray, roofs: np.ndarray,
               ceilings: Ceilings) -> np.ndarray:
    """Events faster than their roof allows for the work the cost model gave them (module
    docstring)."""
    seconds = dur_ns.astype(np.float64) / 1e9
    ideal = np.maximum(np.divide(flops, roofs, out=np.zeros(len(flops)), where=roofs > 0),
                       nbytes / ceilings.hbm_bytes_per_s)
    return (seconds > 0) & (ideal > ROOF_TOLERANCE * seconds)


def _tf32_where_tensor_cores(kind: np.ndarray, dtype: np.ndarray, trace: Trace) -> np.ndarray:
    """fp32 inputs to a tensor-core GEMM run as TF32, and so does an fp32 convolution one of whose
    kernels names TF32 (cuDNN's default on Ampere and later: ``sm90_xmma_..._tf32f32_...``): all
    its convolution kernels, the layout transforms that share its cost included, are drawn against
    the TF32 roof, not the fp32 one they ran far above."""
    out = dtype.copy()
    fp32, tf32 = DTYPES.index("fp32"), DTYPES.index("tf32")
    out[(kind == Kind.GEMM_TC) & (dtype == fp32)] = tf32
    conv = (kind == Kind.CONV) & (dtype == fp32)
    if conv.any():
        named = trace.names_matching(lambda s: TF32_NAME.search(s) is not None)[trace.device.name]
        ops = trace.device.op[conv & named]
        out[conv & np.isin(trace.device.op, ops[ops >= 0])] = tf32
    return out


def _aggregate(
    trace: Trace,
    keys: np.ndarray,
    flops: np.ndarray,
    nbytes: np.ndarray,
    time_ns: np.ndarray,
    placed: np.ndarray,
    dtype: np.ndarray,
    roofs: np.ndarray,
    ceilings: Ceilings,
    n_steps: int,
) -> tuple[Placement, ...]:
    dev = trace.device
    live = (time_ns > 0) & (keys >= 0)
    if not live.any():
        return ()
    uniq, inverse = np.unique(keys[live], return_inverse=True)
    on = placed[live]
    sums = {
        "time": np.bincount(inverse, weights=time_ns[live]),
        "placed_time": np.bincount(inverse, weights=time_ns[live] * on),
        "flops": np.bincount(inverse, weights=flops[live]),
        "bytes": np.bincount(inverse, weights=nbytes[live]),
        # FLOPs over roof, summed: the time the FLOPs take at their own roofs
        "roof_time": np.bincount(inverse,
                                 weights=np.divide(flops[live], roofs[live], out=np.zeros(on.size),
                                                             where=roofs[live] > 0)),
        "count": np.bincount(inverse),
    }
    # the kind and dtype that hold most of each group's time
    kinds = _dominant(inverse, dev.kind[live], time_ns[live], len(uniq))
    dtypes = _dominant(inverse, dtype[live], time_ns[live], len(uniq))
    points = [
        _place(trace.strings[int(key)], Kind(int(kinds[g])), DTYPES[int(dtypes[g])], g, sums,
               ceilings, n_steps)
        for g, key in enumerate(uniq.tolist())
    ]
    return tuple(sorted(points, key=lambda p: -p.time_ms_per_step))


def _dominant(groups: np.ndarray, values: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    width = int(values.max()) + 1 if len(values) else 1
    table = np.zeros((n, width))
    np.add.at(table, (groups, values.astype(np.int64)), weights)
    return table.argmax(axis=1)


def roof_for(kind: Kind, dtype: str, ceilings: Ceilings) -> float:
    if kind == Kind.GEMM_SIMT:
        return ceilings.matrix("fp32")
    if kind in _MATRIX:
        return ceilings.matrix(dtype or "fp32")
    return ceilings.vector_flops


def _place(
    name: str, kind: Kind, dtype: str, g: int, sums: dict[str, np.ndarray], ceilings: Ceilings,
    n_steps: int
) -> Placement:
    time_s = sums["placed_time"][g] / 1e9
    flops, nbytes, count = sums["flops"][g], sums["bytes"][g], int(sums["count"][g])
    achieved = flops / time_s if time_s > 0 else 0.0
    bandwidth = nbytes / time_s if time_s > 0 else 0.0
    roof = roof_for(kind, dtype, ceilings)
    if flops > 0 and sums["roof_time"][g] > 0:
        # events under different roofs (an op's bf16 and fp32 GEMMs): the roof their FLOPs saw
        mixed = flops / sums["roof_time"][g]
        roof = roof if abs(mixed - roof) <= 1e-9 * roof else mixed
    intensity = flops / nbytes if nbytes > 0 else 0.0
    attainable = min(roof, ceilings.hbm_bytes_per_s * intensity) if nbytes > 0 else roof
    if flops > 0 and attainable > 0:
        efficiency = achieved / attainable
    elif nbytes > 0:
        efficiency = bandwidth / ceilings.hbm_bytes_per_s
    else:
        efficiency = 0.0
    mean_ns = sums["time"][g] / max(count, 1)
    if flops == 0 and nbytes == 0:
        bound = "unknown"
    elif mean_ns < LATENCY_KERNEL_NS and efficiency < LATENCY_EFFICIENCY:
        bound = "latency"
    elif nbytes > 0 and intensity < roof / ceilings.hbm_bytes_per_s:
        bound = "memory"
    else:
        bound = "compute"
    return Placement(
        name=name,
        kind=kind.name,
        dtype=dtype,
        count_per_step=count / n_steps,
        time_ms_per_step=sums["time"][g] / 1e6 / n_steps,
        flops=flops / n_steps,
        bytes=nbytes / n_steps,
        achieved_flops=achieved,
        achieved_bytes_per_s=bandwidth,
        intensity=intensity,
        roof_flops=roof,
        attainable_flops=attainable,
        efficiency=float(min(efficiency, 9.99)),
        bound=bound,
    )
