"""Run in HolisticTraceAnalysis' environment: its critical-path analysis of one trace's steps, as JSON.

``python _hta_critical_path.py TRACE FIRST LAST``: ProfilerStep instances FIRST..LAST (HTA's
``critical_path_analysis(rank=0, annotation="ProfilerStep", instance_id=(FIRST, LAST))``); prints the
critical path's length (us, the sum of its edges' weights), its boundedness breakdown (us), the
analysis' own time (s), or the error HTA raised.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

from hta.trace_analysis import TraceAnalysis


def main(path: str, first: int, last: int) -> None:
    folder = tempfile.mkdtemp()
    shutil.copy(
        path, os.path.join(folder, "rank0.json.gz" if path.endswith(".gz") else "rank0.json")
    )
    try:
        analyzer = TraceAnalysis(trace_dir=folder)
        start = time.perf_counter()
        graph, ok = analyzer.critical_path_analysis(
            rank=0, annotation="ProfilerStep", instance_id=(first, last)
        )
        seconds = time.perf_counter() - start
        breakdown = graph.get_critical_path_breakdown().groupby("bound_by")["duration"].sum()
    except Exception as exc:  # noqa: BLE001 - report what HTA does, crash included
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:160]}"}))
        return
    length = float(sum(e.weight for e in graph.critical_path_edges_set))
    print(
        json.dumps(
            {
                "ok": bool(ok),
                "seconds": round(seconds, 3),
                "length_us": length,
                "bound_by_us": {str(k) or "unlabelled": float(v) for k, v in breakdown.items()},
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
