"""Capture overhead outside the recorded window: the same steps with and without gpudoctor attached.

    python benchmarks/bench_capture_overhead.py [--steps 200] [--rounds 5]

With gpudoctor attached (a CaptureSession whose window never opens: the hooks that find the steps
(capture/hooks.py: the optimizer-step hook, the global module hooks until the step source has
repeated, then one hook on the outermost module) plus one CUDA event per step), each workload
runs ``--steps`` steps; without it, the same. Rounds alternate to cancel drift; the table gives
the median step time of each, the ratio, and the step source the session found by itself. The
last columns: the same session as it stands after a window, while it times the calibration steps
(``Hooks.keep_only``: the hook that marks the steps alone).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from gpudoctor.capture.session import CaptureConfig, CaptureSession, Phase
from gpudoctor.lab.registry import load_baselines, load_trap


def run_steps(work, steps: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        work.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / steps


def attached(
    work, steps: int, narrow: bool = True, after_window: bool = False
) -> tuple[float, str]:
    """Step time with a session attached that finds the steps by itself (no gpudoctor.step()).
    ``narrow=False`` keeps the global module hooks on every module call (the discovery phase);
    ``after_window`` puts the session where it is after a window: timing steps, one hook left."""
    config = CaptureConfig(steps=1, skip=10**9, nvml_interval_s=0, calibration_steps=10**9)
    session = CaptureSession(config, Path(tempfile.mkdtemp()))
    if not narrow:
        session._narrow_hooks = lambda: None
    session.start()
    try:
        run_steps(work, 3)  # discovery: the source repeats and the global module hooks narrow
        if after_window:
            session.phase = Phase.AFTER
            session._keep_step_hook_only()
        return run_steps(work, steps), session.result.step_source or "none found"
    finally:
        session.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    workloads = {b.id: b.build for b in load_baselines()}
    workloads["launch_bound (host-bound)"] = load_trap("launch_bound").build_sick
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.rounds} alternating rounds "
        f"of {args.steps} steps\n"
    )
    print(
        "| workload | step source found | without gpudoctor ms/step | attached ms/step | overhead | "
        "global module hooks kept (discovery) ms/step | overhead | after the window ms/step | overhead |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, build in workloads.items():
        work = build("cuda")
        run_steps(work, 20)  # warm-up
        plain, hooked, wide, after, source = [], [], [], [], ""
        for _ in range(args.rounds):
            plain.append(run_steps(work, args.steps))
            ms, source = attached(work, args.steps)
            hooked.append(ms)
            wide.append(attached(work, args.steps, narrow=False)[0])
            after.append(attached(work, args.steps, after_window=True)[0])
        work.close()
        a, b, c = statistics.median(plain), statistics.median(hooked), statistics.median(wide)
        d = statistics.median(after)
        print(
            f"| {name} | {source} | {a:.4f} | {b:.4f} | {100 * (b / a - 1):+.2f}% | {c:.4f} | "
            f"{100 * (c / a - 1):+.2f}% | {d:.4f} | {100 * (d / a - 1):+.2f}% |",
            flush=True,
        )


if __name__ == "__main__":
    main()
