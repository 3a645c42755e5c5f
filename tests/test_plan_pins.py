"""plan train with fixed layout values: only those layouts are priced, and a value that cannot work
on the model or the cluster is a one-line error naming the constraint and the nearest valid values."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpudoctor.errors import InputError
from gpudoctor.plan.pins import Pins
from gpudoctor.plan.train_search import plan_training

BASE = {"gpus": 8, "gpu": "h100-sxm", "global_batch": 64, "seq": 4096}


def test_fixed_values_restrict_the_plans_to_them() -> None:
    free = plan_training("llama-3.1-8b", **BASE, top=50)
    pinned = plan_training("llama-3.1-8b", **BASE, top=50, pins=Pins(tp=2, zero=1))
    assert pinned.plans and all(p.tp == 2 and p.zero == 1 for p in pinned.plans)
    assert pinned.fitting < free.fitting
    # the same layout is priced the same whether it was fixed or found
    same = {
        (p.dp, p.tp, p.pp, p.cp, p.zero, p.microbatch, p.checkpointing): p.step_s
        for p in free.plans
    }
    for p in pinned.plans:
        key = (p.dp, p.tp, p.pp, p.cp, p.zero, p.microbatch, p.checkpointing)
        if key in same:
            assert p.step_s == same[key]


@pytest.mark.parametrize(
    ("pins", "message"),
    [
        (Pins(tp=3), "--tp 3 does not divide the model's 32 attention heads; use 2 or 4"),
        (
            Pins(tp=16),
            "--tp 16 does not fit in one 8-GPU node (tensor parallelism stays on NVLink); use 4 or 8",
        ),
        (Pins(pp=5), "--pp 5 does not divide the model's 32 layers; use 2 or 4"),
        (Pins(cp=3), "--cp 3 does not divide the sequence length 4096; use 2 or 4"),
        (Pins(dp=3), "the fixed degrees multiply to 3, which does not divide --gpus 8"),
        (Pins(tp=8, pp=4), "the fixed degrees multiply to 32, more than --gpus 8"),
        (
            Pins(dp=2, tp=2, pp=1, cp=1),
            "dp x tp x pp x cp = 4 but --gpus is 8; use --dp 4 or leave --dp out",
        ),
        (
            Pins(dp=8, microbatch=3),
            (
                "--microbatch 3 does not divide the 8 sequences each data-parallel rank gets "
                "per step; use 2 or 4"
            ),
        ),
        (Pins(zero=5), "--zero must be 0, 1, 2 or 3"),
        (
            Pins(checkpointing="some"),
            "--checkpointing must be one of none, selective, full, got 'some'",
        ),
        (
            Pins(dp=1, tp=2, pp=2),
            (
                "--dp 1, --tp 2, --pp 2 use 4 of the 8 GPUs and leave a factor of 2 to context "
                "parallelism, which is only tried at --seq >= 8192; fix --cp 2 or free a degree"
            ),
        ),
        (
            Pins(tp=4, pp=2, zero=1),
            "the fixed values leave no layout to price: --tp 4, --pp 2, --zero 1 needs dp > 1",
        ),
    ],
)
def test_a_value_that_cannot_work_names_the_constraint(pins: Pins, message: str) -> None:
    with pytest.raises(InputError) as err:
        plan_training("llama-3.1-8b", **BASE, pins=pins)
    assert message in str(err.value)


def test_global_batch_that_does_not_split_over_the_fixed_dp() -> None:
    with pytest.raises(InputError) as err:
        plan_training("llama-3.1-8b", **{**BASE, "global_batch": 60}, pins=Pins(dp=8))
    assert str(err.value) == (
        "--global-batch 60 does not split over --dp 8 data-parallel ranks; use 56 or 64"
    )


def test_a_fixed_layout_that_does_not_fit_says_what_came_closest() -> None:
    result = plan_training(
        "llama-3.1-8b", **BASE, pins=Pins(dp=8, zero=0, microbatch=8, checkpointing="none")
    )
    assert not result.plans
    assert result.infeasible.startswith(
        "no layout with --dp 8, --zero 0, --microbatch 8, --checkpointing none fits"
    )
    assert "the smallest peak" in result.infeasible and "ZeRO-0, micro-batch 8" in result.infeasible


def test_cli_fixed_layout_and_a_bad_one() -> None:
    base = [
        sys.executable,
        "-m",
        "gpudoctor",
        "plan",
        "train",
        "llama-3.1-8b",
        "--gpus",
        "8",
        "--gpu",
        "h100",
        "--global-batch",
        "64",
    ]
    ok = subprocess.run(
        [*base, "--tp", "2", "--zero", "1", "--json"], capture_output=True, text=True, check=False
    )
    assert ok.returncode == 0, ok.stderr
    plans = json.loads(ok.stdout)["plans"]
    assert plans and {(p["tp"], p["zero"]) for p in plans} == {(2, 1)}
    bad = subprocess.run([*base, "--pp", "5"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "error: --pp 5 does not divide the model's 32 layers; use 2 or 4"
    ]
