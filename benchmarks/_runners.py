"""One measured run in a fresh process: prints {"seconds", "rss_before", "rss_peak"} as JSON.

Usage: python _runners.py {gpudoctor|hta|decode-json|decode-orjson|decode-msgspec} TRACE_PATH
Run by bench_load.py / bench_json_decode.py; each tool is imported before the clock starts.

Two more for ``bench_load.py --whole-process``:
    python _runners.py spawn CMD...          run CMD (stdout to /dev/null), print {"seconds", "peak_rss"}
    python _runners.py phases TRACE_PATH     gpudoctor's analyze path timed phase by phase
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def rss_now() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def peak_rss() -> int:
    """VmHWM: the peak RSS of this address space. (ru_maxrss would inherit the parent's peak
    across fork + exec, and the parent may have parsed the same trace.)"""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def run_gpudoctor(path: str) -> None:
    from gpudoctor.pipeline import analyze_path

    before = rss_now()
    t0 = time.perf_counter()
    report = analyze_path(path)
    seconds = time.perf_counter() - t0
    emit(seconds, before, {"findings": [f.id for f in report.findings[:3]], "step_ms": report.step_ms})


def run_hta(path: str) -> None:
    import os
    import shutil
    import tempfile

    from hta.trace_analysis import TraceAnalysis

    folder = tempfile.mkdtemp()
    shutil.copy(path, os.path.join(folder, os.path.basename(path)))
    before = rss_now()
    t0 = time.perf_counter()
    analyzer = TraceAnalysis(trace_dir=folder)
    temporal = analyzer.get_temporal_breakdown(visualize=False)
    idle = analyzer.get_idle_time_breakdown(visualize=False)
    seconds = time.perf_counter() - t0
    frame = idle[0] if isinstance(idle, tuple) else idle
    emit(seconds, before, {"temporal": temporal.to_dict(orient="records")[:1], "idle_rows": len(frame)})


def run_decode(kind: str, path: str) -> None:
    import gzip

    raw = Path(path).read_bytes()
    data = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    if kind == "json":
        import json as codec

        decode = codec.loads
    elif kind == "orjson":
        import orjson

        decode = orjson.loads
    else:
        import msgspec

        from gpudoctor.trace.schema import TraceFile

        decoder = msgspec.json.Decoder(TraceFile)
        decode = decoder.decode
    before = rss_now()
    t0 = time.perf_counter()
    decode(data)
    emit(time.perf_counter() - t0, before, {"bytes": len(data)})


def emit(seconds: float, before: int, extra: dict) -> None:
    print(json.dumps({"seconds": seconds, "rss_before": before, "rss_peak": peak_rss(), **extra}, default=str))


def spawn(cmd: list[str]) -> None:
    """Wall time and peak RSS of one whole process. This launcher is small and forks the command:
    the child's ru_maxrss starts from the launcher's few MB, not from a big parent's peak
    (Linux carries the peak RSS across fork + exec)."""
    import os

    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: stdout to /dev/null, as in `gpudoctor analyze T --json > /dev/null`
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "peak_rss": usage.ru_maxrss * 1024, "rc": os.waitstatus_to_exitcode(status)}))


def phases(path: str) -> None:
    """The analyze command's phases, each timed on its own (gpudoctor.trace.load's parse steps)."""
    import gc
    import importlib

    t0 = time.perf_counter()
    import gpudoctor.cli  # noqa: F401 - the CLI module, as `python -m gpudoctor` imports it

    t1 = time.perf_counter()
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.report.json_report import to_json

    t2 = time.perf_counter()
    load = importlib.import_module("gpudoctor.trace.load")
    raw = Path(path).read_bytes()
    data = load._gunzip(raw, path) if raw[:2] == b"\x1f\x8b" else raw
    t3 = time.perf_counter()
    gc.disable()
    decoded = load._decode(data, path)
    t4 = time.perf_counter()
    trace = load.build(*decoded[:2], path, *decoded[2:])
    gc.enable()
    t5 = time.perf_counter()
    report = analyze_loaded(trace)
    t6 = time.perf_counter()
    to_json(report)
    t7 = time.perf_counter()
    print(json.dumps({"import cli": t1 - t0, "import pipeline + json report": t2 - t1, "read + gunzip": t3 - t2,
                      "JSON decode": t4 - t3, "trace build": t5 - t4, "analysis + rules + report": t6 - t5,
                      "JSON render": t7 - t6}))


if __name__ == "__main__":
    tool, trace = sys.argv[1], sys.argv[2]
    if tool == "spawn":
        spawn(sys.argv[2:])
    elif tool == "phases":
        phases(trace)
    elif tool == "gpudoctor":
        run_gpudoctor(trace)
    elif tool == "hta":
        run_hta(trace)
    else:
        run_decode(tool.split("-", 1)[1], trace)
