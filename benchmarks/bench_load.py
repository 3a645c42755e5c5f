"""Load + analysis time and peak RAM: gpudoctor vs HolisticTraceAnalysis, side by side, same traces.

    python benchmarks/bench_load.py TRACE [TRACE...] [--hta-python /opt/htavenv/bin/python] [--repeat 3]

Each measurement runs in a fresh process (imports done before the clock starts). gpudoctor:
``analyze_path`` (load, every analysis, every rule, the report). HTA 0.5.0:
``TraceAnalysis(trace_dir=...)`` + ``get_temporal_breakdown`` + ``get_idle_time_breakdown``.
Peak RAM is the process's peak RSS minus its RSS before loading. Writes a Markdown table.
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

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"


def measure(python: str, tool: str, trace: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    out = subprocess.run([python, str(HERE / "_runners.py"), tool, str(trace)], capture_output=True,
                         text=True, env=env, timeout=900, check=False)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def json_size(trace: Path) -> int:
    raw = trace.read_bytes()
    return len(gzip.decompress(raw)) if raw[:2] == b"\x1f\x8b" else len(raw)


def events(trace: Path) -> int:
    raw = trace.read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    return len(json.loads(data)["traceEvents"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--hta-python", default="/opt/htavenv/bin/python")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for trace in args.traces:
        size, n = json_size(trace), events(trace)
        result = {"trace": trace.name, "events": n, "json_MB": size / 1e6}
        for tool, python in (("gpudoctor", sys.executable), ("hta", args.hta_python)):
            runs = [measure(python, tool, trace) for _ in range(args.repeat)]
            ok = [r for r in runs if "error" in r] == []
            if not ok:
                result[tool] = {"error": next(r["error"] for r in runs if "error" in r)}
                continue
            result[tool] = {
                "seconds": statistics.median(r["seconds"] for r in runs),
                "peak_MB": max(r["rss_peak"] - r["rss_before"] for r in runs) / 1e6,
            }
        rows.append(result)
        print(json.dumps(result), flush=True)
    print(table(rows))


def table(rows: list[dict]) -> str:
    head = [
        (f"Measured {datetime.now(timezone.utc):%Y-%m-%d} on {platform.machine()} "
        f"({os.cpu_count()} cores), Python {platform.python_version()}; median of runs, fresh process each."),
        "",
        "| trace | events | JSON MB | gpudoctor s | HTA 0.5.0 s | speedup | gpudoctor peak MB (x JSON) | HTA peak MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        g, h = r.get("gpudoctor", {}), r.get("hta", {})
        gs, hs = g.get("seconds"), h.get("seconds")
        speed = f"{hs / gs:.1f}x" if gs and hs else "-"
        hta_s = f"{hs:.2f}" if hs else f"failed: {h.get('error', '?')}"
        head.append(
            f"| {r['trace']} | {r['events']:,} | {r['json_MB']:.1f} | {gs:.3f} | {hta_s} | {speed} | "
            f"{g.get('peak_MB', 0):.0f} ({g.get('peak_MB', 0) / r['json_MB']:.2f}x) | "
            f"{h.get('peak_MB', 0):.0f} |"
        )
    return "\n".join(head)


if __name__ == "__main__":
    main()
