"""Steps in traces without ProfilerStep or Optimizer.step markers: gpudoctor.iteration#N ranges,
the outermost module forward, and the period of the GPU kernel sequence (analysis/iterations.py,
analysis/period.py), on hand-built traces and on the real H100 traces with their markers removed."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synth import TraceBuilder, kernel_loop

from gpudoctor.analysis import analyze_trace
from gpudoctor.analysis.period import find_period
from gpudoctor.analysis.steps import segment
from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.trace import load, parse

DATA = Path(__file__).parent / "data"
LAYER = ["ln", "qkv_gemm", "attn", "proj_gemm", "gelu"]
ITERATION = ["h2d_copy", "embed", *LAYER * 12, "head_gemm", "loss", "adam_foreach"]  # 65 kernels


def _segment(t: TraceBuilder):
    return segment(parse(t.to_bytes()))


def _without_markers(name: str, prefixes: tuple[str, ...] = ("ProfilerStep#", "Optimizer.")):
    data = json.loads(gzip.decompress((DATA / name / "trace.json.gz").read_bytes()))
    data["traceEvents"] = [
        e for e in data["traceEvents"] if not str(e.get("name", "")).startswith(prefixes)
    ]
    return parse(json.dumps(data).encode(), source=name)


# -- kernel-period on hand-built loops ---------------------------------------------------------------


def test_a_periodic_loop_is_cut_at_each_iteration_and_the_cut_edges_are_dropped() -> None:
    # the window opens mid-iteration (its last 20 kernels) and closes mid-iteration (first 30)
    t = kernel_loop([ITERATION[-20:], *[ITERATION] * 6, ITERATION[:30]])
    steps = _segment(t)
    assert steps.method == "kernel-period" and steps.period == len(ITERATION)
    assert len(steps) == 6  # whole iterations only
    # each iteration: a 50 us pause, then 65 launches 7 us apart; a step starts at its first op.
    # Times count from the trace's first event (the partial iteration's first launch).
    first = 20 * 7 + 50
    assert steps.host_start.tolist() == [(first + i * (50 + 65 * 7)) * 1000 for i in range(6)]
    assert steps.durations_ms == pytest.approx([0.505] * 6)


def test_the_period_is_the_iteration_not_a_layer_inside_it() -> None:
    steps = _segment(kernel_loop([ITERATION] * 5))
    assert steps.period == 65 and len(steps) == 4  # not 5, the layer's period


def test_an_aperiodic_trace_stays_one_step() -> None:
    rng = random.Random(7)
    names = [f"k{rng.randrange(12)}" for _ in range(600)]
    a = analyze_trace(parse(kernel_loop([names]).to_bytes()), for_gpu_name("h100-sxm"))
    assert a.steps.method == "whole-trace" and len(a.steps) == 1
    assert any("whole trace" in w for w in a.warnings)


def test_a_few_extra_kernels_do_not_hide_the_period() -> None:
    rng = random.Random(3)
    iterations = [list(ITERATION) for _ in range(12)]
    for it in rng.sample(iterations, 4):  # a stray memset in 4 of 12 iterations
        it.insert(rng.randrange(1, len(it)), "stray_memset")
    steps = _segment(kernel_loop(iterations))
    assert steps.method == "kernel-period" and steps.period == 65 and len(steps) == 11


def test_one_period_is_not_enough() -> None:
    assert _segment(kernel_loop([ITERATION, ITERATION[:40]])).method == "whole-trace"
    assert (
        _segment(kernel_loop([ITERATION] * 2)).method == "whole-trace"
    )  # one whole step between two starts
    assert _segment(kernel_loop([ITERATION] * 3)).method == "kernel-period"


def test_one_kernel_repeated_is_no_period() -> None:
    assert _segment(kernel_loop([["gemm"]] * 40)).method == "whole-trace"


def test_cuda_graph_replays_are_one_iteration_each() -> None:
    """One cudaGraphLaunch runs a graph of 3 layers x [a, b]: the iteration is the replay, never
    a period inside it."""
    t = TraceBuilder()
    for i in range(5):
        host = 100.0 * i
        corr = t.runtime("cudaGraphLaunch", host, 5)
        for k, name in enumerate(["a", "b"] * 3):
            t.kernel(name, host + 10 + 10 * k, 8, corr)
    steps = _segment(t)
    assert steps.method == "kernel-period" and steps.period == 6 and len(steps) == 4
    assert steps.durations_ms == pytest.approx([0.1] * 4)


def test_gradient_accumulation_bursts_make_one_period() -> None:
    """Two micro-batches (forward + backward) then 4 optimizer kernels: no kernel runs once per
    iteration, the optimizer's burst of 4 still marks it."""
    micro = ["embed", *LAYER * 2, "loss", "bwd_a", "bwd_b"]
    iteration = [*micro, *micro, "adam", "adam", "adam", "adam"]
    steps = _segment(kernel_loop([iteration] * 5))
    assert steps.method == "kernel-period" and steps.period == len(iteration) and len(steps) == 4


def test_steps_without_launch_records_use_the_gpu_order() -> None:
    t = TraceBuilder()
    gpu = 0.0
    for _ in range(4):
        for name in ITERATION:
            t.kernel(name, gpu, 2, correlation=-1)
            gpu += 3
        gpu += 40
    steps = _segment(t)
    assert steps.method == "kernel-period" and len(steps) == 3


# -- module-forward and iteration markers ------------------------------------------------------------


def _module_loop(calls_per_iteration: int = 1, iterations: int = 5) -> TraceBuilder:
    t = TraceBuilder()
    host = 0.0
    for _ in range(iterations):
        host += 30
        for _ in range(calls_per_iteration):
            t.python("nn.Module: Net_0", host, 40)
            t.python("nn.Module: Linear_0", host + 1, 10)
            t.launch("gemm", host + 2, host + 10, 5, op="aten::linear")
            t.launch("relu", host + 20, host + 30, 2, op="aten::relu")
            host += 45
        t.python("nn.Module: CrossEntropyLoss_0", host, 10)
        t.launch("loss", host + 1, host + 10, 2, op="aten::cross_entropy_loss")
        host += 15
        for k in range(6):  # backward and optimizer ops after the last forward
            t.op(f"aten::bwd_{k}", host, 4)
            host += 5
    return t


def test_the_outermost_forward_marks_the_iterations() -> None:
    a = analyze_trace(parse(_module_loop().to_bytes()), for_gpu_name("h100-sxm"))
    steps = a.steps
    assert (
        steps.method == "module-forward" and steps.marker == "nn.Module: Net_0"
    )  # not the loss, called later
    assert len(steps) == 4 and steps.host_start.tolist() == [
        i * 120_000 for i in range(4)
    ]  # from the first call
    assert any("'nn.Module: Net_0'" in w and "4 whole iterations" in w for w in a.warnings)


def test_a_model_called_per_sample_is_not_the_iteration() -> None:
    """Net is called 4 times per iteration; the gap after the 4th holds the loss and the backward,
    so its calls are not alike: the loss module, once per iteration, marks the steps."""
    steps = _segment(_module_loop(calls_per_iteration=4))
    assert steps.method == "module-forward" and steps.marker == "nn.Module: CrossEntropyLoss_0"
    assert len(steps) == 4


def test_a_record_function_range_marks_the_iterations() -> None:
    t = TraceBuilder()
    for i in range(4):
        t.annotation("## forward ##", 100 * i + 10, 50)
        t.launch("gemm", 100 * i + 11, 100 * i + 20, 10, op="aten::mm")
    steps = _segment(t)
    assert steps.method == "module-forward" and steps.marker == "## forward ##" and len(steps) == 3


@pytest.mark.parametrize("cat", ["user_annotation", "cpu_op"])
def test_gpudoctor_iteration_markers_are_steps(cat: str) -> None:
    t = _module_loop()
    for i in range(3):
        t.events.append(
            {
                "ph": "X",
                "cat": cat,
                "name": f"gpudoctor.iteration#{i + 7}",
                "pid": 100,
                "tid": 100,
                "ts": 30 + 120 * i - 1,
                "dur": 118,
                "args": {},
            }
        )
    steps = _segment(t)
    assert steps.method == "iteration-marker" and len(steps) == 3
    assert steps.labels == (
        "gpudoctor.iteration#7",
        "gpudoctor.iteration#8",
        "gpudoctor.iteration#9",
    )


def test_profiler_steps_still_come_first() -> None:
    t = _module_loop()
    for i in range(3):
        t.step(i, 30 + 120 * i, 120)
    assert _segment(t).method == "profiler-step"


# -- the real traces ----------------------------------------------------------------------------------

REAL = sorted(p.parent.name for p in DATA.glob("*/trace.json.gz"))


@pytest.mark.parametrize("name", REAL)
def test_real_traces_keep_their_profiler_steps(name: str) -> None:
    assert segment(load(DATA / name / "trace.json.gz")).method == "profiler-step"


# name, method without markers, kernels per iteration (0: module-forward)
STRIPPED = [
    ("fp32_matmul", "kernel-period", 39),
    ("healthy_infer", "kernel-period", 67),
    ("launch_bound_fixed", "kernel-period", 385),  # one CUDA graph replay per iteration
    ("memory_pressure", "kernel-period", 108),  # two micro-batches per optimizer step
    ("small_gemm", "kernel-period", 1026),
    ("pageable_copy", "kernel-period", 12),
    ("healthy_train", "module-forward", 0),
    ("ddp_train", "module-forward", 0),
]


@pytest.mark.parametrize("name, method, period", STRIPPED, ids=[s[0] for s in STRIPPED])
def test_real_traces_without_markers_get_their_iterations(
    name: str, method: str, period: int
) -> None:
    """With ProfilerStep# and Optimizer.* removed, the iterations found take what the profiler's
    own steps took (median within 2%); the window's cut edges leave 2 of the 3 steps."""
    marked = segment(load(DATA / name / "trace.json.gz"))
    steps = segment(_without_markers(name))
    assert steps.method == method and steps.period == period and len(steps) == 2
    assert steps.median_ms == pytest.approx(marked.median_ms, rel=0.02)


# -- properties and cost -----------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    names=st.lists(st.integers(0, 6), max_size=120),
    gaps=st.lists(st.integers(0, 80), min_size=1, max_size=8),
)
def test_any_kernel_sequence_segments_into_ordered_steps(names: list[int], gaps: list[int]) -> None:
    t = TraceBuilder()
    host = 0.0
    for i, k in enumerate(names):
        host += 5 + gaps[i % len(gaps)]
        t.launch(f"k{k}", host, host + 3, 2 + k, op="aten::op")
    if not names:
        t.op("aten::empty", 0, 1)
    steps = segment(parse(t.to_bytes()))
    assert len(steps) >= 1
    assert np.all(steps.end > steps.start)
    assert np.all(steps.start[1:] >= steps.end[:-1])  # ordered, not overlapping


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=400))
def test_find_period_returns_whole_matching_periods_or_nothing(seq: list[int]) -> None:
    found = find_period(np.array(seq, dtype=np.int64))
    if found is not None:
        assert found.length >= 2 and found.count >= 2 and found.match >= 0.9
        assert np.all(np.diff(found.starts) > 0) and found.starts[-1] < len(seq)


@settings(max_examples=150, deadline=None)
@given(
    base=st.lists(st.integers(0, 5), min_size=1, max_size=30),
    repeats=st.integers(4, 12),
    head=st.integers(0, 29),
    tail=st.integers(0, 29),
)
def test_a_repeated_pattern_with_a_unique_kernel_is_found(
    base: list[int], repeats: int, head: int, tail: int
) -> None:
    pattern = [99, *base]  # 99: the once-per-iteration kernel
    seq = (
        pattern[len(pattern) - head % len(pattern) :]
        + pattern * repeats
        + pattern[: tail % len(pattern)]
    )
    found = find_period(np.array(seq))
    if len(pattern) >= 2:
        assert found is not None and found.length == len(pattern)
        assert found.count >= repeats - 1


def test_two_hundred_thousand_kernels_take_a_bounded_number_of_linear_passes(monkeypatch) -> None:
    """find_period is O(n log n) with a bounded constant: one round of proposals (sorts and lag
    counts), then at most MAX_PERIODS_TRIED linear verifications, however the kernels fall. Counted,
    not timed (about 0.5 s for both sequences on a 2-core machine: the work the analyze benchmarks in
    benchmarks/bench_diagnosis_vs_hta.py time on whole traces)."""
    from gpudoctor.analysis import period as period_mod

    calls = {"_proposals": 0, "_score": 0}
    for name in calls:
        original = getattr(period_mod, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(period_mod, name, counted)
    rng = np.random.default_rng(0)
    periodic = np.tile(np.arange(400) % 97, 500)  # 200k kernels, period 400
    found = find_period(periodic)
    assert found is not None and found.length == 400 and found.count == 499
    assert calls["_proposals"] == 1 and 1 <= calls["_score"] <= period_mod.MAX_PERIODS_TRIED
    calls.update(_proposals=0, _score=0)
    assert find_period(rng.integers(0, 500, 200_000)) is None
    assert calls["_proposals"] == 1 and calls["_score"] <= period_mod.MAX_PERIODS_TRIED


@pytest.mark.parametrize(
    ("pauses", "method"),
    [
        ((50, 50, 50), "kernel-period"),
        ((50, 20_000, 50), "whole-trace"),
        ((50, 500, 20_000), "whole-trace"),
    ],
)
def test_two_repetitions_of_a_few_kernels_far_apart_are_not_steps(
    pauses: tuple[int, ...], method: str
) -> None:
    """Three kernels launched three times: evenly, two steps; with one pause 40x the rest (a
    program that sleeps, a public toy trace), two 'steps' of 0.07 and 20 ms would price every fix
    against their mean. The trace is one step then."""
    t = TraceBuilder()
    host = 0.0
    for pause in pauses:
        host += pause
        for name in ("a", "b", "c"):
            t.launch(name, host, host + 10, 3.0, op=f"aten::op_{name}")
            host += 7
    assert _segment(t).method == method
