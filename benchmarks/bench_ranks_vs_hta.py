"""Multi-rank diagnosis side by side: HolisticTraceAnalysis 0.5.0 and gpudoctor on the same rank sets.

    PYTHONPATH=src python benchmarks/bench_ranks_vs_hta.py [--hta-python /tmp/htavenv/bin/python]
        [--scale 16,64] [--scale-trace T] [--mem-cap-gb 3] [--time-cap-s 300] [--json OUT]

Rank sets: the two recorded 2x H100 DDP sets (tests/data/ddp2_h100/{slow,healthy}), the CPU gloo
set (tests/data/gloo_straggler) and synthetic sets built by tests/ranksynth.py from the recorded
DDP rank (one rank held up before each step's last all-reduce by a planted DataLoader delay, with
and without planted clock offsets). Each tool runs as one whole fresh process, as a user runs it:
- gpudoctor: ``python -m gpudoctor analyze RUN_DIR --json`` (rank{R}/ bundles; worker processes);
- HTA: benchmarks/_hta_ranks.py in HTA's venv (straggler with one candidate, comm/comp overlap,
  temporal breakdown, kernel-type breakdown) on a folder of rank{R}.json.gz links.
Measured per process tree: wall time; peak RSS of its largest process (wait4's ru_maxrss, which
covers the children it waited for) and the peak of the tree's summed RSS (sampled every 20 ms).
HTA runs under an address-space cap (``ulimit -v``) and a time cap; a crash, a refusal or a cap
reached is recorded in the table, never fatal. Then the many-ranks scaling: N copies of one trace.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
HTA_DRIVER = ROOT / "benchmarks" / "_hta_ranks.py"
sys.path.insert(0, str(ROOT / "tests"))

LAST = [6, 13, 20]  # ranksynth's trace: the last all-reduce of each of its 3 steps (7 per step)


@dataclass
class RankSet:
    name: str
    truth: str
    folder: Path  # rank{R}/trace.json.gz (+ env.json)
    straggler: int | None = None  # planted: the rank, or None
    offsets_us: list[float] = field(default_factory=list)


@dataclass
class Run:
    wall_s: float
    largest_mib: float  # the largest single process of the tree
    tree_mib: float  # the tree's summed RSS, sampled
    rc: int
    out: str
    err: str
    capped: str = ""  # "time" when the time cap stopped it


def _tree_rss(root: int) -> int:
    """Summed RSS in bytes of ``root`` and its descendants (from /proc)."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    total = 0
    for pid in rss:
        p = pid
        while p > 1:
            if p == root:
                total += rss[pid]
                break
            p = parent.get(p, 0)
    return total


def measure(cmd: list[str], env: dict[str, str], mem_cap: int | None, time_cap: float) -> Run:
    """One process tree: wall, largest process's peak RSS, sampled peak of the tree's sum."""

    def limits() -> None:
        if mem_cap:  # ulimit -v: the address space of every process it starts
            resource.setrlimit(resource.RLIMIT_AS, (mem_cap, mem_cap))

    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, env=env, stdout=out, stderr=err, preexec_fn=limits, start_new_session=True
        )
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.02):
                peak[0] = max(peak[0], _tree_rss(proc.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        capped = [""]

        def stop() -> None:
            capped[0] = "time"
            os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(time_cap, stop)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        timer.cancel()
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        if not capped[0]:  # worker processes left behind by a crash
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out.seek(0)
        err.seek(0)
        return Run(
            wall,
            usage.ru_maxrss / 1024,
            peak[0] / 2**20,
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            capped[0],
        )


def hta_folder(rs: RankSet, tmp: Path) -> Path:
    """HTA's input: one folder of rank{R}.json.gz (hard links to the bundles' traces)."""
    folder = tmp / f"hta-{rs.name}"
    folder.mkdir()
    for d in sorted(rs.folder.glob("rank*")):
        if (d / "trace.json.gz").exists():
            _link(d / "trace.json.gz", folder / f"{d.name}.json.gz")
    return folder


def _link(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        dst.write_bytes(src.read_bytes())


def run_hta(args: argparse.Namespace, folder: Path) -> tuple[Run, dict]:
    run = measure(
        [args.hta_python, str(HTA_DRIVER), str(folder)],
        dict(os.environ),
        int(args.mem_cap_gb * 2**30),
        args.time_cap_s,
    )
    lines = [ln for ln in run.out.splitlines() if ln.startswith("{")]
    if run.capped:
        return run, {"error": f"stopped at the {args.time_cap_s:.0f} s cap"}
    if not lines:
        tail = (run.err.strip().splitlines() or [f"exit {run.rc}, no output"])[-1]
        if "MemoryError" in run.err or "Cannot allocate" in run.err or run.rc in (-9, 137):
            tail = f"out of memory under the {args.mem_cap_gb:g} GB cap ({tail[:80]})"
        return run, {"error": tail[:160]}
    return run, json.loads(lines[-1])


def run_gpudoctor(args: argparse.Namespace, folder: Path) -> tuple[Run, dict]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    run = measure(
        [sys.executable, "-m", "gpudoctor", "analyze", str(folder), "--json"],
        env,
        None,
        args.time_cap_s,
    )
    if run.rc != 0 or not run.out.strip():
        return run, {"error": (run.err.strip().splitlines() or [f"exit {run.rc}"])[-1][:160]}
    return run, json.loads(run.out)


def rank_sets(tmp: Path) -> list[RankSet]:
    import ranksynth

    off4 = [0.0, 1234.567, -98765.4321, 5_000_000.0]
    off8 = [0.0, 850.0, -1500.0, 2500.0, -400.0, 300.0, 12_000.0, -7000.0]
    sets = [
        RankSet(
            "ddp2-h100 slow",
            "rank 1 sleeps 20 ms/step (host); unprofiled step 35.76 ms vs 19.08 healthy",
            DATA / "ddp2_h100" / "slow",
            1,
        ),
        RankSet("ddp2-h100 healthy", "none planted", DATA / "ddp2_h100" / "healthy", None),
        RankSet("gloo CPU", "rank 1 sleeps 30 ms/step (host)", DATA / "gloo_straggler", 1),
    ]
    synth = [
        ("synth 4 late", 4, 2, 3000.0, None),
        ("synth 4 late+offsets", 4, 2, 3000.0, off4),
        ("synth 8 late+offsets", 8, 5, 5000.0, off8),
    ]
    for name, n, late, delay, offsets in synth:
        folder = ranksynth.rank_set(
            tmp / name.replace(" ", "_").replace("+", "_"),
            n,
            offsets_us=offsets,
            late=late,
            late_k=LAST,
            delay_us=delay,
        )
        off = f"; clock offsets {', '.join(f'{o / 1000:g}' for o in offsets)} ms" if offsets else ""
        sets.append(
            RankSet(
                name,
                f"rank {late} late {delay / 1000:g} ms/step (DataLoader){off}",
                folder,
                late,
                offsets or [],
            )
        )
    return sets


def hta_straggler(h: dict) -> str:
    if "error" in h:
        return f"failed: {h['error']}"
    if "stragglers" in h:
        return f"rank {h['stragglers'][0]} (picked in {_counts(h['straggler_counts'])})"
    text = f"crash: {h['stragglers_error']}"
    if "stragglers_renamed" in h:
        text += f"; with ncclDevKernel renamed: rank {h['stragglers_renamed'][0]}"
    elif "stragglers_renamed_error" in h:
        text += f"; renamed: {h['stragglers_renamed_error']}"
    return text


def _counts(counts: dict) -> str:
    return ", ".join(f"r{k}:{v}" for k, v in sorted(counts.items(), key=lambda kv: int(kv[0])))


def hta_overlap(h: dict) -> str:
    if "overlap_pct" not in h:
        return h.get("overlap_error", h.get("error", "?"))[:60]
    return " / ".join(
        "nan" if v != v else f"{v:.1f}"
        for _, v in sorted(h["overlap_pct"].items(), key=lambda kv: int(kv[0]))
    )


def hta_comm(h: dict) -> str:
    share = h.get("comm_share_pct")
    return "n/a" if share is None else f"{share:.0f}% of kernel time"


def gd_straggler(g: dict) -> str:
    if "error" in g:
        return f"failed: {g['error']}"
    f = next((f for f in g["findings"] if f["id"] == "straggler"), None)
    if f is None:
        return "none"
    n = f["evidence"]["numbers"]
    if n["cause"] == "profiler-noise":
        return f"none (rank {n['rank']} late within the profiler's noise, info)"
    profiled = n.get("wait_imposed_in_profiled_trace_ms")
    extra = f" ({profiled:.2f} profiled)" if profiled is not None else ""
    return f"rank {n['rank']}, {n['cause']}, {f['saving_ms']:.2f} ms/step{extra}"


def gd_exposed(g: dict) -> str:
    if "error" in g or not g.get("distributed"):
        return "n/a"
    e = g["distributed"]["exposed_comm"]
    return (
        f"{e['exposed_ms']:.2f} of {e['comm_ms']:.2f} (wait {e['wait_for_slowest_ms']:.2f}, transfer "
        f"{e['transfer_ms']:.2f}, not overlapped {e['overlap_not_taken_ms']:.2f})"
    )


def gd_offsets(g: dict) -> list[float]:
    return [r["clock_offset_us"] for r in sorted(g.get("ranks") or [], key=lambda r: r["rank"])]


def scale_sets(trace: Path, counts: list[int], tmp: Path) -> list[RankSet]:
    out = []
    for n in counts:
        folder = tmp / f"copies{n}"
        for r in range(n):
            (folder / f"rank{r}").mkdir(parents=True)
            _link(trace, folder / f"rank{r}" / "trace.json.gz")
        out.append(RankSet(f"{n} copies", "identical ranks", folder))
    return out


def _fmt_run(run: Run) -> tuple[str, str]:
    return f"{run.wall_s:.1f}", f"{run.largest_mib:.0f} / {run.tree_mib:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", default="/tmp/htavenv/bin/python")
    ap.add_argument(
        "--scale", default="16,64", help="rank counts for the scaling table ('' to skip)"
    )
    ap.add_argument(
        "--scale-trace",
        type=Path,
        default=DATA / "ddp2_h100" / "healthy" / "rank0" / "trace.json.gz",
    )
    ap.add_argument(
        "--mem-cap-gb", type=float, default=3.0, help="HTA's address-space cap (ulimit -v)"
    )
    ap.add_argument("--time-cap-s", type=float, default=300.0)
    ap.add_argument("--only", default="", help="comma-separated set names to run (default: all)")
    ap.add_argument("--json", type=Path, help="also write every raw result here")
    args = ap.parse_args()
    raw: list[dict] = []
    with tempfile.TemporaryDirectory() as tmpname:
        tmp = Path(tmpname)
        sets = [s for s in rank_sets(tmp) if not args.only or s.name in args.only.split(",")]
        rows = []
        for rs in sets:
            hrun, h = run_hta(args, hta_folder(rs, tmp))
            grun, g = run_gpudoctor(args, rs.folder)
            raw.append(
                {
                    "set": rs.name,
                    "truth": rs.truth,
                    "hta": h,
                    "hta_run": _run_dict(hrun),
                    "gpudoctor_run": _run_dict(grun),
                    "gpudoctor_offsets_us": gd_offsets(g) if "error" not in g else [],
                    "gpudoctor": _gd_kept(g),
                }
            )
            off = ""
            if rs.offsets_us and "error" not in g:
                worst = max(abs(a - b) for a, b in zip(gd_offsets(g), rs.offsets_us, strict=True))
                off = f"; offsets recovered within {worst:.1f} us"
            rows.append(
                [
                    rs.name,
                    rs.truth,
                    hta_straggler(h),
                    hta_overlap(h),
                    hta_comm(h),
                    gd_straggler(g) + off,
                    gd_exposed(g),
                    *_pair(grun, hrun),
                ]
            )
            print(f"done: {rs.name}", file=sys.stderr, flush=True)
        scaling = []
        counts = [int(c) for c in args.scale.split(",") if c.strip()]
        for rs in scale_sets(args.scale_trace, counts, tmp):
            hrun, h = run_hta(args, hta_folder(rs, tmp))
            grun, g = run_gpudoctor(args, rs.folder)
            raw.append(
                {
                    "set": rs.name,
                    "hta": h,
                    "hta_run": _run_dict(hrun),
                    "gpudoctor_run": _run_dict(grun),
                    "gpudoctor_error": g.get("error"),
                }
            )
            scaling.append(
                [
                    rs.name,
                    g.get("error", "ok")[:60],
                    *_fmt_run(grun),
                    h.get("error", "ok")[:90],
                    *_fmt_run(hrun),
                ]
            )
            print(f"done: {rs.name}", file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1, default=str))
    print(
        f"{os.cpu_count()} cores; HTA capped at {args.mem_cap_gb:g} GB address space and {args.time_cap_s:.0f} s"
    )
    print(
        "| set | planted truth | HTA straggler | HTA comm/comp overlap % per rank | HTA comm | gpudoctor straggler "
        "(rank, cause, ms/step) | gpudoctor exposed comm ms/step | wall s gd / HTA | peak RSS MiB gd / HTA |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if scaling:
        print(
            f"\nScaling: N copies of {args.scale_trace.relative_to(ROOT) if args.scale_trace.is_relative_to(ROOT) else args.scale_trace}"
            " (peak RSS MiB: largest process / whole process tree)"
        )
        print(
            "| ranks | gpudoctor | gd wall s | gd peak RSS MiB | HTA | HTA wall s | HTA peak RSS MiB |"
        )
        print("|---|---|---:|---|---|---:|---|")
        for row in scaling:
            print("| " + " | ".join(row) + " |")


def _pair(g: Run, h: Run) -> list[str]:
    return [
        f"{g.wall_s:.1f} / {h.wall_s:.1f}",
        f"{g.largest_mib:.0f} ({g.tree_mib:.0f} tree) / {h.largest_mib:.0f} ({h.tree_mib:.0f} tree)",
    ]


def _gd_kept(g: dict) -> dict:
    """The report's multi-rank parts, less the timeline's bars (most of its size)."""
    dist = {k: v for k, v in (g.get("distributed") or {}).items() if k != "timeline"}
    findings = [
        {k: f[k] for k in ("id", "title", "saving_ms", "evidence")} for f in g.get("findings") or []
    ]
    return {
        "findings": findings,
        "distributed": dist,
        "ranks": g.get("ranks"),
        "error": g.get("error"),
    }


def _run_dict(run: Run) -> dict:
    return {
        "wall_s": round(run.wall_s, 3),
        "largest_mib": round(run.largest_mib, 1),
        "tree_mib": round(run.tree_mib, 1),
        "rc": run.rc,
        "capped": run.capped,
        "stderr_tail": run.err.strip().splitlines()[-3:],
    }


if __name__ == "__main__":
    main()
