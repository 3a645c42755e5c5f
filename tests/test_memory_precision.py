"""Precision and optimizer options of a training estimate: the bytes per parameter they mean, printed
with every estimate, and --master-weights over fp32 weights (ignored, with a note)."""

from __future__ import annotations

import json

from test_cli import gd

from gpudoctor.memory import estimate_from_options
from gpudoctor.memory.options import TrainOptions


def test_master_weights_over_fp32_weights_are_not_counted_twice():
    plain = estimate_from_options("llama-3.1-8b", params_dtype="fp32")
    flagged = estimate_from_options("llama-3.1-8b", params_dtype="fp32", master_weights=True)
    assert flagged.peak_bytes == plain.peak_bytes
    assert "master_weights" not in flagged.breakdown
    assert flagged.notes[0] == (
        "--master-weights ignored: with --params-dtype fp32 the weights are already fp32, "
        "so there is no separate master copy to count"
    )
    assert not any("master" in n for n in plain.notes)
    # over bf16 weights the fp32 copy is real: 4 bytes a parameter
    bf16 = estimate_from_options("llama-3.1-8b", params_dtype="bf16", master_weights=True)
    assert bf16.breakdown["master_weights"] == 4 * 8_030_261_248


def test_master_weights_note_on_the_command_line():
    out = gd(
        "memory", "llama-3.1-8b", "--params-dtype", "fp32", "--master-weights", "--width", "300"
    )
    assert out.returncode == 0, out.stderr
    assert "fp32 master weights" not in out.stdout  # no such row in the breakdown
    assert out.stdout.count("--master-weights ignored") == 1
    assert "--params-dtype fp32, whose weights are their own master copy" in " ".join(
        gd("memory", "--help").stdout.replace("│", " ").split()
    )


def test_precision_summary_in_bytes_per_parameter():
    from gpudoctor.memory.options import precision_summary

    assert precision_summary(TrainOptions()) == (
        "bf16 weights and gradients, bf16 AdamW states (2 per parameter), no master copy: "
        "8 bytes/parameter before sharding"
    )
    assert precision_summary(TrainOptions(master_weights=True)) == (
        "bf16 weights and gradients, fp32 AdamW states (2 per parameter) + fp32 master weights: "
        "16 bytes/parameter before sharding"
    )
    assert precision_summary(TrainOptions(params_dtype="fp32", autocast="bf16")).endswith(
        ": 16 bytes/parameter before sharding"
    )
    assert precision_summary(TrainOptions(optimizer="sgd")).endswith(
        ": 4 bytes/parameter before sharding"
    )


def test_every_training_estimate_prints_its_precision():
    out = gd("memory", "llama-3.1-8b", "--master-weights", "--json")
    assert out.returncode == 0, out.stderr
    assumptions = json.loads(out.stdout)["assumptions"]
    assert assumptions[0].endswith("+ fp32 master weights: 16 bytes/parameter before sharding")
    text = gd("memory", "llama-3.1-8b", "--width", "300").stdout
    assert (
        "assumed: bf16 weights and gradients, bf16 AdamW states (2 per parameter), no master copy: 8 bytes"
        in text
    )


def test_a_module_estimate_ignores_master_weights_over_fp32_and_prints_its_precision(tmp_path):
    path = tmp_path / "factory_mlp.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\ndef mlp():\n"
        "    return nn.Linear(256, 256), torch.randn(8, 256)\n"
    )
    plain = estimate_from_options(f"{path}:mlp", params_dtype="fp32")
    flagged = estimate_from_options(f"{path}:mlp", params_dtype="fp32", master_weights=True)
    assert flagged.peak_bytes == plain.peak_bytes and flagged.notes[0].startswith(
        "--master-weights ignored"
    )
    line = (
        "fp32 weights and gradients, fp32 AdamW states (2 per parameter), no master copy: "
        "16 bytes/parameter before sharding"
    )
    assert plain.assumptions == (line,)
