"""The Report's typed sections at the JSON edge: what a live capture adds to the steps is written
after the steps' own keys, in the schema's order, and the console reads it from the section."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gpudoctor
from gpudoctor.capture.session import CaptureResult
from gpudoctor.live import _with_capture_facts
from gpudoctor.pipeline import diagnose_loaded
from gpudoctor.report.console import render_text
from gpudoctor.report.html import render_html
from gpudoctor.trace import load

HOST_SYNC = Path(__file__).parent / "data" / "host_sync" / "trace.json.gz"
GENERATE = {
    "calls_timed": 2,
    "forwards_per_call": 9,
    "call_ms": 40.5,
    "prefill_ms": 8.25,
    "decode_ms_per_token": 4.0,
}


def test_a_live_capture_writes_its_step_facts_after_the_steps_own() -> None:
    found = diagnose_loaded(load(HOST_SYNC), step_source="optimizer-step")
    report = _with_capture_facts(
        found.report, CaptureResult(root_module="GPT", generate=dict(GENERATE))
    )
    steps = report.to_dict()["steps"]
    assert list(steps) == [
        "method",
        "count",
        "median_ms",
        "per_step_ms",
        "source",
        "root_module",
        "generate",
    ]
    assert (steps["source"], steps["root_module"], steps["generate"]) == (
        "optimizer-step",
        "GPT",
        GENERATE,
    )
    assert steps["per_step_ms"] == [10.733, 10.4714, 10.2018]
    assert (
        "generate  9 forwards per call; prefill 8.25 ms, decode 4.00 ms per token (unprofiled)"
        in render_text(report)
    )


def test_a_generate_call_of_one_forward_has_no_per_token_time() -> None:
    found = diagnose_loaded(load(HOST_SYNC))
    one = {"calls_timed": 1, "forwards_per_call": 1, "call_ms": 3.5}
    report = _with_capture_facts(found.report, CaptureResult(generate=dict(one)))
    steps = report.to_dict()["steps"]
    assert (
        list(steps) == ["method", "count", "median_ms", "per_step_ms", "generate"]
        and steps["generate"] == one
    )
    assert "forwards per call" not in render_text(report)


def test_the_model_loads_no_renderer_and_a_report_still_shows_itself() -> None:
    """The renderers import the model, never the reverse; print() and a notebook's cell find the
    renderer by the name the model gives (report/model.py SHOWN_BY) when the report is shown."""
    code = (
        "import sys, gpudoctor.report.model; "
        "print(sorted(m for m in sys.modules if m.startswith(('rich', 'gpudoctor.report.'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout
    assert loaded.strip() == "['gpudoctor.report.model', 'gpudoctor.report.sections']"
    report = gpudoctor.analyze(HOST_SYNC)
    assert str(report) == render_text(report)
    assert report._repr_html_() == render_html(report, standalone=False)
