"""The part of the step a ``torch.compile`` of the outermost module would take: its forward and,
in training, the backward of that forward.

A trace does not say where the module's forward begins (module events come only with
``with_stack``), so the region is read from what the operators carry:

- the backward is every top-level operator on the thread the autograd engine runs on
  (``autograd::engine::evaluate_function: ...`` events);
- the forward is every top-level operator on the other launching threads that was recorded under
  grad mode: the profiler gives those a ``Sequence number`` (the autograd node they would make);
  ``torch.no_grad()`` work (an optimizer's step, a hand-written update, ``zero_grad``) has none.
  A closure the optimizer calls (Lightning's training_step, LBFGS) runs the forward under the
  optimizer's annotation, in grad mode: it is in. So are the few no-grad operators between two
  grad-mode ones of a pass (``ones_like``, a mask's comparison: they make no autograd node), and the
  module evaluated under no_grad inside the step (an accuracy every step), which a compile of the
  module takes too (``evaluations``);
- in a step with no backward (inference: no grad mode anywhere), every top-level operator on the
  launching threads but the copies between host and device, the reads of GPU values and the work
  of an optimizer or a DataLoader: what the module's forward itself runs.

What stays outside (an optimizer's for-loop, a hand-written SGD update, the loader) keeps its host
time when the module is compiled or captured in a CUDA graph (``rules/knob_prices.py``).

``traced_by_dynamo`` narrows the region to what ``torch.compile`` itself takes: TorchDynamo does not
trace recurrent modules by default (``torch._dynamo.config.allow_rnn`` is False): ``nn.LSTM``,
``nn.GRU`` and ``nn.RNN`` break the graph and run eagerly, their cuDNN kernels launched as before,
forward and backward (benchmarks/BENCHMARKS-replay.md "Knob trials, third session"). That break
is one Dynamo cannot resume from ("Compiling up to the previous resumable state, then skipping the
rest of the function"): the rest of the forward after the recurrent module runs eagerly too, and
the backward of that rest (its autograd nodes, matched by sequence number) with it
(benchmarks/BENCHMARKS-replay.md "Knob trials, set f"). The compiled backward hands each
parameter's gradient to the autograd engine, whose AccumulateGrad nodes run eagerly after it, one
per parameter, as before.
"""

from __future__ import annotations

import re
from collections import Counter
from difflib import SequenceMatcher

import numpy as np

from gpudoctor.analysis.host_events import (
    autograd_nodes,
    launch_threads,
    optimizer_bookkeeping,
    sequence_numbers,
)
from gpudoctor.analysis.intervals import contains, union
from gpudoctor.core.arrays import distinct, median
from gpudoctor.trace.model import HostCat, Trace

GRAD_MODE_MARK = b'"Sequence number"'
# work a compile of the module does not take, in a step without backward (and outside grad mode)
OUTSIDE_NAMES = re.compile(
    r"^aten::(to|_to_copy|copy_|item|_local_scalar_dense|pin_memory|_pin_memory)$")
OUTSIDE_ANNOTATIONS = ("Optimizer.", "enumerate(DataLoader)", "gpudoctor.")
TRAINING_OUTSIDE_ANNOTATIONS = ("enumerate(DataLoader)", "gpudoctor.")
# recurrent modules' operators and their backward nodes: left to eager mode by TorchDynamo
_RECURRENT_OPS = r"aten::(lstm|gru|rnn_tanh|rnn_relu|_cudnn_rnn|miopen_rnn)"
RECURRENT_FORWARD = re.compile(rf"^{_RECURRENT_OPS}$")
EAGER_UNDER_DYNAMO = re.compile(
    rf"^({_RECURRENT_OPS}"
    r"|autograd::engine::evaluate_function: "
    r"((CudnnRnn|MiopenRnn)Backward\d*|torch::autograd::AccumulateGrad))$")


def compiled_region(trace: Trace) -> np.ndarray:
    """Boolean mask over host events: the top-level operators (and every event inside them) that a
    compile of the outermost module takes (module docstring). All False when no thread launches
    GPU work."""
    region_top, _evaluated = _region_parts(trace)
    # every event inside a region operator belongs to it (its launches, its nested operators)
    return region_top[trace.host.outermost()]


def evaluations(trace: Trace) -> np.ndarray:
    """Boolean mask over host events: the module's forwards a training step runs under no_grad
    (``_forward_ops``), every event inside them too; all False in a step with no backward."""
    out = np.zeros(len(trace.host), bool)
    out[_region_parts(trace)[1]] = True
    return out[trace.host.outermost()]


def _region_parts(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Mask over host events of the region's top-level operators, and the indices of those that
    evaluate the module under no_grad in a training step (empty in a step with no backward)."""
    host = trace.host
    threads = launch_threads(trace)
    none = np.empty(0, np.int64)
    if len(host) == 0 or threads.size == 0:
        return np.zeros(len(host), bool), none
    top = (host.cat == HostCat.OP) & (host.top_op < 0) & host.on_threads(threads)
    engine_threads = distinct(host.thread[autograd_nodes(trace) & host.on_threads(threads)])
    if engine_threads.size == 0:
        outside = _under_annotations(trace, OUTSIDE_ANNOTATIONS)
        copies = trace.names_matching(lambda s: bool(OUTSIDE_NAMES.match(s)))[host.name]
        return top & ~copies & ~outside, none
    # an optimizer's own work runs outside grad mode; a closure it calls (Lightning's
    # training_step, LBFGS) runs the module's forward under its annotation, in grad mode
    outside = _under_annotations(trace, TRAINING_OUTSIDE_ANNOTATIONS)
    candidates = np.flatnonzero(top & ~host.on_threads(engine_threads) & ~outside)
    forward, evaluated = _forward_ops(trace, candidates, in_grad_mode(trace, candidates))
    region_top = top & host.on_threads(engine_threads)  # the backward
    region_top[forward] = True
    return region_top, evaluated


# A few no-grad operators between two grad-mode ones of a forward are the forward's own (a mask's
# comparison, ``ones_like``: no autograd node to make); a longer stretch is other work.
FORWARD_GAP_OPS = 4
# A run of no-grad operators is the module evaluated (``model.eval()`` and ``torch.no_grad()``
# inside the training step: a train / validation accuracy every step) when it repeats at least
# this share of the forward's operators in their order (its dropout calls stay as calls in eval
# mode); an optimizer's or a hand-written update's operators repeat few of them.
EVALUATION_MATCH_SHARE = 0.7
# runs longer than this many forwards are not compared (two evaluations with no read between
# them match one forward's worth)
EVALUATION_MAX_FORWARDS = 4


def _forward_ops(trace: Trace, candidates: np.ndarray,
                 graded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Host events among ``candidates`` (top-level operators of the forward threads, outside the
    loader's annotations; ``graded``: recorded in grad mode) that run the module's forward: the
    grad-mode ones, the few no-grad ones between two of them in one pass (FORWARD_GAP_OPS), and
    where the step evaluates the module under no_grad, the operators of each no-grad run (one
    that no read of a GPU value or copy breaks) that line up with the forward's (difflib's
    matching blocks over the names), where they are EVALUATION_MATCH_SHARE of it.
    ``torch.compile(model)`` compiles those calls too (tests/test_compiled_region_eval.py).
    Returns the forward's operators, and of them the evaluations'."""
    host = trace.host
    order = np.argsort(host.ts[candidates], kind="stable")
    ops, forward = candidates[order], graded[order].copy()
    names = host.name[ops]
    breaks = trace.names_matching(lambda s: bool(OUTSIDE_NAMES.match(s)))[names]
    # a backward or an optimizer's step between two grad-mode operators ends a pass: the no-grad
    # operators between them (gradient clipping, the next batch's labels) are not a forward's
    barriers = np.sort(host.ts[autograd_nodes(trace) | optimizer_bookkeeping(trace)])
    for lo, hi in _runs(~forward):
        if lo == 0 or hi == forward.size or hi - lo > FORWARD_GAP_OPS or breaks[lo:hi].any():
            continue
        between = np.searchsorted(barriers, [host.end[ops[lo - 1]], host.ts[ops[hi]]])
        if between[0] == between[1]:
            forward[lo:hi] = True
    passes = _runs(forward)
    evaluated = np.zeros(forward.size, bool)
    if not passes or forward.all():
        return ops[forward], ops[evaluated]
    lo, hi = max(passes, key=lambda r: r[1] - r[0])  # the reference: the longest forward pass
    reference = names[lo:hi].tolist()
    need = EVALUATION_MATCH_SHARE * len(reference)
    wanted = Counter(reference)
    for lo, hi in _runs(~forward & ~breaks):
        if not need <= hi - lo <= EVALUATION_MAX_FORWARDS * len(reference):
            continue
        run = names[lo:hi].tolist()
        if sum((Counter(run) & wanted).values()) < need:  # cheap: most runs stop here
            continue
        blocks = SequenceMatcher(None, reference, run, autojunk=False).get_matching_blocks()
        if sum(b.size for b in blocks) >= need:
            for b in blocks:
                evaluated[lo + b.b:lo + b.b + b.size] = True
    return ops[forward | evaluated], ops[evaluated]


def in_grad_mode(trace: Trace, rows: np.ndarray) -> np.ndarray:
    """Whether each of these host events was recorded in grad mode (it carries a sequence
    number)."""
    return np.fromiter((GRAD_MODE_MARK in r for r in trace.host.raw_args_at(rows.tolist())), bool,
                       rows.size)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """The [start, end) of each run of True in ``mask``."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist()))


def traced_by_dynamo(trace: Trace, region: np.ndarray) -> np.ndarray:
    """``region`` without the operators TorchDynamo leaves to eager mode (module docstring): the
    recurrent modules, the rest of each forward after one and its backward, and every event inside
    them."""
    host = trace.host
    top = host.top_op < 0
    eager = trace.names_matching(lambda s: bool(EAGER_UNDER_DYNAMO.match(s)))[host.name] & top
    owner = host.outermost()
    eager |= _after_recurrent(trace, region & top, owner)
    return region & ~eager[owner]


def _after_recurrent(trace: Trace, region_top: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Mask over host events: the region's top-level forward operators from a recurrent module's
    operator to the end of its forward pass, and the backward nodes of that rest. A pass is the
    forward operators between two backwards; a backward node belongs to the rest when its sequence
    number (the forward operator's) lies from the rest's first to the next pass's first. The
    backward at the window's start, whose forward was not recorded, is placed one pass's worth of
    sequence numbers back. A trace with no backward has no passes to tell apart: nothing."""
    host = trace.host
    out = np.zeros(len(host), bool)
    engine = autograd_nodes(trace) & region_top
    if not engine.any():
        return out
    forward = np.flatnonzero(region_top & ~host.on_threads(distinct(host.thread[engine])))
    recurrent = trace.names_matching(lambda s: bool(RECURRENT_FORWARD.match(s)))[
        host.name[forward]]
    if not recurrent.any():
        return out
    ts = host.ts[forward]
    pass_of = np.searchsorted(np.sort(host.ts[engine]), ts)
    n_passes = int(pass_of.max()) + 1
    first_recurrent = _least_by_pass(n_passes, pass_of[recurrent], ts[recurrent])
    out[forward[ts >= first_recurrent[pass_of]]] = True
    # sequence numbers: where each pass starts, and where its eager rest starts
    inside = np.flatnonzero(np.isin(owner, forward))
    seq = sequence_numbers(trace, inside)
    pass_of_event = pass_of[np.searchsorted(forward, owner[inside])]
    graded = seq >= 0
    in_rest = graded & out[owner[inside]]
    starts = _least_by_pass(n_passes, pass_of_event[graded], seq[graded])
    rest_starts = _least_by_pass(n_passes, pass_of_event[in_rest], seq[in_rest])
    known = np.flatnonzero(np.isfinite(starts))  # passes in order, each to the next one's start
    ends = np.append(starts[known][1:], np.inf)
    with_rest = np.isfinite(rest_starts[known])
    if not with_rest.any():
        return out
    lo, hi = rest_starts[known][with_rest], ends[with_rest]
    if known.size > 1 and with_rest[0]:  # the backward before the first pass
        step = median(np.diff(starts[known]))
        lo, hi = np.append(lo, lo[0] - step), np.append(hi, starts[known[0]])
    nodes = np.flatnonzero(engine)
    node_seq = sequence_numbers(trace, nodes)
    hit = (node_seq[:, None] >= lo) & (node_seq[:, None] < hi) & (node_seq[:, None] >= 0)
    out[nodes[hit.any(axis=1)]] = True
    return out


def _least_by_pass(n_passes: int, pass_of: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per pass, the least of ``values`` that fall in it (inf for a pass with none)."""
    out = np.full(n_passes, np.inf)
    np.minimum.at(out, pass_of, values.astype(float))
    return out


def _under_annotations(trace: Trace, prefixes: tuple[str, ...]) -> np.ndarray:
    """Host events inside (or equal to) an annotation whose name starts with one of ``prefixes``."""
    host = trace.host
    marked = trace.names_matching(lambda s: s.startswith(prefixes))[host.name] & (
        host.cat == HostCat.ANNOTATION)
    s, e = union(host.ts[marked], host.end[marked])
    return contains(s, e, host.ts)


__all__ = ["compiled_region", "evaluations", "in_grad_mode", "traced_by_dynamo"]
