"""The module evaluated under no_grad inside a training step is part of what ``torch.compile(model)``
takes (analysis/compiled_region.py ``evaluations``).

The real trace is pytorch/examples' GAT (knob set g, H200, torch 2.11): each step trains once and
evaluates the model twice (the train and validation accuracy, ``model.eval()`` under
``torch.no_grad()``), so two of its three forwards ran outside grad mode. Its compile trial
measured x1.52; with only the training forward in the region the knob was priced x1.04. The
synthetic traces check what is not an evaluation: a hand-written update, a forward's own no-grad
operators.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpudoctor.analysis.compiled_region import compiled_region, evaluations
from gpudoctor.pipeline import _run_model, knob_prices_for
from gpudoctor.rules.knob_prices import KNOB_COMPILE
from gpudoctor.trace import parse
from tests.synth import TID, TraceBuilder

GAT = Path(__file__).parent / "data" / "knobs_h200" / "examples_gat"


def _measured(knob: str) -> float:
    trials = json.loads((GAT / "trials.json").read_text())["trials"]
    return next(t["measured_speedup"] for t in trials if t["knob"] == knob)


def test_the_two_evaluations_a_step_are_in_the_region() -> None:
    a, _ = _run_model(GAT)
    trace, host = a.trace, a.trace.host
    top = host.top_op < 0
    evaluated = np.flatnonzero(evaluations(trace) & top)
    # two forwards of 40 operators and the loss's 3 (index, index, nll_loss_nd) each step; the
    # accuracy's argmax and eq after them are not the module's
    assert evaluated.size == 2 * 43 * len(a.steps)
    names = {trace.strings[n] for n in host.name[evaluated].tolist()}
    assert {"aten::softmax", "aten::leaky_relu", "aten::ones_like", "aten::nll_loss_nd"} <= names
    assert not names & {"aten::argmax", "aten::eq", "aten::item", "aten::_foreach_add_"}
    assert (compiled_region(trace)[evaluated]).all()


def test_the_compile_knob_is_priced_with_them() -> None:
    prices = knob_prices_for(GAT)
    compile_price = prices[KNOB_COMPILE]
    # x1.04 with the training forward and backward alone
    assert compile_price["predicted_speedup"] == pytest.approx(1.3001, abs=1e-4)
    assert 1 / 1.25 <= compile_price["predicted_speedup"] / _measured(KNOB_COMPILE) <= 1.25
    # the evaluations enter no graph with grad mode on: the step's two entries are the training
    # forward's and the backward's
    assert "entered 2 times a step" in compile_price["note"]


def _step(b: TraceBuilder, t: float, update: list[str], evaluate: bool) -> float:
    """One training step: a forward of grad-mode operators with one no-grad ``ones_like`` inside,
    its backward on the autograd thread, then ``update`` (no-grad operators) and, with
    ``evaluate``, the same forward under no_grad and a read."""
    forward = ["aten::mm", "aten::add", "aten::relu", "aten::ones_like", "aten::mul",
               "aten::mm", "aten::log_softmax", "aten::nll_loss_nd"]
    for k, name in enumerate(forward):
        b.launch("void at::native::vectorized_elementwise_kernel<4>", t + 10 * k, t + 10 * k + 5,
                 3, op=name)
        if name != "aten::ones_like":
            b.events[-3]["args"]["Sequence number"] = 100 + k
    b.op("autograd::engine::evaluate_function: MmBackward0", t + 100, 20, tid=TID + 1)
    b.launch("ampere_sgemm_128x64_nt", t + 102, t + 150, 20, op="aten::mm", tid=TID + 1)
    t += 200
    for k, name in enumerate(update):
        b.op(name, t + 10 * k, 5)
    t += 10 * len(update) + 10
    if evaluate:
        for k, name in enumerate(forward + ["aten::argmax"]):
            b.op(name, t + 10 * k, 5)
        t += 10 * len(forward) + 20
        b.op("aten::item", t, 5)
        t += 20
    return t


def _trace(update: list[str], evaluate: bool) -> TraceBuilder:
    b = TraceBuilder()
    t = 0.0
    for step in range(3):
        start = t
        t = _step(b, t, update, evaluate)
        b.step(step, start, t - start)
    return b


def _names(mask: np.ndarray, trace) -> list[str]:
    host = trace.host
    idx = np.flatnonzero(mask & (host.top_op < 0))
    return [trace.strings[n] for n in host.name[idx[np.argsort(host.ts[idx])]].tolist()]


def test_a_hand_written_update_is_not_an_evaluation_and_a_forward_keeps_its_own_no_grad_op() -> None:
    update = ["aten::mul", "aten::sub_", "aten::mul", "aten::sub_", "aten::zero_", "aten::zero_"]
    trace = parse(_trace(update, evaluate=False).to_bytes())
    assert not evaluations(trace).any()
    region = _names(compiled_region(trace), trace)
    # the forward's ones_like (no autograd node) is the forward's; the update is not
    assert region.count("aten::ones_like") == 3 and "aten::sub_" not in region


def test_an_evaluation_after_the_update_is() -> None:
    trace = parse(_trace(["aten::mul", "aten::sub_"], evaluate=True).to_bytes())
    evaluated = _names(evaluations(trace), trace)
    assert len(evaluated) == 3 * 8 and "aten::argmax" not in evaluated
    assert evaluated[:8] == ["aten::mm", "aten::add", "aten::relu", "aten::ones_like",
                             "aten::mul", "aten::mm", "aten::log_softmax", "aten::nll_loss_nd"]
