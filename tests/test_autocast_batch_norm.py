"""Under bf16 autocast batch norm leaves cuDNN for PyTorch's own kernels (rules/fp32_matmul.py
``batch_norm_edit``): the autocast knob prices cuDNN's fp32 batch norms at the native kernels'
time and their extra launches. A U-Net in fp32 NCHW (knob set v, H200) whose autocast trial
measured x1.24; the ratios were measured on another program and card (benchmarks/BENCHMARKS-replay.md
"Batch norm under bf16 autocast")."""

import json
from pathlib import Path

import numpy as np
import pytest

from gpudoctor.pipeline import _run_model, knob_prices_for
from gpudoctor.rules import fp32_matmul
from gpudoctor.rules.knob_prices import KNOB_BF16

UNET = Path(__file__).parent / "data" / "knobs_h200" / "unet_segmentation_fp32"
TINY_MLP = Path(__file__).parent / "data" / "twins_h100" / "tiny_mlp_launch"


def _measured(knob: str) -> float:
    trials = json.loads((UNET / "trials.json").read_text())["trials"]
    return next(t["measured_speedup"] for t in trials if t["knob"] == knob)


def test_cudnn_batch_norms_take_the_native_kernels_time():
    a, _ = _run_model(UNET)
    edit = fp32_matmul.batch_norm_edit(a)
    trace, dev = a.trace, a.trace.device
    ops = [trace.string(trace.host.name[o]) for o in dev.op[edit.device].tolist()]
    assert set(ops) == {"aten::cudnn_batch_norm", "aten::cudnn_batch_norm_backward"}
    backward = np.array([o.endswith("_backward") for o in ops])
    ratio = edit.device_ns / dev.dur[edit.device]
    # NCHW: cuDNN's NCHW kernels
    assert not any("nhwc" in trace.string(n).lower() for n in dev.name[edit.device].tolist())
    assert ratio[backward] == pytest.approx(fp32_matmul.NATIVE_BATCH_NORM_BACKWARD)
    assert ratio[~backward] == pytest.approx(fp32_matmul.NATIVE_BATCH_NORM_FORWARD)
    # one launching call per forward batch norm, slower by its extra launches
    forward_ops = np.unique(dev.op[edit.device[~backward]])
    assert edit.calls_slower.size == forward_ops.size
    assert (edit.calls_slower_ns == fp32_matmul.NATIVE_BATCH_NORM_EXTRA_LAUNCHES
            * fp32_matmul.NATIVE_KERNEL_LAUNCH_NS).all()


def test_the_autocast_knob_prices_batch_norm_near_the_measurement():
    price = knob_prices_for(UNET)[KNOB_BF16]["predicted_speedup"]
    assert price == pytest.approx(1.2061, abs=1e-4)
    assert 1 / 1.1 <= price / _measured(KNOB_BF16) <= 1.1


def test_without_the_native_kernels_autocast_is_priced_higher(monkeypatch):
    with_native = knob_prices_for(UNET)[KNOB_BF16]["predicted_speedup"]
    monkeypatch.setattr(fp32_matmul, "batch_norm_edit", lambda a: None)
    assert knob_prices_for(UNET)[KNOB_BF16]["predicted_speedup"] > with_native + 0.1


def test_a_step_with_no_batch_norm_has_no_edit():
    a, _ = _run_model(TINY_MLP)
    assert fp32_matmul.batch_norm_edit(a) is None
