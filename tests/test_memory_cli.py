"""`gpudoctor memory` from the command line: output, JSON, and one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import gd

RESULTS = Path(__file__).parent.parent / "benchmarks" / "results" / "memory_h200_2026-11-22.json"


def test_preset_on_a_gpu_prints_the_breakdown_and_what_fits():
    out = gd(
        "memory",
        "llama-3.1-8b",
        "--batch",
        "4",
        "--seq",
        "4096",
        "--gpu",
        "h100-sxm",
        "--width",
        "140",
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "8.03 B params" in text and "during the backward" in text
    assert "does NOT fit on NVIDIA H100" in text
    assert "What makes it fit, cheapest first" in text and "fits" in text


def test_json_has_the_documented_keys(tmp_path):
    run = next(r for r in json.loads(RESULTS.read_text()) if r["name"] == "qwen2-152k-vocab")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(run["config"]))
    out = gd("memory", str(tmp_path), "--batch", "4", "--seq", "2048", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {
        "peak_bytes",
        "breakdown",
        "fits",
        "suggestions",
        "peak_phase",
        "reserved_bytes",
    } <= set(data)
    assert data["fits"] is None  # no --gpu
    assert (
        abs(data["peak_bytes"] - run["peak_bytes"]) / run["peak_bytes"] < 0.01
    )  # measured on the H200
    assert data["breakdown"]["weights"] == 607_757_824 * 2


def test_inference_json(tmp_path):
    out = gd(
        "memory",
        "llama-3.1-70b",
        "--infer",
        "--batch",
        "1",
        "--prompt",
        "1024",
        "--new",
        "128",
        "--gpu",
        "h100-sxm",
        "--json",
    )
    data = json.loads(out.stdout)
    assert data["mode"] == "infer" and data["fits"] is False
    assert data["extra"]["gpus_needed_tp"] == 2
    assert data["suggestions"][0]["fits"] is True


@pytest.mark.parametrize(
    "args, message",
    [
        (["no-such-model"], "is not a config.json path, a preset or module:factory"),
        (["missing/config.json"], "no such file"),
        (["llama-3.1-8b", "--tp", "5"], "does not divide the model's 32 attention heads"),
        (["llama-3.1-8b", "--zero", "3"], "give --dp 2 or more"),
        (["llama-3.1-8b", "--pp", "40"], "deeper than the model's 32 layers"),
        (["llama-3.1-8b", "--params-dtype", "fp64"], "--params-dtype 'fp64' is not one of"),
        (["llama-3.1-8b", "--gpu", "voodoo5"], "unknown --gpu 'voodoo5'"),
        (["llama-3.1-8b", "--infer", "--seq", "10"], "do not apply to generation"),
        # issue 16: a context past the model's positions was priced silently
        (
            ["gpt2", "--seq", "8192"],
            "beyond gpt2's 1,024 positions: its position embeddings are a learned table",
        ),
        (
            ["gpt2", "--seq", "8192", "--allow-long-context"],
            "which no flag extends; use --seq 1024 or less",
        ),
        (
            ["gpt2", "--infer", "--prompt", "1000", "--new", "100"],
            "keep --prompt + --new at 1024 or less",
        ),
        (["llama-3.1-8b", "--seq", "200000"], "or add --allow-long-context"),
        # issue 16: --width -5 printed nothing and exited 0
        (["gpt2", "--width", "-5"], "--width -5: give a terminal width from"),
        (["gpt2", "--width", "0"], "--width 0: give a terminal width from"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    out = gd("memory", *args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr


def test_malformed_config_is_one_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    out = gd("memory", str(bad))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    out = gd("memory", str(bad))
    assert out.returncode == 2 and "num_hidden_layers" in out.stderr


def test_longest_context_stops_at_the_models_positions():
    # GPT-2 has 1,024 learned positions; memory alone would hold 235,497 tokens at batch 8 on an H200
    out = gd(
        "memory",
        "gpt2",
        "--infer",
        "--batch",
        "8",
        "--prompt",
        "1000",
        "--new",
        "24",
        "--gpu",
        "h200",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    extra = json.loads(out.stdout)["extra"]
    assert extra["max_context"] == 1024 and extra["max_context_limited_by"] == "model"
    assert extra["max_context_by_memory"] > 200_000
    text = gd(
        "memory",
        "gpt2",
        "--infer",
        "--batch",
        "8",
        "--prompt",
        "1000",
        "--new",
        "24",
        "--gpu",
        "h200",
        "--width",
        "300",
    ).stdout
    assert (
        "longest context at this batch: 1,024 tokens (the model's limit: its 1,024 positions, not memory"
        in text
    )


@pytest.mark.parametrize("preset", ["gemma-2b", "mistral-7b", "qwen2.5-7b"])
def test_longest_context_of_rotary_models_stops_at_max_position_embeddings(preset):
    from gpudoctor.memory import estimate_from_options, load_spec

    limit = load_spec(preset).max_positions
    est = estimate_from_options(
        preset, infer=True, batch=1, prompt=1000, new=24, gpu="h200", context="refuse"
    )
    assert est.extra["max_context"] == limit < est.extra["max_context_by_memory"]
    # --allow-long-context prices a longer RoPE scaling: then memory is the limit
    ext = estimate_from_options(
        preset, infer=True, batch=1, prompt=1000, new=24, gpu="h200", context="extend"
    )
    assert ext.extra["max_context"] == ext.extra["max_context_by_memory"] > limit


def test_gpt2_names_its_positional_part_as_it_is():
    from gpudoctor.memory import estimate_from_options

    gpt2 = estimate_from_options("gpt2", batch=4, seq=1024).extra["activations_by_component"]
    assert (
        "embedding_dropout_mask" in gpt2 and "rope_tables" not in gpt2
    )  # learned positions: no rope
    assert not any("rope" in k for k in gpt2)
    llama = estimate_from_options("llama-3.2-1b", batch=1, seq=1024).extra[
        "activations_by_component"
    ]
    assert llama["rope_tables"] > 0 and "embedding_dropout_mask" not in llama
    text = gd("memory", "gpt2", "--batch", "4", "--width", "300").stdout
    assert "rope" not in text and "embedding dropout mask" in text


def test_help_lists_the_presets():
    from gpudoctor.core.presets import PRESETS

    out = gd("memory", "--help")
    assert out.returncode == 0, out.stderr
    flat = " ".join(out.stdout.replace("│", " ").split())
    assert all(name in flat for name in PRESETS), flat
    from gpudoctor.cli import _PRESET_NAMES

    assert tuple(sorted(PRESETS)) == _PRESET_NAMES  # the help's list is the registry's
