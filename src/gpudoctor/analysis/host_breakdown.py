"""Where the host's step time goes: its top-level ops by name and by category.

The step thread is the thread whose top-level events cover most of the steps (the training or
inference loop; a DataLoader's pin-memory thread covers little). An event is top-level when no
other recorded op or range encloses it, looking through Python frames, ``nn.Module`` calls and
the step markers themselves (``ProfilerStep#N``, ``gpudoctor.iteration#N``). Top-level events of
one thread do not overlap, so their time plus the uncovered rest ("python / untraced": the
interpreter between ops, anything the profiler did not record) is the step.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpudoctor.analysis.intervals import overlap_per_window
from gpudoctor.analysis.steps import ITERATION_MARKER, Steps
from gpudoctor.trace.model import HostCat, Trace
from gpudoctor.trace.nesting import nearest_ancestor

UNTRACED = "python / untraced"
# (category, name prefixes) in the order they are tried; then by event category
BY_NAME = (
    ("dataloader", ("enumerate(DataLoader)",)),
    ("optimizer", ("Optimizer.",)),
    ("backward", ("autograd::engine::evaluate_function", "torch::autograd::")),
)
BY_CAT = {HostCat.OP: "aten ops", HostCat.ANNOTATION: "annotations",
          HostCat.RUNTIME: "cuda runtime", HostCat.DRIVER: "cuda runtime"}
TOP_OPS = 15


class HostOp(msgspec.Struct, frozen=True):
    """A top-level host op of the step thread, per step (the report keeps it, rounded:
    report/sections.py)."""

    name: str
    category: str
    ms_per_step: float
    calls_per_step: float


class HostBreakdown(msgspec.Struct, frozen=True, eq=False):
    thread: int  # index into Trace.threads (-1: no host events)
    step_ms: float  # mean host step (the steps' own windows)
    by_category_ms: dict[str, float]  # per step, largest first; sums to step_ms
    ops: tuple[HostOp, ...]  # top-level ops, most time per step first


def host_breakdown(trace: Trace, steps: Steps) -> HostBreakdown:
    """The host's step by category and by top-level op (see module docstring)."""
    n = max(len(steps), 1)
    step_ms = steps.total_ns / 1e6 / n
    host = trace.host
    top = _top_level(trace)
    if top.size == 0:
        return HostBreakdown(-1, step_ms, {UNTRACED: step_ms}, ())
    inside = overlap_per_window(steps.start, steps.end, host.ts[top], host.end[top])
    thread = _step_thread(host.thread[top], inside)
    keep = (host.thread[top] == thread) & (inside > 0)
    top, inside = top[keep], inside[keep]
    category = _categories(trace, top)
    by_cat: dict[str, float] = {}
    for cat, ns in zip(category, inside.tolist()):
        by_cat[cat] = by_cat.get(cat, 0.0) + ns / 1e6 / n
    by_cat[UNTRACED] = max(step_ms - sum(by_cat.values()), 0.0)
    ordered = dict(sorted(by_cat.items(), key=lambda kv: -kv[1]))
    return HostBreakdown(thread, step_ms, ordered, _ops(trace, top, inside, category, n))


def _top_level(trace: Trace) -> np.ndarray:
    """Host events no recorded op or range encloses (Python frames and step markers aside)."""
    host = trace.host
    if len(host) == 0:
        return np.zeros(0, np.int64)
    marker = trace.names_matching(lambda s: s.startswith(("ProfilerStep#",
                                                          ITERATION_MARKER)))[host.name]
    opaque = (host.cat != HostCat.PYTHON) & ~marker
    return np.flatnonzero(opaque & (nearest_ancestor(host.parent, opaque) < 0))


def _step_thread(thread: np.ndarray, inside: np.ndarray) -> int:
    covered = np.bincount(thread, weights=inside.astype(np.float64))
    return int(np.argmax(covered))


def _categories(trace: Trace, idx: np.ndarray) -> list[str]:
    host = trace.host
    out = []
    for i in idx.tolist():
        name = trace.strings[host.name[i]]
        cat = next((c for c, prefixes in BY_NAME if name.startswith(prefixes)), None)
        out.append(cat or BY_CAT.get(HostCat(int(host.cat[i])), "other"))
    return out


def _ops(trace: Trace, idx: np.ndarray, inside: np.ndarray, category: list[str],
         n: int) -> tuple[HostOp, ...]:
    host = trace.host
    totals: dict[int, list] = {}
    for i, ns, cat in zip(idx.tolist(), inside.tolist(), category):
        entry = totals.setdefault(int(host.name[i]), [0, 0, cat])
        entry[0] += ns
        entry[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:TOP_OPS]
    return tuple(HostOp(trace.strings[sid], cat, ns / 1e6 / n, calls / n)
                 for sid, (ns, calls, cat) in ranked)


def no_gpu_work_note(trace: Trace) -> str:
    """What a trace without GPU events says about the program: it ran on the CPU, or the profiler
    recorded only the CPU side of a CUDA program."""
    host = trace.host
    cuda_calls = int(((host.cat == HostCat.RUNTIME) | (host.cat == HostCat.DRIVER)).sum()) if len(host) else 0
    if cuda_calls:
        return (f"no GPU work was recorded in this window, yet the host made {cuda_calls} CUDA "
                "runtime calls: the profiler recorded CPU activity only; record with "
                "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] to see the GPU side. "
                "This report covers the host alone")
    if trace.other_accelerator_events:
        return (f"no GPU work was recorded in this window: the trace holds "
                f"{trace.other_accelerator_events} events of another accelerator (MTIA, XPU, HPU "
                "or a PrivateUse1 device), which gpudoctor does not read. This report covers the "
                "host alone")
    idle_gpu = (f" (the trace lists the device {trace.gpu.name}, but no kernel or copy ran on it)"
                if trace.gpu else "")
    return ("no GPU work was recorded in this window: the program ran on the CPU (device: "
            f"cpu){idle_gpu}. Step times and the host breakdown are CPU time; nothing is priced "
            "against a GPU. To diagnose GPU time, move the model and its tensors to a CUDA device "
            "and record on a GPU machine")
