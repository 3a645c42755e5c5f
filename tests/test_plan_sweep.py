"""plan infer / train / comm as a user meets them (issue 16): cards without bf16, models that do not
fit, contexts beyond the model, absurd numbers, units. Each test runs the command line and checks the
exit code and the message."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src"
NO_FIT = 3  # gpudoctor.plan.NO_FIT_EXIT_CODE: the plan ran, and nothing fits


def gd(*args: str, columns: int = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS=str(columns))
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in (out.stderr + out.stdout).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "Traceback" not in out.stderr and "internal error" not in out.stderr
    return lines[0]


# 1 ---------------------------------------------------------------------------------------------
def test_infer_on_a_v100_prices_fp16_and_says_so() -> None:
    out = gd("plan", "infer", "llama-3.1-8b", "--gpu", "v100-pcie-16gb", "--qps", "1")
    assert out.returncode == 0, out.stderr
    assert "internal error" not in out.stderr
    text = " ".join(out.stdout.split())
    assert "no bf16" in text and "fp16 tensor-core peak (112 TFLOP/s)" in text


def test_infer_70b_on_v100_is_a_plan_not_a_key_error() -> None:
    out = gd("plan", "infer", "llama-3.1-70b", "--gpu", "v100-pcie-16gb", "--qps", "1")
    assert "KeyError" not in out.stderr and "internal error" not in out.stderr
    assert out.returncode == NO_FIT, (
        out.stderr
    )  # 70B bf16 weights are 16.4 GiB per GPU at TP=8: over 16 GiB
    assert "weights alone" in " ".join(out.stdout.split())


def test_train_on_a_v100_uses_its_fp16_tensor_cores() -> None:
    out = gd(
        "plan",
        "train",
        "llama-3.2-1b",
        "--gpus",
        "8",
        "--gpu",
        "v100-sxm2-32gb",
        "--global-batch",
        "64",
        "--seq",
        "2048",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["plans"] and "fp16" in d["compute_model"]
    assert any("no bf16" in a for a in d["assumptions"])


def test_a_card_without_any_tensor_figure_is_a_clear_error() -> None:
    for cmd in (
        ("infer", "llama-3.1-8b", "--qps", "1"),
        ("train", "llama-3.2-1b", "--gpus", "8", "--global-batch", "64"),
    ):
        out = gd("plan", *cmd, "--gpu", "a10g")
        assert out.returncode == 2, out.stderr
        line = one_error_line(out)
        assert "no bf16 or fp16 tensor-core peak" in line and "--gpu" in line, line


# 4 ---------------------------------------------------------------------------------------------
def test_weights_that_fit_no_tp_degree_get_advice_that_can_work() -> None:
    out = gd("plan", "infer", "llama-3.1-405b", "--gpu", "l4", "--qps", "16")
    assert out.returncode == NO_FIT, out.stderr
    text = " ".join(out.stdout.split())
    assert "add replicas" not in text
    assert "weights alone take 94.5 GiB per GPU at TP=8" in text
    assert "pipeline" in text and "GPUs per replica" in text
    assert "int4" in text  # weight quantization, with its numbers
    assert re.search(r"a card with .* GiB", text)


def test_replicas_are_counted_when_one_replica_is_too_slow() -> None:
    out = gd("plan", "infer", "llama-3.1-8b", "--gpu", "h100-sxm", "--qps", "500")
    assert out.returncode == 0, out.stderr
    assert re.search(r"add replicas: \d+ replicas of TP=\d", " ".join(out.stdout.split()))


# 7 ---------------------------------------------------------------------------------------------
def test_no_layout_fits_is_consistent_and_exits_non_zero() -> None:
    args = (
        "plan",
        "train",
        "llama-3.1-70b",
        "--gpus",
        "64",
        "--gpu",
        "h100-sxm",
        "--global-batch",
        "512",
        "--seq",
        "100000000",
    )
    out = gd(*args)
    assert out.returncode == NO_FIT, out.stderr
    text = " ".join(out.stdout.split())
    assert "no layout fits" in text
    assert "need >=" not in text  # the states fit 64 GPUs: more GPUs is not what is missing
    assert "activations" in text and "--seq" in text
    js = gd(*args, "--json")
    assert js.returncode == NO_FIT
    assert json.loads(js.stdout)["infeasible"]
    assert "no layout fits" in js.stderr


def test_too_few_gpus_still_names_the_gpu_count() -> None:
    out = gd(
        "plan",
        "train",
        "llama-3.1-405b",
        "--gpus",
        "8",
        "--gpu",
        "h100-sxm",
        "--global-batch",
        "64",
    )
    assert out.returncode == NO_FIT
    text = " ".join(out.stdout.split())
    assert "weights alone need 94.5 GiB per GPU" in text and "need >= 48 GPUs" in text


# 8 ---------------------------------------------------------------------------------------------
def test_a_context_beyond_the_model_is_refused() -> None:
    out = gd("plan", "infer", "llama-3.1-8b", "--qps", "1", "--prompt", "100000000")
    assert out.returncode == 2
    line = one_error_line(out)
    assert "maximum context of 131,072" in line and "--allow-long-context" in line, line


def test_a_long_context_override_is_explicit_and_its_numbers_are_whole() -> None:
    out = gd(
        "plan",
        "infer",
        "llama-3.1-8b",
        "--qps",
        "1",
        "--prompt",
        "100000000",
        "--allow-long-context",
        columns=80,
    )
    assert out.returncode == NO_FIT, out.stderr  # one sequence of 100M tokens holds no KV budget
    assert "…" not in out.stdout and "..." not in out.stdout  # no cut-off cells or headers
    assert "beyond" in " ".join(out.stdout.split())


def test_tables_are_never_cut_at_80_columns() -> None:
    out = gd("plan", "infer", "llama-3.1-70b", "--qps", "16", "--weights-dtype", "fp8", columns=80)
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout
    out = gd("plan", "train", "llama-3.1-8b", "--gpus", "8", "--global-batch", "64", columns=60)
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout


# 12 --------------------------------------------------------------------------------------------
def test_qps_beyond_the_range_says_the_range() -> None:
    out = gd("plan", "infer", "llama-3.1-8b", "--qps", "1e12")
    assert out.returncode == 2
    line = one_error_line(out)
    assert "must be a positive number" not in line
    assert "1,000,000" in line and "1e+12" in line, line


@pytest.mark.parametrize(
    "cmd",
    [
        ("comm", "all-reduce", "256MiB", "--gpus", "1000000000"),
        ("train", "llama-3.1-8b", "--gpus", "1000000000", "--global-batch", "1000000000"),
    ],
)
def test_absurd_gpu_counts_are_refused(cmd: tuple[str, ...]) -> None:
    out = gd("plan", *cmd)
    assert out.returncode == 2
    line = one_error_line(out)
    assert "--gpus 1000000000" in line and "100,000" in line, line


@pytest.mark.parametrize(
    "cmd",
    [
        ("comm", "all-reduce", "256MiB", "--gpus", "16", "--gpus-per-node", "1000000"),
        ("train", "llama-3.1-8b", "--gpus", "8", "--gpus-per-node", "2000", "--global-batch", "64"),
    ],
)
def test_absurd_node_sizes_are_refused(cmd: tuple[str, ...]) -> None:
    out = gd("plan", *cmd)
    assert out.returncode == 2
    line = one_error_line(out)
    assert "--gpus-per-node" in line and "1,024" in line, line


def test_qps_that_is_not_a_number_says_the_range() -> None:
    out = gd("plan", "infer", "llama-3.1-8b", "--qps", "nan")
    assert out.returncode == 2
    assert "more than 0, at most 1,000,000" in one_error_line(out)


def test_v100_is_not_told_it_lacks_tensor_cores() -> None:
    out = gd(
        "plan",
        "train",
        "llama-3.1-70b",
        "--gpus",
        "64",
        "--gpu",
        "v100-pcie-16gb",
        "--global-batch",
        "512",
    )
    assert "tensor cores" not in out.stderr + out.stdout
    assert out.returncode in (0, NO_FIT), out.stderr


# 18 --------------------------------------------------------------------------------------------
def test_one_unit_and_plurals() -> None:
    out = gd(
        "plan", "train", "llama-3.1-70b", "--gpus", "1", "--global-batch", "8", "--seq", "2048"
    )
    assert out.returncode == NO_FIT
    text = " ".join(out.stdout.split())
    assert "1 GPUs" not in text and " GB " not in text and "80 GiB" in text
    ok = gd("plan", "train", "llama-3.2-1b", "--gpus", "1", "--global-batch", "8", "--seq", "2048")
    assert ok.returncode == 0, ok.stderr
    text = " ".join(ok.stdout.split())
    assert "1 GPUs" not in text and "replicate it on all" not in text and "GiB" in text
