"""What a trial process tells its parent: ``trial.json``, written by tryfix/child.py through
``ChildTrial.to_dict`` and read back by tryfix/trial.py through ``read_child_trial``, the fields
named here once.

A child that could not apply its knobs writes the first five fields only; one whose program ran
writes the rest too (``ran``). Reading back, a field missing or of the wrong type is a
``TrialRecordError`` naming it (core/trial_record.py ``field_of``), which the parent reports as the
trial's failure, never as a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpudoctor.core.trial_record import (
    COUNT,
    COUNTS,
    FLAG,
    SAMPLES,
    TEXT,
    TEXTS,
    field_of,
    optional,
)
from gpudoctor.errors import TrialRecordError

# the keys written only once the program ran, in the file's order
_RUN_KEYS = ("stopped_by_gpudoctor", "step_source", "steps_seen", "samples_ms", "unsettled",
            "peak_memory_bytes")


@dataclass(frozen=True)
class ChildTrial:
    knobs: tuple[str, ...] = ()
    effects: tuple[str, ...] = ()  # what each knob changed (tryfix/knobs.py), one line each
    losses: tuple[float | None, ...] = ()  # the first losses (capture/numerics.py)
    exit_code: int | None = None  # None: the program never ran
    error: str = ""  # why it stopped early: a knob that raised, the program's error
    # False: a knob could not be applied and the program never ran; the fields below stay unset
    ran: bool = False
    stopped_by_gpudoctor: bool = False  # it ended where the trial's steps did, not by itself
    step_source: str | None = None  # what marked the steps (capture Source value)
    steps_seen: int = 0
    samples_ms: tuple[float | None, ...] = ()  # the timed steps' durations
    # each sample's step (the boundary that closed it: capture/marks.py interval_steps); empty
    # where the capture could not count them, or in a file written before it did
    sample_steps: tuple[int, ...] = ()
    unsettled: str = ""  # the capture's note when the steps had not settled, else ""
    peak_memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"knobs": list(self.knobs), "effects": list(self.effects),
                             "losses": list(self.losses), "exit_code": self.exit_code,
                             "error": self.error}
        if self.ran:
            d |= {"stopped_by_gpudoctor": self.stopped_by_gpudoctor,
                  "step_source": self.step_source, "steps_seen": self.steps_seen,
                  "samples_ms": list(self.samples_ms), "sample_steps": list(self.sample_steps),
                  "unsettled": self.unsettled,
                  "peak_memory_bytes": self.peak_memory_bytes}
        return d

    @classmethod
    def from_dict(cls, value: Any, where: str = "trial.json") -> ChildTrial:
        if not isinstance(value, dict):
            raise TrialRecordError(f"{where} holds {type(value).__name__}, not an object")
        common = {"knobs": tuple(field_of(value, "knobs", TEXTS, where)),
                  "effects": tuple(field_of(value, "effects", TEXTS, where)),
                  "losses": tuple(field_of(value, "losses", SAMPLES, where)),
                  "exit_code": field_of(value, "exit_code", optional(COUNT), where),
                  "error": field_of(value, "error", TEXT, where)}
        if not any(key in value for key in _RUN_KEYS):
            return cls(**common)
        return cls(**common, ran=True,
                   stopped_by_gpudoctor=field_of(value, "stopped_by_gpudoctor", FLAG, where),
                   step_source=field_of(value, "step_source", optional(TEXT), where),
                   steps_seen=field_of(value, "steps_seen", COUNT, where),
                   samples_ms=tuple(field_of(value, "samples_ms", SAMPLES, where)),
                   sample_steps=tuple(field_of(value, "sample_steps", COUNTS, where, ())),
                   unsettled=field_of(value, "unsettled", TEXT, where),
                   peak_memory_bytes=field_of(value, "peak_memory_bytes", optional(COUNT), where))


def read_child_trial(path: Path) -> tuple[ChildTrial | None, str]:
    """The trial.json at ``path``, or None and why: "" when there is none to read (the child died
    before writing it: its output says why), else what is wrong with the file."""
    try:
        data = path.read_bytes()
    except OSError:
        return None, ""
    try:
        return ChildTrial.from_dict(json.loads(data), path.name), ""
    except ValueError as exc:  # not JSON, or not text
        return None, f"{path.name} is not JSON: {exc}"
    except TrialRecordError as exc:
        return None, str(exc)
