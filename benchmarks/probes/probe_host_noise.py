"""What moves an unchanged program's step time from one process to the next on a lent GPU machine?

``--try-fixes``' unchanged controls of the same program moved 19.7-24.9 ms a step (HF Trainer) and
24.6-33.0 ms (an accelerate loop) between processes, and within a process they shifted between
plateaus 10-20% apart for 10-20 steps (H100, 2026-11-26). This sampler runs beside such a program
and records, every ``--period`` seconds, what could explain a plateau:

- the GPU's SM clock, its clock-event reasons (power cap, thermal, ...), temperature and power (NVML);
- the CPUs' busy, steal and iowait shares since the last sample (``/proc/stat``): on a virtual machine,
  steal is time the host gave this machine's CPUs to someone else;
- the machine's 1-minute load.

``python3 benchmarks/probes/probe_host_noise.py --out FILE [--period 0.05] [--seconds N]`` writes one CSV row
a sample (``t`` is ``time.time()``, to line up with a program's timestamped output) until killed or
``--seconds`` pass. ``--summarize FILE [--from T0 --to T1]`` prints one line per column: min, median,
max over the rows in the window. Reads only; sets nothing on the card.
"""

from __future__ import annotations

import argparse
import csv
import signal
import statistics
import sys
import time

COLUMNS = (
    "t",
    "sm_mhz",
    "mem_mhz",
    "clock_reasons",
    "temp_c",
    "power_w",
    "gpu_util",
    "cpu_busy",
    "cpu_steal",
    "cpu_iowait",
    "load1",
)


def read_cpu_times() -> list[int]:
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    return [int(x) for x in fields]


def cpu_shares(before: list[int], after: list[int]) -> tuple[float, float, float]:
    """Busy, steal and iowait shares of all CPUs between two ``/proc/stat`` readings."""
    delta = [b - a for a, b in zip(before, after)]
    total = sum(delta[:8]) or 1  # user nice system idle iowait irq softirq steal (guest is in user)
    idle, iowait, steal = delta[3], delta[4], delta[7]
    return (total - idle - iowait - steal) / total, steal / total, iowait / total


def sample(out: str, period: float, seconds: float | None) -> None:
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    start = time.time()
    cpu_before = read_cpu_times()
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        while not stop["now"] and (seconds is None or time.time() - start < seconds):
            time.sleep(period)
            cpu_now = read_cpu_times()
            busy, steal, iowait = cpu_shares(cpu_before, cpu_now)
            cpu_before = cpu_now
            try:
                reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
            except (AttributeError, pynvml.NVMLError):
                reasons = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)
            with open("/proc/loadavg") as la:
                load1 = float(la.read().split()[0])
            writer.writerow(
                [
                    f"{time.time():.3f}",
                    pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                    pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                    hex(reasons),
                    pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
                    round(pynvml.nvmlDeviceGetPowerUsage(handle) / 1000, 1),
                    pynvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                    round(busy, 3),
                    round(steal, 4),
                    round(iowait, 4),
                    load1,
                ]
            )
            f.flush()


def summarize(path: str, t0: float | None, t1: float | None) -> None:
    with open(path) as f:
        rows = [
            r
            for r in csv.DictReader(f)
            if (t0 is None or float(r["t"]) >= t0) and (t1 is None or float(r["t"]) <= t1)
        ]
    if not rows:
        print("no samples in the window", file=sys.stderr)
        raise SystemExit(2)
    print(f"{len(rows)} samples, {float(rows[-1]['t']) - float(rows[0]['t']):.1f} s")
    for col in COLUMNS[1:]:
        if col == "clock_reasons":
            seen = sorted({r[col] for r in rows})
            print(f"  {col}: {', '.join(seen)}")
            continue
        vals = [float(r[col]) for r in rows]
        print(f"  {col}: min {min(vals):g}  median {statistics.median(vals):g}  max {max(vals):g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--period", type=float, default=0.05)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--summarize")
    parser.add_argument("--from", dest="t0", type=float)
    parser.add_argument("--to", dest="t1", type=float)
    args = parser.parse_args()
    if args.summarize:
        summarize(args.summarize, args.t0, args.t1)
    elif args.out:
        sample(args.out, args.period, args.seconds)
    else:
        parser.error("give --out FILE to sample, or --summarize FILE")


if __name__ == "__main__":
    main()
