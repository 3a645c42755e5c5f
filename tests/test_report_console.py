"""Terminal report: a snapshot at a fixed width, and trace names printed as text, never markup."""

from __future__ import annotations

from pathlib import Path

import msgspec
from synth import TraceBuilder

import gpudoctor
from gpudoctor.pipeline import analyze_loaded
from gpudoctor.report.console import render_text
from gpudoctor.trace import parse

HERE = Path(__file__).parent


def test_snapshot_of_the_host_sync_report() -> None:
    report = gpudoctor.analyze(HERE / "data" / "host_sync" / "trace.json.gz")
    report = msgspec.structs.replace(report, source="tests/data/host_sync/trace.json.gz")
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


def test_a_finding_held_back_behind_a_fix_that_comes_first_says_so() -> None:
    """launch-bound saves more than host-sync but a CUDA graph cannot capture a step that
    synchronizes: it is listed after it, and the line says why (rules/registry.py ``rank``)."""
    from gpudoctor.core.finding import Evidence, make_finding

    report = gpudoctor.analyze(HERE / "data" / "host_sync" / "trace.json.gz")
    sync = make_finding("host-sync", "syncs", 10.0, 1.0, "s", Evidence(), ())
    graph = make_finding("launch-bound", "launches", 10.0, 3.0, "l", Evidence(), ())
    held = msgspec.structs.replace(report, findings=(sync, graph), all_fixes=None)
    lines = [" ".join(x.split()) for x in render_text(held, width=300).splitlines()]
    assert any(
        x.startswith("2. [critical] launch-bound save ~3.000 ms/step")
        and x.endswith("(after host-sync: its fix comes first)")
        for x in lines
    ), lines
    assert not any("fix comes first" in x for x in render_text(report, width=300).splitlines())
    from gpudoctor.report.html import render_html

    assert "listed after host-sync: its fix comes first" in render_html(held)
    assert "fix comes first" not in render_html(report)


def test_a_replayed_saving_far_beyond_the_time_named_says_so() -> None:
    """A public ResNet-50 trace's host-sync named 1.39 ms of idle and the replay priced its fix at
    10.5 ms: the price says it is more than the time named, and why; at under twice it, or under
    0.5 ms more, or priced by formula, nothing is added."""
    import html

    from gpudoctor.core.finding import Evidence, make_finding
    from gpudoctor.report.html import render_html

    report = gpudoctor.analyze(HERE / "data" / "host_sync" / "trace.json.gz")

    def sync(saving: float, formula: float, by: str = "replay"):  # type: ignore[no-untyped-def]
        numbers = {"priced_by": by, "saving_by_formula_ms": formula}
        return make_finding("host-sync", "syncs", 141.0, saving, "s", Evidence(numbers), ())

    said = (
        "Replayed, the fix saves 10.52 ms, more than the 1.39 ms named above: in the step "
        "replayed without the profiler's own time, what it frees moves the work after it too."
    )
    beyond = msgspec.structs.replace(report, findings=(sync(10.518, 1.388),), all_fixes=None)
    assert said in " ".join(render_text(beyond, width=300).split())
    assert said in html.unescape(render_html(beyond))
    for saving, formula, by in (
        (2.7, 1.388, "replay"),
        (0.8, 0.39, "replay"),
        (10.5, 1.4, "formula"),
    ):
        quiet = msgspec.structs.replace(
            report, findings=(sync(saving, formula, by),), all_fixes=None
        )
        assert "Replayed, the fix saves" not in render_text(quiet, width=300)
        assert "Replayed, the fix saves" not in render_html(quiet)


def test_a_replayed_saving_far_below_the_time_named_says_why() -> None:
    """A public V100 trace's fp32 GEMMs named 80 ms, priced 0.00 ms by replay: the step waits on
    the host's launches, not on them. The price says it is less than the time named and why; at
    over half of it, or under 0.5 ms apart, nothing is added."""
    import html

    from gpudoctor.core.finding import Evidence, make_finding
    from gpudoctor.report.html import render_html

    report = gpudoctor.analyze(HERE / "data" / "host_sync" / "trace.json.gz")

    def gemms(saving: float, formula: float):  # type: ignore[no-untyped-def]
        numbers = {"priced_by": "replay", "saving_by_formula_ms": formula}
        return make_finding("fp32-matmul", "fp32", 347.6, saving, "s", Evidence(numbers), ())

    said = (
        "Replayed, the fix saves 0.00 ms where its formula gives 64.14 ms: in the step "
        "replayed without the profiler's own time, other work (the host's, another stream's) "
        "keeps the step as long; with the fixes listed before it, it can count for more."
    )
    below = msgspec.structs.replace(report, findings=(gemms(0.0, 64.14),), all_fixes=None)
    assert said in " ".join(render_text(below, width=300).split())
    assert said in html.unescape(render_html(below))
    for saving, formula in ((40.0, 64.14), (0.1, 0.55)):
        quiet = msgspec.structs.replace(report, findings=(gemms(saving, formula),), all_fixes=None)
        assert "Replayed, the fix saves" not in render_text(quiet, width=300)
