"""plan infer: the serving sizing model (decode memory-bound, prefill compute-bound, Little's law)."""

from __future__ import annotations

import json

import pytest
from test_cli import gd

from gpudoctor.errors import InputError
from gpudoctor.plan.infer import DECODE_HBM_EFFICIENCY, plan_serving


def test_decode_step_is_weights_plus_kv_over_bandwidth():
    plan = plan_serving("llama-3.1-8b", gpu="h100-sxm", qps=1, prompt=1000, new=200)
    o = plan.options[0]  # TP=1
    from gpudoctor.hardware.specs import find_spec

    bw = find_spec("h100-sxm").hbm_bytes_per_s * DECODE_HBM_EFFICIENCY
    kv = 32 * 2 * 8 * 128 * 2  # bytes per token: 32 layers, K and V, 8 KV heads of 128, bf16
    c = max(o.concurrency, 1.0)
    # a step reads every weight but the input embedding table (128256 x 4096 bf16; untied in Llama 3.1 8B)
    streamed = o.weights_bytes_per_gpu - 128256 * 4096 * 2
    assert o.decode_step_s == pytest.approx((streamed + c * 1100 * kv) / bw, rel=1e-9)
    assert o.tokens_per_s_per_user == pytest.approx(1 / o.decode_step_s)


def test_more_load_means_slower_decode_and_more_tp_serves_more():
    low = plan_serving(
        "llama-3.1-70b", gpu="h100-sxm", qps=4, prompt=1024, new=256, weights_dtype="fp8"
    )
    high = plan_serving(
        "llama-3.1-70b", gpu="h100-sxm", qps=16, prompt=1024, new=256, weights_dtype="fp8"
    )
    tp8_low = next(o for o in low.options if o.tp == 8)
    tp8_high = next(o for o in high.options if o.tp == 8)
    assert (
        tp8_high.tokens_per_s_per_user < tp8_low.tokens_per_s_per_user
    )  # the seed's collapse, in kind
    sats = [o.saturation_qps for o in high.options]
    assert sats == sorted(sats)
    assert high.choice is not None and high.choice >= low.choice
    tp1 = next(o for o in low.options if o.tp == 1)
    assert (
        not tp1.meets_qps and tp1.limited_by == "kv-cache"
    )  # 70B fp8 on one GPU: a few sequences fit


def test_bad_input_and_cli():
    with pytest.raises(InputError, match="--qps must be a positive number"):
        plan_serving("llama-3.1-8b", gpu="h100-sxm", qps=0, prompt=10, new=10)
    with pytest.raises(InputError, match="unknown --gpu"):
        plan_serving("llama-3.1-8b", gpu="voodoo", qps=1, prompt=10, new=10)
    out = gd("plan", "infer", "llama-3.1-8b", "--qps", "8", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["choice_tp"] in (1, 2, 4, 8) and {"max_sequences", "saturation_qps"} <= set(
        data["options"][0]
    )


def test_a_tied_table_is_streamed_as_the_head():
    from gpudoctor.memory import load_spec
    from gpudoctor.memory.inference import weight_bytes
    from gpudoctor.memory.options import InferOptions
    from gpudoctor.plan.infer import streamed_weight_bytes

    tied = load_spec("llama-3.2-1b")  # tie_word_embeddings: the head is the embedding table
    o = InferOptions(batch=1, prompt=16, new=16)
    assert tied.tied_embeddings and streamed_weight_bytes(tied, o) == weight_bytes(tied, o)


def test_decode_and_prefill_against_the_h100_measurements(capsys):
    """benchmarks/results/plan_infer_h100_2026-11-24.json: CUDA-graphed decode steps and prefills on one
    H100. DECODE_HBM_EFFICIENCY was read off llama-3.1-8b's rows; the 7B models are held out."""
    from pathlib import Path

    from script_module import load

    root = Path(__file__).parent.parent
    bench = load("bench_plan_infer")
    rows = bench.predict(root / "benchmarks" / "results" / "plan_infer_h100_2026-11-24.json")
    capsys.readouterr()
    assert len(rows) == 4 * (8 + 3)
    decode_7b = [r for r in rows[: 3 * 11] if r["kind"] == "decode"]
    assert max(abs(r["error"]) for r in decode_7b) < 0.08
    prefill_7b = [r for r in rows[: 3 * 11] if r["kind"] == "prefill"]
    assert max(abs(r["error"]) for r in prefill_7b) < 0.15
    # the 3B model's single-sequence steps are slower than the model says (small GEMVs: fixed cost per kernel)
    small = [r for r in rows[3 * 11 :] if r["kind"] == "decode" and r["shape"].startswith("B=1 ")]
    assert all(-0.25 < r["error"] < -0.15 for r in small)


def test_a_tp_degree_that_holds_no_request_prints_no_speed():
    # Llama 3.1 8B's bf16 weights (15 GiB) on one 16 GB V100: not one request fits at TP=1
    plan = plan_serving("llama-3.1-8b", gpu="v100-sxm2-16gb", qps=5, prompt=1024, new=256)
    tp1 = plan.options[0]
    assert (tp1.tp, tp1.fits, tp1.max_sequences, tp1.limited_by) == (1, False, 0, "no-fit")
    assert (
        tp1.tokens_per_s_per_user is None and tp1.concurrency is None and tp1.decode_step_s is None
    )
    assert tp1.saturation_qps == 0.0 and not tp1.meets_qps
    assert plan.explanation.startswith(
        "TP=1 does not fit: its weights alone take 15 GiB per GPU, more than the 13.7 GiB an engine has; "
        "what would: more GPUs (a larger TP) or narrower weights (--weights-dtype int8 or int4)."
    )  # no fp8 on a V100
    out = gd(
        "plan", "infer", "llama-3.1-8b", "--gpu", "v100-sxm2-16gb", "--qps", "5", "--width", "200"
    )
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.split()[:1] == ["1"])
    assert row.split() == ["1", "15.0", "0.0", "0", "-", "-", "-", "-", "-", "no", "fit"]
    js = json.loads(
        gd(
            "plan", "infer", "llama-3.1-8b", "--gpu", "v100-sxm2-16gb", "--qps", "5", "--json"
        ).stdout
    )
    assert js["options"][0]["tokens_per_s_per_user"] is None and js["options"][0]["why_not"]


def test_a_kv_cache_that_does_not_fit_says_what_context_would():
    plan = plan_serving("llama-3.1-8b", gpu="l4", qps=0.1, prompt=60000, new=1000)
    assert plan.explanation.startswith(
        "TP=1 does not fit: one request's KV cache (61,000 tokens) takes 7.4 GiB per GPU, more than the 6 GiB left "
        "after the weights; what would: a larger TP, a context of at most 48,936 tokens (--prompt + --new), "
        "or --kv-dtype fp8."
    )


def test_plan_infer_takes_width():
    out = gd("plan", "infer", "llama-3.1-8b", "--qps", "1", "--width", "200")
    assert out.returncode == 0, out.stderr
    assert (
        max(len(line) for line in out.stdout.splitlines()) > 120
    )  # one line, not wrapped at 80 or 120
    bad = gd("plan", "infer", "llama-3.1-8b", "--qps", "1", "--width", "5")
    assert bad.returncode == 2 and "--width" in bad.stderr
