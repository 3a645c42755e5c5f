"""The CI gate of ``gpudoctor diff --fail-if-slower PCT``.

Rule: the diff fails the gate only when AFTER is slower beyond noise *and* beyond the threshold,
i.e. the lower end of the 95% interval of the step-time change is above ``PCT`` (and above the
run-to-run floor). A measured +6% whose interval reaches down to +3% does not fail a 5% gate: the
run cannot tell it from a 3% slowdown. Exit code ``SLOWER_EXIT_CODE`` (4), distinct from bad
input (2) and internal errors (1).
"""

from __future__ import annotations

import math

from gpudoctor.diff.compare import Diff
from gpudoctor.errors import InputError

SLOWER_EXIT_CODE = 4


def parse_percent(text: str, option: str = "--fail-if-slower") -> float:
    """'5%' or '5' -> 5.0; anything else is an InputError naming the option."""
    raw = text.strip().removesuffix("%").strip()
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 < value < 1000:
        raise InputError(f"{option} {text!r}: give a slowdown in percent above 0, such as 5% or 5 "
                         "(the step time may grow by that much before the command fails)")
    return value


def failed(d: Diff, threshold_pct: float) -> bool:
    """Whether ``d`` fails a gate of ``threshold_pct`` (module docstring)."""
    return d.gate(threshold_pct)


def explain(d: Diff, threshold_pct: float) -> str:
    """One line on the gate's outcome, for stderr."""
    s = d.step
    if s.ci_low_pct is None:
        return (f"--fail-if-slower {threshold_pct:g}%: not applied, one side has fewer than 2 step "
                "samples (no interval); passing")
    where = f"{s.change_pct:+.1f}% (95% interval {s.ci_low_pct:+.1f}% to {s.ci_high_pct:+.1f}%)"
    if failed(d, threshold_pct):
        return (f"--fail-if-slower {threshold_pct:g}%: FAILED, the step is slower by {where}, "
                f"beyond the threshold and the noise; exit code {SLOWER_EXIT_CODE}")
    return f"--fail-if-slower {threshold_pct:g}%: passed, step change {where}"
