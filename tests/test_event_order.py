"""A report does not depend on the order of the events in the file: the profiler writes each
thread's events together, other tools sort them by time or merge files. The host table is grouped
by thread in the order the file names them, so anything that takes "the first" of a set of rows
must mean the earliest in time (launch-bound's graph launch did not, and priced host_sync 4.21 or
4.09 ms by the file's order)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from gpudoctor.pipeline import analyze_loaded
from gpudoctor.report.json_report import to_json
from gpudoctor.trace import parse

DATA = Path(__file__).parent / "data"


def _report(raw: bytes) -> dict:
    report = json.loads(to_json(analyze_loaded(parse(raw, source="trace"))))
    return {k: report.get(k) for k in ("step_ms", "findings", "all_fixes", "idle", "breakdown")}


@pytest.mark.parametrize("name", ["host_sync", "healthy_train", "optimizer_loop"])
@pytest.mark.parametrize("order", ["shuffled", "by time", "reversed"])
def test_the_report_is_the_same_in_any_event_order(name: str, order: str) -> None:
    raw = gzip.decompress((DATA / name / "trace.json.gz").read_bytes())
    data = json.loads(raw)
    events = data["traceEvents"]
    if order == "shuffled":
        random.Random(7).shuffle(events)
    elif order == "by time":
        events.sort(key=lambda e: e.get("ts", 0) if isinstance(e.get("ts"), (int, float)) else 0)
    else:
        events.reverse()
    assert _report(json.dumps(data).encode()) == _report(raw)
