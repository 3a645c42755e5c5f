"""The compile knob compiles each outermost module (tryfix/knobs.py on_outermost_module): a step
that calls several (a GAN's two networks, a list of blocks called in turn) enters each compiled
call, where the trace shows one forward pass for them all. The capture counts those calls
(capture/session.py; env.json ``capture.outermost_calls_per_step``) and the compile knob's entries
follow (rules/knob_prices.py ``compiled_entries``). The ResNet-18 bundle (knob set w, H100) with
the count written in."""

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpudoctor.capture.bundle import facts_of
from gpudoctor.pipeline import knob_prices_for
from gpudoctor.rules.knob_prices import KNOB_COMPILE

RESNET = Path(__file__).parent / "data" / "knobs_h100" / "resnet18_bn_sgd_loop"


def _bundle(tmp_path: Path, calls: object) -> Path:
    for f in ("trace.json.gz", "trials.json"):
        shutil.copy(RESNET / f, tmp_path / f)
    env = json.loads((RESNET / "env.json").read_text())
    env["capture"]["outermost_calls_per_step"] = calls
    (tmp_path / "env.json").write_text(json.dumps(env))
    return tmp_path


def test_a_step_of_one_model_enters_it_once_a_pass(tmp_path: Path) -> None:
    alone = knob_prices_for(RESNET)[KNOB_COMPILE]
    counted = knob_prices_for(_bundle(tmp_path, 1))[KNOB_COMPILE]
    assert counted == alone
    assert "entered 2 times a step" in alone["note"]


def test_four_modules_a_step_are_four_compiled_calls_each_way(tmp_path: Path) -> None:
    one = knob_prices_for(RESNET)[KNOB_COMPILE]
    four = knob_prices_for(_bundle(tmp_path, 4))[KNOB_COMPILE]
    assert "entered 8 times a step" in four["note"]
    # four forward and backward entries of 0.44 + 0.55 ms (15.5 parameters a call: no guards past
    # the fitted 32) where one call of 62 parameters took 0.50 + 0.55, on a step the host holds
    added = four["step_after_ms"] - one["step_after_ms"]
    assert added == pytest.approx(4 * (0.44 + 0.55) - (0.44 + 0.002 * 30 + 0.55), abs=1e-3)
    assert four["predicted_speedup"] < 0.7 < one["predicted_speedup"]


@given(st.one_of(st.none(), st.booleans(), st.integers(-5, 0), st.floats(), st.text(max_size=3),
                 st.lists(st.integers(), max_size=2)))
def test_a_malformed_count_reads_as_absent(value: object) -> None:
    assert facts_of({"capture": {"outermost_calls_per_step": value}}).outermost_calls is None


def test_a_count_reads_back() -> None:
    assert facts_of({"capture": {"outermost_calls_per_step": 3}}).outermost_calls == 3


def test_time_an_edit_adds_on_a_step_the_gpu_holds_is_not_capped_at_the_step() -> None:
    # the text encoder's replay stays a little above its measured step (the GPU holds it): a fix is
    # priced by what the edited graph leaves, and an edit that adds host time past the GPU's work
    # is slower than the step by what it adds to the replay
    import numpy as np

    from gpudoctor.pipeline import _run_model
    from gpudoctor.replay.edits import Edit

    a, model = _run_model(RESNET.parent / "text_encoder_fp32")
    assert model.base.residual_ns < 0
    dev = a.trace.device
    in_steps = np.flatnonzero((a.roofline.event_in_steps_ns > 0) & (dev.launch >= 0))
    calls = dev.launch[in_steps[len(in_steps) // 2:][:1]]
    slower = Edit(calls_slower=calls.astype(np.int64), calls_slower_ns=np.array([200e6]))
    after = model.after_ms(slower)
    # 200 ms on one call of one step: 40-50 ms a step over the window (the old cap kept 21.08)
    assert after > model.step_ms + 30
    assert model.after_ms(Edit()) == pytest.approx(model.step_ms)
