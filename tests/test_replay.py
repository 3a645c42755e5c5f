"""The replay (replay/): the step's graph from recorded H100 traces, replayed as profiled, without
the profiler, and with fixes as edits; what it does with traces that lack what the graph needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpudoctor.analysis.steps import segment
from gpudoctor.pipeline import analyze_loaded
from gpudoctor.replay.edits import Edit, changes, merge
from gpudoctor.replay.graph import build
from gpudoctor.replay.observer import unprofiled
from gpudoctor.replay.simulate import replay
from gpudoctor.trace import load, parse
from tests.synth import TraceBuilder

DATA = Path(__file__).parent / "data"


def _graph(name: str):  # type: ignore[no-untyped-def]
    trace = load(DATA / name / "trace.json.gz")
    return trace, build(trace, segment(trace))


@pytest.mark.parametrize(("name", "calls", "profiled_ns", "replayed_ns"), [
    ("host_sync", 888, 10_336_594, 10_369_141),       # +0.3%
    ("launch_bound", 1155, 36_069_993, 35_430_067),   # -1.8%
    ("fp32_matmul", 141, 8_103_070, 8_097_338),       # -0.1%
])
def test_replaying_the_graph_unchanged_reproduces_the_profiled_step(name: str, calls: int, profiled_ns: int,
                                                                    replayed_ns: int) -> None:
    _, graph = _graph(name)
    assert graph.coverage == "full" and graph.calls == calls
    assert graph.profiled_ns == profiled_ns
    assert round(replay(graph).step_ns) == replayed_ns
    assert abs(replayed_ns / profiled_ns - 1) < 0.03


def test_the_profilers_cost_is_fitted_to_the_unprofiled_step() -> None:
    """host_sync: 10.34 ms profiled, 7.036 unprofiled: the per-event costs scaled by 0.82 take it out;
    fp32_matmul is GPU-bound (8.10 profiled, 8.33 unprofiled): nothing to fit, the default stands."""
    _, graph = _graph("host_sync")
    fit = unprofiled(graph, 7.036e6)
    assert fit.fitted and fit.scale == pytest.approx(0.8198, abs=1e-4)
    assert fit.replayed.step_ns == pytest.approx(7.036e6, rel=1e-3)
    _, gpu_bound = _graph("fp32_matmul")
    fit = unprofiled(gpu_bound, 8.3316e6)
    assert fit.scale == 1.0 and fit.residual_ns == pytest.approx(8.3316e6 - 8_097_338, abs=1)


def test_an_edit_that_changes_nothing_replays_the_same_step_and_edits_combine() -> None:
    _, graph = _graph("host_sync")
    base = unprofiled(graph, 7.036e6)
    assert replay(graph, changes(graph, Edit(), base=base.changes)).step_ns == pytest.approx(base.replayed.step_ns)
    waits = graph.host[graph.wait_on >= 0]
    unwaited = replay(graph, changes(graph, Edit(unwait=waits), base=base.changes)).step_ns
    assert unwaited < base.replayed.step_ns
    first, second = Edit(device=np.array([5, 3]), device_ns=np.array([1.0, 2.0])), Edit(device=np.array([3]),
                                                                                         device_ns=np.array([0.5]))
    both = merge([first, second])
    assert both.device.tolist() == [3, 5] and both.device_ns.tolist() == [0.5, 1.0]  # the shorter time wins


def test_findings_say_how_they_were_priced_and_all_fixes_are_one_replay() -> None:
    report = analyze_loaded(load(DATA / "host_sync" / "trace.json.gz"), unprofiled_step_ms=7.036)
    priced = {f.id: f.evidence.numbers["priced_by"] for f in report.findings}
    assert priced["host-sync"] == "replay"
    assert set(priced.values()) <= {"replay", "formula"}
    assert report.all_fixes["ids"] and report.all_fixes["step_ms"] == pytest.approx(7.036)
    best_single = max(f.predicted_speedup for f in report.findings if priced[f.id] == "replay")
    assert report.all_fixes["predicted_speedup"] >= best_single


def test_a_trace_without_launches_falls_back_to_the_formulas_and_says_so() -> None:
    """GPU kernels with no runtime calls (a trace recorded without cuda_runtime events): no host chain."""
    b = TraceBuilder()
    for step in range(3):
        b.step(step, step * 10_000, 10_000)
        for k in range(4):
            b.kernel("ampere_sgemm_128x64_nn", step * 10_000 + 500 + k * 2_000, 1_500, correlation=100 + 4 * step + k)
    trace = parse(b.to_bytes())
    graph = build(trace, segment(trace))
    assert graph.coverage.startswith("no runtime calls")
    report = analyze_loaded(trace, gpu="h100-sxm")
    for finding in report.findings:
        assert finding.evidence.numbers["priced_by"] == "formula"
        assert "graph could not be built" in finding.evidence.numbers["priced_by_formula_because"]
