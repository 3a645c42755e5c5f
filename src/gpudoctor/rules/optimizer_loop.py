"""optimizer-loop: the optimizer updates parameters one tensor at a time.

``foreach=False`` (or a hand-written loop) issues several tiny kernels per parameter, each paid
a launch; ``fused=True`` / ``foreach=True`` update all parameters in a few multi-tensor kernels.
Priced as the optimizer step's span per step minus one pass over its bytes at memory bandwidth.

``optimizer.step(closure)`` (Lightning, LBFGS, SAM...) runs the closure (zero_grad, forward,
backward) inside the ``Optimizer.step#`` annotation; the backward's ops run on the autograd
thread as ``autograd::engine::evaluate_function: ...``. The optimizer's own phase begins after
the closure returned: after the last backward op in the region, and on the GPU after the
closure's kernels drained. Only the kernels launched in that phase, and its host time, are the
optimizer's.

Several optimizers stepped one after another each step (one per layer, per parameter group), each
a multi-tensor step of its own few tensors, are not a per-parameter loop: their price is the
wrapper each ``step()`` and ``zero_grad()`` pays beyond the first (``_instances``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import (
    autograd_nodes,
    optimizer_bookkeeping,
    optimizer_steps,
)
from gpudoctor.analysis.intervals import contains, subtract, union
from gpudoctor.core.arrays import difference, distinct
from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import kernel_names_of_events
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import HostCat, Trace

ID = "optimizer-loop"
MIN_KERNELS_PER_STEP = 64
# a for-loop AdamW streams each parameter's state through HBM about three times more than the
# single fused pass (four separate in-place updates, each a read and a write)
LOOP_TRAFFIC_FACTOR = 3.0


def check(a: Analysis) -> Finding | None:
    trace, host, dev = a.trace, a.trace.host, a.trace.device
    found = _update_regions(a, hand_written=True)
    if found is None:
        return None
    r_s, r_e, regions, hand_written = found
    n = max(len(a.steps), 1)
    launched = dev.launch >= 0
    launch_ts = np.where(launched, host.ts[np.maximum(dev.launch, 0)], -1)
    phase_s, closure_gpu_end = _after_closure(a, r_s, r_e, launch_ts)
    inside = launched & contains(phase_s, r_e, launch_ts)
    inside &= a.roofline.event_in_steps_ns > 0
    idx = np.flatnonzero(inside)
    if idx.size / n < MIN_KERNELS_PER_STEP or _multi_tensor(dev.kind[idx]):
        return None if hand_written else _instances_finding(a, regions)
    # each region's phase: from when the host left the closure and the GPU ran the closure's
    # kernels, to the later of the host's return and the GPU's end of the optimizer's kernels
    start = np.maximum(phase_s, closure_gpu_end)
    end = np.minimum(r_e, a.steps.end.max())
    np.maximum.at(end, np.searchsorted(r_s, launch_ts[idx], side="right") - 1, dev.end[idx])
    span_ns = float(np.clip(end - np.maximum(start, a.steps.start.min()), 0, None).sum())
    fused = _fused_ns(a, idx)
    fused_ns = float(fused.sum())
    saving = max(span_ns - fused_ns, 0.0) / 1e6 / n
    sized = a.roofline.event_bytes[idx] > 0
    how = ("moves the same bytes in about" if sized.all() else
           "takes at most about" if not sized.any() else "takes about")
    unsized = ("" if sized.all() else
               " (the trace records no tensor sizes: a third of its kernels' time)"
               if not sized.any() else
               f" (the trace records no tensor sizes for {int((~sized).sum()) / n:.0f} of its "
               "kernels a step: each of those at a third of its time)")
    return make_finding(
        ID,
        "The optimizer steps through parameters in a Python loop",
        a.step_ms,
        saving,
        f"The optimizer step launches {idx.size / n:.0f} kernels per step and spans "
        f"{span_ns / 1e6 / n:.2f} ms; a fused multi-tensor step {how} "
        f"{fused_ns / 1e6 / n:.2f} ms{unsized}.",
        Evidence(
            numbers={
                "optimizer_kernels_per_step": round(idx.size / n, 1),
                "optimizer_span_ms_per_step": round(span_ns / 1e6 / n, 3),
                "optimizer_kernel_ms_per_step": round(float(dev.dur[idx].sum()) / 1e6 / n, 3),
                "fused_estimate_ms_per_step": round(fused_ns / 1e6 / n, 3),
            },
            ops=tuple(dict.fromkeys(trace.strings[host.name[i]] for i in regions.tolist()))[:3],
            kernels=kernel_names_of_events(trace, idx),
        ),
        _hand_written_fixes(trace, regions) if hand_written
        else _fixes(_optimizer_class(trace, regions)),
        idle_ms=max(span_ns - float(dev.dur[idx].sum()), 0.0) / 1e6 / n,
    )


# Several torch.optim optimizers stepped one after another in each step (one per layer, per
# parameter group, per parameter), each a multi-tensor update of its own few tensors: each
# ``step()`` and ``zero_grad()`` pays torch.optim's wrapper around that update (its annotation,
# hooks, the CUDA-graph capture check) where one optimizer with a parameter group per instance pays
# it once; the per-group update runs either way (torch/optim/adamw.py loops over param_groups).
# per_layer_optimizers' twin: 25 AdamW, about 45 us of wrapper a step() and 17 a zero_grad()
# profiled (benchmarks/BENCHMARKS-twins.md "Eight more twins").
MIN_INSTANCES = 4


class _Instances(NamedTuple):
    count: float  # optimizer steps a step (median)
    wrapper_s: np.ndarray  # the extra instances' wrapper intervals: starts
    wrapper_e: np.ndarray  # and ends (ns)


def _multi_tensor(kinds: np.ndarray) -> bool:
    """Whether the optimizer's kernels (their kinds) are mostly multi-tensor ones: a foreach or
    fused step, not a loop over parameters."""
    return bool((kinds == Kind.OPTIMIZER).mean() > 0.5)


def _instances(a: Analysis, regions: np.ndarray) -> _Instances | None:
    """Each step's optimizer steps and zero_grads beyond its first of each: their wrapper time, the
    region's host time less the span of the events nested in it on its thread (all of it where
    nothing is nested: ``zero_grad(set_to_none=True)``). None under MIN_INSTANCES steps a step."""
    host, steps = a.trace.host, a.steps
    if len(steps) == 0 or regions.size == 0:
        return None
    per_step = np.histogram(host.ts[regions], np.append(steps.start, steps.end.max()))[0]
    count = float(np.median(per_step))
    if count < MIN_INSTANCES:
        return None
    marked = np.flatnonzero(optimizer_bookkeeping(a.trace))
    marked = marked[(host.ts[marked] >= steps.start.min()) & (host.end[marked] <= steps.end.max())]
    # beyond the first of its kind (step, zero_grad) in its step
    step_of = np.searchsorted(steps.start, host.ts[marked], side="right") - 1
    order = np.lexsort((host.ts[marked], step_of, host.name[marked]))
    marked, step_of = marked[order], step_of[order]
    name = host.name[marked]
    first = np.ones(marked.size, bool)
    first[1:] = (step_of[1:] != step_of[:-1]) | (name[1:] != name[:-1])
    extra = marked[~first]
    nested_cats = np.isin(host.cat, [HostCat.OP, HostCat.RUNTIME, HostCat.DRIVER])
    starts, ends = [], []
    for thread in distinct(host.thread[extra]).tolist():
        regs = extra[host.thread[extra] == thread]
        regs = regs[np.argsort(host.ts[regs], kind="stable")]
        ev = np.flatnonzero(nested_cats & (host.thread == thread))
        k = np.searchsorted(host.ts[regs], host.ts[ev], side="right") - 1
        inside = (k >= 0) & (host.end[ev] <= host.end[regs[np.maximum(k, 0)]])
        lo, hi = host.end[regs].astype(np.int64), host.ts[regs].astype(np.int64)
        np.minimum.at(lo, k[inside], host.ts[ev[inside]])
        np.maximum.at(hi, k[inside], host.end[ev[inside]])
        has = lo < hi
        s_, e_ = subtract(host.ts[regs].astype(np.int64), host.end[regs].astype(np.int64),
                          lo[has], hi[has])
        starts.append(s_)
        ends.append(e_)
    if not starts or not sum(x.size for x in starts):
        return None
    return _Instances(count, np.concatenate(starts), np.concatenate(ends))


def _instances_finding(a: Analysis, regions: np.ndarray) -> Finding | None:
    """The optimizer's own update is multi-tensor, but several optimizers step a step."""
    found = _instances(a, regions)
    if found is None:
        return None
    n = max(len(a.steps), 1)
    wrapper_ms = float(np.clip(found.wrapper_e - found.wrapper_s, 0, None).sum()) / 1e6 / n
    cls = _optimizer_class(a.trace, regions)
    count = round(found.count)
    return make_finding(
        ID,
        f"{count} optimizers step one after another",
        a.step_ms,
        wrapper_ms,
        f"{count} {cls or 'torch.optim'} optimizers step (and zero their gradients) one after "
        f"another each step; torch.optim's wrapper around each of their updates takes "
        f"{wrapper_ms:.2f} ms a step beyond the first's. One optimizer with a parameter group per "
        "instance pays it once (where they share their settings, one group saves the per-group "
        "updates too).",
        Evidence(
            numbers={
                "optimizer_instances_per_step": float(count),
                "optimizer_wrapper_ms_per_step": round(wrapper_ms, 3),
            },
            ops=tuple(dict.fromkeys(a.trace.strings[a.trace.host.name[i]]
                                    for i in regions.tolist()))[:3],
        ),
        (_one_optimizer_fix(cls, count),),
        idle_ms=0.0,
    )


def _one_optimizer_fix(cls: str, count: int) -> Fix:
    """One optimizer of the instances' class over their parameter groups: torch.optim's, with its
    fused or multi-tensor step where it has one; the program's own class as it is named."""
    kind = "fused=True" if cls in FUSED else "foreach=True" if cls in FOREACH else ""
    make = f"torch.optim.{cls}" if cls in FUSED + FOREACH else (cls or "Optimizer")
    return Fix(
        f"Step one {cls or 'optimizer'} over every parameter, each instance's settings as a "
        "parameter group",
        f"opt = {make}(\n"
        f"    [{{\"params\": group_params, \"lr\": group_lr}} for group_params, group_lr in "
        f"groups],  # the {count} instances' parameters and settings\n"
        + (f"    {kind},\n" if kind else "")
        + ")\n# one opt.step() and one opt.zero_grad() a step")


# torch.optim's optimizers with a fused CUDA step from torch 2.4 on, and those with a multi-tensor
# (foreach) step (their ``fused`` / ``foreach`` arguments; Adagrad's fused step came later, for the
# CPU first)
FUSED = ("Adam", "AdamW", "SGD")
FOREACH = ("Adagrad", "Adadelta", "Adamax", "ASGD", "NAdam", "RAdam", "RMSprop", "Rprop")


def _optimizer_class(trace: Trace, regions: np.ndarray) -> str:
    """The optimizer's class, as its ``Optimizer.step#<class>.step`` annotation names it (the most
    frequent, where several step)."""
    names = [trace.strings[i].removeprefix("Optimizer.step#").removesuffix(".step")
             for i in trace.host.name[regions].tolist()]
    return max(set(names), key=names.count) if names else ""


def _fixes(cls: str) -> tuple[Fix, ...]:
    """The fixes for the program's own optimizer: its fused step, or its multi-tensor one, where
    torch.optim has them; else compiling the step."""
    compiled = Fix("Compile the optimizer step",
                   "@torch.compile(fullgraph=False)\ndef opt_step():\n    opt.step()")
    if cls in FUSED:
        return (Fix("Use the fused optimizer kernel",
                    f"opt = torch.optim.{cls}(params, lr=lr, fused=True)"),
                Fix("Or the multi-tensor (foreach) implementation",
                    f"opt = torch.optim.{cls}(params, lr=lr, foreach=True)"), compiled)
    if cls in FOREACH:
        return (Fix("Use the multi-tensor (foreach) implementation",
                    f"opt = torch.optim.{cls}(params, lr=lr, foreach=True)"), compiled)
    return (compiled, Fix(f"Or a fused implementation of {cls or 'the optimizer'} (one kernel over "
                          "all parameters), where a library has one", ""))


# A hand-written update (no ``Optimizer.step#`` annotation): after each step's backward, the run of
# outermost operators on the program's thread that update tensors in place, with the out-of-place
# elementwise ones an update computes between them (Adam's ``v / c2``), one small kernel each per
# parameter (tests/data/twins_h100/manual_adam_loop: 909 a step for 101 parameters;
# benchmarks/BENCHMARKS-twins.md "A hand-written optimizer").
UPDATE_OPS = frozenset({"aten::div", "aten::sqrt", "aten::mul", "aten::add", "aten::sub",
                        "aten::neg", "aten::sign", "aten::abs", "aten::clamp", "aten::maximum",
                        "aten::minimum", "aten::pow", "aten::rsqrt", "aten::lerp"})


def _is_update(name: str) -> bool:
    return name in UPDATE_OPS or (name.startswith("aten::") and name.endswith("_")
                                  and not name.startswith("aten::_foreach"))


def hand_written_updates(a: Analysis) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each step's hand-written update: from the first outermost operator after the step's
    backward (the autograd engine's last node) through the run of update operators
    (``_is_update``) on that operator's thread. The spans' starts and ends, and the operators."""
    trace, host = a.trace, a.trace.host
    nodes = np.flatnonzero(autograd_nodes(trace))
    empty = np.empty(0, np.int64)
    if nodes.size == 0 or len(a.steps) == 0:
        return empty, empty, empty
    tops = np.flatnonzero((host.cat == HostCat.OP) & (host.top_op < 0) & ~autograd_nodes(trace))
    tops = tops[np.argsort(host.ts[tops], kind="stable")]
    is_update = trace.names_matching(_is_update)[host.name[tops]]
    starts, ends, ops = [], [], []
    for lo, hi in zip(a.steps.start.tolist(), a.steps.end.tolist()):
        in_step = nodes[(host.ts[nodes] >= lo) & (host.ts[nodes] < hi)]
        if in_step.size == 0:
            continue
        done = int(host.end[in_step].max())
        k = int(np.searchsorted(host.ts[tops], done, side="left"))
        if k >= tops.size or not is_update[k]:
            continue
        thread = host.thread[tops[k]]
        j = k
        while j < tops.size and is_update[j] and host.thread[tops[j]] == thread:
            j += 1
        starts.append(int(host.ts[tops[k]]))
        ends.append(int(host.end[tops[k:j]].max()))
        ops.append(tops[k:j])
    if not starts:
        return empty, empty, empty
    return (np.array(starts, np.int64), np.array(ends, np.int64),
            np.concatenate(ops).astype(np.int64))


def _update_regions(a: Analysis, hand_written: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                               bool] | None:
    """The optimizer's regions (their starts and ends, the host events that mark them) and whether
    they are hand-written: torch.optim's ``Optimizer.step#`` annotations, else with ``hand_written``
    the steps' hand-written updates (``hand_written_updates``); None where there are neither."""
    host = a.trace.host
    regions = np.flatnonzero(optimizer_steps(a.trace))
    if regions.size:
        r_s, r_e = union(host.ts[regions], host.end[regions])
        return r_s, r_e, regions, False
    if not hand_written:
        return None
    r_s, r_e, ops = hand_written_updates(a)
    return (r_s, r_e, ops, True) if r_s.size else None


def _hand_written_fixes(trace: Trace, ops: np.ndarray) -> tuple[Fix, ...]:
    """torch.optim's fused step for the update the operators show (Adam's addcmul_ / addcdiv_,
    else SGD's), then the same update over all parameters at once with foreach operators."""
    names = {trace.strings[i] for i in distinct(trace.host.name[ops]).tolist()}
    cls = "AdamW" if {"aten::addcdiv_", "aten::addcmul_"} & names else "SGD"
    return (
        Fix(f"Replace the hand-written update with torch.optim's fused {cls}",
            f"opt = torch.optim.{cls}(model.parameters(), lr=lr, fused=True)  # one pass over "
            "every parameter"),
        Fix("Or keep the update and run each of its operations over all parameters at once",
            "torch._foreach_mul_(params, 1 - lr * wd)\n"
            "torch._foreach_add_(params, updates, alpha=-lr)  # one kernel per operation, not per "
            "parameter"),
    )


def _fused_ns(a: Analysis, idx: np.ndarray) -> np.ndarray:
    """Each of the loop's kernels in the fused step: its bytes at the memory roof, a
    LOOP_TRAFFIC_FACTOR-th of the traffic. A kernel whose bytes the trace does not give (no
    recorded shapes) is taken at that share of its own time, as if it ran at the roof: at most
    what the fused step takes, so the saving is at least what is priced."""
    nbytes = a.roofline.event_bytes[idx].astype(float)
    at_roof = nbytes / LOOP_TRAFFIC_FACTOR / a.ceilings.hbm_bytes_per_s * 1e9
    return np.where(nbytes > 0, at_roof, a.trace.device.dur[idx] / LOOP_TRAFFIC_FACTOR)


def _first_operator(a: Analysis, regions: np.ndarray, phase_s: np.ndarray,
                    r_e: np.ndarray) -> np.ndarray:
    """Where each region's first operator after ``phase_s`` begins (the region's end where it has
    none): the step's walk over its parameters before it (``_init_group``: each parameter's state
    and gradient gathered in Python) runs for a fused or foreach step too, as the lab trap's
    recorded twins show (tests/test_optimizer_edit.py)."""
    host = a.trace.host
    ops = np.flatnonzero((host.cat == HostCat.OP) & host.on_threads(distinct(host.thread[regions])))
    at = np.sort(host.ts[ops])
    if at.size == 0:
        return r_e.copy()
    first = at[np.minimum(np.searchsorted(at, phase_s), at.size - 1)]
    return np.where((first >= phase_s) & (first < r_e), first, r_e)


def _after_closure(a: Analysis, r_s: np.ndarray, r_e: np.ndarray,
                   launch_ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each optimizer region's own work begins on the host, and where its closure's GPU work
    ends.

    A region without a closure begins at its start (and has no closure GPU work: -1).
    """
    trace, host, dev = a.trace, a.trace.host, a.trace.device
    # the closure's backward (its ops run on the autograd thread, outside the annotation's nesting)
    backward = autograd_nodes(trace)
    phase_s = r_s.copy()
    bw = np.flatnonzero(backward)
    k = np.searchsorted(r_s, host.ts[bw], side="right") - 1  # the region each backward op starts in
    ok = (k >= 0) & (host.ts[bw] < r_e[np.maximum(k, 0)])
    np.maximum.at(phase_s, k[ok], np.minimum(host.end[bw[ok]], r_e[k[ok]]))
    gpu_end = np.full(len(r_s), -1, np.int64)
    j = np.searchsorted(r_s, launch_ts, side="right") - 1  # the region each kernel was launched in
    ok = (launch_ts >= 0) & (j >= 0) & (launch_ts < phase_s[np.maximum(j, 0)])
    np.maximum.at(gpu_end, j[ok], dev.end[ok])
    return phase_s, gpu_end



class _Loop(NamedTuple):
    regions: np.ndarray  # the optimizer steps' host events
    ends: np.ndarray  # each region's end
    phase_starts: np.ndarray  # where its own phase starts, after its closure (``_after_closure``)
    launch_ts: np.ndarray  # every device event's launch time (-1: no launch)
    kernels: np.ndarray  # the kernels launched in those phases within the steps


def _loop(a: Analysis, hand_written: bool = False) -> _Loop | None:
    """The optimizer steps' loop (``_Loop``); None where the steps launch nothing in it. With
    ``hand_written``, where no torch.optim step ran, the steps' hand-written updates."""
    host, dev = a.trace.host, a.trace.device
    found = _update_regions(a, hand_written)
    if found is None:
        return None
    r_s, r_e, regions, _ = found
    launched = dev.launch >= 0
    launch_ts = np.where(launched, host.ts[np.maximum(dev.launch, 0)], -1)
    phase_s, _ = _after_closure(a, r_s, r_e, launch_ts)
    idx = np.flatnonzero(
        launched & contains(phase_s, r_e, launch_ts) & (a.roofline.event_in_steps_ns > 0))
    return _Loop(regions, r_e, phase_s, launch_ts, idx) if idx.size else None


def edit(a: Analysis, finding: Finding) -> Edit | None:
    """The fused (or foreach) step: the region's own host time from its first operator goes but
    one launch a step (the walk over the parameters before it stays: ``_first_operator``), and its
    kernels move the same bytes in one pass (as priced: LOOP_TRAFFIC_FACTOR less traffic)."""
    if "optimizer_instances_per_step" in finding.evidence.numbers:
        found = _update_regions(a, hand_written=False)
        instances = _instances(a, found[2]) if found is not None else None
        if instances is None:
            return None
        return Edit(host_removed_s=instances.wrapper_s, host_removed_e=instances.wrapper_e,
                    paced=False, note=f"one optimizer for {round(instances.count)}")
    loop = _loop(a, hand_written=True)
    if loop is None:
        return None
    regions, r_e, phase_s, idx = loop.regions, loop.ends, loop.phase_starts, loop.kernels
    host, dev = a.trace.host, a.trace.device
    fused_ns = float(_fused_ns(a, idx).sum())
    total = float(dev.dur[idx].sum())
    share = min(fused_ns / total, 1.0) if total > 0 else 1.0
    calls = distinct(dev.launch[idx])
    step_of = np.searchsorted(phase_s, host.ts[calls], side="right") - 1
    first = calls[np.unique(step_of, return_index=True)[1]]  # one launch a region stays
    return Edit(device=idx.astype(np.int64), device_ns=dev.dur[idx] * share,
                host_removed_s=_first_operator(a, regions, phase_s, r_e), host_removed_e=r_e,
                calls_removed=difference(calls, first).astype(np.int64), paced=False,
                note="fused optimizer step")


def foreach_edit(a: Analysis) -> Edit | None:
    """The loop's step with ``foreach=True`` (the ``optimizer-foreach`` knob), not fused: each of
    the loop's operators on the GPU runs once over every parameter (a ``_foreach_lerp_`` for the
    parameters' ``lerp_``s), and nothing else changes. Its kernels move the loop's bytes (the
    same update ops, no fewer passes, at the memory roof instead of each tiny kernel's rate); the
    operators that launched them leave the host, and ``k`` operators take their place a step, k
    the loop's launching operators per parameter. The operators that launch nothing stay: the
    steps' counters on the CPU (``step += 1``, ``.item()`` for the bias corrections), which the
    multi-tensor path runs per parameter too (torch/optim/adam.py ``_multi_tensor_adam``). None
    where the steps have no optimizer loop (tests/test_optimizer_foreach_price.py;
    benchmarks/BENCHMARKS-replay.md "Knob set v")."""
    loop = _loop(a)
    n = max(len(a.steps), 1)
    if loop is None or loop.kernels.size / n < MIN_KERNELS_PER_STEP:
        return None
    phase_s, launch_ts, idx = loop.phase_starts, loop.launch_ts, loop.kernels
    host, dev = a.trace.host, a.trace.device
    if _multi_tensor(dev.kind[idx]):
        return None
    ops = distinct(host.outermost(dev.launch[idx]))
    # the parameters: most of the loop's operators run once for each (AdamW's ``mul_`` twice)
    _, counts = np.unique(host.name[ops], return_counts=True)
    per_parameter = max(round(ops.size / max(float(np.median(counts)), 1.0)), 1)
    nbytes = a.roofline.event_bytes[idx].astype(float)
    at_roof = nbytes / a.ceilings.hbm_bytes_per_s * 1e9
    device_ns = np.where(nbytes > 0, np.minimum(at_roof, dev.dur[idx]), dev.dur[idx])
    step_of = np.searchsorted(phase_s, launch_ts[idx], side="right") - 1
    first = idx[np.unique(step_of, return_index=True)[1]]  # the first kernel of each step's loop
    return Edit(device=idx.astype(np.int64), device_ns=device_ns,
                host_removed_s=host.ts[ops], host_removed_e=host.end[ops],
                calls_removed=distinct(dev.launch[idx]).astype(np.int64),
                added_at=first.astype(np.int64), added_launches=float(per_parameter),
                paced=False,
                note=f"{per_parameter} multi-tensor operators a step for {ops.size / n:.0f} "
                     "per-parameter ones")


RULE = Rule(
    ID, "Per-parameter optimizer loop", check, __doc__ or "", needs=("launch_links",),
    order=90, idle_cause="optimizer", owns_idle=("optimizer",),
    calibration="host-step-share", edit=edit,
)
