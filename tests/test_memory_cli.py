"""`gpudoctor memory` from the command line: output, JSON, and one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import gd

RESULTS = Path(__file__).parent.parent / "benchmarks" / "results" / "memory_h200_2026-11-22.json"


def test_preset_on_a_gpu_prints_the_breakdown_and_what_fits():
    out = gd("memory", "llama-3.1-8b", "--batch", "4", "--seq", "4096", "--gpu", "h100-sxm", "--width", "140")
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
    assert {"peak_bytes", "breakdown", "fits", "suggestions", "peak_phase", "reserved_bytes"} <= set(data)
    assert data["fits"] is None  # no --gpu
    assert abs(data["peak_bytes"] - run["peak_bytes"]) / run["peak_bytes"] < 0.01  # measured on the H200
    assert data["breakdown"]["weights"] == 607_757_824 * 2


def test_inference_json(tmp_path):
    out = gd("memory", "llama-3.1-70b", "--infer", "--batch", "1", "--prompt", "1024", "--new", "128",
             "--gpu", "h100-sxm", "--json")
    data = json.loads(out.stdout)
    assert data["mode"] == "infer" and data["fits"] is False
    assert data["extra"]["gpus_needed_tp"] == 2
    assert data["suggestions"][0]["fits"] is True


@pytest.mark.parametrize("args, message", [
    (["no-such-model"], "is not a config.json path, a preset or module:factory"),
    (["missing/config.json"], "no such file"),
    (["llama-3.1-8b", "--tp", "5"], "does not divide the model's 32 attention heads"),
    (["llama-3.1-8b", "--zero", "3"], "give --dp 2 or more"),
    (["llama-3.1-8b", "--pp", "40"], "deeper than the model's 32 layers"),
    (["llama-3.1-8b", "--params-dtype", "fp64"], "--params-dtype 'fp64' is not one of"),
    (["llama-3.1-8b", "--gpu", "voodoo5"], "unknown --gpu 'voodoo5'"),
    (["llama-3.1-8b", "--infer", "--seq", "10"], "do not apply to generation"),
    # issue 16: a context past the model's positions was priced silently
    (["gpt2", "--seq", "8192"], "beyond gpt2's 1,024 positions: its position embeddings are a learned table"),
    (["gpt2", "--seq", "8192", "--allow-long-context"], "which no flag extends; use --seq 1024 or less"),
    (["gpt2", "--infer", "--prompt", "1000", "--new", "100"], "keep --prompt + --new at 1024 or less"),
    (["llama-3.1-8b", "--seq", "200000"], "or add --allow-long-context"),
    # issue 16: --width -5 printed nothing and exited 0
    (["gpt2", "--width", "-5"], "--width -5: give a terminal width from"),
    (["gpt2", "--width", "0"], "--width 0: give a terminal width from"),
])
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
