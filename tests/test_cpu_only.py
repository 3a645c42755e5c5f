"""A trace with no GPU work still gets a report: step times, the host breakdown, a plain note that
no GPU work was recorded, and renderers that say so. tests/data/cpu_only/trace.json.gz was recorded
on a CPU-only machine (torch 2.13.0+cpu) by scripts/record_cpu_only_fixture.py: a 128-256-10 MLP,
DataLoader(batch 64, num_workers=0), SGD with momentum, prof.step() each iteration, 3 active steps."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from browser import load_page
from synth import TraceBuilder

import gpudoctor
from gpudoctor.analysis.host_breakdown import UNTRACED, host_breakdown
from gpudoctor.analysis.steps import segment
from gpudoctor.errors import EmptyTraceError, NoGpuActivityError
from gpudoctor.pipeline import analyze_loaded
from gpudoctor.report.console import render_text
from gpudoctor.report.html import render_html
from gpudoctor.report.json_report import to_json
from gpudoctor.trace import load, parse

TRACE = Path(__file__).parent / "data" / "cpu_only" / "trace.json.gz"


@pytest.fixture(scope="module")
def report():
    return gpudoctor.analyze(TRACE)


def test_steps_are_the_profiler_steps_in_host_time(report) -> None:
    assert report.host_only
    assert report.steps.to_dict() == {
        "method": "profiler-step",
        "count": 3,
        "median_ms": 1.1805,
        "per_step_ms": [1.3024, 1.1805, 1.1182],
    }
    assert report.step_ms == pytest.approx(1.2004, abs=5e-5)
    assert report.gpu_busy_pct == 0.0 and report.mfu == 0.0


def test_the_host_breakdown_pins_the_loop(report) -> None:
    host = report.host
    assert host.device == "cpu" and host.step_ms == pytest.approx(1.2004, abs=5e-5)
    assert host.by_category == {
        "dataloader": 0.392,
        "backward": 0.2372,
        "optimizer": 0.2125,
        UNTRACED: 0.2075,
        "aten ops": 0.1511,
    }
    assert sum(host.by_category.values()) == pytest.approx(report.step_ms, abs=1e-3)
    top = [(o.name, o.category, o.ms_per_step, o.calls_per_step) for o in host.ops[:4]]
    assert top == [
        ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "dataloader", 0.392, 1.0),
        ("Optimizer.step#SGD.step", "optimizer", 0.1969, 1.0),
        ("autograd::engine::evaluate_function: AddmmBackward0", "backward", 0.1679, 2.0),
        ("aten::linear", "aten ops", 0.0984, 2.0),
    ]


def test_no_gpu_and_nothing_priced_against_one(report) -> None:
    assert report.gpu.name is None and report.gpu.device == "cpu"
    assert report.findings == () and report.idle == {}
    assert list(report.roofline.kernels) == [] and list(report.roofline.ops) == []
    assert report.warnings[0].startswith(
        "no GPU work was recorded in this window: the program ran on the CPU (device: cpu)"
    )
    assert list(report.not_applicable) == ["gpu"]


def test_json_round_trips(report) -> None:
    data = json.loads(to_json(report))
    assert data["gpu"]["name"] is None and data["host"]["by_category"]["dataloader"] == 0.392
    assert data["steps"]["per_step_ms"] == [1.3024, 1.1805, 1.1182]
    gpu_report = json.loads(
        to_json(gpudoctor.analyze(TRACE.parent.parent / "host_sync" / "trace.json.gz"))
    )
    assert gpu_report["host"] == {}  # GPU reports keep their shape


def test_console_shows_the_step_and_the_host_table(report) -> None:
    text = render_text(report, width=100)
    assert "GPU    none: no GPU work was recorded (device: cpu)" in text
    assert "1.200 ms mean over 3 steps (profiler-step); host (CPU) time" in text
    assert "Host breakdown (per step, CPU time)" in text and "Top host ops" in text
    assert re.search(r"dataloader\s+0\.392 ms\s+32\.7%", text)
    assert "No GPU findings" in text and "MFU" not in text and "ceilings" not in text


def test_html_says_it_plainly(report) -> None:
    html = render_html(report)
    assert "<h2>Host breakdown</h2>" in html and "<h2>Top host ops</h2>" in html
    assert "Roofline" not in html and "No GPU findings" in html
    assert "no GPU work was recorded in this window" in html
    assert "<title>gpudoctor: CPU-only report</title>" in html


def test_html_renders_in_a_browser(report, tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    path.write_text(render_html(report), encoding="utf-8")
    result = load_page(path)
    assert result.console_errors == []
    assert "Host breakdown" in result.dom and "enumerate(DataLoader)" in result.dom


def test_without_markers_the_cpu_steps_come_from_the_optimizer() -> None:
    data = json.loads(gzip.decompress(TRACE.read_bytes()))
    data["traceEvents"] = [
        e for e in data["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    r = analyze_loaded(parse(json.dumps(data).encode()))
    assert r.host_only and r.steps.method == "optimizer-step" and r.steps.count == 3


def test_a_cpu_side_profile_of_a_cuda_program_says_what_happened() -> None:
    """activities=[CPU] on a GPU machine: the host's cudaLaunchKernel calls are there, the kernels
    are not. The note must not claim the program ran on the CPU."""
    t = TraceBuilder()
    for i in range(3):
        t.step(i, 100 * i, 100)
        t.op("aten::mm", 100 * i + 10, 20)
        t.runtime("cudaLaunchKernel", 100 * i + 12, 5)
    r = analyze_loaded(parse(t.to_bytes()))
    assert r.host_only and r.steps.count == 3
    assert "yet the host made 3 CUDA runtime calls" in r.warnings[0]
    assert "ran on the CPU" not in r.warnings[0]
    assert r.host.by_category["aten ops"] == pytest.approx(0.02)


def test_a_gpu_listed_but_unused_is_named() -> None:
    t = TraceBuilder()
    t.op("aten::add", 1, 2)
    r = analyze_loaded(parse(t.to_bytes()))
    assert (
        "(the trace lists the device NVIDIA H100 80GB HBM3, but no kernel or copy ran on it)"
        in r.warnings[0]
    )
    assert r.steps.method == "whole-trace"


def test_a_trace_with_no_events_is_an_error() -> None:
    with pytest.raises(EmptyTraceError, match="holds no profiler events") as info:
        analyze_loaded(parse(b'{"traceEvents": []}', source="empty.json"))
    assert isinstance(info.value, NoGpuActivityError) and info.value.exit_code == 2


def test_top_level_ops_look_through_python_frames_and_modules() -> None:
    """with_stack / with_modules: Python frames and nn.Module ranges enclose the ops; the ops,
    not the frames, are the host's top level."""
    t = TraceBuilder(gpus=[])
    t.python("train.py(12): <module>", 0, 400)
    for i in range(3):
        t.step(i, 10 + 120 * i, 120)
        t.python("nn.Module: Net_0", 12 + 120 * i, 60)
        t.op("aten::linear", 15 + 120 * i, 40)
        t.op("aten::addmm", 16 + 120 * i, 30)  # inside linear: not top-level
        t.annotation("Optimizer.step#SGD.step", 80 + 120 * i, 30)
    trace = parse(t.to_bytes())
    hb = host_breakdown(trace, segment(trace))
    assert hb.by_category_ms == pytest.approx({"aten ops": 0.04, "optimizer": 0.03, UNTRACED: 0.05})
    assert [o.name for o in hb.ops] == ["aten::linear", "Optimizer.step#SGD.step"]


def test_the_fixture_is_the_recorded_one() -> None:
    trace = load(TRACE)
    assert len(trace.device) == 0 and trace.gpus == [] and len(trace.host) == 1575


def test_another_accelerators_trace_is_not_called_a_cpu_run() -> None:
    """An MTIA inference trace (mtia_runtime, mtia_ccp_events) records no CUDA work: its
    accelerator's events are counted and the report says they were not read, not that the program
    ran on the CPU."""
    from synth import TraceBuilder

    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.trace import parse

    t = TraceBuilder(gpus=[])
    for s in range(3):
        t.step(s, s * 1_000, 1_000)
        t.op("aten::linear", s * 1_000 + 10, 500)
        t.events.append(
            {
                "ph": "X",
                "cat": "mtia_runtime",
                "name": "launch",
                "pid": 1,
                "tid": 1,
                "ts": s * 1_000 + 20,
                "dur": 5,
                "args": {},
            }
        )
    trace = parse(t.to_bytes())
    assert trace.other_accelerator_events == 3
    note = analyze_loaded(trace).warnings[0]
    assert note == (
        "no GPU work was recorded in this window: the trace holds 3 events of another accelerator "
        "(MTIA, XPU, HPU or a PrivateUse1 device), which gpudoctor does not read. This report "
        "covers the host alone"
    )


def test_a_report_with_no_gpu_work_is_not_called_healthy() -> None:
    from gpudoctor.pipeline import analyze_loaded
    from gpudoctor.trace import parse

    t = TraceBuilder(gpus=[])
    t.op("aten::add", 1, 2)
    verdict = analyze_loaded(parse(t.to_bytes())).verdict()
    assert (verdict.status, verdict.top_finding) == ("no-gpu-work", None)
    assert verdict.text.startswith("no GPU work was recorded in this window")
    # a CPU (gloo) job's ranks read together: its multi-rank findings keep their verdict
    from gpudoctor.pipeline import analyze_inputs

    data = Path(__file__).parent / "data" / "gloo_straggler"
    ranks = analyze_inputs([data / "rank0", data / "rank1"])
    assert ranks.findings and ranks.verdict().status == "findings"
