"""A rule: one finding id, one check over the Analysis."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from gpudoctor.analysis import Analysis
from gpudoctor.core.finding import Finding
from gpudoctor.replay.edits import Edit
from gpudoctor.trace.model import NEEDS

# How rules/calibrate.py re-prices a finding for the step run without the profiler:
#   "idle":           its idle part shrinks like the idle of its ``idle_cause`` (the default);
#   "step-share":     its whole saving is host-driven time: what it leaves shrinks like the step;
#   "gpu-step-share": like "step-share" on a step the GPU keeps busy, else like "idle";
#   "host-step-share": like "step-share" on a step the host holds back, else like "idle";
#   "same-ops":       like "idle", and its fix keeps every op, so the step it predicts is floored
#                     at the host's time to issue them (calibrate.floor_at_host_time).
CALIBRATIONS = ("idle", "step-share", "gpu-step-share", "host-step-share", "same-ops")


class Rule(msgspec.Struct, frozen=True):
    """``needs``: what the trace must record for the check to mean anything (trace/capabilities.py
    NEEDS); on a trace that lacks one the rule does not run and the report says so.

    The rule's metadata, declared by the rule itself (the registry and rules/calibrate.py read it):
    ``order``: its place in the registry (``gpudoctor rules`` lists them in this order);
    ``idle_cause``: the analysis/idle.py cause whose idle its finding's idle part prices ("" none);
    ``calibration``: how its saving is re-priced without the profiler (CALIBRATIONS above);
    ``blocked_by``: finding ids whose fix must come first (a major or critical one ranks before it);
    ``owns_idle``: idle causes its finding claims when it fires, so another fix (launch-bound's
    CUDA graph) does not count them too;
    ``edit``: its fix as an edit of the step's graph (replay/edits.py), priced by replaying it
    (rules/whatif.py); None: the edit rules/whatif.py derives from the finding's idle cause and
    kernels, or the rule's formula where it cannot."""

    id: str
    title: str
    check: Callable[[Analysis], Finding | None]
    doc: str = ""
    needs: tuple[str, ...] = ()
    order: int = 1000
    idle_cause: str = ""
    calibration: str = "idle"
    blocked_by: tuple[str, ...] = ()
    owns_idle: tuple[str, ...] = ()
    edit: Callable[[Analysis, Finding], Edit | None] | None = None
    # a run --try-fixes knob whose change differs from the finding's first fix, as its own edit
    # (fp32-matmul's "tf32": the matmuls at the TF32 rate, not bf16): knob id -> edit
    knob_edits: tuple[tuple[str, Callable[[Analysis, Finding], Edit | None]], ...] = ()
    # knobs on the module whose edit is rules/knob_prices.py's, priced the same way in the evidence
    # (launch-bound's "compile-reduce-overhead": the module in graphs, where the finding prices the
    # whole step in one)
    module_knobs: tuple[str, ...] = ()
    # another of the finding's own fixes as its own edit (its title, its edit): where it replays
    # faster than ``edit``'s, the finding is priced by it and lists it first (fp32-matmul's TF32
    # against bf16 autocast on a step the host holds: autocast's casts cost the host more than
    # the 16-bit matmuls save, rules/whatif.py ``_best_fix``)
    alternative_fixes: tuple[tuple[str, Callable[[Analysis, Finding], Edit | None]], ...] = ()

    def __post_init__(self) -> None:
        unknown = [n for n in self.needs if n not in NEEDS]
        if unknown:
            raise ValueError(f"rule {self.id}: unknown needs {unknown}; known: {', '.join(NEEDS)}")
        if self.calibration not in CALIBRATIONS:
            raise ValueError(
                f"rule {self.id}: unknown calibration {self.calibration!r}; known: "
                f"{', '.join(CALIBRATIONS)}")
