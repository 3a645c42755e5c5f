"""The replay (replay/): the step's graph from recorded H100 traces, replayed as profiled, without
the profiler, and with fixes as edits; what it does with traces that lack what the graph needs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudoctor.analysis.steps import segment
from gpudoctor.errors import GpuDoctorError
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


KERNELS = ("ampere_sgemm_128x64_nn", "vectorized_elementwise_kernel", "Memcpy HtoD (Pageable -> Device)")


@given(st.lists(st.tuples(st.sampled_from(["launch", "sync", "unlinked", "gap"]), st.integers(0, 2),
                          st.floats(1, 400), st.floats(0, 300)), min_size=1, max_size=40),
       st.integers(1, 4))
@settings(max_examples=40)
def test_any_mix_of_launches_syncs_and_unlinked_kernels_replays_and_prices_without_raising(events, steps) -> None:
    """Random steps of launches (on up to three streams), syncs, kernels with no launch record and
    host gaps: the graph builds, replays to a finite step, and every finding says how it was priced
    (or the trace is refused with its one-line error)."""
    b = TraceBuilder()
    t, per_step = 0.0, max(len(events) // steps, 1)
    for s in range(steps):
        start = t
        for kind, stream, dur, gap in events[s * per_step:(s + 1) * per_step] or events[:1]:
            t += gap
            if kind == "launch":
                corr = b.runtime("cudaLaunchKernel", t, 5.0)
                b.kernel(KERNELS[stream], t + 8.0, dur, correlation=corr, stream=7 + stream)
            elif kind == "sync":
                b.runtime("cudaStreamSynchronize", t, dur)
            elif kind == "unlinked":
                b.kernel(KERNELS[stream], t, dur, correlation=10_000 + len(b.events), stream=7 + stream)
            t += dur
        b.step(s, start, max(t - start, 1.0))
    trace = parse(b.to_bytes())
    if len(trace.device) == 0:
        return
    graph = build(trace, segment(trace))
    replayed = replay(graph)
    assert np.isfinite(replayed.step_ns) and replayed.step_ns >= 0
    try:
        report = analyze_loaded(trace, gpu="h100-sxm", unprofiled_step_ms=1.0)
    except GpuDoctorError:  # a trace no sound report can come from says so in one line (capabilities)
        return
    for finding in report.findings:
        assert finding.evidence.numbers["priced_by"] in ("replay", "formula")
        assert finding.saving_ms >= 0 and finding.predicted_speedup >= 1.0


def test_interval_subtraction_keeps_what_the_kept_intervals_do_not_cover() -> None:
    from gpudoctor.analysis.intervals import subtract as _minus

    s, e = _minus(np.array([0, 100]), np.array([50, 200]), np.array([10, 40, 120]), np.array([20, 60, 130]))
    assert list(zip(s.tolist(), e.tolist())) == [(0, 10), (20, 40), (100, 120), (130, 200)]
    s, e = _minus(np.array([0]), np.array([10]), np.array([], np.int64), np.array([], np.int64))
    assert list(zip(s.tolist(), e.tolist())) == [(0, 10)]
    s, e = _minus(np.array([0]), np.array([10]), np.array([-5]), np.array([15]))
    assert s.size == 0
