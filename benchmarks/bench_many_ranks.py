"""Many ranks in bounded memory: ``analyze_ranks`` on N copies of one trace against one trace's
analysis, whole processes, side by side.

    PYTHONPATH=src python benchmarks/bench_many_ranks.py [--ranks 64] [--trace T] [--jobs J]
    PYTHONPATH=src python benchmarks/bench_many_ranks.py --runs RUN_DIR... [--jobs-list 1 2]

Every measurement runs in a fresh Python process (peak RSS is a process's high-water mark):
- single: ``gpudoctor analyze TRACE --json`` once; its wall time and peak RSS;
- warm: one rank's work (load, diagnose, summarize) in an already-started process, median of 5;
- many: ``analyze_ranks`` on a run directory of N ``rank{R}/trace.json.gz`` copies (hard links:
  the copies cost no disk) with J worker processes; the parent's peak RSS, the largest worker's
  (RUSAGE_CHILDREN is the peak of the largest child) and the wall time.
The targets (issue 20): the largest process <= 2x the single analysis's peak, and the wall time
<= N x single / cores x 1.2. The default trace is the recorded DDP rank (16.3k events).

``--runs``: real run directories (``rankR/trace.json.gz`` per rank) instead of copies. Per directory
and per ``--jobs-list`` entry, ``gpudoctor analyze RUN_DIR --json --jobs J`` as a whole process (the
CLI of ``analyze_ranks``): the median wall time of ``--repeats`` runs; the peak RSS of the whole
process tree (the sum over the CLI and its workers, sampled every 10 ms from /proc) and of its
largest process (wait4's ru_maxrss: the CLI or its largest worker); and, for scale, one rank's
``gpudoctor analyze rank0/trace.json.gz --json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
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
    out = subprocess.run(
        [sys.executable, "-c", _ONE, str(trace)],
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["median_s"])


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"))


def single(trace: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (KiB) of ``gpudoctor analyze TRACE --json`` as a whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "gpudoctor", "analyze", str(trace), "--json"],
        env=_env(),
        stdout=subprocess.DEVNULL,
        check=True,
    )
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
    out = subprocess.run(
        [sys.executable, "-c", _MANY, str(folder), str(jobs)],
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def tree_rss(children: Mapping[int, list[int]], rss: Mapping[int, int], root: int) -> int:
    """The RSS of ``root`` and every descendant (``children``: pid -> child pids; ``rss``: pid ->
    bytes; a pid gone from ``rss`` exited between the two reads and counts 0)."""
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:  # a pid reused while we read: count it once
            continue
        seen.add(pid)
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


def _rollup(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in bytes. PSS splits each page shared with forked workers among
    them: its sum over the tree is the tree's footprint; the RSS sum counts shared pages per process."""
    rss = pss = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    return rss, pss


def _proc_tree(root: int) -> tuple[dict[int, list[int]], dict[int, int], dict[int, int]]:
    """(children, RSS, PSS) of ``root``'s process tree, read from /proc (threads' children included)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    pss: dict[int, int] = {}
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            rss[pid], pss[pid] = _rollup(pid)
            kids = []
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    kids += [int(k) for k in f.read().split()]
        except (OSError, ValueError, IndexError):  # exited while we read it
            continue
        children[pid] = kids
        todo.extend(kids)
    return children, rss, pss


def whole_tree(cmd: list[str], interval: float = 0.01) -> dict:
    """Run ``cmd`` (stdout to /dev/null): wall seconds, the peaks of its process tree's summed RSS
    and PSS (sampled every ``interval`` s) and its largest process's peak RSS (ru_maxrss), in bytes."""
    peak = {"rss": 0, "pss": 0}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            children, rss, pss = _proc_tree(proc.pid)
            peak["rss"] = max(peak["rss"], tree_rss(children, rss, proc.pid))
            peak["pss"] = max(peak["pss"], tree_rss(children, pss, proc.pid))
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}")
    return {
        "wall_s": wall,
        "tree_rss": peak["rss"],
        "tree_pss": peak["pss"],
        "largest_peak": usage.ru_maxrss * 1024,
    }


def runs(dirs: list[Path], jobs_list: list[int], repeats: int) -> list[dict]:
    """One row per run directory and jobs count (see the module's docstring)."""
    gd = [sys.executable, "-m", "gpudoctor", "analyze"]
    out = []
    for folder in dirs:
        traces = sorted(folder.glob("rank*/trace.json*"))
        if not traces:
            raise SystemExit(f"{folder}: no rank*/trace.json* in it")
        one = [whole_tree(gd + [str(traces[0]), "--json"]) for _ in range(repeats)]
        for jobs in jobs_list:
            res = [
                whole_tree(gd + [str(folder), "--json", "--jobs", str(jobs)])
                for _ in range(repeats)
            ]
            out.append(
                {
                    "run": folder.name,
                    "ranks": len(traces),
                    "jobs": jobs,
                    "gz_mb": sum(t.stat().st_size for t in traces) / 1e6,
                    "wall_s": statistics.median(r["wall_s"] for r in res),
                    "tree_rss_mib": max(r["tree_rss"] for r in res) / 2**20,
                    "tree_pss_mib": max(r["tree_pss"] for r in res) / 2**20,
                    "largest_mib": max(r["largest_peak"] for r in res) / 2**20,
                    "one_wall_s": statistics.median(r["wall_s"] for r in one),
                    "one_mib": max(r["largest_peak"] for r in one) / 2**20,
                }
            )
    return out


def runs_table(rows: list[dict]) -> str:
    lines = [
        (
            "| run | ranks | traces, MB gz | jobs | wall s | whole tree: peak RSS sum / PSS sum MiB | "
            "largest process MiB | one rank: wall s / peak MiB |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['ranks']} | {r['gz_mb']:.1f} | {r['jobs']} | {r['wall_s']:.2f} | "
            f"{r['tree_rss_mib']:.0f} / {r['tree_pss_mib']:.0f} | {r['largest_mib']:.0f} | {r['one_wall_s']:.2f} / {r['one_mib']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=3, help="single-trace runs (the median is kept)")
    ap.add_argument(
        "--runs",
        type=Path,
        nargs="+",
        default=None,
        metavar="RUN_DIR",
        help="Real run directories (rankR/trace.json.gz each) instead of copies of --trace.",
    )
    ap.add_argument(
        "--jobs-list", type=int, nargs="+", default=[1, 2], help="--runs: the --jobs values to time"
    )
    args = ap.parse_args()
    if args.runs:
        print(
            f"{os.cpu_count()} cores; wall: median of {args.repeats}; peaks: max of {args.repeats}"
        )
        print(runs_table(runs(args.runs, args.jobs_list, args.repeats)))
        return
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
        (
            f"  strict target <= {args.ranks} x warm / {args.jobs} x 1.2",
            f"{args.ranks * warm / args.jobs * 1.2:.2f}",
        ),
        ("  parent peak RSS MiB", f"{res['parent_kib'] / 1024:.0f}"),
        ("  largest worker peak RSS MiB", f"{res['worker_kib'] / 1024:.0f}"),
        ("  largest process / single", f"{largest / single_kib:.2f} (target <= 2)"),
        ("  ranks in the report", str(res["ranks"])),
    ]
    print(
        f"trace {args.trace} ({args.trace.stat().st_size / 1e6:.1f} MB gz), {os.cpu_count()} cores"
    )
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
