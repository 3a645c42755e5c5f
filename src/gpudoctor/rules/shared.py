"""Helpers that more than one rule reads: which events are fp32 matrix work, a per-sample
loop, a naive attention pattern; the memory-pressure line; which idle another finding owns; and
the host's time priced by the operators a fix removes.
No rule imports another rule: what two rules share lives here (or in rules/common.py)."""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import autograd_nodes, launch_threads
from gpudoctor.analysis.observer import step_boundary_ms
from gpudoctor.analysis.roofline import DTYPES
from gpudoctor.core.arrays import distinct, median, union
from gpudoctor.rules.common import SDPA_MATH_OP, inside_op_named
from gpudoctor.trace.kernels import MATRIX_KINDS_FOR_ATTENTION, TF32_NAME, Kind
from gpudoctor.trace.model import HostCat, Trace

# An unprofiled step longer than the profiled one by at least this share holds waits the window did
# not see, and these findings take them (rules/calibrate.py UNSEEN_MS says why). Under it the gap is
# the spread between two timings of one step: 9% and 17% on two programs whose steps hold no such
# waits, 200% on one that does (benchmarks/BENCHMARKS-twins.md "Evidence moved from the source: rule
# pricing").
UNSEEN_MIN_SHARE = 0.15
# A loader that stalls more often than the window saw; setup calls (cuDNN autotuning, recompiles)
# for shapes the window did not meet, which each step timed outside it can meet
# (benchmarks/BENCHMARKS-replay.md "The prior"); op-free host work (Python, I/O) that ran longer
# outside the window, on the thread the fix takes it off (benchmarks/BENCHMARKS-replay.md "Host
# work the window did not see").
UNSEEN_TAKEN_BY = frozenset({"input-pipeline", "dynamic-shapes", "host-blocking-work"})

# reserved share of the card above which allocator churn is memory pressure (that finding owns it)
PRESSURE_FRACTION = 0.90

# GPU busy share of the step above which the GPU, not the host, sets the step's pace
# (rules/calibrate.py "gpu-step-share" and "host-step-share", rules/host_sync.py)
GPU_BOUND_SHARE = 0.8

# per-sample-loop (and small-gemm, which leaves such a loop to it)
MAX_VECTOR_DIM = 1
MIN_REPEATS_PER_STEP = 16
MAX_KERNELS_BETWEEN = 8  # median kernels from one matrix-vector product of the loop to the next

# naive-attention (and unfused-elementwise, which leaves its events to it)
MIN_SEQ = 128

# ... and "fp32 operands on CUDA cores": cuBLAS's "volta_sgemm_128x64_nn", "ampere_sgemm_...",
# CUTLASS's "..._simt_sgemm_..." ("sgemm" is single-precision SIMT; the tensor-core kernels read
# "s884gemm", "s1688gemm", "s16816gemm").
_SGEMM_NAME = re.compile(r"(?:^|_)sgemm_")  # not "cublasGemmSmallN..." (cubla-sgemm-small)
# Memory-efficient attention in fp32: "fmha_cutlassF_f32_...", "fmha_cutlassB_f32_..."
_FP32_ATTENTION_NAME = re.compile(r"fmha_cutlass[fb]_f32|_f32_aligned")
# cuBLAS's split-K reduction sums partial tiles of whatever GEMM ran before it (fp32 SIMT
# included): it is no evidence of TF32.
_SPLIT_K = re.compile(r"splitkreduce")


def _names_matching(a: Analysis, pattern: re.Pattern[str]) -> np.ndarray:
    names = a.trace.strings
    uniq = distinct(a.trace.device.name)
    hits = [i for i in uniq.tolist() if i >= 0 and pattern.search(names[i].lower())]
    return np.isin(a.trace.device.name, np.asarray(hits, np.int64))


def sgemm_named(a: Analysis) -> np.ndarray:
    """Mask over the device events: kernels whose names say fp32 operands on CUDA cores."""
    return _names_matching(a, _SGEMM_NAME)


def fp32_matrix_events(a: Analysis) -> dict[str, np.ndarray]:
    """Device events of each kind of fp32 matrix work, in the steps: simt / tf32 / attention /
    conv (cuDNN's convolutions of fp32 tensors, TF32 by default: ``cudnn.allow_tf32``, with the
    layout and workspace kernels they launch)."""
    dev, rf = a.trace.device, a.roofline
    live = rf.event_in_steps_ns > 0
    fp32, tf32, unknown = DTYPES.index("fp32"), DTYPES.index("tf32"), 0
    dtype = rf.event_dtype
    tc = dev.kind == Kind.GEMM_TC
    attention = dev.kind == Kind.ATTENTION
    tf32_named = (dtype == unknown) & _names_matching(a, TF32_NAME)
    tc = tc & ~_names_matching(a, _SPLIT_K)
    fp32_attention = attention & ((dtype == fp32)
                                  | ((dtype == unknown) & _names_matching(a, _FP32_ATTENTION_NAME)))
    math = fp32_sdpa_math_events(a)
    not_math = np.ones(len(dev), bool)
    not_math[math] = False
    return {
        "simt": np.flatnonzero(live & (dev.kind == Kind.GEMM_SIMT) & not_math & (
            (dtype == fp32) | ((dtype == unknown) & _names_matching(a, _SGEMM_NAME)))),
        "tf32": np.flatnonzero(live & tc & ((dtype == tf32) | tf32_named) & not_math),
        "attention": union(np.flatnonzero(live & fp32_attention), math),
        "conv": np.flatnonzero(live & (dev.kind == Kind.CONV) & _launched_by_convolution(a)
                               & ((dtype == fp32) | (dtype == tf32) | tf32_named)),
    }


def _launched_by_convolution(a: Analysis) -> np.ndarray:
    """Mask over the device events: launched inside a convolution operator (``aten::convolution``,
    ``aten::cudnn_convolution``, ``aten::convolution_backward``...): cuDNN's other kernels (an RNN's
    dropout and bias kernels) are named ``cudnn::`` too."""
    dev, host = a.trace.device, a.trace.host
    conv = a.trace.names_matching(lambda s: "convolution" in s)
    return ((dev.op >= 0) & conv[host.name[np.maximum(dev.op, 0)]]) | (
        (dev.top_op >= 0) & conv[host.name[np.maximum(dev.top_op, 0)]])


def fp32_sdpa_math_events(a: Analysis) -> np.ndarray:
    """Device events, in the steps, of SDPA's math fallback run on float32 (or TF32) inputs."""
    dev, rf = a.trace.device, a.roofline
    cand = np.flatnonzero((rf.event_in_steps_ns > 0) & (dev.op >= 0))
    if cand.size == 0 or SDPA_MATH_OP not in a.trace.string_ids:
        return np.empty(0, np.int64)
    cand = cand[inside_op_named(a.trace, dev.op[cand], SDPA_MATH_OP)]
    fp32 = {DTYPES.index("fp32"), DTYPES.index("tf32")}
    matmul = np.isin(dev.kind[cand], MATRIX_KINDS_FOR_ATTENTION)
    if not np.isin(rf.event_dtype[cand][matmul], list(fp32)).any():
        return np.empty(0, np.int64)
    return cand



def loop_groups(a: Analysis) -> list[np.ndarray]:
    """Device events of each (op, shape) group repeated like a per-sample loop."""
    dev, rf = a.trace.device, a.roofline
    live = (rf.event_in_steps_ns > 0) & np.isin(dev.kind, MATRIX_KINDS_FOR_ATTENTION) & ~dev.graph & (dev.op >= 0)
    groups: dict[tuple[int, tuple[int, int, int, int]], list[int]] = defaultdict(list)
    chosen = np.flatnonzero(live)
    for i, op, cost in zip(chosen.tolist(), dev.op[chosen].tolist(),
                           rf.op_costs.lookup(dev.op[chosen])):
        if cost is None or cost.gemm_shape is None:
            continue
        _b, m, n, _k = cost.gemm_shape
        # a matrix-vector product (one side 1, the other wide); a dot product (both 1) is a
        # reduction: L-BFGS's two-loop recursion issues ~200 a step, one after another
        if min(m, n) <= MAX_VECTOR_DIM < max(m, n):
            groups[(int(a.trace.host.name[op]), cost.gemm_shape)].append(i)
    n_steps = max(len(a.steps), 1)
    return [np.array(v) for v in groups.values()
            if len(v) / n_steps >= MIN_REPEATS_PER_STEP and _back_to_back(a, np.array(v))]


def _back_to_back(a: Analysis, idx: np.ndarray) -> bool:
    """A loop over samples issues its matrix-vector products one after another, a few kernels
    apart; the same product once per forward (a 1-wide head under LBFGS's 20 closure calls) has a
    whole forward and backward between two of them."""
    order = np.argsort(a.trace.device.ts, kind="stable")
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    gaps = np.diff(np.sort(position[idx]))
    return bool(gaps.size) and float(median(gaps)) <= MAX_KERNELS_BETWEEN


def attention_seqs(a: Analysis) -> set[int]:
    """The sequence lengths of the square score matrices a softmax runs over (MIN_SEQ and up), over
    their last dimension: a segmentation loss's softmax over the classes of [N, C, H, W] with H = W
    is not attention (benchmarks/BENCHMARKS-replay.md "knob set u")."""
    trace = a.trace
    names, host_name = trace.strings, trace.host.name
    seqs = {c.square for i, c in a.roofline.op_costs.items() if c.square >= MIN_SEQ
            and "softmax" in names[host_name[i]] and _over_last_dim(trace, i)}
    return seqs & _dot_product_scores(a) if seqs else seqs


def _dot_product_scores(a: Analysis) -> set[int]:
    """The S of every [.., S, S] a forward product makes (``q @ k.transpose(-2, -1)``): fused
    attention computes scores of this form only. Scores made otherwise (a graph attention
    network's LeakyReLU over a broadcast sum of per-node terms, masked to the graph's edges) are
    not what SDPA takes; their backward has a product of that shape too, so the forward's is the
    test (tests/test_naive_attention_shapes.py)."""
    backward = autograd_nodes(a.trace)[a.trace.host.outermost()]
    return {c.gemm_shape[1] for i, c in a.roofline.op_costs.items()
            if c.gemm_shape is not None and c.gemm_shape[1] == c.gemm_shape[2] and not backward[i]}


def _over_last_dim(trace: Trace, op: int) -> bool:
    """Whether a softmax-like operator normalizes over its input's last dimension: its first integer
    argument (``dim``) against its first input's rank; True where the trace does not say."""
    dims = trace.input_dims(op)
    rank = len(dims[0]) if dims and isinstance(dims[0], list) else 0
    for value in trace.concrete_inputs(op):
        try:
            dim = int(value)
        except (TypeError, ValueError):
            continue
        return rank == 0 or dim % rank == rank - 1
    return True


# Operators of a convolutional network: a [.., S, S] input of theirs is an image, never scores
_IMAGE_OPS = re.compile(r"conv|batch_norm|group_norm|instance_norm|pool|upsample|interpolate")


def attention_events(a: Analysis) -> np.ndarray:
    """Device event indices belonging to a naive attention pattern (empty when none)."""
    dev, costs = a.trace.device, a.roofline.op_costs
    seqs = attention_seqs(a)
    if not seqs:
        return np.empty(0, np.int64)
    image = a.trace.names_matching(lambda s: _IMAGE_OPS.search(s) is not None)
    host_name = a.trace.host.name
    claimed = [
        i for i, c in costs.items()
        if (c.square in seqs
            or (c.gemm_shape is not None and c.gemm_shape[1] == c.gemm_shape[2] in seqs))
        and not image[host_name[i]]
    ]
    mask = np.isin(dev.op, np.asarray(claimed, np.int64)) & (a.roofline.event_in_steps_ns > 0)
    mask[fp32_sdpa_math_events(a)] = False
    return np.flatnonzero(mask)


def owned_elsewhere(a: Analysis, rule_id: str) -> set[str]:
    """Idle causes whose own finding fires (a rule other than ``rule_id`` that declares
    ``owns_idle``): its simpler fix comes first, and its time is its own."""
    from gpudoctor.rules.registry import RULES, runs_on

    owned: set[str] = set()
    for rule in RULES.values():
        if rule.id == rule_id or not rule.owns_idle or set(rule.owns_idle) <= owned:
            continue
        if not runs_on(rule, a):  # a rule that does not run owns nothing
            continue
        if rule.check(a) is not None:
            owned.update(rule.owns_idle)
    return owned


# The host's time priced by operators (per-sample-loop, host-sync). On a step the host holds, each
# operator costs the host about the same whatever it computes (Python, the dispatcher, a launch: the
# lab's per-sample-loop and host-sync twins ran at the same us per operator as their sick steps,
# benchmarks/BENCHMARKS-twins.md "Evidence moved from the source: rule pricing", per-sample-loop). A
# fix that removes operators then removes their share of the host's time, a share that the profiler
# (a few us on every recorded event, the most on the smallest operators) does not distort the way it
# distorts their recorded time. A stretch of the host with no operator this long is the program's
# other work (Python, I/O, a wait), which the fix keeps: ten operators' worth at the H100's 20 us.
MAX_OP_GAP_NS = 200_000


def step_ops(a: Analysis) -> np.ndarray:
    """Top-level operators of the launching threads (main and autograd) inside the host's steps,
    in time order."""
    host = a.trace.host
    ops = np.flatnonzero(
        (host.cat == HostCat.OP) & (host.top_op < 0) & host.on_threads(launch_threads(a.trace)))
    ops = ops[step_of(a, host.ts[ops]) >= 0]
    return ops[np.argsort(host.ts[ops], kind="stable")]


def step_of(a: Analysis, ts: np.ndarray) -> np.ndarray:
    """The host step each time falls in, -1 outside every step."""
    starts, ends = host_steps(a)
    k = np.searchsorted(starts, ts, side="right") - 1
    inside = (k >= 0) & (ts < ends[np.maximum(k, 0)])
    return np.where(inside, k, -1)


def ops_removed_ms(a: Analysis, ops: np.ndarray, removed: float) -> float:
    """The profiled step's time (less the profiler's at its edges) that ``removed`` of the
    operators ``ops`` (``step_ops``, all steps) hold, per step: their share of the host's time in
    operators that follow one another (gaps up to MAX_OP_GAP_NS)."""
    if ops.size == 0 or removed <= 0:
        return 0.0
    inner = max(a.step_ms - step_boundary_ms(a.trace, a.steps), 0.0)
    return inner * _dense_share(a, ops) * min(removed / ops.size, 1.0)


def _dense_share(a: Analysis, ops: np.ndarray) -> float:
    """Share of the host's steps, less the profiler's time at their edges
    (analysis/observer.step_boundary_ms), spent in operators that follow one another: from each
    step's first operator to its last, less the gaps over MAX_OP_GAP_NS."""
    host = a.trace.host
    ts, end = host.ts[ops], np.maximum.accumulate(host.end[ops])
    k = step_of(a, ts)
    dense = 0
    for step in distinct(k).tolist():
        s, e = ts[k == step], end[k == step]
        gaps = s[1:] - e[:-1]
        dense += int(e[-1] - s[0]) - int(gaps[gaps > MAX_OP_GAP_NS].sum())
    starts, ends = host_steps(a)
    inner = float((ends - starts).sum()) - step_boundary_ms(a.trace, a.steps) * 1e6 * len(starts)
    return min(dense / inner, 1.0) if inner > 0 else 0.0


def host_steps(a: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """The steps' ranges on the host (where the host's work of each step runs), else the steps'."""
    if a.steps.host_start is not None and a.steps.host_end is not None:
        return a.steps.host_start, a.steps.host_end
    return a.steps.start, a.steps.end


# A fix that does a step's costly work every N steps instead (a checkpoint's save, a read of a GPU
# value) picks the smallest of these round intervals that keeps that work under
# ``INTERVAL_COST_SHARE`` of the time.
INTERVAL_COST_SHARE = 0.01
_INTERVALS = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def every_n_steps(cost_ms: float, step_ms: float) -> int:
    """The smallest round interval at which ``cost_ms`` (paid every step now) falls under
    INTERVAL_COST_SHARE of a ``step_ms`` step."""
    needed = cost_ms / (INTERVAL_COST_SHARE * step_ms) if step_ms > 0 else _INTERVALS[-1]
    return next((i for i in _INTERVALS if i >= needed), _INTERVALS[-1])


def launched_from(a: Analysis, host_events: np.ndarray) -> np.ndarray:
    """Device events in the steps launched by the host events ``host_events`` (a mask): a region's
    kernels."""
    dev = a.trace.device
    launched = np.flatnonzero((dev.launch >= 0) & (a.roofline.event_in_steps_ns > 0))
    return launched[host_events[dev.launch[launched]]]
