"""The eight seed-004 scenarios, written from the seed's numbers: each yields the seed's target
diagnosis as the top hypothesis, with the seed's fix order and the wrong fix named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpudoctor.errors import InputError
from gpudoctor.explain import explain_paths

SCENARIOS = Path(__file__).parent / "data" / "explain" / "scenarios"


def top(name: str):
    ex = explain_paths([SCENARIOS / name])
    return ex.hypotheses[0][1], ex


def test_1_slow_gemm_tensor_cores_first_never_occupancy():
    h, ex = top("01_slow_gemm.json")
    assert h.id == "tensor-cores-idle"
    titles = [f.title for f in h.fixes]
    assert titles[0].startswith("Use tensor-core instructions: wgmma")
    assert (
        "asynchronous copies" in titles[1]
        and "register pressure" in titles[2]
        and "swizzled" in titles[3]
    )
    assert "occupancy" in h.wrong_fix.lower()
    assert (
        h.evidence.numbers["tensor_pipe_pct"] == 12
        and h.evidence.numbers["reference_tflops"] == 650
    )
    ids = [x.id for _, x in ex.hypotheses]
    assert ids.index("occupancy-limited") > ids.index("tensor-cores-idle")


def test_2_mfu_collapse_hardware_first():
    h, ex = top("02_mfu_collapse.json")
    assert h.id == "straggler"
    assert [x.id for _, x in ex.hypotheses] == [
        "straggler",
        "dataloader-stall",
        "checkpoint-stall",
        "network-fabric",
    ]
    assert "Code-level changes" in h.wrong_fix
    assert h.evidence.numbers["step_time_factor"] == pytest.approx(2.18, abs=0.01)


def test_3_serving_decode_memory_bound():
    h, ex = top("03_serving_collapse.json")
    assert h.id == "decode-memory-bound"
    assert h.fixes[0].title.startswith("Chunked prefill") and "KV-budget" in h.fixes[1].title
    assert "Speculative decoding" in h.fixes[2].title
    assert "adding GPUs" in h.wrong_fix
    n = h.evidence.numbers
    assert n["weights_per_gpu_GB"] == 8.75 and n["weight_read_ms_per_step"] == pytest.approx(
        2.61, abs=0.01
    )
    assert n["decode_step_ms_high"] == pytest.approx(45.45, abs=0.01)
    assert "prefill-contention" in [x.id for _, x in ex.hypotheses]


def test_4_fp8_saturation():
    h, _ = top("04_fp8_long_context.json")
    assert h.id == "fp8-saturation"
    assert h.fixes[0].title.startswith("Recalibrate") and "MXFP8" in h.fixes[1].title
    assert h.evidence.numbers["fp8_max"] == 448
    assert "calibration set" in h.wrong_fix


def test_5_oom_at_tp4():
    h, _ = top("05_oom_tp4.json")
    assert h.id == "tp-activation-peak"
    n = h.evidence.numbers
    assert n["peak_GB_fails"] > n["peak_GB_works"]
    assert n["optimizer_states_GB_fails"] == n["optimizer_states_GB_works"]  # not the cause
    assert n["attention_scores_GB_per_layer_fails"] == 12.9  # 1 x 32 heads x 8192^2 x 6 bytes
    assert n["attention_scores_GB_per_layer_works"] == 6.4
    assert h.fixes[0].title.startswith("Sequence parallelism") and h.fixes[1].title.startswith(
        "FlashAttention"
    )
    assert "More activation checkpointing" in h.wrong_fix


def test_7_triton_autotune():
    h, _ = top("07_triton_autotune.json")
    assert h.id == "autotune-space"
    assert h.evidence.numbers["block_k"] == [32] and h.evidence.numbers["num_stages"] == [2]
    assert h.fixes[0].title.startswith("Widen the grid") and "wgmma" in h.fixes[1].title
    assert "Blaming Triton" in h.wrong_fix


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"scenario": "teleport"}', "scenario 'teleport' is not one of"),
        ('{"no": 1}', "a scenario is an object with a 'scenario' key"),
        (
            '{"scenario": "serving", "model_params_b": 70, "load": [{"qps": 4, "tok_s_per_user": 1}]}',
            "'load' needs at least two points",
        ),
        (
            '{"scenario": "fp8-regression", "long_task": {"seq": 1}}',
            "needs numbers 'fp8' and 'bf16'",
        ),
        (
            '{"scenario": "kernel", "kernel": {"warp_speed": 9}}',
            "unknown kernel field(s) warp_speed",
        ),
        ("{broken", "not valid JSON"),
    ],
)
def test_bad_scenarios_are_one_line_errors(tmp_path, content, message):
    f = tmp_path / "s.json"
    f.write_text(content)
    with pytest.raises(InputError) as info:
        explain_paths([f])
    assert message in str(info.value)


def test_json_output_is_ranked_with_ids(tmp_path):
    ex = explain_paths([SCENARIOS / "01_slow_gemm.json", SCENARIOS / "04_fp8_long_context.json"])
    data = json.loads(json.dumps(ex.to_dict()))
    assert data["schema"] == "gpudoctor.explain/1"
    assert [h["id"] for h in data["hypotheses"]][:1] == ["tensor-cores-idle"]
    assert all("confidence" in h and "fixes" in h and "check_next" in h for h in data["hypotheses"])


def test_6_allreduce_cliff_at_512():
    h, _ = top("06_allreduce_cliff.json")
    assert h.id == "topology-cliff"
    assert h.evidence.numbers["cliff_gpus"] == 512 and h.evidence.numbers["expected_ms"] == 53.077
    assert h.evidence.numbers["expected_from"].startswith(
        "ring model fitted"
    )  # the seed names no machine
    titles = [f.title for f in h.fixes]
    assert titles[0].startswith("Tree or hierarchical all-reduce")
    assert "double binary tree" in titles[1].lower()
    assert "overlap" in titles[2].lower() and "accumulation" in titles[3].lower()
    assert "ZeRO" in h.wrong_fix


def test_8_pipeline_bubble_imbalance_first():
    h, _ = top("08_pipeline_bubble.json")
    assert h.id == "pipeline-imbalance"
    n = h.evidence.numbers
    assert n["expected_1f1b"] == 0.2188 and n["expected_interleaved"] == 0.1094  # 7/32 and 7/64
    assert n["schedule"] == "interleaved"  # the seed's "interleaved-1f1b"
    titles = [f.title.lower() for f in h.fixes]
    assert titles[0].startswith("rebalance the partition")
    assert "virtual" in titles[1] and "micro-batches" in titles[2] and "zero-bubble" in titles[3]
    assert "formula" in h.wrong_fix.lower()


def test_real_nvidia_smi_is_healthy():
    data = Path(__file__).parent / "data" / "explain"
    ex = explain_paths([data / "nvidia_smi_q.txt", data / "nvidia_smi_query.csv"])
    assert [s.kind for s in ex.sources] == ["nvidia-smi", "nvidia-smi"]
    assert ex.hypotheses[0][1].id == "gpu-healthy"
    assert all(h.id in ("gpu-healthy", "ecc-errors") for _, h in ex.hypotheses)
    assert all((h.confidence or 0) < 0.5 for _, h in ex.hypotheses if h.id == "ecc-errors")
