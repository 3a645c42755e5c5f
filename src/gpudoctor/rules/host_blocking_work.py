"""host-blocking-work: the step does host work with no GPU op (file I/O, checkpoints, Python).

Priced as the work itself, not only its op-free stretches: a checkpoint saved inside the step
copies each GPU tensor to pageable memory (a blocking copy and its sync) between file writes, and
removing the save removes the copies and syncs too. So the saving is the GPU idle and the
device-to-host copy time inside each span of host work plus the blocking copies and syncs
around it (analysis/idle.blocking_work_regions).
"""

from __future__ import annotations

import re

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.host_events import HOST_WORK_MIN_NS, launch_threads
from gpudoctor.analysis.idle import blocking_work_regions
from gpudoctor.analysis.intervals import contains, overlap_per_window, union
from gpudoctor.core.finding import ALL_IDLE, Evidence, Finding, Fix, make_finding
from gpudoctor.replay.edits import Edit
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import frame_line, top_names
from gpudoctor.rules.shared import INTERVAL_COST_SHARE, every_n_steps
from gpudoctor.trace.kernels import Kind
from gpudoctor.trace.model import DeviceCat, HostCat

ID = "host-blocking-work"


def check(a: Analysis) -> Finding | None:
    idle = a.idle.ms("host-work")
    if idle <= 0:
        return None
    n = max(len(a.steps), 1)
    region_s, region_e = _regions(a)
    # a gap the GPU spends held behind another stream (gpu-wait) is not the host work's
    gap_s, gap_e = a.idle.host_gaps()
    region_idle = float(overlap_per_window(gap_s, gap_e, region_s, region_e).sum()) / 1e6 / n
    copies_ms = _copies_inside_ms(a, region_s, region_e) / n
    saving = max(idle, region_idle + copies_ms)
    frames = _busiest_frames(a)
    cpu_ms, cpu_ops = _host_only_operators_in(a, region_s, region_e)
    region_ms = float((region_e - region_s).sum()) / 1e6 / n
    # torch operators on CPU tensors hold the work: a batch prepared tensor by tensor in the loop
    tensor_work = region_ms > 0 and cpu_ms >= TENSOR_WORK_SHARE * region_ms
    what = (f"torch operators on CPU tensors ({', '.join(cpu_ops[:3])})" if tensor_work
            else "code with no GPU operator (I/O, serialization, Python)")
    return make_finding(
        ID,
        "Host work inside the step leaves the GPU idle",
        a.step_ms,
        saving,
        f"For {idle:.2f} ms per step the host runs {what} while the GPU has nothing queued"
        + (f"; with the blocking copies and syncs around it, {saving:.2f} ms." if saving > idle
           + 0.005 else "."),
        Evidence(
            numbers={
                "gpu_idle_during_host_work_ms_per_step": round(idle, 3),
                "host_work_span_idle_ms_per_step": round(region_idle, 3),
                "copies_to_pageable_memory_in_it_ms_per_step": round(copies_ms, 3),
                "host_only_operator_ms_per_step": round(cpu_ms, 3),
                "share_of_step_pct": round(100 * saving / a.step_ms, 1),
                "min_stretch_us": HOST_WORK_MIN_NS / 1000,
            },
            ops=cpu_ops if tensor_work else (),
            sources=frames,
        ),
        _fixes(frames, "data" if tensor_work else None, _checkpoint_fix(saving, a.step_ms)),
        wrong_fix="Tuning kernels will not help: the GPU is idle, not slow.",
        idle_ms=ALL_IDLE,
    )


# What the busiest frames say the host work is (their file paths and function names, lowercased):
# saving a checkpoint, preparing the data (an image processor, a tokenizer, transforms, a dataset's
# __getitem__ or a collate function run on the training thread), or writing logs and files.
_KINDS = (
    ("checkpoint", re.compile(r"torch/serialization\.py|checkpoint|safetensors|\(save")),
    ("data", re.compile(r"image_process|processing_|feature_extract|tokeniz|transforms|/pil/"
                        r"|cv2|__getitem__|collate|augment")),
    ("logging", re.compile(r"logging|wandb|tensorboard|print|json|csv|\(write")),
)


def _checkpoint_fix(cost_ms: float, step_ms: float) -> Fix:
    """Checkpointing every N steps, N the smallest round interval at which the cost this finding
    prices (a save every step) falls under INTERVAL_COST_SHARE of the step."""
    every = every_n_steps(cost_ms, step_ms)
    return Fix("Checkpoint every N steps, asynchronously",
               f"if step % {every} == 0:   # {cost_ms:.1f} ms a save, {step_ms:.1f} ms a step: "
               f"under {100 * INTERVAL_COST_SHARE:.0f}% of the time\n"
               "    torch.distributed.checkpoint.async_save(state_dict, checkpoint_id=path)")


_DATA = Fix("Prepare the data in DataLoader worker processes, not on the training thread (or once, "
            "before training)",
            "loader = DataLoader(ds, batch_size=B, num_workers=W, collate_fn=collate)   # the "
            "preprocessing in ds.__getitem__ or collate; B, W: the batch and workers")
_LOGGING = Fix("Move I/O and logging to a background thread or process",
               "threading.Thread(target=write_log, args=(payload,), daemon=True).start()")
_LIGHT = Fix("Keep per-step Python light: precompute, batch small host operations", "")


def _fixes(frames: tuple[str, ...], otherwise: str | None, checkpoint: Fix) -> tuple[Fix, ...]:
    """The fixes, the one for what the busiest frames show first (the first of them, deepest
    first, that names a kind decides), else for ``otherwise`` (what the operators show); the
    general order where neither does (or no stacks were recorded)."""
    fixes = {"logging": _LOGGING, "checkpoint": checkpoint, "data": _DATA}  # the general order
    kind = next((k for f in frames for k, pattern in _KINDS if pattern.search(f.lower())),
                otherwise)
    first = [fixes.pop(kind)] if kind else []
    return (*first, *fixes.values(), _LIGHT)


# Host-only torch operators holding this share of the regions make the work a batch prepared
# tensor by tensor on the host, not I/O or logging (benchmarks/BENCHMARKS-replay.md "Host-only
# operators with views among them"; tests/test_dynamic_shapes.py).
TENSOR_WORK_SHARE = 0.5


def _host_only_operators_in(a: Analysis, region_s: np.ndarray,
                            region_e: np.ndarray) -> tuple[float, tuple[str, ...]]:
    """ms per step of the regions inside operators that ran on the host alone, and their names,
    heaviest first."""
    if region_s.size == 0:
        return 0.0, ()
    host = a.trace.host
    ops = a.idle.host_only_ops
    ops = ops[contains(region_s, region_e, host.ts[ops])]
    if ops.size == 0:
        return 0.0, ()
    s, e = union(host.ts[ops], host.end[ops])
    held = float(overlap_per_window(s, e, region_s, region_e).sum()) / 1e6 / max(len(a.steps), 1)
    return held, top_names(a.trace, host.name[ops], (host.end[ops] - host.ts[ops]).astype(float))


def _copies_inside_ms(a: Analysis, region_s: np.ndarray, region_e: np.ndarray) -> float:
    """Device time of the copies to pageable host memory that start inside the regions."""
    dev = a.trace.device
    copies = np.flatnonzero(dev.kind == Kind.MEMCPY_DTOH_PAGEABLE)
    if copies.size == 0 or region_s.size == 0:
        return 0.0
    k = np.searchsorted(region_s, dev.ts[copies], side="right") - 1
    inside = (k >= 0) & (dev.ts[copies] < region_e[np.maximum(k, 0)])
    return float(dev.dur[copies[inside]].sum()) / 1e6


def _busiest_frames(a: Analysis, limit: int = 3) -> tuple[str, ...]:
    """The innermost Python frames (with_stack=True) that cover most of the idle host-work time.

    Outer frames (main, the training loop) cover everything; the culprit is the deepest frame
    still covering at least half of what the best-covering frame covers.
    """
    trace, host = a.trace, a.trace.host
    frames = np.flatnonzero((host.cat == HostCat.PYTHON) & host.on_threads(launch_threads(trace)))
    gap_s, gap_e = a.idle.host_gaps()
    if frames.size == 0 or gap_s.size == 0:
        return ()
    covered = overlap_per_window(gap_s, gap_e, host.ts[frames], host.end[frames]).astype(float)
    over_gaps = covered > 0
    frames, covered = frames[over_gaps], covered[over_gaps]
    # each frame name read once: a trace with stacks records a frame per call
    # (benchmarks/BENCHMARKS-loading.md "The 0.41 GB trace against HolisticTraceAnalysis again")
    line_of: dict[int, str | None] = {}
    by_line: dict[str, tuple[float, int]] = {}
    for name, weight, depth in zip(host.name[frames].tolist(), covered.tolist(),
                                   host.depth[frames].tolist()):
        if name not in line_of:
            line_of[name] = frame_line(trace.strings[name])
        line = line_of[name]
        if line:
            total, deepest = by_line.get(line, (0.0, 0))
            by_line[line] = (total + weight, max(deepest, depth))
    if not by_line:
        return ()
    best = max(total for total, _ in by_line.values())
    strong = [(depth, total, line) for line, (total, depth) in by_line.items()
              if total >= 0.5 * best]
    return tuple(line for _, _, line in sorted(strong, key=lambda x: (-x[0], -x[1]))[:limit])



def _regions(a: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """The step's regions of blocking host work, each ended by the model's own launches."""
    return blocking_work_regions(a.idle, a.steps, kernel_launching_ops(a))


def kernel_launching_ops(a: Analysis) -> np.ndarray:
    """Sorted start times of the outermost operators that launched a kernel (not a copy or a
    memset): the step's own GPU work, which a region of blocking host work does not span."""
    dev, host = a.trace.device, a.trace.host
    kernel = (dev.launch >= 0) & (dev.cat == DeviceCat.KERNEL)
    return np.sort(host.ts[host.outermost(dev.launch[kernel])])


def edit(a: Analysis, finding: Finding) -> Edit | None:
    """The host work and the blocking copies and syncs around it leave the step (a background
    thread, an asynchronous checkpoint): their host time goes, the calls in them no longer wait, and
    the GPU work those calls launched (a checkpoint's copies to the host) leaves the step too."""
    region_s, region_e = _regions(a)
    if region_s.size == 0:
        return None
    host = a.trace.host
    calls = np.flatnonzero((host.cat >= HostCat.RUNTIME) & host.on_threads(launch_threads(a.trace)))
    inside = calls[contains(region_s, region_e, host.ts[calls])]
    launched = np.flatnonzero(np.isin(a.trace.device.launch, inside)).astype(np.int64)
    return Edit(device=launched, device_ns=np.zeros(launched.size), device_removed=launched,
                host_removed_s=region_s, host_removed_e=region_e, unwait=inside.astype(np.int64),
                note="host work moved off the step")


RULE = Rule(
    ID, "Host work with no GPU operator inside the step", check, __doc__ or "",
    needs=("launch_links",),
    order=100, idle_cause="host-work", edit=edit,
)
