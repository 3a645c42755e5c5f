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
    assert o.decode_step_s == pytest.approx((o.weights_bytes_per_gpu + c * 1100 * kv) / bw, rel=1e-9)
    assert o.tokens_per_s_per_user == pytest.approx(1 / o.decode_step_s)


def test_more_load_means_slower_decode_and_more_tp_serves_more():
    low = plan_serving("llama-3.1-70b", gpu="h100-sxm", qps=4, prompt=1024, new=256, weights_dtype="fp8")
    high = plan_serving("llama-3.1-70b", gpu="h100-sxm", qps=16, prompt=1024, new=256, weights_dtype="fp8")
    tp8_low = next(o for o in low.options if o.tp == 8)
    tp8_high = next(o for o in high.options if o.tp == 8)
    assert tp8_high.tokens_per_s_per_user < tp8_low.tokens_per_s_per_user  # the seed's collapse, in kind
    sats = [o.saturation_qps for o in high.options]
    assert sats == sorted(sats)
    assert high.choice is not None and high.choice >= low.choice
    tp1 = next(o for o in low.options if o.tp == 1)
    assert not tp1.meets_qps and tp1.limited_by == "kv-cache"  # 70B fp8 on one GPU: a few sequences fit


def test_bad_input_and_cli():
    with pytest.raises(InputError, match="--qps must be a positive number"):
        plan_serving("llama-3.1-8b", gpu="h100-sxm", qps=0, prompt=10, new=10)
    with pytest.raises(InputError, match="unknown --gpu"):
        plan_serving("llama-3.1-8b", gpu="voodoo", qps=1, prompt=10, new=10)
    out = gd("plan", "infer", "llama-3.1-8b", "--qps", "8", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["choice_tp"] in (1, 2, 4, 8) and {"max_sequences", "saturation_qps"} <= set(data["options"][0])
