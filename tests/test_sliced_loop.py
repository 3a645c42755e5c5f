"""A per-sample loop with no matrix-vector product: the same operators on one slice at a time.

Synthetic steps of ``for i in range(32): loss += f(x[i])``: a select (no kernel) and two launching
operators per iteration; the loop is found from the select's recorded arguments (its row changes
every iteration) and priced by the operators it removes. Not such a loop: a slice of the same
range every iteration (a layer loop reading a cache), an iteration that multiplies matrices of
several rows (an RNN cell over time), one whose operators run on the CPU, and a trace without the
recorded arguments. The same loop on a real trace: tests/test_twin_traces.py.
"""

from __future__ import annotations

import pytest
from synth import TraceBuilder

from gpudoctor.analysis import analyze_trace
from gpudoctor.hardware.ceilings import for_gpu_name
from gpudoctor.pipeline import analyze_loaded
from gpudoctor.rules.per_sample_loop import check, edit
from gpudoctor.trace import parse

ITERATIONS = 32
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute"


def _sliced_loop(
    row=lambda i: str(i),
    body: str = "loss",
    concrete: bool = True,
    steps: int = 3,
    kernel_us: float = 3,
) -> TraceBuilder:
    t = TraceBuilder()
    for s in range(steps):
        base = s * 2_000  # the loop and the optimizer fill the step
        t.step(s, base, 2_000)
        ts = base + 100
        for i in range(ITERATIONS):
            t.op(
                "aten::select",
                ts,
                3,
                dims=[[ITERATIONS, 128], [], []],
                concrete=["", "0", row(i)] if concrete else None,
            )
            if body == "loss":
                t.launch(
                    "void binary_cross_entropy_kernel",
                    ts + 10,
                    ts + 20,
                    kernel_us,
                    op="aten::binary_cross_entropy_with_logits",
                    dims=[[128], [128]],
                )
            elif body == "rnn":  # a cell over a whole batch of rows: 32 x 64 times 64 x 256
                t.launch(GEMM, ts + 10, ts + 20, 3, op="aten::mm", dims=[[32, 64], [64, 256]])
            else:  # the same operator on a CPU tensor: nothing launched
                t.op("aten::binary_cross_entropy_with_logits", ts + 10, 6, dims=[[128], [128]])
            t.launch("void add_kernel", ts + 25, ts + 35, 2, op="aten::add", dims=[[], []])
            ts += 50
        t.launch("void adam_kernel", ts + 100, ts + 110, 20, op="aten::_fused_adamw_")
    return t


def _analysis(t: TraceBuilder):
    return analyze_trace(parse(t.to_bytes()), for_gpu_name("h100-sxm"))


def test_a_loop_over_rows_is_found_and_priced_by_the_operators_it_removes() -> None:
    a = _analysis(_sliced_loop())
    f = check(a)
    assert f is not None and f.id == "per-sample-loop"
    n = f.evidence.numbers
    assert n["loop_iterations_per_step"] == 32.0 and n["operators_per_iteration"] == 3.0
    # every iteration but one: 31 x 3 operators of the step's 97
    assert n["loop_ops_removed_per_step"] == 93.0 and n["ops_per_step"] == 97.0
    # the removed operators' kernels: 31 x (3 + 2) us
    assert n["kernel_ms_per_step"] == pytest.approx(0.155, abs=1e-9)
    assert "takes 32 slices of the same tensor" in f.summary
    # the iteration's work, the operators that launch kernels: most host time first
    assert "runs 3 operators on each (aten::binary_cross_entropy_with_logits, aten::add)" in (
        f.summary
    )
    assert "for i in range(32): F.binary_cross_entropy_with_logits(x[i], ...)" in f.fixes[0].code
    e = edit(a, f)
    assert e is not None and e.device_removed.size == 3 * 31 * 2
    assert e.calls_removed.size == 3 * 31 * 2
    # each step's loop loses 31 of its 32 iterations' share of its span
    assert list(e.host_share) == pytest.approx([93 / 96] * 3)


@pytest.mark.parametrize(
    ("variant", "why"),
    [
        ({"row": lambda i: "0"}, "the same row every iteration: a cache read by a layer loop"),
        ({"body": "rnn"}, "a matrix product of 32 rows: a recurrence over whole batches"),
        ({"body": "cpu"}, "the loop's work runs on the CPU"),
        ({"concrete": False}, "no recorded arguments: which row a select took is unknown"),
    ],
)
def test_not_a_loop_over_samples(variant: dict, why: str) -> None:
    a = _analysis(_sliced_loop(**variant))
    assert check(a) is None, why
    assert edit(a, None) is None, why  # type: ignore[arg-type]


def test_rows_of_real_work_keep_their_gpu_time_batched() -> None:
    """Each row's kernel runs 40 us: one call over the batch still moves every row's bytes, so
    the kept iteration's kernels take the removed ones' time less a kernel's least (2.5 us: the 2 us
    add adds nothing) each, and the fix saves little where the GPU is busy."""
    a = _analysis(_sliced_loop(kernel_us=40))
    f = check(a)
    e = edit(a, f)
    kept_ran = 3 * (40 + 2)  # the first iteration's two kernels, in each of 3 steps (us)
    removed = 3 * 31 * (40 - 2.5)
    assert e.device_ns.sum() == pytest.approx((kept_ran + removed) * 1e3)
    big = analyze_loaded(parse(_sliced_loop(kernel_us=40).to_bytes()))
    small = analyze_loaded(parse(_sliced_loop().to_bytes()))
    saved = [r.finding("per-sample-loop").saving_ms for r in (big, small)]
    assert saved[0] < saved[1]
