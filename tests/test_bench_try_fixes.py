"""benchmarks/bench_try_fixes.py's by-hand cases: what it runs for each program and knob."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from script_module import load

ROOT = Path(__file__).resolve().parents[1]
BY_HAND = ROOT / "tests" / "programs" / "byhand"


def test_each_knob_of_each_by_hand_program_is_a_case_with_its_hand_made_flags() -> None:
    bench = load("bench_try_fixes")
    cases = bench.by_hand_cases()
    manifest = json.loads((BY_HAND / "manifest.json").read_text())["programs"]
    expected = {f"{e['name']}:{h['knob']}": h["args"] for e in manifest for h in e["hand"]}
    assert set(cases) == set(expected)
    for name, (entry, knob, skip, differs, args) in cases.items():
        assert name == f"{entry['name']}:{knob}" and args == expected[name] and differs and skip > 0
        # the program is found in the by-hand folder, not the twins'
        assert bench.target_of(entry) == [str(BY_HAND / entry["file"])]


def test_geometric_mean_of_the_runs_that_printed_a_time() -> None:
    bench = load("bench_try_fixes")
    assert bench.geometric_mean([4.0, 9.0, None]) == pytest.approx(6.0)
    assert bench.geometric_mean([None, None]) is None
