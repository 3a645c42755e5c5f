"""Many ranks in bounded memory: ``analyze_ranks`` on N copies of one trace against one trace's
analysis, whole processes, side by side.

    PYTHONPATH=src python benchmarks/bench_many_ranks.py [--ranks 64] [--trace T] [--jobs J]

Every measurement runs in a fresh Python process (peak RSS is a process's high-water mark):
- single: ``gpudoctor analyze TRACE --json`` once; its wall time and peak RSS;
- warm: one rank's work (load, diagnose, summarize) in an already-started process, median of 5;
- many: ``analyze_ranks`` on a run directory of N ``rank{R}/trace.json.gz`` copies (hard links:
  the copies cost no disk) with J worker processes; the parent's peak RSS, the largest worker's
  (RUSAGE_CHILDREN is the peak of the largest child) and the wall time.
The targets (issue 20): the largest process <= 2x the single analysis's peak, and the wall time
<= N x single / cores x 1.2. The default trace is the recorded DDP rank (16.3k events).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT / "tests" / "data" / "ddp_train" / "trace.json.gz"

_MANY = """
import json, resource, sys, time
t0 = time.perf_counter()
from gpudoctor.pipeline import analyze_ranks
report = analyze_ranks([sys.argv[1]], jobs=int(sys.argv[2]))
wall = time.perf_counter() - t0
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"wall_s": wall, "parent_kib": own, "worker_kib": kids, "ranks": len(report.ranks)}))
"""


_ONE = """
import json, statistics, sys, time
from pathlib import Path
from gpudoctor.pipeline import _summarize_rank
from gpudoctor.ranks.sources import RankSource
src = RankSource(0, Path(sys.argv[1]), None)
_summarize_rank(src, None, None)  # warm: imports and first-call costs out of the timing
times = []
for _ in range(5):
    t0 = time.perf_counter()
    _summarize_rank(src, None, None)
    times.append(time.perf_counter() - t0)
print(json.dumps({"median_s": statistics.median(times)}))
"""


def in_process(trace: Path) -> float:
    """Median seconds of one rank's work in a warm worker (load, diagnose, summarize)."""
    out = subprocess.run([sys.executable, "-c", _ONE, str(trace)], env=_env(), capture_output=True, text=True,
                         check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["median_s"])


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"))


def single(trace: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of ``gpudoctor analyze TRACE --json`` as a whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "gpudoctor", "analyze", str(trace), "--json"], env=_env(),
                   stdout=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return wall, max(peak, before)


def run_dir(trace: Path, n: int, folder: Path) -> Path:
    for r in range(n):
        d = folder / f"rank{r}"
        d.mkdir(parents=True)
        try:
            os.link(trace, d / "trace.json.gz")
        except OSError:  # another file system: a copy
            (d / "trace.json.gz").write_bytes(trace.read_bytes())
    return folder


def many(folder: Path, jobs: int) -> dict:
    out = subprocess.run([sys.executable, "-c", _MANY, str(folder), str(jobs)], env=_env(), capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=3, help="single-trace runs (the median is kept)")
    args = ap.parse_args()
    singles = sorted(single(args.trace) for _ in range(args.repeats))
    warm = in_process(args.trace)
    single_wall, single_kib = singles[len(singles) // 2][0], max(k for _, k in singles)
    with tempfile.TemporaryDirectory() as tmp:
        res = many(run_dir(args.trace, args.ranks, Path(tmp) / "run"), args.jobs)
    budget = args.ranks * single_wall / args.jobs * 1.2
    largest = max(res["parent_kib"], res["worker_kib"])
    rows = [
        ("single trace: wall s (whole process)", f"{single_wall:.2f}"),
        ("single trace: peak RSS MiB", f"{single_kib / 1024:.0f}"),
        (f"{args.ranks} ranks, {args.jobs} jobs: wall s", f"{res['wall_s']:.2f}"),
        (f"  target <= {args.ranks} x single / {args.jobs} x 1.2", f"{budget:.2f}"),
        ("  per rank (wall x jobs / ranks) s", f"{res['wall_s'] * args.jobs / args.ranks:.3f}"),
        ("one rank in a warm process s (load+diagnose+summarize)", f"{warm:.3f}"),
        (f"  strict target <= {args.ranks} x warm / {args.jobs} x 1.2", f"{args.ranks * warm / args.jobs * 1.2:.2f}"),
        ("  parent peak RSS MiB", f"{res['parent_kib'] / 1024:.0f}"),
        ("  largest worker peak RSS MiB", f"{res['worker_kib'] / 1024:.0f}"),
        ("  largest process / single", f"{largest / single_kib:.2f} (target <= 2)"),
        ("  ranks in the report", str(res["ranks"])),
    ]
    print(f"trace {args.trace} ({args.trace.stat().st_size / 1e6:.1f} MB gz), {os.cpu_count()} cores")
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
