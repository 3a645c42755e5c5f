"""benchmarks/bench_plan_ddp.py's prediction side: the layouts it prices, the table and the order line
it prints from a results file (a small fake one here; the measuring side needs torchrun and GPUs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load

from gpudoctor.core.layout import Layout

b = load("bench_plan_ddp")
HEADER = (
    "| layout | measured step | predicted, assumed | error | predicted, calibrated | error | "
    "calibrated: compute / elementwise / launch gap / comm / compute slowed by comm / DP copies / optimizer |\n"
    "|---|---:|---:|---:|---:|---:|---|\n"
)


def _results(tmp_path: Path, **steps: object) -> Path:
    m = {
        "world_size": 4,
        "gpu": "NVIDIA H200",
        "config": b.CONFIG,
        "batch_per_gpu": 4,
        "seq": 2048,
        **steps,
    }
    path = tmp_path / "ddp_fsdp.json"
    path.write_text(json.dumps(m))
    return path


def test_order_line() -> None:
    pred = {"DDP": 0.145, "FSDP": 0.137, "TP=2 x DP=2": 0.182}
    assert b.order_line(
        pred, {"DDP": 0.159, "FSDP": 0.155, "TP=2 x DP=2": 0.190}, "calibrated"
    ) == (
        "order by step time, fastest first (calibrated): predicted FSDP < DDP < TP=2 x DP=2; "
        "measured FSDP < DDP < TP=2 x DP=2; ranking matches: yes"
    )
    assert b.order_line(pred, {"DDP": 0.150, "FSDP": 0.155, "TP=2 x DP=2": 0.140}, "assumed") == (
        "order by step time, fastest first (assumed): predicted FSDP < DDP < TP=2 x DP=2; "
        "measured TP=2 x DP=2 < DDP < FSDP; ranking matches: no"
    )
    assert b.order_line(pred, {}, "calibrated") == (
        "order by step time, fastest first (calibrated): predicted FSDP < DDP < TP=2 x DP=2; measured: not yet"
    )


def test_tp_layout_keeps_the_global_batch() -> None:
    """TP=2 x DP on 4 GPUs: 2 replicas of 2 x 4 sequences, the 16 of DP over 4 GPUs; torch's styles
    without sequence parallelism."""
    assert b._layout("tp_dp", 4, 4) == Layout(dp=2, tp=2, pp=1, zero=3, microbatch=8, sp=False)
    assert b._layout("fsdp", 4, 4) == Layout(dp=4, tp=1, pp=1, zero=3, microbatch=4)
    assert b._layout("ddp", 4, 4) == Layout(dp=4, tp=1, pp=1, zero=0, microbatch=4)
    assert list(b._names(2)) == ["ddp", "fsdp"]  # TP=2 x DP needs two pairs at least
    assert (
        list(b._names(6)) == ["ddp", "fsdp", "tp_dp"] and b._names(6)["tp_dp"][1] == "TP=2 x DP=3"
    )


def test_predict_prints_the_three_layouts_and_their_order(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Assumed efficiencies (no bench file): the H200 datasheet and NVLink preset. TP=2 prices 7
    all-reduces of 64 MiB per layer and the norms over twice the tokens: slowest, though measured fastest
    in this fake file, so the ranking does not match."""
    b.predict(_results(tmp_path, ddp_step_s=0.160, fsdp_step_s=0.155, tp_dp_step_s=0.150))
    assert capsys.readouterr().out == HEADER + (
        "| DDP (dp=4) | 160.0 ms | 130.3 ms | -18.6% | - | - | - |\n"
        "| FSDP full shard (dp=4, ZeRO-3) | 155.0 ms | 125.8 ms | -18.9% | - | - | - |\n"
        "| TP=2 x FSDP (dp=2, ZeRO-3) | 150.0 ms | 169.6 ms | +13.1% | - | - | - |\n"
        "order by step time, fastest first (assumed): predicted FSDP < DDP < TP=2 x DP=2; "
        "measured TP=2 x DP=2 < FSDP < DDP; ranking matches: no\n"
    )


def test_a_failed_layout_is_priced_but_not_ranked(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    b.predict(
        _results(
            tmp_path, ddp_step_s=0.160, fsdp_step_s=0.155, tp_dp_error="OutOfMemoryError: CUDA"
        )
    )
    assert capsys.readouterr().out == HEADER + (
        "| DDP (dp=4) | 160.0 ms | 130.3 ms | -18.6% | - | - | - |\n"
        "| FSDP full shard (dp=4, ZeRO-3) | 155.0 ms | 125.8 ms | -18.9% | - | - | - |\n"
        "| TP=2 x FSDP (dp=2, ZeRO-3) | failed: OutOfMemoryError: CUDA | 169.6 ms | - | - | - | - |\n"
        "order by step time, fastest first (assumed): predicted FSDP < DDP; measured FSDP < DDP; "
        "ranking matches: yes\n"
    )


def test_layouts_option() -> None:
    assert b._layouts("ddp, tp_dp") == ("ddp", "tp_dp")
    with pytest.raises(SystemExit, match=r"--layouts: pp not among ddp, fsdp, tp_dp"):
        b._layouts("ddp,pp")
    with pytest.raises(SystemExit, match=r"--layouts: '' not among"):
        b._layouts("")


def test_measured_table() -> None:
    result = {
        "world_size": 4,
        "ddp_step_s": 0.1587,
        "ddp_peak_bytes": 28640025088,
        "fsdp_step_s": 0.1554,
        "tp_dp_error": "OutOfMemoryError: CUDA out of memory",
    }
    assert b.measured_table(result) == [
        "| layout | step | peak memory per GPU |",
        "|---|---:|---:|",
        "| DDP (dp=4) | 158.7 ms | 28.6 GB |",
        "| FSDP full shard (dp=4, ZeRO-3) | 155.4 ms | - |",
        "| TP=2 x FSDP (dp=2, ZeRO-3) | failed: OutOfMemoryError: CUDA out of memory | - |",
    ]
