"""Batch norms reducing over a small map add no launches under the compile knob
(rules/inductor_conv.py ``SMALL_BATCH_NORM_VALUES``): pytorch/examples' siamese ResNet-18 on 28 x 28
images, whose compiled trial ran about 8 batch-norm kernels for each of its 20 batch norms over
1,024 values or more a channel and none for the 20 over 256 or fewer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpudoctor.analysis.compiled_region import compiled_region, traced_by_dynamo
from gpudoctor.pipeline import _run_model, knob_prices_for
from gpudoctor.rules.inductor_conv import (
    BATCH_NORM_BACKWARD_LAUNCHES,
    BATCH_NORM_FORWARD_LAUNCHES,
    SMALL_BATCH_NORM_VALUES,
    batch_norm_launches,
)

BUNDLE = Path(__file__).parent / "data" / "knobs_h100" / "examples_siamese"


def test_only_the_batch_norms_over_larger_maps_add_launches() -> None:
    a, _ = _run_model(BUNDLE)
    region = traced_by_dynamo(a.trace, compiled_region(a.trace))
    launches = batch_norm_launches(a, region, channels_last=True)
    steps = len(a.steps)
    # 40 training BatchNorm2d a step (two ResNet-18 passes); 20 reduce over 64 x 1 x 1 or
    # 64 x 2 x 2 values a channel, at most SMALL_BATCH_NORM_VALUES
    assert SMALL_BATCH_NORM_VALUES == 256
    assert np.count_nonzero(launches == BATCH_NORM_FORWARD_LAUNCHES) == 20 * steps
    assert np.count_nonzero(launches == BATCH_NORM_BACKWARD_LAUNCHES) == 20 * steps
    assert launches.sum() / steps == pytest.approx(130.0)


def test_the_compile_knob_on_the_siamese_resnet() -> None:
    """Priced x0.95 (x0.80 with every batch norm adding launches); measured x1.00."""
    price = knob_prices_for(BUNDLE)["compile"]
    assert price["predicted_speedup"] == pytest.approx(0.9497, abs=1e-3)
    assert "130 launches a step more" in price["note"]
    trials = json.loads((BUNDLE / "trials.json").read_text())["trials"]
    measured = next(t["measured_speedup"] for t in trials if t["knob"] == "compile")
    assert 1 / 1.25 <= price["predicted_speedup"] / measured <= 1.25
