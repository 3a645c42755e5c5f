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

ID = "dynamic-shapes"
CAUSE = "op-setup"


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
    fixes = [
        Fix("Pad the varying dimension to a few bucket sizes, so each plan is built once and reused",
            "L = -(-L // 128) * 128          # pad every batch to a multiple of 128 tokens\n"
            "x = F.pad(x, (0, 0, 0, L - x.shape[1]))"),
    ]
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
