"""A lab trap (or its fixed twin) as an ordinary program: a plain loop over its step.

    python -m gpudoctor.lab.program TRAP [--fixed] [--steps N] [--log-every K] [--device cuda|cpu]

``gpudoctor lab run`` times a trap and its fixed twin inside one process. This module runs either
one on its own, the way a user's training script runs: build it, call its step ``--steps`` times,
print ``step K: X ms/step`` every ``--log-every`` steps (the only synchronization: the mean over
the last K steps, as people add a throughput line to their own loops). So ``gpudoctor run`` and
its ``--try-fixes`` can be pointed at a trap like at any other program, and a knob's trial on the
sick trap can be set beside the fixed twin timed the same way (``benchmarks/bench_try_fixes.py
--lab``). Each step is marked with ``gpudoctor.step()``: a no-op unless gpudoctor is capturing.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from gpudoctor.lab.registry import BASELINE_IDS, TRAP_IDS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gpudoctor.lab.program",
                                     description="Run one lab trap, or its fixed twin, as a "
                                     "plain loop.")
    parser.add_argument("trap",
                        help=f"a trap ({', '.join(TRAP_IDS)}) or a baseline "
                             f"({', '.join(BASELINE_IDS)})")
    parser.add_argument("--fixed", action="store_true", help="run the trap's fixed twin instead")
    parser.add_argument("--steps", type=int, default=200, help="steps to run (default 200)")
    parser.add_argument("--log-every", type=int, default=10,
                        help="print the mean step time every K steps")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    args = parser.parse_args(argv)
    if args.trap not in TRAP_IDS and args.trap not in BASELINE_IDS:
        parser.error(
            f"no trap or baseline named {args.trap!r}; choose from "
            f"{', '.join(TRAP_IDS + BASELINE_IDS)}")
    if args.steps < 1 or args.log_every < 1:
        parser.error("--steps and --log-every must be at least 1")
    if args.fixed and args.trap in BASELINE_IDS:
        parser.error(f"{args.trap} is a healthy baseline: it has no fixed twin (leave out --fixed)")
    return args


def timed_loop(step: Callable[[], Any], steps: int, every: int,
               sync: Callable[[], Any]) -> Iterator[tuple[int, float]]:
    """Call ``step`` ``steps`` times, each marked with ``gpudoctor.step()``; every ``every`` steps
    and at the last, synchronize and yield (steps so far, mean ms a step since the last yield)."""
    from gpudoctor.capture.session import step as mark_step

    sync()
    t0, last = time.perf_counter(), 0
    for i in range(1, steps + 1):
        step()
        mark_step()
        if i % every == 0 or i == steps:
            sync()
            now = time.perf_counter()
            yield i, (now - t0) / (i - last) * 1000
            t0, last = now, i


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from gpudoctor.lab.registry import load_baselines, load_trap

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        print("gpudoctor.lab.program: --device cuda asked for, but torch sees no CUDA device; use "
              "--device cpu",
              file=sys.stderr)
        return 2
    if args.trap in TRAP_IDS:
        trap = load_trap(args.trap)
        build = trap.build_fixed if args.fixed else trap.build_sick
    else:
        build = next(b for b in load_baselines() if b.id == args.trap).build
    workload = build(device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    print(
        f"{args.trap} ({'fixed' if args.fixed else 'sick'}) on {device}, {args.steps} steps", flush=True)
    try:
        for i, ms in timed_loop(workload.step, args.steps, args.log_every, sync):
            print(f"step {i}: {ms:.3f} ms/step", flush=True)
    finally:
        workload.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
