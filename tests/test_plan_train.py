"""gpudoctor plan train: FLOPs, the bubble, the layouts chosen and the CLI."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpudoctor.core.flops import step_flops
from gpudoctor.core.layout import Layout, bubble_fraction
from gpudoctor.core.spec import ModelSpec
from gpudoctor.errors import InputError
from gpudoctor.memory import load_spec
from gpudoctor.plan.train import (
    make_net,
    predict_step,
)
from gpudoctor.plan.train_search import plan_training


def gpt3_like(
    hidden: int = 12288, layers: int = 96, heads: int = 96, vocab: int = 51200
) -> ModelSpec:
    """A GPT-3-style dense model: plain 4h MLP, MHA, untied head, as in Narayanan et al. 2021."""
    return ModelSpec(
        name="gpt3",
        family="gpt2",
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=heads,
        head_dim=hidden // heads,
        intermediate=4 * hidden,
        vocab=vocab,
        tied_embeddings=False,
        gated_mlp=False,
    )


@pytest.mark.parametrize("ckpt, coef, head_div", [("none", 72, 12), ("full", 96, 16)])
def test_flops_match_narayanan(ckpt: str, coef: int, head_div: int) -> None:
    # 72 B s L h^2 (1 + s/6h + V/12hL) without recompute; 96 B s L h^2 (1 + s/6h + V/16hL) with full
    # checkpointing (their eq. 3). Both count the full (non-causal) s x s attention.
    spec, b, s = gpt3_like(), 1536, 2048
    h, L, V = spec.hidden, spec.layers, spec.vocab
    expected = coef * b * s * L * h**2 * (1 + s / (6 * h) + V / (head_div * h * L))
    got = step_flops(spec, b, s, ckpt, causal=False).hardware
    assert got == pytest.approx(expected, rel=1e-12)


def test_flops_gqa_by_hand() -> None:
    spec = load_spec(
        "llama-3.1-8b"
    )  # h 4096, 32 heads, 8 KV heads, d 128, i 14336, V 128256, 32 layers
    b, s, h, d = 2, 1024, 4096, 128
    t = b * s
    proj = 2 * t * (h * 32 * d + 2 * h * 8 * d + 32 * d * h)
    attn = 2 * 2 * b * (s * s / 2) * 32 * d  # causal: half the pairs
    mlp = 3 * 2 * t * h * 14336
    head = 2 * t * h * 128256
    fl = step_flops(spec, b, s, "none", causal=True)
    assert fl.layers_fwd == pytest.approx(32 * (proj + attn + mlp), rel=1e-12)
    assert fl.head_fwd == head
    assert fl.model == pytest.approx(3 * (32 * (proj + attn + mlp) + head), rel=1e-12)
    assert step_flops(spec, b, s, "full").recompute == pytest.approx(fl.layers_fwd)


def test_moe_flops_count_top_k_experts() -> None:
    spec = load_spec("mixtral-8x7b")
    dense = replace(spec, moe=None)
    b, s, h = 1, 512, 4096
    per_layer_moe = 2 * b * s * h * 8 + 2 * 2 * b * s * 3 * h * 14336  # router + 2 of 8 experts
    per_layer_dense = 2 * b * s * 3 * h * 14336
    diff = step_flops(spec, b, s).layers_fwd - step_flops(dense, b, s).layers_fwd
    assert diff == pytest.approx(32 * (per_layer_moe - per_layer_dense), rel=1e-12)


def test_bubble_formulas() -> None:
    assert bubble_fraction(8, 32) == pytest.approx(7 / 32)  # the seed's scenario 8
    assert bubble_fraction(8, 32, "interleaved", virtual_stages=2) == pytest.approx(7 / 64)
    assert bubble_fraction(8, 32, "zb-h1") == pytest.approx(7 / 96)
    assert bubble_fraction(1, 4) == 0.0
    with pytest.raises(InputError, match="schedule"):
        bubble_fraction(2, 2, "gpipe2")


def test_bubble_enters_step_time() -> None:
    spec = gpt3_like(4096, 32, 32)
    net = make_net("h100-sxm", 8, None)
    kw = {"global_batch": 64, "seq": 2048, "peak_flops": 989.4e12, "net": net}
    r = predict_step(spec, Layout(dp=1, tp=1, pp=8, microbatch=2), **kw)
    pipelined = sum(
        r[k]
        for k in ("compute_s", "recompute_s", "memory_s", "tp_comm_s", "cp_comm_s", "pp_comm_s")
    )
    assert r["bubble_s"] == pytest.approx(pipelined * 7 / 32)


def test_small_model_picks_pure_data_parallelism() -> None:
    r = plan_training("gpt2", gpus=8, gpu="h100-sxm", global_batch=64, seq=1024)
    best = r.plans[0]
    assert (best.dp, best.tp, best.pp, best.cp) == (8, 1, 1, 1)
    assert best.zero in (0, 1, 2, 3)  # which ZeRO stage: the explanation says why
    assert "DP=8" in r.explanation and r.infeasible is None


def test_70b_on_64_h100_keeps_tp_inside_the_node() -> None:
    r = plan_training("llama-3.1-70b", gpus=64, gpu="h100-sxm", global_batch=512, seq=4096, top=50)
    best = r.plans[0]
    assert 1 < best.tp <= 8
    assert all(p.tp <= 8 for p in r.plans)  # never TP across nodes
    assert "TP=" in r.explanation and "inside the node" in r.explanation
    assert 0.3 < best.mfu < 0.75


def test_405b_on_8_gpus_is_infeasible() -> None:
    r = plan_training("llama-3.1-405b", gpus=8, gpu="h100-sxm", global_batch=64, seq=4096)
    assert r.plans == []
    assert "weights alone need 94.5 GiB" in r.infeasible
    # memory's default precision: bf16 weights, gradients and AdamW states, 8 bytes a parameter
    assert (
        "(8 bytes per parameter, 3,024 GiB)" in r.infeasible and "need >= 48 GPUs" in r.infeasible
    )
    mixed = plan_training(
        "llama-3.1-405b",
        gpus=8,
        gpu="h100-sxm",
        global_batch=64,
        seq=4096,
        precision={"master_weights": True},
    )
    assert (
        "(16 bytes per parameter, 6,048 GiB)" in mixed.infeasible
        and "need >= 96 GPUs" in mixed.infeasible
    )


def test_json_keys() -> None:
    d = plan_training("llama-3.2-1b", gpus=8, gpu="h100-sxm", global_batch=32, seq=2048).to_dict()
    assert {"plans", "explanation", "infeasible", "assumptions"} <= set(d)
    for p in d["plans"]:
        assert {
            "dp",
            "tp",
            "pp",
            "cp",
            "zero",
            "microbatch",
            "checkpointing",
            "step_s",
            "mfu",
            "peak_bytes",
            "breakdown",
        } <= set(p)
        assert {
            "compute_s",
            "bubble_s",
            "recompute_s",
            "dp_comm_s",
            "tp_comm_s",
            "pp_comm_s",
            "zero_comm_s",
        } <= set(p["breakdown"])
    json.dumps(d)


@pytest.mark.parametrize(
    "model, kwargs, match",
    [
        ("llama-3.1-8b", {"gpus": 12}, "12 is not a whole number of 8-GPU nodes .*use 8 or 16"),
        ("llama-3.1-8b", {"global_batch": 0}, "--global-batch must be"),
        # gpt2 (12 heads, 12 layers) on 64 GPUs: TP x PP is at most 4 x 4, so DP >= 4 > 3 sequences
        (
            "gpt2",
            {"gpus": 64, "global_batch": 3},
            "not a multiple of any data-parallel degree.*use 4",
        ),
    ],
)
def test_bad_input(model: str, kwargs: dict, match: str) -> None:
    args = {"gpus": 8, "gpu": "h100-sxm", "global_batch": 64, "seq": 2048} | kwargs
    with pytest.raises(InputError, match=match):
        plan_training(model, **args)


def test_cli_json() -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpudoctor",
            "plan",
            "train",
            "llama-3.1-8b",
            "--gpus",
            "8",
            "--gpu",
            "h100-sxm",
            "--global-batch",
            "64",
            "--seq",
            "4096",
            "--json",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert (
        d["plans"]
        and d["plans"][0]["dp"] * d["plans"][0]["tp"] * d["plans"][0]["pp"] * d["plans"][0]["cp"]
        == 8
    )


def test_cli_table_cells() -> None:
    """The table `plan train` prints: its header, one row per layout, then what priced them."""
    from test_cli import gd

    out = gd(
        "plan",
        "train",
        "llama-3.2-1b",
        "--gpus",
        "1",
        "--global-batch",
        "8",
        "--seq",
        "2048",
        "--top",
        "2",
        "--width",
        "300",
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "gpudoctor plan train"
    # the cells as printed, aligned: the right-justified numbers, checkpointing left-justified
    assert lines[1:4] == [
        "#  dp  tp  pp  cp  zero  microbatch  checkpointing      step s    mfu  peak bytes",
        "1   1   1   1   1     0           8  none           333.297 ms  38.8%   57.23 GiB",
        "2   1   1   1   1     0           4  none           333.493 ms  38.8%    34.4 GiB",
    ]
    assert lines[4] == (
        "compute: assumed: FLOPs x datasheet bf16 peak x GEMM_EFFICIENCY (no --bench)"
    )
    assert lines[5].startswith("memory: bf16 weights and gradients") and lines[5].endswith(
        "(gpudoctor memory's estimate, per GPU)"
    )
    assert lines[6].startswith("Best: DP=1 x TP=1 x PP=1 no DP, micro-batch 8") and len(lines) == 7


def test_memory_bound_work_is_priced_from_the_activations() -> None:
    """impl="fused": 4 passes over what a micro-batch keeps for backward, at 80% of HBM (5 with recompute)."""
    from gpudoctor.memory.activations import Workload, head_memory, layer_memory
    from gpudoctor.plan.train import HBM_EFFICIENCY

    spec = gpt3_like(4096, 32, 32)
    net = make_net("h100-sxm", 8, None)
    r = predict_step(
        spec,
        Layout(dp=8, tp=1, pp=1, microbatch=1),
        global_batch=8,
        seq=2048,
        peak_flops=989.4e12,
        net=net,
        hbm_bytes_per_s=3.35e12,
        impl="fused",
    )
    w = Workload(batch=1, seq=2048, params_bytes=2, attention="sdpa")
    saved = (
        sum(layer_memory(spec, w, i).total for i in range(spec.layers)) + head_memory(spec, w).total
    )
    assert r["memory_s"] == pytest.approx(4 * saved / (3.35e12 * HBM_EFFICIENCY))
    ck = predict_step(
        spec,
        Layout(dp=8, tp=1, pp=1, microbatch=1, checkpointing="full"),
        global_batch=8,
        seq=2048,
        peak_flops=989.4e12,
        net=net,
        hbm_bytes_per_s=3.35e12,
        impl="fused",
    )
    assert ck["memory_s"] == pytest.approx(5 * saved / (3.35e12 * HBM_EFFICIENCY))


# ---------------------------------------------------------------------------------------------
# --bench: calibrated on a real bench JSON (gpudoctor bench --json on one H200, 2026-11-22)

BENCH = Path(__file__).parent / "data" / "bench" / "bench-h200-gemm-2026-11-22.json.gz"
LLAMA_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 16,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
}  # benchmarks/bench_plan_ddp.py's model


@pytest.mark.parametrize("preset", ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v2-lite"])
def test_layer_gemms_add_up_to_the_flop_count(preset: str) -> None:
    from gpudoctor.core.flops import attention_flops, mlp_flops
    from gpudoctor.plan.calibration import layer_gemms

    spec, b, s = load_spec(preset), 2, 1024
    pairs = b * (s * s / 2) * spec.heads  # causal, no sliding window in these presets
    dims = (
        (spec.mla.qk_nope_head_dim + spec.mla.qk_rope_head_dim + spec.mla.v_head_dim)
        if spec.mla
        else 2 * spec.head_dim
    )
    for layer in (0, spec.layers - 1):  # DeepSeek-V2-Lite: a dense first layer, then MoE
        gemms = sum(2 * m * n * k * c for m, n, k, c in layer_gemms(spec, layer, b * s))
        scores = 2 * pairs * dims  # QK^T and PV: not GEMMs of weights
        assert gemms == pytest.approx(
            attention_flops(spec, b, s, layer) - scores + mlp_flops(spec, b, s, layer), rel=1e-12
        )


def test_gemm_grid_reads_the_measured_rows_and_interpolates_in_log_space() -> None:
    import gzip

    from gpudoctor.plan.calibration import load_calibration

    cal = load_calibration(BENCH, "h200")
    rows = {
        (r["m"], r["n"], r["k"]): r
        for r in json.loads(gzip.decompress(BENCH.read_bytes()))["gemm_grid"]["rows"]
    }
    assert len(rows) == 7**3 and cal.gemm.dims == (256, 512, 1024, 2048, 4096, 8192, 16384)
    rate = rows[(8192, 2048, 2048)]["tflops"]  # 680.7 TFLOP/s measured
    assert cal.gemm.seconds(8192, 2048, 2048) == pytest.approx(
        2 * 8192 * 2048 * 2048 / (rate * 1e12), rel=1e-12
    )
    # halfway in log2 between 2048 and 4096 columns: the geometric mean of the two rates
    mid = (rows[(8192, 2048, 2048)]["tflops"] * rows[(8192, 4096, 2048)]["tflops"]) ** 0.5
    n = 2048 * 2**0.5
    assert cal.gemm.seconds(8192, n, 2048) == pytest.approx(
        2 * 8192 * n * 2048 / (mid * 1e12), rel=1e-12
    )
    # beyond the grid (a 32000-wide LM head): the widest measured rate
    wide = rows[(8192, 16384, 2048)]["tflops"]
    assert cal.gemm.seconds(8192, 32000, 2048) == pytest.approx(
        2 * 8192 * 32000 * 2048 / (wide * 1e12), rel=1e-12
    )
    fwd, bwd = cal.attention.rates(2048, 64)
    assert (round(fwd / 1e12, 1), round(bwd / 1e12, 1)) == (377.2, 251.7)
    assert cal.hbm_bytes_per_s == pytest.approx(
        4.3931e12, rel=1e-4
    )  # triad beats copy on that card
    assert cal.launch_eager_s == pytest.approx(6.225e-6, rel=1e-3)


def test_calibrated_step_of_the_two_gpu_benchmark() -> None:
    """The 1.10 B Llama under DDP on 2 x H200 (benchmarks/bench_plan_ddp.py): pinned numbers."""
    from gpudoctor.core.hf_config import from_hf_config
    from gpudoctor.plan.calibration import load_calibration

    spec = from_hf_config(LLAMA_1B, name="bench-llama")
    net = make_net("h200", 2, None)
    kw = {
        "global_batch": 8,
        "seq": 2048,
        "peak_flops": 989.4e12,
        "net": net,
        "hbm_bytes_per_s": 4.8e12,
    }
    cal = load_calibration(BENCH, "h200")
    r = predict_step(spec, Layout(dp=2, tp=1, pp=1, microbatch=4), **kw, calibration=cal)
    assert r["compute_s"] == pytest.approx(0.0801648205, rel=1e-8)
    # eager Hugging Face: 479.5 bytes per (token x hidden) element per layer, plus the head and loss
    assert r["memory_s"] == pytest.approx(
        (16 * 479.5 * 8192 * 2048 + 11816402944) / cal.hbm_bytes_per_s, rel=1e-12
    )
    assert r["memory_s"] == pytest.approx(0.0319887875, rel=1e-8)
    assert r["optimizer_s"] == pytest.approx(
        1104218112 * 40 / cal.hbm_bytes_per_s, rel=1e-12
    )  # AdamW foreach
    assert r["dp_copy_s"] == pytest.approx(
        1104218112 * 8 / cal.hbm_bytes_per_s, rel=1e-12
    )  # DDP bucket copies
    assert r["dp_comm_s"] == pytest.approx(
        0.000379288889, rel=1e-9
    )  # the embedding's own 131 MB bucket
    assert (
        r["launch_s"] == 0.0
    )  # 16 x 122 kernels x 6.2 us = 12 ms of launches under 94 ms of GPU work
    assert r["step_s"] == pytest.approx(0.1245977243, rel=1e-8)
    fsdp = predict_step(spec, Layout(dp=2, tp=1, pp=1, microbatch=4, zero=3), **kw, calibration=cal)
    s = (
        2 * 1104218112
    )  # copy-in / copy-out of two all-gathers, chunk_cat and the divide of the reduce-scatter
    assert fsdp["dp_copy_s"] == pytest.approx(
        (2 * (s + 2 * s) + 2 * s + s) / cal.hbm_bytes_per_s, rel=1e-12
    )
    assert fsdp["step_s"] == pytest.approx(0.1223154433, rel=1e-8)
    assumed = predict_step(spec, Layout(dp=2, tp=1, pp=1, microbatch=4), **kw)
    assert assumed["launch_s"] == 0.0 and assumed["memory_s"] == pytest.approx(
        r["memory_s"] * 4.3931e12 / 3.84e12, rel=1e-4
    )
    fused = predict_step(
        spec, Layout(dp=2, tp=1, pp=1, microbatch=4), **kw, calibration=cal, impl="fused"
    )
    assert fused["memory_s"] == pytest.approx(0.0140461283, rel=1e-8) and fused["dp_copy_s"] == 0.0
    assert fused["optimizer_s"] == pytest.approx(0.0090486206, rel=1e-8)


def test_hf_traffic_count_matches_the_dispatched_ops() -> None:
    """plan/traffic.py's op-by-op count against every aten op of a CPU forward + backward."""
    pytest.importorskip("transformers")
    from script_module import load

    module = load("count_hf_traffic")
    assert module.counted_bytes() == pytest.approx(module.dispatched_bytes(), rel=0.01)


def test_unknown_implementation() -> None:
    with pytest.raises(
        InputError, match="implementation 'compiled' is not one of: eager-hf, fused"
    ):
        predict_step(
            gpt3_like(4096, 32, 32),
            Layout(dp=1, tp=1, pp=1),
            global_batch=1,
            seq=1024,
            peak_flops=989.4e12,
            net=make_net("h100-sxm", 8, None),
            impl="compiled",
        )


def test_launch_gap_when_kernels_are_shorter_than_their_launch() -> None:
    from gpudoctor.plan.calibration import load_calibration
    from gpudoctor.plan.train import EAGER_KERNELS_PER_LAYER

    spec = load_spec("gpt2")  # 12 layers of 768: tiny kernels at 128 tokens
    cal = load_calibration(BENCH, "h200")
    kw = {"global_batch": 4, "seq": 128, "peak_flops": 989.4e12, "net": make_net("h200", 8, None)}
    r = predict_step(spec, Layout(dp=1, tp=1, pp=1, microbatch=1), **kw, calibration=cal)
    gpu = (r["compute_s"] + r["memory_s"]) / 4
    assert r["launch_s"] == pytest.approx(
        4 * (12 * EAGER_KERNELS_PER_LAYER * cal.launch_eager_s - gpu), rel=1e-12
    )
    assert r["launch_s"] > r["compute_s"]


def test_plan_with_bench_says_so() -> None:
    r = plan_training(
        "llama-3.2-1b",
        gpus=2,
        gpu="h200",
        global_batch=8,
        seq=2048,
        gpus_per_node=2,
        calibration=str(BENCH),
    )
    d = r.to_dict()
    assert d["compute_model"].startswith("calibrated: GEMM (M, N, K) grid and attention grid")
    assert d["assumptions"][0].startswith("GEMMs timed at their own (M, N, K)")
    assert not any(a.startswith("GEMM efficiency") for a in d["assumptions"])
    plain = plan_training(
        "llama-3.2-1b", gpus=2, gpu="h200", global_batch=8, seq=2048, gpus_per_node=2
    )
    assert plain.compute_model.startswith("assumed") and plain.assumptions[1].startswith(
        "GEMM efficiency"
    )


def _bench_json(tmp_path: Path, **changes) -> Path:
    import gzip

    data = json.loads(gzip.decompress(BENCH.read_bytes()))
    data.update(changes)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "content, match",
    [
        ("not json at all", "cannot read it as JSON"),
        ('{"schema_version": "1.0"}', "not a gpudoctor bench JSON"),
        ('{"gpu": "NVIDIA H200", "ceilings": {}}', "no 'gemm_grid' section"),
        (
            '{"gpu": "NVIDIA H200", "ceilings": {}, "gemm_grid": {"error": "RuntimeError: CUDA out of memory"}}',
            "RuntimeError: CUDA out of memory",
        ),
    ],
)
def test_bench_file_that_is_not_one(tmp_path: Path, content: str, match: str) -> None:
    from gpudoctor.plan.calibration import load_calibration

    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(InputError, match=match):
        load_calibration(path, "h200")


def test_bench_file_of_another_gpu_or_incomplete(tmp_path: Path) -> None:
    from gpudoctor.plan.calibration import load_calibration

    with pytest.raises(
        InputError, match="measured on 'NVIDIA H200', not on --gpu h100-sxm; pass --gpu h200"
    ):
        load_calibration(BENCH, "h100-sxm")
    path = _bench_json(tmp_path)
    data = json.loads(path.read_text())
    data["gemm_grid"]["rows"] = data["gemm_grid"]["rows"][:-1]
    path.write_text(json.dumps(data))
    with pytest.raises(
        InputError, match=r"incomplete \(1 of 343 shapes missing, e.g. \(16384, 16384, 16384\)\)"
    ):
        load_calibration(path, "h200")
    with pytest.raises(InputError, match=r"no file|cannot read"):
        load_calibration(tmp_path / "missing.json", "h200")


def test_cli_bench_option(tmp_path: Path) -> None:
    base = [
        sys.executable,
        "-m",
        "gpudoctor",
        "plan",
        "train",
        "llama-3.2-1b",
        "--gpus",
        "2",
        "--global-batch",
        "8",
        "--seq",
        "2048",
        "--gpus-per-node",
        "2",
    ]
    ok = subprocess.run(
        [*base, "--gpu", "h200", "--bench", str(BENCH), "--json"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["compute_model"].startswith("calibrated")
    for gpu, path in (("h100-sxm", BENCH), ("h200", Path(__file__))):
        bad = subprocess.run(
            [*base, "--gpu", gpu, "--bench", str(path)],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert bad.returncode == 2 and bad.stdout == ""
        assert len(bad.stderr.strip().splitlines()) == 1 and "--bench" in bad.stderr


# ---------------------------------------------------------------------------------------------
# Selective recompute, sequence parallelism, pipeline scatter/gather (Korthikanti et al. 2022)


def test_selective_recompute_is_one_forward_of_the_attention_core() -> None:
    # non-causal MHA: the core is 4 B s^2 h per layer; with it the step is
    # 72 B L s h^2 (1 + s/6h + V/12hL) + 4 B L s^2 h = 72 B L s h^2 (1 + 2s/9h + V/12hL)
    spec, b, s = gpt3_like(), 64, 2048
    h, L, V = spec.hidden, spec.layers, spec.vocab
    fl = step_flops(spec, b, s, "selective", causal=False)
    assert fl.recompute == pytest.approx(4 * b * s * s * h * L, rel=1e-12)
    assert fl.hardware == pytest.approx(
        72 * b * L * s * h**2 * (1 + 2 * s / (9 * h) + V / (12 * h * L)), rel=1e-12
    )
    assert step_flops(spec, b, s, "selective").recompute == pytest.approx(
        fl.recompute / 2
    )  # causal


def test_layout_rejects_unknown_settings() -> None:
    with pytest.raises(
        InputError, match="checkpointing 'partial' is not one of: none, selective, full"
    ):
        Layout(dp=1, tp=1, pp=1, checkpointing="partial")
    with pytest.raises(InputError, match="schedule 'gpipe' is not one of"):
        Layout(dp=1, tp=1, pp=2, schedule="gpipe")
    with pytest.raises(InputError, match=r"Layout\.tp must be a whole number >= 1, got 0"):
        Layout(dp=1, tp=0, pp=1)


def _gpt3_175b(sp: bool, ckpt: str = "selective") -> dict:
    """Korthikanti et al.'s 175B row: TP 8, PP 8, 64 sequences of 2048, A100, HDR InfiniBand."""
    net = make_net("a100-sxm-80gb", 8, "ib-hdr")
    lay = Layout(dp=1, tp=8, pp=8, microbatch=1, checkpointing=ckpt, sp=sp)
    return predict_step(
        gpt3_like(),
        lay,
        global_batch=64,
        seq=2048,
        peak_flops=312e12,
        net=net,
        causal=False,
        impl="fused",
    )


def test_selective_recompute_priced_and_sp_switch() -> None:
    sel, no_sp = _gpt3_175b(True), _gpt3_175b(False)
    # 12 layers per stage x 4 B s^2 h / 8 TP ranks, 64 micro-batches, at the layer's GEMM efficiency: per GPU
    # q, k, v, o are 1536 wide on one side (0.62), the MLP's two 6144 (0.72), the MLP twice the FLOPs
    eff = 12 / (4 / 0.62 + 8 / 0.72)
    assert sel["gemm_efficiency"] == pytest.approx(eff, rel=1e-12)
    assert sel["recompute_s"] == pytest.approx(
        64 * 12 * 4 * 2048**2 * 12288 / 8 / (eff * 312e12), rel=1e-12
    )
    assert sel["recompute_s"] == pytest.approx(0.0928385542, rel=1e-8)
    assert (
        sel["tp_comm_s"] == no_sp["tp_comm_s"]
    )  # SP moves the same bytes; selective adds no collective
    assert sel["memory_s"] == pytest.approx(
        0.1517586829, rel=1e-8
    )  # replicated activations split over TP
    assert no_sp["memory_s"] == pytest.approx(0.5724411140, rel=1e-8)


def test_pipeline_sends_use_megatron_scatter_gather() -> None:
    net = make_net("a100-sxm-80gb", 8, "ib-hdr")
    nbytes = 2048 * 12288 * 2  # b s h bf16
    send, gather = net.time("p2p", nbytes / 8, 8, 8), net.time("all-gather", nbytes, 8, 1)
    # without SP: b s h / t over InfiniBand, then an NVLink all-gather; with SP no all-gather
    assert _gpt3_175b(False)["pp_comm_s"] == pytest.approx(64 * 2 * (send + gather), rel=1e-12)
    assert _gpt3_175b(True)["pp_comm_s"] == pytest.approx(64 * 2 * send, rel=1e-12)
    assert _gpt3_175b(True)["pp_comm_s"] == pytest.approx(0.0407639703, rel=1e-8)


def test_calibrated_selective_recompute_is_the_measured_attention_forward() -> None:
    from gpudoctor.core.hf_config import from_hf_config
    from gpudoctor.plan.calibration import load_calibration, microbatch_times

    spec = from_hf_config(LLAMA_1B, name="bench-llama")
    cal = load_calibration(BENCH, "h200")
    kw = {"global_batch": 8, "seq": 2048, "peak_flops": 989.4e12, "net": make_net("h200", 2, None)}
    r = predict_step(
        spec,
        Layout(dp=2, tp=1, pp=1, microbatch=4, checkpointing="selective"),
        **kw,
        calibration=cal,
    )
    t = microbatch_times(spec, cal, microbatch=4, seq=2048, tp=1, cp=1, layers=16, assumed_rate=0.0)
    assert r["recompute_s"] == pytest.approx(t.attention_fwd, rel=1e-12)
    # 16 x the SDPA forward at 2048 x 64: 2.91 ms (the one-GPU profile measured 3.03 ms of SDPA forward)
    assert r["recompute_s"] == pytest.approx(0.0029148160, rel=1e-8)


def test_planner_drops_selective_when_it_saves_no_memory() -> None:
    # with SDPA the attention core keeps nothing for backward: selective = none + recompute
    r = plan_training("llama-3.2-1b", gpus=8, gpu="h100-sxm", global_batch=64, seq=2048, top=200)
    assert r.plans and all(p.checkpointing != "selective" for p in r.plans)
    tp = [p for p in r.plans if p.tp > 1]
    assert tp and all(p.sp and "(SP)" in p.label for p in tp)
    off = plan_training(
        "llama-3.2-1b", gpus=8, gpu="h100-sxm", global_batch=64, seq=2048, top=200, sp=False
    )
    assert not any(p.sp for p in off.plans)


# ---------------------------------------------------------------------------------------------
# --bench with the kernel-kind probes: elementwise by kind, the optimizer step, compute under NCCL
# (gpudoctor bench --json on 2 x H200, 2026-11-22 06:18 UTC; collectives curves left out of the fixture)

BENCH_KINDS = (
    Path(__file__).parent / "data" / "bench" / "bench-2xh200-elementwise-2026-11-22.json.gz"
)


def test_every_hf_op_names_a_measured_kind() -> None:
    from gpudoctor.hardware.kinds import ELEMENTWISE_KINDS
    from gpudoctor.plan import traffic

    tables = [v for k, v in vars(traffic).items() if k.endswith("_OPS")]
    assert len(tables) == 15 and all(kind in ELEMENTWISE_KINDS for t in tables for _, _, kind in t)
    assert (
        traffic.RMSNORM_FWD,
        traffic.RMSNORM_BYTES,
        traffic.ROPE_FWD,
        traffic.ROPE_BYTES,
        traffic.LOSS_BYTES,
        traffic.SWIGLU_BYTES,
        traffic.LAYERNORM_BYTES,
    ) == (36, 128, 20, 54, 36, 28, 14)


def test_kind_rates_read_from_the_measured_bench() -> None:
    from gpudoctor.plan.calibration import load_calibration

    cal = load_calibration(BENCH_KINDS, "h200")
    tbs = {k: round(v / 1e12, 3) for k, v in cal.elementwise.items()}
    assert tbs == {
        "contiguous": 4.311,
        "rope": 1.206,
        "broadcast_heads": 1.616,
        "weight": 1.618,
        "rowscale": 2.666,
        "cast_up": 2.07,
        "cast_down": 4.285,
        "reduction": 4.153,
    }
    assert {k: round(v / 1e12, 3) for k, v in cal.optimizer.items()} == {
        "adamw_foreach": 3.021,
        "adamw_fused": 2.685,
    }
    o = cal.overlap
    assert (round(o.gemm, 4), round(o.memory, 4), round(o.allreduce, 4)) == (1.0939, 1.2144, 1.9556)
    assert o.compute(3.0, 1.0) == pytest.approx((3 * o.gemm + o.memory) / 4, rel=1e-15)
    assert cal.label.startswith(
        "calibrated: GEMM (M, N, K) grid, attention grid, elementwise rates by kind, "
        "optimizer step rates and compute under NCCL of "
    )


def test_measured_kinds_price_the_two_gpu_benchmark() -> None:
    """The 1.10 B Llama of benchmarks/bench_plan_ddp.py on the kind-calibrated bench: pinned numbers."""
    from gpudoctor.core.hf_config import from_hf_config
    from gpudoctor.plan.calibration import load_calibration
    from gpudoctor.plan.traffic import elementwise_kinds, implementation

    spec = from_hf_config(LLAMA_1B, name="bench-llama")
    kw = {
        "global_batch": 8,
        "seq": 2048,
        "peak_flops": 989.4e12,
        "net": make_net("h200", 2, None),
        "hbm_bytes_per_s": 4.8e12,
    }
    cal = load_calibration(BENCH_KINDS, "h200")
    lay = Layout(dp=2, tp=1, pp=1, microbatch=4)
    by_kind = elementwise_kinds(spec, lay, 2048, 16, implementation("eager-hf"))
    per_element = {
        k: v / (8192 * 2048) for k, v in by_kind.items()
    }  # bytes per (token x hidden) element
    assert per_element == {
        "cast_up": 489.75,
        "contiguous": 5038.3125,
        "reduction": 642.5,
        "rowscale": 660.0,
        "cast_down": 489.75,
        "weight": 264.0,
        "rope": 552.0,
        "broadcast_heads": 240.0,
    }
    r = predict_step(spec, lay, **kw, calibration=cal)
    assert r["memory_s"] == pytest.approx(
        sum(b / cal.elementwise[k] for k, b in by_kind.items()), rel=1e-12
    )
    assert r["memory_s"] == pytest.approx(0.04514831625, rel=1e-8)
    assert r["optimizer_s"] == pytest.approx(
        1104218112 * 40 / cal.optimizer["adamw_foreach"], rel=1e-12
    )
    assert r["overlap_s"] == pytest.approx(0.001663547973, rel=1e-8)
    assert r["dp_comm_s"] == pytest.approx(0.000379288889, rel=1e-9)  # the last bucket runs alone
    assert r["step_s"] == pytest.approx(0.1441253623, rel=1e-8)
    fsdp = predict_step(spec, replace(lay, zero=3), **kw, calibration=cal)
    assert fsdp["optimizer_s"] == pytest.approx(r["optimizer_s"] / 2, rel=1e-12)
    assert (fsdp["overlap_s"], fsdp["zero_comm_s"]) == (
        pytest.approx(0.002305847628, rel=1e-8),
        pytest.approx(0.0006105136, rel=1e-8),
    )
    assert fsdp["step_s"] == pytest.approx(0.1402033244, rel=1e-8)
    one = predict_step(spec, replace(lay, dp=1), **{**kw, "global_batch": 4}, calibration=cal)
    assert one["overlap_s"] == 0.0 and one["step_s"] == pytest.approx(0.1400710187, rel=1e-8)
    fused = predict_step(
        spec, lay, **kw, calibration=cal, impl="fused"
    )  # its kernels stay at the HBM rate
    assert fused["memory_s"] == pytest.approx(0.01405103295, rel=1e-8)
    assert fused["optimizer_s"] == pytest.approx(
        1104218112 * 36 / cal.optimizer["adamw_fused"], rel=1e-12
    )


def test_without_the_kind_sections_the_step_is_priced_as_before(tmp_path: Path) -> None:
    import gzip

    from gpudoctor.core.hf_config import from_hf_config
    from gpudoctor.plan.calibration import load_calibration

    data = json.loads(gzip.decompress(BENCH_KINDS.read_bytes()))
    spec = from_hf_config(LLAMA_1B, name="bench-llama")
    kw = {"global_batch": 8, "seq": 2048, "peak_flops": 989.4e12, "net": make_net("h200", 2, None)}
    for empty in (None, {}):
        stripped = {
            k: v for k, v in data.items() if k not in ("elementwise", "optimizer", "overlap")
        }
        if empty is not None:
            stripped.update(elementwise={}, optimizer={}, overlap={"skipped": "one GPU"})
        path = tmp_path / "b.json"
        path.write_text(json.dumps(stripped))
        cal = load_calibration(path, "h200")
        assert (cal.elementwise, cal.optimizer, cal.overlap) == (None, None, None)
        r = predict_step(spec, Layout(dp=2, tp=1, pp=1, microbatch=4), **kw, calibration=cal)
        assert r["memory_s"] == pytest.approx(
            (16 * 479.5 * 8192 * 2048 + 11816402944) / cal.hbm_bytes_per_s, rel=1e-12
        )
        assert r["optimizer_s"] == pytest.approx(1104218112 * 40 / cal.hbm_bytes_per_s, rel=1e-12)
        assert r["overlap_s"] == 0.0 and r["dp_comm_s"] == pytest.approx(0.000379288889, rel=1e-9)


@pytest.mark.parametrize(
    "section, value, match",
    [
        (
            "elementwise",
            {"error": "RuntimeError: CUDA out of memory"},
            r"its 'elementwise' section holds no rates \(RuntimeError: CUDA out of memory\)",
        ),
        (
            "elementwise",
            "drop rope",
            r"the 'elementwise' section is incomplete \(1 of 8 rows lack a positive bytes_per_s, e.g. 'rope'\)",
        ),
        (
            "optimizer",
            "drop adamw_fused",
            r"the 'optimizer' section is incomplete \(1 of 2 rows lack a positive bytes_per_s, e.g. 'adamw_fused'\)",
        ),
        (
            "overlap",
            {"gemm_slowdown": "fast", "memory_slowdown": 1.2, "allreduce_slowdown": 1.9},
            r"the 'overlap' section lacks a slowdown between 0 and 100 for 'gemm_slowdown' \(got 'fast'\)",
        ),
        (
            "overlap",
            {"error": "torchrun failed (1): NCCL error"},
            r"its 'overlap' section holds no slowdowns",
        ),
    ],
)
def test_incomplete_kind_sections(tmp_path: Path, section: str, value, match: str) -> None:
    import gzip

    from gpudoctor.plan.calibration import load_calibration

    data = json.loads(gzip.decompress(BENCH_KINDS.read_bytes()))
    if isinstance(value, str):
        del data[section]["rows"][value.removeprefix("drop ")]
    else:
        data[section] = value
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=match):
        load_calibration(path, "h200")
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpudoctor",
            "plan",
            "train",
            "llama-3.2-1b",
            "--gpus",
            "2",
            "--global-batch",
            "8",
            "--seq",
            "2048",
            "--gpus-per-node",
            "2",
            "--gpu",
            "h200",
            "--bench",
            str(path),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 2 and cli.stdout == "" and len(cli.stderr.strip().splitlines()) == 1


def test_gemm_efficiency_classes_each_gemm_by_its_narrower_side() -> None:
    from gpudoctor.plan.train import gemm_efficiency

    spec = gpt3_like()  # hidden 12288, MLP 4 x hidden, MHA
    assert gemm_efficiency(spec, 1, 2048) == pytest.approx(
        0.72, rel=1e-12
    )  # every GEMM >= 4096 on both sides
    # TP 16: attention GEMMs 768 on one side (0.52), MLP 3072 (0.68)
    assert gemm_efficiency(spec, 16, 2048) == pytest.approx(12 / (4 / 0.52 + 8 / 0.68), rel=1e-12)
    # short micro-batches scale it down
    assert gemm_efficiency(spec, 1, 512) == pytest.approx(0.72 * 512 / 1024, rel=1e-12)


def test_fused_noflash_moves_the_materialized_scores() -> None:
    """Megatron before flash attention keeps 5 a s^2 b bytes per layer (Korthikanti et al. 2022 eq. 1:
    fp16 softmax output, 1-byte dropout mask, fp16 dropout output): 4 passes over them, one more when
    recomputed (full) or rewritten by the recomputation (selective)."""
    from gpudoctor.plan.traffic import elementwise_bytes, implementation

    spec = dataclasses.replace(gpt3_like(), attn_dropout=0.1)
    heads_per_gpu, s = spec.heads // 8, 2048
    scores = 5 * heads_per_gpu * s * s  # one sequence
    for ckpt, passes in (("none", 4), ("selective", 5), ("full", 5)):
        lay = Layout(dp=1, tp=8, pp=8, microbatch=1, checkpointing=ckpt, sp=True)
        flash = elementwise_bytes(spec, lay, s, 12, implementation("fused"))
        noflash = elementwise_bytes(spec, lay, s, 12, implementation("fused-noflash"))
        # the eager path also keeps q, k, v and the output per head where flash keeps its own four
        assert noflash - flash == pytest.approx(12 * passes * scores, rel=0.02), ckpt


MEMORY_ARGS = (
    "memory",
    "llama-3.1-8b",
    "--batch",
    "1",
    "--seq",
    "512",
    "--dp",
    "8",
    "--zero",
    "3",
    "--gpu",
    "h100-sxm",
)
PLAN_ARGS = (
    "plan",
    "train",
    "llama-3.1-8b",
    "--gpus",
    "8",
    "--global-batch",
    "8",
    "--seq",
    "512",
    "--dp",
    "8",
    "--tp",
    "1",
    "--pp",
    "1",
    "--zero",
    "3",
    "--microbatch",
    "1",
    "--checkpointing",
    "none",
)


@pytest.mark.parametrize(
    "precision",
    [
        (),
        ("--master-weights",),
        ("--optimizer", "sgd-momentum"),
        ("--params-dtype", "fp32", "--autocast", "bf16"),
    ],
)
def test_memory_and_plan_train_give_one_number_for_one_layout(precision) -> None:
    from test_cli import gd

    mem = gd(*MEMORY_ARGS, *precision, "--json")
    plan = gd(*PLAN_ARGS, *precision, "--json")
    assert mem.returncode == 0, mem.stderr
    assert plan.returncode == 0, plan.stderr
    m, p = json.loads(mem.stdout), json.loads(plan.stdout)
    assert p["plans"][0]["peak_bytes"] == m["peak_bytes"]
    assert p["plans"][0]["total_bytes"] == m["total_bytes"]
    assert p["memory_model"] == m["assumptions"][0]  # the same precision line in both


def test_both_commands_print_the_precision_they_assumed() -> None:
    from test_cli import gd

    line = "bf16 weights and gradients, bf16 AdamW states (2 per parameter), no master copy: 8 bytes/parameter"
    mem = " ".join(gd(*MEMORY_ARGS, "--width", "300").stdout.split())
    plan = " ".join(gd(*PLAN_ARGS, "--width", "300").stdout.split())
    assert "peak allocated 10.30 GiB" in mem and "10.3 GiB" in plan
    assert f"assumed: {line}" in mem and f"memory: {line}" in plan
    mixed = " ".join(gd(*PLAN_ARGS, "--master-weights", "--width", "300").stdout.split())
    assert (
        "18.76 GiB" in mixed
        and "fp32 AdamW states (2 per parameter) + fp32 master weights: 16 bytes" in mixed
    )


def test_plan_train_refuses_a_bad_precision_option_in_one_line() -> None:
    from test_cli import gd

    out = gd(*PLAN_ARGS, "--optimizer", "lion")
    assert out.returncode == 2
    assert (
        "--optimizer 'lion' is not one of: adamw, adamw8bit, sgd, sgd-momentum, adafactor"
        in out.stderr
    )
    assert "Traceback" not in out.stderr
