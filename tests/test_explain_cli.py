"""`gpudoctor explain` from the command line: detection by content, ranked output, JSON, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import gd

from gpudoctor.explain.kernel import KernelMetrics, kernel_hypotheses

DATA = Path(__file__).parent / "data" / "explain"


def test_several_artifacts_in_one_call_json(tmp_path):
    ranks = "rank,step,step_ms\n" + "".join(
        f"{r},{s},{(300.0 if r == 5 else 100.0) + (s % 3)}\n" for r in range(16) for s in range(50)
    )
    tmp = tmp_path
    (tmp / "ranks.csv").write_text(ranks)
    out = gd(
        "explain",
        str(DATA / "ncu_kernels_details.csv"),
        str(DATA / "nvidia_smi_q.txt"),
        str(tmp / "ranks.csv"),
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [s["kind"] for s in data["sources"]] == ["ncu-csv", "nvidia-smi", "rank-timings"]
    ids = [h["id"] for h in data["hypotheses"]]
    assert "straggler" in ids and "tensor-cores-idle" in ids and "gpu-healthy" in ids
    straggler = next(h for h in data["hypotheses"] if h["id"] == "straggler")
    assert "5" in straggler["subject"]
    kernel = next(h for h in data["hypotheses"] if h["id"] == "tensor-cores-idle")
    assert kernel["kernel"] == "fma_gemm"
    assert ids.index("gpu-healthy") > ids.index("straggler")  # problems first


def test_console_output_names_fixes_and_the_fix_to_avoid():
    out = gd("explain", str(DATA / "scenarios" / "01_slow_gemm.json"), "--width", "140")
    assert out.returncode == 0
    assert (
        "1. tensor-cores-idle" in out.stdout and "fix 1: Use tensor-core instructions" in out.stdout
    )
    assert "avoid: Raising occupancy first" in out.stdout


@pytest.mark.parametrize(
    "content, name, message",
    [
        ("", "empty.csv", "is empty"),
        ("just some words\nand more\n", "notes.txt", "not a format explain knows"),
        (None, "missing.csv", "no such file"),
        ("x", "report.ncu-rep", "needs `ncu` on the PATH"),
        ("gpus,allreduce_ms,gpu\n8,5,tpu-v9\n16,9,tpu-v9\n", "coll.csv", "unknown GPU 'tpu-v9'"),
        (
            "gpus,allreduce_ms,gpus_per_node\n8,5,8\n12,9,8\n",
            "coll.csv",
            "12 GPUs is not a whole number of 8-GPU nodes",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, content, name, message):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    out = gd("explain", str(path))
    assert out.returncode == 2, out.stdout
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_memory_bound_below_the_roof():
    k = KernelMetrics(
        "softmax_kernel", dram_throughput_pct=62, sm_throughput_pct=20, duration_us=100
    )
    assert kernel_hypotheses(k)[0].id == "memory-bound"


def test_latency_bound_with_occupancy_capped_by_registers():
    k = KernelMetrics(
        "scan_kernel",
        dram_throughput_pct=15,
        sm_throughput_pct=20,
        stall_long_scoreboard_pct=55,
        achieved_occupancy_pct=18,
        theoretical_occupancy_pct=25,
        registers_per_thread=200,
        block_limit_registers=1,
        block_limit_shared_mem=8,
        block_limit_warps=8,
        block_limit_sm=32,
    )
    ids = [h.id for h in kernel_hypotheses(k)]
    assert ids[0] == "latency-bound" and "occupancy-limited" in ids


def test_kernel_with_no_throughput_sections_is_marked():
    k = KernelMetrics("mystery", missing=["GPU Speed Of Light Throughput"])
    h = kernel_hypotheses(k)[0]
    assert h.partial and h.confidence is not None and h.confidence < 0.5


def test_ncu_rep_goes_through_ncu_import(tmp_path):
    """A .ncu-rep is converted by `ncu --import ... --csv --page details` when ncu is on the PATH."""
    import os
    import stat
    import subprocess
    import sys

    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\ncat {DATA / 'ncu_kernels_details.csv'}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    rep = tmp_path / "kernels.ncu-rep"
    rep.write_bytes(b"\x00binary report")
    env = dict(
        os.environ,
        PATH=f"{fake.parent}:{os.environ['PATH']}",
        PYTHONPATH=str(Path(__file__).parent.parent / "src"),
    )
    out = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "explain", str(rep), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert (
        data["sources"][0]["kind"] == "ncu-csv" and data["sources"][0]["detail"] == "10 kernel(s)"
    )


def test_yaml_scenario(tmp_path):
    pytest.importorskip("yaml")
    f = tmp_path / "s.yaml"
    f.write_text("scenario: fp8-regression\nlong_task: {seq: 32768, fp8: 0.54, bf16: 0.71}\n")
    out = gd("explain", str(f), "--json")
    assert json.loads(out.stdout)["hypotheses"][0]["id"] == "fp8-saturation"


def test_truncated_and_misdirected_files(tmp_path):
    """A copy cut mid-row keeps what is whole and says the end is missing; a profiler trace is sent
    to `analyze`; a binary file given to `memory` is named as such."""
    cut = tmp_path / "cut.csv"
    cut.write_bytes((DATA / "ncu_kernels_details.csv").read_bytes()[:3000])
    out = gd("explain", str(cut), "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert "the end of the file (it stops mid-row)" in data["sources"][0]["partial"]
    assert all(h["partial"] for h in data["hypotheses"])
    trace = Path(__file__).parent.parent / "src" / "gpudoctor" / "data" / "sample_trace.json.gz"
    out = gd("explain", str(trace))
    assert out.returncode == 2 and "is a profiler trace, not a scenario" in out.stderr
    png = tmp_path / "pic.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n0000")
    out = gd("memory", str(png))
    assert out.returncode == 2 and "is not a text config.json" in out.stderr
