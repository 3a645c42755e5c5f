"""``gpudoctor diff``: did the change work, by how much, and is the difference real?

inputs (a trace, a run directory, rank traces) -> Side; samples (the noise model) + match (kernels)
-> compare -> Diff (plain data); history lists run directories. Renderers: diff/console.py,
diff/html.py, diff/history_console.py.
"""

from __future__ import annotations

from pathlib import Path

from gpudoctor.diff.compare import Diff, compare
from gpudoctor.diff.samples import DEFAULT_FLOOR_PCT

__all__ = ["Diff", "compare", "diff_paths"]


def diff_paths(before: str | Path, after: str | Path, floor_pct: float = DEFAULT_FLOOR_PCT) -> Diff:
    """Compare two traces or run directories: ``diff_paths("runs/a", "runs/b").verdict``."""
    from gpudoctor.diff.inputs import load_side

    return compare(load_side(before, "BEFORE"), load_side(after, "AFTER"), floor_pct)
