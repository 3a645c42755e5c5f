"""Capture overhead outside the recorded window: the same steps with and without gpudoctor attached.

    python benchmarks/bench_capture_overhead.py [--steps 200] [--rounds 5]

With gpudoctor attached (a CaptureSession whose window never opens: the global optimizer-step
hook plus one CUDA event per step), each workload runs ``--steps`` steps; without it, the same.
Rounds alternate to cancel drift; the table gives the median step time of each and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from gpudoctor.capture.session import CaptureConfig, CaptureSession
from gpudoctor.lab.registry import load_baselines, load_trap


def run_steps(work, steps: int) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        work.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3 / steps


def attached(work, steps: int) -> float:
    session = CaptureSession(CaptureConfig(steps=1, skip=10**9, nvml_interval_s=0), Path(tempfile.mkdtemp()))
    session.start()
    try:
        return run_steps(_Stepped(work, session), steps)
    finally:
        session.close()


class _Stepped:
    """Counts a step per iteration even for workloads without an optimizer (inference)."""

    def __init__(self, work, session: CaptureSession) -> None:
        self.work, self.session = work, session

    def step(self) -> None:
        before = self.session.result.steps_seen
        self.work.step()
        if self.session.result.steps_seen == before:
            self.session.step()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    workloads = {b.id: b.build for b in load_baselines()}
    workloads["launch_bound (host-bound)"] = load_trap("launch_bound").build_sick
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.rounds} alternating rounds "
          f"of {args.steps} steps\n")
    print("| workload | without gpudoctor ms/step | with gpudoctor attached ms/step | overhead |")
    print("|---|---:|---:|---:|")
    for name, build in workloads.items():
        work = build("cuda")
        run_steps(work, 20)  # warm-up
        plain, hooked = [], []
        for _ in range(args.rounds):
            plain.append(run_steps(work, args.steps))
            hooked.append(attached(work, args.steps))
        work.close()
        a, b = statistics.median(plain), statistics.median(hooked)
        print(f"| {name} | {a:.4f} | {b:.4f} | {100 * (b / a - 1):+.2f}% |", flush=True)


if __name__ == "__main__":
    main()
