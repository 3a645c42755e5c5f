"""`gpudoctor memory module:factory`: exact parameters and a dry-run of the activations."""

from __future__ import annotations

import pytest

from gpudoctor.errors import InputError
from gpudoctor.memory import estimate_from_options

FACTORY = '''
import torch
from torch import nn

def mlp():
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))
    return model, torch.randn(64, 1024)
'''


@pytest.fixture()
def factory(tmp_path):
    path = tmp_path / "factory_mlp.py"
    path.write_text(FACTORY)
    return f"{path}:mlp"


def test_exact_parameters_states_and_optimizer_peak(factory):
    est = estimate_from_options(factory, params_dtype="fp32")
    n = 1024 * 4096 + 4096 + 4096 * 1024 + 1024
    assert est.n_params == n
    assert est.breakdown["weights"] == 4 * n
    assert est.breakdown["optimizer_states"] == 8 * n  # AdamW: two fp32 states
    # small activations: the optimizer step (weights + grads + states + one temporary) is the peak
    assert est.phase == "optimizer"
    assert est.peak_bytes == 4 * n * 5 + 64 * 1024**2
    saved = est.extra["dry_run"]["saved_bytes"]
    # Linear 1's output (kept by GELU) and GELU's output (kept by Linear 2), 64 x 4096 fp32 each,
    # and the input kept by Linear 1
    assert saved >= 2 * 64 * 4096 * 4 + 64 * 1024 * 4


def test_sharding_divides_states(factory):
    base = estimate_from_options(factory, params_dtype="fp32")
    zero = estimate_from_options(factory, params_dtype="fp32", dp=4, zero=1)
    assert zero.breakdown["optimizer_states"] * 4 == base.breakdown["optimizer_states"]


@pytest.mark.parametrize(
    "opts, message",
    [
        ({"tp": 2}, "--tp needs the model's structure"),
        ({"infer": True}, "module:factory is priced for training"),
    ],
)
def test_what_a_module_cannot_answer(factory, opts, message):
    with pytest.raises(InputError) as info:
        estimate_from_options(factory, **opts)
    assert message in str(info.value)
