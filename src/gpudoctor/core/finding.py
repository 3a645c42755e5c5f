"""The Finding: what the doctor says, how much it costs per step, and what to change."""

from __future__ import annotations

from typing import Any

import msgspec

SEVERITIES = ("critical", "major", "minor", "info")
ALL_IDLE = float("inf")  # make_finding(idle_ms=ALL_IDLE): the whole saving is GPU idle


# A replayed saving this many times the formula's, and this much more, is said beside the price:
# the fix frees more of the replayed step than the time its evidence names
# (benchmarks/BENCHMARKS-replay.md "Public traces never seen"; tests/test_report_console.py)
REPLAYED_BEYOND = 2.0
REPLAYED_BEYOND_MS = 0.5
REPLAYED_BEYOND_TEXT = ("Replayed, the fix saves {saving:.2f} ms, more than the {named:.2f} ms named "
                        "above: in the step replayed without the profiler's own time, what it "
                        "frees moves the work after it too.")
REPLAYED_BELOW_TEXT = ("Replayed, the fix saves {saving:.2f} ms where its formula gives "
                       "{named:.2f} ms: in the step replayed without the profiler's own time, "
                       "other work (the host's, another stream's) keeps the step as long; with "
                       "the fixes listed before it, it can count for more.")
# A knob's own replayed speedup in a finding's evidence: this prefix and the knob's id
# (rules/whatif.py: a run --try-fixes knob whose change is not the finding's first fix, or whose
# edit is the module's where the finding's is the step's)
KNOB_SPEEDUP = "predicted_speedup_with_"
# a knob's price this far from the finding's own is printed under its fix (Finding.knob_note);
# closer, it repeats the finding's price
KNOB_NOTE_APART = 0.05
MAJOR_SHARE = 0.05  # the share of the step from which a saving is major (a rule may ask for more)


class Fix(msgspec.Struct, frozen=True):
    """One remedy, in the order to try them; ``code`` is a short snippet."""

    title: str
    code: str = ""


class Evidence(msgspec.Struct, frozen=True):
    """Named numbers plus the ops, kernels and source lines involved."""

    numbers: dict[str, Any] = msgspec.field(default_factory=dict)
    ops: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()


class Finding(msgspec.Struct, frozen=True):
    id: str
    title: str
    severity: str
    saving_ms: float  # per step, bounded by what the trace shows
    predicted_speedup: float  # step / (step - saving)
    summary: str
    evidence: Evidence
    fixes: tuple[Fix, ...]
    wrong_fix: str = ""  # the tempting fix that would not help, where there is one
    idle_ms: float = 0.0  # the part of saving_ms that is GPU idle behind the host (see calibrate)
    severity_floor: str = "info"  # the least severity, whatever the saving (re-pricing keeps it)
    major_share: float = MAJOR_SHARE  # the share of the step from which it is major (re-pricing keeps it)
    # `explain` (diagnosis from artifacts, not from a trace) ranks hypotheses, not savings:
    confidence: float | None = None  # 0..1, how strongly the evidence points here
    check_next: tuple[str, ...] = ()  # what to look at to confirm or rule it out
    subject: str = ""  # what it is about: a kernel, a rank, a GPU
    partial: bool = False  # drawn from incomplete data (missing sections or columns)

    def with_numbers(self, numbers: dict[str, Any]) -> Finding:
        """The finding with ``numbers`` as its evidence's numbers."""
        return msgspec.structs.replace(
            self, evidence=msgspec.structs.replace(self.evidence, numbers=numbers))

    def replayed_note(self) -> str | None:
        """The line the report prints under a finding whose replay priced its fix at
        REPLAYED_BEYOND times the formula's saving (the time its own evidence names) or more, or
        at that many times less, and REPLAYED_BEYOND_MS or more apart; None otherwise."""
        formula = self.evidence.numbers.get("saving_by_formula_ms")
        if self.evidence.numbers.get("priced_by") != "replay" or not isinstance(
                formula, (int, float)) or formula <= 0:
            return None
        if abs(self.saving_ms - formula) < REPLAYED_BEYOND_MS:
            return None
        if self.saving_ms >= REPLAYED_BEYOND * formula:
            return REPLAYED_BEYOND_TEXT.format(saving=self.saving_ms, named=float(formula))
        if self.saving_ms * REPLAYED_BEYOND <= formula:
            return REPLAYED_BELOW_TEXT.format(saving=self.saving_ms, named=float(formula))
        return None

    def knob_note(self) -> str | None:
        """``As a run --try-fixes knob, on its own: tf32 x1.96``: the knobs' own replayed prices
        the evidence carries (TF32 where the fix is bf16, the module in CUDA graphs where the fix
        graphs the whole step), those KNOB_NOTE_APART or more from the finding's own; None where
        there is none."""
        own = self.predicted_speedup
        knobs = sorted((k.removeprefix(KNOB_SPEEDUP), v) for k, v in self.evidence.numbers.items()
                       if k.startswith(KNOB_SPEEDUP) and isinstance(v, (int, float)) and v > 0
                       and (own <= 0 or abs(v / own - 1) >= KNOB_NOTE_APART))
        if not knobs:
            return None
        return "As a run --try-fixes knob, on its own: " + ", ".join(
            f"{k} x{v:.2f}" for k, v in knobs)

    def to_dict(self) -> dict[str, Any]:
        out = self._base_dict()
        if self.confidence is not None:
            out["confidence"] = round(self.confidence, 3)
            out["check_next"] = list(self.check_next)
            out["subject"] = self.subject
            out["partial"] = self.partial
        return out

    def _base_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "severity": self.severity,
            "saving_ms": round(self.saving_ms, 4),
            "predicted_speedup": round(self.predicted_speedup, 4),
            "summary": self.summary,
            "evidence": {
                "numbers": self.evidence.numbers,
                "ops": list(self.evidence.ops),
                "kernels": list(self.evidence.kernels),
                "sources": list(self.evidence.sources),
            },
            "fixes": [{"title": f.title, "code": f.code} for f in self.fixes],
            "wrong_fix": self.wrong_fix,
            "idle_ms": round(self.idle_ms, 4),
        }


def make_hypothesis(
    id: str,
    title: str,
    confidence: float,
    summary: str,
    numbers: dict[str, Any],
    fixes: tuple[Fix, ...],
    *,
    check_next: tuple[str, ...] = (),
    wrong_fix: str = "",
    subject: str = "",
    partial: bool = False,
    saving_ms: float = 0.0,
    step_ms: float = 0.0,
    kernels: tuple[str, ...] = (),
) -> Finding:
    """A Finding as `explain` states it: a hypothesis with a confidence, ranked by it.

    ``saving_ms``/``step_ms`` are the time at stake when the artifact says it (a kernel's duration
    and what its limiter costs); severity follows the confidence otherwise.
    """
    confidence = min(max(float(confidence), 0.0), 1.0)
    if step_ms > 0:
        saving = float(min(max(saving_ms, 0.0), step_ms))
        severity = severity_for(saving, step_ms)
    else:
        saving = 0.0
        severity = "critical" if confidence >= 0.8 else "major" if confidence >= 0.5 else "minor" if confidence >= 0.25 else "info"
    return Finding(
        id=id,
        title=title,
        severity=severity,
        saving_ms=saving,
        predicted_speedup=speedup(step_ms, saving),
        summary=summary,
        evidence=Evidence(numbers={k: _plain(v) for k, v in numbers.items()}, kernels=kernels),
        fixes=fixes,
        wrong_fix=wrong_fix,
        confidence=confidence,
        check_next=check_next,
        subject=subject,
        partial=partial,
    )


def severity_for(saving_ms: float, step_ms: float, floor: str = "info",
                 major_share: float = MAJOR_SHARE) -> str:
    """critical >= 25% of the step, major >= ``major_share`` (5%), minor >= 1%, info below; never
    below ``floor``."""
    share = saving_ms / step_ms if step_ms > 0 else 0.0
    by_share = "critical" if share >= 0.25 else "major" if share >= major_share else "minor" if share >= 0.01 else "info"
    return min(by_share, floor, key=SEVERITIES.index)


def speedup(step_ms: float, saving_ms: float) -> float:
    remaining = step_ms - saving_ms
    return step_ms / remaining if remaining > 0 and step_ms > 0 else 1.0


# An evidence number: the step the fix leaves, in ms, with no profiler time in it (kernel time and
# idle the fix keeps). Given the unprofiled step U, the saving is U minus it (rules/calibrate.py).
STEP_AFTER_FIX = "step_after_fix_ms"
# An evidence number: a lower bound of the step after the fix that the profiler does not inflate
# (a DataLoader's per-batch cost over its workers). No calibrated saving goes below it.
STEP_FLOOR_AFTER_FIX = "step_floor_after_fix_ms"
# An evidence number: a lower bound of the step after the fix as a share of the step as the program
# runs (the unprofiled step when it is known): DataLoader workers that are already too slow,
# doubled, at most halve the step they set (0.5). No calibrated saving goes below it.
STEP_FLOOR_SHARE_AFTER_FIX = "step_floor_share_after_fix"
# An evidence number: kernels per step that the fix takes away (a chain fused into one kernel,
# an attention pattern into its fused kernels). The host still issues the rest: the step it
# predicts is floored at the host's time for the kernels that remain (rules/calibrate.py).
KERNELS_REMOVED = "kernels_removed_per_step"
# An evidence number: the host's own work per step (ms, profiled) the fix takes away, when that is
# the saving (a host-bound step's reads and the checks computed for them): what it leaves shrinks
# like the step without the profiler (rules/calibrate.py, as "step-share").
HOST_WORK_REMOVED = "host_work_removed_ms_per_step"

# No fix is priced above 100x: the lab's per_sample_loop and small_gemm fixes measured 24-32x
# (benchmarks/BENCHMARKS-lab.md "The lab: predicted vs measured speedup on the GPU"), which a 95%
# cap (20x) could never predict.
MAX_SAVING_SHARE = 0.99
# A price replayed on the step's graph is bounded by the work the edited graph keeps, not by a
# guard (an autotuner run on every step gains hundreds of times once bucketed:
# benchmarks/BENCHMARKS-replay.md "Setup calls replayed"); 1000x is a ceiling against an empty step.
MAX_REPLAYED_SAVING_SHARE = 0.999
# The speedups those ceilings give: a price at one says "at least this much", not how much.
SPEEDUP_CEILINGS = (1 / (1 - MAX_SAVING_SHARE), 1 / (1 - MAX_REPLAYED_SAVING_SHARE))


def at_ceiling(predicted_speedup: float) -> bool:
    """Whether a speedup is one of the ceilings: the fix leaves less of the step than a price can
    say (a step that is nearly all one-off host work, a compile inside the window)."""
    return any(abs(predicted_speedup - c) <= 1e-6 * c for c in SPEEDUP_CEILINGS)


def speedup_text(predicted_speedup: float, sign: str = "x") -> str:
    """``x1.25``, or ``x1000 or more`` at a ceiling (``at_ceiling``)."""
    if at_ceiling(predicted_speedup):
        return f"{sign}{predicted_speedup:.0f} or more"
    return f"{sign}{predicted_speedup:.2f}"


def step_after_text(step_after_ms: float, predicted_speedup: float) -> str:
    """The step a fix leaves, ``0.250 ms``; at a ceiling ``under 13.336 ms`` (the ceiling's step,
    not a step the replay found)."""
    return f"{'under ' if at_ceiling(predicted_speedup) else ''}{step_after_ms:.3f} ms"


def make_finding(
    id: str,
    title: str,
    step_ms: float,
    saving_ms: float,
    summary: str,
    evidence: Evidence,
    fixes: tuple[Fix, ...],
    wrong_fix: str = "",
    idle_ms: float | None = None,
    min_severity: str = "info",
    major_share: float = MAJOR_SHARE,
) -> Finding:
    """A Finding with its saving clamped to [0, MAX_SAVING_SHARE of the step], severity and speedup
    derived.

    ``idle_ms``: how much of the saving is GPU idle behind the host (None: all of it is kernel
    time). Host-side savings are what the profiler's own overhead inflates.
    """
    saving = float(min(max(saving_ms, 0.0), MAX_SAVING_SHARE * step_ms)) if step_ms > 0 else 0.0
    evidence = Evidence(
        numbers={k: _plain(v) for k, v in evidence.numbers.items()},
        ops=evidence.ops,
        kernels=evidence.kernels,
        sources=evidence.sources,
    )
    return Finding(
        id=id,
        title=title,
        severity=severity_for(saving, step_ms, min_severity, major_share),
        saving_ms=saving,
        predicted_speedup=speedup(step_ms, saving),
        summary=summary,
        evidence=evidence,
        fixes=fixes,
        wrong_fix=wrong_fix,
        idle_ms=min(max(float(idle_ms or 0.0), 0.0), saving),
        severity_floor=min_severity,
        major_share=major_share,
    )


def _plain(value: Any) -> Any:
    """numpy scalars -> Python numbers, so evidence prints and serializes as plain values."""
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict, str)):
        return value.item()
    return value
