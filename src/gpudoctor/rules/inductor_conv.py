"""What ``torch.compile`` does to a convolutional net that eager mode does not, for the compile
knobs' edits (rules/knob_prices.py).

- **Layout.** Inductor runs a graph's convolutions channels-last when its heuristics say it pays
  (``GraphLowering.decide_layout_opt``, torch/_inductor/graph.py): never with a grouped convolution
  of more than one input channel per group, a convolution that at least halves its channels with a
  kernel wider than 1, or only convolutions of 64 channels or fewer; in inference, where the
  convolutions' flops weighted by PyTorch's benchmarked channels-last factors come out lower. An
  eager NCHW fp32 net runs cuDNN's NHWC kernels between conversions (``nchwToNhwcKernel``,
  ``nhwcToNchwKernel``), three kernels a convolution; channels-last, the conversions go
  (benchmarks/BENCHMARKS-replay.md "Compile on a convolutional net").
- **Batch norm in training** is decomposed into Triton kernels: the statistics' reduction (split
  in two over a large batch), the running statistics' update, the batch counter's increment and
  the normalization fused with what follows, forward; two reductions and a pointwise backward.
  Where eager ran one cuDNN kernel, compiled code launches several, each from its own line of
  generated Python: ``BATCH_NORM_FORWARD_LAUNCHES`` / ``BATCH_NORM_BACKWARD_LAUNCHES`` more than
  the fused chains leave.
"""

from __future__ import annotations

import re

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import backward_nodes_of, ran_backward
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.shared import launched_from, step_of, step_ops
from gpudoctor.trace.model import HostCat

# cuDNN's layout conversions around an NHWC kernel run on NCHW tensors
LAYOUT_CONVERSION = re.compile(r"nchwTo(Folded)?Nhwc|[Nn]hwcToNchw")
# The launches compiled code adds per training batch norm beyond the kernels the fused chains
# leave, forward and backward, channels-last, as counted on compiled trials' traces and checked
# on networks held out (benchmarks/BENCHMARKS-replay.md "Compile on a convolutional net").
BATCH_NORM_FORWARD_LAUNCHES = 3.0
BATCH_NORM_BACKWARD_LAUNCHES = 3.5
# NCHW (Inductor kept the layout), fewer; a batch norm of 2-D input (BatchNorm1d after a Linear)
# adds none (the same section).
NCHW_BATCH_NORM_FORWARD_LAUNCHES = 1.0
NCHW_BATCH_NORM_BACKWARD_LAUNCHES = 2.0
# A batch norm reducing over this many values a channel or fewer (N x H x W: a 1 x 1 or 2 x 2 map)
# adds none: Inductor launches no batch-norm kernel of its own for it, as counted on compiled
# trials' traces (benchmarks/BENCHMARKS-replay.md "Batch norm on small maps").
SMALL_BATCH_NORM_VALUES = 256
_BATCH_NORM = "aten::batch_norm"
_CONVOLUTION = "aten::convolution"
# Inductor's graph-size guard: a graph of 300 nodes or more per convolution keeps its layout
_NODES_PER_CONVOLUTION = 300
# PyTorch's benchmarked channels-last factors for inference (decide_layout_opt)
_INFERENCE_FACTORS = {"grouped": 1.358, "small": 0.783, "in_out": 0.725, "default": 0.823}


def _convolutions(a: Analysis, region: np.ndarray) -> np.ndarray:
    """The ``aten::convolution`` operators inside the region, in the steps."""
    host = a.trace.host
    conv = a.trace.string_ids.get(_CONVOLUTION, -1)
    rows = np.flatnonzero((host.name == conv) & (host.cat == HostCat.OP) & region)
    return rows[step_of(a, host.ts[rows]) >= 0]


def layout_optimized(a: Analysis, region: np.ndarray) -> bool:
    """Whether Inductor would run the region's convolutions channels-last (module docstring). False
    where the region has none, or the trace did not record their shapes."""
    convs = _convolutions(a, region)
    if convs.size == 0:
        return False
    trace = a.trace
    shapes = []
    for row in convs.tolist():
        dims, args = trace.input_dims(row), trace.concrete_inputs(row)
        if len(dims) < 2 or len(dims[1]) != 4 or len(args) < 9 or not str(args[8]).isdigit():
            return False  # a 1-D or 3-D convolution, or shapes not recorded
        shapes.append((dims[0], dims[1], int(args[8])))
    tops = step_ops(a)
    return channels_last_pays(shapes, training=ran_backward(trace),
                              operators=int(region[tops].sum()))


def channels_last_pays(shapes: list[tuple[list[int], list[int], int]], *, training: bool,
                       operators: int = 0) -> bool:
    """Inductor's choice (``decide_layout_opt``) for convolutions given as (input shape, weight
    shape, groups), in a graph of about ``operators`` operators."""
    if not shapes or operators >= _NODES_PER_CONVOLUTION * len(shapes):
        return False
    grouped = [g > 1 and w[1] > 1 for _, w, g in shapes]
    small = [w[0] <= 64 and w[1] <= 64 for _, w, _ in shapes]
    halves = [w[0] * 2 <= w[1] and w[2] > 1 for _, w, _ in shapes]
    if training:
        return not (any(grouped) or any(halves) or all(small))
    flops = [float(np.prod(x, dtype=float)) * w[0] * float(np.prod(w[2:], dtype=float))
             for x, w, _ in shapes]
    kinds = ["grouped" if g else "small" if s else "in_out" if h else "default"
             for g, s, h in zip(grouped, small, halves)]
    weighted = sum(f * _INFERENCE_FACTORS[k] for f, k in zip(flops, kinds))
    return sum(flops) > 0 and weighted <= sum(flops)


def layout_conversions(a: Analysis, region: np.ndarray,
                       channels_last: bool | None = None) -> np.ndarray:
    """cuDNN's layout conversions the region's operators launch in the steps: the device events a
    channels-last compile takes off the GPU (empty where Inductor keeps the layout;
    ``channels_last``: ``layout_optimized`` where the caller has it already)."""
    dev = a.trace.device
    idx = launched_from(a, region)
    if idx.size == 0:
        return idx.astype(np.int64)
    names = a.trace.names_matching(lambda s: LAYOUT_CONVERSION.search(s) is not None)
    idx = idx[names[dev.name[idx]]]
    if channels_last is None:
        channels_last = idx.size > 0 and layout_optimized(a, region)
    if idx.size == 0 or not channels_last:
        return np.zeros(0, np.int64)
    return idx.astype(np.int64)


def layout_edit(a: Analysis, region: np.ndarray, channels_last: bool | None = None) -> Edit | None:
    """The layout conversions off the GPU; None where there are none to take."""
    gone = layout_conversions(a, region, channels_last)
    if gone.size == 0:
        return None
    n = max(len(a.steps), 1)
    return Edit(device_removed=gone,
                note=f"convolutions channels-last ({gone.size / n:.0f} layout conversions a step "
                     "fewer)")


def batch_norm_launches(a: Analysis, region: np.ndarray, channels_last: bool) -> np.ndarray:
    """The launches Inductor adds for each training batch norm of the region in the steps (module
    docstring), its forward operators' and its backward nodes': four-dimensional inputs only
    (BatchNorm2d) reducing over more than ``SMALL_BATCH_NORM_VALUES`` a channel, more where the
    convolutions run channels-last; none in a step with no backward (inference folds batch norm
    into a pointwise kernel)."""
    if not ran_backward(a.trace):
        return np.zeros(0)
    trace, host = a.trace, a.trace.host
    tops = step_ops(a)
    tops = tops[region[tops]]
    forward = tops[host.name[tops] == trace.string_ids.get(_BATCH_NORM, -1)]
    forward = np.array([r for r in forward.tolist() if _training(trace.concrete_inputs(r))
                        and _four_dimensional(trace.input_dims(r))
                        and _values_per_channel(trace.input_dims(r)) > SMALL_BATCH_NORM_VALUES],
                       np.int64)
    # each forward operator's backward node, by the autograd sequence number they share
    backward = backward_nodes_of(trace, forward)
    backward = backward[region[backward]]
    fwd, bwd = ((BATCH_NORM_FORWARD_LAUNCHES, BATCH_NORM_BACKWARD_LAUNCHES) if channels_last
                else (NCHW_BATCH_NORM_FORWARD_LAUNCHES, NCHW_BATCH_NORM_BACKWARD_LAUNCHES))
    return np.concatenate([np.full(forward.size, fwd), np.full(backward.size, bwd)])


def _values_per_channel(dims: list) -> int:
    """N x H x W of a four-dimensional batch norm's input: what its statistics reduce over."""
    n, _, h, w = dims[0]
    return int(n) * int(h) * int(w)


def _four_dimensional(dims: list) -> bool:
    return bool(dims) and isinstance(dims[0], list) and len(dims[0]) == 4


def _training(args: list) -> bool:
    """``aten::batch_norm``'s ``training`` argument (True where the trace did not record it)."""
    return len(args) < 6 or args[5] != "False"


__all__ = ["BATCH_NORM_BACKWARD_LAUNCHES", "BATCH_NORM_FORWARD_LAUNCHES",
           "NCHW_BATCH_NORM_BACKWARD_LAUNCHES", "NCHW_BATCH_NORM_FORWARD_LAUNCHES",
           "batch_norm_launches", "channels_last_pays", "layout_conversions", "layout_edit",
           "layout_optimized"]
