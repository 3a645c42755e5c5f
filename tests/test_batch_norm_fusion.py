"""cuDNN's batch-norm kernels are normalizations the compile knob fuses with what follows them,
with their statistics' pass kept (rules/unfused_elementwise.py ``BATCH_NORM_STATS_SHARE``): a U-Net
in fp32 (knob set v, H200), whose compiled trial measured x1.36 with Inductor's kernels in place of
cuDNN's NCHW batch norm."""

import json
from pathlib import Path

import numpy as np
import pytest

from gpudoctor.pipeline import _run_model, knob_prices_for
from gpudoctor.rules import unfused_elementwise
from gpudoctor.rules.knob_prices import KNOB_COMPILE, compile_knob_edit
from gpudoctor.trace.kernels import Kind

UNET = Path(__file__).parent / "data" / "knobs_h200" / "unet_segmentation_fp32"


def _measured(knob: str) -> float:
    trials = json.loads((UNET / "trials.json").read_text())["trials"]
    return next(t["measured_speedup"] for t in trials if t["knob"] == knob)


def test_cudnn_batch_norm_kernels_are_normalizations():
    a, _ = _run_model(UNET)
    trace, dev = a.trace, a.trace.device
    names = [trace.string(n) for n in dev.name.tolist()]
    bn = np.array(["cudnn::bn_" in n for n in names])
    assert bn.sum() > 0
    assert (dev.kind[bn] == int(Kind.NORM)).all()


def test_the_compile_knob_fuses_batch_norm_and_is_priced_near_the_measurement():
    # x1.4149 at the fixed prior scale, x1.3110 before its 18 batch norms' Triton launches
    # (rules/inductor_conv.py: NCHW, the decoder halves its channels)
    price = knob_prices_for(UNET)[KNOB_COMPILE]["predicted_speedup"]
    assert price == pytest.approx(1.2103, abs=1e-4)
    assert 1 / 1.25 <= price / _measured(KNOB_COMPILE) <= 1.25


def _fused_chains_ns() -> float:
    a, _ = _run_model(UNET)
    return float(compile_knob_edit(a, KNOB_COMPILE).device_ns.sum())


def test_the_statistics_pass_is_priced(monkeypatch):
    # the fused chains' GPU time a window (the step after the fix is the host's here)
    with_stats = _fused_chains_ns()
    monkeypatch.setattr(unfused_elementwise, "BATCH_NORM_STATS_SHARE", 0.0)
    assert with_stats > _fused_chains_ns() * 1.3
