"""A ``run --try-fixes`` trial's record, as typed, frozen data.

tryfix/trial.py makes one per trial process (``TrialRecord``, with its rounds under
``--trial-repeats``), tryfix/render.py draws them, tryfix/attach.py writes them into trials.json and
report.json through ``to_dict``, the one place a record becomes a dict, key for key in the order of
docs/report-schema.md "trials". ``from_dict`` reads one back (diff/history.py): a field missing or
of the wrong type is a ``TrialRecordError`` naming it. The record lives here, below both, because
the history (diff/) reads what the trials (tryfix/, above it) write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpudoctor.errors import TrialRecordError

Kind = tuple[Callable[[Any], bool], str]  # what a JSON value must be, and how to say so


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def optional(kind: Kind) -> Kind:
    return (lambda v: v is None or kind[0](v)), f"{kind[1]} or null"


def _list_of(kind: Kind, what: str) -> Kind:
    return (lambda v: isinstance(v, list) and all(kind[0](x) for x in v)), what


TEXT: Kind = (lambda v: isinstance(v, str)), "a string"
NUMBER: Kind = _is_number, "a number"
COUNT: Kind = (lambda v: isinstance(v, int) and not isinstance(v, bool)), "a whole number"
FLAG: Kind = (lambda v: isinstance(v, bool)), "true or false"
OBJECT: Kind = (lambda v: isinstance(v, dict)), "an object"
INTERVAL: Kind = (lambda v: isinstance(v, list) and len(v) == 2
                  and all(x is None or _is_number(x) for x in v)), "a list of two numbers"
TEXTS: Kind = _list_of(TEXT, "a list of strings")
SAMPLES: Kind = _list_of(optional(NUMBER), "a list of numbers (or nulls)")
COUNTS: Kind = _list_of(COUNT, "a list of whole numbers")
LIST: Kind = (lambda v: isinstance(v, list)), "a list"
_REQUIRED: Any = object()


def field_of(d: dict[str, Any], key: str, kind: Kind, where: str, default: Any = _REQUIRED) -> Any:
    """``d[key]`` when it is of ``kind``; ``default`` when it is absent and has one. Else a
    TrialRecordError that names the field, its value and what it must be."""
    if key not in d:
        if default is _REQUIRED:
            raise TrialRecordError(f"{where}: no {key!r} ({kind[1]}); {_FIX}")
        return default
    value = d[key]
    if not kind[0](value):
        raise TrialRecordError(f"{where}: {key!r} is {_shown(value)}, not {kind[1]}; {_FIX}")
    return value


_FIX = "the record was cut short or edited: run gpudoctor run --try-fixes again to write it anew"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TrialRecordError(f"{where} is {_shown(value)}, not an object; {_FIX}")
    return value


def _sides(d: dict[str, Any], where: str) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The ``baseline`` and ``trial`` lists of samples of an object, as tuples."""
    baseline, trial = (field_of(d, key, SAMPLES, where) for key in ("baseline", "trial"))
    return tuple(baseline), tuple(trial)


def _tuple(value: list[Any] | None) -> tuple[Any, ...] | None:
    return None if value is None else tuple(value)


def _list(value: tuple[Any, ...] | None) -> list[Any] | None:
    return None if value is None else list(value)


@dataclass(frozen=True)
class PeakMemory:
    """The peak GPU memory allocated (bytes) by the reference and by the trial; None: unknown."""

    baseline: int | None
    trial: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "trial": self.trial}

    @classmethod
    def from_dict(cls, value: Any, where: str) -> PeakMemory:
        d = _object(value, where)
        bytes_ = optional(COUNT)
        return cls(field_of(d, "baseline", bytes_, where), field_of(d, "trial", bytes_, where))


@dataclass(frozen=True)
class Outliers:
    """The step samples (ms) left out as outliers on each side (diff/samples.py)."""

    baseline: tuple[float | None, ...]
    trial: tuple[float | None, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": list(self.baseline), "trial": list(self.trial)}

    @classmethod
    def from_dict(cls, value: Any, where: str) -> Outliers:
        d = _object(value, where)
        return cls(*_sides(d, where))


@dataclass(frozen=True)
class TrialNumerics:
    """The first losses of the reference and of the trial, side by side (tryfix/trial.py
    ``numerics``): ``diverged`` when one is further than ``tolerance_rel`` from the reference's."""

    baseline: tuple[float | None, ...]  # None: a loss that was not finite
    trial: tuple[float | None, ...]
    tolerance_rel: float
    checked: bool  # the knob changes precision or kernels, so the losses were compared
    max_rel_diff: float | None
    diverged: bool | None  # None: not checked, or nothing to compare
    reason: str | None = None  # why they may differ beyond precision (compiled dropout)

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": list(self.baseline), "trial": list(self.trial),
                "tolerance_rel": self.tolerance_rel, "checked": self.checked,
                "max_rel_diff": self.max_rel_diff, "diverged": self.diverged, "reason": self.reason}

    @classmethod
    def from_dict(cls, value: Any, where: str) -> TrialNumerics:
        d = _object(value, where)
        return cls(*_sides(d, where), field_of(d, "tolerance_rel", NUMBER, where),
                   field_of(d, "checked", FLAG, where),
                   field_of(d, "max_rel_diff", optional(NUMBER), where),
                   field_of(d, "diverged", optional(FLAG), where),
                   field_of(d, "reason", optional(TEXT), where, None))


@dataclass(frozen=True)
class TrialRound:
    """One process of a repeated trial (``--trial-repeats``): where it ran, how it ended, its
    mean step."""

    dir: str
    status: str
    reason: str
    wall_s: float
    n_trial: int  # the steps it timed
    mean_ms: float | None  # None: it did not run to its steps

    def to_dict(self) -> dict[str, Any]:
        return {"dir": self.dir, "status": self.status, "reason": self.reason,
                "wall_s": self.wall_s, "n_trial": self.n_trial, "mean_ms": self.mean_ms}

    @classmethod
    def from_dict(cls, value: Any, where: str) -> TrialRound:
        d = _object(value, where)
        return cls(field_of(d, "dir", TEXT, where), field_of(d, "status", TEXT, where),
                   field_of(d, "reason", TEXT, where), field_of(d, "wall_s", NUMBER, where),
                   field_of(d, "n_trial", COUNT, where),
                   field_of(d, "mean_ms", optional(NUMBER), where))


# A trial's host pace (``TrialRecord.host_pace``) this far from the capture's, either way, is named
# beside its verdict: beyond the spread of most programs' controls
# (benchmarks/BENCHMARKS-try-fixes.md "The host's pace, trial by trial")
HOST_PACE_NOTED_SHARE = 0.15


@dataclass(frozen=True)
class TrialRecord:
    """One trial: the knobs it applied, its prediction, how it ended, what it measured against its
    reference, and its verdict (tryfix/trial.py's module docstring says how each is reached)."""

    knob: str  # the trial's name: a knob id, "control", "control-end" or "combined"
    knobs: tuple[str, ...]  # the knobs applied (none for a control)
    reference: str | None  # what it was measured against; None in records older than the field
    title: str
    finding: str | None  # the finding (or findings, "a + b") the knob was tried for
    predicted_speedup: float | None
    predicted_saving_ms: float | None
    predicted_by: str | None  # "replay", "formula", ...; None: no prediction
    status: str  # "ok", "crashed", "timed out", "out of memory", "not applied", "too few samples"
    reason: str  # "" when there is nothing to add to the status or verdict
    verdict: str | None
    measured_speedup: float | None
    speedup_ci95: tuple[float | None, float | None] | None
    baseline_ms: float | None  # the reference's mean step
    trial_ms: float | None
    change_pct: float | None
    change_ci95_pct: tuple[float | None, float | None] | None
    n_baseline: int
    n_trial: int
    method: str | None  # how the two sides were compared (diff/samples.py)
    peak_memory_bytes: PeakMemory
    numerics: TrialNumerics
    effects: tuple[str, ...]  # what the knob changed, a line each
    exit_code: int | None
    wall_s: float
    cwd: str
    dir: str  # the trial's directory in the run directory
    files_written: tuple[str, ...] | None  # in its sandbox; None: no --sandbox
    # written only once they are there: what measured it, its noise floor, its processes
    outliers_ms: Outliers | None = None
    floor_pct: float | None = None
    rounds: tuple[TrialRound, ...] | None = None
    # the trial's median eager launch call over the capture's (tryfix/host_pace.py): its host's
    # pace; None where a trace did not tell it
    host_pace: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "knob": self.knob, "knobs": list(self.knobs), "reference": self.reference,
            "title": self.title, "finding": self.finding,
            "predicted_speedup": self.predicted_speedup,
            "predicted_saving_ms": self.predicted_saving_ms, "predicted_by": self.predicted_by,
            "status": self.status, "reason": self.reason, "verdict": self.verdict,
            "measured_speedup": self.measured_speedup, "speedup_ci95": _list(self.speedup_ci95),
            "baseline_ms": self.baseline_ms, "trial_ms": self.trial_ms,
            "change_pct": self.change_pct, "change_ci95_pct": _list(self.change_ci95_pct),
            "n_baseline": self.n_baseline, "n_trial": self.n_trial, "method": self.method,
            "peak_memory_bytes": self.peak_memory_bytes.to_dict(),
            "numerics": self.numerics.to_dict(), "effects": list(self.effects),
            "exit_code": self.exit_code, "wall_s": self.wall_s, "cwd": self.cwd, "dir": self.dir,
            "files_written": _list(self.files_written),
        }
        if self.outliers_ms is not None:
            d["outliers_ms"] = self.outliers_ms.to_dict()
        if self.floor_pct is not None:
            d["floor_pct"] = self.floor_pct
        if self.rounds is not None:
            d["rounds"] = [r.to_dict() for r in self.rounds]
        if self.host_pace is not None:
            d["host_pace"] = self.host_pace
        return d

    @classmethod
    def from_dict(cls, value: Any, where: str = "trial") -> TrialRecord:
        """A record as ``to_dict`` wrote it. The fields later versions added (reference,
        predicted_by, files_written, outliers_ms, floor_pct, rounds, host_pace) may be absent."""
        d = _object(value, where)

        def get(key: str, kind: Kind, *default: Any) -> Any:
            return field_of(d, key, kind, where, *default)

        def nested(key: str, parse: Callable[[Any, str], Any]) -> Any:
            return None if d.get(key) is None else parse(d[key], f"{where}.{key}")

        text, number = optional(TEXT), optional(NUMBER)
        rounds = get("rounds", optional(LIST), None)
        return cls(
            get("knob", TEXT), tuple(get("knobs", TEXTS)), get("reference", text, None),
            get("title", TEXT), get("finding", text), get("predicted_speedup", number),
            get("predicted_saving_ms", number), get("predicted_by", text, None),
            get("status", TEXT), get("reason", TEXT), get("verdict", text),
            get("measured_speedup", number), _tuple(get("speedup_ci95", optional(INTERVAL))),
            get("baseline_ms", number), get("trial_ms", number), get("change_pct", number),
            _tuple(get("change_ci95_pct", optional(INTERVAL))),
            get("n_baseline", COUNT), get("n_trial", COUNT), get("method", text),
            PeakMemory.from_dict(get("peak_memory_bytes", OBJECT), f"{where}.peak_memory_bytes"),
            TrialNumerics.from_dict(get("numerics", OBJECT), f"{where}.numerics"),
            tuple(get("effects", TEXTS)), get("exit_code", optional(COUNT)), get("wall_s", NUMBER),
            get("cwd", TEXT), get("dir", TEXT),
            _tuple(get("files_written", optional(TEXTS), None)),
            outliers_ms=nested("outliers_ms", Outliers.from_dict),
            floor_pct=get("floor_pct", optional(NUMBER), None),
            rounds=None if rounds is None else tuple(TrialRound.from_dict(r, f"{where}.rounds[{i}]")
                                                      for i, r in enumerate(rounds)),
            host_pace=get("host_pace", optional(NUMBER), None),
        )


@dataclass(frozen=True)
class NotTried:
    """A finding no trial was run for, and why (a code change, or too little at stake)."""

    finding: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"finding": self.finding, "reason": self.reason}

    @classmethod
    def from_dict(cls, value: Any, where: str = "not tried") -> NotTried:
        d = _object(value, where)
        return cls(field_of(d, "finding", TEXT, where), field_of(d, "reason", TEXT, where))


def trial_records(value: Any, where: str = "trials") -> tuple[TrialRecord, ...]:
    """A list of records read back (trials.json or report.json ``trials``), each checked."""
    if not isinstance(value, list):
        raise TrialRecordError(f"{where} is {_shown(value)}, not a list of trial records; {_FIX}")
    return tuple(TrialRecord.from_dict(v, f"{where}[{i}]") for i, v in enumerate(value))
