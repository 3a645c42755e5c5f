"""One measured run in a fresh process: prints {"seconds", "rss_before", "rss_peak"} as JSON.

Usage: python _runners.py {gpudoctor|hta|decode-json|decode-orjson|decode-msgspec} TRACE_PATH
Run by bench_load.py / bench_json_decode.py; each tool is imported before the clock starts.
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


if __name__ == "__main__":
    tool, trace = sys.argv[1], sys.argv[2]
    if tool == "gpudoctor":
        run_gpudoctor(trace)
    elif tool == "hta":
        run_hta(trace)
    else:
        run_decode(tool.split("-", 1)[1], trace)
