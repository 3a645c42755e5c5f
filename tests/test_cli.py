"""The command line as a user meets it: exit codes, one-line errors, JSON on stdout, files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
SRC = Path(__file__).parent.parent / "src"


def gd(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="120")
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def test_demo_prints_a_diagnosis() -> None:
    out = gd("demo", "--width", "120")
    assert out.returncode == 0, out.stderr
    assert "host-sync" in out.stdout and "NVIDIA H100 80GB HBM3" in out.stdout
    assert "fix:" in out.stdout


def test_json_report_is_versioned_and_sorted() -> None:
    out = gd("analyze", str(DATA / "naive_attention" / "trace.json.gz"), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["schema_version"] == "1.0"
    assert report["gpu"]["name"] == "NVIDIA H100 80GB HBM3"
    savings = [f["saving_ms"] for f in report["findings"]]
    assert savings == sorted(savings, reverse=True)
    top = report["findings"][0]
    assert top["id"] == "naive-attention"
    assert {"id", "severity", "saving_ms", "predicted_speedup", "evidence", "fixes"} <= set(top)
    assert top["fixes"][0]["code"].startswith(
        "out = torch.nn.functional.scaled_dot_product_attention"
    )


def test_html_is_written(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    out = gd("analyze", str(DATA / "fp32_matmul" / "trace.json.gz"), "--html", str(target))
    assert out.returncode == 0, out.stderr
    page = target.read_text()
    assert page.startswith("<!DOCTYPE html>") and "fp32-matmul" in page
    assert re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page) is None  # nothing fetched


def test_run_directory_is_accepted() -> None:
    out = gd("analyze", str(DATA / "small_gemm"), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["findings"][0]["id"] == "small-gemm"


def test_gpu_override_changes_the_ceilings() -> None:
    out = gd(
        "analyze", str(DATA / "fp32_matmul" / "trace.json.gz"), "--gpu", "a100-sxm-80gb", "--json"
    )
    assert json.loads(out.stdout)["ceilings"]["gpu"] == "NVIDIA A100 SXM4 80GB"


def test_ceilings_file(tmp_path: Path) -> None:
    f = tmp_path / "ceil.json"
    f.write_text(
        json.dumps(
            {
                "gpu": "my card",
                "matrix_flops": {"bf16": 7.0e14, "fp32": 5.0e13},
                "hbm_bytes_per_s": 2.9e12,
                "source": "measured 2026-11-22",
            }
        )
    )
    out = gd("analyze", str(DATA / "fp32_matmul" / "trace.json.gz"), "--ceilings", str(f), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["ceilings"]["source"] == "measured 2026-11-22"


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty"),
        (b'{"traceEvents": [{"ph": "X", "na', "not valid JSON"),
        (b'{"rows": []}', "not a profiler trace"),
        (b"PK\x03\x04zipzip", "not valid JSON"),
    ],
)
def test_bad_files_exit_2_with_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    f = tmp_path / "t.json"
    f.write_bytes(content)
    out = gd("analyze", str(f))
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in out.stderr


def test_cpu_only_trace_gets_a_host_report(tmp_path: Path) -> None:
    f = tmp_path / "cpu.json"
    f.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "X",
                        "cat": "cpu_op",
                        "name": "aten::add",
                        "pid": 1,
                        "tid": 1,
                        "ts": 1.0,
                        "dur": 2.0,
                        "args": {},
                    }
                ]
            }
        )
    )
    out = gd("analyze", str(f))
    assert out.returncode == 0, out.stderr
    assert "no GPU work was recorded" in out.stdout and "Host breakdown" in out.stdout
    out = gd("analyze", str(DATA / "cpu_only" / "trace.json.gz"), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["gpu"]["name"] is None and report["gpu"]["device"] == "cpu"
    assert report["steps"]["method"] == "profiler-step" and report["findings"] == []


def test_a_trace_with_no_events_is_one_line(tmp_path: Path) -> None:
    f = tmp_path / "empty.json"
    f.write_text(json.dumps({"traceEvents": []}))
    out = gd("analyze", str(f))
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds no profiler events" in lines[0]


def test_missing_path_and_unknown_gpu(tmp_path: Path) -> None:
    from gpudoctor.hardware.specs import known_names

    out = gd("analyze", str(tmp_path / "nope.json"))
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        f"error: {tmp_path / 'nope.json'} does not exist; pass the file written by torch.profiler's "
        "export_chrome_trace() (.json or .json.gz), or a gpudoctor run directory\n"
    )
    out = gd("analyze", str(DATA / "fp32_matmul" / "trace.json.gz"), "--gpu", "voodoo5")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr == (
        f"error: no datasheet row matches GPU 'voodoo5'; pass --gpu with one of "
        f"{', '.join(known_names())}, or --ceilings FILE\n"
    )


def test_bad_ceilings_file(tmp_path: Path) -> None:
    f = tmp_path / "c.json"
    f.write_text('{"gpu": "x"}')
    out = gd("analyze", str(DATA / "fp32_matmul" / "trace.json.gz"), "--ceilings", str(f))
    assert out.returncode == 2 and "lacks matrix_flops" in out.stderr


def test_html_to_a_missing_folder_leaves_nothing_behind(tmp_path: Path) -> None:
    out = gd(
        "analyze",
        str(DATA / "fp32_matmul" / "trace.json.gz"),
        "--html",
        str(tmp_path / "no" / "r.html"),
    )
    assert out.returncode == 2 and "does not exist" in out.stderr


def test_html_does_not_clobber_on_error(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("keep me")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    out = gd("analyze", str(bad), "--html", str(target))
    assert out.returncode == 2 and target.read_text() == "keep me"


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text("")
    out = gd("--debug", "analyze", str(f))
    assert out.returncode == 2 and "Traceback" in out.stderr


def test_rules_lists_every_id() -> None:
    from gpudoctor.rules.registry import RULES

    out = gd("rules")
    assert (
        out.returncode == 0 and "memory-pressure" in out.stdout and "per-sample-loop" in out.stdout
    )
    assert len(RULES) >= 15 and [r for r in RULES if r not in out.stdout] == []


def test_rules_lists_the_multi_gpu_ids_marked_as_such() -> None:
    from gpudoctor.ranks.combine import RULE_IDS

    lines = gd("rules").stdout.splitlines()
    for rule_id in RULE_IDS:
        [line] = [x for x in lines if x.split()[:1] == [rule_id]]
        assert "multi-GPU:" in line
    assert len(RULE_IDS) == 5


def test_version_and_short_help() -> None:
    from gpudoctor.core.version import __version__

    out = gd("--version")
    assert out.returncode == 0 and out.stdout == f"gpudoctor {__version__}\n"
    short, long = gd("-h"), gd("--help")
    assert short.returncode == 0 and short.stdout == long.stdout and "Commands" in short.stdout
    run_help = gd("run", "-h")
    assert run_help.returncode == 0 and "--try-fixes" in run_help.stdout
    assert (
        "Exit code: 0 with a report; the program's own code when it fails; 3 when"
        in run_help.stdout
    )


def test_top_level_help_wraps_each_command_summary_as_one_paragraph() -> None:
    """The command list kept the docstrings' line breaks: "the time each" / "would save per step"."""
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="200")
    out = subprocess.run(
        [sys.executable, "-m", "gpudoctor", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    ).stdout
    [analyze] = [line for line in out.splitlines() if " analyze " in line]
    assert "the time each would save per step (multi-GPU: stragglers" in analyze
    [bench] = [line for line in out.splitlines() if " bench " in line]
    assert "copies, GEMM and attention throughput by shape)" in bench


def test_usage_error_exits_2() -> None:
    out = gd("analyze")
    assert out.returncode == 2 and out.stdout == ""
    assert (
        "Error: Missing argument" in out.stderr
        and "Usage:" in out.stderr
        and "Traceback" not in out.stderr
    )


JOBS_ERROR = (
    "error: --jobs {}: give a number of worker processes of 1 or more (e.g. --jobs 4), or leave it out "
    "for one per core\n"
)


@pytest.mark.parametrize(
    "inputs",
    [("host_sync",), ("gloo_straggler",), ("host_sync/trace.json.gz", "fp32_matmul/trace.json.gz")],
    ids=["one trace", "one job's ranks", "separate traces"],
)
@pytest.mark.parametrize("jobs", ["-3", "0"])
def test_bad_jobs_is_refused_for_any_inputs(inputs: tuple[str, ...], jobs: str) -> None:
    out = gd("analyze", *(str(DATA / i) for i in inputs), "--jobs", jobs)
    assert (out.returncode, out.stdout, out.stderr) == (2, "", JOBS_ERROR.format(jobs))
