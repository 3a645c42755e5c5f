"""Run in HolisticTraceAnalysis' environment as one whole process, as a user would: import HTA, load
the trace folder, compute the temporal and idle-time breakdowns, print a short JSON summary.

    python _hta_whole.py TRACE_DIR      (a folder holding the one trace; bench_load.py --whole-process)
"""

from __future__ import annotations

import json
import sys

from hta.trace_analysis import TraceAnalysis


def main(folder: str) -> None:
    analyzer = TraceAnalysis(trace_dir=folder)
    temporal = analyzer.get_temporal_breakdown(visualize=False)
    idle = analyzer.get_idle_time_breakdown(visualize=False)
    frame = idle[0] if isinstance(idle, tuple) else idle
    row = temporal.to_dict(orient="records")[0]
    print(json.dumps({"idle_pct": row.get("idle_time_pctg"), "idle_rows": len(frame)}, default=str))


if __name__ == "__main__":
    main(sys.argv[1])
