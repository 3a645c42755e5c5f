"""A fused chain's price in a training step, on a GPT with hand-written attention in bf16 autocast.

tests/data/knobs_h100/manual_attention_gpt is a ``gpudoctor run --try-fixes --fixes compile``
bundle of tests/programs/twins/manual_attention_gpt.py (6 layers, 12 heads, context 1024, batch 8),
recorded on an H100 (torch 2.11, 2026-12-06; benchmarks/BENCHMARKS-replay.md "A fused pass at its
chain's own rate"). Its compile measured x2.53 [2.52-2.54]; the compiled trial's trace (kept in
benchmarks/results/compile-traces-h100-2026-12-06-z-bundles.tar.xz) ran the forward softmax chain
as one Triton kernel of 0.198 ms a layer and its backward as one of 0.205 ms, and copied nothing
device to device.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpudoctor.analysis.compiled_region import compiled_region, traced_by_dynamo
from gpudoctor.pipeline import diagnose_path, knob_prices_for
from gpudoctor.rules import knob_prices
from gpudoctor.rules import unfused_elementwise as ue
from gpudoctor.trace.kernels import Kind

BUNDLE = Path(__file__).parent / "data" / "knobs_h100" / "manual_attention_gpt"
SOFTMAX = ("mul", "masked_fill_", "copy_", "_softmax", "copy_")
SOFTMAX_BACKWARD = ("copy_", "mul", "_softmax_backward_data", "copy_", "masked_fill_", "mul")
NORM_BACKWARD = (
    "copy_",
    "native_layer_norm_backward",
    "native_layer_norm_backward",
    "add_",
    "copy_",
)


@pytest.fixture(scope="module")
def gpt():  # type: ignore[no-untyped-def]
    return diagnose_path(BUNDLE).analysis


def _named(a, names: tuple[str, ...]) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    st, dev, host = a.trace.strings, a.trace.device, a.trace.host
    return [
        c
        for c in ue.chains(a, with_attention=True, by_numel=True)
        if tuple(st[host.name[o]].removeprefix("aten::") for o in dev.op[c]) == names
    ]


def test_a_pass_runs_at_its_chain_s_average_rate_not_its_slowest_kernel(gpt) -> None:  # type: ignore[no-untyped-def]
    chains = _named(gpt, SOFTMAX)
    assert len(chains) == 6 * len(gpt.steps)
    t = gpt.roofline.event_in_steps_ns
    chain = chains[0]
    fused = ue.fused_ns(gpt, chain, t, ue.kernel_floor_ns(gpt), training=True)
    # 1.25 x the 403 MB of the largest kernel (the fp32 ones at their bf16 storage) at the chain's
    # 2.3 TB/s; 1.25 x the slowest kernel (the broadcast mask's in-place fill) read 0.367 ms
    assert fused == pytest.approx(217_117.1, abs=0.5)
    assert t[chain].sum() == pytest.approx(1_213_149.0, abs=1.0)
    assert abs(fused / 198_000.0 - 1) < 0.15  # the compiled kernel


def test_a_backward_chain_that_widens_and_narrows_back_is_narrowed(gpt) -> None:  # type: ignore[no-untyped-def]
    softmax = _named(gpt, SOFTMAX_BACKWARD)[0]
    # the fp32 kernels (the cast up, the product, the softmax's gradient) count at bf16
    assert ue._storage_share(gpt, softmax).tolist() == [0.5, 0.5, 0.5, 0.5, 1.0, 1.0]
    t = gpt.roofline.event_in_steps_ns
    assert ue.fused_ns(gpt, softmax, t, ue.kernel_floor_ns(gpt)) == pytest.approx(
        292_932.0, abs=1.0
    )
    # a norm's backward that adds into the fp32 residual stream's gradient is left as it ran
    norm = _named(gpt, NORM_BACKWARD)[0]
    assert ue._storage_share(gpt, norm).tolist() == [1.0] * 5


def test_a_loss_and_its_gradient_keep_a_pass_on_each_side(gpt) -> None:  # type: ignore[no-untyped-def]
    loss = _named(
        gpt,
        (
            "_log_softmax",
            "copy_",
            "nll_loss_forward",
            "fill_",
            "nll_loss_backward",
            "copy_",
            "_log_softmax_backward_data",
        ),
    )
    assert len(loss) == len(gpt.steps)
    assert ue._passes(gpt, loss[0]) == 2
    assert ue._passes(gpt, _named(gpt, SOFTMAX)[0]) == 1


def test_the_masked_fill_clones_leave_with_their_chain(gpt) -> None:  # type: ignore[no-untyped-def]
    dev = gpt.trace.device
    copies = np.flatnonzero(
        (dev.kind == int(Kind.MEMCPY_DTOD)) & (gpt.roofline.event_in_steps_ns > 0)
    )
    assert copies.size == 12 * len(gpt.steps)  # masked_fill's clone, forward and backward
    region = traced_by_dynamo(gpt.trace, compiled_region(gpt.trace))
    fused = knob_prices.fusion(gpt, region)
    assert np.isin(copies, fused.device_removed).all()
    assert fused.note == (
        "61 chains of memory-bound kernels a step fused (181 kernels fewer, 12 device copies)"
    )


def test_the_compile_knob_s_price() -> None:
    # measured x2.53 [2.52-2.54]; x1.59 with a pass at the chain's slowest kernel, backward chains
    # at their widest dtype and the clones left on the GPU; x1.93 with the fused passes at the
    # chains' own rate; x2.4891 before the forward's own no-grad operators joined the region
    assert knob_prices_for(BUNDLE)["compile"]["predicted_speedup"] == 2.4935
