"""The import layering holds: the contracts in pyproject.toml ([tool.importlinter]: the layers, no
cycles between sibling packages or modules, the kernels standing alone, analyses that do not render,
private modules kept inside their package) pass on src/, and they do fail on a tree with a back-arrow.

import-linter comes with the dev extras (pip install -e ".[dev]"), as ruff does for test_lint.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "importlinter", reason="import-linter is not installed (pip install -e '.[dev]' brings it)"
)

ROOT = Path(__file__).resolve().parents[1]
# the lint-imports command, run by this interpreter whatever is on PATH
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint(src: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports over the gpudoctor package under ``src``, with the contracts of pyproject.toml."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(src), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-c", LINT, "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_the_contracts_hold() -> None:
    out = lint(ROOT / "src")
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # the shared vocabulary reaching up to the command line
        ("core/finding.py", "from gpudoctor.cli import app", "Layers"),
        # a side tool reaching up into the pipeline
        ("memory/fit.py", "from gpudoctor.rules.registry import RULES", "Layers"),
        # a cycle of two modules of one package (a function-level import counts)
        (
            "memory/capacity.py",
            "def _cycle():\n    from gpudoctor.memory.fit import with_fit",
            "No import cycles",
        ),
        # the report's model reaching for a renderer: the renderers import the model
        (
            "report/model.py",
            "def _show():\n    from gpudoctor.report.html import render_html",
            "No import cycles",
        ),
    ],
)
def test_a_back_arrow_breaks_a_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    shutil.copytree(
        ROOT / "src" / "gpudoctor",
        tmp_path / "gpudoctor",
        ignore=shutil.ignore_patterns("__pycache__", "data"),
    )
    target = tmp_path / "gpudoctor" / module
    target.write_text(target.read_text() + "\n\n" + line + "\n")
    out = lint(tmp_path)
    assert out.returncode != 0, out.stdout[-3000:]
    assert "Broken contracts" in out.stdout, out.stdout[-3000:]
    assert contract in out.stdout.split("Broken contracts", 1)[1], out.stdout[-3000:]
