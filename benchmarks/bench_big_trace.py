"""A trace of any size from a recorded one, and `gpudoctor analyze BIG --json` on it with the
whole-file loader and the chunked one, side by side: wall time, CPU time, peak RSS.

    python benchmarks/bench_big_trace.py make OUT.json --copies 86 [--from benchmarks/data/bench_170k.json.gz]
    python benchmarks/bench_big_trace.py measure OUT.json [--repeat 1] [--src OTHER/src] [--no-whole]

``make``: the recorded trace's events COPIES times over, each copy one profiler window later (its
times shifted by the window's span plus 1 ms, its correlation and flow ids by 10**8 per copy, so
that each kernel still meets its own launch), written as Kineto lays a trace out (one event per
block, ``  {`` ... ``  },``), each event's fields on one line; deviceProperties and the other
fields as in the recording. bench_170k (150,525 events, 48 MB as recorded) makes about 45 MB and
150,525 events per copy.

``measure``: fresh processes, ``python -m gpudoctor analyze BIG --json > /dev/null``, through the
small launcher in _runners.py (peak RSS of the process alone). "chunked" is this checkout
(trace/stream.py, taken from 64 MB of file on); "whole" the same checkout with
GPUDOCTOR_BENCH_WHOLE=1, which this script's own launcher turns into ``load(..., chunked=False)``;
``--src`` adds another checkout (the loader before this work).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import msgspec

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
ID_STEP = 10**8


def make(out: Path, copies: int, source: Path) -> None:
    raw = source.read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    trace = msgspec.json.decode(data)
    events = trace.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    first = min(e["ts"] for e in timed)
    last = max(e["ts"] + (e.get("dur") or 0) for e in timed)
    period = last - first + 1000.0  # us
    head = msgspec.json.encode(trace)[:-1]  # the other fields, then the events last
    encode = msgspec.json.Encoder().encode
    with out.open("wb") as f:
        f.write(b"{\n  " + head[1:] + b',\n  "traceEvents": [\n')
        for k in range(copies):
            blocks = []
            for e in events:
                e = dict(e)
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] = round(e["ts"] + k * period, 3)
                if isinstance(e.get("id"), int):
                    e["id"] += k * ID_STEP
                args = e.get("args")
                if isinstance(args, dict) and isinstance(args.get("correlation"), int):
                    e["args"] = dict(args, correlation=args["correlation"] + k * ID_STEP)
                blocks.append(b"  {\n    " + encode(e)[1:-1] + b"\n  }")
            f.write((b",\n" if k else b"") + b",\n".join(blocks))
        f.write(b"\n  ]\n}\n")
    print(
        json.dumps({"file": str(out), "bytes": out.stat().st_size, "events": copies * len(events)})
    )


def measure(trace: Path, repeat: int, srcs: list[Path], whole: bool = True) -> None:
    commands = (
        {"whole (this checkout, load(chunked=False))": (SRC, {"GPUDOCTOR_BENCH_WHOLE": "1"})}
        if whole
        else {}
    )
    commands["chunked (this checkout)"] = (SRC, {})
    for src in srcs:
        commands[f"{src}"] = (src, {})
    rows = {}
    for name, (src, extra) in commands.items():
        env = dict(os.environ, PYTHONPATH=str(src), **extra)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        cmd = [sys.executable, str(Path(__file__).resolve()), "run", str(trace)]
        runs = []
        for _ in range(repeat):
            out = subprocess.run(
                [sys.executable, str(HERE / "_runners.py"), "spawn", *cmd],
                capture_output=True,
                text=True,
                env=env,
                timeout=3600,
                check=True,
            )
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(name, json.dumps(runs[-1]), flush=True)
        rows[name] = runs
    size = trace.stat().st_size
    print(
        f"\nMeasured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()} ({os.cpu_count()} cores,"
        f" {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB), Python "
        f"{platform.python_version()}, msgspec {msgspec.__version__}; {trace.name}: {size / 1e9:.2f} GB\n"
    )
    print("| loader | rc | wall s | CPU s | peak RSS GB (x file) |\n|---|---:|---:|---:|---:|")
    for name, runs in rows.items():
        peak = max(r["peak_rss"] for r in runs)
        print(
            f"| {name} | {','.join(str(r['rc']) for r in runs)} | {statistics.median(r['seconds'] for r in runs):.1f} | "
            f"{statistics.median(r['cpu'] for r in runs):.1f} | {peak / 1e9:.2f} ({peak / size:.2f}x) |"
        )


def run(trace: str) -> None:
    """``gpudoctor analyze TRACE --json``, the loader chosen by GPUDOCTOR_BENCH_WHOLE."""
    if os.environ.get("GPUDOCTOR_BENCH_WHOLE"):
        import functools
        import importlib

        loader = importlib.import_module(
            "gpudoctor.trace.load"
        )  # the package's `load` is the function
        loader.load = functools.partial(loader.load, chunked=False)  # type: ignore[assignment]
        import gpudoctor.trace as trace_pkg

        trace_pkg.load = loader.load  # type: ignore[assignment]
    from gpudoctor.__main__ import main

    sys.argv = ["gpudoctor", "analyze", trace, "--json"]
    main()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what", required=True)
    m = sub.add_parser("make")
    m.add_argument("out", type=Path)
    m.add_argument("--copies", type=int, default=86)
    m.add_argument("--from", dest="source", type=Path, default=HERE / "data" / "bench_170k.json.gz")
    r = sub.add_parser("measure")
    r.add_argument("trace", type=Path)
    r.add_argument("--repeat", type=int, default=1)
    r.add_argument("--src", type=Path, action="append", default=[])
    r.add_argument(
        "--no-whole",
        action="store_true",
        help="leave out the whole-file loader (6.5 GB on a 4 GB trace)",
    )
    x = sub.add_parser("run")
    x.add_argument("trace")
    args = parser.parse_args()
    if args.what == "make":
        make(args.out, args.copies, args.source)
    elif args.what == "measure":
        measure(args.trace, args.repeat, args.src, whole=not args.no_whole)
    else:
        run(args.trace)
