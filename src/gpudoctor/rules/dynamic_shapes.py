"""dynamic-shapes: an operator sets itself up again for every new input shape.

Some operators build a plan per input shape and cache it: cuDNN's attention and convolution
graphs, cuDNN's autotuner under ``torch.backends.cudnn.benchmark = True``, autotuned kernels.
Fed a shape that changes every step (a batch padded to its own longest sequence, images of any
size), they pay that setup on the host every step while the GPU waits. The trace shows it as the
first call of the operator in each step taking tens of milliseconds, the same operator's other
calls a fraction of one, on input shapes that differ from step to step (analysis/idle.py
``setup_calls``, the "op-setup" idle cause).

Priced as what bucketing the shapes takes away: the GPU idle during those setup calls and the
refill after them, and the autotuner's trial runs (cuDNN's autotuner runs every candidate kernel of
the call on the GPU; with a bucketed shape the plan is cached and none of them runs). A call's own
work is taken as its GPU time over the count of its most repeated kernel (``_trial_ns``): a call
that tries no candidates (cuDNN attention building its plan, one kernel) keeps all of it. A CUDA
graph cannot help (every new shape is a new capture).

Its edit (``edit``) replays the step with each setup call taking what the operator's calls on a
known shape take (the median of its other calls; none where every call sets up), the waits
inside it gone, and the candidate kernels gone: the kernels a call launched before its last wait
on a CUDA event inside itself are the autotuner's timed trials; those after it, its own work.
"""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import event_waits
from gpudoctor.core.arrays import distinct, median
from gpudoctor.core.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import sources_of_host, top_names
from gpudoctor.rules.shared import step_of
from gpudoctor.trace.model import Trace

ID = "dynamic-shapes"
CAUSE = "op-setup"
BUCKETS = 8  # the most sizes the bucketing fix leaves over the range seen


def check(a: Analysis) -> Finding | None:
    idle = a.idle.ms(CAUSE)
    if idle <= 0:
        return None
    trace, host = a.trace, a.trace.host
    calls = a.idle.setup_calls
    if calls.size == 0:
        return None
    n = max(len(a.steps), 1)
    # the innermost setup call of each nest names the operator (aten::_cudnn_attention_forward,
    # not the scaled_dot_product_attention around it)
    inner = _innermost(a)
    setup_ms = float((host.end[inner] - host.ts[inner]).sum()) / 1e6 / n
    trials = _trial_ns(a, inner) / 1e6 / n
    names = [trace.strings[i] for i in host.name[inner].tolist()]
    shapes = len({repr(trace.input_dims(int(i))[:1]) for i in inner.tolist()})
    fixes = [_bucket_fix(trace, _first_per_step(a, inner), images=any("conv" in s for s in names))]
    if any("cudnn_attention" in s for s in names):
        fixes.append(Fix("Or let SDPA use a kernel that needs no per-shape plan",
                         "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
                         "with sdpa_kernel([SDPBackend.FLASH_ATTENTION, "
                         "SDPBackend.EFFICIENT_ATTENTION]):\n"
                         "    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)"))
    if any("convolution" in s or "cudnn" in s for s in names):
        fixes.append(Fix("With input sizes that keep changing, turn cuDNN's autotuner off",
                         "torch.backends.cudnn.benchmark = False"))
    return make_finding(
        ID,
        "Operators set themselves up again for every new input shape",
        a.step_ms,
        idle + trials,
        f"{len(inner) / n:.0f} operator call{'s' * (len(inner) != n)} per step take {setup_ms:.2f} "
        f"ms on the host building a plan for an input shape not seen before ({shapes} different "
        f"shapes in {n} steps); the GPU idles {idle:.2f} ms per step behind them"
        + (f" and runs {trials:.2f} ms of trial kernels." if trials >= 0.005 else "."),
        Evidence(
            numbers={
                "setup_calls_per_step": round(len(inner) / n, 1),
                "setup_host_ms_per_step": round(setup_ms, 3),
                "distinct_input_shapes": shapes,
                "gpu_idle_behind_setup_ms_per_step": round(idle, 3),
                "trial_kernel_ms_per_step": round(trials, 3),
            },
            ops=top_names(trace, host.name[inner]),
            sources=sources_of_host(trace, inner),
        ),
        tuple(fixes),
        wrong_fix="A CUDA graph (torch.compile mode='reduce-overhead') will not help: every new "
        "shape is a new capture.",
        idle_ms=idle,
    )



def _bucket_fix(trace: Trace, calls: np.ndarray, images: bool) -> Fix:
    """Bucketing, written from the sizes the setup calls saw: the dimensions of their first input
    that vary, their range, and the multiple that gives at most BUCKETS sizes over it (a power of
    two, at least 8); the letters where the trace records no shapes."""
    title = "Pad the varying dimension to a few bucket sizes, so each plan is built once and reused"
    varying = varying_sizes(trace, calls)
    if varying is None:
        return Fix(title, "L = -(-L // M) * M   # pad every batch to a multiple M of its varying size\n"
                          "x = F.pad(x, (0, 0, 0, L - x.shape[1]))")
    lo, hi, distinct_sizes = varying
    multiple = max(8, 1 << max(int(np.ceil(np.log2(max(hi - lo, 1) / BUCKETS))), 0))
    buckets = -(-hi // multiple) - lo // multiple + 1
    seen = f"{distinct_sizes} sizes seen, {lo} to {hi}"
    if images:
        return Fix("Draw the input sizes from a few buckets, so each convolution plan is built "
                   "once and reused",
                   f"size = -(-size // {multiple}) * {multiple}   # {seen} px: "
                   f"{buckets} buckets at most\nx = F.interpolate(x, size=(size, size))")
    return Fix(title, f"L = -(-L // {multiple}) * {multiple}   # {seen}: {buckets} buckets at most\n"
                      "x = F.pad(x, (0, 0, 0, L - x.shape[1]))")


def _first_per_step(a: Analysis, calls: np.ndarray) -> np.ndarray:
    """The first call in each step of one operator: a forward attention's (its input is
    [B, H, L, D], L the sequence's own length), else a forward convolution's (the network's first
    layer sees the image's own size; later layers see it downsampled, and a backward starts from
    the last), else the operator most of ``calls`` are."""
    names = a.trace.host.name[calls]
    values, counts = np.unique(names, return_counts=True)
    text = [a.trace.strings[v].lower() for v in values.tolist()]

    def rank(j: int) -> tuple[int, int]:
        forward = "backward" not in text[j]
        return (2 if forward and "attention" in text[j] else
                1 if forward and "convolution" in text[j] else 0, int(counts[j]))

    calls = calls[names == values[max(range(values.size), key=rank)]]
    calls = calls[np.argsort(a.trace.host.ts[calls], kind="stable")]
    step = step_of(a, a.trace.host.ts[calls])
    _, first = np.unique(step, return_index=True)  # in time order: each step's first call
    return calls[first[step[first] >= 0]]


def varying_sizes(trace: Trace, calls: np.ndarray) -> tuple[int, int, int] | None:
    """The sizes of the first input's dimensions that differ between ``calls`` (their smallest,
    largest, and how many distinct ones), or None where the calls record no common rank of
    shapes or none differs."""
    shapes = []
    for call in calls.tolist():
        dims = trace.input_dims(int(call))
        first = dims[0] if dims else None
        if isinstance(first, list) and first and all(isinstance(d, int) for d in first):
            shapes.append(first)
    if len(shapes) < 2 or len({len(s) for s in shapes}) != 1:
        return None
    table = np.array(shapes, np.int64)
    moving = table[:, (table != table[0]).any(axis=0)]
    if moving.size == 0:
        return None
    return int(moving.min()), int(moving.max()), int(np.unique(moving).size)


def _trial_ns(a: Analysis, calls: np.ndarray) -> float:
    """GPU time of the candidate kernels the setup ``calls`` tried: each call's GPU time less its
    own work, one run in as many as its most repeated kernel ran."""
    dev = a.trace.device
    launches = _Launches(a)
    total = 0.0
    for call in calls.tolist():
        inside = _nested(a, call)
        mine = launches.by(call + 1, call + 1 + inside.size)
        if mine.size < 2:
            continue
        gpu = float((dev.end[mine] - dev.ts[mine]).sum())
        total += gpu - gpu / int(np.bincount(np.unique(dev.name[mine],
                                                       return_inverse=True)[1]).max())
    return total


class _Launches:
    """The trace's device events ordered by the host call that launched them."""

    def __init__(self, a: Analysis) -> None:
        dev = a.trace.device
        launched = np.flatnonzero(dev.launch >= 0)
        order = np.argsort(dev.launch[launched], kind="stable")
        self.events, self.host = launched[order], dev.launch[launched[order]]

    def by(self, first: int, stop: int) -> np.ndarray:
        """Device events launched by host events ``first`` up to (not including) ``stop``."""
        lo, hi = np.searchsorted(self.host, [first, stop])
        return self.events[lo:hi]


def edit(a: Analysis, finding: Finding) -> Edit | None:
    """The shapes bucketed: each setup call at the operator's typical time, its inner waits and its
    trial kernels gone (module docstring)."""
    calls = _innermost(a)
    if calls.size == 0:
        return None
    host = a.trace.host
    typical = _typical_ns(a, calls)
    waits = event_waits(a.trace)
    launches = _Launches(a)
    starts, ends, unwait, trials = [], [], [], []
    for call in calls.tolist():
        inside = _nested(a, call)
        if typical[call] < host.end[call] - host.ts[call]:
            starts.append(int(host.ts[call]) + int(typical[call]))
            ends.append(int(host.end[call]))
        unwait.append(inside)
        timed = inside[waits[inside]]
        if timed.size:  # the trials are launched before the autotuner's last timing wait
            trials.append(launches.by(call, int(timed.max())))
    removed = np.concatenate(trials) if trials else np.empty(0, np.int64)
    return Edit(host_removed_s=np.array(starts, np.int64), host_removed_e=np.array(ends, np.int64),
                unwait=np.concatenate(unwait).astype(np.int64),
                device_removed=removed.astype(np.int64),
                note=f"{calls.size} setup calls at their operators' typical time, {removed.size} "
                     "trial kernels removed")


def _innermost(a: Analysis) -> np.ndarray:
    calls = a.idle.setup_calls
    return calls[~np.isin(calls, a.trace.host.op[calls])]


def _typical_ns(a: Analysis, calls: np.ndarray) -> dict[int, float]:
    """Each setup call's operator's median call that set nothing up (0 where every call did)."""
    host = a.trace.host
    setup = np.zeros(len(host), bool)
    setup[a.idle.setup_calls] = True
    out = {}
    for name in distinct(host.name[calls]).tolist():
        others = np.flatnonzero((host.name == name) & ~setup)
        ns = float(median(host.end[others] - host.ts[others])) if others.size else 0.0
        out.update({int(c): ns for c in calls[host.name[calls] == name].tolist()})
    return out


def _nested(a: Analysis, call: int) -> np.ndarray:
    """Host events inside ``call`` on its thread (host events are sorted by thread, start, -end)."""
    host = a.trace.host
    last = int(np.searchsorted(host.thread, host.thread[call], side="right"))
    stop = call + 1 + int(np.searchsorted(host.ts[call + 1:last], host.end[call], side="left"))
    return np.arange(call + 1, stop, dtype=np.int64)


RULE = Rule(
    ID, "Per-shape operator setup on every step (dynamic shapes)", check, __doc__ or "",
    needs=("launch_links", "cpu_ops"),
    order=75, idle_cause=CAUSE, owns_idle=(CAUSE,), edit=edit,
)
