"""How fast is each CPU of this machine, and does it stay so? (A lent GPU machine's fresh processes of one
host-bound program stepped up to 37% apart, and a pure-Python loop ran 84-143 ms from one process to the
next: benchmarks/probes/probe_process_speed.py, H100, 2026-11-26.)

``python3 benchmarks/probes/probe_cpu_map.py [SWEEPS] [PAUSE_S]`` pins this process to each CPU in turn, times a
1M-iteration Python loop there (best of 3), pauses, and sweeps again; prints one line per CPU with its
times in every sweep (ms), then ``fastest F slowest S`` by median. Reads only; changes nothing but its own
affinity.
"""

from __future__ import annotations

import os
import statistics
import sys
import time


def loop_ms() -> float:
    start = time.perf_counter()
    total = 0
    for i in range(1_000_000):
        total += i
    return (time.perf_counter() - start) * 1000


def main() -> None:
    sweeps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    pause = float(sys.argv[2]) if len(sys.argv) > 2 else 2.0
    cpus = sorted(os.sched_getaffinity(0))
    rows: dict[int, list[float]] = {c: [] for c in cpus}
    for _ in range(sweeps):
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            time.sleep(0.01)
            rows[cpu].append(min(loop_ms() for _ in range(3)))
        time.sleep(pause)
    for cpu in cpus:
        print(cpu, " ".join(f"{v:5.1f}" for v in rows[cpu]))
    medians = {c: statistics.median(v) for c, v in rows.items()}
    print(
        f"fastest {min(medians, key=medians.__getitem__)} slowest {max(medians, key=medians.__getitem__)}"
    )


if __name__ == "__main__":
    main()
