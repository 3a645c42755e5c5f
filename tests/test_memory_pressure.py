"""memory-pressure says what fills the card and what each change frees (real H100 trace of the
memory_pressure trap: an 81 GB ballast held between steps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoctor.capture.bundle import facts_of
from gpudoctor.capture.model_state import ModelState
from gpudoctor.pipeline import analyze_loaded
from gpudoctor.trace import load

TRACE = Path(__file__).parent / "data" / "memory_pressure"


def test_trace_only_names_what_is_held_between_steps():
    finding = analyze_loaded(load(TRACE)).finding("memory-pressure")
    numbers = finding.evidence.numbers
    assert numbers["held_between_steps_GB"] == 81.17
    assert numbers["added_by_the_step_GB"] == 2.3
    assert "81.2 GB stays allocated between steps" in finding.summary
    # the biggest lever comes first: what is held, not activations (0.7 GB)
    assert finding.fixes[0].title.startswith("Find what stays allocated between steps (81.2 GB)")
    assert "frees up to ~2.1 GB" in finding.fixes[1].title


def test_with_the_optimizers_sizes_each_fix_is_priced():
    state = ModelState(
        params=1_000_000_000,
        param_bytes=4_000_000_000,
        grad_bytes=4_000_000_000,
        state_bytes=8_000_000_000,
        optimizer="AdamW",
        param_dtype="float32",
    )
    finding = analyze_loaded(load(TRACE), model_state=state).finding("memory-pressure")
    numbers = finding.evidence.numbers
    assert (numbers["weights_GB"], numbers["gradients_GB"], numbers["optimizer_states_GB"]) == (
        4.0,
        4.0,
        8.0,
    )
    assert numbers["activations_and_temporaries_GB"] == 67.47
    titles = [f.title for f in finding.fixes]
    assert (
        titles[0]
        == "Recompute activations in backward instead of keeping them (frees up to ~60.7 GB)"
    )
    assert "Keep weights, gradients and Adam states in bf16 (frees ~8.0 GB)" in titles
    assert "8-bit AdamW (frees ~6.0 GB of optimizer states)" in titles


def test_model_state_of_reads_an_optimizer():
    import torch

    from gpudoctor.capture.session import model_state_of

    p = torch.nn.Parameter(torch.zeros(10))
    opt = torch.optim.AdamW([p])
    assert model_state_of(opt) is None  # CPU tensors: not GPU memory


STATE_JSON = {
    "optimizer": "AdamW",
    "params": 10,
    "param_bytes": 40,
    "grad_bytes": 40,
    "state_bytes": 80,
    "param_dtype": "float32",
}


def test_a_model_state_reads_back_from_env_json_and_writes_the_same_keys() -> None:
    state = facts_of({"capture": {"model_state": STATE_JSON}}).model_state
    assert state == ModelState(10, 40, 40, 80, optimizer="AdamW", param_dtype="float32")
    assert list(state.to_dict().items()) == list(STATE_JSON.items())  # same keys, same order


@pytest.mark.parametrize(
    "value",
    [
        None,
        [],
        "state",
        {**STATE_JSON, "params": -1},
        {**STATE_JSON, "grad_bytes": 4.5},
        {**STATE_JSON, "state_bytes": True},
        {k: v for k, v in STATE_JSON.items() if k != "param_bytes"},
    ],
)
def test_a_malformed_model_state_reads_as_absent(value: object) -> None:
    assert facts_of({"capture": {"model_state": value}}).model_state is None


def test_a_model_state_without_its_names_still_reads() -> None:
    counts = {k: STATE_JSON[k] for k in ("params", "param_bytes", "grad_bytes", "state_bytes")}
    state = ModelState.parse({**counts, "optimizer": 3})
    assert state is not None and state.optimizer is None and state.param_dtype is None
    assert state.to_dict() == counts
