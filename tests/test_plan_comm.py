"""gpudoctor plan comm: the formulas on hand-computed cases, calibration against the committed 2x H200
curve, the CLI and its bad-input errors."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from gpudoctor.errors import InputError
from gpudoctor.plan import collective_cost as C
from gpudoctor.plan.collective_cost import parse_bytes, predict
from gpudoctor.report.plan import render_comm

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "benchmarks" / "results" / "bench-2xh200-2026-11-22.json"
MIB = 2**20


@pytest.mark.parametrize(
    "text,expected",
    [
        ("256MiB", 256 * MIB),
        ("1GB", 10**9),
        ("4096", 4096),
        ("1.5e9", 1_500_000_000),
        ("4G", 4 * 2**30),
        ("2 KiB", 2048),
        ("1kb", 1000),
    ],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "12 parsecs", "0", "-5", "2PB", "1e16"])
def test_parse_bytes_rejects(text: str) -> None:
    with pytest.raises(InputError):
        parse_bytes(text)


def test_ring_allreduce_hand_computed() -> None:
    # H100 SXM, 8 GPUs, 1 GiB: B = 450 GB/s x 0.80 = 360 GB/s; 2(7)/8 x 2^30 / 360e9 = 5.2190 ms;
    # latency 8.4 us + 14 steps x 3.4 us = 56.0 us.
    p = predict("all-reduce", 2**30, gpus=8, gpu="h100-sxm")
    bw = 2 * 7 / 8 * 2**30 / 360e9
    assert p.algorithm == "ring"
    assert p.time_s == pytest.approx(bw + 8.4e-6 + 14 * 3.4e-6, rel=1e-9)
    assert p.busbw_GBps == pytest.approx(2**30 / p.time_s * 2 * 7 / 8 / 1e9)
    assert p.algbw_GBps == pytest.approx(2**30 / p.time_s / 1e9)


def test_gather_broadcast_alltoall_p2p_hand_computed() -> None:
    s, b = 64 * MIB, 450e9 * 0.8
    ag = predict("all-gather", s, gpus=4, gpu="h200")
    assert ag.time_s == pytest.approx(8.4e-6 + 3 / 4 * s / b + 3 * 3.4e-6)
    rs = predict("reduce-scatter", s, gpus=4, gpu="h200")
    assert rs.time_s == pytest.approx(ag.time_s)
    assert ag.busbw_GBps == pytest.approx(s / ag.time_s * 3 / 4 / 1e9)
    bc = predict("broadcast", s, gpus=4, gpu="h200")
    assert bc.time_s == pytest.approx(8.4e-6 + s / b + 3 * 3.4e-6)
    a2a = predict("all-to-all", s, gpus=4, gpu="h200")
    assert a2a.time_s == pytest.approx(8.4e-6 + 3 / 4 * s / b + 2 * 3.4e-6)
    pp = predict("p2p", s, gpus=2, gpu="h200")
    assert pp.time_s == pytest.approx(8.4e-6 + s / b + 3.4e-6)
    assert pp.busbw_GBps == pytest.approx(pp.algbw_GBps)


def test_multi_node_formulas() -> None:
    # 16 H100 = 2 nodes of 8, NDR: rail 50 GB/s x 0.85 = 42.5 GB/s, 8 rails = 340 GB/s < NVLink 360.
    t = C.Topology(n=16, k=8, b_intra=360e9, alpha_intra=3.4e-6, b_rail=42.5e9, alpha_inter=14e-6)
    s = 256 * MIB
    ring = 8.4e-6 + 2 * 15 / 16 * s / 340e9 + (28 * 3.4e-6 + 2 * 14e-6)
    tree = 8.4e-6 + 2 * s / 340e9 + 2 * (7 * 3.4e-6 + 1 * 14e-6)
    hier = 8.4e-6 + 2 * (7 / 8 * s / 360e9 + 7 * 3.4e-6) + (s / 8) / 42.5e9 + 2 * 14e-6
    assert C.ring_allreduce(s, t) == pytest.approx(ring)
    assert C.tree_allreduce(s, t) == pytest.approx(tree)
    assert C.hierarchical_allreduce(s, t) == pytest.approx(hier)
    p = predict("all-reduce", s, gpus=16, gpus_per_node=8, gpu="h100-sxm", fabric="ib-ndr")
    assert p.time_s == pytest.approx(min(ring, tree, hier))
    assert set(p.candidates) == {"ring", "tree", "hierarchical"}
    assert p.algorithm == min(p.candidates, key=p.candidates.__getitem__)


def test_ring_grows_mildly_with_n_at_fixed_size() -> None:
    times = [predict("all-reduce", 256 * MIB, gpus=n, gpu="h100-sxm").time_s for n in (2, 4, 8)]
    assert times[0] < times[1] < times[2]
    assert times[2] / times[0] < 2.0  # 2(N-1)/N goes 1 -> 1.75: mild, not linear in N


def test_small_messages_across_many_nodes_prefer_tree() -> None:
    p = predict("all-reduce", MIB, gpus=512, gpu="h100-sxm", fabric="ib-ndr")
    assert p.algorithm == "tree"
    assert p.candidates["tree"] < p.candidates["ring"]


def test_no_nvlink_uses_pcie() -> None:
    p = predict("all-reduce", 2**30, gpus=4, gpu="l40s")
    assert "PCIe Gen4" in p.source
    assert p.busbw_GBps < 32  # under the Gen4 x16 line rate


def _measured() -> list[tuple[str, int, float]]:
    coll = json.loads(TABLE.read_text())["collectives"]
    names = {
        "all_reduce": "all-reduce",
        "all_gather": "all-gather",
        "reduce_scatter": "reduce-scatter",
    }
    return [
        (names[op], r["bytes"], r["time_s"])
        for op, rows in coll["curves"].items()
        for r in rows
        if r["bytes"] >= MIB
    ]


def test_calibrated_within_10_percent_of_measured_2xh200() -> None:
    rows = _measured()
    assert len(rows) == 21
    for op, nbytes, measured in rows:
        p = predict(op, nbytes, gpus=2, gpu="h200", busbw_table=str(TABLE))
        assert p.calibrated and p.source.startswith("calibrated:")
        assert abs(p.time_s / measured - 1) < 0.10, (op, nbytes)


def test_fitted_model_within_15_percent_of_measured_2xh200() -> None:
    # The alpha-beta fit (what other GPU counts use) on the same curve, not interpolation.
    errors = []
    for op, nbytes, measured in _measured():
        p = predict(op, nbytes, gpus=2, gpu="h200", busbw_table=str(TABLE), interpolate=False)
        errors.append(abs(p.time_s / measured - 1))
    assert max(errors) < 0.15
    assert statistics.median(errors) < 0.10


def test_preset_error_reported_not_bounded() -> None:
    errors = [abs(predict(op, n, gpus=2, gpu="h200").time_s / t - 1) for op, n, t in _measured()]
    print(f"preset error vs 2x H200: median {statistics.median(errors):.1%}, max {max(errors):.1%}")
    assert all(math.isfinite(e) for e in errors)


def test_calibration_other_counts_uses_fitted_bandwidth() -> None:
    p = predict("all-reduce", 256 * MIB, gpus=8, gpu="h200", busbw_table=str(TABLE))
    assert p.calibrated and p.algorithm == "ring"
    assert any("fitted on the 2-GPU all-reduce curve" in n for n in p.notes)
    q = predict("all-to-all", 256 * MIB, gpus=8, gpu="h200", busbw_table=str(TABLE))
    assert any("not in the table" in n for n in q.notes)


def test_busbw_table_errors(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    with pytest.raises(InputError, match="collectives"):
        predict("all-reduce", MIB, gpus=2, busbw_table=str(bad))
    with pytest.raises(InputError, match="cannot read"):
        predict("all-reduce", MIB, gpus=2, busbw_table=str(tmp_path / "missing.json"))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"op": "allscatter"}, "unknown collective 'allscatter': use one of all-reduce"),
        ({"gpus": 1}, "at least 2"),
        ({"op": "p2p", "gpus": 4}, "exactly --gpus 2"),
        ({"gpus": 12}, "use 8 or 16"),
        ({"gpu": "tpu-v5"}, "unknown GPU 'tpu-v5': use one of .*h100-sxm"),
        ({"gpus": 16, "fabric": "carrier-pigeon"}, "unknown fabric .*ib-ndr"),
    ],
)
def test_bad_input(kwargs: dict, match: str) -> None:
    args = {"op": "all-reduce", "gpus": 8, "gpu": "h100-sxm", **kwargs}
    op = args.pop("op")
    with pytest.raises(InputError, match=match):
        predict(op, MIB, **args)


def test_render_comm() -> None:
    console = Console(width=100, record=True)
    render_comm(predict("all-reduce", 256 * MIB, gpus=16, gpu="h100-sxm", fabric="ib-ndr"), console)
    text = console.export_text()
    for word in ("all-reduce", "256 MiB", "16", "busbw", "algbw", "source: preset"):
        assert word in text


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", "plan", "comm", *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_cli_json() -> None:
    out = _cli(
        "all-reduce",
        "256MiB",
        "--gpus",
        "16",
        "--gpus-per-node",
        "8",
        "--gpu",
        "h100-sxm",
        "--fabric",
        "ib-ndr",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in (
        "op",
        "bytes",
        "gpus",
        "time_s",
        "busbw_GBps",
        "algbw_GBps",
        "algorithm",
        "source",
        "calibrated",
        "notes",
    ):
        assert key in data
    assert data["bytes"] == 256 * MIB and data["time_s"] > 0


@pytest.mark.parametrize(
    "args",
    [
        ("all-reduce", "lots", "--gpus", "8"),
        ("all-reduce", "1GiB", "--gpus", "12"),
        ("gossip", "1GiB", "--gpus", "8"),
        ("all-reduce", "1GiB", "--gpus", "16", "--fabric", "smoke-signals"),
    ],
)
def test_cli_bad_input_one_line_exit_2(args: tuple[str, ...]) -> None:
    out = _cli(*args)
    assert out.returncode == 2
    lines = [line for line in (out.stderr + out.stdout).splitlines() if line.strip()]
    assert len(lines) == 1, lines


def test_render_train_reads_the_typed_result() -> None:
    from gpudoctor.plan.train import Plan, TrainPlanResult
    from gpudoctor.report.plan import render_train

    plan = Plan(
        dp=8,
        tp=1,
        pp=1,
        cp=1,
        zero=1,
        microbatch=2,
        microbatches=4,
        checkpointing="selective",
        schedule="1f1b",
        step_s=1.25,
        mfu=0.41,
        tokens_per_s=1e5,
        peak_bytes=60 * 2**30,
        total_bytes=70 * 2**30,
    )
    result = TrainPlanResult(
        model="m",
        gpus=8,
        gpu="h100-sxm",
        global_batch=64,
        seq=2048,
        gpus_per_node=8,
        fabric="ib-ndr",
        plans=[plan],
        explanation="dp=8 wins: no pipeline bubble",
        infeasible=None,
        considered=10,
        fitting=1,
        comm_model="c",
        compute_model="assumed peak",
        memory_model="8 bytes/parameter",
    )
    console = Console(width=120, record=True)
    render_train(result, console)
    lines = console.export_text().splitlines()
    assert lines[1].split() == [
        "#",
        "dp",
        "tp",
        "pp",
        "cp",
        "zero",
        "microbatch",
        "checkpointing",
        "step",
        "s",
        "mfu",
        "peak",
        "bytes",
    ]
    assert lines[2].split() == [
        "1",
        "8",
        "1",
        "1",
        "1",
        "1",
        "2",
        "selective",
        "1.250",
        "s",
        "41.0%",
        "60",
        "GiB",
    ]
    assert lines[3:] == [
        "compute: assumed peak",
        "memory: 8 bytes/parameter (gpudoctor memory's estimate, per GPU)",
        "dp=8 wins: no pipeline bubble",
    ]

    none_fits = dataclasses.replace(
        result, plans=[], explanation="", infeasible="tp=1 zero=0: 95 GiB > 80 GiB"
    )
    console = Console(width=120, record=True)
    render_train(none_fits, console)
    assert console.export_text().splitlines()[1:] == [
        "no layout fits",
        "compute: assumed peak",
        "memory: 8 bytes/parameter (gpudoctor memory's estimate, per GPU)",
        "infeasible: tp=1 zero=0: 95 GiB > 80 GiB",
    ]


def test_nvls_all_reduce_inside_one_nvswitch_node() -> None:
    """NVLink SHARP: 8 H100 SXM reach 1.30x the ring's bus bandwidth (480 vs 370 GB/s, NCCL's
    maintainers); 4 ranks gain nothing on bandwidth; A100 and multi-node runs do not get it."""
    from gpudoctor.plan.collective_cost import predict

    ring = predict("all-reduce", 2**30, gpus=8, gpu="h100-sxm")
    nvls = predict("all-reduce", 2**30, gpus=8, gpu="h100-sxm", nvls=True)
    assert (ring.algorithm, nvls.algorithm) == ("ring", "nvls")
    assert round(ring.time_s * 1e3, 4) == 5.2756 and round(nvls.time_s * 1e3, 4) == 4.0386
    assert 1.29 < nvls.busbw_GBps / ring.busbw_GBps < 1.31
    four = predict("all-reduce", 2**30, gpus=4, gpu="h100-sxm", nvls=True)
    assert (
        0.99
        < four.busbw_GBps / predict("all-reduce", 2**30, gpus=4, gpu="h100-sxm").busbw_GBps
        < 1.01
    )
    for kw in (
        {"gpus": 8, "gpu": "a100-sxm-80gb"},
        {"gpus": 16, "gpu": "h100-sxm", "fabric": "ib-ndr"},
    ):
        p = predict("all-reduce", 2**30, nvls=True, **kw)
        assert p.algorithm != "nvls" and any("--nvls does not apply" in n for n in p.notes)
    gather = predict("all-gather", 2**30, gpus=8, gpu="h100-sxm", nvls=True)
    assert gather.algorithm == "ring" and "nvls" not in gather.candidates


def test_plan_train_prices_tp_all_reduces_with_nvls_when_asked() -> None:
    """TP=8 inside one H100 node: its all-reduces get NVLink SHARP's bandwidth with nvls=True; DP
    across nodes does not (NVLS is one node only)."""
    from gpudoctor.plan.pins import Pins
    from gpudoctor.plan.train_search import plan_training

    kw = {
        "gpus": 16,
        "gpu": "h100-sxm",
        "global_batch": 64,
        "seq": 4096,
        "pins": Pins(tp=8, pp=1, zero=1),
    }
    plain = plan_training("llama-3.1-8b", **kw).plans[0]
    nvls = plan_training("llama-3.1-8b", nvls=True, **kw).plans[0]
    assert (plain.tp, plain.dp) == (nvls.tp, nvls.dp) == (8, 2)
    ratio = nvls.breakdown["tp_comm_s"] / plain.breakdown["tp_comm_s"]
    # bandwidth 1.30x and 2 latency steps instead of 14: 0.750 of the ring's time for these messages
    assert round(ratio, 3) == 0.750
    assert nvls.breakdown["dp_comm_s"] == plain.breakdown["dp_comm_s"]


def test_tp_all_reduces_per_layer_by_implementation() -> None:
    """TP=2 x FSDP of benchmarks/bench_plan_ddp.py (the 1.10 B Llama, 8 x 2048 tokens per TP pair):
    torch's ColwiseParallel on Hugging Face's separate q, k, v, gate and up all-reduces each one's
    input gradient, 2 + 5 all-reduces per layer (counted on a 2-rank CPU run of the styles); Megatron
    (impl="fused") and torch TP with sequence parallelism reduce each block's input once, 2 + 2."""
    from gpudoctor.core.hf_config import from_hf_config
    from gpudoctor.core.layout import Layout
    from gpudoctor.core.spec import ModelSpec
    from gpudoctor.plan.comm import tp_backward_allreduces
    from gpudoctor.plan.train import make_net, predict_step

    spec = from_hf_config(
        {
            "model_type": "llama",
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 16,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
        name="bench-llama",
    )
    net = make_net("h200", 4, None)
    lay = Layout(dp=2, tp=2, pp=1, zero=3, microbatch=8, sp=False)
    kw = {
        "global_batch": 16,
        "seq": 2048,
        "peak_flops": 989.4e12,
        "net": net,
        "hbm_bytes_per_s": 4.8e12,
    }
    one = net.time("all-reduce", 8 * 2048 * 2048 * 2, 2, 1)  # b*s*h bf16, 64 MiB over the TP pair
    assert one == pytest.approx(0.000201613511, rel=1e-9)
    assert predict_step(spec, lay, **kw)["tp_comm_s"] == pytest.approx(16 * 7 * one, rel=1e-12)
    assert predict_step(spec, lay, **kw, impl="fused")["tp_comm_s"] == pytest.approx(
        16 * 4 * one, rel=1e-12
    )
    sp = Layout(dp=2, tp=2, pp=1, zero=3, microbatch=8, sp=True)
    assert predict_step(spec, sp, **kw)["tp_comm_s"] == pytest.approx(16 * 4 * one, rel=1e-12)
    full = Layout(dp=2, tp=2, pp=1, zero=3, microbatch=8, sp=False, checkpointing="full")
    assert predict_step(spec, full, **kw)["tp_comm_s"] == pytest.approx(16 * 9 * one, rel=1e-12)
    gpt2 = ModelSpec(
        name="gpt2",
        family="gpt2",
        hidden=768,
        layers=12,
        heads=12,
        kv_heads=12,
        head_dim=64,
        intermediate=3072,
        vocab=50257,
        tied_embeddings=True,
        gated_mlp=False,
        fused_qkv=True,
    )
    assert tp_backward_allreduces(gpt2, lay, per_projection=True) == 2  # c_attn, c_fc: one each
    assert tp_backward_allreduces(spec, lay, per_projection=False) == 2


def test_two_gpu_fit_extrapolates_with_the_ring_factors_and_bench_byte_counts(
    tmp_path: Path,
) -> None:
    # A 2-GPU bench file that is exactly alpha-beta (fixed cost 20 us, NVLink step 3.4 us, busbw
    # 300 GB/s), bytes counted as gpudoctor bench counts them (the full buffer: all-gather's output,
    # reduce-scatter's input). Its fit must predict 4 GPUs by the ring formulas: all-reduce
    # 20 + 2(4-1) x 3.4 us + 2(4-1)/4 S/B, all-gather and reduce-scatter 20 + (4-1) x 3.4 us + (4-1)/4 S/B.
    base, alpha, bus = 20e-6, 3.4e-6, 300e9
    curves = {}
    for name, steps2, factor2 in (
        ("all_reduce", 2, 1.0),
        ("all_gather", 1, 0.5),
        ("reduce_scatter", 1, 0.5),
    ):
        rows = []
        for nbytes in (2**10, 2**20, 2**26, 2**30):
            t = base + steps2 * alpha + factor2 * nbytes / bus
            rows.append(
                {
                    "bytes": nbytes,
                    "time_s": t,
                    "algbw_Bps": nbytes / t,
                    "busbw_Bps": factor2 * nbytes / t,
                }
            )
        curves[name] = rows
    table = tmp_path / "two.json"
    table.write_text(
        json.dumps({"collectives": {"world_size": 2, "gpu": "NVIDIA H200", "curves": curves}})
    )
    gib = 2**30
    ar = predict("all-reduce", gib, gpus=4, gpu="h200", busbw_table=str(table))
    ag = predict("all-gather", gib, gpus=4, gpu="h200", busbw_table=str(table))
    rs = predict("reduce-scatter", gib, gpus=4, gpu="h200", busbw_table=str(table))
    assert ar.algorithm == "ring"
    assert ar.time_s * 1e6 == pytest.approx(
        20 + 6 * 3.4 + 1.5 * gib / bus * 1e6, rel=1e-9
    )  # 5,409.109 us
    assert ar.time_s * 1e6 == pytest.approx(5409.109, abs=1e-3)
    assert ag.time_s * 1e6 == pytest.approx(2714.555, abs=1e-3)  # 20 + 10.2 + 0.75 x 3,579.139
    assert rs.time_s == pytest.approx(ag.time_s, rel=1e-12)
    assert ar.busbw_GBps == pytest.approx(1.5 * gib / ar.time_s / 1e9, rel=1e-9)
