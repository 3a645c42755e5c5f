"""The ``optimizer-foreach`` knob priced by its own edit (rules/optimizer_loop.py ``foreach_edit``),
not as the fused step the optimizer-loop finding prices: on the lab's recorded AdamW(foreach=False)
loop, the multi-tensor step keeps the loop's bytes and its per-parameter counters on the CPU."""

import json
from pathlib import Path

import numpy as np
import pytest

from gpudoctor.pipeline import _run_model, knob_prices_for
from gpudoctor.rules import optimizer_loop
from gpudoctor.rules.knob_prices import KNOB_FOREACH, knob_edits

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module")
def loop():
    return _run_model(DATA / "optimizer_loop")


def test_foreach_runs_one_operator_for_each_of_the_loops_per_parameter_operators(loop):
    a, _ = loop
    edit = optimizer_loop.foreach_edit(a)
    assert edit is not None
    # AdamW's loop: mul_ (weight decay), lerp_, mul_, addcmul_, sqrt, div, add_, addcdiv_
    assert edit.added_launches == 8.0
    assert edit.note == "8 multi-tensor operators a step for 528 per-parameter ones"
    # the counters' add_ and item (no kernel) stay on the host
    host = a.trace.host
    kept = [i for i in range(len(host.ts)) if a.trace.string(host.name[i]) == "aten::item"]
    removed = np.zeros(len(host.ts), bool)
    for s, e in zip(edit.host_removed_s.tolist(), edit.host_removed_e.tolist()):
        removed |= (host.ts >= s) & (host.end <= e)
    assert kept and not removed[kept].any()


def test_foreach_is_priced_below_the_fused_step_and_above_the_step(loop):
    a, m = loop
    prices = knob_prices_for(DATA / "optimizer_loop")
    foreach = prices[KNOB_FOREACH]["predicted_speedup"]
    fused_after = m.after_ms(optimizer_loop.edit(a, optimizer_loop.check(a)))
    assert foreach == pytest.approx(2.2861, abs=1e-4)
    assert 1.0 < foreach < m.step_ms / fused_after


def test_no_loop_no_foreach_price():
    a, _ = _run_model(DATA / "optimizer_loop_fixed")
    assert optimizer_loop.foreach_edit(a) is None
    assert KNOB_FOREACH not in knob_edits(a)


def test_dlrm_foreach_and_fused_priced_apart_as_measured():
    # a DLRM-style model with 26 embedding tables and Adam(foreach=False), run once with each knob
    # (knob set v, H200): foreach measured x1.44, fused x1.59
    path = DATA / "knobs_h200" / "dlrm_embeddings_adam"
    trials = {t["knob"]: t for t in json.loads((path / "trials.json").read_text())["trials"]}
    foreach = knob_prices_for(path)[KNOB_FOREACH]
    assert foreach["predicted_speedup"] == pytest.approx(1.3543, abs=1e-4)
    assert foreach["note"] == "7 multi-tensor operators a step for 266 per-parameter ones"
    measured = trials[KNOB_FOREACH]["measured_speedup"]
    assert 1 / 1.25 <= foreach["predicted_speedup"] / measured <= 1.25
    assert trials["optimizer-fused"]["predicted_speedup"] > foreach["predicted_speedup"]
