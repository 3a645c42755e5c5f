"""The knobs of ``run --try-fixes`` on the module and its matmuls priced by what they change,
whatever the findings.

``torch.compile`` of the outermost module (tryfix/knobs.py) takes the module's forward and its
backward (analysis/compiled_region.py), nothing else: an optimizer's loop, a hand-written update
or the loader keep their host time. So each knob is its own edit of the step's graph, replayed:

- ``compile``: each chain of memory-bound kernels inside the region (rules/unfused_elementwise.py
  ``chains``, grouped by element count: Inductor fuses across a tensor's views) becomes one kernel
  at its fused time; the chain's other kernels leave the GPU, and so do the device copies its
  operators made (an out-of-place ``masked_fill``'s clone). A
  naive attention's scale, casts and softmax between its two matmuls are such a chain, forward
  and backward: Inductor fuses them and leaves the matmuls to cuBLAS. It does not rewrite the
  attention to scaled_dot_product_attention: its ``fuse_attention`` patterns matched no
  ``softmax(q @ k^T / sqrt(d)) @ v`` in bf16, fp32 or under autocast on torch 2.11
  (benchmarks/probes/probe_fuse_attention.py; benchmarks/BENCHMARKS-replay.md "Knob trials, set
  f"). The region's host time shrinks with its kernels (``_host_per_kernel``): the generated code
  runs none of the module's Python and launches what is left at about the program's own cost per
  kernel (benchmarks/BENCHMARKS-replay.md "The compiled region's host time, kernel by kernel").
  Each pass into the compiled forward and backward costs the host a fixed entry
  (``compiled_entries``): on a small host-bound step, more than the fusion saves. The casts eager
  autocast had cached (a context held for many steps) are cast again on every compiled call
  (``cached_casts_recast``). On a convolutional net, the convolutions may go channels-last
  (cuDNN's layout conversions leave the GPU) and training batch norm runs as several Triton
  kernels, each a launch the region's host pays (rules/inductor_conv.py).
- ``compile-reduce-overhead``: the same fusion and entries, and the region's kernels captured in
  CUDA graphs (rules/launch_bound.py ``captured``): one graph launch for the forward and one for
  the backward a step.
- Both leave a recurrent module (nn.LSTM, nn.GRU, nn.RNN) eager: TorchDynamo does not trace it
  (analysis/compiled_region.py ``traced_by_dynamo``).
- ``bf16-autocast`` (autocast around the module's forward): the region's fp32 / TF32 matrix
  kernels at the bf16 rate, with autocast's casts, and its cuDNN batch norms on PyTorch's slower
  kernels (rules/fp32_matmul.py ``edit``); an fp32 loss or update outside keeps its time.
- ``tf32`` (a process-wide setting): every fp32 GEMM at the TF32 rate (fp32_matmul ``tf32_edit``).
- ``optimizer-foreach``: the per-parameter loop's operators run once each over every parameter
  (optimizer_loop ``foreach_edit``), not fused: the optimizer-loop finding prices ``fused=True``.
- ``pin-memory`` (``DataLoader(pin_memory=True)``): the batches' uploads pinned but still blocking,
  and pinned on the loop's own thread where the loader has no workers (pageable_copy
  ``pin_memory_edit``): the pageable-copy finding prices pinned and non_blocking copies.

A knob with nothing to change in the step (no chain, no fp32 matmul) is priced x1.0, the step
unchanged, so a trial named with ``--fixes`` still has a prediction to be judged by.

A finding's own price stays its fix's (launch-bound's graph of the whole step); the knob's price
is what the knob itself does, and ``run --try-fixes`` prints it beside the measurement.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.compiled_region import compiled_region, evaluations, traced_by_dynamo
from gpudoctor.analysis.host_events import (
    HOST_WORK_MIN_NS,
    autograd_nodes,
    bookkeeping_names,
    parameter_updates,
    ran_backward,
    sync_calls,
)
from gpudoctor.analysis.opcost import DTYPE_NAMES
from gpudoctor.core.arrays import difference, distinct
from gpudoctor.replay.edits import Edit, merge
from gpudoctor.rules import (
    fp32_matmul,
    inductor_conv,
    launch_bound,
    optimizer_loop,
    pageable_copy,
    unfused_elementwise,
)
from gpudoctor.rules.shared import host_steps, launched_from
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import HostCat

KNOB_COMPILE = "compile"
KNOB_REDUCE_OVERHEAD = "compile-reduce-overhead"
KNOB_BF16 = "bf16-autocast"
KNOB_TF32 = "tf32"
KNOB_FOREACH = "optimizer-foreach"
KNOB_PIN = "pin-memory"


class KnobPrice(msgspec.Struct, frozen=True):
    knob: str
    step_ms: float
    step_after_ms: float
    note: str

    @property
    def predicted_speedup(self) -> float:
        return self.step_ms / self.step_after_ms if self.step_after_ms > 0 else 1.0

    def to_dict(self) -> dict:
        return {"predicted_speedup": round(self.predicted_speedup, 4),
                "step_ms": round(self.step_ms, 4), "step_after_ms": round(self.step_after_ms, 4),
                "priced_by": "replay", "note": self.note}


def knob_edits(a: Analysis) -> dict[str, Edit]:
    """The knobs' edits of ``a``'s step; the ones on the module need a region (none where the trace
    shows none), the compile ones a region not compiled already."""
    region = compiled_region(a.trace)
    tf32 = fp32_matmul.tf32_edit(a)
    out = {KNOB_TF32: tf32 if tf32 is not None else Edit(note="no fp32 GEMM")}
    foreach = optimizer_loop.foreach_edit(a)
    if foreach is not None:
        out[KNOB_FOREACH] = foreach
    pin = pageable_copy.pin_memory_edit(a)
    if pin is not None:
        out[KNOB_PIN] = pin
    if not region.any():
        return out
    bf16 = fp32_matmul.edit(a)
    out[KNOB_BF16] = _within(a, bf16, region) if bf16 is not None else Edit(
        note="no fp32 or TF32 matmul")
    if _compiled_already(a, region):
        return out
    return {**out, **_compile_edits(a, region)}


def compile_knob_edit(a: Analysis, knob: str) -> Edit | None:
    """One compile knob's own edit (``knob_edits``), alone: None where the trace shows no module
    to compile, the program compiles it already, or the knob has nothing to change there."""
    region = compiled_region(a.trace)
    if not region.any() or _compiled_already(a, region):
        return None
    return _compile_edits(a, region).get(knob)


def _compile_edits(a: Analysis, region: np.ndarray) -> dict[str, Edit]:
    """The compile knobs' edits of the module ``region`` (not compiled by the program)."""
    region = traced_by_dynamo(a.trace, region)  # a recurrent module stays eager
    fused = fusion(a, region)
    entries = compiled_entries(a, region)
    channels_last = inductor_conv.layout_optimized(a, region)
    layout = inductor_conv.layout_edit(a, region, channels_last)
    # a program already channels-last has no conversions to take, and batch norm's kernels as one
    batch_norms = inductor_conv.batch_norm_launches(a, region, channels_last=channels_last)
    compiled = _host_per_kernel(a, region, fused, layout, float(batch_norms.sum()))
    recast = cached_casts_recast(a, region)
    n = max(len(a.steps), 1)
    launches = Edit(note=f"batch norm in Triton kernels ({batch_norms.sum() / n:.0f} launches a "
                         "step more)") if batch_norms.size else None
    out = {KNOB_COMPILE: merge([compiled] + [e for e in (entries, recast, layout, launches)
                                             if e is not None])}
    skipped = _graphs_skipped(a, region)
    graphed = region & ~skipped
    graphs = launch_bound.captured(a, within=graphed) if graphed.any() else None
    if graphs is not None:
        left = _skipped_note(a, skipped)
        out[KNOB_REDUCE_OVERHEAD] = merge([fused, graphs]
                                          + [e for e in (entries, layout, left) if e is not None])
    return out


def _graphs_skipped(a: Analysis, region: np.ndarray) -> np.ndarray:
    """The region's host events that ``reduce-overhead`` leaves out of CUDA graphs: each piece of a
    step's forward (from the region's first forward operator in the step to its last, cut where
    the module reads a GPU value: TorchDynamo breaks its graph at ``.item()`` and ``bool()`` of a
    tensor) that holds ``HOST_WORK_MIN_NS`` of operators on CPU tensors (a mask built with
    ``torch.triu`` and moved over on each call). Inductor compiles such a graph with a CPU device
    in it, and cudagraph trees skip any graph that has one ("skipping cudagraphs due to cpu
    device"): its kernels launch one by one, as under the plain compile knob
    (benchmarks/BENCHMARKS-replay.md "A graph CUDA graphs skip"). The backward holds only the
    GPU's tensors and stays captured."""
    skipped = np.zeros(region.size, bool)
    trace, host = a.trace, a.trace.host
    work = a.idle.host_only_ops
    work = work[region[work] & ~bookkeeping_names(trace)[host.name[work]]]
    if work.size == 0:
        return skipped
    starts, ends = host_steps(a)
    if starts.size == 0:
        return skipped
    tops = np.flatnonzero(region & (host.top_op < 0) & (host.cat == HostCat.OP)
                          & ~autograd_nodes(trace))
    tops = tops[(host.ts[tops] >= starts[0]) & (host.ts[tops] < ends[-1])]
    if tops.size == 0:
        return skipped
    step = np.searchsorted(starts, host.ts[tops], side="right") - 1
    # the operators that read a value (a pageable upload's stream sync is no break)
    reads = sync_calls(trace) & region & (host.cat == HostCat.OP)
    cuts = np.sort(host.ts[np.flatnonzero(reads)])
    for k in np.unique(step).tolist():
        mine = tops[step == k]
        lo, hi = int(host.ts[mine].min()), int(host.end[mine].max())
        edges = np.concatenate(([lo], cuts[(cuts > lo) & (cuts < hi)], [hi]))
        for p_lo, p_hi in zip(edges[:-1].tolist(), edges[1:].tolist()):
            held = work[(host.ts[work] >= p_lo) & (host.ts[work] < p_hi)]
            if host.dur[held].sum() >= HOST_WORK_MIN_NS:
                skipped |= region & (host.ts >= p_lo) & (host.ts < p_hi)
    return skipped


def _skipped_note(a: Analysis, skipped: np.ndarray) -> Edit | None:
    """A note of the kernels a step launched from the graphs CUDA graphs skip, where there are."""
    kernels = launched_from(a, skipped).size / max(len(a.steps), 1)
    if kernels == 0:
        return None
    return Edit(note=f"{kernels:.0f} kernels a step left out of the graphs (a forward graph "
                     "with operators on CPU tensors)")


def _within(a: Analysis, edit: Edit, region: np.ndarray) -> Edit:
    """``edit``'s device changes, added launches and slower calls kept to the kernels launched
    from ``region`` and its calls."""
    launch = a.trace.device.launch

    def inside(events: np.ndarray) -> np.ndarray:
        calls = launch[events]
        return (calls >= 0) & region[np.maximum(calls, 0)]

    keep = inside(edit.device)
    slower = region[edit.calls_slower]
    added = inside(edit.added_at)
    counts = edit.added_launches if np.ndim(edit.added_launches) == 0 \
        else np.asarray(edit.added_launches)[added]
    return Edit(device=edit.device[keep], device_ns=edit.device_ns[keep],
                added_at=edit.added_at[added],
                added_launches=counts, calls_slower=edit.calls_slower[slower],
                calls_slower_ns=edit.calls_slower_ns[slower], note=edit.note)


def _compiled_already(a: Analysis, region: np.ndarray) -> bool:
    """The region launches generated (Triton) kernels: the program compiles its module already,
    and the knobs leave it as it is (tryfix/knobs.py)."""
    dev = a.trace.device
    launched = dev.launch >= 0
    return bool((dev.triton[launched] & region[dev.launch[launched]]).any())


def fusion(a: Analysis, within: np.ndarray) -> Edit:
    """Each chain of memory-bound kernels launched from host events ``within`` fused into one
    kernel at its fused time (unfused_elementwise ``fused_ns``): the chain's first kernel takes
    it, the others leave the GPU, and the operators that launched only those leave the host
    (module docstring). An empty edit (a
    region with no chain) is the step unchanged."""
    dev = a.trace.device
    t = a.roofline.event_in_steps_ns
    floor_ns = unfused_elementwise.kernel_floor_ns(a)
    training = ran_backward(a.trace)
    retimed: list[int] = []
    retimed_ns: list[float] = []
    gone: list[np.ndarray] = []
    for chain in unfused_elementwise.chains(a, with_attention=True, by_numel=True):
        calls = dev.launch[chain]
        if (calls < 0).any() or not within[calls].all():
            continue
        retimed.append(int(chain[0]))
        retimed_ns.append(unfused_elementwise.fused_ns(a, chain, t, floor_ns, training,
                                                       inductor=True))
        gone.append(chain[1:])
    if not retimed:
        return Edit(note="no chain to fuse in the compiled region")
    copies = _copies_joining(a, np.concatenate([np.array(retimed, np.int64)] + gone), within)
    removed = distinct(np.concatenate(gone + [copies])).astype(np.int64)
    ops = _ops_launching_only(a, removed)
    host = a.trace.host
    n = max(len(a.steps), 1)
    return Edit(device=np.array(retimed, np.int64), device_ns=np.array(retimed_ns, float),
                device_removed=removed, host_removed_s=host.ts[ops], host_removed_e=host.end[ops],
                note=f"{len(retimed) / n:.0f} chains of memory-bound kernels a step fused "
                     f"({(removed.size - copies.size) / n:.0f} kernels fewer"
                     + (f", {copies.size / n:.0f} device copies" if copies.size else "") + ")")


def _copies_joining(a: Analysis, fused: np.ndarray, within: np.ndarray) -> np.ndarray:
    """The device-to-device copies (memcpy, not kernels) in the steps that an operator of a fused
    chain made, from host events ``within``: an out-of-place ``masked_fill`` clones its input before
    filling it, forward and backward; the fused kernel writes its output once, and the clone goes
    with the chain (benchmarks/BENCHMARKS-replay.md "A fused pass at its chain's own rate")."""
    dev, host = a.trace.device, a.trace.host
    dtod = np.flatnonzero((dev.kind == int(Kind.MEMCPY_DTOD)) & (dev.launch >= 0)
                          & (a.roofline.event_in_steps_ns > 0))
    dtod = dtod[within[dev.launch[dtod]]]
    if dtod.size == 0 or fused.size == 0:
        return np.zeros(0, np.int64)
    owners = distinct(host.outermost(dev.launch[fused]))
    return dtod[np.isin(host.outermost(dev.launch[dtod]), owners)]


# The host time of entering a compiled forward and a compiled backward (guards, AOTAutograd's
# wrappers), fitted with a cost per kernel on MLP stacks and small Llamas on an H200's host
# (benchmarks/probes/probe_compiled_call_cost.py; benchmarks/BENCHMARKS-replay.md "A compiled
# call's host time"). The cost per kernel came out about what an eager operator costs there, so a
# fused chain's operators leave the host (``fusion``) and the rest keep their eager time.
COMPILED_FORWARD_ENTRY_NS = 440_000.0
COMPILED_BACKWARD_ENTRY_NS = 550_000.0
# The entries were fitted on models of 4 to 64 parameters; the compiled forward costs about 2 us a
# parameter more than the eager one (its guards; the backward's AccumulateGrad nodes run eagerly in
# both): beyond the middle of that range, each parameter adds it (benchmarks/probes/
# probe_compiled_call_cost.py --params; benchmarks/BENCHMARKS-replay.md "A compiled call's cost
# per parameter").
ENTRY_FITTED_PARAMETERS = 32
COMPILED_NS_PER_PARAMETER = 2_000.0


def compiled_entries(a: Analysis, region: np.ndarray) -> Edit | None:
    """Each compiled forward and backward call's entry cost, on the first launch from the region
    in each pass: a forward's first launch after a backward (or the step's start), a backward's
    first after a forward; as often in a pass as the capture counted outermost modules called in a
    step for each pass (``Analysis.outermost_calls``). A closure that runs the model several times a
    step (LBFGS) enters it as often. A forward's entry grows with the parameters past
    ``ENTRY_FITTED_PARAMETERS``. None where the region launches nothing in the steps, or in a step
    with no backward: the entries were measured with grad mode on (AOTAutograd's wrapper), not
    under no_grad."""
    if not ran_backward(a.trace):
        return None
    dev, host = a.trace.device, a.trace.host
    calls = distinct(dev.launch[dev.launch >= 0])
    calls = calls[region[calls]]
    starts, ends = host_steps(a)
    calls = calls[(host.ts[calls] >= starts[0]) & (host.ts[calls] < ends[-1])]
    # the module's evaluations under no_grad in a training step (analysis/compiled_region.py)
    # enter no graph with grad mode on: they keep their fusion price, as an inference step does
    calls = calls[~evaluations(a.trace)[calls]]
    if calls.size == 0:
        return None
    calls = calls[np.argsort(host.ts[calls], kind="stable")]
    backward = autograd_nodes(a.trace)[host.outermost(calls)]
    step = np.searchsorted(starts, host.ts[calls], side="right") - 1
    entry = np.concatenate(([True], (backward[1:] != backward[:-1]) | (step[1:] != step[:-1])))
    n = max(len(a.steps), 1)
    # the knob compiles each outermost module: a step that calls several (a GAN's networks, a list
    # of blocks called in turn) enters each, where the trace shows one pass for them all; each
    # call's guards check its own parameters
    passes = max(int((entry & ~backward).sum()) / n, 1.0)
    calls_per_pass = max((a.outermost_calls or 0) / passes, 1.0)
    # the parameters each backward accumulates: what the compiled forward's guards check
    updates = parameter_updates(a.trace) & (host.ts >= starts[0]) & (host.ts < ends[-1])
    params = int(updates.sum()) / max(int((entry & backward).sum()), 1) / calls_per_pass
    forward = COMPILED_FORWARD_ENTRY_NS + COMPILED_NS_PER_PARAMETER * max(
        params - ENTRY_FITTED_PARAMETERS, 0.0)
    cost = np.where(backward, COMPILED_BACKWARD_ENTRY_NS, forward)[entry] * calls_per_pass
    return Edit(calls_slower=calls[entry].astype(np.int64), calls_slower_ns=cost,
                note=f"the compiled forward and backward entered "
                     f"{int(entry.sum()) * calls_per_pass / n:.0f} times a step")


# the 16-bit float types autocast narrows to
_LOW_PRECISION = frozenset(t for t, short in DTYPE_NAMES.items() if short in ("bf16", "fp16"))
_LOW_PRECISION_MARKS = tuple(t.encode() for t in _LOW_PRECISION)


def cached_casts_recast(a: Analysis, region: np.ndarray) -> Edit | None:
    """Autocast's cached casts, cast again by the compiled code on every call. Eager autocast casts
    a parameter (a leaf that requires grad) once per autocast context and keeps the copy: an
    operator run under a context the program holds for many steps (``with torch.no_grad(),
    torch.autocast(...)`` around an inference loop) launches no cast of its weight or bias, only of
    its input. The graph Inductor compiles casts them as ops of its own, one kernel each, on every
    call (benchmarks/BENCHMARKS-replay.md "Autocast's cached casts under compile"). Each such
    operator's first kernel gets a launch for each argument its autocast wrapper narrows without
    a cast of its own; None where there is none. The casts' GPU time (a parameter's bytes) is left
    out."""
    host = a.trace.host
    starts, ends = host_steps(a)
    # an autocast wrapper: an operator whose inner operator of the same name runs on 16-bit
    # arguments (a byte search before decoding the few that can be)
    inner = np.flatnonzero((host.op >= 0) & (host.cat == HostCat.OP))
    inner = inner[host.name[inner] == host.name[host.op[inner]]]
    outer = host.op[inner]
    keep = region[outer] & (host.ts[outer] >= starts[0]) & (host.ts[outer] < ends[-1])
    inner, outer = inner[keep], outer[keep]
    narrow = np.fromiter((any(m in r for m in _LOW_PRECISION_MARKS)
                          for r in host.raw_args_at(inner.tolist())), bool, inner.size)
    inner, outer = inner[narrow], outer[narrow]
    if outer.size == 0:
        return None
    a.trace.op_arg_ids(np.concatenate([outer, inner]).astype(np.int64))  # decoded in one pass
    narrowed = np.array([sum(1 for w, n in zip(a.trace.input_types(int(o)),
                                               a.trace.input_types(int(i)))
                             if w == "float" and n in _LOW_PRECISION)
                         for o, i in zip(outer.tolist(), inner.tolist())], float)
    cached = narrowed - _casts_made_by(a, outer)
    outer, cached = outer[cached > 0], cached[cached > 0]
    first = _first_kernel_inside(a, outer)
    found = first >= 0
    if not found.any():
        return None
    n = max(len(a.steps), 1)
    return Edit(added_at=first[found], added_launches=float(cached[found].mean()),
                note=f"{cached.sum() / n:.0f} casts autocast had cached, cast on every call")


def _casts_made_by(a: Analysis, wrappers: np.ndarray) -> np.ndarray:
    """For each autocast wrapper, the ``aten::_to_copy`` operators it ran itself (directly or
    under an ``aten::to``), not those under its inner operator."""
    host = a.trace.host
    copy_id = a.trace.string_ids.get("aten::_to_copy", -1)
    copies = np.flatnonzero((host.name == copy_id) & (host.cat == HostCat.OP))
    enclosing = host.op[copies]
    owner = np.full(copies.size, -1, np.int64)
    for _ in range(2):  # aten::_to_copy, under aten::to, under the wrapper
        hit = np.isin(enclosing, wrappers) & (owner < 0)
        owner[hit] = enclosing[hit]
        enclosing = np.where(enclosing >= 0, host.op[np.maximum(enclosing, 0)], -1)
    made = dict(zip(*np.unique(owner[owner >= 0], return_counts=True)))
    return np.array([made.get(int(w), 0) for w in wrappers.tolist()], float)


def _first_kernel_inside(a: Analysis, ops: np.ndarray) -> np.ndarray:
    """For each host operator, the first device event launched from inside it on its thread (-1
    where none)."""
    host, dev = a.trace.host, a.trace.device
    out = np.full(ops.size, -1, np.int64)
    launched = np.flatnonzero(dev.launch >= 0)
    for t in distinct(host.thread[ops]).tolist():
        mine = launched[host.thread[dev.launch[launched]] == t]
        mine = mine[np.argsort(host.ts[dev.launch[mine]], kind="stable")]
        ts = host.ts[dev.launch[mine]]
        sel = np.flatnonzero(host.thread[ops] == t)
        at = np.searchsorted(ts, host.ts[ops[sel]], side="left")
        inside = at < ts.size
        inside[inside] = ts[at[inside]] < host.end[ops[sel[inside]]]
        out[sel[inside]] = mine[at[inside]]
    return out


def _host_per_kernel(a: Analysis, region: np.ndarray, fused: Edit,
                     layout: Edit | None = None, added: float = 0.0) -> Edit:
    """``fused`` with its host part restated: each pass of the region through the host (a forward,
    a backward) shrinks by the share of the region's kernels the fusion removes. The generated code
    runs none of the module's Python and launches each kernel left at about an eager operator's
    cost (benchmarks/BENCHMARKS-replay.md "A compiled call's host time"), so the region's host time
    goes with its kernels, at the program's own cost per kernel; taking out only the fused
    operators left the Python between them (benchmarks/BENCHMARKS-replay.md "The compiled region's
    host time, kernel by kernel"). The layout conversions a channels-last compile takes
    (``layout``) count on neither side: cuDNN launched them inside a convolution's call, which
    stays. The kernels compiled code ``added`` (batch norm's, inductor_conv.py) cost as much each,
    so the passes grow by their share (benchmarks/BENCHMARKS-replay.md "Compile on a
    convolutional net")."""
    if fused.device_removed.size == 0 and added == 0:
        return fused
    s, e, kernels = _region_passes(a, region)
    kernels -= 0 if layout is None else layout.device_removed.size
    if s.size == 0 or kernels <= 0:
        return fused
    share = min((fused.device_removed.size - added) / kernels, 1.0)
    return msgspec.structs.replace(fused, host_removed_s=s, host_removed_e=e, host_share=share)


def _region_passes(a: Analysis, region: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Each pass of the region through the host in the steps (a forward, a backward: a run of its
    top-level operators, from the first one's start to the last one's end, that no other operator
    of their threads interrupts: an LSTM that Dynamo leaves eager splits the forward in two), and
    the kernels the region launched there."""
    host = a.trace.host
    starts, ends = host_steps(a)
    in_steps = (host.top_op < 0) & (host.cat == HostCat.OP) & (host.ts >= starts[0]) & (
        host.ts < ends[-1])
    ours = np.flatnonzero(in_steps & region)
    if ours.size == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), 0
    tops = np.flatnonzero(in_steps & host.on_threads(distinct(host.thread[ours])))
    tops = tops[np.argsort(host.ts[tops], kind="stable")]
    inside = region[tops]
    backward = autograd_nodes(a.trace)[tops]
    step = np.searchsorted(starts, host.ts[tops], side="right") - 1
    # a new pass at a region operator after one outside it, or where the pass or the step turns
    turns = np.concatenate(([True], ~inside[:-1] | (backward[1:] != backward[:-1])
                            | (step[1:] != step[:-1])))
    tops, turns = tops[inside], turns[inside]
    first = np.flatnonzero(turns)
    s = np.minimum.reduceat(host.ts[tops], first)
    e = np.maximum.reduceat(host.end[tops], first)
    return s.astype(np.int64), e.astype(np.int64), int(launched_from(a, region).size)


def _ops_launching_only(a: Analysis, kernels: np.ndarray) -> np.ndarray:
    """The outermost host operators (an autograd node in the backward) every kernel of which is in
    ``kernels``: a fused chain's other operators, which the generated code no longer dispatches.
    An operator that also launches a kernel that stays (a matmul's) keeps its time."""
    dev, host = a.trace.device, a.trace.host
    launched = np.flatnonzero(dev.launch >= 0)
    calls = dev.launch[launched]
    tops = host.outermost(calls)
    gone = np.isin(launched, kernels)
    return difference(distinct(tops[gone]), tops[~gone]).astype(np.int64)


__all__ = ["KNOB_BF16", "KNOB_COMPILE", "KNOB_FOREACH", "KNOB_REDUCE_OVERHEAD", "KNOB_TF32",
           "KnobPrice",
           "compile_knob_edit", "fusion", "knob_edits"]
