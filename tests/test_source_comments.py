"""Source comments say why; measurements, run logs and history live elsewhere.

A measured constant carries one line of why and a pointer to the benchmarks/BENCHMARKS-<area>.md section
or the test that holds the measurement; the device, date and run belong there, and history in CHANGELOG.md.
This test fails, naming file:line, on what belongs elsewhere: a calendar date or a UTC time of day,
a reference to an undefined "seed" document, and an issue or pull-request number.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "gpudoctor"

_DEVICES = r"(?:\d+ ?x ?)?(?:H100|H200|A100|A10G?|L4|L40S?|V100|T4|B200|MI300X?|CPU)"
PATTERNS: dict[str, re.Pattern[str]] = {
    # a run story: "(H100, 2026-11-26)", "(2x H200, 2026-11-26 03:31 UTC: ...)"
    "dated run": re.compile(rf"\({_DEVICES}\b[^()]*?\b20\d\d-\d\d-\d\d"),
    "date": re.compile(r"(?<!\d)(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])(?!\d)"),
    "time of day": re.compile(r"\b[0-2]\d:[0-5]\d(?:-[0-2]\d:[0-5]\d)? ?UTC\b"),
    # "seed 002", "the seed casebook", "in the seed's terms": the design notes, not a random seed
    "seed reference": re.compile(
        r"\bseeds? #?\d{3}\b|\bseed (?:casebook|scenario)|\bseed's (?:rule|terms|casebook)",
        re.IGNORECASE,
    ),
    # "issue 16", "(issues 16 and 20)", "issue #16", "PR #12"; not the verb ("issues 10 operators")
    "issue reference": re.compile(
        r"\bissues? #\d+|\bissues? \d+(?:(?:, | and )\d+)*(?=\s*[),.;:]|\s*$)|\b(?:PR|pull request) #?\d+",
        re.IGNORECASE,
    ),
}

# A results file's name is the evidence's address, not a measurement: its date may stay.
_RESULTS_FILE = re.compile(r"[\w./*{},-]+\.json\b")

# (path under src/gpudoctor, text on the line): a literal the code itself needs, with the reason.
ALLOWED: dict[tuple[str, str], str] = {
    (
        "capture/quiet.py",
        "USDT:2026-11-25 16:42:19",
    ): "a verbatim sample of the Kineto log line the filter drops; its timestamp is part of the format",
    (
        "kernels/prescribe.py",
        '"date": "2026-11-22/24"',
    ): "data, not a comment: the prescription tells the user which device and day its figures come from",
}


def _findings() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if any(rel == where and text in line for where, text in ALLOWED):
                continue
            bare = _RESULTS_FILE.sub("<results file>", line)
            for kind, pattern in PATTERNS.items():
                match = pattern.search(bare)
                if match:
                    found.setdefault(rel, []).append(
                        f"src/gpudoctor/{rel}:{number}: {kind}: {match.group(0)!r}"
                    )
                    break
    return found


def test_no_dates_runs_seeds_or_issue_numbers_in_source() -> None:
    found = _findings()
    offending = [line for lines in found.values() for line in lines]
    assert not offending, (
        "move measurements to benchmarks/BENCHMARKS-<area>.md and history to CHANGELOG.md; keep one line of why and a "
        "pointer in the source:\n" + "\n".join(offending)
    )


def test_allowed_literals_are_still_there() -> None:
    for (rel, text), reason in ALLOWED.items():
        assert text in (SRC / rel).read_text(encoding="utf-8"), (
            f"{rel}: {text!r} is gone ({reason}): drop it"
        )


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("# unet_ema (H100, 2026-11-26): diagnosed at 18.96 ms", "dated run"),
        ("# measured 2026-11-22 on the H200", "date"),
        ("# (2026-11-26, 07:05-07:21 UTC)", "date"),
        ("# four runs, 05:08-05:41 UTC", "time of day"),
        ("# the VRAM wall (seed 002)", "seed reference"),
        ('"""Seed 004, scenario 2: ..."""', "seed reference"),
        ("# follows the seed casebook", "seed reference"),
        ("# in the seed's terms", "seed reference"),
        ("# the seed's rule decides", "seed reference"),
        ("# the trace itself: issue 16)", "issue reference"),
        ("# (issues 16 and 20)", "issue reference"),
        ("# see issue #41", "issue reference"),
        ("# bench-h100-2026-11-22 on the card", "date"),
    ],
)
def test_patterns_catch(line: str, kind: str) -> None:
    assert any(p.search(line) for k, p in PATTERNS.items() if k == kind), line


@pytest.mark.parametrize(
    "line",
    [
        "# the fixed twin issues 10 operators a step",
        "# issues 1024 GEMMs of 16 x 256 x 256",
        "torch.manual_seed(123)",
        "seed = 1234  # any seed",
        "# each rank's seed is its rank",
        'stamp = time.strftime("%Y-%m-%d %H:%M")',
        "x = 2026 - 11 - 26",
        "# 11:45 into the run",
        "# (benchmarks/results/bench-h100-2026-11-22.json, ceilings.memory_bytes)",
    ],
)
def test_patterns_pass_legitimate_code(line: str) -> None:
    bare = _RESULTS_FILE.sub("<results file>", line)
    assert not any(p.search(bare) for p in PATTERNS.values()), line
