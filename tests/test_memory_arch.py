"""``gpudoctor memory`` against the H100 sweep of every model type it accepts (issue 21).

The measured peaks are ``benchmarks/results/memory-arch-h100-2026-11-25.json`` (torch 2.11,
transformers 5.17, ``bench_memory.py measure OUT --arch``): bf16 + AdamW, fp32 parameters + bf16
autocast, full checkpointing and generation for each of the twelve model types.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from test_cli import gd

from gpudoctor.core.hf_config import from_hf_config
from gpudoctor.memory import estimate_from_options
from gpudoctor.memory.accuracy import KNOWN_MISSES, accuracy_note
from gpudoctor.memory.activations import Workload, attention_kind, head_memory, layer_memory

RESULTS = (
    Path(__file__).parent.parent / "benchmarks" / "results" / "memory-arch-h100-2026-11-25.json"
)
RUNS = [
    r
    for r in json.loads(RESULTS.read_text())
    if "peak_bytes" in r and r["name"].startswith("arch-")
]
MODEL_TYPES = {
    "llama",
    "mistral",
    "qwen2",
    "gemma",
    "gemma2",
    "gpt2",
    "gpt_neox",
    "mixtral",
    "deepseek_v2",
    "deepseek_v3",
    "qwen2_moe",
    "phi3",
}


def _error(run: dict) -> tuple[str, str, float]:
    spec = from_hf_config(run["config"], name=run["name"])
    est = estimate_from_options(spec, infer=run["infer"], **run["opts"])
    mode = "infer" if run["infer"] else "train"
    return spec.family, mode, (est.peak_bytes - run["peak_bytes"]) / run["peak_bytes"]


ERRORS = {run["name"]: _error(run) for run in RUNS}


def test_the_sweep_covers_every_model_type_in_the_four_settings():
    settings: dict[str, set[str]] = {}
    for run in RUNS:
        settings.setdefault(run["config"]["model_type"], set()).add(run["name"].rsplit("-", 1)[-1])
    assert set(settings) == MODEL_TYPES
    assert all(s == {"bf16", "autocast", "ckpt", "gen"} for s in settings.values()), settings


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_each_case_within_5_percent_unless_its_miss_is_noted(name):
    family, mode, err = ERRORS[name]
    bound = abs(KNOWN_MISSES.get((family, mode), 0.05))
    assert abs(err) <= bound + 5e-4, f"{name}: {100 * err:+.2f}%"


def test_median_error_within_1_percent():
    assert statistics.median(abs(e) for _, _, e in ERRORS.values()) < 0.01


def test_every_noted_miss_is_the_measured_worst_case_and_outside_5_percent():
    for (family, mode), noted in KNOWN_MISSES.items():
        errs = [e for f, m, e in ERRORS.values() if (f, m) == (family, mode)]
        worst = max(errs, key=abs)
        assert abs(noted) > 0.05
        assert round(worst, 3) == noted, (family, mode, worst)


def test_no_model_type_carries_an_accuracy_note_any_more(tmp_path):
    # Mixtral (-5.5%) and DeepSeek-V2's shape (+13.2%) were the last generation cases outside 5%
    assert KNOWN_MISSES == {}
    runs = {r["name"]: r for r in RUNS}
    for name in ("arch-mixtral-gen", "arch-deepseek-v2-gen"):
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps(runs[name]["config"]))
        out = gd(
            "memory",
            str(cfg),
            "--infer",
            "--batch",
            "8",
            "--prompt",
            "512",
            "--new",
            "64",
            "--width",
            "200",
        )
        assert out.returncode == 0, out.stderr
        assert "accuracy" not in out.stdout and "±" not in out.stdout, out.stdout


def test_a_noted_miss_is_printed_with_its_measured_error(monkeypatch):
    import io

    from rich.console import Console

    from gpudoctor.memory import accuracy
    from gpudoctor.report.memory import render_console

    monkeypatch.setitem(accuracy.KNOWN_MISSES, ("deepseek", "infer"), 0.132)
    run = next(r for r in RUNS if r["name"] == "arch-deepseek-v2-gen")
    est = estimate_from_options(from_hf_config(run["config"]), infer=True, **run["opts"])
    assert est.extra["measured_error"] == 0.132
    buf = io.StringIO()
    render_console(est, Console(file=buf, width=200))
    assert "±13% (measured, see the accuracy note)" in buf.getvalue()
    assert "the prediction was up to 13.2% above the peak measured on an H100" in buf.getvalue()
    assert accuracy_note("llama", "infer") is None


def _spec(model_type: str, **override):
    run = next(r for r in RUNS if r["config"]["model_type"] == model_type)
    return from_hf_config({**run["config"], **override})


def test_gemma2_final_softcap_keeps_the_tanh_output_over_the_vocabulary():
    w = Workload(batch=2, seq=1024)
    assert head_memory(_spec("gemma2"), w).saved["logit_softcap"] == 2 * 2048 * 256000
    assert (
        "logit_softcap" not in head_memory(_spec("gemma2", final_logit_softcapping=None), w).saved
    )


def test_gemma2_eager_keeps_the_tanh_of_the_scores():
    spec = _spec("gemma2")
    # the attention asked for is the one priced (SDPA too: transformers 5.17 runs Gemma 2 under it)
    assert [attention_kind(spec, a) for a in ("sdpa", "flash", "eager")] == [
        "sdpa",
        "flash",
        "eager",
    ]
    lm = layer_memory(spec, Workload(batch=1, seq=512, attention="eager"))
    probs = 4 * 512 * 512  # heads x seq x seq
    assert (
        lm.saved["attention_scores"] == (4 + 2 + 2) * probs
    )  # fp32 softmax, its bf16 copy, tanh out
    # four norms: two pre-norms (fp32 in, fp32 normalised, bf16 out), two post-norms (no out kept)
    th = 512 * 1152
    assert lm.saved["norms"] == 2 * (8 + 2) * th + 2 * 8 * th


def test_phi3_keeps_the_fused_qkv_the_rotated_q_and_k_and_one_more_kv_copy():
    lm = layer_memory(_spec("phi3"), Workload(batch=1, seq=1024))
    # qkv 3072 wide, output 1024, rotated q and k 2048, the extra copy 1024, the logsumexp
    assert lm.saved["attention"] == 2 * 1024 * (3072 + 1024 + 2048 + 1024) + 4 * 16 * 1024


def test_moe_prefill_counts_the_combine_rows_and_the_shared_expert_output():
    est = estimate_from_options(
        _spec("qwen2_moe"), infer=True, batch=8, prompt=512, new=64, attention="sdpa"
    )
    t, h = 8 * 512, 1024
    routed = (
        2 * (4 * t) * max(h + 4 * 704, 4 * h)
    )  # 4 hidden-sized rows per routed row at the combine
    mlp = max(routed, 3 * 2 * t * 2816) + 2 * t * h
    assert est.breakdown["activations"] == mlp + 4 * 2 * t * h + 2 * 2 * t * 64 + 8 * 32000 * 6


def test_a_sliding_window_costs_a_mask_only_once_the_sequence_reaches_it():
    spec = _spec("mistral")  # window 4096, 16 heads, 4 KV heads of 64
    short = layer_memory(spec, Workload(batch=1, seq=1024)).saved["attention"]
    assert (
        short == 2 * 2 * 1024 * 1024 + 2 * 2 * 1024 * 256 + 4 * 16 * 1024
    )  # q, out; k, v; logsumexp
    full = layer_memory(spec, Workload(batch=1, seq=4096)).saved["attention"]
    assert full == 4 * 2 * 4096 * 1024 + 2 * 4096 * 4096 + 4 * 16 * 4096  # K/V repeated, the mask


def test_the_bench_lists_the_arch_sweep():
    import subprocess
    import sys

    bench = Path(__file__).parent.parent / "benchmarks" / "bench_memory.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--list", "--arch"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    rows = [line.split() for line in out.stdout.splitlines()]
    assert len(rows) == 48 and {r[1] for r in rows} == MODEL_TYPES
    assert sum(r[2] == "generate" for r in rows) == 12


PHASES = RESULTS.parent / "memory-arch-gen-phases-h100-2026-11-25.json"


@pytest.mark.parametrize(
    "run", [r for r in json.loads(PHASES.read_text()) if "phases" in r], ids=lambda r: r["name"]
)
def test_each_generation_phase_of_the_moe_cases_within_1_percent(run):
    # the rerun measured the prefill's and the decode's peak apart: both phases must be right,
    # not only the larger one
    est = estimate_from_options(from_hf_config(run["config"]), infer=True, **run["opts"])
    for phase, key in (("prefill", "prefill_peak"), ("decode", "decode_peak")):
        measured = run["phases"][key]
        assert abs(est.phases[phase] - measured) / measured < 0.01, (
            phase,
            est.phases[phase],
            measured,
        )


def test_mixtral_decode_holds_each_routed_rows_gathered_expert_weights():
    # generate switches the experts to batched_mm for decoding: gate_up_proj[expert_ids] and
    # down_proj[expert_ids] for batch 8 x top-2 rows, each expert 3 x 3584 x 1024 bf16 weights
    est = estimate_from_options(
        _spec("mixtral"), infer=True, batch=8, prompt=512, new=64, attention="sdpa"
    )
    assert est.phase == "decode"
    assert est.breakdown["transient"] == 8 * 2 * 3 * 3584 * 1024 * 2 == 352_321_536
    kv = 4 * 2 * 4 * 64 * 2 * 8 * 576  # layers, K and V, KV heads, head dim, bf16, batch, context
    scratch = 8 * 32000 * 6 + 8 * 8 * 1024 * 2
    assert est.peak_bytes == est.breakdown["weights"] + 33_554_432 + kv + 352_321_536 + scratch
    assert any(
        "copying each routed row's expert weights (0.33 GiB at batch 8 x top-2)" in n
        for n in est.notes
    )
    # a serving engine (paged cache) runs its own fused MoE kernels: no gather
    paged = estimate_from_options(
        _spec("mixtral"), infer=True, batch=8, prompt=512, new=64, paged_block=16
    )
    assert paged.breakdown.get("transient", 0) == 0 and not any(
        "batched_mm" in n for n in paged.notes
    )


def test_mla_caches_the_latent_not_per_head_k_and_v():
    from gpudoctor.memory.inference import kv_bytes_per_token
    from gpudoctor.memory.options import InferOptions

    spec = _spec("deepseek_v2")  # kv_lora_rank 512, rope 64, 4 layers
    for o in (InferOptions(), InferOptions(paged_block=16), InferOptions(tp=2)):
        assert kv_bytes_per_token(spec, o) == 4 * (512 + 64) * 2


def test_deepseek_prefill_peaks_at_the_fp32_combine_of_the_routed_rows():
    est = estimate_from_options(
        _spec("deepseek_v2"), infer=True, batch=8, prompt=512, new=64, attention="sdpa"
    )
    t, h = 8 * 512, 1024
    # per routed row: gathered input and expert output in bf16, the weighted output and its
    # un-permuted copy in fp32 (the router's top-k weights are fp32); top-4
    routed = 4 * t * (2 * 2 * h + 2 * 4 * h)
    assert routed > 4 * t * 2 * (h + 4 * 512)  # wider than the gathered input and four widths
    hidden = 4 * 2 * t * h
    rope = 2 * 2 * t * 64
    logits = 8 * 32000 * 6
    assert est.phase == "prefill"
    assert est.breakdown["activations"] == routed + hidden + rope + logits
    assert est.breakdown["kv_cache"] == 8 * 512 * 4 * (512 + 64) * 2


def test_mla_decode_expands_the_whole_context_to_per_head_k_and_v():
    est = estimate_from_options(
        _spec("deepseek_v2"), infer=True, batch=1, prompt=16, new=4000, attention="sdpa"
    )
    # kv_b_proj's output (nope 128 + v 128) and the assembled K (nope 128 + rope 64), 16 heads
    expand = 2 * 1 * 4016 * 16 * (128 + 128 + 128 + 64)
    assert expand > 1 * 4 * 3 * 512 * 1024 * 2  # wider than the experts' weight gather (top-4)
    assert est.phase == "decode" and est.breakdown["transient"] == expand == 57_573_376


def test_mla_prefill_attention_counts_the_expanded_q_k_v():
    # experts shrunk so that the attention is the prefill's widest moment (the shape of the CPU
    # trace behind _mla_prefill: 199,888,896 live bytes at its peak, of which 16,777,216 are the
    # output's .contiguous() copy that CUDA's kernels do not make and 18,874,368 the cache)
    spec = _spec(
        "deepseek_v2",
        num_experts_per_tok=1,
        moe_intermediate_size=64,
        n_shared_experts=1,
        n_routed_experts=2,
        first_k_dense_replace=0,
    )
    est = estimate_from_options(spec, infer=True, batch=8, prompt=512, new=64, attention="sdpa")
    t, h = 8 * 512, 1024
    # q 3072, rotated rope half 1024, the cat 3072, latent 576, kv_b out 4096, K 3072, out 2048
    per_token = 3072 + 1024 + 3072 + 576 + 4096 + 3072 + 2048
    attn = 2 * t * per_token + 4 * t * 16 + 3 * 2 * t * h  # + fp32 log-sum-exp, 3 hidden-sized
    assert est.breakdown["activations"] == attn + 2 * 2 * t * 64 + 8 * 32000 * 6
    assert est.breakdown["kv_cache"] + attn == 183_238_656  # the trace less the copy: 183,111,680
