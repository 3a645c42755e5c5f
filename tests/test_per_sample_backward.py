"""A per-sample loop in training: the loop's backward nodes are priced with its forward."""

from __future__ import annotations

import numpy as np
import pytest
from synth import TraceBuilder

from gpudoctor.analysis import analyze_trace
from gpudoctor.analysis.observer import step_boundary_ms
from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.rules.per_sample_loop import check
from gpudoctor.trace import parse

GEMV = "void gemv2T_kernel_val<int, int, __nv_bfloat16, float, 128, 16, 4, 4, false, false>"
ITERATIONS = 32


def _training_loop(backward: bool) -> TraceBuilder:
    t = TraceBuilder()
    for s in range(3):
        base = s * 10_000
        t.step(s, base, 10_000)
        ts = base + 100
        for _ in range(ITERATIONS):  # forward: one matrix-vector product per sample, 50 us apart
            t.launch(GEMV, ts, ts + 5, 2, op="aten::mv", dims=[[512, 512], [512]])
            ts += 50
        if backward:  # the autograd engine runs one node per sample: 100 us each, 20 us apart
            ts = base + 5_000
            for _ in range(ITERATIONS):
                t.op("autograd::engine::evaluate_function: MvBackward0", ts, 100)
                ts += 120
    return t


def _analysis(t: TraceBuilder):
    return analyze_trace(parse(t.to_bytes()), for_gpu_name("h100-sxm"))


def test_the_loops_backward_nodes_are_priced_first_to_last() -> None:
    forward_only = check(_analysis(_training_loop(backward=False)))
    training = check(_analysis(_training_loop(backward=True)))
    assert forward_only is not None and training is not None
    assert forward_only.evidence.numbers["loop_backward_ms_per_step"] == 0.0
    # 32 nodes a step from the first start to the last end: 31 x 120 + 100 us
    assert training.evidence.numbers["loop_backward_ms_per_step"] == pytest.approx(3.82, abs=1e-6)
    # priced by the operators removed, in the share of the step the host spends issuing them:
    # forward only, 31 of 32 operators over 1.556 ms of operators in a 9.6 ms step (10 ms less the
    # profiler's 0.4 ms at the edges); with the backward, 62 of 64 over 1.556 + 3.82 ms (the 3.3
    # ms between them, with no operator, is kept)
    assert forward_only.evidence.numbers["loop_ops_removed_per_step"] == 31.0
    assert forward_only.saving_ms == pytest.approx(9.6 * (1.556 / 9.6) * 31 / 32, abs=1e-6)
    assert training.evidence.numbers["loop_ops_removed_per_step"] == 62.0
    assert training.saving_ms == pytest.approx(9.6 * (5.376 / 9.6) * 62 / 64, abs=1e-6)
    assert "its backward 3.82 ms" in training.summary


def test_backward_nodes_repeated_less_than_the_loop_are_not_its_own() -> None:
    t = _training_loop(backward=False)
    for s in range(3):  # one backward node per layer, as in any model: not the loop's
        t.op("autograd::engine::evaluate_function: AddmmBackward0", s * 10_000 + 6_000, 500)
    assert check(_analysis(t)).evidence.numbers["loop_backward_ms_per_step"] == 0.0


def test_step_boundary_is_the_time_before_the_first_and_after_the_last_event() -> None:
    t = _training_loop(backward=False)
    a = _analysis(t)
    # each step: 100 us before the first op; the last op (launch_dur 4 + 2) ends at 100 + 31 x 50 + 6
    # = 1656 us, 8344 us before the step's end, capped at 300 us: 400 us
    assert step_boundary_ms(a.trace, a.steps) == pytest.approx(0.4, abs=1e-6)


def _loop_of_layers(samples: int, gap_us: float = 0.0) -> TraceBuilder:
    """Steps of: one op before the loop; per sample a select, then 3 layers of (mv, add); stack
    and sum after it, ``gap_us`` after the loop with no operator (the program's own work)."""
    t = TraceBuilder()
    for s in range(3):
        base = s * 20_000
        t.step(s, base, 20_000)
        t.launch("void fill_kernel", base + 10, base + 12, 2, op="aten::randn")
        ts = base + 50
        for _ in range(samples):
            t.op("aten::select", ts, 4)
            ts += 10
            for _layer in range(3):
                t.launch(GEMV, ts, ts + 2, 3, op="aten::mv", dims=[[512, 512], [512]])
                t.launch("void add_kernel", ts + 20, ts + 22, 1, op="aten::add")
                ts += 40
        ts += gap_us
        t.launch("void cat_kernel", ts, ts + 2, 2, op="aten::stack")
        t.launch("void reduce_kernel", ts + 30, ts + 32, 2, op="aten::sum")
    return t


def test_the_loop_keeps_one_iteration_of_its_operators() -> None:
    # 16 samples x 7 operators (select + 3 x (mv, add)): the matrix-vector products repeat 3 times
    # an iteration, yet the loop is the run of 7 that repeats; the fix keeps 7 of its 112
    f = check(_analysis(_loop_of_layers(16)))
    assert f.evidence.numbers["ops_per_step"] == 115.0
    assert f.evidence.numbers["loop_ops_removed_per_step"] == 105.0


def test_a_long_stretch_without_operators_is_kept() -> None:
    near = check(_analysis(_loop_of_layers(16)))
    apart = check(_analysis(_loop_of_layers(16, gap_us=5_000)))
    # the same operators removed; 5 ms of the host's own work after the loop stays in the step
    assert apart.evidence.numbers["loop_ops_removed_per_step"] == 105.0
    assert near.saving_ms == pytest.approx(apart.saving_ms, rel=0.02)


def test_the_step_after_the_fix_keeps_the_gpus_other_work() -> None:
    from gpudoctor.pipeline import analyze_loaded

    t = _loop_of_layers(16)
    for s in range(3):  # a 12 ms GEMM after the loop, launched right after the sum
        t.launch(
            "sm90_xmma_gemm_bf16bf16_bf16f32",
            s * 20_000 + 2_100,
            s * 20_000 + 2_200,
            12_000,
            op="aten::mm",
        )
    # unprofiled, the step shrinks to 12.5 ms: the host's share would leave 11.2 ms, under the GPU's 12
    report = analyze_loaded(parse(t.to_bytes()), unprofiled_step_ms=12.5)
    f = report.finding("per-sample-loop")
    # the GPU's work outside the loop (the GEMM, the fill, the stack and sum) and one batched GEMM
    # per layer stay: the step after the fix never goes below that
    floor = f.evidence.numbers["step_floor_after_fix_ms"]
    assert floor == pytest.approx(12.0 + 0.006 + 0.01, abs=1e-3)
    # replayed: the GEMM still waits for the host's kept iteration (the trace's 12 ms GEMM and the
    # host before it already exceed the 12.5 ms measured, so what the fix leaves is the replay's)
    assert f.evidence.numbers["priced_by"] == "replay"
    assert 12.5 - f.saving_ms >= floor
    assert f.saving_ms == pytest.approx(0.1004, abs=1e-4)


def test_the_vectorized_loop_keeps_an_average_iteration_and_drops_the_gathering_stack() -> None:
    """The fix as a graph edit: the loop's host span keeps one iteration's share (7 of 112
    operators), the stack gathering the samples goes with its kernel, the sum after it stays, and
    one iteration's three products become GEMMs of all 16 samples."""
    from gpudoctor.rules.per_sample_loop import edit

    a = _analysis(_loop_of_layers(16))
    e = edit(a, check(a))
    assert e is not None
    names = a.trace.strings
    dev = a.trace.device
    removed = {names[dev.name[i]] for i in e.device_removed.tolist()}
    assert "void cat_kernel" in removed and "void reduce_kernel" not in removed
    assert e.device.size == 3 * 3  # one iteration's products, in each of the 3 steps
    # per step: the loop's span at 105 / 112 of its time, and the stack's own time whole
    assert np.asarray(e.host_share).tolist() == [105 / 112] * 3 + [1.0] * 3
