"""The tree passes the project's ruff configuration (pyproject.toml [tool.ruff]); ruff is pinned in the
dev extras so a new ruff release cannot change the verdict."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_passes() -> None:
    if shutil.which("ruff") is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]' brings it)")
    out = subprocess.run(
        ["ruff", "check", "--no-cache", "src", "tests", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]
