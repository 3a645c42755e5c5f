"""Load + analysis time and peak RAM: gpudoctor vs HolisticTraceAnalysis, side by side, same traces.

    python benchmarks/bench_load.py TRACE [TRACE...] [--hta-python /opt/htavenv/bin/python] [--repeat 3]
    python benchmarks/bench_load.py TRACE [TRACE...] --whole-process [--repeat 5] [--src DIR]

Each measurement runs in a fresh process (imports done before the clock starts). gpudoctor:
``analyze_path`` (load, every analysis, every rule, the report). HTA 0.5.0:
``TraceAnalysis(trace_dir=...)`` + ``get_temporal_breakdown`` + ``get_idle_time_breakdown``.
Peak RAM is the process's peak RSS minus its RSS before loading. Writes a Markdown table.

``--whole-process`` times what a user waits for, interpreter start and imports included:
``python -m gpudoctor analyze TRACE --json > /dev/null`` against ``_hta_whole.py`` (the same HTA
calls) in HTA's virtualenv, each a fresh process, the two alternating, after one unmeasured run of
each (bytecode compiled and cached as an installed package has it, the file in the page cache).
Peak RAM is the whole process's peak RSS; CPU seconds (user + system) beside the wall time, as
they move less with the machine's other load. Then gpudoctor's phases, timed one by one in one more
process (``_runners.py phases``). ``--src`` points at another checkout's ``src`` (a before/after
comparison on the same machine in the same run). Each run's figures go to stderr as it ends, and the
1-minute load average as the runs started is printed under the table.
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
    out = subprocess.run(
        [python, str(HERE / "_runners.py"), tool, str(trace)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
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
    parser.add_argument(
        "--repeat", type=int, default=None, help="runs per tool (default 3; 5 with --whole-process)"
    )
    parser.add_argument(
        "--whole-process", action="store_true", help="time the whole CLI process, imports included"
    )
    parser.add_argument(
        "--src",
        type=Path,
        action="append",
        default=None,
        help="gpudoctor source folder(s) to time (default: this checkout's src); repeat to compare",
    )
    args = parser.parse_args()
    if args.whole_process:
        whole_process(args.traces, args.hta_python, args.repeat or 5, args.src or [SRC])
        return
    args.repeat = args.repeat or 3
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
        (
            f"Measured {datetime.now(timezone.utc):%Y-%m-%d} on {platform.machine()} "
            f"({os.cpu_count()} cores), Python {platform.python_version()}; median of runs, fresh process each."
        ),
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


def spawn(cmd: list[str], env: dict[str, str]) -> dict:
    """One fresh process through the small launcher in _runners.py: its wall time and peak RSS."""
    out = subprocess.run(
        [sys.executable, str(HERE / "_runners.py"), "spawn", *cmd],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
        check=True,
    )  # HTA on a 400 MB trace: minutes
    return json.loads(out.stdout.strip().splitlines()[-1])


def _env(src: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    # an installed package runs from cached bytecode; a checkout with this variable set would
    # recompile every module in every run
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def whole_process(traces: list[Path], hta_python: str, repeat: int, srcs: list[Path]) -> None:
    import shutil
    import tempfile

    rows, phase_rows = [], []
    for trace in traces:
        folder = Path(tempfile.mkdtemp())
        shutil.copy(
            trace, folder / ("rank0.json.gz" if trace.name.endswith(".gz") else "rank0.json")
        )
        commands = {
            f"gpudoctor {src}": (
                [sys.executable, "-m", "gpudoctor", "analyze", str(trace), "--json"],
                _env(src),
            )
            for src in srcs
        }
        commands["hta"] = ([hta_python, str(HERE / "_hta_whole.py"), str(folder)], _env(SRC))
        # the floor under both: the interpreter starting and stopping
        commands["python -c pass"] = ([sys.executable, "-c", "pass"], _env(SRC))
        runs: dict[str, list[dict]] = {name: [] for name in commands}
        loads = []  # the 1-minute load average as each measured run starts (the machine's other work)
        for round_ in range(repeat + 1):  # the first round is the unmeasured warm-up
            for name, (cmd, env) in commands.items():
                if round_:
                    loads.append(os.getloadavg()[0])
                runs[name].append(spawn(cmd, env))
                print(
                    json.dumps(
                        {"trace": trace.name, "round": round_, "tool": name, **runs[name][-1]}
                    ),
                    file=sys.stderr,
                    flush=True,
                )
        shutil.rmtree(folder)
        row = {
            "trace": trace.name,
            "json_MB": json_size(trace) / 1e6,
            "load": [min(loads), max(loads)],
        }
        for name, measured in runs.items():
            measured = measured[1:]
            failed = [m["rc"] for m in measured if m["rc"] != 0]
            row[name] = {
                "seconds": statistics.median(m["seconds"] for m in measured),
                "cpu": statistics.median(m["cpu"] for m in measured),
                "peak_MB": max(m["peak_rss"] for m in measured) / 1e6,
                "failed_rc": failed,
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
        for src in srcs:
            out = subprocess.run(
                [sys.executable, str(HERE / "_runners.py"), "phases", str(trace)],
                capture_output=True,
                text=True,
                env=_env(src),
                timeout=900,
                check=True,
            )
            phase_rows.append(
                (trace.name, str(src), json.loads(out.stdout.strip().splitlines()[-1]))
            )
    print(whole_table(rows, srcs))
    print()
    print(phase_table(phase_rows))


def whole_table(rows: list[dict], srcs: list[Path]) -> str:
    head = [
        (
            f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()} ({os.cpu_count()} cores), "
            f"Python {platform.python_version()}; whole process, median of runs, fresh process each."
        ),
        "",
        "| trace | JSON MB | tool | seconds | vs HTA | CPU s | vs HTA (CPU) | peak RSS MB (x JSON) |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        hta, hta_cpu = r["hta"]["seconds"], r["hta"]["cpu"]
        for name in [f"gpudoctor {src}" for src in srcs] + ["hta", "python -c pass"]:
            m = r[name]
            note = f" (failed: rc {m['failed_rc'][0]})" if m["failed_rc"] else ""
            head.append(
                f"| {r['trace']} | {r['json_MB']:.1f} | {name}{note} | {m['seconds']:.3f} | "
                f"{hta / m['seconds']:.1f}x | {m['cpu']:.3f} | {hta_cpu / m['cpu']:.1f}x | "
                f"{m['peak_MB']:.0f} ({m['peak_MB'] / r['json_MB']:.2f}x) |"
            )
    head.append("")
    head += [
        f"Load average (1 min) as the runs on {r['trace']} started: {r['load'][0]:.2f}-{r['load'][1]:.2f}"
        for r in rows
    ]
    return "\n".join(head)


def phase_table(rows: list[tuple[str, str, dict]]) -> str:
    names = list(rows[0][2]) if rows else []
    head = [
        "| trace | gpudoctor | " + " | ".join(names) + " | sum |",
        "|---|---|" + "---:|" * (len(names) + 1),
    ]
    for trace, src, phases in rows:
        cells = " | ".join(f"{phases[n]:.3f}" for n in names)
        head.append(f"| {trace} | {src} | {cells} | {sum(phases.values()):.3f} |")
    return "\n".join(head)


if __name__ == "__main__":
    main()
