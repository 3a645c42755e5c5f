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

from gpudoctor.core.spec import from_hf_config
from gpudoctor.memory import estimate_from_options
from gpudoctor.memory.accuracy import KNOWN_MISSES, accuracy_note
from gpudoctor.memory.activations import Workload, attention_kind, head_memory, layer_memory

RESULTS = Path(__file__).parent.parent / "benchmarks" / "results" / "memory-arch-h100-2026-11-25.json"
RUNS = [r for r in json.loads(RESULTS.read_text()) if "peak_bytes" in r and r["name"].startswith("arch-")]
MODEL_TYPES = {"llama", "mistral", "qwen2", "gemma", "gemma2", "gpt2", "gpt_neox", "mixtral", "deepseek_v2",
               "deepseek_v3", "qwen2_moe", "phi3"}


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


def test_a_noted_model_type_says_so_and_others_do_not(tmp_path):
    runs = {r["name"]: r for r in RUNS}
    for name, noted in (("arch-deepseek-v2-gen", True), ("arch-llama-gen", False)):
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps(runs[name]["config"]))
        out = gd("memory", str(cfg), "--infer", "--batch", "8", "--prompt", "512", "--new", "64", "--width", "200")
        assert out.returncode == 0, out.stderr
        assert ("±13% (measured, see the accuracy note)" in out.stdout) is noted
        assert ("the prediction was up to 13.2% above the peak measured on an H100" in out.stdout) is noted
    assert accuracy_note("llama", "train") is None


def _spec(model_type: str, **override):
    run = next(r for r in RUNS if r["config"]["model_type"] == model_type)
    return from_hf_config({**run["config"], **override})


def test_gemma2_final_softcap_keeps_the_tanh_output_over_the_vocabulary():
    w = Workload(batch=2, seq=1024)
    assert head_memory(_spec("gemma2"), w).saved["logit_softcap"] == 2 * 2048 * 256000
    assert "logit_softcap" not in head_memory(_spec("gemma2", final_logit_softcapping=None), w).saved


def test_gemma2_sdpa_is_priced_as_eager_with_the_tanh_of_the_scores():
    spec = _spec("gemma2")
    assert attention_kind(spec, "sdpa") == "eager" and attention_kind(spec, "flash") == "flash"
    assert attention_kind(_spec("gemma2", attn_logit_softcapping=None), "sdpa") == "sdpa"
    lm = layer_memory(spec, Workload(batch=1, seq=512, attention="sdpa"))
    probs = 4 * 512 * 512  # heads x seq x seq
    assert lm.saved["attention_scores"] == (4 + 2 + 2) * probs  # fp32 softmax, its bf16 copy, tanh out
    # four norms: two pre-norms (fp32 in, fp32 normalised, bf16 out), two post-norms (no out kept)
    th = 512 * 1152
    assert lm.saved["norms"] == 2 * (8 + 2) * th + 2 * 8 * th


def test_phi3_keeps_the_fused_qkv_the_rotated_q_and_k_and_one_more_kv_copy():
    lm = layer_memory(_spec("phi3"), Workload(batch=1, seq=1024))
    # qkv 3072 wide, output 1024, rotated q and k 2048, the extra copy 1024, the logsumexp
    assert lm.saved["attention"] == 2 * 1024 * (3072 + 1024 + 2048 + 1024) + 4 * 16 * 1024


def test_moe_prefill_counts_the_combine_rows_and_the_shared_expert_output():
    est = estimate_from_options(_spec("qwen2_moe"), infer=True, batch=8, prompt=512, new=64, attention="sdpa")
    t, h = 8 * 512, 1024
    routed = 2 * (4 * t) * max(h + 4 * 704, 4 * h)  # 4 hidden-sized rows per routed row at the combine
    mlp = max(routed, 3 * 2 * t * 2816) + 2 * t * h
    assert est.breakdown["activations"] == mlp + 4 * 2 * t * h + 2 * 2 * t * 64 + 8 * 32000 * 6


def test_a_sliding_window_costs_a_mask_only_once_the_sequence_reaches_it():
    spec = _spec("mistral")  # window 4096, 16 heads, 4 KV heads of 64
    short = layer_memory(spec, Workload(batch=1, seq=1024)).saved["attention"]
    assert short == 2 * 2 * 1024 * 1024 + 2 * 2 * 1024 * 256 + 4 * 16 * 1024  # q, out; k, v; logsumexp
    full = layer_memory(spec, Workload(batch=1, seq=4096)).saved["attention"]
    assert full == 4 * 2 * 4096 * 1024 + 2 * 4096 * 4096 + 4 * 16 * 4096  # K/V repeated, the mask


def test_the_bench_lists_the_arch_sweep():
    import subprocess
    import sys

    bench = Path(__file__).parent.parent / "benchmarks" / "bench_memory.py"
    out = subprocess.run([sys.executable, str(bench), "--list", "--arch"], capture_output=True, text=True,
                         check=True, timeout=60)
    rows = [line.split() for line in out.stdout.splitlines()]
    assert len(rows) == 48 and {r[1] for r in rows} == MODEL_TYPES
    assert sum(r[2] == "generate" for r in rows) == 12
