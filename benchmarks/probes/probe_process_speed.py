"""Does a process's own host speed explain its step time? (On the lent H100 machines, fresh processes of
one host-bound program step at levels up to 37% apart: the lab's input_pipeline trap at 42.8 and 31.1 ms
a step in one ``--try-fixes`` invocation, 2026-11-26, while the GPU's clocks held at 1980 MHz and the
CPUs showed no steal: benchmarks/probes/probe_host_noise.py.)

``PYTHONPATH=src python3 benchmarks/probes/probe_process_speed.py TRAP [--steps N]`` measures, in this process,
three host speeds before and after running the lab trap TRAP (``gpudoctor.lab.program``'s loop, a sync
every 10 steps) and prints one line:

- ``py``: a pure-Python loop (the interpreter: dispatch-bound steps);
- ``mem``: a 256 MB numpy copy (GB/s: memory placement);
- ``torch``: 2000 small CPU tensor ops (the dispatcher);
- the step's mean over the last two thirds of the steps, and the CPUs the process ran on.

Run it in several fresh processes and compare: a slow process that is slow in its probes too names the
host as the cause, and the probes could then tell a trial's slow process from a slow knob.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch


def probes() -> dict[str, float]:
    t = time.perf_counter()
    s = 0
    for i in range(2_000_000):
        s += i
    py_ms = (time.perf_counter() - t) * 1000
    src = np.ones(32 * 1024 * 1024, dtype=np.float64)  # 256 MB
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t = time.perf_counter()
    for _ in range(4):
        np.copyto(dst, src)
    mem_gbps = 4 * 2 * src.nbytes / (time.perf_counter() - t) / 1e9
    a = torch.ones(64)
    t = time.perf_counter()
    for _ in range(2000):
        a = a + 1
    torch_ms = (time.perf_counter() - t) * 1000
    return {"py_ms": py_ms, "mem_gbps": mem_gbps, "torch_ms": torch_ms}


def current_cpu() -> int:
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trap")
    ap.add_argument("--steps", type=int, default=150)
    args = ap.parse_args()
    from gpudoctor.lab.program import timed_loop
    from gpudoctor.lab.registry import load_trap

    before = probes()
    work = load_trap(args.trap).build_sick("cuda")
    cpus, times = set(), []
    for _, ms in timed_loop(work.step, args.steps, 10, torch.cuda.synchronize):
        times.append(ms)
        cpus.add(current_cpu())
    work.close()
    after = probes()
    steady = times[len(times) // 3 :]
    print(
        f"{args.trap} step {sum(steady) / len(steady):.2f} ms | py {before['py_ms']:.1f}/{after['py_ms']:.1f} ms "
        f"| mem {before['mem_gbps']:.1f}/{after['mem_gbps']:.1f} GB/s | torch {before['torch_ms']:.2f}/"
        f"{after['torch_ms']:.2f} ms | cpus {sorted(cpus)} of {len(os.sched_getaffinity(0))}",
        flush=True,
    )


if __name__ == "__main__":
    main()
