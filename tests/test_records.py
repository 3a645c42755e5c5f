"""core/records.py: the analysis's and the report's records as msgspec Structs, and ``as_dict``."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from gpudoctor.core.finding import Evidence, Finding, Fix
from gpudoctor.core.records import as_dict

ROOT = Path(__file__).resolve().parents[1]


class Pair(NamedTuple):
    left: Any
    right: Any


class Inner(msgspec.Struct, frozen=True):
    a: int
    b: tuple[float, ...] = ()


class Outer(msgspec.Struct, frozen=True):
    name: str
    inner: Inner
    many: list[Inner] = []
    by_key: dict[int, Inner] = {}


@dataclasses.dataclass(frozen=True)
class InnerDc:
    a: int
    b: tuple[float, ...] = ()


@dataclasses.dataclass(frozen=True)
class OuterDc:
    name: str
    inner: InnerDc
    many: list[InnerDc] = dataclasses.field(default_factory=list)
    by_key: dict[int, InnerDc] = dataclasses.field(default_factory=dict)


def test_as_dict_is_dataclasses_asdict_for_structs() -> None:
    ours = Outer("x", Inner(1, (2.0, 3.0)), [Inner(4)], {5: Inner(6, (7.0,))})
    theirs = OuterDc("x", InnerDc(1, (2.0, 3.0)), [InnerDc(4)], {5: InnerDc(6, (7.0,))})
    assert as_dict(ours) == dataclasses.asdict(theirs)
    assert list(as_dict(ours)) == ["name", "inner", "many", "by_key"]  # the fields' order
    assert as_dict(ours)["inner"]["b"] == (2.0, 3.0)  # a tuple stays a tuple


def test_as_dict_keeps_namedtuples_and_reads_dataclasses_inside() -> None:
    class Holder(msgspec.Struct):
        pair: Pair
        legacy: InnerDc

    out = as_dict(Holder(Pair(Inner(1), 2), InnerDc(3, (4.0,))))
    assert out == {"pair": Pair({"a": 1, "b": ()}, 2), "legacy": {"a": 3, "b": (4.0,)}}
    assert type(out["pair"]) is Pair


def test_a_finding_is_a_frozen_record_that_replace_changes() -> None:
    finding = Finding(
        id="host-sync",
        title="t",
        severity="warning",
        saving_ms=1.5,
        predicted_speedup=1.1,
        summary="s",
        evidence=Evidence(numbers={"n": 1}),
        fixes=(Fix("do this", "code"),),
    )
    changed = msgspec.structs.replace(finding, saving_ms=2.5)
    assert (changed.saving_ms, finding.saving_ms) == (2.5, 1.5)
    assert changed.evidence is finding.evidence
    try:
        finding.saving_ms = 3.0  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("a Finding must be frozen")


def test_importing_what_analyze_needs_makes_no_dataclass() -> None:
    """Why the records are Structs: sixty dataclasses were a third of ``gpudoctor analyze``'s
    imports (benchmarks/BENCHMARKS-loading.md, "Records made in C"). A dataclass added on that path
    fails here: make it a ``msgspec.Struct`` (ARCHITECTURE.md, **Records**)."""
    code = (
        "import dataclasses\n"
        "made = []\n"
        "process = dataclasses._process_class\n"
        "def record(cls, *args, **kwargs):\n"
        "    made.append(f'{cls.__module__}.{cls.__qualname__}')\n"
        "    return process(cls, *args, **kwargs)\n"
        "dataclasses._process_class = record\n"
        "import gpudoctor.pipeline, gpudoctor.report.json_report\n"
        "print(sorted(m for m in made if m.startswith('gpudoctor.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_a_speedup_at_a_ceiling_reads_as_at_least() -> None:
    """The caps on a saving (99% by formula, 99.9% by replay) give x100 and x1000: prices that
    say "at least", whose step after the fix is the cap's, not one the replay found."""
    from gpudoctor.core.finding import at_ceiling, speedup, speedup_text, step_after_text

    assert speedup_text(speedup(100.0, 99.9)) == "x1000 or more"
    assert speedup_text(speedup(100.0, 99.0)) == "x100 or more"
    assert speedup_text(speedup(100.0, 50.0)) == "x2.00"
    assert speedup_text(999.0, "×") == "×999.00"  # noqa: RUF001 - the multiplication sign
    assert not at_ceiling(101.0) and not at_ceiling(1.0)
    assert step_after_text(13.336316, 1000.0) == "under 13.336 ms"
    assert step_after_text(2.5, 4.0) == "2.500 ms"
