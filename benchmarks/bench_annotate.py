"""Time to write the annotated trace (report/perfetto.py), phase by phase, after the analysis.

    python benchmarks/bench_annotate.py TRACE [--repeat 5] [--out RESULT.json]

The trace is loaded and analysed once (``pipeline.diagnose_path``, not timed); then, ``--repeat``
times: the survey of the file (``trace.append.survey``: its ids and where its events end, read a
chunk at a time), the added events (``report.perfetto.annotate``), the copy with them added
(``trace.append.write_with_events``) to a plain file and to a gzip one, and the whole
``write_annotated`` (survey, events, gzip copy, atomic write). Medians, in seconds; peak RSS of the
process and the file's size beside them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from gpudoctor.pipeline import diagnose_path
from gpudoctor.report.perfetto import CAT, annotate, write_annotated
from gpudoctor.trace.append import survey, write_with_events
from gpudoctor.trace.load import resolve_trace_path


def _timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    source = resolve_trace_path(args.trace)
    found = diagnose_path(args.trace)
    if found.analysis is None:
        raise SystemExit(f"{source}: no GPU work, nothing to annotate")
    findings = found.report.findings
    phases: dict[str, list[float]] = {
        k: [] for k in ("survey", "events", "copy", "gzip copy", "write_annotated")
    }
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with tempfile.TemporaryDirectory() as tmp:
        target, plain = Path(tmp) / "annotated.trace.json.gz", Path(tmp) / "annotated.trace.json"
        for _ in range(args.repeat):
            surveyed, t = _timed(lambda: survey(source, CAT))
            phases["survey"].append(t)
            annotation, t = _timed(lambda: annotate(found.analysis, findings, surveyed))
            phases["events"].append(t)
            with plain.open("wb") as out:
                _, t = _timed(lambda: write_with_events(surveyed, annotation.events, CAT, out))
            phases["copy"].append(t)
            with gzip.GzipFile(str(target), "wb", compresslevel=6, mtime=0) as out:
                _, t = _timed(lambda: write_with_events(surveyed, annotation.events, CAT, out))
            phases["gzip copy"].append(t)
            _, t = _timed(lambda: write_annotated(source, found.analysis, findings, target))
            phases["write_annotated"].append(t)
        size, json_bytes = target.stat().st_size, plain.stat().st_size
    result = {
        "trace": str(args.trace),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "repeat": args.repeat,
        "added_events": len(annotation.events),
        "json_bytes": json_bytes,
        "gzip_bytes": size,
        "median_s": {k: round(statistics.median(v), 4) for k, v in phases.items()},
        # ru_maxrss is in kB on Linux; the loaded trace and its analysis are alive throughout
        "peak_rss_mb": {
            "after_analysis": round(rss_before / 1024, 1),
            "after_writes": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        },
    }
    print("| phase | median s |\n|---|---:|")
    for k, v in result["median_s"].items():
        print(f"| {k} | {v:.3f} |")
    print(
        f"\n{result['added_events']} events added; {json_bytes / 1e6:.1f} MB of JSON, {size / 1e6:.1f} MB gzipped; "
        f"peak RSS {result['peak_rss_mb']}"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
