"""The casts ``torch.autocast(dtype=torch.bfloat16)`` would add to a float32 step, read from the
operators the step ran.

Autocast intercepts the operators of its lists (PyTorch, aten/src/ATen/autocast_mode.cpp; the
"Autocast Op Reference" of the AMP docs), not their kernels:

- a **lower-precision** operator (``linear``, ``matmul``, ``conv2d``, ``bmm``, SDPA...) casts each
  float32 argument to bf16 first: its weight and bias (a parameter's cast is cached for the
  context, so once per step where the context wraps the forward), and its input unless that came
  out of another lower-precision operator. Each cast of a tensor that requires grad has a backward
  (``ToCopyBackward0``) that casts the gradient back: one kernel more each;
- a **float32** operator (``layer_norm``, ``group_norm``, ``mse_loss``, ``rsqrt``, ``pow``...)
  casts a bf16 input up; ``softmax``, ``log_softmax``, ``sum`` and the like compute in float32 from
  a bf16 input without a cast of their own, and hand on float32;
- every other operator runs in its inputs' dtype (an elementwise chain carries its producer's).

A trace records operators' input shapes and dtypes, not which tensor fed which operator, so an
input's dtype is read from the operators before it on the same thread and at the same nesting:
views, and elementwise operators, carry the dtype of what came before them; the first
lower-precision operator before one sets bf16, the first float32 or source operator (an embedding,
a copy from the host, a factory) sets float32. A lower-precision operator reached through views
alone, reading an input of the same shape, reads the same tensor (a query, key and value
projection of one normed input) and is passed over.

Counted: the lower-precision operators' casts and their backward. Not counted: a float32
operator's cast of a bf16 input (a loss on bf16 logits), the backward cast of a sum of a bf16
branch and a float32 stream (a transformer block's residual add), and the cache: a weight is
counted at every call, so a module a loop calls many times a step counts more casts than
autocast makes.

The count for DistilBERT (6 layers, 38 Linear modules), against its autocast trial's trace: 202
casts a step where the trace ran 217 (benchmarks/BENCHMARKS-replay.md "The casts autocast adds,
counted from the operators").
"""

from __future__ import annotations

import re

import numpy as np

from gpudoctor.analysis.host_events import autograd_nodes, backward_nodes_of, sequence_numbers
from gpudoctor.analysis.intervals import inside_stretches
from gpudoctor.trace.model import HostCat, Trace

# lower-precision operators (autocast_mode.cpp's lower_precision_fp list, CUDA)
_LOWER = re.compile(
    r"^aten::(linear|matmul|mm|mv|addmm|addmv|addr|bmm|baddbmm|addbmm|einsum|chain_matmul"
    r"|linalg_multi_dot|linalg_vecdot|conv[123]d|conv_tbc|conv_transpose[123]d|convolution"
    r"|_convolution|prelu|lstm_cell|gru_cell|rnn_tanh_cell|rnn_relu_cell"
    r"|scaled_dot_product_attention|_scaled_dot_product_flash_attention)$")
# float32 operators that cast a 16-bit input up (autocast_mode.cpp's fp32 list)
_FP32_CAST = re.compile(
    r"^aten::(acos|asin|cosh|erfinv|exp|expm1|log|log10|log2|log1p|reciprocal|rsqrt|sinh|tan"
    r"|pow|softplus|layer_norm|native_layer_norm|group_norm|rms_norm|frobenius_norm|nuclear_norm"
    r"|cosine_similarity|poisson_nll_loss|cosine_embedding_loss|nll_loss|nll_loss2d|nll_loss_nd"
    r"|hinge_embedding_loss|kl_div|l1_loss|smooth_l1_loss|huber_loss|mse_loss|margin_ranking_loss"
    r"|multilabel_margin_loss|soft_margin_loss|triplet_margin_loss|multi_margin_loss"
    r"|binary_cross_entropy_with_logits|dist|pdist|cdist|renorm|logsumexp"
    r"|upsample_\w+)$")
# operators whose output is float32 without a cast kernel of their own: the fp32_set_opt_dtype
# list (computed in float32 from a 16-bit input), and an embedding's float32 weight
_FP32_OUT = re.compile(
    r"^aten::(softmax|_softmax|log_softmax|_log_softmax|cross_entropy_loss|prod|cumprod|cumsum"
    r"|sum|linalg_vector_norm|linalg_matrix_norm|norm|embedding|embedding_bag|_embedding_bag)$")
# where the step's data comes from: a copy from the host, a factory (no gradient)
_DATA = re.compile(
    r"^aten::(to|_to_copy|copy_|randn|rand|randint|randn_like|rand_like|zeros|ones|full|arange"
    r"|normal_|uniform_|zeros_like|ones_like|full_like|from_blob|pin_memory)$")
# operators that only make a view (the same tensor, the same dtype)
_VIEW = re.compile(
    r"^aten::(view|_?reshape|_reshape_alias|_unsafe_view|view_as|as_strided|slice|narrow|select"
    r"|expand|expand_as|permute|transpose|t|numpy_T|unsqueeze|squeeze|detach|alias|unbind|split"
    r"|split_with_sizes|chunk|flatten|unflatten|movedim|contiguous|clone)$")
# operators whose arguments 1 and 2 are a module's weight and bias
_WEIGHTED = re.compile(r"^aten::(linear|conv[123]d|conv_tbc|conv_transpose[123]d|prelu)$")
# ``addmm(bias, input, weight)`` with a 1-D bias: a projection written as one call (Hugging Face's
# GPT-2 ``Conv1D``), its bias and weight the module's, its input argument 1
# (tests/test_autocast_casts.py; benchmarks/BENCHMARKS-replay.md "Knob set v")
_ADDMM = "aten::addmm"

OTHER, VIEW, LOWER, FP32_CAST, FP32_OUT, DATA = range(6)
# operators looked at before one, at most: further back, its input is taken as float32
WALK_LIMIT = 64


def op_classes(trace: Trace) -> np.ndarray:
    """int8 over the string table: each name's class (OTHER, VIEW, LOWER, FP32_CAST, FP32_OUT,
    DATA)."""
    out = np.zeros(len(trace.strings), np.int8)
    for cls, pattern in ((VIEW, _VIEW), (FP32_OUT, _FP32_OUT), (DATA, _DATA),
                         (FP32_CAST, _FP32_CAST), (LOWER, _LOWER)):
        out[trace.names_matching(lambda s, p=pattern: p.match(s) is not None)] = cls
    return out


def lower_ops_of(trace: Trace, kernels: np.ndarray,
                 classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The forward lower-precision operators that launched ``kernels`` (device events), distinct
    and sorted: for each kernel, the outermost enclosing operator of the list, outside any autograd
    node. And a mask over ``kernels``: those launched by one of them or by its backward node (the
    casts counted for them are theirs)."""
    host, dev = trace.host, trace.device
    op = dev.op[kernels].astype(np.int64)
    node = autograd_nodes(trace)
    top = host.top_op[np.maximum(op, 0)]
    in_node = (op >= 0) & (((top >= 0) & node[np.maximum(top, 0)]) | node[np.maximum(op, 0)])
    owner = np.full(op.size, -1, np.int64)
    at = np.where(in_node, -1, op)
    while True:  # climb to the outermost operator of the list
        here = at >= 0
        if not here.any():
            break
        lower = here & (classes[host.name[np.maximum(at, 0)]] == LOWER)
        owner[lower] = at[lower]
        at = np.where(here, host.op[np.maximum(at, 0)], -1)
    ops = np.unique(owner[owner >= 0])
    counted = owner >= 0
    if ops.size and in_node.any():
        # a backward kernel is counted where its autograd node was made by an operator inside a
        # counted one (the node carries that operator's sequence number: ``addmm`` under
        # ``linear``)
        nodes = np.where(node[np.maximum(op, 0)], op, top)
        made = sequence_numbers(trace, _inside(trace, ops))
        node_seq = np.full(op.size, -1, np.int64)
        node_seq[in_node] = sequence_numbers(trace, nodes[in_node])
        counted |= in_node & (node_seq >= 0) & np.isin(node_seq, made[made >= 0])
    return ops, counted


def _inside(trace: Trace, ops: np.ndarray) -> np.ndarray:
    """``ops`` and every operator nested in one of them (same thread, within its time)."""
    host = trace.host
    rows = np.flatnonzero(host.cat == HostCat.OP)
    nested = inside_stretches(host.ts[rows], host.thread[rows], host.ts[ops], host.end[ops],
                              host.thread[ops])
    return np.unique(np.concatenate([ops, rows[nested]]))


def casts(trace: Trace, ops: np.ndarray, classes: np.ndarray | None = None,
          lo_ns: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For each lower-precision operator of ``ops``, the casts autocast adds in its forward and
    in its backward (float arrays). ``lo_ns``: operators before it are not looked at (the window's
    start: an input from before it is taken as the step's data)."""
    classes = op_classes(trace) if classes is None else classes
    host = trace.host
    fwd = np.zeros(ops.size)
    bwd = np.zeros(ops.size)
    if ops.size == 0:
        return fwd, bwd
    trace.op_arg_ids(ops.astype(np.int64))  # decoded in one pass
    seq = sequence_numbers(trace, ops.astype(np.int64))
    nodes = backward_nodes_of(trace, ops.astype(np.int64))
    has_backward = (seq >= 0) & np.isin(seq, sequence_numbers(trace, nodes))
    siblings = _Siblings(trace, classes, lo_ns)
    for k, o in enumerate(ops.tolist()):
        name = trace.string(host.name[o])
        types, dims = trace.input_types(o), trace.input_dims(o)
        params, first = 0, 0
        if _WEIGHTED.match(name):
            params = sum(1 for j in (1, 2) if j < len(types) and types[j] == "float"
                         and j < len(dims) and dims[j])
        elif name == _ADDMM and len(dims) >= 3 and dims[0] and len(dims[0]) == 1:
            params = sum(1 for j in (0, 2) if types[j] == "float")
            first = 1
        wide_input = len(types) > first and types[first] == "float"
        act, from_data = (siblings.input_is_float32(o, dims[first] if len(dims) > first else None)
                          if wide_input else (False, False))
        fwd[k] = params + act
        if has_backward[k]:
            bwd[k] = params + (act and not from_data)
    return fwd, bwd


class _Siblings:
    """The operators at one nesting on one thread, in time order, looked up by their parent."""

    def __init__(self, trace: Trace, classes: np.ndarray, lo_ns: int | None) -> None:
        self.trace, self.classes, self.lo_ns = trace, classes, lo_ns
        self._groups: dict[tuple[int, int], np.ndarray] = {}

    def _group(self, o: int) -> np.ndarray:
        host = self.trace.host
        key = (int(host.thread[o]), int(host.op[o]))
        rows = self._groups.get(key)
        if rows is None:
            rows = np.flatnonzero((host.thread == key[0]) & (host.op == key[1])
                                  & (host.cat == HostCat.OP))
            rows = rows[np.argsort(host.ts[rows], kind="stable")]
            self._groups[key] = rows
        return rows

    def input_is_float32(self, o: int, input_dims: object) -> tuple[bool, bool]:
        """Whether the input of lower-precision operator ``o`` would be float32 under autocast
        (a cast), and whether it is the step's data (no operator before it: no gradient)."""
        host, classes = self.trace.host, self.classes
        at = o
        views_only = True
        looked = 0
        while looked < WALK_LIMIT:
            rows = self._group(at)
            pos = int(np.searchsorted(host.ts[rows], host.ts[at], side="left"))
            for prev in rows[:pos][::-1].tolist():
                looked += 1
                if looked > WALK_LIMIT:
                    return True, False
                if self.lo_ns is not None and host.ts[prev] < self.lo_ns:
                    return True, True
                cls = classes[host.name[prev]]
                if cls == VIEW:
                    continue
                if cls == LOWER:
                    if views_only and self.trace.input_dims(prev)[:1] == [input_dims]:
                        continue  # a sibling reading the same tensor
                    return False, False
                if cls in (FP32_CAST, FP32_OUT):
                    return True, False
                if cls == DATA:
                    dims = self.trace.input_dims(prev)[:1]
                    if dims and dims[0] and dims != [input_dims]:
                        continue  # a copy of another tensor (a mask made ready beside it)
                    return True, True
                views_only = False  # an elementwise operator: its producer's dtype
            parent = int(host.op[at])
            if parent < 0:
                return True, True  # nothing before it: the step's data
            at = parent
        return True, False
