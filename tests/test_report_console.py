"""Terminal report: a snapshot at a fixed width, and trace names printed as text, never markup."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from synth import TraceBuilder

import gpudoctor
from gpudoctor.pipeline import analyze_loaded
from gpudoctor.report.console import render_text
from gpudoctor.trace import parse

HERE = Path(__file__).parent


def test_snapshot_of_the_host_sync_report() -> None:
    report = gpudoctor.analyze(HERE / "data" / "host_sync" / "trace.json.gz")
    report = dataclasses.replace(report, source="tests/data/host_sync/trace.json.gz")
    expected = (HERE / "snapshots" / "host_sync_console.txt").read_text()
    assert render_text(report, width=100) == expected


def test_markup_in_trace_names_is_printed_literally() -> None:
    t = TraceBuilder()
    for s in range(2):
        base = s * 1000
        t.step(s, base, 1000)
        t.launch(
            "[bold red]pwned[/] ampere_sgemm_128x64_tn",
            base + 1,
            base + 10,
            900,
            op="aten::mm",
            dims=[[2048, 2048], [2048, 2048]],
            flops=2 * 2048**3,
        )
    for e in t.events:
        if e.get("args", {}).get("Input type"):
            e["args"]["Input type"] = ["float", "float"]
    t.python("[link=http://x]train.py[/link](3): step", 0, 2000)
    report = analyze_loaded(parse(t.to_bytes(), source="[red]x[/red].json"))
    text = render_text(report, width=200)
    assert "[red]x[/red].json" in text
    assert report.finding("fp32-matmul") is not None


def test_mfu_without_recorded_flops_is_unknown_not_zero() -> None:
    """The small_gemm trap replays its GEMMs from a CUDA graph: no shapes, so no FLOPs. MFU is
    n/a, not 0.0%; healthy_train records shapes and keeps its figure."""
    import json

    from gpudoctor.report.json_report import to_json

    graph = gpudoctor.analyze(HERE / "data" / "small_gemm" / "trace.json.gz")
    assert json.loads(to_json(graph))["mfu"] is None
    assert "MFU n/a (no FLOPs recorded)" in " ".join(render_text(graph, width=200).split())
    shapes = gpudoctor.analyze(HERE / "data" / "healthy_train" / "trace.json.gz")
    assert json.loads(to_json(shapes))["mfu"] > 0
