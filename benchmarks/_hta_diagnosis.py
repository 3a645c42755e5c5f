"""Run in HolisticTraceAnalysis' environment: its idle and temporal breakdowns of one trace, as JSON."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

from hta.trace_analysis import TraceAnalysis


def main(path: str) -> None:
    folder = tempfile.mkdtemp()
    shutil.copy(
        path, os.path.join(folder, "rank0.json.gz" if path.endswith(".gz") else "rank0.json")
    )
    try:
        analyzer = TraceAnalysis(trace_dir=folder)
        temporal = analyzer.get_temporal_breakdown(visualize=False)
        idle = analyzer.get_idle_time_breakdown(visualize=False)
    except Exception as exc:  # noqa: BLE001 - report what HTA does, crash included
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:120]}"}))
        return
    frame = idle[0] if isinstance(idle, tuple) else idle
    shares = {}
    for row in frame.to_dict(orient="records"):
        shares[str(row.get("idle_category"))] = shares.get(
            str(row.get("idle_category")), 0.0
        ) + float(row.get("idle_time_ratio", 0.0))
    t = temporal.to_dict(orient="records")[0]
    print(
        json.dumps(
            {
                "idle": shares,
                "idle_pct": t.get("idle_time_pctg"),
                "compute_pct": t.get("compute_time_pctg"),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
