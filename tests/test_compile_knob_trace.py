"""The compile knob's price against the compiled step itself.

tests/data/knobs_h100/handwritten_rmsnorm_swiglu is a ``gpudoctor run --try-fixes --fixes compile``
bundle recorded on an H100 (torch 2.11, 2026-12-06; benchmarks/BENCHMARKS-replay.md "The compile
knob against the compiled step"): a Llama-style decoder in bf16 whose RMSNorm is written out by
hand (``x.to(float32)`` ... ``.to(input_dtype)``), the eager trace the knob is priced on, and the
compile trial's own trace (``trials/compile``), which measured x2.01 [1.99-2.03]. The healthy bf16
GPT of the lab (tests/data/healthy_train, autocast over an fp32 residual stream) is the control:
its compile measured x1.10 on an H100 and x1.08 on an H200.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpudoctor.pipeline import diagnose_path, knob_prices_for
from gpudoctor.replay.edits import changes
from gpudoctor.replay.simulate import replay
from gpudoctor.rules import unfused_elementwise as ue
from gpudoctor.rules.knob_prices import KNOB_COMPILE, knob_edits
from gpudoctor.rules.whatif import step_model

DATA = Path(__file__).parent / "data"
RMS = DATA / "knobs_h100" / "handwritten_rmsnorm_swiglu"


@pytest.fixture(scope="module")
def rms():  # type: ignore[no-untyped-def]
    return diagnose_path(RMS).analysis


@pytest.fixture(scope="module")
def healthy():  # type: ignore[no-untyped-def]
    return diagnose_path(DATA / "healthy_train" / "trace.json.gz").analysis


def _names(a, chain: np.ndarray) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    strings, host = a.trace.strings, a.trace.host
    return tuple(strings[host.name[o]].removeprefix("aten::") for o in a.trace.device.op[chain])


def _chains_named(a, names: tuple[str, ...], by_numel: bool = False) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    return [
        c for c in ue.chains(a, with_attention=True, by_numel=by_numel) if _names(a, c) == names
    ]


def test_a_norm_over_an_upcast_copy_counts_at_its_stored_dtype(rms) -> None:  # type: ignore[no-untyped-def]
    """The forward's residual add and RMSNorm: the add and the weight's multiply work in bf16; the
    casts, the square, the mean and the scale work over the fp32 copy, which the fused kernel keeps
    in registers: half their traffic."""
    chains = _chains_named(rms, ("add", "copy_", "pow", "mean", "mul", "copy_", "mul"))
    assert len(chains) == 16 * len(
        rms.steps
    )  # every norm but the first, whose input is the embedding
    for chain in chains:
        assert ue._storage_share(rms, chain).tolist() == [1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0]


def test_a_backward_chain_and_a_wide_stream_keep_their_traffic(rms, healthy) -> None:  # type: ignore[no-untyped-def]
    """The norm's backward casts too, but whether the gradient it writes is kept wide is not in the
    trace; autocast's residual stream is fp32, cast to bf16 only for the next matmul."""
    backward = _chains_named(
        rms,
        (
            "add",
            "mul",
            "mul",
            "sum",
            "copy_",
            "mul",
            "mul",
            "sum",
            "div",
            "mul",
            "mul",
            "add_",
            "copy_",
            "add_",
        ),
    )
    assert backward and all((ue._storage_share(rms, c) == 1.0).all() for c in backward)
    stream = _chains_named(healthy, ("add", "native_layer_norm", "copy_"))
    assert stream and all((ue._storage_share(healthy, c) == 1.0).all() for c in stream)


def test_a_pass_for_each_flow_and_for_each_kernel_an_operator_adds(rms, healthy) -> None:  # type: ignore[no-untyped-def]
    """Rotary embeddings on q then k are two flows (not three passes for six kernels of two op
    names); layer norm's backward launches two kernels per operator, the weight's gradient its own
    pass."""
    rotary = _chains_named(rms, ("mul", "mul", "add", "mul", "mul", "add"))
    assert rotary and {ue._passes(rms, c) for c in rotary} == {2}
    norm_backward = _chains_named(
        healthy, ("copy_", "native_layer_norm_backward", "native_layer_norm_backward", "copy_")
    )
    assert norm_backward and {ue._passes(healthy, c) for c in norm_backward} == {2}


def _per_step(model, fixed=None) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    r = model.base.replayed if fixed is None else fixed
    return (
        r.host_work_ns / max(r.marks_ns.size - 1, 1) / 1e6,
        r.gpu_busy_ns / max(r.marks_ns.size, 1) / 1e6,
    )


def test_the_logits_views_are_one_chain_for_the_compiler(rms) -> None:  # type: ignore[no-untyped-def]
    """The loss's logits are made contiguous as [B, T, V] and log-softmaxed as [B * T, V]; the
    gradient comes back through the same two views. By shape they are two chains (the copies on
    their own, one pass each, priced as they ran); by element count, what Inductor fuses, one chain:
    of two passes, for it runs on both sides of autograd (Inductor's log-softmax is one kernel
    forward and one backward)."""
    loss = (
        "copy_",
        "_log_softmax",
        "nll_loss_forward",
        "fill_",
        "nll_loss_backward",
        "_log_softmax_backward_data",
        "copy_",
    )
    by_numel = _chains_named(rms, loss, by_numel=True)
    assert len(by_numel) == len(rms.steps)
    assert not _chains_named(rms, loss)
    assert ue._passes(rms, by_numel[0]) == 2
    first = set(by_numel[0].tolist())
    by_shape = [
        _names(rms, c) for c in ue.chains(rms, with_attention=True) if set(c.tolist()) & first
    ]
    assert by_shape == [("copy_", "copy_"), loss[1:-1]]


def test_a_rotary_embeddings_halves_join_their_product(rms) -> None:  # type: ignore[no-untyped-def]
    """q and k rotated: ``x * cos + cat([-x2, x1]) * sin``. The cat of two [..., D/2] halves is
    counted at its output's element count, so it joins the products' chain (Inductor writes the
    halves where the product reads them); the negations on the halves stay a chain of their own."""
    rotary = ("mul", "cat", "mul", "add") * 2
    assert len(_chains_named(rms, rotary, by_numel=True)) == 8 * len(rms.steps)
    assert len(_chains_named(rms, ("neg", "neg"), by_numel=True)) == 8 * len(rms.steps)
    # by shape (the finding's chains) the cat stays with the negations
    assert len(_chains_named(rms, ("neg", "cat", "neg", "cat"))) == 8 * len(rms.steps)


def test_the_compile_price_against_the_compiled_step(rms) -> None:  # type: ignore[no-untyped-def]
    """The knob's edit replayed on the eager step, beside the compiled trial's own step (each
    without the profiler, fitted to its own unprofiled step): the host left is within a quarter of the
    compiled program's (the region's host time goes with the kernels it fuses); the GPU is over by
    a third (Inductor also fuses the rotary products with their halves and the gated activation
    across its matmuls, which the chains do not)."""
    model = step_model(rms)
    edit = knob_edits(rms)[KNOB_COMPILE]
    fixed = replay(model.graph, changes(model.graph, edit, base=model.base.changes))
    host, gpu = _per_step(model, fixed)
    eager_host, eager_gpu = _per_step(model)
    compiled = step_model(diagnose_path(RMS / "trials" / "compile").analysis)
    compiled_host, compiled_gpu = _per_step(compiled)
    assert compiled_host < host < 1.25 * compiled_host < eager_host
    assert compiled_gpu < gpu < 1.4 * compiled_gpu < eager_gpu
    # measured x2.01 [1.99-2.03]; the fused operators alone off the host, x1.28; before the
    # stored dtype and the passes by flow, x1.42; before chains by element count, x1.63; before
    # the rotary halves joined their product, x1.67; x1.71 before a training pass ran at its chain's
    # average rate; x1.76 before the fused passes ran at Inductor's share of the roof
    assert knob_prices_for(RMS)[KNOB_COMPILE]["predicted_speedup"] == 1.957


def test_the_healthy_gpt_stays_minor(healthy) -> None:  # type: ignore[no-untyped-def]
    """Its compile measured x1.08-1.10: the chains' price stays under the tenth of the step that
    makes a finding major."""
    from gpudoctor.pipeline import analyze_path

    report = analyze_path(DATA / "healthy_train" / "trace.json.gz")
    finding = next(f for f in report.findings if f.id == ue.ID)
    assert finding.severity == "minor"
    assert finding.predicted_speedup == pytest.approx(1.081, abs=5e-4)
