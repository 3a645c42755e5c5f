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
    emit(
        seconds,
        before,
        {"findings": [f.id for f in report.findings[:3]], "step_ms": report.step_ms},
    )


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
    emit(
        seconds,
        before,
        {"temporal": temporal.to_dict(orient="records")[:1], "idle_rows": len(frame)},
    )


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
    print(
        json.dumps(
            {"seconds": seconds, "rss_before": before, "rss_peak": peak_rss(), **extra}, default=str
        )
    )


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
    # CPU seconds (user + system, its waited-for children included): on a shared machine, less
    # moved by other loads than wall time
    cpu = usage.ru_utime + usage.ru_stime
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu": cpu,
                "peak_rss": usage.ru_maxrss * 1024,
                "rc": os.waitstatus_to_exitcode(status),
            }
        )
    )


def _timed(f, label: str, spent: dict[str, float]):  # type: ignore[no-untyped-def]
    """``f``, adding the seconds each call takes to ``spent[label]``."""
    import functools

    @functools.wraps(f)
    def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - start

    return timed


def _timed_steps(f, label: str, spent: dict[str, float]):  # type: ignore[no-untyped-def]
    """``f``, a generator function, adding the seconds each step of its generators takes to ``spent[label]``."""
    import functools

    @functools.wraps(f)
    def timed(*args, **kwargs):  # type: ignore[no-untyped-def]
        steps = f(*args, **kwargs)
        while True:
            start = time.perf_counter()
            try:
                item = next(steps)
            except StopIteration:
                spent[label] += time.perf_counter() - start
                return
            spent[label] += time.perf_counter() - start
            yield item

    return timed


def _inflating_ahead(path: str) -> bool:
    """Starts inflating ``path`` ahead as ``python -m gpudoctor analyze`` does, where this checkout
    does that, and keeps the command from starting it a second time."""
    import importlib

    try:
        inflate = importlib.import_module("gpudoctor.core.inflate")
    except ImportError:
        return False
    inflate.inflate_ahead(path)
    inflate.inflate_ahead = lambda path: None
    return True


def phases(path: str) -> None:
    """``python -m gpudoctor analyze PATH --json`` run in this process, its phases timed by wrapping
    the functions that do them. "imports": the pipeline, trace and report modules; "CLI and the
    rest": what the command does around the phases (its own imports and argument parsing, env.json,
    writing the report)."""
    import contextlib
    import importlib
    import io
    import runpy

    # The command starts inflating a gzipped trace on a second thread before its imports
    # (gpudoctor/core/inflate.py, where the checkout has it): started here as early, and not again.
    ahead = _inflating_ahead(path)
    t0 = time.perf_counter()
    pipeline = importlib.import_module("gpudoctor.pipeline")
    load = importlib.import_module("gpudoctor.trace.load")
    json_report = importlib.import_module("gpudoctor.report.json_report")
    spent = {"imports": time.perf_counter() - t0}
    inflate = (
        "gunzip" if hasattr(load, "gunzip") else "_gunzip"
    )  # its name in the loader, then and now
    # what analyze_path calls, then and now
    diagnose = "diagnose_loaded" if hasattr(pipeline, "diagnose_loaded") else "analyze_loaded"
    for label, module, name in (
        ("gunzip", load, inflate),
        ("JSON decode", load, "_decode"),
        ("trace build", load, "build"),
        ("analysis + rules + report", pipeline, diagnose),
        ("JSON render", json_report, "to_json"),
    ):
        spent[label] = 0.0
        setattr(module, name, _timed(getattr(module, name), label, spent))
    if ahead:
        # the loader's wait for the thread's JSON: what of the inflating the imports did not hide
        spent["gunzip"] = 0.0
        load.take_inflated = _timed(load.take_inflated, "gunzip", spent)
    # the events decoded a slice at a time, inside the trace build (trace/read.py Slices)
    slices = getattr(load, "Slices", None)
    if slices is not None:
        spent["slice decode"] = 0.0
        slices.events = _timed_steps(slices.events, "slice decode", spent)
    sys.argv = ["gpudoctor", "analyze", path, "--json"]
    t1 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        runpy.run_module("gpudoctor", run_name="__main__", alter_sys=True)
    run = time.perf_counter() - t1
    if "slice decode" in spent:  # decoding the slices is the JSON decode, not the build
        spent["JSON decode"] += spent["slice decode"]
        spent["trace build"] -= spent.pop("slice decode")
    spent["CLI and the rest"] = run - sum(v for k, v in spent.items() if k != "imports")
    print(json.dumps(spent))


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
