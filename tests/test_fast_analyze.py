"""`python -m gpudoctor analyze PATH --json` skips the typer app (gpudoctor/__main__.py): the same
report, the same one-line errors and exit codes, and none of typer, rich, pydantic or torch imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor.__main__ import _plain_analyze_json

DATA = Path(__file__).parent / "data"
SRC = Path(__file__).parent.parent / "src"
TRACE = str(DATA / "small_gemm" / "trace.json.gz")


def gd(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC), COLUMNS="120")
    return subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("argv", "path"),
    [
        (["analyze", "t.json", "--json"], "t.json"),
        (["analyze", "--json", "t.json"], "t.json"),
        (["analyze", "t.json"], None),  # the console report: rich, through the typer app
        (["analyze", "t.json", "--json", "--gpu", "h100-sxm"], None),
        (["analyze", "--json", "--debug"], None),
        (["analyze", "--json", "-"], None),
        (["analyze", "--json", ""], None),
        (["diff", "a.json", "--json"], None),
        (["--debug", "analyze", "t.json"], None),
    ],
)
def test_only_the_plain_form_takes_the_short_way(argv: list[str], path: str | None) -> None:
    assert _plain_analyze_json(argv) == path


def test_the_short_way_prints_the_report_the_typer_command_prints() -> None:
    fast = gd("analyze", TRACE, "--json")
    # --debug sends the same command through the typer app
    typer_path = gd("--debug", "analyze", TRACE, "--json")
    assert fast.returncode == typer_path.returncode == 0, fast.stderr + typer_path.stderr
    assert fast.stdout == typer_path.stdout
    assert '"findings"' in fast.stdout


def test_the_short_way_fails_in_one_line_as_the_typer_command_does(tmp_path: Path) -> None:
    missing = str(tmp_path / "nothing.json")
    fast = gd("analyze", missing, "--json")
    typer_path = gd("analyze", "--json", missing, "--gpu", "h100-sxm")
    assert fast.returncode == typer_path.returncode == 2
    assert (
        fast.stderr
        == typer_path.stderr
        == (
            f"error: {missing} does not exist; pass the file written by torch.profiler's export_chrome_trace() "
            "(.json or .json.gz), or a gpudoctor run directory\n"
        )
    )
    assert fast.stdout == ""


def test_the_short_way_imports_no_cli_framework_and_no_torch() -> None:
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['gpudoctor', 'analyze', {TRACE!r}, '--json']\n"
        "try:\n"
        "    runpy.run_module('gpudoctor', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'click', 'rich', 'pydantic', 'torch'})\n"
        "print(heavy, file=sys.stderr)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(SRC)),
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip().splitlines()[-1] == "[]"
