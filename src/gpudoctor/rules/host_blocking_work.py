"""host-blocking-work: the step does host work with no GPU op (file I/O, checkpoints, Python)."""

from __future__ import annotations

import numpy as np

from gpudoctor.analysis import Analysis
from gpudoctor.analysis.idle import HOST_WORK_MIN_NS, launch_threads
from gpudoctor.analysis.intervals import overlap_per_window
from gpudoctor.rules.base import Rule
from gpudoctor.rules.common import source_line
from gpudoctor.rules.finding import Evidence, Finding, Fix, make_finding
from gpudoctor.trace.model import HostCat

ID = "host-blocking-work"


def check(a: Analysis) -> Finding | None:
    idle = a.idle.ms("host-work")
    if idle <= 0:
        return None
    return make_finding(
        ID,
        "Host work inside the step leaves the GPU idle",
        a.step_ms,
        idle,
        f"For {idle:.2f} ms per step the host runs code with no GPU operator (I/O, serialization, "
        "Python) while the GPU has nothing queued.",
        Evidence(
            numbers={
                "gpu_idle_during_host_work_ms_per_step": round(idle, 3),
                "share_of_step_pct": round(100 * idle / a.step_ms, 1),
                "min_stretch_us": HOST_WORK_MIN_NS / 1000,
            },
            sources=_busiest_frames(a),
        ),
        (
            Fix("Move I/O and logging to a background thread or process",
                "threading.Thread(target=write_log, args=(payload,), daemon=True).start()"),
            Fix("Checkpoint every N steps, asynchronously",
                "if step % 1000 == 0:\n"
                "    torch.distributed.checkpoint.async_save(state_dict, checkpoint_id=path)"),
            Fix("Keep per-step Python light: precompute, batch small host operations", ""),
        ),
        wrong_fix="Tuning kernels will not help: the GPU is idle, not slow.",
    )


def _busiest_frames(a: Analysis, limit: int = 5) -> tuple[str, ...]:
    """User frames (with_stack=True) that cover the idle host-work gaps the longest."""
    trace, host = a.trace, a.trace.host
    frames = np.flatnonzero((host.cat == HostCat.PYTHON) & np.isin(host.thread, launch_threads(trace)))
    gap_s, gap_e = a.idle.gaps
    if frames.size == 0 or gap_s.size == 0:
        return ()
    covered = overlap_per_window(gap_s, gap_e, host.ts[frames], host.end[frames])
    scored: dict[str, float] = {}
    for i, weight in zip(frames.tolist(), covered.tolist()):
        if weight <= 0:
            continue
        line = source_line(trace, i) if host.frame[i] >= 0 else None
        # the frame itself names the innermost place; prefer it when it is user code
        own = trace.strings[host.name[i]]
        key = _own_line(own) or line
        if key:
            scored[key] = max(scored.get(key, 0.0), weight)
    return tuple(k for k, _ in sorted(scored.items(), key=lambda kv: -kv[1])[:limit])


def _own_line(frame_name: str) -> str | None:
    import re

    m = re.match(r"^(.+?)\((\d+)\): (.+)$", frame_name)
    if not m or re.search(r"site-packages|/torch/|/lib/python3|<built-in", m[1]):
        return None
    return f"{m[1]}:{m[2]} ({m[3]})"


RULE = Rule(ID, "Host work with no GPU operator inside the step", check, __doc__ or "")
